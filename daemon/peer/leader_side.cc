// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/leader_side.h"
#include "daemon/peer/leader_followers.h"

#include <algorithm>

#include "daemon/common/logging.h"

namespace gradsync::peer {

CrossNode::LeaderSide::LeaderSide(CrossNode* node)
    : node_(node),
      options_(node->options_),
      members_(node->membership_),
      joins_(options_.job_id, options_.token, options_.size, options_.process_sets, options_.join_timeout),
      published_(options_.membership_part_bytes),
      followers_(std::make_unique<Followers>(node, streams_)) {}

CrossNode::LeaderSide::~LeaderSide() = default;

JoinDesk::Answers CrossNode::LeaderSide::dueJoins(CrossClock::time_point now) {
  MutexLock lock(members_.mutex());
  return dueJoinsLocked(now);
}

void CrossNode::LeaderSide::tick(CrossClock::time_point now, bool send, bool paused) {
  const int64_t now_ms = nowMs(now);
  for (auto& [answer, result] : dueJoins(now)) answer(std::move(result));  // past their deadline
  if (paused) streams_.resumedAt(now_ms);  // the followers' silence so far was this daemon's pause
  uint64_t current_epoch;
  std::vector<std::pair<std::shared_ptr<Follower>, v1::NodeInfo>> followers;
  std::vector<v1::NodeInfo> absent;  // members that never followed this daemon since it took over
  {
    MutexLock lock(members_.mutex());
    if (members_.stoppingLocked()) return;
    current_epoch = members_.bookLocked().epoch();
    for (auto& f : streams_.streams(/*candidates=*/true)) followers.emplace_back(f, f->node());
    absent = streams_.absentSinceTakeover(members_.bookLocked().members(), now_ms, kSilenceLimitMs);
  }
  for (const auto& node : absent) {
    node_->nodeLost(node, current_epoch,
                    "lost " + membership::describeNode(node) + ": it did not follow the new leader within " +
                        std::to_string(kSilenceLimitMs / 1000) + " s");
  }
  v1::LeaderMessage beat;
  beat.mutable_heartbeat()->set_sent_ms(now_ms);
  beat.mutable_heartbeat()->set_epoch(current_epoch);
  const SharedMessage shared_beat = share(std::move(beat));
  for (auto& [f, node] : followers) {
    if (!(send ? f->stream.send(shared_beat) : f->stream.attached())) continue;
    const int64_t heard_ms = f->lastHeardMs();
    const int64_t silent_ms = streams_.silentMs(*f, now_ms);
    // A candidate holds nothing of the job yet: its stream's end is enough.
    if (!node.ranks().empty() && silent_ms > kSilenceLimitMs) {
      node_->nodeLost(node, current_epoch,
                      "lost " + membership::describeNode(node) + ": silent for " +
                          std::to_string((now_ms - heard_ms) / 1000) + " s");
    }
  }
}

void CrossNode::LeaderSide::tell(const std::string& text, bool node_lost, const Follower* teller,
                                 FailureNotices::Route) {
  v1::LeaderMessage message;
  message.mutable_failure()->set_message(text);
  message.mutable_failure()->set_node_lost(node_lost);
  streams_.tellEveryone(share(std::move(message)), teller);
}

void CrossNode::LeaderSide::heard(const v1::JobFailure& failure, const Follower* teller) {
  node_->failures_.passOn(failure, teller);
}

void CrossNode::LeaderSide::sendRound(const v1::RoundMessage& message, const std::vector<int>* to) {
  v1::LeaderMessage out;
  *out.mutable_round() = message;
  const SharedMessage shared = share(std::move(out));
  // Those at the cross ranks `to` (the membership is fixed: not elastic).
  const std::vector<std::shared_ptr<Follower>> followers =
      to != nullptr ? streams_.atCrossRanks(*to) : streams_.streams(/*candidates=*/false);
  for (auto& f : followers) {
    f->stream.send(shared);
    node_->codec_.countSent(shared.bytes);
  }
}

int64_t CrossNode::LeaderSide::heardAgeMs(const v1::NodeInfo& node, int64_t now_ms) const {
  return streams_.heardAgeMs(node.cross_rank(), now_ms);
}

Status CrossNode::LeaderSide::majority(const std::string& lost, CrossClock::time_point now, size_t daemons) const {
  if (!options_.failover) return okStatus();
  const size_t reached = 1 + streams_.reachedWithin(lost, nowMs(now), kReachLimitMs);  // itself counted
  if (reached > daemons / 2) return okStatus();
  return failedPrecondition("the leader " + options_.self_address + " lost the majority: it reaches " +
                            std::to_string(reached) + " of the job's " + std::to_string(daemons) +
                            " daemons (itself counted), " + std::to_string(daemons / 2 + 1) +
                            " needed; the others may elect a new leader, so this side stops");
}

void CrossNode::LeaderSide::acceptJoin(const v1::JoinJobRequest& request, JoinAnswer plain_answer) {
  // Every answer says which protocol this leader speaks.
  const ProtocolRange mine = options_.protocol;
  JoinAnswer answer = [plain_answer = std::move(plain_answer), mine](StatusOr<v1::JoinJobResponse> response) {
    if (response.isOk()) mine.stamp(&*response);
    plain_answer(std::move(response));
  };
  std::optional<StatusOr<v1::JoinJobResponse>> now;
  JoinDesk::Answers due;
  bool candidate = false;
  Status protocol = okStatus();
  {
    MutexLock lock(members_.mutex());
    if (Status checked = joins_.check(request); !checked.isOk()) {
      now = checked;
    } else if (protocol =
                   checkProtocol(options_.job_id, options_.protocol, "the leader (" + options_.self_address + ")",
                                 ProtocolRange::of(request), membership::describeNode(request.node()));
               !protocol.isOk()) {
      now = protocol;
    } else if (request.elastic_join()) {
      candidate = true;
    } else {
      now = joinLocked(request);
      if (!now) joins_.wait(std::move(answer), CrossClock::now());
      due = dueJoinsLocked(CrossClock::now());
    }
  }
  if (candidate) {
    answer(acceptCandidate(request));
    return;
  }
  if (now) answer(std::move(*now));
  for (auto& [waiting, result] : due) waiting(std::move(result));
  // The job cannot form: it fails here at once too (its ranks are told).
  if (!protocol.isOk()) node_->failures_.detected(protocol.message(), true);
}

std::optional<StatusOr<v1::JoinJobResponse>> CrossNode::LeaderSide::joinLocked(const v1::JoinJobRequest& request) {
  if (members_.bookLocked().epoch() > 1) {
    return failedPrecondition("job '" + options_.job_id + "' is at epoch " +
                              std::to_string(members_.bookLocked().epoch()) + ": " +
                              membership::describeNode(request.node()) +
                              " joins a running job only for new ranks "
                              "(GRADSYNC_ELASTIC_JOIN)");
  }
  if (members_.stoppingLocked()) return unavailable("job '" + options_.job_id + "' stopped");
  if (members_.bookLocked().formed()) return membershipLocked();
  ASSIGN_OR_RETURN(std::optional<std::vector<v1::NodeInfo>> complete, joins_.add(request.node()));
  if (complete) {
    members_.bookLocked().form(std::move(*complete), 1);
    members_.makeNcclIdLocked();
    GS_LOG(control, info, "job '{}': all {} nodes joined", options_.job_id, members_.bookLocked().members().size());
    members_.notifyChanged();
    return membershipLocked();
  }
  return std::nullopt;
}

v1::JoinJobResponse CrossNode::LeaderSide::membershipLocked() {
  v1::JoinJobResponse response;
  response.set_epoch(1);
  for (const auto& node : members_.bookLocked().members()) *response.add_nodes() = node;
  response.set_node_count(publishLocked(1, response.mutable_nodes()));
  response.set_nccl_unique_id(members_.ncclIdLocked());
  return response;
}

int32_t CrossNode::LeaderSide::publishLocked(uint64_t epoch, NodeList* nodes) {
  published_.publish(epoch, *nodes);
  return keepFirstPart(nodes, published_.partBytes());
}

StatusOr<v1::MembersResponse> CrossNode::LeaderSide::membersPart(const v1::MembersRequest& request) const {
  if (!constantTimeEqual(request.token(), options_.token))
    return unauthenticated("job '" + options_.job_id + "': token does not match");
  MutexLock lock(members_.mutex());
  auto part = published_.part(request.epoch(), request.first());
  if (!part.isOk()) return Status(part.status().code(), "job '" + options_.job_id + "': " + part.status().message());
  return part;
}

JoinDesk::Answers CrossNode::LeaderSide::dueJoinsLocked(CrossClock::time_point now) {
  if (!joins_.waiting()) return {};
  std::optional<v1::JoinJobResponse> membership;
  if (members_.bookLocked().formed()) membership = membershipLocked();  // built once for all of them
  return joins_.due(now, membership, members_.stoppingLocked());
}

std::string CrossNode::LeaderSide::unattachedLocked() const {
  const auto seconds = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(options_.join_timeout).count());
  if (!members_.bookLocked().formed()) return "the job did not form within " + seconds + " s";
  std::string missing;
  for (size_t i = 0; i < members_.bookLocked().members().size(); ++i) {
    const int cross_rank = static_cast<int>(i);
    if (cross_rank == members_.bookLocked().selfCrossRank() || streams_.hasMember(cross_rank)) continue;
    missing += (missing.empty() ? "" : ", ") + membership::describeNode(members_.bookLocked().members()[i]);
  }
  return "not every node opened its coordination stream within " + seconds + " s: " + missing +
         " joined but never opened it";
}

Status CrossNode::LeaderSide::broadcast(const std::vector<coordinator::Response>& batch, uint64_t sequence,
                                        uint64_t epoch, uint64_t fusion_threshold_bytes) {
  v1::LeaderMessage message;
  message.mutable_batch()->set_sequence(sequence);
  message.mutable_batch()->set_epoch(epoch);
  message.mutable_batch()->set_fusion_threshold_bytes(fusion_threshold_bytes);
  std::vector<std::shared_ptr<Follower>> followers;
  {
    // Every node must see every batch (a process set's ring still spans all
    // nodes), so wait until every follower's stream is attached: a batch of
    // ranks on some nodes can be ready before the others have connected.
    MutexLock lock(members_.mutex());
    const bool attached = members_.changed().wait_for(lock, options_.join_timeout, [&]() GS_REQUIRES(members_.mutex()) {
      return members_.stoppingLocked() || !members_.transfersEndedLocked().empty() ||
             (members_.bookLocked().formed() && streams_.memberCount() + 1 == members_.bookLocked().members().size());
    });
    if (members_.stoppingLocked()) return cancelled("job stopped");
    if (!members_.transfersEndedLocked().empty())
      return aborted("job '" + options_.job_id + "': " + members_.transfersEndedLocked());
    if (!attached) return deadlineExceeded("job '" + options_.job_id + "': " + unattachedLocked());
    followers = streams_.streams(/*candidates=*/false);
  }
  // Encoded once every follower is attached: all of them learn new cache ids.
  MutexLock order(order_mutex_);
  for (const auto& r : batch) *message.mutable_batch()->add_responses() = node_->codec_.encode(r);
  std::vector<SharedMessage> parts;
  for (auto& part : splitBatch(std::move(*message.mutable_batch()))) {
    v1::LeaderMessage one;
    *one.mutable_batch() = std::move(part);
    parts.push_back(share(std::move(one)));
  }
  // Queued, never waited for: a follower that falls behind is cut.
  for (auto& f : followers) {
    for (const auto& part : parts) {
      f->stream.send(part);
      node_->codec_.countSent(part.bytes);
    }
  }
  return okStatus();
}

void CrossNode::LeaderSide::sendError(const coordinator::Request& request, const Status& status) {
  coordinator::Response response;
  response.name = request.name;
  response.type = request.type;
  response.ranks = {request.rank};
  response.requests.push_back(request);
  response.status = status;
  const std::shared_ptr<Follower> target = streams_.holdingRank(request.rank);
  if (!target) return;
  v1::LeaderMessage message;
  message.mutable_batch()->set_sequence(0);  // not executed: no ring
  message.mutable_batch()->set_epoch(members_.epoch());
  *message.mutable_batch()->add_responses() = toProto(response);
  target->stream.send(std::move(message));
}

std::vector<int> CrossNode::LeaderSide::missingRanks() const {
  MutexLock lock(members_.mutex());
  if (members_.bookLocked().formed()) return {};
  return joins_.missingRanks();
}

StatusOr<v1::JoinJobResponse> CrossNode::LeaderSide::acceptCandidate(const v1::JoinJobRequest& request) {
  MutexLock lock(members_.mutex());
  const std::string& address = request.node().peer_address();
  if (!options_.elastic) {
    return failedPrecondition("job '" + options_.job_id +
                              "' is not elastic: " + membership::describeNode(request.node()) + " cannot join it");
  }
  RETURN_IF_ERROR(members_.bookLocked().addCandidate(request.node()));
  streams_.addCandidate(request.node());  // a second join replaces the first
  GS_LOG(control, info,
         "job '{}': node {} (host {}) joins the running job for new ranks (a candidate until they "
         "are admitted)",
         options_.job_id, address, request.node().hostname());
  v1::JoinJobResponse response;
  response.set_epoch(members_.bookLocked().epoch());
  for (const auto& node : members_.bookLocked().members()) *response.add_nodes() = node;
  response.set_node_count(publishLocked(members_.bookLocked().epoch(), response.mutable_nodes()));
  return response;
}

StatusOr<CrossNode::LeaderSide::EpochPlan> CrossNode::LeaderSide::planEpochLocked(StatusOr<v1::NewEpoch> decided) {
  RETURN_IF_ERROR(decided.status());
  EpochPlan plan;
  plan.change = std::move(decided).value();
  members_.endOldEpochTransfersLocked();
  // The daemons' NCCL communicator of the new epoch forms from a new id
  // (none while the job waits below its minimum: it runs nothing).
  if (plan.change.below_minimum()) {
    members_.setNcclIdLocked("");
  } else {
    members_.makeNcclIdLocked();
  }
  plan.change.set_nccl_unique_id(members_.ncclIdLocked());
  plan.followers = streams_.renumber(members_.bookLocked());
  return plan;
}

v1::NewEpoch CrossNode::LeaderSide::announceEpoch(EpochPlan plan) {
  members_.notifyChanged();
  v1::LeaderMessage message;
  *message.mutable_new_epoch() = plan.change;
  {
    MutexLock lock(members_.mutex());
    v1::NewEpoch& change = *message.mutable_new_epoch();
    change.set_node_count(publishLocked(change.epoch(), change.mutable_nodes()));
  }
  {
    // Every stream sees the batches encoded with the old cache before the
    // NewEpoch, and those encoded with the new one after it.
    MutexLock order(order_mutex_);
    node_->codec_.clear();
    const SharedMessage shared = share(std::move(message));
    for (auto& f : plan.followers.kept) f->stream.send(shared);
  }
  for (auto& [f, why] : plan.followers.removed) {
    GS_LOG(control, warn, "job '{}': {}", options_.job_id, why);
    Followers::tellRemoved(f.get(), why);
  }
  return plan.change;
}

StatusOr<v1::NewEpoch> CrossNode::LeaderSide::beginEpoch(const std::vector<int>& lost, uint64_t epoch,
                                                         const std::string& cause) {
  MutexLock lock(members_.mutex());
  ASSIGN_OR_RETURN(EpochPlan plan, planEpochLocked(members_.bookLocked().lose(lost, epoch, cause)));
  lock.unlock();
  return announceEpoch(std::move(plan));
}

StatusOr<v1::NewEpoch> CrossNode::LeaderSide::admitJoiners(const std::vector<uint64_t>& local,
                                                           const std::string& when) {
  MutexLock lock(members_.mutex());
  RETURN_IF_ERROR(majority("", CrossClock::now(), members_.bookLocked().members().size()));
  ASSIGN_OR_RETURN(EpochPlan plan, planEpochLocked(members_.bookLocked().admit(local, when)));
  lock.unlock();
  return announceEpoch(std::move(plan));
}

StatusOr<v1::NewEpoch> CrossNode::LeaderSide::takeOver(uint64_t epoch) {
  EpochPlan plan;
  {
    MutexLock lock(members_.mutex());
    if (members_.stoppingLocked()) return cancelled("job '" + options_.job_id + "' stopped");
    if (members_.bookLocked().epoch() != epoch) {
      return failedPrecondition(options_.self_address + " moved to epoch " +
                                std::to_string(members_.bookLocked().epoch()) + " while it won the vote of epoch " +
                                std::to_string(epoch));
    }
    // The voters open their streams to this daemon.
    streams_.takeOver(nowMs(CrossClock::now()));
    ASSIGN_OR_RETURN(plan, planEpochLocked(members_.bookLocked().takeOver()));
    node_->side_ = this;
  }
  const v1::NewEpoch change = announceEpoch(std::move(plan));
  // This node's Job takes the new epoch before any follower can send a
  // request of it (the voters are answered after this returns).
  if (node_->hooks_.on_new_epoch) node_->hooks_.on_new_epoch(change);
  members_.notifyChanged();
  return change;
}

}  // namespace gradsync::peer
