// SPDX-License-Identifier: Apache-2.0
// The multi-node side of a Job (see proto/gradsync/v1/peer.proto and this
// package's README.md: a collective across nodes, and what happens when a
// node is lost): forming the membership (leader collects JoinJob calls; a
// follower joins its leader), the coordination streams (followers forward
// requests, the leader streams back ordered batches), failure
// announcements, and the UCX ring the executor uses.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/collective/ring_allreduce.h"
#include "daemon/coordinator/request.h"
#include "daemon/coordinator/request_wire.h"
#include "daemon/peer/membership.h"
#include "daemon/peer/response_cache.h"
#include "daemon/transport/ucx/ucx_transport.h"
#include "proto/gradsync/v1/admin.pb.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::peer {

using LeaderStream = grpc::ServerReaderWriter<v1::LeaderMessage, v1::FollowerMessage>;
using CrossClock = std::chrono::steady_clock;

struct CrossNodeOptions {
  std::string job_id;
  std::string token;
  int size = 0;
  std::vector<std::vector<int>> process_sets;
  std::string self_address;    // this daemon's peer service
  std::string leader_address;  // the ranks' GRADSYNC_LEADER
  std::string hostname;
  CrossClock::duration join_timeout = std::chrono::seconds(30);
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: plaintext
  size_t response_cache_capacity = 4096;
  std::vector<std::string> gpu_uuids;  // this daemon's GPUs, told to the others
  bool nccl = false;                   // this daemon can join the daemons' NCCL communicator
  // Makes the job's ncclUniqueId on the leader (null: this daemon has no NCCL).
  std::function<StatusOr<std::string>()> make_nccl_id;
  std::string data_plane_devices;  // UCX_NET_DEVICES for this job's transport (empty: all)
};

class CrossNode {
 public:
  struct Hooks {
    // Follower: a batch from the leader, to execute in arrival order.
    std::function<void(std::vector<coordinator::Response>, uint64_t sequence)> on_batch;
    // Leader: a follower's rank submitted a request.
    std::function<void(int rank, const v1::Enqueue&)> on_remote_request;
    // The job failed elsewhere (a rank left or died: node_lost false), or a
    // node or the leader was lost (node_lost true).
    std::function<void(const std::string& cause, bool node_lost)> on_failure;
  };

  CrossNode(CrossNodeOptions options, Hooks hooks);
  ~CrossNode();  // closes streams and joins threads

  // Every local rank has registered: the node holding rank 0 leads, the
  // others join it (on a thread of their own; failures call on_failure).
  void start(const std::vector<int>& local_ranks, const std::vector<int64_t>& pids);
  bool isLeader() const { return leader_; }

  // Leader: a follower's JoinJob, answered once every node joined.
  StatusOr<v1::JoinJobResponse> acceptJoin(const v1::JoinJobRequest& request);
  // Leader: serves one follower's Coordinate stream (whose first message,
  // `hello`, the caller has read) until it ends.
  grpc::Status serveFollower(grpc::ServerContext* context, LeaderStream* stream, const v1::FollowerMessage& hello);

  // Follower: forwards a local rank's request to the leader.
  void forward(int rank, const v1::Enqueue& enqueue);
  // Leader: sends a batch to every follower, before executing it; waits
  // (up to the join timeout) until every follower is attached.
  Status broadcast(const std::vector<coordinator::Response>& batch, uint64_t sequence);
  // Leader: the request of a rank on another node failed on its own.
  void sendError(const coordinator::Request& request, const Status& status);
  // Tells the other nodes that the job failed (once).
  void announceFailure(const std::string& message, bool node_lost);
  // A follower's AbortJob: the job failed on that node since a node was
  // lost; fails it here too (through on_failure).
  Status acceptAbort(const v1::AbortJobRequest& request);
  // Ends every data-plane wait of this job now and from now on (a node was
  // lost, the job stops), and a join to the leader in progress.
  void abortTransfers(const std::string& reason);
  // True once every node joined (the membership is known).
  bool formed() const;
  // Leader: the ranks whose nodes have not joined yet (empty elsewhere).
  std::vector<int> missingRanks() const;

  // The ring for one collective (connects the UCX endpoints on first use).
  // Waits for the membership until `deadline`.
  StatusOr<collective::RingContext> ring(uint64_t sequence, CrossClock::time_point deadline);
  std::vector<v1::NodeInfo> members() const;
  // The job's ncclUniqueId (empty: the leader has no NCCL) and this node's
  // position in the ring; valid once the job formed.
  std::string ncclId() const;
  int selfCrossRank() const;
  // Heartbeats (every second) and silence checks: a node not heard from for
  // kSilenceLimit is declared lost. Called from the daemon's housekeeping.
  void tick(CrossClock::time_point now);
  // Membership with roles, heartbeat ages and neighbour traffic, for
  // gradsyncctl. `busy_seconds`: time spent in cross-node transfers.
  void describe(v1::JobInfo* info, CrossClock::time_point now, double busy_seconds) const;

 private:
  // Leader, once the job formed: the job's ncclUniqueId. Needs mutex_.
  void makeNcclIdLocked();
  struct Follower {
    LeaderStream* stream = nullptr;
    std::mutex write_mutex;
    v1::NodeInfo node;
    std::atomic<int64_t> last_heard_ms{0};  // steady clock
  };
  Status joinLeader(const v1::NodeInfo& self);
  void readLeader();
  bool writeToLeader(const v1::FollowerMessage& message);
  // Follower: sends AbortJob to every other follower (asynchronously; the
  // destructor waits for the answers, each bounded by a short deadline).
  void tellOtherFollowers(const v1::JobFailure& failure);
  void waitForAbortNotices();
  struct AbortNotices;
  std::shared_ptr<AbortNotices> abort_notices_;  // set once, under mutex_
  std::string describeNode(const v1::NodeInfo& node) const;

  const CrossNodeOptions options_;
  const Hooks hooks_;
  const SipKey tag_key_;  // the data plane's tags, from the job's token
  std::atomic<bool> leader_{false};  // set by start(); read by housekeeping and peer calls
  std::unique_ptr<transport::UcxTransport> transport_;

  mutable std::mutex mutex_;
  std::condition_variable formed_cv_;
  std::optional<MembershipBuilder> builder_;  // leader
  std::vector<v1::NodeInfo> members_;              // set once formed
  std::string nccl_id_;                            // set with members_ (empty: no NCCL at the leader)
  int self_cross_rank_ = -1;
  bool stopping_ = false;
  bool failure_announced_ = false;
  bool node_lost_announced_ = false;
  bool reader_done_ = false;  // follower: the leader's stream ended
  std::string transfers_aborted_;              // abortTransfers' reason
  grpc::ClientContext* join_call_ = nullptr;   // follower: the JoinJob call in progress
  std::map<int, std::shared_ptr<Follower>> followers_;  // leader: by cross rank

  // Follower side.
  std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext stream_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::FollowerMessage, v1::LeaderMessage>> stream_;
  std::mutex stream_mutex_;
  std::vector<v1::FollowerMessage> backlog_;  // requests before the stream opened
  std::atomic<int64_t> leader_heard_ms_{0};    // follower: last message from the leader
  CrossClock::time_point last_heartbeat_;      // housekeeping thread only
  std::thread follower_thread_;

  // Response cache and coordination traffic counters.
  v1::NegotiatedResponse encode(const coordinator::Response& response);  // leader
  StatusOr<coordinator::Response> decode(const v1::NegotiatedResponse& response);  // follower
  StatusOr<v1::Enqueue> expand(const v1::FollowerMessage::Request& request);  // leader
  mutable std::mutex cache_mutex_;
  ResponseCache cache_;
  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0}, messages_{0}, cache_hits_{0};

  // Data plane (created by the executor thread; stats read under mutex_).
  transport::PeerPtr left_, right_;
  int left_node_ = -1, right_node_ = -1;
};

// Conversions between negotiated responses and their wire form.
v1::NegotiatedResponse toProto(const coordinator::Response& response);
coordinator::Response fromProto(const v1::NegotiatedResponse& response);

}  // namespace gradsync::peer
