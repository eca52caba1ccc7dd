// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/ucx_mesh.h"

#include <set>

#include "daemon/common/logging.h"

namespace gradsync::peer {

UcxMesh::UcxMesh(std::string job_id, std::string token) : job_id_(std::move(job_id)), token_(std::move(token)) {}

UcxMesh::~UcxMesh() {
  MutexLock lock(mutex_);
  if (!transport_) return;
  if (!peers_.empty()) transport_->flush(std::chrono::milliseconds(500));
  const size_t strays = transport_->dropStrays();
  if (strays > 0) {
    GS_LOG(executor, warn,
           "job '{}': dropped {} data-plane messages that matched no transfer of the job (from outside it, "
           "forged, or left over from a failed collective)",
           job_id_, strays);
  }
  peers_.clear();  // before the transport
}

Status UcxMesh::open(const transport::UcxOptions& options) {
  ASSIGN_OR_RETURN(auto transport, transport::UcxTransport::create(options));
  MutexLock lock(mutex_);
  transport_ = std::move(transport);
  if (!aborted_.empty()) transport_->abort(aborted_);
  return okStatus();
}

std::string UcxMesh::address() const {
  MutexLock lock(mutex_);
  return transport_ ? transport_->address() : std::string();
}

transport::UcxTransport* UcxMesh::transport() const {
  MutexLock lock(mutex_);
  return transport_.get();
}

void UcxMesh::abort(const std::string& reason) {
  MutexLock lock(mutex_);
  if (transport_) {
    transport_->abort(reason);
  } else if (aborted_.empty()) {
    aborted_ = reason;  // open() applies it
  }
}

bool UcxMesh::enterEpoch(uint64_t epoch) {
  MutexLock lock(mutex_);
  if (epoch_ == epoch) return false;
  epoch_ = epoch;
  if (transport_) transport_->resume();
  return true;
}

size_t UcxMesh::rekey(uint64_t epoch, const std::vector<v1::NodeInfo>& members) {
  // The old epoch's strays stay queued (they match no tag of this one)
  // until the job ends: draining them here would also take the new epoch's
  // first messages, which may be here.
  tag_key_ =
      deriveSipKey(token_ + '\0' + job_id_ + '\0' + "epoch " + std::to_string(epoch), "gradsync data-plane tags v1");
  std::set<std::string> current;
  for (const auto& node : members) current.insert(node.ucx_address());
  std::vector<transport::PeerPtr> gone;
  MutexLock lock(mutex_);
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (current.count(it->first) > 0) {
      ++it;
    } else {
      gone.push_back(std::move(it->second));
      it = peers_.erase(it);
    }
  }
  return gone.size();
}

StatusOr<transport::Peer*> UcxMesh::peerFor(const v1::NodeInfo& node) {
  transport::UcxTransport* transport = nullptr;
  {
    MutexLock lock(mutex_);
    auto it = peers_.find(node.ucx_address());
    if (it != peers_.end()) return it->second.get();
    transport = transport_.get();
  }
  if (transport == nullptr) return failedPrecondition("job '" + job_id_ + "': the data plane is not open");
  if (node.ranks_size() == 0) return internalError("node " + node.peer_address() + " holds no rank");
  ASSIGN_OR_RETURN(auto peer, transport->connect(node.ucx_address(), "node " + node.peer_address()));
  MutexLock lock(mutex_);
  transport::Peer* raw = peer.get();
  peers_[node.ucx_address()] = std::move(peer);
  return raw;
}

size_t UcxMesh::dropBatchStrays(uint64_t epoch, uint64_t sequence) {
  transport::UcxTransport* driven = transport();
  return driven == nullptr ? 0
                           : driven->dropMatching(collective::batchTagBits(epoch, sequence), collective::kBatchTagMask);
}

StatusOr<collective::RingContext> UcxMesh::ring(const collective::TransferId& id, transport::Clock::time_point deadline,
                                                const std::vector<v1::NodeInfo>& members, int self) {
  const int n = static_cast<int>(members.size());
  collective::RingContext ring;
  ASSIGN_OR_RETURN(ring.left, peerFor(members[(self - 1 + n) % n]));
  ASSIGN_OR_RETURN(ring.right, peerFor(members[(self + 1) % n]));
  ring.transport = transport();
  ring.rank = self;
  ring.size = n;
  ring.id = id;
  ring.tag_key = tag_key_;
  ring.deadline = deadline;
  return ring;
}

StatusOr<collective::MeshContext> UcxMesh::mesh(const collective::TransferId& id, transport::Clock::time_point deadline,
                                                const std::vector<v1::NodeInfo>& members, int self) {
  collective::MeshContext mesh;
  for (size_t i = 0; i < members.size(); ++i) {
    transport::Peer* peer = nullptr;
    if (static_cast<int>(i) != self) {
      ASSIGN_OR_RETURN(peer, peerFor(members[i]));
    }
    mesh.peers.push_back(peer);
  }
  mesh.transport = transport();
  mesh.rank = self;
  mesh.id = id;
  mesh.tag_key = tag_key_;
  mesh.deadline = deadline;
  return mesh;
}

bool UcxMesh::idle(const std::vector<int>& wake_fds, transport::Clock::time_point until) {
  transport::UcxTransport* driven = transport();
  if (driven == nullptr) return false;
  driven->idle(wake_fds, until);
  return true;
}

transport::PeerStats UcxMesh::stats(const std::string& ucx_address) const {
  MutexLock lock(mutex_);
  auto peer = peers_.find(ucx_address);
  return peer == peers_.end() ? transport::PeerStats{} : peer->second->stats();
}

void UcxMesh::goodbye() {
  MutexLock lock(mutex_);
  if (!transport_ || peers_.empty()) return;
  // The job ended here (its stop aborted the transfers): lifted for the
  // goodbye alone.
  transport_->resume();
  const uint64_t tag =
      collective::ringTag(tag_key_, collective::TransferId::control(~uint64_t{0}), /*phase=*/4, 0, 0, 0);
  std::vector<uint8_t> in(peers_.size()), out(peers_.size(), 1);
  std::vector<transport::RequestPtr> requests;
  size_t i = 0;
  for (auto& [address, peer] : peers_) {
    requests.push_back(peer->irecv(&in[i], 1, tag));
    requests.push_back(peer->isend(&out[i], 1, tag));
    ++i;
  }
  std::vector<transport::Request*> raw;
  for (auto& r : requests) raw.push_back(r.get());
  Status said = transport_->waitAll(raw.data(), raw.size(), transport::Clock::now() + std::chrono::seconds(1),
                                    "the data plane's goodbye");
  GS_LOG(control, debug, "job '{}': goodbye to {} daemons: {}", job_id_, peers_.size(), said.toString());
}

}  // namespace gradsync::peer
