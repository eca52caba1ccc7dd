// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/ucx/ucx_transport.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <utility>
#include <vector>

#include "daemon/common/environment.h"
#include "daemon/common/logging.h"

namespace gradsync::transport {
namespace {

constexpr auto kCloseTimeout = std::chrono::seconds(1);
// The longest wait for a cancelled transfer to let go of its buffer.
constexpr auto kCancelTimeout = std::chrono::seconds(2);

// Drives `worker` until `request` (not null, not an error) completes or
// `timeout` passes; true when it completed. The caller frees it.
bool progressUntilDone(ucp_worker_h worker, void* request, Clock::duration timeout) {
  const auto until = Clock::now() + timeout;
  while (ucp_request_check_status(request) == UCS_INPROGRESS) {
    if (Clock::now() >= until) return false;
    ucp_worker_progress(worker);
  }
  return true;
}

// Receives a probed (removed) message into `sink` (a larger one is
// truncated, and consumed all the same), at most 100 ms.
void discard(ucp_worker_h worker, ucp_tag_message_h message, std::vector<uint8_t>* sink) {
  if (sink->empty()) sink->resize(64 << 10);
  ucp_request_param_t param{};
  ucs_status_ptr_t request = ucp_tag_msg_recv_nbx(worker, sink->data(), sink->size(), message, &param);
  if (request != nullptr && !UCS_PTR_IS_ERR(request)) {
    if (!progressUntilDone(worker, request, std::chrono::milliseconds(100))) ucp_request_cancel(worker, request);
    ucp_request_free(request);
  }
}

// How long a waiting thread keeps polling after its worker goes quiet,
// yielding the CPU, before it sleeps on the event fd: the peer's next
// message usually comes within it, and a sleeper pays its wake-up on top
// (about 10 us on this VM). 2 daemons x 1 rank over loopback TCP, 256 KiB
// allreduce: 282-307 us sleeping at once, 215-247 us with the spin.
constexpr auto kQuietSpin = std::chrono::microseconds(50);

class QuietSpin {
 public:
  // After a progress call that made none: true while the spin lasts (the
  // CPU was yielded), false once it is time to sleep.
  bool spin() {
    const auto now = Clock::now();
    if (!quiet_) {
      quiet_ = true;
      quiet_since_ = now;
    }
    if (now - quiet_since_ >= kQuietSpin) return false;
    sched_yield();
    return true;
  }
  // Progress (or an event after a sleep): the next quiet spell spins again.
  void progressed() { quiet_ = false; }

 private:
  bool quiet_ = false;
  Clock::time_point quiet_since_;
};

Status ucxError(const std::string& what, ucs_status_t status) {
  return unavailable(what + ": " + ucs_status_string(status));
}

// A peer's connection state, written by the endpoint's error handler and
// read by waits on its requests; lives as long as its UcxPeer.
struct EndpointState {
  std::string name;  // who the peer is, for messages
  std::atomic<bool> failed{false};
  std::string reason;  // written once, before `failed`
};

// UCX calls this (from ucp_worker_progress) when the connection to a peer
// fails: the peer's daemon died, was cut off, or closed the job. Receives are
// posted on the worker, not the endpoint, so waits on this peer's requests
// learn of it here. Waits on other peers go on: a neighbour that finished
// its part and left breaks nothing still needed.
void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* state = static_cast<EndpointState*>(arg);
  if (state->failed.load()) return;
  state->reason = "lost the data-plane connection to " + state->name + ": " + ucs_status_string(status);
  // Debug only: a peer that closes the job's endpoints at its end looks the
  // same here; a wait that needed the peer reports the reason as its error.
  GS_LOG(executor, debug, "{}", state->reason);
  state->failed.store(true);
}

// A UCX request, or an operation that completed at once (request == null).
class UcxRequest final : public Request {
 public:
  UcxRequest(ucp_worker_h worker, std::string what, std::atomic<uint64_t>* failures, const EndpointState* peer)
      : worker_(worker), what_(std::move(what)), failures_(failures), peer_(peer) {}
  // The operation as posted (null: it completed at once). A receive of
  // `expected` bytes (-1: a send) checks the length that arrived.
  void posted(ucs_status_ptr_t request, int64_t expected = -1) {
    expected_ = expected;
    if (request == nullptr) {
      done_ = true;
      if (expected_ >= 0) checkLength(received_.length);
    } else if (UCS_PTR_IS_ERR(request)) {
      done_ = true;
      fail(UCS_PTR_STATUS(request));
    } else {
      request_ = request;
    }
  }
  // Where UCX writes what a receive that completes at once received.
  ucp_tag_recv_info_t* receivedInfo() { return &received_; }
  ~UcxRequest() override {
    if (request_ != nullptr) {
      if (!done_) {
        // A receive that matched already is not stopped by the cancel: its
        // remaining fragments would land in a buffer the caller reuses
        // once this returns (a collective of the next epoch, say). Wait
        // until UCX lets go of it.
        ucp_request_cancel(worker_, request_);
        if (!progressUntilDone(worker_, request_, kCancelTimeout)) {
          GS_LOG(executor, err, "a cancelled {} did not complete in {} s: its buffer may still be written", what_,
                 std::chrono::duration_cast<std::chrono::seconds>(kCancelTimeout).count());
        }
      }
      ucp_request_free(request_);
    }
  }
  bool test() override {
    if (done_) return true;
    if (expected_ >= 0) {
      ucp_tag_recv_info_t info{};
      const ucs_status_t s = ucp_tag_recv_request_test(request_, &info);
      if (s == UCS_INPROGRESS) return false;
      done_ = true;
      if (s != UCS_OK) {
        fail(s);
      } else {
        checkLength(info.length);
      }
      return true;
    }
    const ucs_status_t s = ucp_request_check_status(request_);
    if (s == UCS_INPROGRESS) return false;
    done_ = true;
    if (s != UCS_OK) fail(s);
    return true;
  }
  Status status() const override { return status_; }
  // What it is ("receive from node 10.0.0.2:7070").
  const std::string& what() const { return what_; }
  // The peer's connection failed: why (null while it is healthy).
  const std::string* peerFailure() const { return peer_->failed.load() ? &peer_->reason : nullptr; }

 private:
  void fail(ucs_status_t s) {
    failures_->fetch_add(1);
    if (s == UCS_ERR_MESSAGE_TRUNCATED && expected_ >= 0) {
      // The transfer's identity matched but the sender sent more: the two
      // daemons disagree on the collective. Never reported as done.
      status_ = internalError(what_ + ": a message longer than the " + std::to_string(expected_) +
                              " bytes expected (the daemons disagree on the collective's size)");
      return;
    }
    status_ = ucxError(what_, s);
  }
  void checkLength(size_t length) {
    if (static_cast<int64_t>(length) == expected_) return;
    failures_->fetch_add(1);
    status_ = internalError(what_ + ": received " + std::to_string(length) + " bytes, expected " +
                            std::to_string(expected_) + " (the daemons disagree on the collective's size)");
  }

  ucp_worker_h worker_;
  void* request_ = nullptr;
  std::string what_;
  std::atomic<uint64_t>* failures_;
  const EndpointState* peer_;
  int64_t expected_ = -1;  // a receive's length; -1: a send
  ucp_tag_recv_info_t received_{};
  bool done_ = false;
  Status status_;
};

class UcxPeer final : public Peer {
 public:
  UcxPeer(ucp_worker_h worker, ucp_ep_h endpoint, std::unique_ptr<EndpointState> state)
      : worker_(worker), endpoint_(endpoint), state_(std::move(state)) {}
  ~UcxPeer() override {
    // Forced: completes locally. The owner flushes the worker first
    // (UcxTransport::flush), so what was sent is not dropped.
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request = ucp_ep_close_nbx(endpoint_, &param);
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) {
      progressUntilDone(worker_, request, kCloseTimeout);
      ucp_request_free(request);
    }
  }
  RequestPtr isend(const void* data, size_t bytes, uint64_t tag) override {
    ucp_request_param_t param{};
    sent_.fetch_add(bytes);
    auto request = std::make_unique<UcxRequest>(worker_, "send to " + state_->name, &failures_, state_.get());
    request->posted(ucp_tag_send_nbx(endpoint_, data, bytes, tag, &param));
    return request;
  }
  RequestPtr irecv(void* data, size_t bytes, uint64_t tag) override {
    // Tags are keyed hashes, unique per collective, step, chunk and sender
    // (see ring_allreduce.cc): a full mask matches the one message meant
    // for it, and one of another length is an error, never done.
    received_.fetch_add(bytes);
    auto request = std::make_unique<UcxRequest>(worker_, "receive from " + state_->name, &failures_, state_.get());
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.recv_info.tag_info = request->receivedInfo();
    request->posted(ucp_tag_recv_nbx(worker_, data, bytes, tag, ~uint64_t{0}, &param), static_cast<int64_t>(bytes));
    return request;
  }
  const std::string& name() const override { return state_->name; }
  PeerStats stats() const override { return {sent_.load(), received_.load(), failures_.load()}; }

 private:
  ucp_worker_h worker_;
  ucp_ep_h endpoint_;
  std::unique_ptr<EndpointState> state_;  // the endpoint's error handler argument
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> failures_{0};
};

// Overrides UCX's configuration with what `options` sets.
Status applyOptions(ucp_config_t* config, const UcxOptions& options) {
  std::vector<std::pair<std::string, std::string>> settings;
  if (!options.net_devices.empty()) settings.emplace_back("NET_DEVICES", options.net_devices);
  if (options.tcp_segment_bytes > 0 && !environment::ucxSetsTcpSegments()) {
    // Transport settings go in without their table's prefix ("TCP_"): UCX
    // applies them to every transport with such a field, and only tcp has
    // these two (ucx_info -c -f).
    settings.emplace_back("TX_SEG_SIZE", std::to_string(options.tcp_segment_bytes));
    settings.emplace_back("RX_SEG_SIZE", std::to_string(options.tcp_segment_bytes));
  }
  for (const auto& [name, value] : settings) {
    ucs_status_t s = ucp_config_modify(config, name.c_str(), value.c_str());
    if (s != UCS_OK) return ucxError("UCX_" + name + "=" + value, s);
  }
  return okStatus();
}

}  // namespace

StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::create(const UcxOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return ucxError("ucp_config_read", s);
  if (Status applied = applyOptions(config, options); !applied.isOk()) {
    ucp_config_release(config);
    return applied;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) return ucxError("ucp_init", s);
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  s = ucp_worker_create(context, &worker_params, &worker);
  if (s != UCS_OK) {
    ucp_cleanup(context);
    return ucxError("ucp_worker_create", s);
  }
  ucp_address_t* address = nullptr;
  size_t length = 0;
  s = ucp_worker_get_address(worker, &address, &length);
  if (s != UCS_OK) {
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    return ucxError("ucp_worker_get_address", s);
  }
  std::string bytes(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker, address);
  auto transport = std::unique_ptr<UcxTransport>(new UcxTransport(context, worker, std::move(bytes)));
  int efd = -1;
  if (ucp_worker_get_efd(worker, &efd) == UCS_OK) transport->efd_ = efd;
  return transport;
}

UcxTransport::~UcxTransport() {
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
}

StatusOr<PeerPtr> UcxTransport::connect(const std::string& address, const std::string& name) {
  if (address.empty()) return invalidArgument("empty UCX address for " + name);
  ucp_ep_params_t params{};
  auto state = std::make_unique<EndpointState>();
  state->name = name;
  params.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = onEndpointError;
  params.err_handler.arg = state.get();
  ucp_ep_h endpoint = nullptr;
  const ucs_status_t s = ucp_ep_create(worker_, &params, &endpoint);
  if (s != UCS_OK) return ucxError("connecting to " + name, s);
  return PeerPtr(new UcxPeer(worker_, endpoint, std::move(state)));
}

void UcxTransport::flush(Clock::duration timeout) {
  ucp_request_param_t param{};
  ucs_status_ptr_t request = ucp_worker_flush_nbx(worker_, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  progressUntilDone(worker_, request, timeout);
  ucp_request_free(request);
}

size_t UcxTransport::dropStrays() {
  // A fixed sink: a larger message is truncated, and consumed all the same.
  std::vector<uint8_t> sink(64 << 10);
  size_t dropped = 0;
  // One deadline for the whole drain: a flood of strays must not hold the
  // job's teardown (each receive is bounded too).
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  for (int rounds = 0; rounds < 100000 && Clock::now() < deadline; ++rounds) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h message = ucp_tag_probe_nb(worker_, 0, 0, /*remove=*/1, &info);
    if (message == nullptr) {
      if (ucp_worker_progress(worker_) == 0) break;
      continue;
    }
    GS_LOG(executor, debug, "a stray data-plane message: tag {:#x}, {} bytes", info.sender_tag, info.length);
    discard(worker_, message, &sink);
    ++dropped;
  }
  return dropped;
}

size_t UcxTransport::dropMatching(uint64_t tag, uint64_t mask) {
  std::vector<uint8_t> sink;  // sized at the first stray
  size_t dropped = 0;
  // Bounded: a flood cannot hold the batch that asks.
  for (int rounds = 0; rounds < 1024; ++rounds) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h message = ucp_tag_probe_nb(worker_, tag, mask, /*remove=*/1, &info);
    if (message == nullptr) break;
    GS_LOG(executor, debug, "dropped a stray data-plane message of a finished batch: tag {:#x}, {} bytes",
           info.sender_tag, info.length);
    discard(worker_, message, &sink);
    ++dropped;
  }
  return dropped;
}

void UcxTransport::abort(const std::string& reason) {
  MutexLock lock(failure_mutex_);
  if (failed_.load()) return;
  failure_ = reason;
  failed_.store(true);
}

void UcxTransport::resume() {
  MutexLock lock(failure_mutex_);
  failure_.clear();
  failed_.store(false);
}

namespace {
// The deadline passed: `what`, naming the transfers still pending (the first
// few), which tells a message that never came from one that never left.
Status timedOut(Request* const* requests, size_t count, const std::string& what) {
  constexpr int kNamed = 4;
  std::string pending;
  int named = 0, more = 0;
  for (size_t i = 0; i < count; ++i) {
    if (requests[i]->test()) continue;
    if (named++ < kNamed) {
      pending += (pending.empty() ? "" : ", ") + static_cast<UcxRequest*>(requests[i])->what();
    } else {
      ++more;
    }
  }
  if (more > 0) pending += " and " + std::to_string(more) + " more";
  return deadlineExceeded(what + ": transfer timed out" + (pending.empty() ? "" : " (pending: " + pending + ")"));
}
}  // namespace

Status UcxTransport::waitAll(Request* const* requests, size_t count, Clock::time_point deadline,
                             const std::string& what) {
  // Spin while progress is being made and a little after (QuietSpin); then
  // sleep on the worker's event fd (two daemons busy-polling two cores
  // starve the TCP stack).
  QuietSpin quiet;
  for (uint64_t spins = 0;; ++spins) {
    if (failed_.load(std::memory_order_relaxed)) {
      MutexLock lock(failure_mutex_);
      return unavailable(what + ": " + failure_);
    }
    bool all = true;
    for (size_t i = 0; i < count; ++i) {
      if (requests[i]->test()) continue;
      if (const std::string* failure = static_cast<UcxRequest*>(requests[i])->peerFailure()) {
        return unavailable(what + ": " + *failure);
      }
      all = false;
    }
    if (all) break;
    if (ucp_worker_progress(worker_) != 0) {
      quiet.progressed();
    } else if (!quiet.spin() && efd_ >= 0 && ucp_worker_arm(worker_) == UCS_OK) {
      pollfd pfd{efd_, POLLIN, 0};
      if (::poll(&pfd, 1, 1) > 0) quiet.progressed();
    }
    if ((spins & 255) == 0 && Clock::now() > deadline) return timedOut(requests, count, what);
  }
  for (size_t i = 0; i < count; ++i) RETURN_IF_ERROR(requests[i]->status());
  return okStatus();
}

void UcxTransport::idle(const std::vector<int>& wake_fds, Clock::time_point until) {
  // The worker's event fd first (when it has one), then the callers'.
  std::vector<pollfd> fds;
  if (efd_ >= 0) fds.push_back({efd_, POLLIN, 0});
  const size_t first_wake = fds.size();
  for (int fd : wake_fds) {
    if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  }
  // A burst of progress at most between looks at the fds: a flood of
  // messages (stray or forged) cannot keep the caller from its wake-up.
  constexpr int kBurst = 1024;
  for (;;) {
    int progressed = 0;
    while (progressed < kBurst && ucp_worker_progress(worker_) != 0) ++progressed;
    const auto now = Clock::now();
    if (now >= until) return;
    // Armed only once the worker has nothing left to report; otherwise
    // there is more to drive, after a look at the fds. Without an event
    // fd: driven every millisecond.
    const bool armed = progressed < kBurst && efd_ >= 0 && ucp_worker_arm(worker_) == UCS_OK;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
    const int timeout = armed                             ? static_cast<int>(std::min<int64_t>(left, 100))
                        : efd_ < 0 && progressed < kBurst ? 1
                                                          : 0;
    for (auto& fd : fds) fd.revents = 0;
    ::poll(fds.data(), fds.size(), timeout);
    for (size_t i = first_wake; i < fds.size(); ++i) {
      if (fds[i].revents & POLLIN) return;
    }
  }
}

Status UcxTransport::waitAny(Request* const* requests, size_t count, int wake_fd, Clock::time_point until) {
  QuietSpin quiet;
  for (;;) {
    if (failed_.load(std::memory_order_relaxed)) {
      MutexLock lock(failure_mutex_);
      return unavailable(failure_);
    }
    for (size_t i = 0; i < count; ++i) {
      if (requests[i]->test()) return okStatus();
      if (const std::string* failure = static_cast<UcxRequest*>(requests[i])->peerFailure()) {
        return unavailable(*failure);
      }
    }
    if (ucp_worker_progress(worker_) != 0) {
      quiet.progressed();
      continue;
    }
    const auto now = Clock::now();
    if (now >= until) return okStatus();
    // Quiet: spin a little, then sleep on the worker's event fd and the
    // caller's (rearmed once the worker has nothing left to report).
    if (quiet.spin() || efd_ < 0 || ucp_worker_arm(worker_) != UCS_OK) continue;
    pollfd fds[2] = {{efd_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
    ::poll(fds, wake_fd >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(left, 100)));
    if (wake_fd >= 0 && (fds[1].revents & POLLIN)) return okStatus();
    if (fds[0].revents & POLLIN) quiet.progressed();
  }
}

}  // namespace gradsync::transport
