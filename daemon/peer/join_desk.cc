// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/join_desk.h"

#include "daemon/common/siphash.h"
#include "daemon/membership/epoch_book.h"

namespace gradsync::peer {
namespace {

bool sameProcessSets(const v1::JoinJobRequest& request, const std::vector<std::vector<int>>& mine) {
  if (request.process_sets_size() != static_cast<int>(mine.size())) return false;
  for (size_t i = 0; i < mine.size(); ++i) {
    const auto& ranks = request.process_sets(static_cast<int>(i)).ranks();
    if (std::vector<int>(ranks.begin(), ranks.end()) != mine[i]) return false;
  }
  return true;
}

}  // namespace

JoinDesk::JoinDesk(std::string job_id, std::string token, int size, std::vector<std::vector<int>> process_sets,
                   CrossClock::duration join_timeout)
    : job_id_(std::move(job_id)),
      token_(std::move(token)),
      size_(size),
      process_sets_(std::move(process_sets)),
      join_timeout_(join_timeout) {}

void JoinDesk::open(const v1::NodeInfo& self) {
  MutexLock lock(mutex_);
  builder_.emplace(job_id_, size_);
  (void)builder_->add(self);
}

Status JoinDesk::check(const v1::JoinJobRequest& request) const {
  {
    MutexLock lock(mutex_);
    if (!builder_) return notFound("job '" + job_id_ + "' is not led by this daemon (yet)");
  }
  if (!constantTimeEqual(request.token(), token_))
    return unauthenticated("job '" + job_id_ + "': token does not match");
  if (request.size() != size_ || !sameProcessSets(request, process_sets_)) {
    return failedPrecondition("job '" + job_id_ + "': " + membership::describeNode(request.node()) +
                              " disagrees on the job's size or process sets");
  }
  return okStatus();
}

StatusOr<std::optional<std::vector<v1::NodeInfo>>> JoinDesk::add(const v1::NodeInfo& node) {
  MutexLock lock(mutex_);
  if (!builder_) return notFound("job '" + job_id_ + "' is not led by this daemon (yet)");
  const bool complete_before = builder_->complete();
  RETURN_IF_ERROR(builder_->add(node));
  if (complete_before || !builder_->complete()) return std::optional<std::vector<v1::NodeInfo>>();
  return std::optional<std::vector<v1::NodeInfo>>(builder_->ordered());
}

void JoinDesk::wait(JoinAnswer answer, CrossClock::time_point now) {
  MutexLock lock(mutex_);
  waiting_.push_back({std::move(answer), now + join_timeout_});
}

bool JoinDesk::waiting() const {
  MutexLock lock(mutex_);
  return !waiting_.empty();
}

JoinDesk::Answers JoinDesk::due(CrossClock::time_point now, const std::optional<v1::JoinJobResponse>& formed,
                                bool stopping) {
  MutexLock lock(mutex_);
  Answers due;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (formed) {
      due.emplace_back(std::move(it->answer), *formed);
    } else if (stopping) {
      due.emplace_back(std::move(it->answer), unavailable("job '" + job_id_ + "' stopped"));
    } else if (now >= it->deadline) {
      std::string missing;
      const std::vector<int> ranks = builder_ ? builder_->missingRanks() : std::vector<int>();
      for (int r : ranks) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      due.emplace_back(std::move(it->answer),
                       deadlineExceeded("job '" + job_id_ + "': ranks [" + missing + "] never joined"));
    } else {
      ++it;
      continue;
    }
    it = waiting_.erase(it);
  }
  return due;
}

std::vector<int> JoinDesk::missingRanks() const {
  MutexLock lock(mutex_);
  return builder_ ? builder_->missingRanks() : std::vector<int>();
}

}  // namespace gradsync::peer
