// SPDX-License-Identifier: Apache-2.0
// What a node's peer side has told the job's other nodes of the job's
// failure, or heard that they all know, and the rules for telling them: each
// kind once (a lost node is news after a departed rank), through the leader,
// and once more around it when a follower lost the leader after telling it
// (the leader, which would have passed it on, is gone); nothing from a
// node the leader removed (its failure is its own, and telling it could fail
// nodes that have not heard of the removal yet); nothing it detects or hears
// once the job stopped here (its streams ending are the job's end). No
// I/O: CrossNode sends what these say to send.
#pragma once

#include <optional>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/peer/outbox.h"

namespace gradsync::peer {

class FailureNotices {
 public:
  enum class Verdict {
    kTell,         // news: recorded as told, for the caller to send
    kToldAlready,  // this kind was told, or heard of from a node that told every other
    kRemoved,      // this node was removed: told to no one (said once, then kToldAlready)
  };
  // Whom a notice goes to: the leader, which tells every other node (a
  // follower's detections, and all of the leader's); or, a follower having
  // lost the leader, the other followers directly.
  enum class Route { kThroughTheLeader, kAroundTheLeader };
  // A failure of the job to tell the other nodes (`node_lost`: a node, the
  // leader or the data plane was lost; always so around the leader).
  Verdict tell(bool node_lost, Route route = Route::kThroughTheLeader) GS_EXCLUDES(mutex_);
  // The other nodes know of a failure: this node heard of it from one that
  // told every other.
  void heard(bool node_lost) GS_EXCLUDES(mutex_);
  // This node learnt that the leader removed it from the job.
  void removed() GS_EXCLUDES(mutex_);
  // The job stopped on this node.
  void jobStopped() GS_EXCLUDES(mutex_);
  // Whether what the peer side detects or hears is still news to tell
  // (false once the job stopped here).
  bool jobRunning() const GS_EXCLUDES(mutex_);
  // Whether a failure was told or heard of: a node whose ranks finished
  // after it is that failure's consequence, not news.
  bool failureKnown() const GS_EXCLUDES(mutex_);
  // Whether the other nodes know that a node was lost (then none waits for
  // this one's last bytes).
  bool nodeLost() const GS_EXCLUDES(mutex_);

 private:
  mutable Mutex mutex_;
  bool told_ GS_GUARDED_BY(mutex_) = false;
  bool node_lost_told_ GS_GUARDED_BY(mutex_) = false;
  bool node_lost_heard_ GS_GUARDED_BY(mutex_) = false;  // from a node that told every other
  bool told_around_ GS_GUARDED_BY(mutex_) = false;
  bool removed_ GS_GUARDED_BY(mutex_) = false;
  bool job_stopped_ GS_GUARDED_BY(mutex_) = false;
};

}  // namespace gradsync::peer
