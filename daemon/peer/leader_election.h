// SPDX-License-Identifier: Apache-2.0
// Leader failover (elastic jobs, daemons started with --leader-failover
// quorum): one daemon's part in electing the next leader once the leader's
// daemon is lost. The lowest surviving daemon leads once a strict majority
// of the job's daemons (the lost leader counted) voted for it, and the job
// goes on in a new epoch without the leader's node and ranks.
//
//  - Voter (run): each follower that loses its leader stream (broken, or
//    silent for the silence limit) votes once per epoch, for the lowest
//    candidate that it reaches (all probed at once) and that lost the
//    leader too, in cross-rank order: itself when it gets that far.
//  - Candidate (acceptVote): counts a vote only while the voter waits for
//    its answer, counts its own, and counts votes only once it has lost the
//    leader too (a follower cut off alone cannot depose a live leader); the
//    rules are membership::Ballot's. Two majorities cannot form, so two
//    leaders cannot either. No thread waits for a vote: a vote is held
//    with its answer (a callback; the Elect call's reactor) until the
//    election decides, its voter gives up (voterGone), or its time is up.
//    One thread per election, started by its first vote and ended by
//    stop(), keeps those times and runs the takeover.
//  - The winner takes over (Host::takeOver: it becomes cross rank 0, the
//    old leader's node is removed, its own Job takes the new epoch) and
//    only then answers the voters, which follow it (Host::followElected).
//  - No majority within the voting limit (two daemons, too many lost at
//    once, or this daemon on the minority side of a partition): run fails,
//    saying this daemon lost the majority.
//
// Its own lock, a leaf: the Host is never called with it held.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "daemon/membership/ballot.h"
#include "daemon/peer/node_endpoints.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::peer {

class LeaderElection {
 public:
  // A voter's whole election ends within this (with a new leader's epoch,
  // or with the job's failure on its side).
  static constexpr int64_t kVotingLimitMs = 15000;

  struct Limits {
    CrossClock::duration election = std::chrono::seconds(5);          // a candidate's wait for a majority
    CrossClock::duration candidate_notice = std::chrono::seconds(3);  // ... to lose the leader itself
    CrossClock::duration voting = std::chrono::milliseconds(kVotingLimitMs);
    CrossClock::duration probe = std::chrono::seconds(2);  // to learn which candidates are reachable
    size_t probe_window = 16;                              // candidates probed at once
  };
  struct Options {
    std::string job_id;
    std::string token;
    std::string self_address;
    std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: plaintext
    bool failover = false;                                  // off: every vote is refused
    size_t membership_part_bytes = 0;                       // the first part of a membership in an answer
    Limits limits = {};
  };
  // What the election asks of the job's peer side (CrossNode).
  class Host {
   public:
    virtual ~Host() = default;
    // The current epoch, and its members in cross-rank order.
    virtual uint64_t membership(std::vector<v1::NodeInfo>* members) const = 0;
    // The current epoch, and how many members it has (*count).
    virtual uint64_t memberCount(size_t* count) const = 0;
    virtual bool isMember(const std::string& address) const = 0;
    virtual bool leads() const = 0;
    // Candidate with a majority in `epoch`: leads the next epoch without
    // the lost leader's node; the followers were told and this node's Job
    // took it when this returns. An error when this node left `epoch`.
    virtual StatusOr<v1::NewEpoch> takeOver(uint64_t epoch) = 0;
    // Voter: follows `leader`, elected with `answer`, reached over `channel`.
    virtual Status followElected(const v1::NodeInfo& leader, const std::shared_ptr<grpc::Channel>& channel,
                                 v1::ElectResponse answer) = 0;
  };

  // A vote's answer: the new epoch, or why the vote did not win. Called
  // once, never with this election's lock held; maybe on the thread that
  // gave the vote (a refusal at once).
  using Answer = std::function<void(StatusOr<v1::ElectResponse>)>;

  LeaderElection(Options options, Host* host);
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // A follower lost the leader of its current epoch (`cause`): votes until a
  // leader is elected. True when this daemon leads now, false when it
  // follows the new leader; FAILED_PRECONDITION when no failover is
  // possible (fewer than three daemons) or no majority formed.
  StatusOr<bool> run(const std::string& cause) GS_EXCLUDES(mutex_);
  // Elect: another daemon's vote for this one, counted until its answer or
  // voterGone(the id returned). `answer` is called once.
  uint64_t acceptVote(const v1::ElectRequest& request, Answer answer) GS_EXCLUDES(mutex_);
  // The voter of vote `id` stopped waiting (its call ended): the vote no
  // longer counts, and is answered CANCELLED unless answered already.
  void voterGone(uint64_t id) GS_EXCLUDES(mutex_);
  // Whether this daemon lost the leader of `epoch` and takes part in
  // electing the next one.
  bool electing(uint64_t epoch) const GS_EXCLUDES(mutex_);
  // The job stopped: every vote held is answered CANCELLED, and later ones
  // at once; the election's thread ends.
  void stop() GS_EXCLUDES(mutex_);
  // Votes held for an answer now (a figure for tests and the swarm).
  size_t votesHeld() const GS_EXCLUDES(mutex_);

 private:
  // A vote for this daemon, held until the election decides, its voter
  // gives up, or `deadline`.
  struct HeldVote {
    std::string voter;
    uint64_t epoch = 0;
    size_t majority = 0;   // of the job's daemons in `epoch`
    bool counted = false;  // false: waits for this daemon to lose the leader of `epoch`
    CrossClock::time_point deadline;
    Answer answer;
  };
  using Answers = std::vector<std::pair<Answer, StatusOr<v1::ElectResponse>>>;

  // run's parts: the followers that may replace the leader, by cross rank
  // (a ballot opens, and the votes held for it are counted); this daemon's
  // vote for `candidate` over `channel` (its answer, the vote withdrawn
  // unless it won); its vote for itself, waited for.
  std::vector<v1::NodeInfo> candidatesAfterLoss(uint64_t* epoch, size_t* daemons) GS_EXCLUDES(mutex_);
  StatusOr<v1::ElectResponse> voteFor(const v1::NodeInfo& candidate, const std::shared_ptr<grpc::Channel>& channel,
                                      uint64_t epoch) GS_EXCLUDES(mutex_);
  StatusOr<v1::ElectResponse> askVote(const std::shared_ptr<grpc::Channel>& channel, uint64_t epoch) const;
  StatusOr<v1::ElectResponse> voteForSelf(uint64_t epoch) GS_EXCLUDES(mutex_);
  // A vote of `voter` (maybe this daemon) for this daemon in `epoch`: held,
  // or answered at once. Its id (0 when answered at once).
  uint64_t vote(const std::string& voter, uint64_t epoch, Answer answer) GS_EXCLUDES(mutex_);
  // The ballot counts `held` (this daemon lost the leader of its epoch):
  // an error when refused; a majority reached marks the takeover due.
  Status countLocked(HeldVote& held) GS_REQUIRES(mutex_);
  // The answers due now: votes decided, refused or past their deadline
  // (taken out of held_).
  Answers dueLocked(CrossClock::time_point now) GS_REQUIRES(mutex_);
  // The takeover of the ballot's epoch is decided: `change` is its answer.
  void tookOverLocked(v1::NewEpoch change) GS_REQUIRES(mutex_);
  // The election's thread: the takeover once due, the votes' deadlines.
  void startThreadLocked() GS_REQUIRES(mutex_);
  void keepTime() GS_EXCLUDES(mutex_);
  StatusOr<v1::NewEpoch> takeOver(uint64_t epoch) GS_EXCLUDES(mutex_);
  static void deliver(Answers answers);

  const Options options_;
  Host* const host_;
  mutable Mutex mutex_;
  CondVar changed_;  // a vote held or counted, a takeover due or decided, stopped
  membership::Ballot ballot_ GS_GUARDED_BY(mutex_);
  std::map<uint64_t, HeldVote> held_ GS_GUARDED_BY(mutex_);
  uint64_t next_vote_ GS_GUARDED_BY(mutex_) = 1;
  std::optional<uint64_t> takeover_due_ GS_GUARDED_BY(mutex_);        // the epoch a majority was reached in
  std::map<uint64_t, Status> takeover_failed_ GS_GUARDED_BY(mutex_);  // by epoch
  std::optional<v1::ElectResponse> answer_ GS_GUARDED_BY(mutex_);     // to the voters of the decided takeover
  std::thread thread_ GS_GUARDED_BY(mutex_);
  bool stopping_ GS_GUARDED_BY(mutex_) = false;
};

}  // namespace gradsync::peer
