#include "engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "kernels/tagc_kernels.h"

#define BLOCK 1024 /* shard padding: the compression kernels' block */
#define ROLLING_SLOTS 3 /* unit parameter buffers when resharding: in use, prefetched, spare */
#define QUEUE 256
#define MIN_RHO 1.25    /* below this a sketch costs about as much as a dense bf16 shard */
#define PROBE_EVERY 16  /* steps between density probes of a segment sent dense */

/* Slots of the per-step scalars summed over ranks. */
enum {
  SUM_LOSS, SUM_SQ, SUM_ESTIMATED,
  SUM_FB_IN,  /* check_feedback: sum of raw gradients + old residuals of tagc segments */
  SUM_FB_OUT, /* ... sum of what was kept (sent) + new residuals */
  SUM_FB_ABS, /* ... sum of their absolute values (scale of the comparison) */
  SUM_SEG0    /* + segment index: global bits (summed); then + n_segs + segment index: the
                 densest lane's density (maximum) */
};

typedef struct segment {
  char name[48]; /* "u<unit>.<first tensor>": stable across world sizes (checkpoint unit) */
  int unit;
  size_t off, len, S; /* arena offset, elements, shard size */
  tagc_role_policy pol;
  float *p, *m, *v, *g; /* this rank's shard (S each): params, moments, reduced gradient */
  /* tagc segments only */
  float *residual;      /* [W][S]: error feedback of this rank's local gradient */
  tagc_layout lay;      /* sketch geometry at rho_used */
  double rho_used;      /* rho of the current layout (0 = none built yet) */
  int64_t global_bits;  /* this step: bits set in this rank's ORed bitmap shard */
  double lane_density;  /* this step: items of the densest lane of that shard / blocks */
  double lane_density_seen; /* the maximum over ranks at the last step: decides rho */
  int64_t estimated;    /* this step: elements left to the estimate */
  int dense;            /* this step: sent dense (rho too small for the sketch to pay) */
} segment;

/* Scratch of the communication thread for tagc segments, grown on demand. */
typedef struct tagc_scratch {
  float *kept;
  uint64_t *bitmap, *global_bitmap;
  float *sketch, *my_sketch;
  void *ws;
  size_t kept_cap, bitmap_cap, global_cap, sketch_cap, my_sketch_cap, ws_cap; /* bytes */
} tagc_scratch;

typedef enum task_kind { TASK_GATHER, TASK_REDUCE } task_kind;

typedef struct task {
  task_kind kind;
  int unit;
  int slot;
} task;

struct tagc_engine {
  tagc_engine_config cfg;
  const tagc_model_layout *L;
  int rank, world;
  segment *segs;
  int n_segs;
  int *unit_first_seg, *unit_n_segs;

  float *grads;   /* full local gradient arena (accumulated over micro-batches) */
  float *staging; /* W * max S floats, used by the communication thread only */
  int n_slots;         /* ROLLING_SLOTS, or one per unit without resharding */
  float **slot_buf;
  int *slot_unit;
  int64_t *slot_task;
  size_t max_unit;
  uint16_t *gather16;  /* bf16 all-gather: [W][max S] received, then [max S] sent */

  tagc_model_acts *acts;
  uint8_t *tokens, *targets;
  tagc_unit_hooks hooks;
  int dir;            /* +1 forward, -1 backward */
  int reduce_on_done; /* last micro-batch: hand gradients to the comm thread */

  /* communication thread and its FIFO of tasks */
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  task queue[QUEUE];
  int64_t submitted, completed;
  int stop;
  tagc_scratch scratch;
  tagc_status failure; /* first failure of a task; later tasks are skipped */
  double comm_s;       /* comm thread busy time (guarded by mu) */
  double exposed_s;    /* compute thread waiting time */
  int64_t step_now;
  int64_t train_passes; /* micro-batch passes per step, the same on every rank (0: not yet agreed) */
  _Atomic double op_delay_s; /* fault "slow" */
  double feedback[3];  /* check_feedback sums of this step (comm thread, read after drain) */
  char **seg_names;    /* checkpoint unit names (point into segs[i].name) */
  int64_t *seg_numel;
  double *sums;        /* per-step scalars summed over ranks: see tagc_engine_step */
};

/* ---------- segments ---------- */

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

static tagc_status build_segments(tagc_engine *e) {
  const tagc_model_layout *L = e->L;
  e->segs = calloc((size_t)L->n_tensors, sizeof(segment));
  e->unit_first_seg = calloc((size_t)L->n_units, sizeof(int));
  e->unit_n_segs = calloc((size_t)L->n_units, sizeof(int));
  if (!e->segs || !e->unit_first_seg || !e->unit_n_segs)
    return tagc_errorf(TAGC_ENOMEM, "engine segments");
  for (int u = 0; u < L->n_units; u++) {
    const tagc_unit_info *ui = &L->units[u];
    e->unit_first_seg[u] = e->n_segs;
    for (int t = ui->first_tensor; t < ui->first_tensor + ui->n_tensors; t++) {
      const tagc_tensor_info *ti = &L->tensors[t];
      tagc_role_policy pol = e->cfg.policy.role[ti->role];
      segment *prev = e->n_segs > e->unit_first_seg[u] ? &e->segs[e->n_segs - 1] : NULL;
      if (prev && tagc_role_policy_equal(&prev->pol, &pol)) {
        prev->len += ti->numel;
        continue;
      }
      segment *s = &e->segs[e->n_segs++];
      snprintf(s->name, sizeof s->name, "u%d.%s", u, ti->name);
      s->unit = u;
      s->off = ti->offset;
      s->len = ti->numel;
      s->pol = pol;
    }
    e->unit_n_segs[u] = e->n_segs - e->unit_first_seg[u];
    if (ui->numel > e->max_unit)
      e->max_unit = ui->numel;
  }
  size_t max_padded = 0;
  for (int i = 0; i < e->n_segs; i++) {
    segment *s = &e->segs[i];
    s->S = e->world == 1 ? s->len : round_up((s->len + (size_t)e->world - 1) / (size_t)e->world, BLOCK);
    float *block = calloc(4 * s->S, sizeof(float));
    if (!block)
      return tagc_errorf(TAGC_ENOMEM, "shard of %zu elements", s->S);
    s->p = block;
    s->m = block + s->S;
    s->v = block + 2 * s->S;
    s->g = block + 3 * s->S;
    if (s->S * (size_t)e->world > max_padded)
      max_padded = s->S * (size_t)e->world;
    if (s->pol.kind == TAGC_POLICY_TAGC && e->world > 1) {
      s->residual = calloc(s->S * (size_t)e->world, sizeof(float));
      if (!s->residual)
        return tagc_errorf(TAGC_ENOMEM, "residual of %zu elements", s->S * (size_t)e->world);
    }
  }
  e->staging = malloc(max_padded * sizeof(float));
  if (e->cfg.gather_bf16 && !(e->gather16 = malloc((max_padded + max_padded / (size_t)e->world) * sizeof(uint16_t))))
    return tagc_errorf(TAGC_ENOMEM, "bf16 gather buffer");
  e->sums = malloc((size_t)(SUM_SEG0 + 2 * e->n_segs) * sizeof(double));
  e->seg_names = malloc((size_t)e->n_segs * sizeof(char *));
  e->seg_numel = malloc((size_t)e->n_segs * sizeof(int64_t));
  if (!e->staging || !e->sums || !e->seg_names || !e->seg_numel)
    return tagc_errorf(TAGC_ENOMEM, "staging buffer of %zu floats", max_padded);
  for (int i = 0; i < e->n_segs; i++) {
    e->seg_names[i] = e->segs[i].name;
    e->seg_numel[i] = (int64_t)e->segs[i].len;
  }
  return TAGC_OK;
}

static void slice(int64_t total, int world, int rank, int64_t *lo, int64_t *hi) {
  *lo = total * rank / world;
  *hi = total * (rank + 1) / world;
}

/* Elements of segment s owned by this rank: [s->off + lo, s->off + lo + *n). */
static size_t shard_range(const tagc_engine *e, const segment *s, size_t *n) {
  size_t lo = (size_t)e->rank * s->S;
  *n = lo >= s->len ? 0 : (s->len - lo < s->S ? s->len - lo : s->S);
  return lo;
}

/* ---------- communication tasks (run on the comm thread, or inline when world == 1) ---------- */

/* Gathers unit's full parameters into dst; bf16 on the wire when configured and `for_compute`
 * (dumps and checkpoint tools always get the exact fp32 values). */
static tagc_status gather_unit(tagc_engine *e, int unit, float *dst, int for_compute) {
  const tagc_unit_info *ui = &e->L->units[unit];
  for (int i = e->unit_first_seg[unit]; i < e->unit_first_seg[unit] + e->unit_n_segs[unit]; i++) {
    segment *s = &e->segs[i];
    float *out = dst + (s->off - ui->offset);
    if (e->world == 1) {
      memcpy(out, s->p, s->len * sizeof(float));
      continue;
    }
    if (e->cfg.gather_bf16 && for_compute) {
      uint16_t *recv = e->gather16, *send = e->gather16 + (size_t)e->world * s->S;
      TAGC_CHECK(tagc_bf16_encode_cpu(s->p, send, (int64_t)s->S));
      TAGC_CHECK(tagc_comm_allgather(e->cfg.comm, send, recv, s->S * sizeof(uint16_t), e->cfg.op_timeout_s));
      TAGC_CHECK(tagc_bf16_decode_cpu(recv, out, (int64_t)s->len));
      continue;
    }
    int direct = s->S * (size_t)e->world == s->len;
    float *recv = direct ? out : e->staging;
    TAGC_CHECK(tagc_comm_allgather(e->cfg.comm, s->p, recv, s->S * sizeof(float), e->cfg.op_timeout_s));
    if (!direct)
      memcpy(out, recv, s->len * sizeof(float));
  }
  return TAGC_OK;
}

/* The segment's gradient as W shards of S floats: grad itself, or a zero-padded copy in the
 * staging buffer when len < W*S. */
static const float *padded(tagc_engine *e, const segment *s, const float *grad) {
  size_t n = s->S * (size_t)e->world;
  if (n == s->len)
    return grad;
  memcpy(e->staging, grad, s->len * sizeof(float));
  memset(e->staging + s->len, 0, (n - s->len) * sizeof(float));
  return e->staging;
}

/* Dense reduce-scatter of the segment's W*S floats (grad is already padded). */
static tagc_status reduce_dense(tagc_engine *e, segment *s, const float *grad, tagc_wire wire) {
  return tagc_comm_reduce_scatter(e->cfg.comm, grad, s->g, s->S, TAGC_DTYPE_F32, TAGC_REDOP_SUM,
                                  wire, e->cfg.op_timeout_s);
}

static tagc_status grow(void **buf, size_t *cap, size_t bytes) {
  if (bytes <= *cap)
    return TAGC_OK;
  void *p = realloc(*buf, bytes);
  if (!p)
    return tagc_errorf(TAGC_ENOMEM, "compression scratch of %zu bytes", bytes);
  *buf = p;
  *cap = bytes;
  return TAGC_OK;
}

/* rho for this step: the fixed one, or the advisor's from the density all ranks measured at
 * the previous step, rounded down to a quarter power of two so the sketch layout is rebuilt
 * only when the density moves. 0 means the sketch would not pay: send dense. */
static tagc_status choose_rho(const tagc_engine *e, const segment *s, double *rho) {
  if (s->pol.rho > 0) {
    *rho = s->pol.rho;
    return TAGC_OK;
  }
  /* the densest lane decides whether the sketch peels (kernels/rho.h) */
  double d = s->lane_density_seen;
  if (d <= 0) /* nothing measured yet: assume the worst, full lanes (a lossless probe) */
    d = 1.0;
  double advised;
  TAGC_CHECK(tagc_rho_advise(d, (int64_t)s->S, &advised));
  /* rounded down to a quarter power of two: few distinct layouts */
  double safe = exp2(floor(4 * log2(fmax(advised, TAGC_RHO_MIN))) / 4);
  if (advised >= MIN_RHO)
    *rho = safe;
  else /* too dense for the sketch to pay: dense, but every PROBE_EVERY steps a (lossless,
          larger) sketch at the advised rho measures the density again */
    *rho = e->step_now % PROBE_EVERY == 0 ? safe : 0;
  return TAGC_OK;
}

/* Test hook: error-feedback mass of one sparsify call. `in` is the sum of raw gradient and old
 * residual; what was kept (and so sent) plus the new residual must sum to the same. */
static void record_feedback(tagc_engine *e, const segment *s, double in, double abs_in) {
  const tagc_layout *l = &s->lay;
  double out = 0;
  for (size_t j = 0; j < (size_t)e->world; j++) {
    const float *kept = e->scratch.kept + j * (size_t)l->shard_padded;
    const float *res = s->residual + j * s->S;
    for (size_t i = 0; i < s->S; i++)
      out += (double)kept[i] + (double)res[i];
  }
  e->feedback[0] += in;
  e->feedback[1] += out;
  e->feedback[2] += abs_in;
}

/* One tagc segment: sparsify with error feedback, OR the bitmaps to their owners, encode the
 * W destination sketches, reduce-scatter them, decode this rank's shard. */
static tagc_status reduce_tagc(tagc_engine *e, segment *s, const float *grad) {
  size_t W = (size_t)e->world, n = s->S * W;
  tagc_scratch *sc = &e->scratch;
  grad = padded(e, s, grad); /* the kernels read grad as [W][S] */
  double rho;
  TAGC_CHECK(choose_rho(e, s, &rho));
  s->dense = rho == 0;
  if (s->dense) { /* send v = grad + residual dense; nothing is left behind */
    float *v = (float *)grad == e->staging ? e->staging : memcpy(e->staging, grad, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
      v[i] += s->residual[i];
      s->residual[i] = 0;
    }
    s->estimated = 0;
    s->global_bits = -1; /* not measured */
    return reduce_dense(e, s, v, e->cfg.policy.sketch_bf16 ? TAGC_WIRE_BF16 : TAGC_WIRE_NATIVE);
  }
  if (rho != s->rho_used) {
    tagc_layout_free(&s->lay);
    TAGC_CHECK(tagc_layout_init(&s->lay, e->world, (int64_t)s->S, rho, 0x7a6cu + (uint32_t)s->unit));
    s->rho_used = rho;
  }
  const tagc_layout *l = &s->lay;
  size_t words = (size_t)l->bitmap_words, cells = (size_t)l->sketch_cells;
  TAGC_CHECK(grow((void **)&sc->kept, &sc->kept_cap, n * sizeof(float)));
  TAGC_CHECK(grow((void **)&sc->bitmap, &sc->bitmap_cap, W * words * sizeof(uint64_t)));
  TAGC_CHECK(grow((void **)&sc->global_bitmap, &sc->global_cap, words * sizeof(uint64_t)));
  TAGC_CHECK(grow((void **)&sc->sketch, &sc->sketch_cap, W * cells * sizeof(float)));
  TAGC_CHECK(grow((void **)&sc->my_sketch, &sc->my_sketch_cap, cells * sizeof(float)));
  size_t ws = tagc_kernels_workspace_bytes(TAGC_DEVICE_CPU, l, 1);
  TAGC_CHECK(grow(&sc->ws, &sc->ws_cap, ws));
  tagc_kernel_ctx ctx = {TAGC_DEVICE_CPU, NULL, NULL, sc->ws, sc->ws_cap, 1};

  tagc_sparsify_stats sstats[64];
  tagc_sparsify_stats *ss = W <= 64 ? sstats : malloc(W * sizeof *ss);
  if (!ss)
    return tagc_errorf(TAGC_ENOMEM, "sparsify stats");
  double in = 0, abs_in = 0;
  if (e->cfg.check_feedback)
    for (size_t i = 0; i < n; i++) {
      in += (double)grad[i] + (double)s->residual[i];
      abs_in += fabs((double)grad[i]) + fabs((double)s->residual[i]);
    }
  tagc_status st = tagc_kernels_sparsify(&ctx, l, (float)s->pol.density, grad, s->residual,
                                         sc->kept, sc->bitmap, ss);
  if (ss != sstats)
    free(ss);
  TAGC_CHECK(st);
  if (e->cfg.check_feedback)
    record_feedback(e, s, in, abs_in);
  TAGC_CHECK(tagc_comm_reduce_scatter(e->cfg.comm, sc->bitmap, sc->global_bitmap, words,
                                      TAGC_DTYPE_U64, TAGC_REDOP_BOR, TAGC_WIRE_NATIVE,
                                      e->cfg.op_timeout_s));
  TAGC_CHECK(tagc_kernels_encode(&ctx, l, sc->kept, sc->bitmap, sc->sketch));
  TAGC_CHECK(tagc_comm_reduce_scatter(e->cfg.comm, sc->sketch, sc->my_sketch, cells,
                                      TAGC_DTYPE_F32, TAGC_REDOP_SUM,
                                      e->cfg.policy.sketch_bf16 ? TAGC_WIRE_BF16 : TAGC_WIRE_NATIVE,
                                      e->cfg.op_timeout_s));
  tagc_decode_stats ds;
  TAGC_CHECK(tagc_kernels_decode(&ctx, l, sc->my_sketch, sc->global_bitmap, s->g, &ds));
  s->global_bits = ds.nonzero;
  s->estimated = ds.estimated;
  int64_t lane_max;
  TAGC_CHECK(tagc_kernels_lane_max(&ctx, sc->global_bitmap, l->blocks, &lane_max));
  s->lane_density = (double)lane_max / (double)l->blocks;
  return TAGC_OK;
}

static tagc_status reduce_segment(tagc_engine *e, segment *s) {
  const float *grad = e->grads + s->off;
  if (e->world == 1) { /* nothing to send; a residual loaded from a checkpoint is folded in */
    memcpy(s->g, grad, s->len * sizeof(float));
    if (s->residual) {
      for (size_t i = 0; i < s->len; i++)
        s->g[i] += s->residual[i];
      free(s->residual);
      s->residual = NULL;
    }
    return TAGC_OK;
  }
  if (s->pol.kind == TAGC_POLICY_TAGC)
    return reduce_tagc(e, s, grad);
  return reduce_dense(e, s, padded(e, s, grad),
                      s->pol.kind == TAGC_POLICY_BF16 ? TAGC_WIRE_BF16 : TAGC_WIRE_NATIVE);
}

static tagc_status run_task(tagc_engine *e, const task *t) {
  if (t->kind == TASK_GATHER)
    return gather_unit(e, t->unit, e->slot_buf[t->slot], 1);
  for (int i = e->unit_first_seg[t->unit]; i < e->unit_first_seg[t->unit] + e->unit_n_segs[t->unit]; i++)
    TAGC_CHECK(reduce_segment(e, &e->segs[i]));
  return TAGC_OK;
}

static void *comm_thread(void *arg) {
  tagc_engine *e = arg;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    while (!e->stop && e->completed == e->submitted)
      pthread_cond_wait(&e->cv, &e->mu);
    if (e->stop)
      break;
    task t = e->queue[e->completed % QUEUE];
    tagc_status failed = e->failure;
    pthread_mutex_unlock(&e->mu);
    double t0 = tagc_now();
    if (e->op_delay_s > 0)
      tagc_sleep(e->op_delay_s);
    tagc_status st = failed != TAGC_OK ? failed : run_task(e, &t);
    if (st != TAGC_OK && failed == TAGC_OK)
      LOG_WARN("engine", "%s of unit %d failed: %s", t.kind == TASK_GATHER ? "all-gather" : "reduce-scatter",
               t.unit, tagc_last_error());
    double dt = tagc_now() - t0;
    pthread_mutex_lock(&e->mu);
    if (st != TAGC_OK && e->failure == TAGC_OK)
      e->failure = st;
    e->comm_s += dt;
    e->completed++;
    pthread_cond_broadcast(&e->cv);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

/* Queues a task; returns its id. With world size 1 runs it at once. */
static int64_t submit(tagc_engine *e, task_kind kind, int unit, int slot) {
  task t = {kind, unit, slot};
  if (!e->thread_started) {
    tagc_status st = e->failure != TAGC_OK ? e->failure : run_task(e, &t);
    if (st != TAGC_OK)
      e->failure = st;
    e->completed++;
    return e->submitted++;
  }
  pthread_mutex_lock(&e->mu);
  while (e->submitted - e->completed >= QUEUE)
    pthread_cond_wait(&e->cv, &e->mu);
  int64_t id = e->submitted++;
  e->queue[id % QUEUE] = t;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  return id;
}

/* Waits until task `id` (and so every earlier one) completed; returns the first failure. */
static tagc_status wait_task(tagc_engine *e, int64_t id) {
  if (!e->thread_started)
    return e->failure;
  double t0 = tagc_now();
  pthread_mutex_lock(&e->mu);
  while (e->completed <= id)
    pthread_cond_wait(&e->cv, &e->mu);
  tagc_status st = e->failure;
  pthread_mutex_unlock(&e->mu);
  e->exposed_s += tagc_now() - t0;
  if (st != TAGC_OK)
    return tagc_errorf(st, "collective failed: %s", tagc_strerror(st));
  return TAGC_OK;
}

static tagc_status drain(tagc_engine *e) { return wait_task(e, e->submitted - 1); }

/* ---------- model hooks ---------- */

static int slot_of(const tagc_engine *e, int unit) {
  for (int s = 0; s < e->n_slots; s++)
    if (e->slot_unit[s] == unit)
      return s;
  return -1;
}

/* Starts gathering unit into a free slot unless it is already there. -1 when no slot is free
 * or the pass will not use the unit. */
static int prefetch(tagc_engine *e, int unit) {
  if (unit < 0 || unit >= e->L->n_units)
    return -1;
  if (e->dir < 0 && !tagc_model_backward_needs_params(e->L, unit))
    return -1;
  int s = slot_of(e, unit);
  if (s >= 0)
    return s;
  for (s = 0; s < e->n_slots; s++) {
    if (e->slot_unit[s] < 0) {
      e->slot_unit[s] = unit;
      e->slot_task[s] = submit(e, TASK_GATHER, unit, s);
      return s;
    }
  }
  return -1;
}

static const float *hook_params(void *ctx, int unit) {
  tagc_engine *e = ctx;
  int s = prefetch(e, unit);
  if (s < 0) {
    e->hooks.status = tagc_errorf(TAGC_EINTERNAL, "no free parameter buffer for unit %d", unit);
    return NULL;
  }
  prefetch(e, unit + e->dir);
  tagc_status st = wait_task(e, e->slot_task[s]);
  if (st != TAGC_OK) {
    e->hooks.status = st;
    return NULL;
  }
  return e->slot_buf[s];
}

static void hook_release(void *ctx, int unit) {
  tagc_engine *e = ctx;
  if (!e->cfg.reshard_after_forward)
    return; /* every unit stays gathered until the step ends */
  int s = slot_of(e, unit);
  if (s >= 0)
    e->slot_unit[s] = -1;
}

static float *hook_grads(void *ctx, int unit) {
  tagc_engine *e = ctx;
  return e->grads + e->L->units[unit].offset;
}

static tagc_status hook_backward_done(void *ctx, int unit) {
  tagc_engine *e = ctx;
  if (e->reduce_on_done)
    submit(e, TASK_REDUCE, unit, -1);
  return TAGC_OK;
}

/* ---------- lifecycle ---------- */

static tagc_status init_params(tagc_engine *e) {
  float *full = malloc(e->L->n_params * sizeof(float));
  if (!full)
    return tagc_errorf(TAGC_ENOMEM, "initial parameters (%zu floats)", e->L->n_params);
  tagc_model_init_params(e->L, e->cfg.seed, full);
  for (int i = 0; i < e->n_segs; i++) {
    segment *s = &e->segs[i];
    size_t n, lo = shard_range(e, s, &n);
    memcpy(s->p, full + s->off + lo, n * sizeof(float));
  }
  free(full);
  return TAGC_OK;
}

tagc_status tagc_engine_new(const tagc_engine_config *cfg, tagc_engine **out) {
  if (cfg->micro_batch < 1)
    return tagc_errorf(TAGC_EINVAL, "micro-batch must be at least 1");
  tagc_engine *e = calloc(1, sizeof *e);
  if (!e)
    return tagc_errorf(TAGC_ENOMEM, "engine");
  e->cfg = *cfg;
  e->L = cfg->layout;
  e->op_delay_s = cfg->op_delay_s;
  e->rank = cfg->comm ? tagc_comm_rank(cfg->comm) : 0;
  e->world = cfg->comm ? tagc_comm_world_size(cfg->comm) : 1;
  tagc_status st;
  if (cfg->batch < e->world) {
    st = tagc_errorf(TAGC_EINVAL, "global batch %lld is smaller than the world size %d",
                     (long long)cfg->batch, e->world);
    goto fail;
  }
  TAGC_CHECK_GOTO(build_segments(e), st, fail);
  e->grads = calloc(e->L->n_params, sizeof(float));
  e->tokens = malloc((size_t)cfg->micro_batch * (size_t)e->L->cfg.ctx);
  e->targets = malloc((size_t)cfg->micro_batch * (size_t)e->L->cfg.ctx);
  if (!e->grads || !e->tokens || !e->targets) {
    st = tagc_errorf(TAGC_ENOMEM, "gradient arena of %zu floats", e->L->n_params);
    goto fail;
  }
  e->n_slots = cfg->reshard_after_forward ? ROLLING_SLOTS : e->L->n_units;
  e->slot_buf = calloc((size_t)e->n_slots, sizeof(float *));
  e->slot_unit = malloc((size_t)e->n_slots * sizeof(int));
  e->slot_task = calloc((size_t)e->n_slots, sizeof(int64_t));
  if (!e->slot_buf || !e->slot_unit || !e->slot_task) {
    st = tagc_errorf(TAGC_ENOMEM, "unit parameter slots");
    goto fail;
  }
  for (int s = 0; s < e->n_slots; s++) {
    e->slot_unit[s] = -1;
    e->slot_buf[s] = malloc(e->max_unit * sizeof(float));
    if (!e->slot_buf[s]) {
      st = tagc_errorf(TAGC_ENOMEM, "unit parameter buffer of %zu floats", e->max_unit);
      goto fail;
    }
  }
  TAGC_CHECK_GOTO(tagc_model_acts_new(e->L, cfg->micro_batch, &e->acts), st, fail);
  TAGC_CHECK_GOTO(init_params(e), st, fail);
  e->hooks = (tagc_unit_hooks){e, hook_params, hook_grads, hook_backward_done, hook_release, TAGC_OK};
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  if (cfg->comm) {
    if (pthread_create(&e->thread, NULL, comm_thread, e) != 0) {
      st = tagc_errorf(TAGC_ENOMEM, "communication thread");
      goto fail;
    }
    e->thread_started = 1;
  }
  *out = e;
  return TAGC_OK;
fail:
  tagc_engine_free(e);
  return st;
}

void tagc_engine_free(tagc_engine *e) {
  if (!e)
    return;
  if (e->thread_started) {
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
  }
  for (int i = 0; e->segs && i < e->n_segs; i++) {
    free(e->segs[i].p);
    free(e->segs[i].residual);
    tagc_layout_free(&e->segs[i].lay);
  }
  free(e->scratch.kept);
  free(e->scratch.bitmap);
  free(e->scratch.global_bitmap);
  free(e->scratch.sketch);
  free(e->scratch.my_sketch);
  free(e->scratch.ws);
  for (int s = 0; e->slot_buf && s < e->n_slots; s++)
    free(e->slot_buf[s]);
  free(e->slot_buf);
  free(e->slot_unit);
  free(e->slot_task);
  free(e->gather16);
  tagc_model_acts_free(e->acts);
  free(e->segs);
  free(e->unit_first_seg);
  free(e->unit_n_segs);
  free(e->grads);
  free(e->staging);
  free(e->sums);
  free(e->seg_names);
  free(e->seg_numel);
  free(e->tokens);
  free(e->targets);
  free(e);
}

/* ---------- step ---------- */

/* Reduces n doubles over ranks (one all-gather): the first n_sum are summed in rank order
 * (identical bits everywhere), the rest take their maximum. */
static tagc_status reduce_over_ranks(tagc_engine *e, double *vals, int n, int n_sum) {
  if (e->world == 1)
    return TAGC_OK;
  double *buf = malloc((size_t)e->world * (size_t)n * sizeof(double));
  if (!buf)
    return tagc_errorf(TAGC_ENOMEM, "scalar all-gather");
  tagc_status st = tagc_comm_allgather(e->cfg.comm, vals, buf, (size_t)n * sizeof(double), e->cfg.op_timeout_s);
  if (st == TAGC_OK) {
    for (int k = 0; k < n; k++) {
      double acc = k < n_sum ? 0 : buf[k];
      for (int r = 0; r < e->world; r++) {
        double v = buf[(size_t)r * (size_t)n + (size_t)k];
        acc = k < n_sum ? acc + v : fmax(acc, v);
      }
      vals[k] = acc;
    }
  }
  free(buf);
  return st;
}

/* Forgets gathered units: parameters change between steps. Call with nothing in flight. */
static void reset_slots(tagc_engine *e) {
  for (int s = 0; s < e->n_slots; s++)
    e->slot_unit[s] = -1;
}

/* Forward (and backward when train) over the micro-batch in e->tokens / e->targets. */
static tagc_status pass(tagc_engine *e, int count, int train, int last_micro, float scale, double *loss_sum) {
  e->dir = 1;
  TAGC_CHECK(tagc_model_forward(e->L, e->acts, &e->hooks, e->tokens, e->targets, count, loss_sum));
  if (!train)
    return TAGC_OK;
  e->dir = -1;
  e->reduce_on_done = last_micro;
  tagc_status st = tagc_model_backward(e->L, e->acts, &e->hooks, scale);
  e->reduce_on_done = 0;
  return st;
}

/* Records the global density of each tagc segment (all ranks see the same sums, so they
 * all choose the same rho next step) and the step's compression figures. */
/* The collectives of a pass without its compute: a rank with no samples in a micro-batch
 * still takes part in every all-gather and reduce-scatter of it, in the model's order. */
static tagc_status empty_pass(tagc_engine *e, int train, int last_micro) {
  int n = e->L->n_units;
  e->dir = 1;
  for (int u = 0; u < n; u++) {
    if (!hook_params(e, u))
      return e->hooks.status;
    hook_release(e, u);
  }
  if (!train)
    return TAGC_OK;
  e->dir = -1;
  e->reduce_on_done = last_micro;
  for (int u = n - 1; u >= 0; u--) {
    if (tagc_model_backward_needs_params(e->L, u)) {
      if (!hook_params(e, u))
        return e->hooks.status;
      hook_release(e, u);
    }
    hook_backward_done(e, u);
  }
  e->reduce_on_done = 0;
  return TAGC_OK;
}

/* Largest value of v over the ranks (collective; the comm thread must be idle). */
static tagc_status max_over_ranks(tagc_engine *e, int64_t v, int64_t *out) {
  *out = v;
  if (e->world == 1)
    return TAGC_OK;
  int64_t *all = malloc((size_t)e->world * sizeof *all);
  if (!all)
    return tagc_errorf(TAGC_ENOMEM, "all-gather of %d values", e->world);
  tagc_status st = tagc_comm_allgather(e->cfg.comm, &v, all, sizeof v, e->cfg.op_timeout_s);
  for (int r = 0; st == TAGC_OK && r < e->world; r++)
    if (all[r] > *out)
      *out = all[r];
  free(all);
  return st;
}

/* Micro-batch passes for `total` samples split over the ranks: every rank must run the same
 * number (they share the collectives of each pass), enough for the rank whose micro-batch
 * holds its slice in the most pieces. */
static tagc_status agree_passes(tagc_engine *e, int64_t total, int64_t *passes) {
  int64_t lo, hi;
  slice(total, e->world, e->rank, &lo, &hi);
  int64_t mine = (hi - lo + e->cfg.micro_batch - 1) / e->cfg.micro_batch;
  return max_over_ranks(e, mine > 0 ? mine : 1, passes);
}

/* Runs `passes` micro-batch passes over this rank's slice [lo, hi) of `total` samples
 * (piece i = [lo + n*i/passes, lo + n*(i+1)/passes)), filling tokens with fill(). */
typedef void (*fill_fn)(const tagc_corpus *c, uint64_t seed, int64_t step, int64_t first,
                        int count, int T, uint8_t *tokens, uint8_t *targets);

static tagc_status run_passes(tagc_engine *e, const tagc_corpus *corpus, int64_t step,
                              int64_t total, int64_t passes, int train, fill_fn fill,
                              double *loss_sum) {
  int T = e->L->cfg.ctx;
  int64_t lo, hi;
  slice(total, e->world, e->rank, &lo, &hi);
  int64_t n = hi - lo;
  float scale = (float)(1.0 / ((double)total * T));
  *loss_sum = 0;
  for (int64_t i = 0; i < passes; i++) {
    int64_t first = lo + n * i / passes;
    int count = (int)(lo + n * (i + 1) / passes - first);
    int last = i + 1 == passes;
    tagc_status st;
    if (count == 0) {
      st = empty_pass(e, train, last);
    } else {
      fill(corpus, e->cfg.seed, step, first, count, T, e->tokens, e->targets);
      double part = 0;
      st = pass(e, count, train, last, scale, &part);
      *loss_sum += part;
    }
    if (st != TAGC_OK)
      return st;
  }
  return TAGC_OK;
}

/* tagc_val_fill with the sampler's signature (validation windows ignore seed and step). */
static void val_fill(const tagc_corpus *c, uint64_t seed, int64_t step, int64_t first, int count,
                     int T, uint8_t *tokens, uint8_t *targets) {
  (void)seed;
  (void)step;
  tagc_val_fill(c, first, count, T, tokens, targets);
}

static void update_density(tagc_engine *e, tagc_step_stats *stats) {
  double bits = 0, elements = 0, rho = 0;
  int n = 0;
  for (int i = 0; i < e->n_segs; i++) {
    segment *s = &e->segs[i];
    if (s->pol.kind != TAGC_POLICY_TAGC || e->world == 1)
      continue;
    n++;
    rho += s->dense ? 0 : s->rho_used;
    if (s->dense)
      continue; /* sent dense: nothing measured */
    s->lane_density_seen = e->sums[SUM_SEG0 + e->n_segs + i];
    bits += e->sums[SUM_SEG0 + i];
    elements += (double)s->len;
  }
  stats->global_density = elements > 0 ? bits / elements : 0;
  stats->rho = n ? rho / n : 0;
  stats->unpeeled = (uint64_t)e->sums[SUM_ESTIMATED];
  if (e->sums[SUM_FB_ABS] > 0)
    stats->feedback_error = fabs(e->sums[SUM_FB_IN] - e->sums[SUM_FB_OUT]) / e->sums[SUM_FB_ABS];
  stats->tagc_elements = (uint64_t)bits;
}


tagc_status tagc_engine_step(tagc_engine *e, const tagc_corpus *corpus, int64_t step,
                             tagc_step_stats *stats) {
  memset(stats, 0, sizeof *stats);
  double t0 = tagc_now();
  int T = e->L->cfg.ctx;
  tagc_comm_stats c0, c1;
  if (e->cfg.comm)
    tagc_comm_stats_get(e->cfg.comm, &c0);
  e->exposed_s = 0;
  pthread_mutex_lock(&e->mu);
  e->comm_s = 0;
  pthread_mutex_unlock(&e->mu);

  reset_slots(e);
  memset(e->grads, 0, e->L->n_params * sizeof(float));
  e->step_now = step;
  double *sums = e->sums;
  memset(sums, 0, (size_t)(SUM_SEG0 + 2 * e->n_segs) * sizeof(double));
  if (e->train_passes == 0) /* first step of this engine */
    TAGC_CHECK(agree_passes(e, e->cfg.batch, &e->train_passes));
  tagc_status st = run_passes(e, corpus, step, e->cfg.batch, e->train_passes, 1, tagc_batch_fill,
                              &sums[SUM_LOSS]);
  tagc_status drained = drain(e);
  if (st == TAGC_OK)
    st = drained;
  if (st != TAGC_OK)
    return st;
  sums[SUM_FB_IN] = e->feedback[0];
  sums[SUM_FB_OUT] = e->feedback[1];
  sums[SUM_FB_ABS] = e->feedback[2];
  memset(e->feedback, 0, sizeof e->feedback);
  for (int i = 0; i < e->n_segs; i++) {
    segment *s = &e->segs[i];
    sums[SUM_SQ] += tagc_sumsq(s->g, s->S);
    if (s->residual) {
      sums[SUM_ESTIMATED] += (double)s->estimated;
      sums[SUM_SEG0 + i] = (double)s->global_bits;
      sums[SUM_SEG0 + e->n_segs + i] = s->lane_density;
    }
  }
  TAGC_CHECK(reduce_over_ranks(e, sums, SUM_SEG0 + 2 * e->n_segs, SUM_SEG0 + e->n_segs));
  stats->loss = sums[SUM_LOSS] / ((double)e->cfg.batch * T);
  stats->grad_norm = sqrt(sums[SUM_SQ]);
  if (!isfinite(stats->loss) || !isfinite(stats->grad_norm))
    return tagc_errorf(TAGC_ENUMERIC, "step %lld: loss %g, gradient norm %g", (long long)step,
                       stats->loss, stats->grad_norm);
  update_density(e, stats);
  float clip = 1.0f;
  if (e->cfg.adam.grad_clip > 0 && stats->grad_norm > e->cfg.adam.grad_clip)
    clip = (float)(e->cfg.adam.grad_clip / stats->grad_norm);
  stats->lr = tagc_lr_at(&e->cfg.adam, step);
  for (int i = 0; i < e->n_segs; i++) {
    segment *s = &e->segs[i];
    size_t n, off = shard_range(e, s, &n);
    if (n)
      TAGC_CHECK(tagc_adamw_update_range(e->L, s->off + off, n, s->p, s->g, s->m, s->v, &e->cfg.adam,
                                         step + 1, (float)stats->lr, clip));
  }
  if (e->cfg.comm) {
    tagc_comm_stats_get(e->cfg.comm, &c1);
    for (int k = 0; k < TAGC_COMM_OP_COUNT; k++) {
      stats->bytes_sent += c1.op[k].bytes_sent - c0.op[k].bytes_sent;
      stats->bytes_recv += c1.op[k].bytes_recv - c0.op[k].bytes_recv;
    }
  }
  pthread_mutex_lock(&e->mu);
  stats->comm_s = e->comm_s;
  pthread_mutex_unlock(&e->mu);
  stats->exposed_comm_s = e->exposed_s;
  stats->step_s = tagc_now() - t0;
  return TAGC_OK;
}

tagc_status tagc_engine_eval(tagc_engine *e, const tagc_corpus *corpus, int64_t n_windows,
                             double *val_loss) {
  int T = e->L->cfg.ctx;
  reset_slots(e);
  int64_t passes;
  double sum = 0;
  TAGC_CHECK(agree_passes(e, n_windows, &passes));
  tagc_status st = run_passes(e, corpus, 0, n_windows, passes, 0, val_fill, &sum);
  tagc_status drained = drain(e);
  TAGC_CHECK(st);
  TAGC_CHECK(drained);
  TAGC_CHECK(reduce_over_ranks(e, &sum, 1, 1));
  *val_loss = sum / ((double)n_windows * T);
  return TAGC_OK;
}

tagc_status tagc_engine_gather_params(tagc_engine *e, float *out) {
  TAGC_CHECK(drain(e));
  for (int u = 0; u < e->L->n_units; u++)
    TAGC_CHECK(gather_unit(e, u, out + e->L->units[u].offset, 0));
  return TAGC_OK;
}

void tagc_engine_set_op_delay(tagc_engine *e, double seconds) { e->op_delay_s = seconds; }

int tagc_engine_world_size(const tagc_engine *e) { return e->world; }
int tagc_engine_rank(const tagc_engine *e) { return e->rank; }
int tagc_engine_n_segments(const tagc_engine *e) { return e->n_segs; }

void tagc_engine_segment_info(const tagc_engine *e, int i, tagc_segment_info *out) {
  const segment *s = &e->segs[i];
  *out = (tagc_segment_info){s->unit, s->off, s->len, s->S, s->pol.kind};
}

/* ---------- checkpoints ---------- */

static const char *const stream_names[TAGC_ENGINE_STREAMS] = {"param", "adam_m", "adam_v", "residual"};

void tagc_engine_ckpt_layout(const tagc_engine *e, tagc_ckpt_layout *layout,
                             tagc_ckpt_range *ranges) {
  layout->n_units = e->n_segs;
  layout->unit_names = (const char *const *)e->seg_names;
  layout->unit_numel = e->seg_numel;
  layout->n_streams = TAGC_ENGINE_STREAMS;
  layout->stream_names = stream_names;
  for (int i = 0; i < e->n_segs; i++) {
    ranges[i].lo = (int64_t)((size_t)e->rank * e->segs[i].S);
    ranges[i].hi = ranges[i].lo + (int64_t)e->segs[i].S;
  }
}

/* Replaces each rank's residual by the summed residual of its own shard (zero elsewhere). */
static tagc_status canonicalise_residual(tagc_engine *e, segment *s) {
  size_t n = s->S * (size_t)e->world;
  float *mine = s->residual + (size_t)e->rank * s->S;
  TAGC_CHECK(tagc_comm_reduce_scatter(e->cfg.comm, s->residual, e->staging, s->S, TAGC_DTYPE_F32,
                                      TAGC_REDOP_SUM, TAGC_WIRE_NATIVE, e->cfg.op_timeout_s));
  memset(s->residual, 0, n * sizeof(float));
  memcpy(mine, e->staging, s->S * sizeof(float));
  return TAGC_OK;
}

tagc_status tagc_engine_snapshot(tagc_engine *e, float *const *views) {
  TAGC_CHECK(drain(e));
  for (int i = 0; i < e->n_segs; i++) {
    segment *s = &e->segs[i];
    size_t n;
    shard_range(e, s, &n);
    if (s->residual && e->world > 1)
      TAGC_CHECK(canonicalise_residual(e, s));
    float *const *v = views + (size_t)i * TAGC_ENGINE_STREAMS;
    const float *src[TAGC_ENGINE_STREAMS] = {s->p, s->m, s->v,
                                             s->residual ? s->residual + (size_t)e->rank * s->S : NULL};
    for (int k = 0; k < TAGC_ENGINE_STREAMS; k++) {
      if (!n)
        continue;
      if (src[k])
        memcpy(v[k], src[k], n * sizeof(float));
      else
        memset(v[k], 0, n * sizeof(float));
    }
  }
  return TAGC_OK;
}

tagc_status tagc_engine_load(tagc_engine *e, tagc_ckpt_reader *rd) {
  int streams[TAGC_ENGINE_STREAMS];
  for (int k = 0; k < TAGC_ENGINE_STREAMS; k++)
    if ((streams[k] = tagc_ckpt_reader_stream_index(rd, stream_names[k])) < 0)
      return tagc_errorf(TAGC_ECORRUPT, "%s: no '%s' stream", tagc_ckpt_reader_path(rd), stream_names[k]);
  for (int i = 0; i < e->n_segs; i++) {
    segment *s = &e->segs[i];
    int u = tagc_ckpt_reader_unit_index(rd, s->name);
    if (u < 0 || tagc_ckpt_reader_unit_numel(rd, u) != (int64_t)s->len)
      return tagc_errorf(TAGC_ECORRUPT, "%s: unit %s is missing or has another size: the "
                         "checkpoint is of another model or compression policy",
                         tagc_ckpt_reader_path(rd), s->name);
    int64_t lo = (int64_t)((size_t)e->rank * s->S), hi = lo + (int64_t)s->S;
    float *dst[3] = {s->p, s->m, s->v};
    for (int k = 0; k < 3; k++)
      TAGC_CHECK(tagc_ckpt_read(rd, u, streams[k], lo, hi, dst[k]));
    if (s->pol.kind == TAGC_POLICY_TAGC) { /* at world size 1 folded into the first step */
      size_t n = s->S * (size_t)e->world;
      if (!s->residual && !(s->residual = calloc(n, sizeof(float))))
        return tagc_errorf(TAGC_ENOMEM, "residual of %zu elements", n);
      memset(s->residual, 0, n * sizeof(float));
      TAGC_CHECK(tagc_ckpt_read(rd, u, streams[3], lo, hi, s->residual + (size_t)e->rank * s->S));
    }
  }
  return TAGC_OK;
}

json_t *tagc_engine_compression_state(const tagc_engine *e) {
  json_t *segs = json_array();
  for (int i = 0; segs && i < e->n_segs; i++) {
    const segment *s = &e->segs[i];
    json_array_append_new(segs, json_pack("{s:s, s:s, s:f, s:f, s:f}", "name", s->name,
                                          "policy", tagc_policy_kind_name(s->pol.kind),
                                          "lane_density_seen", s->lane_density_seen, "rho",
                                          s->rho_used, "target_density", s->pol.density));
  }
  return json_pack("{s:i, s:o}", "world_size", e->world, "segments", segs);
}

tagc_status tagc_engine_set_compression_state(tagc_engine *e, const json_t *state) {
  json_t *segs = json_object_get(state, "segments");
  size_t i;
  json_t *item;
  json_array_foreach(segs, i, item) {
    const char *name = json_string_value(json_object_get(item, "name"));
    json_t *ld = json_object_get(item, "lane_density_seen");
    if (!name || !json_is_number(ld))
      return tagc_errorf(TAGC_ECORRUPT, "compression state entry %zu is malformed", i);
    for (int k = 0; k < e->n_segs; k++) {
      if (!strcmp(e->segs[k].name, name)) {
        e->segs[k].lane_density_seen = json_number_value(ld);
      }
    }
  }
  return TAGC_OK;
}
