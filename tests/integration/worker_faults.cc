// SPDX-License-Identifier: Apache-2.0
// Worker scenarios for process sets, join, disagreements and failures.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tests/integration/worker_util.h"

namespace gradsync::worker {
namespace {

gradsync_op_t allreduceOp(const char* name, std::vector<float>& data, const std::vector<int64_t>& shape) {
  gradsync_op_t op = makeOp(GRADSYNC_ALLREDUCE, name, data.data(), GRADSYNC_FLOAT32, shape);
  op.reduce_op = GRADSYNC_SUM;
  return op;
}

const std::vector<int64_t>& shape8() {
  static const std::vector<int64_t> shape = {8};
  return shape;
}

int processSets(Client& c, const std::vector<std::string>&) {
  const std::vector<int64_t> shape = {16};
  std::vector<float> data(16, static_cast<float>(c.rank() + 1));
  if (c.rank() == 0 || c.rank() == 2) {
    gradsync_op_t op = allreduceOp("ps", data, shape);
    op.reduce_op = GRADSYNC_AVERAGE;
    op.process_set = 1;
    Operation h;
    WORKER_OK(c.start(op, &h));
    WORKER_OK(h.wait(30));
    WORKER_CHECK(data[0] == 2.0f, "average over set {0, 2} = %g, want 2", data[0]);
  } else {
    gradsync_op_t op = allreduceOp("outsider", data, shape);
    op.process_set = 1;
    Operation h;
    WORKER_OK(c.start(op, &h));
    Result r = h.wait(30);
    WORKER_CHECK(
        r.code == GRADSYNC_INVALID_ARGUMENT && r.message.find("not a member of process set 1") != std::string::npos,
        "outsider got %d: %s", r.code, r.message.c_str());
  }
  if (c.rank() == 0 || c.rank() == 2) {
    // Broadcast and allgather inside the set: rank 1's data never appears.
    std::vector<float> b(8, static_cast<float>(c.rank() * 10));
    gradsync_op_t bcast = makeOp(GRADSYNC_BROADCAST, "ps.bcast", b.data(), GRADSYNC_FLOAT32, shape8());
    bcast.root_rank = 2;
    bcast.process_set = 1;
    Operation hb;
    WORKER_OK(c.start(bcast, &hb));
    WORKER_OK(hb.wait(30));
    WORKER_CHECK(b[7] == 20.0f, "set broadcast = %g", b[7]);
    std::vector<int32_t> mine(2, c.rank());
    const std::vector<int64_t> two = {2};
    gradsync_op_t gather = makeOp(GRADSYNC_ALLGATHER, "ps.gather", mine.data(), GRADSYNC_INT32, two);
    gather.process_set = 1;
    Operation hg;
    WORKER_OK(c.start(gather, &hg));
    WORKER_OK(hg.wait(30));
    gradsync_result_t out;
    WORKER_OK(hg.output(&out));
    const auto* got = static_cast<const int32_t*>(out.data);
    WORKER_CHECK(out.shape[0] == 4 && got[0] == 0 && got[1] == 0 && got[2] == 2 && got[3] == 2,
                 "set allgather shape %ld: %d %d %d %d", static_cast<long>(out.shape[0]), got[0], got[1], got[2],
                 got[3]);
  }
  std::vector<float> all(4, 1.0f);
  WORKER_OK(c.allreduce("global_after_sets", all.data(), GRADSYNC_FLOAT32, {4}));
  WORKER_CHECK(all[0] == c.size(), "global allreduce = %g", all[0]);
  return 0;
}

// Runs `op` in process set 1, waits at most 5 s; its output when it has one.
Result runInSet(Client& c, gradsync_op_t op, gradsync_result_t* out = nullptr) {
  op.process_set = 1;
  Operation h;
  Result r = c.start(op, &h);
  if (r.ok()) r = h.wait(5);
  if (r.ok() && out != nullptr) r = h.output(out);
  return r;
}

// Waits up to 30 s for the file the test names in $GRADSYNC_TEST_GO (with
// `suffix`: a marker another rank makes with mark(suffix)).
int waitForGo(const std::string& suffix = "") {
  const char* go = std::getenv("GRADSYNC_TEST_GO");
  WORKER_CHECK(go != nullptr, "GRADSYNC_TEST_GO not set");
  const std::string path = go + suffix;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (access(path.c_str(), F_OK) != 0) {
    WORKER_CHECK(std::chrono::steady_clock::now() < give_up, "no file %s", path.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

// Makes the marker $GRADSYNC_TEST_GO + `suffix` for another rank's
// waitForGo(suffix).
int mark(const std::string& suffix) {
  const char* go = std::getenv("GRADSYNC_TEST_GO");
  WORKER_CHECK(go != nullptr, "GRADSYNC_TEST_GO not set");
  std::FILE* f = std::fopen((go + suffix).c_str(), "w");
  WORKER_CHECK(f != nullptr, "cannot make %s%s", go, suffix.c_str());
  std::fclose(f);
  return 0;
}

// Three ranks on three daemons; static set 1 is {0, 2}. Rank 1 idles while
// the set runs every collective: the test stops rank 1's daemon (SIGSTOP)
// once ranks 0 and 2 say SET_READY and creates $GRADSYNC_TEST_GO; a ring or
// mesh through that daemon would time out. Then every rank meets again.
int setWithoutOutsider(Client& c, const std::vector<std::string>&) {
  std::vector<float> warm(4, 1.0f);
  WORKER_OK(c.allreduce("before_set", warm.data(), GRADSYNC_FLOAT32, {4}));
  if (c.rank() != 1) {
    std::printf("SET_READY\n");
    std::fflush(stdout);
    if (int rc = waitForGo(); rc != 0) return rc;
    const float me = static_cast<float>(c.rank() + 1);  // 1 and 3
    for (int step = 0; step < 2; ++step) {
      const std::vector<int64_t> small_shape = {16}, large_shape = {1 << 18};
      std::vector<float> small(16, me);  // the direct exchange
      const std::string small_name = "set.small." + std::to_string(step);
      WORKER_OK(runInSet(c, allreduceOp(small_name.c_str(), small, small_shape)));
      WORKER_CHECK(small[15] == 4.0f, "set allreduce (small) = %g", small[15]);
      std::vector<float> large(1 << 18, me);  // 1 MiB: the ring
      const std::string large_name = "set.large." + std::to_string(step);
      WORKER_OK(runInSet(c, allreduceOp(large_name.c_str(), large, large_shape)));
      WORKER_CHECK(large[0] == 4.0f && large.back() == 4.0f, "set allreduce (large) = %g", large[0]);
    }
    std::vector<float> b(8, me);
    gradsync_op_t bcast = makeOp(GRADSYNC_BROADCAST, "set.bcast", b.data(), GRADSYNC_FLOAT32, shape8());
    bcast.root_rank = 2;
    WORKER_OK(runInSet(c, bcast));
    WORKER_CHECK(b[0] == 3.0f && b[7] == 3.0f, "set broadcast = %g", b[0]);
    const std::vector<int64_t> two = {2};  // ops point at their shape
    std::vector<float> mine(2, me);
    gradsync_result_t out;
    WORKER_OK(runInSet(c, makeOp(GRADSYNC_ALLGATHER, "set.gather", mine.data(), GRADSYNC_FLOAT32, two), &out));
    const auto* got = static_cast<const float*>(out.data);
    WORKER_CHECK(out.shape[0] == 4 && got[0] == 1 && got[1] == 1 && got[2] == 3 && got[3] == 3,
                 "set allgather %g %g %g %g", got[0], got[1], got[2], got[3]);
    std::vector<float> blocks = {me, me + 10};  // one row to each member
    WORKER_OK(runInSet(c, makeOp(GRADSYNC_ALLTOALL, "set.a2a", blocks.data(), GRADSYNC_FLOAT32, two), &out));
    got = static_cast<const float*>(out.data);
    const float from_first = c.rank() == 0 ? 1 : 11, from_second = c.rank() == 0 ? 3 : 13;
    WORKER_CHECK(out.shape[0] == 2 && got[0] == from_first && got[1] == from_second, "set alltoall %g %g", got[0],
                 got[1]);
    std::vector<float> rows = {me, 2 * me};  // row i to member i
    gradsync_op_t rs = makeOp(GRADSYNC_REDUCESCATTER, "set.rs", rows.data(), GRADSYNC_FLOAT32, two);
    rs.reduce_op = GRADSYNC_SUM;
    WORKER_OK(runInSet(c, rs, &out));
    got = static_cast<const float*>(out.data);
    WORKER_CHECK(out.shape[0] == 1 && got[0] == (c.rank() == 0 ? 4.0f : 8.0f), "set reducescatter %g", got[0]);
    std::printf("SET_DONE\n");
    std::fflush(stdout);
  }
  std::vector<float> all(4, 1.0f);
  WORKER_OK(c.allreduce("after_set", all.data(), GRADSYNC_FLOAT32, {4}));
  WORKER_CHECK(all[0] == 3.0f, "global allreduce after the set = %g", all[0]);
  return 0;
}

// Three ranks; static set 1 is {0, 2}. Sets added and removed at run time
// through the C ABI, with the errors each rank must see.
int dynamicProcessSets(Client& c, const std::vector<std::string>&) {
  const int rank = c.rank();
  int32_t id = -1;
  WORKER_OK(c.addProcessSet({2, 1}, &id, 30));  // unsorted: the set is {1, 2}
  WORKER_CHECK(id == 2, "first added set got id %d, want 2 (after static set 1)", id);
  std::vector<float> data(8, static_cast<float>(rank + 1));
  if (rank != 0) {
    gradsync_op_t op = allreduceOp("dyn.sum", data, shape8());
    op.process_set = id;
    Operation h;
    WORKER_OK(c.start(op, &h));
    WORKER_OK(h.wait(30));
    WORKER_CHECK(data[0] == 5.0f, "sum over the added set {1, 2} = %g, want 5", data[0]);
  }
  int32_t unused = -1;
  Result r = c.addProcessSet({1, 2}, &unused, 30);
  WORKER_CHECK(r.code == GRADSYNC_ALREADY_EXISTS && r.message.find("exists already: id 2") != std::string::npos,
               "duplicate set: %d %s", r.code, r.message.c_str());
  // One rank's bad argument fails everyone's call at once, naming it.
  r = c.addProcessSet(rank == 0 ? std::vector<int32_t>{0, 7} : std::vector<int32_t>{0, 1}, &unused, 30);
  if (rank == 0) {
    WORKER_CHECK(r.code == GRADSYNC_INVALID_ARGUMENT && r.message.find("rank 7 outside [0, 3)") != std::string::npos,
                 "bad ranks on rank 0: %d %s", r.code, r.message.c_str());
  } else {
    WORKER_CHECK(r.code == GRADSYNC_FAILED_PRECONDITION &&
                     r.message.find("rank 0 failed its process set add at the call") != std::string::npos,
                 "others after rank 0's bad call: %d %s", r.code, r.message.c_str());
  }
  // Removing a set fails its work still waiting for ranks (rank 2 never
  // submits "dyn.doomed"), naming the removal.
  Operation doomed;
  std::vector<float> d(8, 1.0f);
  if (rank == 1) {
    gradsync_op_t op = allreduceOp("dyn.doomed", d, shape8());
    op.process_set = id;
    WORKER_OK(c.start(op, &doomed));
  }
  WORKER_OK(c.removeProcessSet(id, 30));
  if (rank == 1) {
    r = doomed.wait(30);
    WORKER_CHECK(r.code == GRADSYNC_FAILED_PRECONDITION &&
                     r.message.find("process set 2 [1, 2] was removed") != std::string::npos,
                 "work in flight on the removed set: %d %s", r.code, r.message.c_str());
  }
  r = c.removeProcessSet(id, 30);
  WORKER_CHECK(r.code == GRADSYNC_NOT_FOUND, "removing twice: %d %s", r.code, r.message.c_str());
  if (rank != 0) {
    gradsync_op_t op = allreduceOp("dyn.stale", data, shape8());
    op.process_set = id;
    Operation h;
    WORKER_OK(c.start(op, &h));
    r = h.wait(30);
    WORKER_CHECK(r.code == GRADSYNC_INVALID_ARGUMENT && r.message.find("unknown process set 2") != std::string::npos,
                 "the removed id: %d %s", r.code, r.message.c_str());
  }
  int32_t again = -1;
  WORKER_OK(c.addProcessSet({1, 2}, &again, 30));
  WORKER_CHECK(again == 3, "re-added set got id %d, want 3 (ids are not reused)", again);
  int32_t members[4] = {0};
  int32_t count = 0;
  WORKER_OK(Result::fromCode(gradsync_process_set_ranks(c.raw(), again, members, 4, &count)));
  WORKER_CHECK(count == 2 && members[0] == 1 && members[1] == 2, "ranks of set 3: %d", count);
  std::vector<float> all(4, 1.0f);
  WORKER_OK(c.allreduce("dyn.global_after", all.data(), GRADSYNC_FLOAT32, {4}));
  WORKER_CHECK(all[0] == c.size(), "global allreduce = %g", all[0]);
  return 0;
}

// Elastic job (GRADSYNC_ELASTIC=1, GRADSYNC_MIN_SIZE=2) of three ranks: rank
// 1 dies; the survivors see a retriable error, have their old-epoch
// enqueues refused, rejoin at size 2 (old rank 2 is rank 1 now) and go on.
int elasticShrink(Client& c, const std::vector<std::string>&) {
  WORKER_CHECK(gradsync_epoch(c.raw()) == 1, "epoch %llu at the start", (unsigned long long)gradsync_epoch(c.raw()));
  std::vector<float> data(8, 1.0f);
  WORKER_OK(c.allreduce("el.before", data.data(), GRADSYNC_FLOAT32, {8}));
  WORKER_CHECK(data[0] == 3.0f, "sum of three = %g", data[0]);
  const int first_rank = c.rank();
  if (first_rank == 1) {
    // A collective completes on a rank before its last bytes have reached
    // every other node; a rank lost in that window fails it (retriable) on
    // the ranks still receiving. This scenario wants the clean case: it
    // dies once the others have their result.
    if (int rc = waitForGo(".before.0"); rc != 0) return rc;
    if (int rc = waitForGo(".before.2"); rc != 0) return rc;
    raise(SIGKILL);
  }
  if (int rc = mark(".before." + std::to_string(first_rank)); rc != 0) return rc;
  Result r = c.allreduce("el.lost", data.data(), GRADSYNC_FLOAT32, {8});
  // In flight when rank 1 died, or started after (then refused as stale).
  WORKER_CHECK(r.code == GRADSYNC_MEMBERSHIP_CHANGED, "the collective rank 1 never joined: %d %s", r.code,
               r.message.c_str());
  r = c.allreduce("el.stale", data.data(), GRADSYNC_FLOAT32, {8});
  WORKER_CHECK(r.code == GRADSYNC_MEMBERSHIP_CHANGED &&
                   r.message.find("belongs to epoch 1, the job is at epoch 2") != std::string::npos,
               "an old-epoch enqueue: %d %s", r.code, r.message.c_str());
  WORKER_OK(Result::fromCode(gradsync_rejoin(c.raw(), 30)));
  WORKER_CHECK(gradsync_epoch(c.raw()) == 2 && c.size() == 2 && c.rank() == (first_rank == 0 ? 0 : 1),
               "after rejoin: epoch %llu rank %d size %d", (unsigned long long)gradsync_epoch(c.raw()), c.rank(),
               c.size());
  std::fill(data.begin(), data.end(), static_cast<float>(c.rank() + 1));
  WORKER_OK(c.allreduce("el.after", data.data(), GRADSYNC_FLOAT32, {8}));
  WORKER_CHECK(data[0] == 3.0f, "sum over the survivors = %g, want 1 + 2", data[0]);
  WORKER_OK(c.barrier());
  return 0;
}

int join(Client& c, const std::vector<std::string>&) {
  // Rank r runs r + 1 steps, then joins; step k is reduced over ranks >= k.
  for (int k = 0; k <= c.rank(); ++k) {
    std::vector<float> data(8, static_cast<float>(c.rank() + 1));
    const std::string name = "step." + std::to_string(k);
    WORKER_OK(c.allreduce(name.c_str(), data.data(), GRADSYNC_FLOAT32, {8}));
    float want = 0;
    for (int r = k; r < c.size(); ++r) want += r + 1;
    WORKER_CHECK(data[7] == want, "step %d = %g, want %g", k, data[7], want);
  }
  gradsync_op_t op;
  gradsync_op_init(&op);
  op.collective = GRADSYNC_JOIN;
  Operation h;
  WORKER_OK(c.start(op, &h));
  WORKER_OK(h.wait(30));
  gradsync_result_t out;
  WORKER_OK(h.output(&out));
  WORKER_CHECK(out.last_joined_rank == c.size() - 1, "last joined rank %d", out.last_joined_rank);
  return 0;
}

int expectFailure(Client& c, gradsync_op_t op, int code, const std::string& text) {
  Operation h;
  WORKER_OK(c.start(op, &h));
  Result r = h.wait(30);
  WORKER_CHECK(r.code == code && r.message.find(text) != std::string::npos, "'%s' got %d: %s (wanted %d with '%s')",
               op.name, r.code, r.message.c_str(), code, text.c_str());
  std::fprintf(stderr, "[rank %d] expected error: %s\n", c.rank(), r.message.c_str());
  return 0;
}

int mismatch(Client& c, const std::vector<std::string>&) {
  std::vector<double> wide(4, 1.0);
  std::vector<float> narrow(5, 1.0f);
  const std::vector<int64_t> four = {4}, five = {5};
  gradsync_op_t op = c.rank() == 1 ? makeOp(GRADSYNC_ALLREDUCE, "mm.dtype", wide.data(), GRADSYNC_FLOAT64, four)
                                   : makeOp(GRADSYNC_ALLREDUCE, "mm.dtype", narrow.data(), GRADSYNC_FLOAT32, four);
  if (expectFailure(c, op, GRADSYNC_FAILED_PRECONDITION,
                    "'mm.dtype': ranks disagree on dtype: float32 on ranks [0, 2]; float64 on ranks [1]"))
    return 1;
  op = makeOp(GRADSYNC_ALLREDUCE, "mm.shape", narrow.data(), GRADSYNC_FLOAT32, c.rank() == 0 ? five : four);
  if (expectFailure(c, op, GRADSYNC_FAILED_PRECONDITION, "shape: [5] on ranks [0]; [4] on ranks [1, 2]")) return 1;
  op = makeOp(GRADSYNC_BROADCAST, "mm.root", narrow.data(), GRADSYNC_FLOAT32, four);
  op.root_rank = c.rank() == 2 ? 1 : 0;
  if (expectFailure(c, op, GRADSYNC_FAILED_PRECONDITION, "root rank: 0 on ranks [0, 1]; 1 on ranks [2]")) return 1;
  op = makeOp(GRADSYNC_ALLREDUCE, "mm.op", narrow.data(), GRADSYNC_FLOAT32, four);
  op.reduce_op = c.rank() == 0 ? GRADSYNC_MAX : GRADSYNC_SUM;
  if (expectFailure(c, op, GRADSYNC_FAILED_PRECONDITION, "reduce op: max on ranks [0]; sum on ranks [1, 2]")) return 1;
  // The job goes on.
  std::vector<float> ok(4, 1.0f);
  WORKER_OK(c.allreduce("after.mismatch", ok.data(), GRADSYNC_FLOAT32, {4}));
  WORKER_CHECK(ok[0] == c.size(), "after mismatch: %g", ok[0]);
  return 0;
}

int mismatchAllreduce(Client& c, const std::vector<std::string>&) {
  std::vector<double> wide(4, 1.0);
  std::vector<float> narrow(5, 1.0f);
  const std::vector<int64_t> four = {4};
  gradsync_op_t op = c.rank() == 1 ? makeOp(GRADSYNC_ALLREDUCE, "mm.dtype", wide.data(), GRADSYNC_FLOAT64, four)
                                   : makeOp(GRADSYNC_ALLREDUCE, "mm.dtype", narrow.data(), GRADSYNC_FLOAT32, four);
  if (expectFailure(c, op, GRADSYNC_FAILED_PRECONDITION, "dtype: float32 on ranks [0, 2]; float64 on ranks [1]"))
    return 1;
  std::vector<float> ok(4, 1.0f);
  WORKER_OK(c.allreduce("after.mismatch", ok.data(), GRADSYNC_FLOAT32, {4}));
  WORKER_CHECK(ok[0] == c.size(), "after mismatch: %g", ok[0]);
  return 0;
}

int duplicate(Client& c, const std::vector<std::string>&) {
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  const std::vector<int64_t> shape = {4};
  // Rank 0 submits "dup" twice before any other rank submits it (the others
  // wait for the barrier), so the first is surely still in flight.
  Operation first;
  if (c.rank() == 0) {
    WORKER_OK(c.start(allreduceOp("dup", a, shape), &first));
    if (expectFailure(c, allreduceOp("dup", b, shape), GRADSYNC_ALREADY_EXISTS,
                      "already has a collective of this name in flight"))
      return 1;
  }
  WORKER_OK(c.barrier());
  if (c.rank() != 0) WORKER_OK(c.start(allreduceOp("dup", a, shape), &first));
  WORKER_OK(first.wait(30));
  WORKER_CHECK(a[0] == c.size(), "dup result %g", a[0]);
  // Bad requests fail alone, at once: unknown dtype, bool sum, bad splits.
  gradsync_op_t bad = allreduceOp("bad.dtype", a, shape);
  bad.dtype = 42;
  Operation h;
  Result r = c.start(bad, &h);
  WORKER_CHECK(r.code == GRADSYNC_INVALID_ARGUMENT, "unknown dtype accepted: %d %s", r.code, r.message.c_str());
  std::vector<uint8_t> flags(4, 1);
  gradsync_op_t bool_sum = makeOp(GRADSYNC_ALLREDUCE, "bad.bool", flags.data(), GRADSYNC_BOOL, shape);
  if (expectFailure(c, bool_sum, GRADSYNC_INVALID_ARGUMENT, "reduce op sum is not allowed on bool")) return 1;
  const int64_t splits[] = {1, 1, 1};
  gradsync_op_t a2a = makeOp(GRADSYNC_ALLTOALL, "bad.splits", a.data(), GRADSYNC_FLOAT32, shape);
  a2a.splits = splits;
  a2a.num_splits = 3;
  if (expectFailure(c, a2a, GRADSYNC_INVALID_ARGUMENT, "alltoall splits")) return 1;
  WORKER_OK(c.barrier());
  return 0;
}

// Rank 0 waits on a collective that rank 1 never joins; the test kills
// rank 1 with SIGKILL once rank 0 printed ENQUEUED.
// Rank 0's collective waits for rank 1, which never submits it; the test
// kills rank 1's daemon. "cached": that collective repeats three steps both
// ranks ran, so across daemons it is held for the rounds when the daemon dies.
// Two daemons, two ranks each (placement {0, 0, 1, 1}). Rank 3 submits an
// allgather and stops itself (SIGSTOP): it never answers the output request.
// Once it is stopped the test creates $GRADSYNC_TEST_GO, the others submit,
// and the test SIGKILLs rank 3 while its daemon waits for its output grant.
// One allreduce (the job formed), FORMED, then waits for
// $GRADSYNC_TEST_GO and runs one more: the job went on meanwhile.
int formedThenGo(Client& c, const std::vector<std::string>&) {
  std::vector<float> one(4, 1.0f);
  WORKER_OK(c.allreduce("formed", one.data(), GRADSYNC_FLOAT32, {4}));
  std::printf("FORMED\n");
  std::fflush(stdout);
  if (int rc = waitForGo(); rc != 0) return rc;
  std::vector<float> again(4, 1.0f);
  WORKER_OK(c.allreduce("after.go", again.data(), GRADSYNC_FLOAT32, {4}));
  WORKER_CHECK(again[3] == static_cast<float>(c.size()), "allreduce after GO = %g", again[3]);
  return 0;
}

// Rank 2's allgather fails at once, naming rank 3; ranks 0 and 1 (whose
// daemon got rank 3's input before asking for outputs) may have finished
// theirs; the next collective fails everywhere, naming rank 3.
int grantVictim(Client& c, const std::vector<std::string>&) {
  std::vector<float> warm(4, 1.0f);
  WORKER_OK(c.allreduce("before.grant", warm.data(), GRADSYNC_FLOAT32, {4}));
  const std::vector<int64_t> shape = {256};
  std::vector<float> mine(256, static_cast<float>(c.rank()));
  Operation gather;
  if (c.rank() == 3) {
    WORKER_OK(c.start(makeOp(GRADSYNC_ALLGATHER, "ag.lost", mine.data(), GRADSYNC_FLOAT32, shape), &gather));
    std::printf("VICTIM STOPPING\n");
    std::fflush(stdout);
    ::raise(SIGSTOP);
    ::pause();  // killed by the test
    return 1;
  }
  if (int rc = waitForGo(); rc != 0) return rc;
  WORKER_OK(c.start(makeOp(GRADSYNC_ALLGATHER, "ag.lost", mine.data(), GRADSYNC_FLOAT32, shape), &gather));
  Result r = gather.wait(25);
  std::printf("ALLGATHER %d: %s\n", r.code, r.message.c_str());
  std::fflush(stdout);
  const auto namesRank3 = [](const Result& e) {
    return e.code == GRADSYNC_ABORTED && e.message.find("rank 3") != std::string::npos;
  };
  if (c.rank() == 2 || !r.ok()) {
    WORKER_CHECK(namesRank3(r), "allgather with rank 3 killed ended with %d: %s", r.code, r.message.c_str());
  } else {
    gradsync_result_t out;
    WORKER_OK(gather.output(&out));
    const auto* got = static_cast<const float*>(out.data);
    WORKER_CHECK(out.shape[0] == 4 * 256 && got[3 * 256] == 3.0f && got[4 * 256 - 1] == 3.0f,
                 "allgather rows %ld, rank 3's %g", static_cast<long>(out.shape[0]), got[3 * 256]);
  }
  Result after = c.allreduce("after.grant", warm.data(), GRADSYNC_FLOAT32, {4});
  std::printf("AFTER %d: %s\n", after.code, after.message.c_str());
  std::fflush(stdout);
  WORKER_CHECK(namesRank3(after), "the collective after rank 3's death ended with %d: %s", after.code,
               after.message.c_str());
  return 0;
}

int killVictim(Client& c, const std::vector<std::string>& args) {
  std::vector<float> data(1024, 1.0f);
  const std::vector<int64_t> shape = {1024};
  const bool cached = !args.empty() && args[0] == "cached";
  for (int step = 0; cached && step < 3; ++step) WORKER_OK(c.allreduce("steady", data.data(), GRADSYNC_FLOAT32, shape));
  WORKER_OK(c.barrier());  // both connected
  if (c.rank() != 0) {
    Operation other;
    WORKER_OK(c.start(allreduceOp("only.rank1", data, shape), &other));
    std::printf("VICTIM READY\n");
    std::fflush(stdout);
    ::pause();  // killed by the test
    return 1;
  }
  Operation pending;
  WORKER_OK(c.start(allreduceOp(cached ? "steady" : "pending", data, shape), &pending));
  std::printf("ENQUEUED\n");
  std::fflush(stdout);
  Result r = pending.wait(20);
  std::printf("ERROR %d: %s\n", r.code, r.message.c_str());
  std::fflush(stdout);
  WORKER_CHECK(r.code == GRADSYNC_ABORTED, "pending collective ended with %d: %s", r.code, r.message.c_str());
  // New work fails at once with the same cause.
  Result again = c.allreduce("after.death", data.data(), GRADSYNC_FLOAT32, shape);
  // Named as "rank 1 (pid ...)" on one node, "node ... (ranks [1])" across nodes.
  WORKER_CHECK(again.code == GRADSYNC_ABORTED && (again.message.find("rank 1") != std::string::npos ||
                                                  again.message.find("ranks [1]") != std::string::npos),
               "after death: %d %s", again.code, again.message.c_str());
  return 0;
}

// Rank 0 submits a collective rank 1 never submits; the daemon's stall
// deadline fails it, naming rank 1. Rank 1 stays connected (submitting
// nothing) until rank 0 creates the marker file args[0].
int stall(Client& c, const std::vector<std::string>& args) {
  WORKER_CHECK(args.size() == 1, "usage: stall MARKER_FILE");
  std::vector<float> data(4, 1.0f);
  const std::vector<int64_t> shape = {4};
  if (c.rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    if (expectFailure(c, allreduceOp("lonely", data, shape), GRADSYNC_DEADLINE_EXCEEDED, "for ranks [1]")) return 1;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    WORKER_CHECK(waited >= 1.5 && waited < 10, "stall deadline after %.1f s", waited);
    std::FILE* marker = std::fopen(args[0].c_str(), "w");
    WORKER_CHECK(marker != nullptr, "cannot create %s", args[0].c_str());
    std::fclose(marker);
  } else {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (::access(args[0].c_str(), F_OK) != 0) {
      WORKER_CHECK(std::chrono::steady_clock::now() < deadline, "rank 0 never finished");
      ::usleep(1000);
    }
  }
  WORKER_OK(c.barrier());
  return 0;
}

// Multi-node joins that fail: the follower's ranks (rank != 0) learn why at
// once; rank 0, if present, sees its collective fail naming the ranks that
// never came: at the stall deadline ("for ranks [1]") or at the join timeout
// ("the nodes of ranks [1] never joined"), whichever is first.
int joinFailure(Client& c, const std::vector<std::string>& args) {
  WORKER_CHECK(args.size() == 1, "usage: join_failure EXPECTED_TEXT");
  std::vector<float> data(4, 1.0f);
  const std::vector<int64_t> shape = {4};
  if (c.rank() != 0) return expectFailure(c, allreduceOp("never", data, shape), GRADSYNC_ABORTED, args[0]);
  Operation h;
  WORKER_OK(c.start(allreduceOp("never", data, shape), &h));
  Result r = h.wait(30);
  WORKER_CHECK((r.code == GRADSYNC_DEADLINE_EXCEEDED || r.code == GRADSYNC_ABORTED) &&
                   r.message.find("ranks [1]") != std::string::npos,
               "'never' got %d: %s", r.code, r.message.c_str());
  return 0;
}

// Run with --max-inflight-per-rank 4: rank 0's fifth operation in flight
// fails at once; the four complete once rank 1, which starts only then
// ($GRADSYNC_TEST_GO), joins them.
int inflightLimit(Client& c, const std::vector<std::string>&) {
  std::vector<std::vector<float>> data(5, std::vector<float>(8, 1.0f));
  const char* names[] = {"in.0", "in.1", "in.2", "in.3", "in.4"};
  const int count = c.rank() == 0 ? 5 : 4;
  if (c.rank() != 0) {
    if (int rc = waitForGo(); rc != 0) return rc;
  }
  std::vector<Operation> ops(count);
  for (int i = 0; i < count; ++i) WORKER_OK(c.start(allreduceOp(names[i], data[i], shape8()), &ops[i]));
  if (c.rank() == 0) {
    Result r = ops[4].wait(10);
    WORKER_CHECK(r.code == GRADSYNC_RESOURCE_EXHAUSTED && r.message.find("max_inflight_per_rank") != std::string::npos,
                 "fifth operation got %d: %s", r.code, r.message.c_str());
    WORKER_CHECK(!ops[0].done(), "in.0 finished without rank 1");
    if (int rc = mark(""); rc != 0) return rc;
  }
  for (int i = 0; i < 4; ++i) WORKER_OK(ops[i].wait(30));
  WORKER_CHECK(data[3][0] == 2.0f, "in.3 = %g", data[3][0]);
  return 0;
}

// An allreduce that must fail ABORTED with TEXT in its message (a job that
// never formed, a leader lost while forming).
int abortedWith(Client& c, const std::vector<std::string>& args) {
  WORKER_CHECK(args.size() == 1, "usage: aborted_with TEXT");
  std::vector<float> data(8, 1.0f);
  return expectFailure(c, allreduceOp("formation", data, shape8()), GRADSYNC_ABORTED, args[0]);
}

// The fault campaign's job (tests/fault/fault_campaign_test.cc): a large
// allreduce (ring transfers in chunks), a small one and a broadcast, step
// after step, until one fails: it prints "ERROR code: message" and exits 3.
// Prints RUNNING once the first step completed.
// Collectives in a loop until they fail (prints "ERROR code: message",
// exits 3) or, with a file path in args[0], until that file exists on any
// rank (all ranks agree through an allreduce, print "DONE", exit 0). Prints
// "RUNNING" after the first step and "STEP n" after each.
int campaignLoop(Client& c, const std::vector<std::string>& args) {
  const std::string stop_file = args.empty() ? "" : args[0];
  // "medium": a 64 KiB allreduce too (halving and doubling among 4 or more daemons).
  const bool medium = args.size() > 1 && args[1] == "medium";
  const std::vector<int64_t> big_shape = {1 << 18};
  const std::vector<int64_t> medium_shape = {1 << 14};
  const std::vector<int64_t> one = {1};
  std::vector<float> big(1 << 18), mid(1 << 14), small(8), stop(1);
  for (int step = 0;; ++step) {
    std::fill(big.begin(), big.end(), static_cast<float>(c.rank()));
    std::fill(mid.begin(), mid.end(), static_cast<float>(c.rank() + 1));
    std::fill(small.begin(), small.end(), static_cast<float>(step));
    stop[0] = !stop_file.empty() && ::access(stop_file.c_str(), F_OK) == 0 ? 1.0f : 0.0f;
    std::vector<gradsync_op_t> ops = {
        allreduceOp("campaign.big", big, big_shape), allreduceOp("campaign.small", small, shape8()),
        makeOp(GRADSYNC_BROADCAST, "campaign.bcast", small.data(), GRADSYNC_FLOAT32, shape8()),
        allreduceOp("campaign.stop", stop, one)};
    ops[2].root_rank = step % c.size();
    if (medium) ops.insert(ops.begin() + 1, allreduceOp("campaign.medium", mid, medium_shape));
    for (const gradsync_op_t& op : ops) {
      Operation h;
      Result r = c.start(op, &h);
      if (r.ok()) r = h.wait(120);  // far past every bound the campaign checks
      if (!r.ok()) {
        std::printf("ERROR %d: %s\n", r.code, r.message.c_str());
        std::fflush(stdout);
        return 3;
      }
    }
    const float want = c.size() * (c.size() - 1) / 2.0f;
    WORKER_CHECK(big[0] == want && big.back() == want, "step %d: allreduce gave %g, want %g", step, big[0], want);
    const float want_mid = want + c.size();
    WORKER_CHECK(!medium || (mid[0] == want_mid && mid.back() == want_mid),
                 "step %d: medium allreduce gave %g, want %g", step, mid[0], want_mid);
    if (step == 0) std::printf("RUNNING\n");
    std::printf("STEP %d\n", step);
    std::fflush(stdout);
    if (stop[0] > 0) {
      std::printf("DONE after %d steps\n", step + 1);
      return 0;
    }
  }
}

// The last rank cannot start 'ab.x' (say its arguments were wrong) and
// abandons it: every rank's 'ab.x' fails at once with the reason, naming
// it, and the job goes on.
int abandoned(Client& c, const std::vector<std::string>&) {
  std::vector<float> data(8, 1.0f);
  gradsync_op_t op = allreduceOp("ab.x", data, shape8());
  Operation h;
  const auto started = std::chrono::steady_clock::now();
  if (c.rank() == c.size() - 1) {
    WORKER_OK(c.abandon(op, "ValueError: bad splits", &h));
  } else {
    WORKER_OK(c.start(op, &h));
  }
  Result r = h.wait(30);
  const std::string want = "rank " + std::to_string(c.size() - 1) + " failed its allreduce at the call: ValueError";
  WORKER_CHECK(r.code == GRADSYNC_FAILED_PRECONDITION && r.message.find(want) != std::string::npos, "ab.x got %d: %s",
               r.code, r.message.c_str());
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  WORKER_CHECK(waited < 5, "ab.x failed only after %.1f s", waited);
  WORKER_OK(c.allreduce("ab.after", data.data(), GRADSYNC_FLOAT32, shape8()));
  WORKER_CHECK(data[0] == c.size(), "after: %g", data[0]);
  return 0;
}

// Adasum of float64 tensors x_r[i] = sin(r + 1 + i) against a direct
// reference: the tree of pairwise combinations in rank order.
int adasum(Client& c, const std::vector<std::string>&) {
  const int n = 33;
  auto input = [](int r, int i) { return std::sin(r + 1.0 + i); };
  std::vector<std::vector<double>> v(c.size(), std::vector<double>(n));
  for (int r = 0; r < c.size(); ++r) {
    for (int i = 0; i < n; ++i) v[r][i] = input(r, i);
  }
  for (int level = 1; level < c.size(); level *= 2) {
    for (int r = 0; r < c.size(); r += 2 * level) {
      double dot = 0, aa = 0, bb = 0;
      for (int i = 0; i < n; ++i)
        dot += v[r][i] * v[r + level][i], aa += v[r][i] * v[r][i], bb += v[r + level][i] * v[r + level][i];
      for (int i = 0; i < n; ++i) v[r][i] = (1 - dot / (2 * aa)) * v[r][i] + (1 - dot / (2 * bb)) * v[r + level][i];
    }
  }
  std::vector<double> mine(n);
  for (int i = 0; i < n; ++i) mine[i] = input(c.rank(), i);
  const std::vector<int64_t> shape = {n};  // makeOp keeps a pointer to it
  gradsync_op_t op = makeOp(GRADSYNC_ALLREDUCE, "adasum.x", mine.data(), GRADSYNC_FLOAT64, shape);
  op.reduce_op = GRADSYNC_ADASUM;
  Operation h;
  WORKER_OK(c.start(op, &h));
  WORKER_OK(h.wait(30));
  for (int i = 0; i < n; ++i) {
    WORKER_CHECK(std::fabs(mine[i] - v[0][i]) < 1e-12, "element %d: %.17g, want %.17g", i, mine[i], v[0][i]);
  }
  return 0;
}

// The same tensor, step after step (what the response cache is for).
int repeatAllreduce(Client& c, const std::vector<std::string>&) {
  std::vector<float> data(64);
  for (int step = 0; step < 20; ++step) {
    std::fill(data.begin(), data.end(), static_cast<float>(c.rank() + step));
    WORKER_OK(c.allreduce("w.grad", data.data(), GRADSYNC_FLOAT32, {64}));
    const float want = c.size() * step + c.size() * (c.size() - 1) / 2.0f;
    WORKER_CHECK(data[63] == want, "step %d: %g, want %g", step, data[63], want);
  }
  return 0;
}

// The daemon of this test has no GPU: a CUDA tensor fails at once in the
// client, before any CUDA call (there is no driver here either), and the job
// goes on with CPU tensors.
int cudaWithoutGpu(Client& c, const std::vector<std::string>&) {
  std::vector<float> data(8, 1.0f);
  gradsync_op_t op = allreduceOp("gpu.w", data, shape8());
  op.device = GRADSYNC_DEVICE_CUDA;
  Operation h;
  Result r = c.start(op, &h);
  WORKER_CHECK(r.code == GRADSYNC_FAILED_PRECONDITION && r.message.find("CUDA tensor 'gpu.w': gradsyncd at ") == 0 &&
                   r.message.find("has no GPU") != std::string::npos,
               "CUDA tensor on a GPU-less daemon gave %d: %s", r.code, r.message.c_str());
  op.device = 7;
  r = c.start(op, &h);
  WORKER_CHECK(r.code == GRADSYNC_INVALID_ARGUMENT && r.message.find("unknown device 7") != std::string::npos,
               "device 7 gave %d: %s", r.code, r.message.c_str());
  op.device = GRADSYNC_DEVICE_CPU;
  WORKER_OK(c.start(op, &h));
  WORKER_OK(h.wait(30));
  WORKER_CHECK(data[0] == static_cast<float>(c.size()), "CPU allreduce after the refusal: %g", data[0]);
  return 0;
}

}  // namespace

const std::map<std::string, Scenario>& moreScenarios() {
  static const std::map<std::string, Scenario> scenarios = {
      {"process_sets", processSets},
      {"dynamic_process_sets", dynamicProcessSets},
      {"set_without_outsider", setWithoutOutsider},
      {"elastic_shrink", elasticShrink},
      {"join", join},
      {"mismatch", mismatch},
      {"duplicate", duplicate},
      {"kill_victim", killVictim},
      {"grant_victim", grantVictim},
      {"formed_then_go", formedThenGo},
      {"stall", stall},
      {"mismatch_allreduce", mismatchAllreduce},
      {"join_failure", joinFailure},
      {"repeat_allreduce", repeatAllreduce},
      {"campaign_loop", campaignLoop},
      {"abandoned", abandoned},
      {"adasum", adasum},
      {"aborted_with", abortedWith},
      {"inflight_limit", inflightLimit},
      {"cuda_without_gpu", cudaWithoutGpu},
      {"fake_cuda", fakeCuda},
      {"fake_cuda_across", fakeCudaAcross},
      {"fake_cuda_gpus", fakeCudaGpus},
      {"fake_cuda_sets", fakeCudaSets},
      {"fake_cuda_lead", fakeCudaLead},
      {"fake_cuda_adasum", fakeCudaAdasum},
      {"fake_cuda_exchange", fakeCudaExchange},
      {"fake_cuda_kill", fakeCudaKill},
      {"fake_cuda_hold", fakeCudaHold},
  };
  return scenarios;
}

}  // namespace gradsync::worker
