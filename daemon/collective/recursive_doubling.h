// SPDX-License-Identifier: Apache-2.0
// Recursive doubling among n daemons: every node combines its buffer with
// every other's in log2 n exchanges, each with one partner (two steps more
// where n is not a power of two), where the direct allreduce sends n-1
// messages per node at once. With n not a power
// of two, p the largest power below it, node p+j first swaps buffers with
// node j (j's result absorbs p+j's part) and at the end gets the result
// from it. Partners combine with the lower position's buffer first, so
// every node ends with bitwise the same result.
//
// Every receive of a run is posted when it starts: a node that has not
// begun a run yet learns from any of its messages that another has (the
// steady state's rounds, daemon/peer/fast_rounds.h, wait for that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/collective/pairwise_exchange.h"

namespace gradsync::collective {

// One node's steps, in order.
struct DoublingStep {
  enum Kind {
    kExchange,  // send the buffer to `peer`, receive its buffer, combine
    kSend,      // send the buffer (the result) to `peer`
    kReceive,   // receive the result from `peer`: it replaces the buffer
    kSwap,      // an extra node's first step: send to `peer`, take nothing from it
  };
  Kind kind;
  int peer;
  int stage;  // part of the tag: one message per (sender, stage) in a run
};
std::vector<DoublingStep> doublingSteps(int rank, int n);

// Combines `theirs` into `mine` (in place). `theirs_first`: the partner's
// position is the lower one, and its buffer comes first.
using DoublingCombine = std::function<void(const uint8_t* theirs, uint8_t* mine, bool theirs_first)>;

// One run of recursive doubling of a buffer of `bytes` among the mesh's
// nodes, tagged with the mesh's sequence and `phase`.
class RecursiveDoubling {
 public:
  RecursiveDoubling(const MeshContext& mesh, int phase, size_t bytes);
  ~RecursiveDoubling();  // cancels the receives still posted
  RecursiveDoubling(const RecursiveDoubling&) = delete;
  RecursiveDoubling& operator=(const RecursiveDoubling&) = delete;

  // The run's receives, posted (at most once): any of them completing
  // means a partner began the run.
  std::vector<transport::Request*> postReceives();
  // Runs the steps on `data` (`bytes` long) until the mesh's deadline.
  // `what` names the run in errors. `interrupted`, when given, is asked
  // every few milliseconds while a step waits: a reason it returns ends the
  // run with it (ABORTED).
  Status run(uint8_t* data, const DoublingCombine& combine, const std::string& what,
             const std::function<std::string()>& interrupted = nullptr);
  size_t messagesSent() const { return sent_; }

 private:
  uint64_t tag(int from, int stage) const;

  const MeshContext& mesh_;
  const int phase_;
  const size_t bytes_;
  const std::vector<DoublingStep> steps_;
  std::vector<uint8_t> inbox_;  // a buffer per step
  size_t sent_ = 0;
  // By step (null where the step receives nothing). Declared after inbox_:
  // destroyed first, each cancelled receive waits until UCX lets go of it.
  std::vector<transport::RequestPtr> receives_;
};

// Allreduce of `count` elements of `dtype` at `data` (in place) by
// recursive doubling, with `op` (SUM, MIN, MAX or PRODUCT; AVERAGE and
// scale factors are the caller's). Errors name the nodes.
Status recursiveDoublingAllreduce(const MeshContext& mesh, void* data, size_t count, DataType dtype, ReduceOp op);

}  // namespace gradsync::collective
