/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libgradsync: the stable C ABI of the gradsync client library.
 *
 * A training process (one rank) connects to its node's gradsyncd, hands its
 * tensors over through a shared-memory arena and runs collectives with the
 * other ranks of its job. Every call returns a gradsync_status_t (0 = OK,
 * otherwise a gRPC/absl canonical code); gradsync_last_error() gives the
 * text of the calling thread's last error. Nothing crosses this ABI as a C++
 * exception.
 *
 * Structs passed in start with `struct_size` (and the config with a version)
 * so that fields can be added without breaking callers compiled against an
 * older header: initialise them with gradsync_config_init / gradsync_op_init.
 *
 * Thread safety: a client may be used from several threads at once, except
 * gradsync_shutdown, which must not race with other calls on the client.
 */
#ifndef GRADSYNC_GRADSYNC_H_
#define GRADSYNC_GRADSYNC_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GRADSYNC_CONFIG_VERSION 1
#define GRADSYNC_MAX_DIMS 16

typedef int32_t gradsync_status_t;
enum {
  GRADSYNC_OK = 0,
  GRADSYNC_CANCELLED = 1,
  GRADSYNC_UNKNOWN = 2,
  GRADSYNC_INVALID_ARGUMENT = 3,
  GRADSYNC_DEADLINE_EXCEEDED = 4,
  GRADSYNC_NOT_FOUND = 5,
  GRADSYNC_ALREADY_EXISTS = 6,
  GRADSYNC_PERMISSION_DENIED = 7,
  GRADSYNC_RESOURCE_EXHAUSTED = 8,
  GRADSYNC_FAILED_PRECONDITION = 9,
  GRADSYNC_ABORTED = 10,
  GRADSYNC_OUT_OF_RANGE = 11,
  GRADSYNC_UNIMPLEMENTED = 12,
  GRADSYNC_INTERNAL = 13,
  GRADSYNC_UNAVAILABLE = 14,
  GRADSYNC_DATA_LOSS = 15,
  GRADSYNC_UNAUTHENTICATED = 16,
  /* gradsync's own: an elastic job's membership changed (a rank was lost)
   * while the operation was in flight, or it was started in an epoch that
   * has ended. Retriable: gradsync_rejoin, restore the last committed
   * state, and go on at the new rank and size. */
  GRADSYNC_MEMBERSHIP_CHANGED = 100
};

/* Element types (same values as gradsync.v1.DataType). */
enum {
  GRADSYNC_UINT8 = 1,
  GRADSYNC_INT8 = 2,
  GRADSYNC_UINT16 = 3,
  GRADSYNC_INT16 = 4,
  GRADSYNC_INT32 = 5,
  GRADSYNC_INT64 = 6,
  GRADSYNC_FLOAT16 = 7,
  GRADSYNC_BFLOAT16 = 8,
  GRADSYNC_FLOAT32 = 9,
  GRADSYNC_FLOAT64 = 10,
  GRADSYNC_BOOL = 11
};

/* Reductions (same values as gradsync.v1.ReduceOp). */
/* GRADSYNC_ADASUM: Horovod's Adasum (see types.proto), floating-point CPU
 * allreduces over a power-of-two number of ranks. */
enum {
  GRADSYNC_SUM = 1,
  GRADSYNC_AVERAGE = 2,
  GRADSYNC_MIN = 3,
  GRADSYNC_MAX = 4,
  GRADSYNC_PRODUCT = 5,
  GRADSYNC_ADASUM = 6
};

/* Where a tensor's `data` lives. */
enum { GRADSYNC_DEVICE_CPU = 0, GRADSYNC_DEVICE_CUDA = 1 };

/* Collectives (same values as gradsync.v1.CollectiveType). */
enum {
  GRADSYNC_ALLREDUCE = 1,     /* in place on `data` */
  GRADSYNC_ALLGATHER = 2,     /* result: gradsync_result */
  GRADSYNC_BROADCAST = 3,     /* in place on `data` */
  GRADSYNC_ALLTOALL = 4,      /* result: gradsync_result, with received splits */
  GRADSYNC_REDUCESCATTER = 5, /* result: gradsync_result */
  GRADSYNC_BARRIER = 6,
  GRADSYNC_JOIN = 7 /* result: last_joined_rank */
};

typedef struct gradsync_client gradsync_client_t;
typedef uint64_t gradsync_handle_t;

typedef struct gradsync_config {
  uint32_t struct_size; /* sizeof(gradsync_config_t) */
  uint32_t version;     /* GRADSYNC_CONFIG_VERSION */
  /* NULL / -1 / 0 take the value from the environment (GRADSYNC_SOCKET,
   * GRADSYNC_JOB_ID, GRADSYNC_TOKEN, GRADSYNC_RANK, GRADSYNC_SIZE,
   * GRADSYNC_LOCAL_RANK, GRADSYNC_LOCAL_SIZE, GRADSYNC_ARENA_BYTES). */
  const char* socket_path; /* default /run/gradsync/gradsyncd.sock */
  const char* job_id;
  const char* token;
  int32_t rank;
  int32_t world_size;
  int32_t local_rank;             /* default: rank */
  int32_t local_size;             /* default: world_size */
  uint64_t arena_bytes;           /* shared arena size; default 4 GiB (sparse) */
  double connect_timeout_seconds; /* default 30 */
  /* Static process sets (ids 1..num_process_sets): set i has
   * process_set_sizes[i] ranks listed in process_set_ranks[i], increasing. */
  int32_t num_process_sets;
  const int32_t* process_set_sizes;
  const int32_t* const* process_set_ranks;
  /* Added in 0.3. Jobs across daemons: the peer address (host:port) of the
   * leader's daemon (rank 0's); "": one daemon, whatever GRADSYNC_LEADER
   * says; NULL: GRADSYNC_LEADER, else one daemon. */
  const char* leader_address;
} gradsync_config_t;

typedef struct gradsync_op {
  uint32_t struct_size; /* sizeof(gradsync_op_t) */
  int32_t collective;   /* GRADSYNC_ALLREDUCE, ... */
  const char* name;     /* matched across ranks; unique while in flight.
                           BARRIER/JOIN: may be NULL */
  int32_t dtype;
  int32_t ndim; /* 0..GRADSYNC_MAX_DIMS */
  const int64_t* shape;
  /* Input. ALLREDUCE and BROADCAST write their result here too. A pointer
   * returned by gradsync_alloc is used in place (zero copy); any other
   * pointer is copied into the arena and back. Must stay valid until the
   * operation is waited for. */
  void* data;
  int32_t reduce_op;     /* ALLREDUCE, REDUCESCATTER */
  double prescale;       /* 0 means 1 */
  double postscale;      /* 0 means 1 */
  int32_t root_rank;     /* BROADCAST */
  int32_t process_set;   /* 0: all ranks */
  const int64_t* splits; /* ALLTOALL: rows for each rank of the set, or NULL (even split) */
  int32_t num_splits;
  /* Added in 0.2 (callers built against an older header pass a smaller
   * struct_size and get CPU). GRADSYNC_DEVICE_CUDA: `data` is CUDA device
   * memory of a cudaMalloc allocation (PyTorch's default caching
   * allocator), reduced by gradsyncd in place through CUDA IPC; `stream`
   * (a cudaStream_t, NULL for the legacy default stream) is where the
   * tensor was produced: the daemon starts after the work queued there so
   * far, and gradsync_wait makes `stream` wait for the result (no host
   * synchronisation). */
  int32_t device;
  void* stream;
  /* CUDA ALLGATHER / ALLTOALL / REDUCESCATTER: the caller's output buffer
   * (CUDA memory, same rules as `data`) and its size, which must equal the
   * result's (the caller learns output sizes beforehand, e.g. with a CPU
   * allgather of the first dimensions); gradsync_result then reports it. */
  void* output;
  uint64_t output_bytes;
  /* Added in 0.3. Non-zero: this is the rank's call number `call` on its
   * process set, for callers that make their calls in the same order on
   * every rank and number them 1, 2, 3, ... there (the torch.distributed
   * backend). A call whose number or name differs between ranks then fails
   * at once on every rank, naming both sides, instead of waiting for the
   * stall deadline; names may then repeat from step to step, as the
   * daemon's response cache needs. 0: names alone match the ranks' calls. */
  uint64_t call;
} gradsync_op_t;

typedef struct gradsync_result {
  uint32_t struct_size; /* sizeof(gradsync_result_t), set by the caller */
  const void* data;     /* ALLGATHER/ALLTOALL/REDUCESCATTER output, owned by the
                           library until gradsync_release */
  uint64_t bytes;
  int32_t ndim;
  int64_t shape[GRADSYNC_MAX_DIMS];
  int32_t num_received_splits; /* ALLTOALL */
  const int64_t* received_splits;
  int32_t last_joined_rank; /* JOIN */
} gradsync_result_t;

const char* gradsync_version(void);
/* Text of the calling thread's last error ("" after success). */
const char* gradsync_last_error(void);

gradsync_status_t gradsync_config_init(gradsync_config_t* config);
/* Fills the first `struct_size` bytes of *op with defaults (no more than
 * this library's gradsync_op_t) and records that size: a caller compiled
 * against an older, smaller gradsync_op_t is never written past its end.
 * gradsync_op_init(op) passes the size the caller was compiled with. */
gradsync_status_t gradsync_op_init_sized(gradsync_op_t* op, uint32_t struct_size);
#define gradsync_op_init(op) gradsync_op_init_sized((op), (uint32_t)sizeof(*(op)))

/* Connects, registers the rank and hands over its arena. */
gradsync_status_t gradsync_init(const gradsync_config_t* config, gradsync_client_t** client);
/* Leaves the job and frees the client. Operations still in flight fail. */
gradsync_status_t gradsync_shutdown(gradsync_client_t* client);

int32_t gradsync_rank(const gradsync_client_t* client);
int32_t gradsync_size(const gradsync_client_t* client);
int32_t gradsync_local_rank(const gradsync_client_t* client);
int32_t gradsync_local_size(const gradsync_client_t* client);
/* Elastic jobs (GRADSYNC_ELASTIC=1, GRADSYNC_MIN_SIZE): the current epoch
 * (1 at the start; 0 when the job is not elastic). */
uint64_t gradsync_epoch(const gradsync_client_t* client);
/* Elastic jobs, after GRADSYNC_MEMBERSHIP_CHANGED: waits (up to
 * timeout_seconds; <= 0: no limit) for the job's next epoch and takes up
 * this rank's place in it; gradsync_rank/size then give the new values.
 * Survivors keep their order. Automatic names restart, process sets other
 * than the global one are gone. */
gradsync_status_t gradsync_rejoin(gradsync_client_t* client, double timeout_seconds);
/* Elastic jobs: the barrier of a state commit (every rank, in the same
 * order). Ranks waiting to join (GRADSYNC_ELASTIC_JOIN=1) are admitted at
 * it: *epoch_changed is then 1, and every rank rejoins and sends the state
 * to the new ones. A plain barrier for other jobs. */
gradsync_status_t gradsync_commit_barrier(gradsync_client_t* client, double timeout_seconds, int32_t* epoch_changed);

/* Memory in the shared arena (64-byte aligned): tensors placed here are
 * reduced in place without copies. NULL when the arena is full. */
void* gradsync_alloc(gradsync_client_t* client, uint64_t bytes);
/* The shared arena's size in bytes (the daemon may grant less than asked). */
uint64_t gradsync_arena_bytes(const gradsync_client_t* client);
gradsync_status_t gradsync_free(gradsync_client_t* client, void* ptr);

/* Starts a collective; returns at once with a handle. */
gradsync_status_t gradsync_enqueue(gradsync_client_t* client, const gradsync_op_t* op, gradsync_handle_t* handle);
/* Starts n allreduces negotiated and executed together (grouped allreduce). */
gradsync_status_t gradsync_enqueue_group(gradsync_client_t* client, const gradsync_op_t* ops, int32_t n,
                                         gradsync_handle_t* handles);
/* Takes part, without data, in a collective this rank could not start (its
 * own arguments were wrong): the other ranks' same collective fails at once
 * with `reason`, naming this rank, instead of waiting for it. Reads
 * op->collective, name and process_set only. The handle completes with that
 * error like any other; release it. */
gradsync_status_t gradsync_abandon(gradsync_client_t* client, const gradsync_op_t* op, const char* reason,
                                   gradsync_handle_t* handle);
/* The job's timeline: rank 0 opens `path` (created, 0644) and the daemon
 * writes Chrome-trace JSON into it (one row per tensor: negotiation, the
 * ranks' arrivals, execution phases, sizes), valid JSON after every event.
 * Other ranks' calls do nothing. GRADSYNC_TIMELINE / HOROVOD_TIMELINE start
 * it at gradsync_init. */
/* Process sets at run time (Horovod's add_process_set/remove_process_set):
 * collectives of every rank of the job, called in the same order on each,
 * that return once all took part (timeout_seconds <= 0: until the daemon
 * answers; its stall deadline bounds that). `ranks` need not be sorted.
 * The new set's id goes to *process_set_id; ids are never reused. Removing
 * a set fails its collectives still waiting for ranks. A call whose own
 * arguments are wrong (INVALID_ARGUMENT: ranks out of range or repeated, id
 * 0; ALREADY_EXISTS: a set of these ranks exists; NOT_FOUND: no such set)
 * still takes part, so the other ranks fail at once naming this rank. */
gradsync_status_t gradsync_add_process_set(gradsync_client_t* client, const int32_t* ranks, int32_t num_ranks,
                                           double timeout_seconds, int32_t* process_set_id);
gradsync_status_t gradsync_remove_process_set(gradsync_client_t* client, int32_t process_set_id,
                                              double timeout_seconds);
/* The ranks of a process set this rank knows (static or added): up to
 * `capacity` go to `ranks`, their number to *num_ranks. NOT_FOUND for an
 * unknown id. */
gradsync_status_t gradsync_process_set_ranks(gradsync_client_t* client, int32_t process_set_id, int32_t* ranks,
                                             int32_t capacity, int32_t* num_ranks);
gradsync_status_t gradsync_start_timeline(gradsync_client_t* client, const char* path, int32_t mark_cycles);
gradsync_status_t gradsync_stop_timeline(gradsync_client_t* client);
/* *done = 1 when the operation has completed (successfully or not). */
gradsync_status_t gradsync_poll(gradsync_client_t* client, gradsync_handle_t handle, int32_t* done);
/* Waits for completion and returns the operation's status. timeout_seconds
 * <= 0 waits until the daemon answers (its stall deadline bounds that);
 * on timeout returns GRADSYNC_DEADLINE_EXCEEDED and the handle stays valid. */
gradsync_status_t gradsync_wait(gradsync_client_t* client, gradsync_handle_t handle, double timeout_seconds);
/* Output of a completed operation. */
gradsync_status_t gradsync_result(gradsync_client_t* client, gradsync_handle_t handle, gradsync_result_t* result);
/* Forgets a completed handle and frees its output. */
gradsync_status_t gradsync_release(gradsync_client_t* client, gradsync_handle_t handle);
/* Makes gradsyncd unmap every CUDA allocation this rank exported. Call it
 * before the allocator returns memory to the driver (e.g. before
 * torch.cuda.empty_cache()): the daemon must not hold mappings of freed
 * memory. Later operations export again as needed. */
gradsync_status_t gradsync_release_cuda_exports(gradsync_client_t* client);

#ifdef __cplusplus
}
#endif

#endif /* GRADSYNC_GRADSYNC_H_ */
