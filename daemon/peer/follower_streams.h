// SPDX-License-Identifier: Apache-2.0
// The leader's table of its followers' coordination streams (a part of
// CrossNode's leader side): the members' streams by cross rank, the
// candidates' (nodes joining a running elastic job for new ranks) by peer
// address, and for each the node it is in the current epoch, when it was
// last heard and why an epoch removed it. Its own lock, a leaf but for the
// followers' (each guards one follower's node); messages are written
// outside both (AttachedStream::send never waits). No I/O: unit-tested with
// fake streams.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/membership/epoch_book.h"
#include "daemon/peer/follower_stream.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

// One follower's stream as the leader holds it, shared with the session
// that serves the stream.
class Follower {
 public:
  explicit Follower(v1::NodeInfo node) : address_(node.peer_address()), node_(std::move(node)) {}

  AttachedStream stream;

  const std::string& peerAddress() const { return address_; }
  // The node as numbered in the current epoch (cross rank -1: a candidate,
  // holding no rank of the job yet).
  v1::NodeInfo node() const GS_EXCLUDES(mutex_);
  int crossRank() const GS_EXCLUDES(mutex_);
  bool holdsRank(int rank) const GS_EXCLUDES(mutex_);
  // Why an epoch left it out of the job (empty: it is in).
  std::string removed() const GS_EXCLUDES(mutex_);
  void heardAt(int64_t ms) { last_heard_ms_.store(ms); }
  int64_t lastHeardMs() const { return last_heard_ms_.load(); }

 private:
  friend class FollowerStreams;
  void renumber(v1::NodeInfo node) GS_EXCLUDES(mutex_);
  void remove(std::string why) GS_EXCLUDES(mutex_);

  const std::string address_;
  mutable Mutex mutex_;
  v1::NodeInfo node_ GS_GUARDED_BY(mutex_);
  std::string removed_ GS_GUARDED_BY(mutex_);
  std::atomic<int64_t> last_heard_ms_{0};  // steady clock
};

class FollowerStreams {
 public:
  // A member's stream at `node`'s cross rank, attached at `now_ms`; null
  // when that cross rank has one already. `told`: the failure told to
  // every stream before this one attached (tellEveryone), for the caller to
  // send it.
  std::shared_ptr<Follower> attachMember(const v1::NodeInfo& node, std::shared_ptr<FollowerStream> stream,
                                         int64_t now_ms, std::optional<SharedMessage>* told) GS_EXCLUDES(mutex_);
  // A candidate's stream, attached at `now_ms` (`told`: as above); null
  // when `address` is no candidate or its stream is attached already.
  std::shared_ptr<Follower> attachCandidate(const std::string& address, std::shared_ptr<FollowerStream> stream,
                                            int64_t now_ms, std::optional<SharedMessage>* told) GS_EXCLUDES(mutex_);
  // Sends the job's `failure` to every member and candidate but `teller`
  // (the follower that told the leader), and to each stream that attaches
  // from now on: every follower hears it, whenever its stream opens.
  void tellEveryone(const SharedMessage& failure, const Follower* teller) GS_EXCLUDES(mutex_);
  // A node joining the running job for new ranks (a second join from the
  // same address replaces the first).
  void addCandidate(const v1::NodeInfo& node) GS_EXCLUDES(mutex_);
  // Forgets `candidate`; false when its address's candidate is another one
  // by now (or none).
  bool dropCandidate(const Follower* candidate) GS_EXCLUDES(mutex_);
  // This daemon leads by failover from `now_ms`: the members' streams open
  // to it anew (absentSinceTakeover names those that do not).
  void takeOver(int64_t now_ms) GS_EXCLUDES(mutex_);
  // This daemon woke from a pause at `now_ms`: the followers' silence
  // before it is not theirs.
  void resumedAt(int64_t now_ms) GS_EXCLUDES(mutex_);

  // The members' streams (in cross-rank order), and with `candidates` the
  // candidates' after them.
  std::vector<std::shared_ptr<Follower>> streams(bool candidates) const GS_EXCLUDES(mutex_);
  // The members' streams at the cross ranks `cross_ranks` (any order;
  // those without a stream are left out).
  std::vector<std::shared_ptr<Follower>> atCrossRanks(const std::vector<int>& cross_ranks) const GS_EXCLUDES(mutex_);
  // The member whose node holds `rank` (null: none).
  std::shared_ptr<Follower> holdingRank(int rank) const GS_EXCLUDES(mutex_);
  size_t memberCount() const GS_EXCLUDES(mutex_);
  bool hasMember(int cross_rank) const GS_EXCLUDES(mutex_);
  // How many members with an attached stream, `lost` (a peer address) not
  // counted, were heard within `limit_ms` of `now_ms`.
  size_t reachedWithin(const std::string& lost, int64_t now_ms, int64_t limit_ms) const GS_EXCLUDES(mutex_);
  // How long ago the member at `cross_rank` was heard (-1: no stream).
  int64_t heardAgeMs(int cross_rank, int64_t now_ms) const GS_EXCLUDES(mutex_);
  // How long `follower` has been silent at `now_ms` (since this daemon's
  // last pause at most).
  int64_t silentMs(const Follower& follower, int64_t now_ms) const GS_EXCLUDES(mutex_);
  // The nodes of `members` (cross rank 0, the leader, aside) whose stream
  // is not open `limit_ms` after the takeover and this daemon's last
  // pause; none for a leader that led from the start.
  std::vector<v1::NodeInfo> absentSinceTakeover(const std::vector<v1::NodeInfo>& members, int64_t now_ms,
                                                int64_t limit_ms) const GS_EXCLUDES(mutex_);

  // `book`'s new epoch: members and candidates it holds are renumbered as
  // in it (candidates it admitted are members now), the others marked
  // removed with its reason and dropped.
  struct Renumbered {
    std::vector<std::shared_ptr<Follower>> kept;
    std::vector<std::pair<std::shared_ptr<Follower>, std::string>> removed;  // and why
  };
  Renumbered renumber(const membership::EpochBook& book) GS_EXCLUDES(mutex_);

 private:
  mutable Mutex mutex_;
  std::map<int, std::shared_ptr<Follower>> members_ GS_GUARDED_BY(mutex_);             // by cross rank
  std::map<std::string, std::shared_ptr<Follower>> candidates_ GS_GUARDED_BY(mutex_);  // by peer address
  int64_t took_over_ms_ GS_GUARDED_BY(mutex_) = 0;           // steady clock; 0: led from the start
  int64_t resumed_ms_ GS_GUARDED_BY(mutex_) = 0;             // the last pause's end
  std::optional<SharedMessage> told_ GS_GUARDED_BY(mutex_);  // tellEveryone's last
};

}  // namespace gradsync::peer
