/* Communicator front end: validation, the collective algorithms over the backend's
 * primitives (see comm_backend.h), the sticky failure state and the counters. */
#include "comm/comm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_backend.h"
#include "comm/deadline.h"
#include "common/log.h"
#include "common/timeutil.h"

struct tagc_comm {
  const comm_backend_ops *ops;
  void *impl;
  tagc_comm_backend backend;
  int rank;
  int world;
  double default_timeout;
  uint64_t calls;          /* operations begun on a working communicator (the exchange tags) */
  _Atomic int state;       /* TAGC_OK or the status that broke the communicator */
  _Atomic int failed_peer; /* suspected rank or -1 */
  pthread_mutex_t stats_lock;
  tagc_comm_stats stats;
};

void tagc_comm_config_init(tagc_comm_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->version = TAGC_COMM_CONFIG_VERSION;
  cfg->backend = TAGC_COMM_GLOO;
  cfg->rank = 0;
  cfg->world_size = 1;
  cfg->prefix = "comm";
  cfg->timeout_s = 60.0;
}

static tagc_status validate_config(const tagc_comm_config *cfg) {
  if (!cfg)
    return tagc_errorf(TAGC_EINVAL, "comm config: NULL");
  if (cfg->version != TAGC_COMM_CONFIG_VERSION)
    return tagc_errorf(TAGC_EINVAL, "comm config: version %d, expected %d", cfg->version,
                       TAGC_COMM_CONFIG_VERSION);
  if (cfg->backend != TAGC_COMM_GLOO && cfg->backend != TAGC_COMM_NCCL)
    return tagc_errorf(TAGC_EINVAL, "comm config: unknown backend %d", (int)cfg->backend);
  if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
    return tagc_errorf(TAGC_EINVAL, "comm config: rank %d of world size %d", cfg->rank,
                       cfg->world_size);
  if (!cfg->store)
    return tagc_errorf(TAGC_EINVAL, "comm config: no bootstrap store");
  if (!cfg->prefix || !cfg->prefix[0])
    return tagc_errorf(TAGC_EINVAL, "comm config: empty key prefix");
  if (!(cfg->timeout_s > 0))
    return tagc_errorf(TAGC_EINVAL, "comm config: timeout_s must be > 0");
  return TAGC_OK;
}

/* Records the first failure; later ones keep the first status and peer. */
static void mark_broken(tagc_comm *c, tagc_status st, int peer) {
  int expected = TAGC_OK;
  if (atomic_compare_exchange_strong(&c->state, &expected, (int)st))
    atomic_store(&c->failed_peer, peer);
}

/* Fills in the front end of c, whose backend cfg has just connected. */
static void comm_ready(tagc_comm *c, const tagc_comm_config *cfg) {
  c->backend = cfg->backend;
  c->rank = cfg->rank;
  c->world = cfg->world_size;
  c->default_timeout = cfg->timeout_s;
  atomic_init(&c->state, TAGC_OK);
  atomic_init(&c->failed_peer, -1);
  pthread_mutex_init(&c->stats_lock, NULL);
}

tagc_status tagc_comm_create(const tagc_comm_config *cfg, tagc_comm **out) {
  return tagc_comm_create_ex(cfg, out, NULL);
}

tagc_status tagc_comm_create_ex(const tagc_comm_config *cfg, tagc_comm **out, int *failed_peer) {
  int peer = -1;
  if (failed_peer)
    *failed_peer = -1;
  if (!out)
    return tagc_errorf(TAGC_EINVAL, "comm create: NULL output");
  TAGC_CHECK(validate_config(cfg));
  tagc_comm *c = calloc(1, sizeof *c);
  if (!c)
    return tagc_errorf(TAGC_ENOMEM, "comm create: out of memory");
  double t0 = tagc_now();
  /* the store's waits ask the caller's cancel function; the store's own one comes back after */
  int (*store_cancel)(void *) = cfg->store ? cfg->store->cancelled : NULL;
  void *store_cancel_arg = cfg->store ? cfg->store->cancel_arg : NULL;
  if (cfg->cancelled)
    tagc_store_set_cancel(cfg->store, cfg->cancelled, cfg->cancel_arg);
  tagc_status st = cfg->backend == TAGC_COMM_GLOO
                       ? comm_gloo_create(cfg, &c->ops, &c->impl, &peer)
                       : comm_nccl_create(cfg, &c->ops, &c->impl);
  if (cfg->cancelled)
    tagc_store_set_cancel(cfg->store, store_cancel, store_cancel_arg);
  if (failed_peer)
    *failed_peer = peer;
  if (st != TAGC_OK) {
    free(c);
    return st;
  }
  comm_ready(c, cfg);
  LOG_DEBUG("comm", "%s communicator %s: rank %d of %d connected in %.3f s",
            c->backend == TAGC_COMM_GLOO ? "gloo" : "nccl", cfg->prefix, c->rank, c->world,
            tagc_now() - t0);
  *out = c;
  return TAGC_OK;
}

/* Whether the new world of cfg is old's survivors once excluded[0..n) leave (see
 * tagc_comm_shrink); TAGC_EINVAL for a malformed list, TAGC_EUNSUPPORTED for another world. */
static tagc_status check_survivors(const tagc_comm *old, const int *excluded, int n,
                                   const tagc_comm_config *cfg) {
  if (n < 0 || (n > 0 && !excluded))
    return tagc_errorf(TAGC_EINVAL, "comm shrink: %d excluded ranks%s", n,
                       n > 0 ? " and no list" : "");
  int below = 0;
  for (int i = 0; i < n; i++) {
    if (excluded[i] < 0 || excluded[i] >= old->world || (i > 0 && excluded[i] <= excluded[i - 1]))
      return tagc_errorf(TAGC_EINVAL, "comm shrink: excluded ranks must ascend below %d "
                         "(entry %d is %d)", old->world, i, excluded[i]);
    if (excluded[i] == old->rank)
      return tagc_errorf(TAGC_EINVAL, "comm shrink: rank %d is itself excluded", old->rank);
    below += excluded[i] < old->rank;
  }
  if (n == 0)
    return tagc_errorf(TAGC_EUNSUPPORTED, "comm shrink: no rank excluded");
  if (cfg->backend != old->backend)
    return tagc_errorf(TAGC_EUNSUPPORTED, "comm shrink: the new communicator has another backend");
  if (cfg->world_size != old->world - n || cfg->rank != old->rank - below)
    return tagc_errorf(TAGC_EUNSUPPORTED, "comm shrink: rank %d of %d is not the survivor rank "
                       "%d of %d (joiners or a new order)", cfg->rank, cfg->world_size,
                       old->rank - below, old->world - n);
  return TAGC_OK;
}

tagc_status tagc_comm_shrink(tagc_comm *old, const int *excluded, int n_excluded,
                             const tagc_comm_config *cfg, tagc_comm **out) {
  if (!old || !out)
    return tagc_errorf(TAGC_EINVAL, "comm shrink: NULL %s", old ? "output" : "communicator");
  TAGC_CHECK(validate_config(cfg));
  TAGC_CHECK(check_survivors(old, excluded, n_excluded, cfg));
  if (old->backend != TAGC_COMM_NCCL)
    return tagc_errorf(TAGC_EUNSUPPORTED, "comm shrink: the gloo backend has no shrink");
  tagc_status broken = (tagc_status)atomic_load(&old->state);
  if (broken != TAGC_OK)
    return tagc_errorf(TAGC_EUNSUPPORTED, "comm shrink: the communicator already failed (%s)",
                       tagc_strerror(broken));
  tagc_comm *c = calloc(1, sizeof *c);
  if (!c)
    return tagc_errorf(TAGC_ENOMEM, "comm shrink: out of memory");
  double t0 = tagc_now();
  tagc_status st = comm_nccl_shrink(old->impl, excluded, n_excluded, cfg, &c->ops, &c->impl);
  if (st != TAGC_OK) {
    free(c);
    if (st != TAGC_EUNSUPPORTED) { /* old was touched: broken, like after a failed operation */
      mark_broken(old, st, -1);
      old->ops->abort(old->impl);
    }
    return st;
  }
  comm_ready(c, cfg);
  LOG_DEBUG("comm", "nccl communicator shrunk by %d ranks: rank %d of %d in %.3f s", n_excluded,
            c->rank, c->world, tagc_now() - t0);
  *out = c;
  return TAGC_OK;
}

void tagc_comm_destroy(tagc_comm *comm) {
  if (!comm)
    return;
  comm->ops->destroy(comm->impl);
  pthread_mutex_destroy(&comm->stats_lock);
  free(comm);
}

void tagc_comm_abort(tagc_comm *comm) {
  if (!comm)
    return;
  mark_broken(comm, TAGC_EABORTED, -1);
  comm->ops->abort(comm->impl);
}

tagc_status tagc_comm_status(const tagc_comm *comm) {
  return comm ? (tagc_status)atomic_load(&((tagc_comm *)comm)->state) : TAGC_EINVAL;
}

int tagc_comm_failed_peer(const tagc_comm *comm) {
  return comm ? atomic_load(&((tagc_comm *)comm)->failed_peer) : -1;
}

int tagc_comm_broken_peers(const tagc_comm *comm, int *ranks, int cap) {
  if (!comm || !ranks || cap <= 0 || !comm->ops->broken_peers)
    return 0;
  return comm->ops->broken_peers(comm->impl, ranks, cap);
}

int tagc_comm_rank(const tagc_comm *comm) {
  return comm->rank;
}

int tagc_comm_world_size(const tagc_comm *comm) {
  return comm->world;
}

tagc_comm_backend tagc_comm_backend_of(const tagc_comm *comm) {
  return comm->backend;
}

const char *tagc_comm_opkind_name(tagc_comm_opkind kind) {
  return comm_opkind_name((uint32_t)kind);
}

void tagc_comm_stats_get(const tagc_comm *comm, tagc_comm_stats *out) {
  tagc_comm *c = (tagc_comm *)comm;
  pthread_mutex_lock(&c->stats_lock);
  *out = c->stats;
  pthread_mutex_unlock(&c->stats_lock);
}

void tagc_comm_stats_reset(tagc_comm *comm) {
  pthread_mutex_lock(&comm->stats_lock);
  memset(&comm->stats, 0, sizeof comm->stats);
  pthread_mutex_unlock(&comm->stats_lock);
}

/* Longer timeouts are clamped to this (about 11 days), which keeps every clock computation
 * of the backends far from overflow. */
#define MAX_TIMEOUT_S 1e6

/* The link rate of each backend, measured over this process's communicators: a rebuilt
 * communicator (a new generation) starts with what the previous ones learnt. */
static pthread_mutex_t link_lock = PTHREAD_MUTEX_INITIALIZER;
static tagc_link_estimator link_est[2];
static int link_ready[2];

static tagc_link_estimator *link_of(tagc_comm_backend b) {
  if (!link_ready[b]) {
    tagc_deadline_config dc;
    tagc_deadline_config_init(&dc);
    (void)tagc_link_init(&link_est[b], &dc); /* the defaults are valid */
    link_ready[b] = 1;
  }
  return &link_est[b];
}

/* The timeout of an operation that has moved `wire` bytes so far, its base timeout being
 * base_s (clamped). */
static double link_timeout(tagc_comm_backend b, double base_s, uint64_t wire) {
  pthread_mutex_lock(&link_lock);
  double t = tagc_link_timeout(link_of(b), base_s, wire);
  pthread_mutex_unlock(&link_lock);
  return t < MAX_TIMEOUT_S ? t : MAX_TIMEOUT_S;
}

static void link_sample(tagc_comm_backend b, uint64_t wire, double seconds) {
  pthread_mutex_lock(&link_lock);
  tagc_link_record(link_of(b), wire, seconds);
  pthread_mutex_unlock(&link_lock);
}

static double link_rate_of(tagc_comm_backend backend, double (*rate)(const tagc_link_estimator *)) {
  if (backend != TAGC_COMM_GLOO && backend != TAGC_COMM_NCCL)
    return 0;
  pthread_mutex_lock(&link_lock);
  double r = rate(link_of(backend));
  pthread_mutex_unlock(&link_lock);
  return r;
}

double tagc_comm_link_rate(tagc_comm_backend backend) {
  return link_rate_of(backend, tagc_link_measured_rate);
}

double tagc_comm_link_peak_rate(tagc_comm_backend backend) {
  return link_rate_of(backend, tagc_link_peak_rate);
}

/* The caller's timeout_s, or the default when <= 0, clamped. */
static double base_timeout(const tagc_comm *c, double timeout_s) {
  double t = timeout_s > 0 ? timeout_s : c->default_timeout;
  return t < MAX_TIMEOUT_S ? t : MAX_TIMEOUT_S;
}

double tagc_comm_timeout_for(const tagc_comm *comm, double timeout_s, uint64_t wire_bytes) {
  return link_timeout(comm->backend, base_timeout(comm, timeout_s), wire_bytes);
}

/* One collective call in progress: its base timeout and the payload bytes it moved. The
 * deadline of each exchange is start + the byte-scaled timeout of all bytes moved up to and
 * including that exchange. */
typedef struct op_call {
  tagc_comm *c;
  tagc_comm_opkind kind;
  comm_tag tag;  /* of the next exchange */
  double start;
  double base;   /* the caller's timeout, clamped */
  uint64_t wire; /* busier direction's bytes of the exchanges so far */
  uint64_t sent;
  uint64_t recv;
} op_call;

/* Starts a call: fails at once on a broken communicator (counted as a failed call). */
static tagc_status op_begin(op_call *op, tagc_comm *c, tagc_comm_opkind kind,
                            double timeout_s) {
  op->c = c;
  op->kind = kind;
  op->start = tagc_now();
  op->base = base_timeout(c, timeout_s);
  op->wire = op->sent = op->recv = 0;
  tagc_status st = (tagc_status)atomic_load(&c->state);
  if (st == TAGC_OK) {
    op->tag = (comm_tag){++c->calls, (uint32_t)kind, 0};
    return TAGC_OK;
  }
  pthread_mutex_lock(&c->stats_lock);
  c->stats.op[kind].calls++;
  c->stats.op[kind].errors++;
  pthread_mutex_unlock(&c->stats_lock);
  return tagc_errorf(st, "comm %s: communicator already failed (%s)",
                     tagc_comm_opkind_name(kind), tagc_strerror(st));
}

/* Ends a call: breaks the communicator on a transport failure (and has the backend drop its
 * connections, so peers fail fast) and updates the counters. An abort that raced with the
 * failure wins, so the caller sees TAGC_EABORTED. */
static tagc_status op_end(op_call *op, tagc_status st, int peer) {
  tagc_comm *c = op->c;
  if (st != TAGC_OK && st != TAGC_EINVAL) {
    mark_broken(c, st, peer);
    c->ops->abort(c->impl);
    tagc_status final = (tagc_status)atomic_load(&c->state);
    if (final != st)
      st = tagc_errorf(final, "comm %s: %s", tagc_comm_opkind_name(op->kind),
                       tagc_strerror(final));
    LOG_DEBUG("comm", "%s failed: %s (peer %d)", tagc_comm_opkind_name(op->kind),
              tagc_last_error(), atomic_load(&c->failed_peer));
  }
  pthread_mutex_lock(&c->stats_lock);
  tagc_comm_op_stats *s = &c->stats.op[op->kind];
  s->calls++;
  s->seconds += tagc_now() - op->start;
  if (st == TAGC_OK) {
    s->bytes_sent += op->sent;
    s->bytes_recv += op->recv;
  } else if (st != TAGC_EINVAL) {
    s->errors++;
  }
  pthread_mutex_unlock(&c->stats_lock);
  return st;
}

/* Runs one exchange under the operation's byte-scaled deadline, accounts its payload bytes
 * and feeds its transfer rate to the link estimate. */
static tagc_status exchange(op_call *op, const comm_xfer *x, int n, int *peer) {
  uint64_t sent = 0, recv = 0;
  for (int i = 0; i < n; i++) {
    sent += x[i].send_bytes;
    recv += x[i].recv_bytes;
  }
  uint64_t wire = sent > recv ? sent : recv;
  op->wire += wire;
  tagc_comm_backend b = op->c->backend;
  double t0 = tagc_now();
  double deadline = op->start + link_timeout(b, op->base, op->wire);
  tagc_status st = op->c->ops->exchange(op->c->impl, &op->tag, x, n, deadline, peer);
  op->tag.step++;
  if (st != TAGC_OK)
    return st;
  link_sample(b, wire, tagc_now() - t0);
  op->sent += sent;
  op->recv += recv;
  return TAGC_OK;
}

static size_t dtype_size(tagc_dtype dt) {
  return dt == TAGC_DTYPE_F32 ? sizeof(float) : sizeof(uint64_t);
}

static tagc_status check_reduction(const char *what, tagc_dtype dt, tagc_redop op,
                                   tagc_wire wire) {
  if (dt != TAGC_DTYPE_F32 && dt != TAGC_DTYPE_U64)
    return tagc_errorf(TAGC_EINVAL, "comm %s: unknown dtype %d", what, (int)dt);
  if (op != TAGC_REDOP_SUM && op != TAGC_REDOP_MAX && op != TAGC_REDOP_BOR)
    return tagc_errorf(TAGC_EINVAL, "comm %s: unknown reduction %d", what, (int)op);
  if (op == TAGC_REDOP_BOR && dt != TAGC_DTYPE_U64)
    return tagc_errorf(TAGC_EINVAL, "comm %s: bitwise OR needs the u64 dtype", what);
  if (wire != TAGC_WIRE_NATIVE &&
      !(wire == TAGC_WIRE_BF16 && dt == TAGC_DTYPE_F32 && op == TAGC_REDOP_SUM))
    return tagc_errorf(TAGC_EINVAL, "comm %s: bf16 wire needs f32 sum", what);
  return TAGC_OK;
}

static int ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
  const char *pa = a, *pb = b;
  return na && nb && pa < pb + nb && pb < pa + na;
}

/* Peer list helper: x[i] for the W-1 peers in order rank+1, rank+2, ... (mod W). */
static int peer_at(const tagc_comm *c, int i) {
  return (c->rank + 1 + i) % c->world;
}

tagc_status tagc_comm_allgather(tagc_comm *comm, const void *send, void *recv, size_t bytes,
                                double timeout_s) {
  if (!comm || (bytes && (!send || !recv)))
    return tagc_errorf(TAGC_EINVAL, "comm allgather: NULL argument");
  char *own = bytes ? (char *)recv + (size_t)comm->rank * bytes : recv;
  if (send != own && ranges_overlap(send, bytes, recv, bytes * (size_t)comm->world))
    return tagc_errorf(TAGC_EINVAL, "comm allgather: send overlaps recv other than in place");
  op_call op;
  TAGC_CHECK(op_begin(&op, comm, TAGC_COMM_OP_ALLGATHER, timeout_s));
  char *out = recv;
  int n = comm->world - 1, peer = -1;
  comm_xfer x[n > 0 ? n : 1];
  for (int i = 0; i < n; i++) {
    int p = peer_at(comm, i);
    x[i] = (comm_xfer){p, send, bytes, out + (size_t)p * bytes, bytes};
  }
  tagc_status st = TAGC_OK;
  if (bytes && send != own)
    st = comm->ops->copy(comm->impl, own, send, bytes);
  if (st == TAGC_OK && bytes)
    st = exchange(&op, x, n, &peer);
  return op_end(&op, st, peer);
}

tagc_status tagc_comm_alltoall(tagc_comm *comm, const void *send, void *recv, size_t bytes,
                               double timeout_s) {
  if (!comm || (bytes && (!send || !recv)))
    return tagc_errorf(TAGC_EINVAL, "comm alltoall: NULL argument");
  size_t total = bytes * (size_t)comm->world;
  if (ranges_overlap(send, total, recv, total))
    return tagc_errorf(TAGC_EINVAL, "comm alltoall: send and recv overlap");
  op_call op;
  TAGC_CHECK(op_begin(&op, comm, TAGC_COMM_OP_ALLTOALL, timeout_s));
  const char *in = send;
  char *out = recv;
  int n = comm->world - 1, peer = -1;
  comm_xfer x[n > 0 ? n : 1];
  for (int i = 0; i < n; i++) {
    int p = peer_at(comm, i);
    x[i] = (comm_xfer){p, in + (size_t)p * bytes, bytes, out + (size_t)p * bytes, bytes};
  }
  tagc_status st = TAGC_OK;
  if (bytes) {
    size_t me = (size_t)comm->rank * bytes;
    st = comm->ops->copy(comm->impl, out + me, in + me, bytes);
    if (st == TAGC_OK)
      st = exchange(&op, x, n, &peer);
  }
  return op_end(&op, st, peer);
}

tagc_status tagc_comm_alltoallv(tagc_comm *comm, const void *send, const size_t *send_bytes,
                                void *recv, const size_t *recv_bytes, double timeout_s) {
  if (!comm || !send_bytes || !recv_bytes)
    return tagc_errorf(TAGC_EINVAL, "comm alltoallv: NULL argument");
  int w = comm->world, me = comm->rank;
  size_t send_total = 0, recv_total = 0;
  for (int j = 0; j < w; j++) {
    send_total += send_bytes[j];
    recv_total += recv_bytes[j];
  }
  if ((send_total && !send) || (recv_total && !recv))
    return tagc_errorf(TAGC_EINVAL, "comm alltoallv: NULL buffer for %zu bytes",
                       send_total ? send_total : recv_total);
  if (send_bytes[me] != recv_bytes[me])
    return tagc_errorf(TAGC_EINVAL, "comm alltoallv: own block of %zu bytes sent, %zu received",
                       send_bytes[me], recv_bytes[me]);
  if (ranges_overlap(send, send_total, recv, recv_total))
    return tagc_errorf(TAGC_EINVAL, "comm alltoallv: send and recv overlap");
  size_t soff[w], roff[w];
  for (int j = 0; j < w; j++) {
    soff[j] = j ? soff[j - 1] + send_bytes[j - 1] : 0;
    roff[j] = j ? roff[j - 1] + recv_bytes[j - 1] : 0;
  }
  op_call op;
  TAGC_CHECK(op_begin(&op, comm, TAGC_COMM_OP_ALLTOALLV, timeout_s));
  const char *in = send;
  char *out = recv;
  int n = 0, peer = -1;
  comm_xfer x[w > 1 ? w - 1 : 1];
  for (int i = 0; i < w - 1; i++) {
    int p = peer_at(comm, i);
    if (send_bytes[p] || recv_bytes[p])
      x[n++] = (comm_xfer){p, in + soff[p], send_bytes[p], out + roff[p], recv_bytes[p]};
  }
  tagc_status st = TAGC_OK;
  if (send_bytes[me])
    st = comm->ops->copy(comm->impl, out + roff[me], in + soff[me], send_bytes[me]);
  if (st == TAGC_OK && n > 0)
    st = exchange(&op, x, n, &peer);
  return op_end(&op, st, peer);
}

tagc_status tagc_comm_broadcast(tagc_comm *comm, void *buf, size_t bytes, int root,
                                double timeout_s) {
  if (!comm || (bytes && !buf))
    return tagc_errorf(TAGC_EINVAL, "comm broadcast: NULL argument");
  if (root < 0 || root >= comm->world)
    return tagc_errorf(TAGC_EINVAL, "comm broadcast: root %d of world size %d", root,
                       comm->world);
  op_call op;
  TAGC_CHECK(op_begin(&op, comm, TAGC_COMM_OP_BROADCAST, timeout_s));
  int n = 0, peer = -1;
  comm_xfer x[comm->world];
  if (comm->rank == root) {
    for (int i = 0; i < comm->world - 1; i++)
      x[n++] = (comm_xfer){peer_at(comm, i), buf, bytes, NULL, 0};
  } else {
    x[n++] = (comm_xfer){root, NULL, 0, buf, bytes};
  }
  tagc_status st = bytes ? exchange(&op, x, comm->world > 1 ? n : 0, &peer) : TAGC_OK;
  return op_end(&op, st, peer);
}

tagc_status tagc_comm_barrier(tagc_comm *comm, double timeout_s) {
  if (!comm)
    return tagc_errorf(TAGC_EINVAL, "comm barrier: NULL communicator");
  op_call op;
  TAGC_CHECK(op_begin(&op, comm, TAGC_COMM_OP_BARRIER, timeout_s));
  int n = comm->world - 1, peer = -1;
  tagc_status st = TAGC_OK;
  /* One token byte in scratch (the send side) and one receive byte per peer after it. */
  void *scratch = NULL;
  if (n > 0)
    st = comm->ops->scratch(comm->impl, (size_t)comm->world, &scratch);
  char *tokens = scratch;
  comm_xfer x[n > 0 ? n : 1];
  for (int i = 0; i < n && st == TAGC_OK; i++)
    x[i] = (comm_xfer){peer_at(comm, i), tokens, 1, tokens + 1 + i, 1};
  if (st == TAGC_OK && n > 0)
    st = exchange(&op, x, n, &peer);
  return op_end(&op, st, peer);
}

/* Reduce-scatter of W equal blocks of `count` elements. Pairwise exchange: block j goes to
 * rank j, this rank collects every rank's block `rank` in rows of a scratch matrix (its own
 * block copied in locally) and reduces them in rank order. With a bf16 wire the whole input
 * is first rounded into scratch, and the rows hold bf16. Shared by reduce-scatter and the
 * first half of all-reduce, which passes per-block counts and offsets. */
typedef struct rs_layout {
  const size_t *count; /* elements of block j */
  const size_t *offset; /* element offset of block j in the input */
} rs_layout;

static tagc_status reduce_scatter_blocks(op_call *op, const void *send, void *recv,
                                         rs_layout lay, tagc_dtype dt, tagc_redop rop,
                                         tagc_wire wire, int *peer) {
  tagc_comm *c = op->c;
  int w = c->world, me = c->rank;
  size_t es = dtype_size(dt), wes = wire == TAGC_WIRE_BF16 ? 2 : es;
  size_t mine = lay.count[me];
  size_t total = lay.offset[w - 1] + lay.count[w - 1];
  size_t rows_bytes = (size_t)w * mine * wes;
  size_t wire_bytes = wire == TAGC_WIRE_BF16 ? total * wes : 0;
  /* at least one byte: a rank that owns no element still needs a valid (empty) buffer */
  size_t scratch_bytes = rows_bytes + wire_bytes ? rows_bytes + wire_bytes : 1;
  void *buf = NULL;
  TAGC_CHECK(c->ops->scratch(c->impl, scratch_bytes, &buf));
  char *scratch = buf;
  char *rows = scratch;
  const char *in = send;
  if (wire == TAGC_WIRE_BF16) {
    TAGC_CHECK(c->ops->to_bf16(c->impl, (uint16_t *)(scratch + rows_bytes), send, total));
    in = scratch + rows_bytes;
  }
  comm_xfer x[w];
  int n = 0;
  for (int i = 0; i < w - 1; i++) {
    int p = peer_at(c, i);
    x[n++] = (comm_xfer){p, in + lay.offset[p] * wes, lay.count[p] * wes,
                         rows + (size_t)p * mine * wes, mine * wes};
  }
  TAGC_CHECK(c->ops->copy(c->impl, rows + (size_t)me * mine * wes, in + lay.offset[me] * wes,
                          mine * wes));
  TAGC_CHECK(exchange(op, x, n, peer));
  if (mine == 0)
    return TAGC_OK;
  return c->ops->reduce(c->impl, recv, rows, w, mine, dt, rop, wire);
}

tagc_status tagc_comm_reduce_scatter(tagc_comm *comm, const void *send, void *recv,
                                     size_t count, tagc_dtype dtype, tagc_redop op,
                                     tagc_wire wire, double timeout_s) {
  if (!comm || (count && (!send || !recv)))
    return tagc_errorf(TAGC_EINVAL, "comm reduce_scatter: NULL argument");
  TAGC_CHECK(check_reduction("reduce_scatter", dtype, op, wire));
  size_t es = dtype_size(dtype);
  if (ranges_overlap(send, count * es * (size_t)comm->world, recv, count * es))
    return tagc_errorf(TAGC_EINVAL, "comm reduce_scatter: send and recv overlap");
  op_call call;
  TAGC_CHECK(op_begin(&call, comm, TAGC_COMM_OP_REDUCE_SCATTER, timeout_s));
  size_t counts[comm->world], offsets[comm->world];
  for (int j = 0; j < comm->world; j++) {
    counts[j] = count;
    offsets[j] = (size_t)j * count;
  }
  int peer = -1;
  tagc_status st = TAGC_OK;
  if (count)
    st = reduce_scatter_blocks(&call, send, recv, (rs_layout){counts, offsets}, dtype, op,
                               wire, &peer);
  return op_end(&call, st, peer);
}

tagc_status tagc_comm_allreduce(tagc_comm *comm, const void *send, void *recv, size_t count,
                                tagc_dtype dtype, tagc_redop op, double timeout_s) {
  if (!comm || (count && (!send || !recv)))
    return tagc_errorf(TAGC_EINVAL, "comm allreduce: NULL argument");
  TAGC_CHECK(check_reduction("allreduce", dtype, op, TAGC_WIRE_NATIVE));
  size_t es = dtype_size(dtype);
  if (send != recv && ranges_overlap(send, count * es, recv, count * es))
    return tagc_errorf(TAGC_EINVAL, "comm allreduce: send and recv partially overlap");
  op_call call;
  TAGC_CHECK(op_begin(&call, comm, TAGC_COMM_OP_ALLREDUCE, timeout_s));
  int w = comm->world, me = comm->rank, peer = -1;
  size_t counts[w], offsets[w];
  for (int j = 0; j < w; j++) {
    counts[j] = count / (size_t)w + ((size_t)j < count % (size_t)w);
    offsets[j] = j ? offsets[j - 1] + counts[j - 1] : 0;
  }
  char *out = recv;
  tagc_status st = TAGC_OK;
  if (count)
    st = reduce_scatter_blocks(&call, send, out + offsets[me] * es,
                               (rs_layout){counts, offsets}, dtype, op, TAGC_WIRE_NATIVE,
                               &peer);
  comm_xfer x[w];
  int n = 0;
  for (int i = 0; i < w - 1; i++) {
    int p = peer_at(comm, i);
    x[n++] = (comm_xfer){p, out + offsets[me] * es, counts[me] * es, out + offsets[p] * es,
                         counts[p] * es};
  }
  if (st == TAGC_OK && count)
    st = exchange(&call, x, n, &peer);
  return op_end(&call, st, peer);
}
