// SPDX-License-Identifier: Apache-2.0
// One job's UCX endpoints to its other daemons: the transport, an endpoint
// per node (connected on first use, kept while the node stays in the job),
// the data-plane tags keyed by the job's secret and epoch, and the ring or
// mesh context of one collective. It knows nothing of how the membership
// is decided: CrossNode says which epoch runs and who is in it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/collective/pairwise_exchange.h"
#include "daemon/collective/ring_allreduce.h"
#include "daemon/common/siphash.h"
#include "daemon/transport/ucx/ucx_transport.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

class UcxMesh {
 public:
  UcxMesh(std::string job_id, std::string token);
  // Drives what was sent until it left this process (the last bytes of a
  // collective a neighbour still waits for), drops strays, closes the
  // endpoints. Call once nothing transfers any more.
  ~UcxMesh();
  UcxMesh(const UcxMesh&) = delete;
  UcxMesh& operator=(const UcxMesh&) = delete;

  // Creates the transport; an abort() that came before applies to it.
  Status open(const transport::UcxOptions& options) GS_EXCLUDES(mutex_);
  // This daemon's UCX worker address (empty before open()).
  std::string address() const GS_EXCLUDES(mutex_);
  // Ends every transfer wait now and from now on, until enterEpoch() lifts
  // it for a new epoch.
  void abort(const std::string& reason) GS_EXCLUDES(mutex_);
  // The membership's `epoch` is the one transfers run in: true, with an
  // abort of the old epoch lifted, when it is new here. The caller calls it
  // under the lock that orders its epoch changes before abort() (so an
  // interruption for a later epoch still ends this one's waits).
  bool enterEpoch(uint64_t epoch) GS_EXCLUDES(mutex_);
  // Executor thread, after enterEpoch() returned true: tags keyed by
  // `epoch`; endpoints to nodes not among `members` closed (those that stay
  // are kept: closing one and connecting again at once races UCX's own
  // wire-up). Returns how many it closed.
  size_t rekey(uint64_t epoch, const std::vector<v1::NodeInfo>& members) GS_EXCLUDES(mutex_);
  // Executor thread: the ring or mesh among `members` for one collective,
  // this node at position `self`.
  // Discards what arrived of batch `sequence` of `epoch` and matched no
  // receive; returns how many. The thread that runs the transfers.
  size_t dropBatchStrays(uint64_t epoch, uint64_t sequence) GS_EXCLUDES(mutex_);
  StatusOr<collective::RingContext> ring(const collective::TransferId& id, transport::Clock::time_point deadline,
                                         const std::vector<v1::NodeInfo>& members, int self) GS_EXCLUDES(mutex_);
  StatusOr<collective::MeshContext> mesh(const collective::TransferId& id, transport::Clock::time_point deadline,
                                         const std::vector<v1::NodeInfo>& members, int self) GS_EXCLUDES(mutex_);
  // Executor thread, with nothing else to do: drives the transport until
  // one of `wake_fds` is readable or `until` passes
  // (transport::Transport::idle); false at once, before open().
  bool idle(const std::vector<int>& wake_fds, transport::Clock::time_point until) GS_EXCLUDES(mutex_);
  // Traffic with the node at `ucx_address` (zeros without an endpoint).
  transport::PeerStats stats(const std::string& ucx_address) const GS_EXCLUDES(mutex_);
  // At the job's end, once the executor thread ended: a byte each way with
  // every daemon there is an endpoint to, or a second's wait.
  void goodbye() GS_EXCLUDES(mutex_);

 private:
  // The endpoint to `node`, connected on first use.
  StatusOr<transport::Peer*> peerFor(const v1::NodeInfo& node) GS_EXCLUDES(mutex_);
  transport::UcxTransport* transport() const GS_EXCLUDES(mutex_);

  const std::string job_id_;
  const std::string token_;
  mutable Mutex mutex_;
  std::unique_ptr<transport::UcxTransport> transport_ GS_GUARDED_BY(mutex_);
  std::string aborted_ GS_GUARDED_BY(mutex_);  // an abort() before open()
  uint64_t epoch_ GS_GUARDED_BY(mutex_) = 0;   // the epoch transfers run in
  // By the peer's UCX worker address (created and closed by the executor
  // thread; stats read by others).
  std::map<std::string, transport::PeerPtr> peers_ GS_GUARDED_BY(mutex_);
  SipKey tag_key_;  // executor thread only
};

}  // namespace gradsync::peer
