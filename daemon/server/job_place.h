// SPDX-License-Identifier: Apache-2.0
// This node's place in a job, for Job's files only: the job's one node, or
// the leader or a follower of a job across daemons (a follower that wins an
// election leads from then on: Job::place() asks the peer side each time).
// What differs between the three: where a request is negotiated, who tells
// a follower's rank of its failure, who decides the tuning and the elastic
// epochs, and which node reports its joiners. Stateless: each call names the
// job, whose lock the Locked ones need.
#pragma once

#include "daemon/server/job.h"

namespace gradsync::server {

class Job::Place {
 public:
  virtual ~Place() = default;
  // A request of a local rank (`session`; null: a follower's rank, on the
  // leader) goes to the negotiation: here, or forwarded to the leader.
  virtual void submitLocked(Job& job, const std::shared_ptr<Session>& session, coordinator::Request request,
                            RankMessages* to_ranks, std::vector<coordinator::Response>* inline_batch) const
      GS_REQUIRES(job.mutex_) = 0;
  // Whether small collectives may run on the thread whose submission made
  // them ready (one node: nothing to wait for elsewhere).
  virtual bool runsInline() const { return false; }
  // `request` of a rank of no session here failed with `status`
  // (`membership_changed`: each follower fails its own as it applies the
  // new epoch).
  virtual void otherNodesRequestFailedLocked(Job& job, const coordinator::Request& request, const Status& status,
                                             bool membership_changed) const GS_REQUIRES(job.mutex_) {}
  // Whether this daemon decides the fusion threshold and cycle time.
  virtual bool decidesTuningLocked(const Job& job) const GS_REQUIRES(job.mutex_) = 0;
  // An elastic job lost local `session`'s rank (it crashed): true when the
  // job goes on in a new epoch (this node's part of it; `loss` says what
  // is left to do), false when it fails.
  virtual bool elasticRankLostLocked(Job& job, const Session& session, const std::string& what, RankLoss* loss) const
      GS_REQUIRES(job.mutex_) = 0;
  // A commit barrier named `commit` admitted the waiting joiners.
  virtual void commitAdmittedLocked(Job& job, const std::string& commit, RankMessages* to_ranks) const
      GS_REQUIRES(job.mutex_) = 0;
  // Below min_size: admits the joiners there are, or returns why the job
  // fails (the elastic timeout passed; empty: it waits on, or it goes on).
  virtual std::string fillEpochLocked(Job& job, Clock::time_point now, RankMessages* to_ranks) const
      GS_REQUIRES(job.mutex_) = 0;
  // Whether the completed commit barrier `response` admits joiners.
  virtual bool admitsJoinersLocked(const Job& job, const coordinator::Response& response) const
      GS_REQUIRES(job.mutex_) = 0;
  // Joiners whose stream opened, for the leader to hear of (housekeeping).
  virtual std::vector<std::shared_ptr<Session>> joinersToReportLocked(Job& job) const GS_REQUIRES(job.mutex_) {
    return {};
  }
  // Whether its join of the job has a deadline of its own, which says why
  // it failed (a follower's).
  virtual bool joinsALeader() const { return false; }
};

class Job::OneNode final : public Job::Place {
 public:
  void submitLocked(Job& job, const std::shared_ptr<Session>& session, coordinator::Request request,
                    RankMessages* to_ranks, std::vector<coordinator::Response>* inline_batch) const override
      GS_REQUIRES(job.mutex_);
  bool runsInline() const override { return true; }
  bool decidesTuningLocked(const Job&) const override { return true; }
  bool elasticRankLostLocked(Job& job, const Session& session, const std::string& what, RankLoss* loss) const override
      GS_REQUIRES(job.mutex_);
  void commitAdmittedLocked(Job& job, const std::string& commit, RankMessages* to_ranks) const override
      GS_REQUIRES(job.mutex_);
  std::string fillEpochLocked(Job& job, Clock::time_point now, RankMessages* to_ranks) const override
      GS_REQUIRES(job.mutex_);
  bool admitsJoinersLocked(const Job& job, const coordinator::Response& response) const override
      GS_REQUIRES(job.mutex_);
};

class Job::Leading final : public Job::Place {
 public:
  void submitLocked(Job& job, const std::shared_ptr<Session>& session, coordinator::Request request,
                    RankMessages* to_ranks, std::vector<coordinator::Response>* inline_batch) const override
      GS_REQUIRES(job.mutex_);
  void otherNodesRequestFailedLocked(Job& job, const coordinator::Request& request, const Status& status,
                                     bool membership_changed) const override GS_REQUIRES(job.mutex_);
  bool decidesTuningLocked(const Job& job) const override GS_REQUIRES(job.mutex_);
  bool elasticRankLostLocked(Job& job, const Session& session, const std::string& what, RankLoss* loss) const override
      GS_REQUIRES(job.mutex_);
  void commitAdmittedLocked(Job& job, const std::string& commit, RankMessages* to_ranks) const override
      GS_REQUIRES(job.mutex_);
  std::string fillEpochLocked(Job& job, Clock::time_point now, RankMessages* to_ranks) const override
      GS_REQUIRES(job.mutex_);
  bool admitsJoinersLocked(const Job&, const coordinator::Response& response) const override {
    return response.admits_joiners;  // the leader decided before it sent the batch
  }
};

class Job::Following final : public Job::Place {
 public:
  void submitLocked(Job& job, const std::shared_ptr<Session>& session, coordinator::Request request,
                    RankMessages* to_ranks, std::vector<coordinator::Response>* inline_batch) const override
      GS_REQUIRES(job.mutex_);
  bool decidesTuningLocked(const Job&) const override { return false; }
  bool elasticRankLostLocked(Job& job, const Session& session, const std::string& what, RankLoss* loss) const override
      GS_REQUIRES(job.mutex_);
  // The leader admits them and tells this node (NewEpoch).
  void commitAdmittedLocked(Job&, const std::string&, RankMessages*) const override {}
  // The leader decides; a lost leader is noticed on its own.
  std::string fillEpochLocked(Job&, Clock::time_point, RankMessages*) const override { return ""; }
  bool admitsJoinersLocked(const Job&, const coordinator::Response& response) const override {
    return response.admits_joiners;
  }
  std::vector<std::shared_ptr<Session>> joinersToReportLocked(Job& job) const override GS_REQUIRES(job.mutex_);
  bool joinsALeader() const override { return true; }
};

}  // namespace gradsync::server
