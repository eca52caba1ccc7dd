// SPDX-License-Identifier: Apache-2.0
#include "tools/swarm/swarm_follower.h"

#include <algorithm>
#include <cstdio>

#include "daemon/peer/leader_rounds.h"
#include "daemon/peer/protocol.h"
#include "daemon/peer/request_batch.h"

namespace gradsync::swarm {

SwarmFollower::SwarmFollower(const SwarmJob& job, int rank, FollowerEvents* events)
    : job_(job), rank_(rank), events_(events), address_("swarm-node-" + std::to_string(rank) + ".invalid:1") {}

std::shared_ptr<grpc::Channel> nodeChannel(const std::string& address, int node) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("gradsync.swarm_node", node);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

v1::JoinJobRequest SwarmFollower::joinRequest() const {
  v1::JoinJobRequest request;
  request.set_job_id(job_.job_id);
  request.set_token(job_.token);
  request.set_size(job_.size);
  v1::NodeInfo* node = request.mutable_node();
  node->set_peer_address(address_);
  node->set_hostname("swarm-" + std::to_string(rank_));
  for (int r = rank_; r < rank_ + job_.ranks_per_follower; ++r) {
    node->add_ranks(r);
    node->add_pids(1000000 + r);
  }
  node->set_ucx_address("");             // no data plane: the tensors are empty
  node->set_steady_state_rounds(false);  // no data plane: rounds through the leader
  node->set_leader_rounds(true);
  peer::ProtocolRange{}.stamp(&request);
  return request;
}

void SwarmFollower::open(v1::Peer::Stub* stub, int cross_rank, bool rounds) {
  rounds_ = rounds;
  stub->async()->Coordinate(&context_, this);
  v1::FollowerMessage hello;
  hello.mutable_hello()->set_job_id(job_.job_id);
  hello.mutable_hello()->set_token(job_.token);
  hello.mutable_hello()->set_cross_rank(cross_rank);
  hello.mutable_hello()->set_peer_address(address_);
  peer::ProtocolRange{}.stamp(hello.mutable_hello());
  StartRead(&incoming_);
  StartCall();
  send(std::move(hello));
}

void SwarmFollower::submitStep(int tensors) {
  waiting_.store(tensors);
  const v1::FollowerMessage* first = nullptr;
  {
    MutexLock lock(mutex_);
    std::vector<uint64_t> ids;
    for (int t = 0; t < tensors; ++t) {
      auto id = id_of_name_.find("empty." + std::to_string(t));
      if (id != id_of_name_.end()) ids.push_back(id->second);
    }
    if (rounds_ && static_cast<int>(ids.size()) == tensors) {
      // Cached: the step's ids go into the rounds.
      ready_ = std::move(ids);
      held_since_ = std::chrono::steady_clock::now();
      if (!in_round_) first = partOutLocked();
    } else if (static_cast<int>(ids.size()) == tensors) {
      // Cached, no rounds: each request by its id, merged into one message.
      first = queueLocked(requestsByIdLocked(ids));
    } else {
      // As a follower daemon's link merges the requests its ranks submitted
      // while it wrote: here the whole step at once.
      v1::FollowerMessage message;
      for (int r = rank_; r < rank_ + job_.ranks_per_follower; ++r) {
        for (int t = 0; t < tensors; ++t) {
          v1::FollowerMessage::Request* request = message.mutable_requests()->add_requests();
          request->set_rank(r);
          v1::Enqueue* enqueue = request->mutable_enqueue();
          enqueue->set_name("empty." + std::to_string(t));
          enqueue->set_type(v1::ALLREDUCE);
          enqueue->set_dtype(v1::FLOAT32);
          enqueue->add_shape(0);
          enqueue->set_op(v1::SUM);
          enqueue->set_handle(++handle_);
        }
      }
      first = queueLocked(std::move(message));
    }
  }
  if (first != nullptr) StartWrite(first);
}

v1::FollowerMessage SwarmFollower::requestsByIdLocked(const std::vector<uint64_t>& ids) {
  // As a follower daemon's link merges them (RequestBatch).
  peer::RequestBatch batch;
  for (int r = rank_; r < rank_ + job_.ranks_per_follower; ++r) {
    for (uint64_t id : ids) {
      v1::FollowerMessage::Request request;
      request.set_rank(r);
      request.set_cache_id(id);
      request.set_handle(++handle_);
      batch.add(std::move(request));
    }
  }
  return batch.take();
}

void SwarmFollower::tick() {
  const v1::FollowerMessage* first = nullptr;
  {
    MutexLock lock(mutex_);
    if (delayed_part_ && std::chrono::steady_clock::now() >= part_due_) {
      first = queueLocked(std::move(*delayed_part_));
      delayed_part_.reset();
    } else if (!in_round_) {
      first = fallBackLocked();
    }
  }
  if (first != nullptr) StartWrite(first);
}

const v1::FollowerMessage* SwarmFollower::partOutLocked() {
  v1::FollowerMessage part = partLocked();
  if (job_.part_delay.count() == 0) return queueLocked(std::move(part));
  delayed_part_ = std::move(part);
  part_due_ = std::chrono::steady_clock::now() + job_.part_delay;
  return nullptr;
}

const v1::FollowerMessage* SwarmFollower::fallBackLocked() {
  if (ready_.empty() || std::chrono::steady_clock::now() - held_since_ < hold_.limit()) return nullptr;
  const v1::FollowerMessage* first = queueLocked(requestsByIdLocked(ready_));
  ready_.clear();
  return first;
}

v1::FollowerMessage SwarmFollower::partLocked() {
  v1::FollowerMessage message;
  v1::RoundMessage* part = message.mutable_round();
  part->set_kind(v1::RoundMessage::PART);
  part->set_round(round_);
  for (uint64_t word : peer::idsToBits(ready_)) part->add_bits(word);
  in_round_ = true;
  part_sent_ = std::chrono::steady_clock::now();
  return message;
}

void SwarmFollower::onRound(const v1::RoundMessage& message) {
  const v1::FollowerMessage* first = nullptr;
  int answered = 0;
  {
    MutexLock lock(mutex_);
    if (message.kind() == v1::RoundMessage::BEGIN) {
      if (message.round() == round_ && !in_round_) first = partOutLocked();
    } else if (message.kind() == v1::RoundMessage::OUTCOME && message.round() == round_) {
      in_round_ = false;
      ++round_;
      hold_.roundTook(std::chrono::steady_clock::now() - part_sent_);
      const std::vector<uint64_t> ran = peer::bitsToIds(message.bits().data(), message.bits_size());
      const auto before = ready_.size();
      ready_.erase(std::remove_if(ready_.begin(), ready_.end(),
                                  [&](uint64_t id) { return std::binary_search(ran.begin(), ran.end(), id); }),
                   ready_.end());
      answered = static_cast<int>(before - ready_.size());
      // What is left is still wanted: this follower begins the next round,
      // unless it has waited too long.
      first = fallBackLocked();
      if (!ready_.empty()) first = partOutLocked();
    }
  }
  if (first != nullptr) StartWrite(first);
  if (answered > 0 && waiting_.fetch_sub(answered) == answered) events_->step_done();
}

void SwarmFollower::heartbeat(int64_t now_ms) {
  v1::FollowerMessage beat;
  beat.mutable_heartbeat()->set_sent_ms(now_ms);
  send(std::move(beat));
}

void SwarmFollower::close() {
  bool now;
  {
    MutexLock lock(mutex_);
    closing_ = true;
    now = outgoing_.empty() && !done_;  // a stream that ended (its leader lost) takes no more calls
  }
  if (now) StartWritesDone();
}

bool SwarmFollower::waitDone(std::chrono::milliseconds timeout) {
  MutexLock lock(mutex_);
  return done_cv_.wait_for(lock, timeout, [&]() GS_REQUIRES(mutex_) { return done_; });
}

SwarmFollower::Traffic SwarmFollower::traffic() const {
  MutexLock lock(mutex_);
  return traffic_;
}

void SwarmFollower::send(v1::FollowerMessage message) {
  const v1::FollowerMessage* first = nullptr;
  {
    MutexLock lock(mutex_);
    first = queueLocked(std::move(message));
  }
  // Outside the lock: the write may complete at once, on this thread.
  if (first != nullptr) StartWrite(first);
}

const v1::FollowerMessage* SwarmFollower::queueLocked(v1::FollowerMessage message) {
  if (closing_ || done_) return nullptr;
  traffic_.bytes_sent += message.ByteSizeLong();
  outgoing_.push_back(std::move(message));
  return outgoing_.size() == 1 ? &outgoing_.front() : nullptr;
}

void SwarmFollower::OnWriteDone(bool ok) {
  const v1::FollowerMessage* next = nullptr;
  bool writes_done = false;
  {
    MutexLock lock(mutex_);
    if (!outgoing_.empty()) outgoing_.pop_front();
    if (!ok) outgoing_.clear();
    if (ok && !outgoing_.empty()) {
      next = &outgoing_.front();
    } else {
      writes_done = ok && closing_;
    }
  }
  if (next != nullptr) {
    StartWrite(next);
  } else if (writes_done) {
    StartWritesDone();
  }
}

void SwarmFollower::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows
  {
    MutexLock lock(mutex_);
    const uint64_t size = incoming_.ByteSizeLong();
    traffic_.bytes_received += size;
    traffic_.largest_received = std::max(traffic_.largest_received, size);
  }
  onMessage(incoming_);
  StartRead(&incoming_);
}

void SwarmFollower::onMessage(const v1::LeaderMessage& message) {
  if (message.has_batch()) {
    auto whole = parts_.add(message.batch());
    if (!whole.isOk()) {
      events_->failed("rank " + std::to_string(rank_) + ": " + whole.status().message());
    } else if (*whole) {
      onBatch(**whole);
    }
  } else if (message.has_failure() && waiting_.load() > 0) {
    // (Once its step was answered, the job's end is no failure of the step:
    // the leader's rank may finish and leave first.)
    events_->failed("rank " + std::to_string(rank_) + ": the leader failed the job: " + message.failure().message());
  } else if (message.has_round()) {
    onRound(message.round());
  } else if (message.has_new_epoch()) {
    events_->failed("rank " + std::to_string(rank_) + ": the leader started a new epoch");
  }
}

void SwarmFollower::onBatch(const v1::Batch& batch) {
  int answered = 0;
  std::string error;
  {
    MutexLock lock(mutex_);
    for (const auto& r : batch.responses()) {
      if (r.code() != 0) {
        error = "tensor '" + r.name() + "' failed: " + r.message();
        break;
      }
      bool mine = false;
      if (r.cached()) {
        auto known = mine_by_id_.find(r.cache_id());
        if (known == mine_by_id_.end()) {
          error = "the leader referred to unknown cached response " + std::to_string(r.cache_id());
          break;
        }
        mine = known->second;
      } else if (r.uniform()) {
        mine =
            r.uniform_ranks_size() > 0
                ? std::any_of(r.uniform_ranks().begin(), r.uniform_ranks().end(), [&](int x) { return holds(x); })
                : rank_ < r.uniform_first() + r.uniform_count() && r.uniform_first() < rank_ + job_.ranks_per_follower;
      } else {
        mine = std::any_of(r.requests().begin(), r.requests().end(),
                           [&](const auto& request) { return holds(request.rank()); });
      }
      if (!r.cached() && r.cache_id() != 0) {
        id_of_name_[r.name()] = r.cache_id();
        mine_by_id_[r.cache_id()] = mine;
      }
      answered += mine ? 1 : 0;
    }
  }
  if (!error.empty()) {
    events_->failed("rank " + std::to_string(rank_) + ": " + error);
    return;
  }
  if (answered > 0 && waiting_.fetch_sub(answered) == answered) events_->step_done();
}

void SwarmFollower::OnDone(const grpc::Status& status) {
  bool closing;
  {
    MutexLock lock(mutex_);
    closing = closing_;
  }
  if (!closing) {
    std::fprintf(stderr, "swarm: rank %d: stream ended (%d) %s\n", rank_, static_cast<int>(status.error_code()),
                 status.error_message().c_str());
    events_->failed("rank " + std::to_string(rank_) + ": the coordination stream ended: " + status.error_message());
  }
  // Under the lock: the swarm may destroy this once waitDone returns.
  MutexLock lock(mutex_);
  done_ = true;
  done_cv_.notify_all();
}

}  // namespace gradsync::swarm
