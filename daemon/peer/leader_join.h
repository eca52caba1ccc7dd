// SPDX-License-Identifier: Apache-2.0
// A follower's JoinJob calls to its leader (a part of CrossNode's follower
// side). Calls are made until the leader answers, retried while the
// leader's daemon does not hold the job yet (its ranks register later) or
// accepts no connection yet, until the join timeout; a call that breaks off
// once the leader was reached is final (its daemon died or was cut off
// while the job formed). The answer's membership is read in full (in parts
// where large) and its protocol checked. stop() and abort() end the call in
// progress and every later one. Its own lock, a leaf.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "daemon/peer/membership_parts.h"
#include "daemon/peer/node_endpoints.h"
#include "daemon/peer/protocol.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::peer {

// Follower: the rest of `epoch`'s membership announced in parts (`nodes`
// holds the first, `node_count` in all), read from the daemon `stub`
// reaches (the leader); the failure names the job.
Status readRestOfMembers(v1::Peer::StubInterface* stub, const std::string& job_id, const std::string& token,
                         uint64_t epoch, int32_t node_count, NodeList* nodes);

class LeaderJoin {
 public:
  struct Options {
    std::string job_id;
    std::string token;
    std::string leader_address;
    std::string self_address;
    CrossClock::duration join_timeout;
    ProtocolRange protocol;
  };
  explicit LeaderJoin(Options options) : options_(std::move(options)) {}

  // Joins the leader with `request` over `channel` (`stub` on it): its
  // answer, membership in full; UNAVAILABLE naming the leader when it
  // cannot be joined, CANCELLED once stopped or aborted.
  StatusOr<v1::JoinJobResponse> join(grpc::Channel* channel, v1::Peer::Stub* stub, const v1::JoinJobRequest& request)
      GS_EXCLUDES(mutex_);
  // The job stopped here / failed (`reason`): the call in progress ends.
  void stop() GS_EXCLUDES(mutex_);
  void abort(const std::string& reason) GS_EXCLUDES(mutex_);

 private:
  // One call, made before `deadline` (`connected`: the channel is): its
  // outcome, the membership read in full into `response` when it
  // succeeded; an error once stopped or aborted, or when the rest of the
  // membership could not be read.
  StatusOr<grpc::Status> callOnce(v1::Peer::Stub* stub, const v1::JoinJobRequest& request,
                                  CrossClock::time_point deadline, bool connected, v1::JoinJobResponse* response)
      GS_EXCLUDES(mutex_);
  // The call about to be made with `context` (stop and abort cancel it),
  // unless the join ended meanwhile.
  Status beginCallLocked(grpc::ClientContext* context) GS_REQUIRES(mutex_);
  // The leader does not hold the job yet: said once (`told`), then a pause
  // before the next call (ended by stop or abort).
  void waitForTheLeadersJob(bool* told) GS_EXCLUDES(mutex_);

  const Options options_;
  mutable Mutex mutex_;
  CondVar ended_cv_;
  grpc::ClientContext* call_ GS_GUARDED_BY(mutex_) = nullptr;  // the call in progress
  bool stopped_ GS_GUARDED_BY(mutex_) = false;
  std::string aborted_ GS_GUARDED_BY(mutex_);  // why the job failed
};

}  // namespace gradsync::peer
