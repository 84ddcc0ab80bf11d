/* Internal interface between the communicator front end (comm.c: validation, algorithms,
 * failure state, counters) and a transport backend (comm_gloo.cc, comm_nccl.cu).
 *
 * Every collective is built from the same few primitives, so both backends run the same
 * algorithms, move the same bytes and reduce in the same fixed rank order:
 *   exchange  post point-to-point sends and receives with several peers, wait for all;
 *   copy      local copy inside the backend's memory (host or device);
 *   to_bf16   round fp32 to bf16 (round to nearest even) for the wire;
 *   reduce    combine nrows equal rows in row order 0, 1, ... into out (fp32 accumulation).
 * A backend that fails an exchange breaks itself (closes connections / aborts) before it
 * returns, so no late transfer can touch caller memory afterwards; after any other failure
 * the front end calls abort(), which must then drop the connections too. */
#ifndef TAGC_COMM_COMM_BACKEND_H
#define TAGC_COMM_COMM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One peer's part of an exchange; a zero byte count means no transfer in that direction. */
typedef struct comm_xfer {
  int peer;
  const void *send;
  size_t send_bytes;
  void *recv;
  size_t recv_bytes;
} comm_xfer;

/* Which exchange of the call sequence this is. Every rank makes the same calls in the same
 * order, so the same exchange has the same tag on every rank; a backend that can compares
 * tags and byte counts with each peer before moving data (Gloo), so ranks whose calls
 * diverged fail instead of mixing data or overrunning a receive. */
typedef struct comm_tag {
  uint64_t call;  /* operation number on this communicator, from 1 */
  uint32_t kind;  /* tagc_comm_opkind */
  uint32_t step;  /* exchange of the operation, from 0 (all-reduce has two) */
} comm_tag;

/* The short name of an operation kind, as tagc_comm_opkind_name() gives it; "unknown" out of
 * range. Here so that a backend naming a tag's kind (a peer's, in an error) needs only this
 * header, not the front end. */
static inline const char *comm_opkind_name(uint32_t kind) {
  static const char *const names[TAGC_COMM_OP_COUNT] = {
      "allgather", "reduce_scatter", "allreduce", "alltoall", "broadcast", "barrier",
      "alltoallv"};
  return kind < TAGC_COMM_OP_COUNT ? names[kind] : "unknown";
}

typedef struct comm_backend_ops {
  /* Runs all transfers of x[0..n) and waits until they complete or the absolute monotonic
   * deadline (tagc_now() seconds) passes. On failure sets *peer to the suspected rank.
   * TAGC_EPEER also when a peer's exchange does not match (tag, or its byte counts against
   * ours); then no payload has moved with that peer. */
  tagc_status (*exchange)(void *impl, const comm_tag *tag, const comm_xfer *x, int n,
                          double deadline, int *peer);
  tagc_status (*copy)(void *impl, void *dst, const void *src, size_t bytes);
  tagc_status (*to_bf16)(void *impl, uint16_t *dst, const float *src, size_t n);
  /* rows: nrows rows of count elements, contiguous; element type is bf16 for
   * TAGC_WIRE_BF16, else dtype. out: count elements of dtype. */
  tagc_status (*reduce)(void *impl, void *out, const void *rows, int nrows, size_t count,
                        tagc_dtype dtype, tagc_redop op, tagc_wire wire);
  /* Sets *out to backend-owned scratch of at least bytes (host or device memory), kept
   * between calls. TAGC_ENOMEM when it cannot be allocated. */
  tagc_status (*scratch)(void *impl, size_t bytes, void **out);
  /* Wakes or cancels a pending exchange, or drops the connections when none is pending;
   * any thread; idempotent. */
  void (*abort)(void *impl);
  void (*destroy)(void *impl);
  /* Optional (NULL: none known): the peers whose connections had failed when an exchange
   * failed, ascending, at most cap into ranks; returns how many. Any thread. */
  int (*broken_peers)(void *impl, int *ranks, int cap);
} comm_backend_ops;

/* Backend constructors: connect per cfg (validated by the caller) and return the backend's
 * ops and state. Errors as for tagc_comm_create(). Gloo also sets *failed_peer (never NULL)
 * to the rank it could not reach, or -1; NCCL's init names no peer. */
tagc_status comm_gloo_create(const tagc_comm_config *cfg, const comm_backend_ops **ops,
                             void **impl, int *failed_peer);
tagc_status comm_nccl_create(const tagc_comm_config *cfg, const comm_backend_ops **ops,
                             void **impl);

/* tagc_comm_shrink() for NCCL: parent is a working NCCL backend's impl (borrowed; its abort
 * may run on another thread meanwhile), excluded and cfg checked by the caller against the
 * parent's rank and world. Returns the new backend as comm_nccl_create() does; errors as for
 * tagc_comm_shrink(). */
tagc_status comm_nccl_shrink(void *parent, const int *excluded, int n_excluded,
                             const tagc_comm_config *cfg, const comm_backend_ops **ops,
                             void **impl);

#ifdef __cplusplus
}
#endif

#endif
