// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/failure_way.h"

#include "daemon/common/logging.h"

namespace gradsync::peer {

FailureWay::FailureWay(std::string job_id, std::function<NodeSide&()> side, OnFailure on_failure)
    : job_id_(std::move(job_id)), side_(std::move(side)), on_failure_(std::move(on_failure)) {}

std::string FailureWay::named(const std::string& cause) const {
  const std::string job = "job '" + job_id_ + "': ";
  return cause.rfind(job, 0) == 0 ? cause : job + cause;
}

void FailureWay::handToTheJob(Failure failure) const {
  if (on_failure_) on_failure_(failure);
}

void FailureWay::announce(const std::string& text, bool node_lost, const Follower* teller,
                          FailureNotices::Route route) {
  switch (notices_.tell(node_lost, route)) {
    case FailureNotices::Verdict::kToldAlready:
      return;
    case FailureNotices::Verdict::kRemoved:
      GS_LOG(control, info, "job '{}': this node was removed from the job; its failure is not announced to the others",
             job_id_);
      return;
    case FailureNotices::Verdict::kTell:
      break;
  }
  side_().tell(text, node_lost, teller, route);
}

void FailureWay::detected(std::string cause, bool node_lost) {
  if (!node_lost && notices_.failureKnown()) {
    GS_LOG(control, info, "job '{}': after its failure, {}", job_id_, cause);
    return;
  }
  if (notices_.jobRunning()) announce(named(cause), node_lost);
  handToTheJob({std::move(cause), node_lost, /*heard_from=*/""});
}

void FailureWay::leaderLost(std::string cause) {
  if (notices_.jobRunning()) {
    announce(named(cause), /*node_lost=*/true, /*teller=*/nullptr, FailureNotices::Route::kAroundTheLeader);
  }
  handToTheJob({std::move(cause), /*node_lost=*/true, /*heard_from=*/""});
}

void FailureWay::heard(const v1::JobFailure& failure, const std::string& from, const Follower* teller) {
  side_().heard(failure, teller);
  handToTheJob({failure.message(), failure.node_lost(), from});
}

void FailureWay::passOn(const v1::JobFailure& failure, const Follower* teller) {
  if (notices_.jobRunning()) announce(named(failure.message()), failure.node_lost(), teller);
}

}  // namespace gradsync::peer
