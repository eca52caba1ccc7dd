// SPDX-License-Identifier: Apache-2.0
// The leader's side of a forming job (a part of CrossNode's leader side):
// the followers' JoinJob calls, checked against the job (token, size,
// process sets), their nodes gathered until every rank is held, and the
// calls that wait meanwhile answered once the job formed, when it stops,
// or at their deadline naming the ranks that never joined. No thread waits:
// an answer is a callback, called by whoever takes it from here, outside
// any lock. Its own lock, a leaf. No I/O: unit-tested alone.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "daemon/membership/builder.h"
#include "daemon/peer/node_endpoints.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

class JoinDesk {
 public:
  using JoinAnswer = std::function<void(StatusOr<v1::JoinJobResponse>)>;
  using Answers = std::vector<std::pair<JoinAnswer, StatusOr<v1::JoinJobResponse>>>;

  JoinDesk(std::string job_id, std::string token, int size, std::vector<std::vector<int>> process_sets,
           CrossClock::duration join_timeout);

  // The leader's own node: the desk takes joins from now on.
  void open(const v1::NodeInfo& self) GS_EXCLUDES(mutex_);
  // Whether `request` may join: NOT_FOUND while the desk is not open (the
  // follower retries: this daemon's ranks may register later),
  // UNAUTHENTICATED for another token, FAILED_PRECONDITION when it
  // disagrees on the job's size or process sets.
  Status check(const v1::JoinJobRequest& request) const GS_EXCLUDES(mutex_);
  // A checked request's node, added: the members in ring order when it
  // completed the job (once), nullopt while ranks are missing; an error
  // when the node's ranks are refused.
  StatusOr<std::optional<std::vector<v1::NodeInfo>>> add(const v1::NodeInfo& node) GS_EXCLUDES(mutex_);
  // A call that waits for the others, until `now` plus the join timeout.
  void wait(JoinAnswer answer, CrossClock::time_point now) GS_EXCLUDES(mutex_);
  bool waiting() const GS_EXCLUDES(mutex_);
  // The waiting calls to answer now: every one with `formed` (the
  // membership, once the job formed), or as stopped with `stopping`, else
  // those past their deadline; to call outside any lock.
  Answers due(CrossClock::time_point now, const std::optional<v1::JoinJobResponse>& formed, bool stopping)
      GS_EXCLUDES(mutex_);
  // The ranks no node holds yet (empty before the desk opens).
  std::vector<int> missingRanks() const GS_EXCLUDES(mutex_);

 private:
  struct Waiting {
    JoinAnswer answer;
    CrossClock::time_point deadline;
  };
  const std::string job_id_;
  const std::string token_;
  const int size_;
  const std::vector<std::vector<int>> process_sets_;
  const CrossClock::duration join_timeout_;

  mutable Mutex mutex_;
  std::optional<membership::MembershipBuilder> builder_ GS_GUARDED_BY(mutex_);
  std::vector<Waiting> waiting_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync::peer
