// SPDX-License-Identifier: Apache-2.0
// Errors as values: a Status with absl's canonical codes (so the mapping to
// grpc::StatusCode is one to one) and a StatusOr<T>.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace gradsync {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

const char* statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string toString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status okStatus() { return Status(); }
inline Status invalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status failedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status notFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status alreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status internalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status deadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status outOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }
inline Status permissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status resourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status dataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.isOk());
  }
  bool isOk() const { return status_.isOk(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace gradsync

#define GS_STATUS_CONCAT_INNER(a, b) a##b
#define GS_STATUS_CONCAT(a, b) GS_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not OK.
#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::gradsync::Status gs_status_ = (expr);    \
    if (!gs_status_.isOk()) return gs_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, f())`: x = f().value(), or return its Status.
#define ASSIGN_OR_RETURN(lhs, expr) GS_ASSIGN_OR_RETURN_IMPL(GS_STATUS_CONCAT(gs_statusor_, __LINE__), lhs, expr)
#define GS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.isOk()) return tmp.status();          \
  lhs = std::move(tmp).value()
