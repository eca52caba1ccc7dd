// SPDX-License-Identifier: Apache-2.0
// What a job's daemons together (CrossNode and its parts) are made with: the
// job, this daemon's place and offers, and the limits.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "daemon/peer/membership_parts.h"
#include "daemon/peer/node_endpoints.h"
#include "daemon/peer/protocol.h"
#include "daemon/transport/ucx/ucx_transport.h"

namespace gradsync::peer {

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
  int gpus = 0;       // this daemon's GPUs, their number told to the others
  bool nccl = false;  // this daemon can join the daemons' NCCL communicator
  // Makes the job's ncclUniqueId on the leader (null: this daemon has no NCCL).
  std::function<StatusOr<std::string>()> make_nccl_id;
  transport::UcxOptions data_plane;  // the UCX settings of this job's transport
  bool elastic = false;              // a lost rank or node starts a new epoch (leader_side.h)
  bool failover = false;             // elastic: a lost leader is replaced by quorum (leader_election.h)
  int min_size = 0;                  // elastic: an epoch with fewer ranks waits for joiners (NewEpoch.below_minimum)
  bool steady_state_rounds = false;  // offered: cached collectives after rounds among the daemons (fast_rounds.h)
  std::string link_cost = "auto";    // NodeInfo.link_cost
  bool leader_rounds = false;        // offered: ... after rounds through the leader (leader_rounds.h)
  std::string topology = {};         // this node's place in the network: orders the ring
  // A membership above this many bytes travels in parts (membership_parts.h).
  size_t membership_part_bytes = kMembershipPartBytes;
  // The peer protocol this daemon speaks (protocol.h; tests forge older).
  ProtocolRange protocol = {};
};

}  // namespace gradsync::peer
