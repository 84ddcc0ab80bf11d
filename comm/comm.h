/* Collective communication for tagc: one C interface, two backends.
 *
 * Backends
 *   TAGC_COMM_GLOO  CPU ranks, Debian's Gloo over TCP. Buffers are host memory.
 *   TAGC_COMM_NCCL  GPU ranks (built when TAGC_HAVE_NCCL). Buffers are device memory on
 *                   config.device; operations run on the communicator's own stream and the
 *                   call returns once they completed. Inputs must be ready (the caller has
 *                   synchronised the streams that produced them) before the call.
 *
 * Timeouts and failures
 *   Every operation takes `timeout_s`, a base timeout in seconds counted from the call;
 *   timeout_s <= 0 means the config's default; longer than 10^6 s is clamped to that.
 *   The operation's timeout is the base plus the time its bytes need on the measured link
 *   (comm/deadline.h):
 *       timeout = base + min(3600 s, 3 * wire_bytes / link_rate)
 *   wire_bytes being this rank's payload in its busier direction (the counts given at each
 *   function; for all-reduce the bytes of both halves, the second half's deadline covering
 *   both). link_rate is the lower median of the rates of the last 31 exchanges of at least
 *   256 KiB that completed in this process on this backend — communicators of later
 *   generations inherit it — or 100 Mbit/s (12.5e6 B/s) before the first such exchange; it
 *   is never taken below 1e6 B/s. So a slow link is not a false failure, while a peer that
 *   stops calling is still caught within base + 3x the expected transfer time. The base is
 *   what a latency-bound exchange may take (rank skew, scheduling).
 *   tagc_comm_timeout_for() and tagc_comm_link_rate() tell the values in use.
 *   An operation never exits the process and never waits past its timeout: it returns
 *     TAGC_ETIMEDOUT  the timeout passed (a peer is slow, hung or did not call the operation),
 *     TAGC_EPEER      a peer failed or closed its connection, or (Gloo) its call does not
 *                     match this rank's: another operation, another byte count, or a call
 *                     this rank did not make (the ranks' sequences diverged),
 *     TAGC_EABORTED   tagc_comm_abort() was called.
 *   After any such failure the communicator is broken for good: every later operation returns
 *   the same status at once. The rank suspected of causing it (best effort, -1 when unknown)
 *   is tagc_comm_failed_peer(). The caller destroys the communicator and builds a new one
 *   with a new generation prefix. Argument errors (TAGC_EINVAL) do not break it.
 *   When a communicator breaks it closes its connections, so peers blocked on it fail
 *   promptly with TAGC_EPEER instead of waiting for their own timeouts.
 *
 * Determinism
 *   Reductions are done by the owner of each element in the fixed order rank 0, 1, ..., W-1,
 *   so results are bit-identical run to run for a given world size, and all-reduce returns
 *   the same bits on every rank.
 *
 * Threading
 *   Operations are called from one thread at a time (the communication thread).
 *   tagc_comm_abort(), tagc_comm_failed_peer(), tagc_comm_status() and the stats functions
 *   may be called from any thread while an operation runs. tagc_comm_destroy() must not race
 *   with any other call on the same communicator.
 *
 * Counters
 *   Per operation kind: calls, failed calls, payload bytes this rank put on the wire
 *   (bytes_sent) and took off it (bytes_recv), and seconds spent in the call. Payload bytes
 *   are the data bytes of the collective as this rank sends them (bf16 wire counts 2 bytes
 *   per element), excluding transport headers and the bootstrap. Bytes are counted only for
 *   operations that succeed. The formulas per operation are given at each function
 *   (W = world size). Both backends run the same pairwise algorithms (NCCL through grouped
 *   ncclSend/ncclRecv), so the formulas are exact for both.
 *
 * Algorithms
 *   Every collective is one or two pairwise exchanges: each rank posts its sends and receives
 *   with all peers at once, so latency is one round and the bytes per rank are optimal for
 *   all-gather, reduce-scatter and all-to-all. */
#ifndef TAGC_COMM_COMM_H
#define TAGC_COMM_COMM_H

/* The common/ headers have no C++ guards; the Gloo adapter includes this one. */
#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>

#include "comm/store.h"
#include "common/status.h"

typedef struct tagc_comm tagc_comm;

typedef enum tagc_comm_backend {
  TAGC_COMM_GLOO = 0,
  TAGC_COMM_NCCL = 1
} tagc_comm_backend;

/* Element types of reductions. */
typedef enum tagc_dtype {
  TAGC_DTYPE_F32 = 0, /* float */
  TAGC_DTYPE_U64 = 1  /* uint64_t (bitmaps) */
} tagc_dtype;

/* Reduction operators. SUM and MAX for both types (MAX propagates NaN); BOR for U64 only. */
typedef enum tagc_redop {
  TAGC_REDOP_SUM = 0,
  TAGC_REDOP_MAX = 1,
  TAGC_REDOP_BOR = 2
} tagc_redop;

/* Encoding on the wire for reduce-scatter. BF16 is for F32 SUM only: each rank's fp32 input
 * is rounded to bf16 (round to nearest even, NaN kept) for the wire — its own chunk too, so
 * the result does not depend on which rank owns it — and the owner accumulates in fp32. */
typedef enum tagc_wire {
  TAGC_WIRE_NATIVE = 0,
  TAGC_WIRE_BF16 = 1
} tagc_wire;

#define TAGC_COMM_CONFIG_VERSION 1

typedef struct tagc_comm_config {
  int version;                /* TAGC_COMM_CONFIG_VERSION */
  tagc_comm_backend backend;
  int rank;                   /* 0 <= rank < world_size */
  int world_size;             /* >= 1 */
  tagc_store *store;          /* bootstrap store; borrowed, used only inside create */
  const char *prefix;         /* key prefix, unique per generation ("gen/7/boot"); copied */
  double timeout_s;           /* default operation timeout and the create timeout (> 0) */
  int device;                 /* NCCL: CUDA device index */
  const char *host;           /* Gloo: address to listen on and advertise; NULL = 127.0.0.1 */
  /* Optional: asked at least every TAGC_STORE_CANCEL_POLL_S seconds by every wait of create
   * (store reads, Gloo connects, NCCL init); once it returns non-zero, create gives up with
   * TAGC_EABORTED instead of waiting for the timeout. Called on the creating thread; quick. */
  int (*cancelled)(void *arg);
  void *cancel_arg;
} tagc_comm_config;

/* Fills cfg with defaults: version set, Gloo, rank 0 of 1, no store, prefix "comm",
 * timeout 60 s, device 0, host NULL. */
void tagc_comm_config_init(tagc_comm_config *cfg);

/* Builds a communicator: every rank of the generation calls it with the same prefix, world
 * size and backend. Blocks until all ranks connected or the timeout passed (Gloo: the address
 * exchange and the TCP connects each have config.timeout_s, so a failing create returns
 * within about twice that).
 * Gloo: each rank publishes the address of its end of the pair with each peer p under
 * <prefix>/<p>/<rank> (tagc_store_set_many), reads its peers' under <prefix>/<rank>/
 * (tagc_store_get_many) and connects all pairs at once; the
 * process's SIGPIPE disposition is set to SIG_IGN if it was SIG_DFL (a closed peer must not
 * kill the process). NCCL: rank 0 publishes a fresh unique id (base64) under <prefix>/ncclid;
 * init is non-blocking and polled against the timeout.
 * Errors: TAGC_EINVAL (bad config; detail names the field), TAGC_EUNSUPPORTED (backend not
 * built), TAGC_ETIMEDOUT (peers missing), TAGC_EABORTED (cfg->cancelled said stop), TAGC_EPEER / TAGC_EIO (connection or device
 * failure), TAGC_ENOMEM. On success *out is a new communicator (tagc_comm_destroy). */
tagc_status tagc_comm_create(const tagc_comm_config *cfg, tagc_comm **out);

/* tagc_comm_create() that also tells whom to blame when it fails: *failed_peer (when not
 * NULL) is set to the rank this rank could not reach — its address did not appear in the
 * store within the timeout, or the connection to it timed out or failed — and to -1 on
 * success or when no peer is known (bad config, store or local errors, NCCL). Gloo connects
 * to all peers at once and names the lowest rank that failed, so in a partition the ranks
 * of each side name a rank of the other side; a rank whose connects failed keeps its own
 * ends open until the connect timeout has passed, so a peer still connecting to it does not
 * blame it for a link that works. Errors, blocking and ownership as for tagc_comm_create(). */
tagc_status tagc_comm_create_ex(const tagc_comm_config *cfg, tagc_comm **out, int *failed_peer);

/* Builds the next generation's communicator from a working one without a new bootstrap,
 * when the new world is exactly old's ranks minus excluded[0..n_excluded) (ascending, at
 * least one, this rank not among them) in their old order, with no joiners: cfg is the
 * config the full rebuild would get (tagc_comm_create) and must name old's backend, world
 * size old - n_excluded and rank old rank - (excluded ranks below it). Collective over the
 * survivors: each of them calls it with the same list; the excluded ranks do not (they
 * destroy their communicator). cfg->store and cfg->prefix are checked but not used.
 * NCCL 2.27 or later at run time, old still working: ncclCommShrink without resource
 * sharing, non-blocking, polled against cfg->timeout_s and cfg->cancelled like init.
 * TAGC_EUNSUPPORTED means "do the full rebuild", old untouched: Gloo, an older NCCL, no rank
 * excluded, a world or rank that is not the survivors', another device or backend, or old
 * already failed or aborted (every NCCL failure aborts the communicator at once, so nothing
 * is left to shrink). Other errors as for tagc_comm_create(), and they leave old broken;
 * TAGC_EINVAL for a malformed list or config. old is borrowed: no other call may use it
 * meanwhile except tagc_comm_abort() from another thread, which ends the shrink with
 * TAGC_EABORTED. Afterwards old may only be destroyed, on success too (it still spans the
 * excluded ranks). On success *out is a new communicator (tagc_comm_destroy) with fresh
 * counters. Blocks. */
tagc_status tagc_comm_shrink(tagc_comm *old, const int *excluded, int n_excluded,
                             const tagc_comm_config *cfg, tagc_comm **out);

/* Closes connections and frees the communicator; NULL is a no-op. Does not block on peers.
 * Must not be called while an operation runs on another thread (abort and wait for it). */
void tagc_comm_destroy(tagc_comm *comm);

/* Breaks the communicator: a pending operation returns TAGC_EABORTED within a fraction of a
 * second and every later one returns TAGC_EABORTED at once. Safe from any thread; idempotent;
 * never waits for peers. Gloo: wakes the pending operation, which closes the connections
 * (at once when none is pending). NCCL: ncclCommAbort. */
void tagc_comm_abort(tagc_comm *comm);

/* TAGC_OK while the communicator is usable, else the failure that broke it (TAGC_EINVAL for
 * NULL). Any thread. */
tagc_status tagc_comm_status(const tagc_comm *comm);

/* The rank suspected of the failure that broke the communicator, or -1 (none or unknown).
 * Any thread. */
int tagc_comm_failed_peer(const tagc_comm *comm);

/* The ranks whose connections with this rank were found broken when the communicator failed
 * on a peer (Gloo: each connection's probe, at the failure and once more 20 ms later, so that
 * peers that died together are all named; this rank closes its own connections 50 ms after
 * the failure, so a peer failing with it does not name it), ascending, at most cap into ranks; returns
 * how many (0 when none is known, always for NCCL). tagc_comm_failed_peer() is usually one of
 * them. Any thread. */
int tagc_comm_broken_peers(const tagc_comm *comm, int *ranks, int cap);

/* This rank, the world size and the backend, as configured. comm must not be NULL. */
int tagc_comm_rank(const tagc_comm *comm);
int tagc_comm_world_size(const tagc_comm *comm);
tagc_comm_backend tagc_comm_backend_of(const tagc_comm *comm);

/* All-gather: every rank contributes `bytes` bytes; recv receives W * bytes, rank-major
 * (rank r's block at offset r * bytes). send may be recv + rank * bytes (in place);
 * otherwise it must not overlap recv.
 * Counts: sent = recv'd = (W-1) * bytes. */
tagc_status tagc_comm_allgather(tagc_comm *comm, const void *send, void *recv, size_t bytes,
                                double timeout_s);

/* Reduce-scatter: send holds W chunks of `count` elements, chunk j destined to rank j; recv
 * (count elements, must not overlap send) gets the reduction over ranks of chunk `rank`.
 * wire = TAGC_WIRE_BF16 only with F32 and SUM.
 * Counts: sent = recv'd = (W-1) * count * wire element size (4 or 2 for F32, 8 for U64). */
tagc_status tagc_comm_reduce_scatter(tagc_comm *comm, const void *send, void *recv,
                                     size_t count, tagc_dtype dtype, tagc_redop op,
                                     tagc_wire wire, double timeout_s);

/* All-reduce of count elements; send may equal recv (in place), otherwise no overlap.
 * Done as a reduce-scatter over W near-equal blocks (block j has count/W elements, plus one
 * for j < count % W) followed by an all-gather of the reduced blocks.
 * Counts: sent = recv'd = (count + (W-2) * block(rank)) * element size, which is
 * 2 (W-1)/W * count * element size when W divides count (0 when W = 1). */
tagc_status tagc_comm_allreduce(tagc_comm *comm, const void *send, void *recv, size_t count,
                                tagc_dtype dtype, tagc_redop op, double timeout_s);

/* All-to-all: send holds W blocks of `bytes` bytes (block j to rank j); recv gets W blocks
 * (block j from rank j). Own block is copied locally. send and recv must not overlap.
 * Counts: sent = recv'd = (W-1) * bytes. */
tagc_status tagc_comm_alltoall(tagc_comm *comm, const void *send, void *recv, size_t bytes,
                               double timeout_s);

/* All-to-all of varying sizes: send_bytes[j] bytes go to rank j and recv_bytes[j] come from
 * it, both packed in rank order (block j of send at the sum of send_bytes[0..j), likewise
 * recv); every pair's counts must match (rank i's send_bytes[j] == rank j's recv_bytes[i]),
 * which Gloo checks before moving data (TAGC_EPEER otherwise). Peers with nothing either way
 * are not contacted, so a shift (each rank sending to one peer and receiving from another)
 * costs one transfer per rank. Own block copied locally (send_bytes[rank] must equal
 * recv_bytes[rank]). send and recv must not overlap.
 * Counts: sent = sum of send_bytes[j], recv'd = sum of recv_bytes[j], j != rank. */
tagc_status tagc_comm_alltoallv(tagc_comm *comm, const void *send, const size_t *send_bytes,
                                void *recv, const size_t *recv_bytes, double timeout_s);

/* Broadcast of `bytes` bytes in buf from root to every rank (in place).
 * Counts: root sent = (W-1) * bytes, others recv'd = bytes. */
tagc_status tagc_comm_broadcast(tagc_comm *comm, void *buf, size_t bytes, int root,
                                double timeout_s);

/* Barrier: returns once every rank entered it. One token byte is exchanged with every peer.
 * Counts: sent = recv'd = W-1 bytes. */
tagc_status tagc_comm_barrier(tagc_comm *comm, double timeout_s);

typedef enum tagc_comm_opkind {
  TAGC_COMM_OP_ALLGATHER = 0,
  TAGC_COMM_OP_REDUCE_SCATTER,
  TAGC_COMM_OP_ALLREDUCE,
  TAGC_COMM_OP_ALLTOALL,
  TAGC_COMM_OP_BROADCAST,
  TAGC_COMM_OP_BARRIER,
  TAGC_COMM_OP_ALLTOALLV,
  TAGC_COMM_OP_COUNT
} tagc_comm_opkind;

typedef struct tagc_comm_op_stats {
  uint64_t calls;      /* every call, failed ones included */
  uint64_t errors;     /* calls that returned an error other than TAGC_EINVAL */
  uint64_t bytes_sent; /* payload bytes, successful calls only */
  uint64_t bytes_recv;
  double seconds;      /* wall time inside the calls, failed ones included */
} tagc_comm_op_stats;

typedef struct tagc_comm_stats {
  tagc_comm_op_stats op[TAGC_COMM_OP_COUNT];
} tagc_comm_stats;

/* The timeout in seconds an operation of comm moving wire_bytes (this rank's busier
 * direction) with base timeout timeout_s (<= 0: the config's default) would get now; see
 * Timeouts above. comm must not be NULL. Any thread. */
double tagc_comm_timeout_for(const tagc_comm *comm, double timeout_s, uint64_t wire_bytes);

/* The link rate measured for backend in this process (bytes per second, see Timeouts), or 0
 * before the first measured exchange (or for an unknown backend). Any thread. */
double tagc_comm_link_rate(tagc_comm_backend backend);

/* The upper quartile of the same samples (comm/deadline.h tagc_link_peak_rate): the rate when
 * peers are ready, what `--compress auto` prices the wires with; 0 as above. Any thread. */
double tagc_comm_link_peak_rate(tagc_comm_backend backend);

/* Short name of an operation kind ("allgather", "reduce_scatter", ...). */
const char *tagc_comm_opkind_name(tagc_comm_opkind kind);

/* Copies the counters into *out. Any thread. */
void tagc_comm_stats_get(const tagc_comm *comm, tagc_comm_stats *out);

/* Zeroes the counters. Any thread. */
void tagc_comm_stats_reset(tagc_comm *comm);

#ifdef __cplusplus
}
#endif

#endif
