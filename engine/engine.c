/* The sharded engine's schedule (engine.h): segments and shards, the communication thread
 * and its tasks, the parameter slots, the model hooks, the micro-batch passes and the step.
 * Gradient reduction is the codec's (grad_codec.h); checkpoints are in engine_ckpt.c. */
#include "engine/engine_internal.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "kernels/tagc_kernels.h"
#include "engine/device.h"

#define BLOCK 1024 /* shard padding: the compression kernels' block */
#define ROLLING_SLOTS 3 /* unit parameter buffers when resharding: in use, prefetched, spare */
#define AUTO_EVERY 16 /* steps between wire decisions of `--compress auto` (after each probe);
                         the first one comes as soon as the link rate is known */
#define MARK_SLOT 2048  /* device marks: unit u's gradient is mark u, slot s's release MARK_SLOT + s */

/* Slots of the per-step scalars summed over ranks. */
enum {
  SUM_LOSS, SUM_SQ, SUM_ESTIMATED,
  SUM_FB_IN,  /* check_feedback: sum of raw gradients + old residuals of tagc segments */
  SUM_FB_OUT, /* ... sum of what was kept (sent) + new residuals */
  SUM_FB_ABS, /* ... sum of their absolute values (scale of the comparison) */
  SUM_NONFINITE, /* ranks that saw a non-finite loss, gradient or reduced shard: the step is
                    skipped on every rank when the sum is not 0 */
  SUM_CANNOT_HOLD, /* reshard_auto: ranks that cannot hold every gathered unit (budget or
                      allocation); resharding stays when the sum is not 0 */
  SUM_SEG0    /* + segment index: global bits (summed); then + n_segs + segment index: the
                 densest lane's density (maximum); then at + 2 n_segs minus the link rate
                 (maximum: the slowest rank's), then + 2 n_segs + 1 + segment index: the codec's
                 seconds (maximum) */
};

/* ---------- segments ---------- */

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

static tagc_status build_segments(tagc_engine *e) {
  const tagc_model_layout *L = e->L;
  e->segs = calloc((size_t)L->n_tensors, sizeof(engine_segment));
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
      engine_segment *prev = e->n_segs > e->unit_first_seg[u] ? &e->segs[e->n_segs - 1] : NULL;
      if (prev && tagc_role_policy_equal(&prev->pol, &pol)) {
        prev->len += ti->numel;
        continue;
      }
      engine_segment *s = &e->segs[e->n_segs++];
      snprintf(s->name, sizeof s->name, "u%d.%s", u, ti->name);
      s->unit = u;
      s->off = ti->offset;
      s->len = ti->numel;
      s->pol = pol;
      e->n_adaptive += pol.adaptive != 0;
    }
    e->unit_n_segs[u] = e->n_segs - e->unit_first_seg[u];
    if (ui->numel > e->max_unit)
      e->max_unit = ui->numel;
  }
  size_t max_padded = 0, max_unit_S = 0, max_unit_chunks = 0, unit_S = 0, unit_chunks = 0;
  int max_unit_segs = 1;
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    s->S = e->world == 1 ? s->len : round_up((s->len + (size_t)e->world - 1) / (size_t)e->world, BLOCK);
    float *block;
    TAGC_CHECK(tagc_device_alloc(e->dev, 4 * s->S * sizeof(float), (void **)&block));
    s->p = block;
    s->m = block + s->S;
    s->v = block + 2 * s->S;
    s->g = block + 3 * s->S;
    if (s->S * (size_t)e->world > max_padded)
      max_padded = s->S * (size_t)e->world;
    TAGC_CHECK(tagc_grad_segment_new(e->codec, &s->pol, s->len, s->S, (uint32_t)s->unit, &s->codec));
    /* the packed gathers of a unit (gather_packed) send all its shards at once */
    int first = i == e->unit_first_seg[s->unit];
    unit_S = (first ? 0 : unit_S) + s->S;
    unit_chunks = (first ? 0 : unit_chunks) + (size_t)tagc_q8_chunk_bytes((int64_t)s->S);
    max_unit_S = unit_S > max_unit_S ? unit_S : max_unit_S;
    max_unit_chunks = unit_chunks > max_unit_chunks ? unit_chunks : max_unit_chunks;
    if (e->unit_n_segs[s->unit] > max_unit_segs)
      max_unit_segs = e->unit_n_segs[s->unit];
  }
  e->jobs = calloc((size_t)max_unit_segs, sizeof *e->jobs);
  if (!e->jobs)
    return tagc_errorf(TAGC_ENOMEM, "engine segments");
  TAGC_CHECK(tagc_device_alloc(e->dev, max_padded * sizeof(float), (void **)&e->staging));
  e->gather_adaptive = e->cfg.gather_auto && e->n_adaptive > 0 && e->world > 1;
  e->gather = e->cfg.gather_int8 ? TAGC_GATHER_INT8
              : (e->cfg.gather_bf16 || e->gather_adaptive) ? TAGC_GATHER_BF16 : TAGC_GATHER_FP32;
  if (e->cfg.gather_int8 || e->gather_adaptive) {
    e->gatherq_chunk = max_unit_chunks;
    TAGC_CHECK(tagc_device_alloc(e->dev, ((size_t)e->world + 1) * e->gatherq_chunk,
                                 (void **)&e->gatherq));
  }
  e->gather16_n = max_unit_S;
  if (e->gather == TAGC_GATHER_BF16)
    TAGC_CHECK(tagc_device_alloc(e->dev, ((size_t)e->world + 1) * e->gather16_n * sizeof(uint16_t),
                                 (void **)&e->gather16));
  size_t n_sums = (size_t)(SUM_SEG0 + 3 * e->n_segs + 1);
  e->xfer_bytes = n_sums * ((size_t)e->world + 1) * sizeof(double);
  TAGC_CHECK(tagc_device_alloc(e->dev, e->xfer_bytes, &e->xfer));
  e->sums = malloc(n_sums * sizeof(double));
  e->seg_names = malloc((size_t)e->n_segs * sizeof(char *));
  e->seg_numel = malloc((size_t)e->n_segs * sizeof(int64_t));
  e->sq_x = malloc((size_t)e->n_segs * sizeof *e->sq_x);
  e->sq_n = malloc((size_t)e->n_segs * sizeof *e->sq_n);
  e->sq = malloc((size_t)e->n_segs * sizeof *e->sq);
  if (!e->sums || !e->seg_names || !e->seg_numel || !e->sq_x || !e->sq_n || !e->sq)
    return tagc_errorf(TAGC_ENOMEM, "engine tables");
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

size_t engine_shard_range(const tagc_engine *e, const engine_segment *s, size_t *n) {
  size_t lo = (size_t)e->rank * s->S;
  *n = lo >= s->len ? 0 : (s->len - lo < s->S ? s->len - lo : s->S);
  return lo;
}

/* ---------- communication tasks (run on the comm thread, or inline when world == 1) ---------- */

/* The lane of the communication tasks: the comm thread's own, or the compute lane when tasks
 * run inline (world size 1). */
static tagc_lane task_lane(const tagc_engine *e) {
  return e->thread_started ? TAGC_LANE_COMM : TAGC_LANE_COMPUTE;
}

/* The bf16 or int8 gather of a unit (W > 1) in one all-gather, however many segments it has:
 * each rank sends its shards of all of them, one after the other (segment order), and each
 * segment is decoded from its place in every rank's part (the int8 chunks at the stride of
 * that part; bf16 rank by rank). The same values as one all-gather per segment. */
static tagc_status gather_packed(tagc_engine *e, int unit, float *dst, tagc_gather_mode mode) {
  const tagc_unit_info *ui = &e->L->units[unit];
  tagc_lane lane = task_lane(e);
  tagc_kernel_ctx ctx = tagc_device_kernel_ctx(e->dev, lane, NULL, NULL, 0);
  int first = e->unit_first_seg[unit], last = first + e->unit_n_segs[unit];
  size_t W = (size_t)e->world, per_rank = 0; /* bytes (int8) or elements (bf16) */
  for (int i = first; i < last; i++)
    per_rank += mode == TAGC_GATHER_INT8 ? (size_t)tagc_q8_chunk_bytes((int64_t)e->segs[i].S)
                                         : e->segs[i].S;
  if (mode == TAGC_GATHER_INT8) {
    unsigned char *recv = e->gatherq, *send = e->gatherq + W * e->gatherq_chunk;
    size_t off = 0;
    for (int i = first; i < last; i++) {
      TAGC_CHECK(tagc_kernels_q8_encode(&ctx, e->segs[i].p, (int64_t)e->segs[i].S, send + off));
      off += (size_t)tagc_q8_chunk_bytes((int64_t)e->segs[i].S);
    }
    TAGC_CHECK(tagc_device_sync(e->dev, lane));
    TAGC_CHECK(tagc_comm_allgather(e->cfg.comm, send, recv, per_rank, e->cfg.op_timeout_s));
    off = 0;
    for (int i = first; i < last; i++) {
      const engine_segment *s = &e->segs[i];
      TAGC_CHECK(tagc_kernels_q8_decode(&ctx, recv + off, (int64_t)s->S, e->world, (int64_t)per_rank,
                                        (int64_t)s->len, dst + (s->off - ui->offset)));
      off += (size_t)tagc_q8_chunk_bytes((int64_t)s->S);
    }
    return TAGC_OK;
  }
  uint16_t *recv = e->gather16, *send = e->gather16 + W * e->gather16_n;
  size_t off = 0;
  for (int i = first; i < last; i++) {
    TAGC_CHECK(tagc_kernels_bf16_encode(&ctx, e->segs[i].p, send + off, (int64_t)e->segs[i].S));
    off += e->segs[i].S;
  }
  TAGC_CHECK(tagc_device_sync(e->dev, lane));
  TAGC_CHECK(tagc_comm_allgather(e->cfg.comm, send, recv, per_rank * sizeof(uint16_t),
                                 e->cfg.op_timeout_s));
  if (last - first == 1) /* one segment: the ranks' shards are contiguous */
    return tagc_kernels_bf16_decode(&ctx, recv, dst + (e->segs[first].off - ui->offset),
                                    (int64_t)e->segs[first].len);
  off = 0;
  for (int i = first; i < last; i++) {
    const engine_segment *s = &e->segs[i];
    float *out = dst + (s->off - ui->offset);
    for (size_t j = 0; j < W && j * s->S < s->len; j++) {
      size_t n = s->len - j * s->S < s->S ? s->len - j * s->S : s->S;
      TAGC_CHECK(tagc_kernels_bf16_decode(&ctx, recv + j * per_rank + off, out + j * s->S, (int64_t)n));
    }
    off += s->S;
  }
  return TAGC_OK;
}

/* Gathers unit's full parameters into dst; bf16 or int8 on the wire when configured and `for_compute`
 * (dumps and checkpoint tools always get the exact fp32 values). Inputs of a collective are
 * made ready (lane synchronised) before it is called. */
static tagc_status gather_unit(tagc_engine *e, int unit, float *dst, int for_compute) {
  const tagc_unit_info *ui = &e->L->units[unit];
  tagc_lane lane = task_lane(e);
  tagc_gather_mode mode = for_compute ? e->gather : TAGC_GATHER_FP32;
  if (e->world > 1 && mode != TAGC_GATHER_FP32)
    return gather_packed(e, unit, dst, mode);
  for (int i = e->unit_first_seg[unit]; i < e->unit_first_seg[unit] + e->unit_n_segs[unit]; i++) {
    engine_segment *s = &e->segs[i];
    float *out = dst + (s->off - ui->offset);
    if (e->world == 1) {
      TAGC_CHECK(tagc_device_copy(e->dev, lane, out, s->p, s->len * sizeof(float), TAGC_COPY_D2D));
      continue;
    }
    int direct = s->S * (size_t)e->world == s->len;
    float *recv = direct ? out : e->staging;
    TAGC_CHECK(tagc_comm_allgather(e->cfg.comm, s->p, recv, s->S * sizeof(float), e->cfg.op_timeout_s));
    if (!direct)
      TAGC_CHECK(tagc_device_copy(e->dev, lane, out, recv, s->len * sizeof(float), TAGC_COPY_D2D));
  }
  return TAGC_OK;
}

/* A task on the comm thread first waits for the compute lane's work it depends on (the unit's
 * backward, or the last reader of the slot it overwrites) and leaves its own lane idle, so
 * its results are ready for the compute lane when the task counts as completed. */
static tagc_status run_task(tagc_engine *e, const engine_task *t) {
  int threaded = e->thread_started;
  if (threaded)
    TAGC_CHECK(tagc_device_wait_mark(e->dev, t->kind == TASK_GATHER ? MARK_SLOT + t->slot : t->unit));
  if (t->kind == TASK_GATHER) {
    TAGC_CHECK(gather_unit(e, t->unit, e->slot_buf[t->slot], 1));
  } else {
    int first = e->unit_first_seg[t->unit], n = e->unit_n_segs[t->unit];
    for (int i = 0; i < n; i++) {
      engine_segment *s = &e->segs[first + i];
      e->jobs[i] = (tagc_grad_job){s->codec, e->grads + s->off, s->g, &s->step};
    }
    TAGC_CHECK(tagc_grad_reduce_unit(e->codec, e->jobs, n, task_lane(e), e->step_now, e->staging));
  }
  return threaded ? tagc_device_sync(e->dev, TAGC_LANE_COMM) : TAGC_OK;
}

static void *comm_thread(void *arg) {
  tagc_engine *e = arg;
  /* The CPU kernels this thread runs (bf16 conversions, sparsify, encode, decode) overlap the
   * model's compute: one thread. A new pthread starts from OpenMP's global default (all
   * cores), and those spinning teams took the cores from the compute thread: bf16 gathers and
   * tagc were 2.5-3x slower per step than fp32 on a fast link with 2 cores. */
  omp_set_num_threads(1);
  pthread_mutex_lock(&e->mu);
  for (;;) {
    while (!e->stop && e->completed == e->submitted)
      pthread_cond_wait(&e->cv, &e->mu);
    if (e->stop)
      break;
    engine_task t = e->queue[e->completed % ENGINE_QUEUE];
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
static int64_t submit(tagc_engine *e, engine_task_kind kind, int unit, int slot) {
  engine_task t = {kind, unit, slot};
  if (!e->thread_started) {
    tagc_status st = e->failure != TAGC_OK ? e->failure : run_task(e, &t);
    if (st != TAGC_OK)
      e->failure = st;
    e->completed++;
    return e->submitted++;
  }
  pthread_mutex_lock(&e->mu);
  while (e->submitted - e->completed >= ENGINE_QUEUE)
    pthread_cond_wait(&e->cv, &e->mu);
  int64_t id = e->submitted++;
  e->queue[id % ENGINE_QUEUE] = t;
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

tagc_status engine_drain(tagc_engine *e) { return wait_task(e, e->submitted - 1); }

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

/* Orders the comm lane after the compute lane's work so far (see run_task). A failure is
 * kept for the end of the pass (hooks that release return nothing). */
static void mark(tagc_engine *e, int id) {
  if (!e->thread_started)
    return; /* tasks run inline on the compute lane */
  tagc_status st = tagc_device_mark(e->dev, TAGC_LANE_COMPUTE, id);
  if (st != TAGC_OK && e->mark_status == TAGC_OK)
    e->mark_status = st;
}

static void hook_release(void *ctx, int unit) {
  tagc_engine *e = ctx;
  if (!e->reshard)
    return; /* every unit stays gathered until the step ends */
  int s = slot_of(e, unit);
  if (s >= 0) {
    mark(e, MARK_SLOT + s);
    e->slot_unit[s] = -1;
  }
}

static float *hook_grads(void *ctx, int unit) {
  tagc_engine *e = ctx;
  return e->grads + e->L->units[unit].offset;
}

/* Fault "nan": a NaN in the first element of each of the unit's segments of the local
 * gradient, after its backward and before its reduction (enqueued on the compute lane). */
static void poison_unit(tagc_engine *e, int unit) {
  static const float nan_value = NAN;
  for (int i = e->unit_first_seg[unit]; i < e->unit_first_seg[unit] + e->unit_n_segs[unit]; i++) {
    tagc_status st = tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, e->grads + e->segs[i].off,
                                      &nan_value, sizeof nan_value, TAGC_COPY_H2D);
    if (st != TAGC_OK && e->mark_status == TAGC_OK)
      e->mark_status = st;
  }
}

static tagc_status hook_backward_done(void *ctx, int unit) {
  tagc_engine *e = ctx;
  if (e->reduce_on_done) {
    if (e->step_now == e->nan_step)
      poison_unit(e, unit);
    mark(e, unit);
    submit(e, TASK_REDUCE, unit, -1);
  }
  return TAGC_OK;
}

/* ---------- parameter slots ---------- */

/* Allocates slot buffers up to n (each holds the largest unit). */
static tagc_status grow_slots(tagc_engine *e, int n) {
  for (; e->slot_cap < n; e->slot_cap++)
    TAGC_CHECK(tagc_device_alloc(e->dev, e->max_unit * sizeof(float), (void **)&e->slot_buf[e->slot_cap]));
  return TAGC_OK;
}

/* Frees slot buffers beyond the first n. */
static void shrink_slots(tagc_engine *e, int n) {
  for (; e->slot_buf && e->slot_cap > n; e->slot_cap--) {
    tagc_device_free(e->dev, e->slot_buf[e->slot_cap - 1]);
    e->slot_buf[e->slot_cap - 1] = NULL;
  }
}

/* Bytes the slots hold when every unit stays gathered for the step. */
static double held_all_bytes(const tagc_engine *e) {
  return (double)e->L->n_units * (double)e->max_unit * sizeof(float);
}

/* The budget of reshard_auto (auto_policy.h): the configured one, else a fraction of the GPU's
 * memory or of the host's physical RAM. */
static double gather_budget(const tagc_engine *e) {
  tagc_device_info info;
  tagc_device_get_info(e->dev, &info);
  double mem = (double)info.total_bytes;
  if (!(mem > 0)) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    mem = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
  }
  return tagc_auto_gather_budget(e->cfg.max_gather_bytes, mem);
}

/* reshard_auto: allocates a slot per unit when all of them fit the budget, so that the first
 * step can report whether this rank could stop resharding. An allocation failure only means
 * it cannot (the buffers are released). */
static void prepare_hold_all(tagc_engine *e) {
  if (!tagc_auto_keep_gathered(held_all_bytes(e), gather_budget(e)))
    return;
  if (grow_slots(e, e->L->n_units) != TAGC_OK) {
    LOG_DEBUG("engine", "keeping every gathered unit: %s", tagc_last_error());
    shrink_slots(e, ROLLING_SLOTS);
  }
}

/* reshard_auto, once, from the first step's figures that all ranks share: stop resharding when
 * every rank holds a slot per unit, else release the extra slots. Rank 0 logs the reason. */
static void choose_reshard(tagc_engine *e, int64_t step, double cannot_hold) {
  if (!e->reshard_adaptive)
    return;
  e->reshard_adaptive = 0;
  double held = held_all_bytes(e), budget = gather_budget(e);
  if (cannot_hold == 0) {
    e->reshard = 0;
    e->n_slots = e->L->n_units;
    if (e->rank == 0)
      LOG_INFO("engine", "auto: step %lld, reshard after forward: true -> false (every gathered "
               "unit held, %.1f MB within the budget %.1f MB on every rank: one all-gather per "
               "unit and step instead of two)", (long long)step + 1, held / 1e6, budget / 1e6);
    return;
  }
  shrink_slots(e, ROLLING_SLOTS);
  if (e->rank == 0)
    LOG_INFO("engine", "auto: step %lld, reshard after forward stays true (%d rank(s) cannot hold "
             "every gathered unit: %.1f MB against a budget of %.1f MB here, --max-gather-mem)",
             (long long)step + 1, (int)cannot_hold, held / 1e6, budget / 1e6);
}

/* ---------- lifecycle ---------- */

static tagc_status init_params(tagc_engine *e) {
  float *full = malloc(e->L->n_params * sizeof(float));
  if (!full)
    return tagc_errorf(TAGC_ENOMEM, "initial parameters (%zu floats)", e->L->n_params);
  tagc_model_init_params(e->L, e->cfg.seed, full);
  tagc_status st = TAGC_OK;
  for (int i = 0; st == TAGC_OK && i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    size_t n, lo = engine_shard_range(e, s, &n);
    st = tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, s->p, full + s->off + lo, n * sizeof(float),
                          TAGC_COPY_H2D);
  }
  free(full);
  return st;
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
  e->nan_step = -1;
  e->rank = cfg->comm ? tagc_comm_rank(cfg->comm) : 0;
  e->world = cfg->comm ? tagc_comm_world_size(cfg->comm) : 1;
  tagc_status st;
  e->dev = cfg->device;
  if (!e->dev) {
    TAGC_CHECK_GOTO(tagc_device_open("cpu", TAGC_DEVICE_FP32, &e->dev), st, fail);
    e->own_dev = 1;
  }
  tagc_grad_codec_config codec = {e->dev, cfg->comm, cfg->op_timeout_s, cfg->policy.sketch_bf16,
                                   cfg->check_feedback};
  TAGC_CHECK_GOTO(tagc_grad_codec_new(&codec, &e->codec), st, fail);
  if (e->L->n_units >= MARK_SLOT || MARK_SLOT + e->L->n_units > TAGC_DEVICE_MARKS) {
    st = tagc_errorf(TAGC_EINVAL, "engine: %d units is more than the %d device marks allow",
                     e->L->n_units, MARK_SLOT);
    goto fail;
  }
  if (cfg->batch < e->world) {
    st = tagc_errorf(TAGC_EINVAL, "global batch %lld is smaller than the world size %d",
                     (long long)cfg->batch, e->world);
    goto fail;
  }
  TAGC_CHECK_GOTO(build_segments(e), st, fail);
  TAGC_CHECK_GOTO(tagc_device_alloc(e->dev, e->L->n_params * sizeof(float), (void **)&e->grads), st, fail);
  e->tokens = malloc((size_t)cfg->micro_batch * (size_t)e->L->cfg.ctx * sizeof *e->tokens);
  e->targets = malloc((size_t)cfg->micro_batch * (size_t)e->L->cfg.ctx * sizeof *e->targets);
  if (!e->tokens || !e->targets) {
    st = tagc_errorf(TAGC_ENOMEM, "token buffers");
    goto fail;
  }
  e->reshard = cfg->reshard_after_forward;
  e->reshard_adaptive = e->reshard && cfg->reshard_auto && e->n_adaptive > 0 && e->world > 1;
  int max_slots = e->L->n_units > ROLLING_SLOTS ? e->L->n_units : ROLLING_SLOTS;
  e->n_slots = e->reshard ? ROLLING_SLOTS : e->L->n_units;
  e->slot_buf = calloc((size_t)max_slots, sizeof(float *));
  e->slot_unit = malloc((size_t)max_slots * sizeof(int));
  e->slot_task = calloc((size_t)max_slots, sizeof(int64_t));
  if (!e->slot_buf || !e->slot_unit || !e->slot_task) {
    st = tagc_errorf(TAGC_ENOMEM, "unit parameter slots");
    goto fail;
  }
  for (int s = 0; s < max_slots; s++)
    e->slot_unit[s] = -1;
  TAGC_CHECK_GOTO(grow_slots(e, e->n_slots), st, fail);
  if (e->reshard_adaptive)
    prepare_hold_all(e);
  TAGC_CHECK_GOTO(tagc_device_model_new(e->dev, e->L, cfg->micro_batch, &e->model), st, fail);
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
  tagc_device *d = e->dev;
  if (d) {
    for (int i = 0; e->segs && i < e->n_segs; i++) {
      tagc_device_free(d, e->segs[i].p);
      tagc_grad_segment_free(e->codec, e->segs[i].codec);
    }
    tagc_grad_codec_free(e->codec);
    void *bufs[] = {e->gather16, e->gatherq, e->grads, e->staging, e->xfer};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
      tagc_device_free(d, bufs[i]);
    shrink_slots(e, 0);
    tagc_device_model_free(e->model);
    if (e->own_dev)
      tagc_device_close(d);
  }
  free(e->slot_buf);
  free(e->slot_unit);
  free(e->slot_task);
  free(e->segs);
  free(e->unit_first_seg);
  free(e->unit_n_segs);
  free(e->jobs);
  free(e->sums);
  free(e->sq_x);
  free(e->sq_n);
  free(e->sq);
  free(e->seg_names);
  free(e->seg_numel);
  free(e->tokens);
  free(e->targets);
  free(e);
}

/* ---------- step ---------- */

/* All-gather of `bytes` host bytes per rank through the device staging buffer (NCCL works on
 * device memory). Collective; the comm thread must be idle. */
static tagc_status all_gather_host(tagc_engine *e, const void *send, void *recv, size_t bytes) {
  if (bytes * ((size_t)e->world + 1) > e->xfer_bytes)
    return tagc_errorf(TAGC_EINTERNAL, "scalar all-gather of %zu bytes exceeds its buffer", bytes);
  return tagc_device_allgather_host(e->dev, e->cfg.comm, send, recv, bytes, e->xfer, e->cfg.op_timeout_s);
}

/* Reduces n doubles over ranks (one all-gather): the first n_sum are summed in rank order
 * (identical bits everywhere), the rest take their maximum. */
static tagc_status reduce_over_ranks(tagc_engine *e, double *vals, int n, int n_sum) {
  if (e->world == 1)
    return TAGC_OK;
  double *buf = malloc((size_t)e->world * (size_t)n * sizeof(double));
  if (!buf)
    return tagc_errorf(TAGC_ENOMEM, "scalar all-gather");
  tagc_status st = all_gather_host(e, vals, buf, (size_t)n * sizeof(double));
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
  e->mark_status = TAGC_OK;
  TAGC_CHECK(tagc_device_model_forward(e->model, &e->hooks, e->tokens, e->targets, count, loss_sum));
  if (!train)
    return e->mark_status;
  e->dir = -1;
  e->reduce_on_done = last_micro;
  tagc_status st = tagc_device_model_backward(e->model, &e->hooks, scale);
  e->reduce_on_done = 0;
  return st != TAGC_OK ? st : e->mark_status;
}

/* The collectives of a pass without its compute: a rank with no samples in a micro-batch
 * still takes part in every all-gather and reduce-scatter of it, in the model's order. */
static tagc_status empty_pass(tagc_engine *e, int train, int last_micro) {
  int n = e->L->n_units;
  e->dir = 1;
  e->mark_status = TAGC_OK;
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
  return e->mark_status;
}

/* Largest value of v over the ranks (collective; the comm thread must be idle). */
static tagc_status max_over_ranks(tagc_engine *e, int64_t v, int64_t *out) {
  *out = v;
  if (e->world == 1)
    return TAGC_OK;
  int64_t *all = malloc((size_t)e->world * sizeof *all);
  if (!all)
    return tagc_errorf(TAGC_ENOMEM, "all-gather of %d values", e->world);
  tagc_status st = all_gather_host(e, &v, all, sizeof v);
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
                        int count, int T, uint16_t *tokens, uint16_t *targets);

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
                     int T, uint16_t *tokens, uint16_t *targets) {
  (void)seed;
  (void)step;
  tagc_val_fill(c, first, count, T, tokens, targets);
}

/* `--compress auto`: at the first step with a known link rate (so short runs benefit), then
 * after each density probe (every AUTO_EVERY steps), every adaptive segment takes the wire
 * auto_policy.h predicts cheapest, from figures all ranks share (the slowest link, the largest
 * codec time, the agreed density), so all ranks choose the same. Rank 0 logs each change with
 * its reason. */
static void choose_wires(tagc_engine *e, int64_t step, double link_rate) {
  int warm = step + 1 < e->cfg.compress_warmup; /* the next step is in the compression warm-up */
  if (!(link_rate > 0) ||
      (e->auto_decided && step % AUTO_EVERY != 0 && step + 1 != e->cfg.compress_warmup))
    return;
  e->auto_decided = 1;
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    if (!s->pol.adaptive)
      continue;
    tagc_auto_input in = {(int64_t)s->len, e->world, link_rate,
                          tagc_grad_segment_advised_rho(s->codec), s->codec_s};
    tagc_wire_mode now = tagc_grad_segment_mode(s->codec);
    tagc_wire_mode next = tagc_auto_choose(&in, now, s->switches);
    /* through the warm-up only the wires without error feedback: fp32 and bf16 */
    if (next == now || (warm && (next == TAGC_MODE_SKETCH || next == TAGC_MODE_INT8)))
      continue;
    double cost[TAGC_MODE_COUNT];
    tagc_auto_costs(&in, cost);
    if (e->rank == 0)
      LOG_INFO("engine", "auto: step %lld, %s: %s -> %s (link %.1f MB/s, rho %.2f, codec %.2f ms; "
               "predicted %.2f -> %.2f ms per step)", (long long)step + 1, s->name,
               tagc_wire_mode_name(now), tagc_wire_mode_name(next), link_rate / 1e6, in.rho,
               1e3 * (s->codec_s), 1e3 * cost[now], 1e3 * cost[next]);
    tagc_grad_segment_set_mode(s->codec, next);
    s->switches++;
  }
  if (!e->gather_adaptive)
    return;
  tagc_gather_mode next = tagc_auto_gather_choose(e->world, link_rate, e->gather, e->gather_switches);
  if (next == e->gather)
    return;
  double cost[TAGC_GATHER_COUNT];
  tagc_auto_gather_costs(e->world, link_rate, cost);
  if (e->rank == 0)
    LOG_INFO("engine", "auto: step %lld, parameter gathers: %s -> %s (link %.1f MB/s; predicted "
             "%.3f -> %.3f ns per gathered element)", (long long)step + 1,
             tagc_gather_mode_name(e->gather), tagc_gather_mode_name(next), link_rate / 1e6,
             1e9 * cost[e->gather], 1e9 * cost[next]);
  e->gather = next;
  e->gather_switches++;
}

/* The compression warm-up (cfg.compress_warmup): a fixed tagc segment sends dense bf16 (its
 * residual stays zero) before it ends and the sketch from then on, decided by the step alone
 * (a resumed run does the same). Adaptive segments are held dense by choose_wires. At the
 * first step after the warm-up every sketching segment forgets the density its last probe saw
 * (up to 16 steps old, of gradients without residual), so that step is a lossless probe and
 * the next ones are sized from it (with the stale figure, 300 steps of train_tagc's C=256
 * model left 9 elements to the estimate just after a 60-step warm-up). */
static void warmup_wires(tagc_engine *e, int64_t step) {
  if (e->world < 2)
    return;
  tagc_wire_mode want = step < e->cfg.compress_warmup ? TAGC_MODE_BF16 : TAGC_MODE_SKETCH;
  int started = 0;
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    if (s->pol.kind != TAGC_POLICY_TAGC)
      continue;
    if (!s->pol.adaptive && tagc_grad_segment_mode(s->codec) != want) {
      tagc_grad_segment_set_mode(s->codec, want);
      started += want == TAGC_MODE_SKETCH;
    }
    if (step > 0 && (step == e->cfg.compress_warmup || step == e->cfg.compress_warmup + 1) &&
        tagc_grad_segment_mode(s->codec) == TAGC_MODE_SKETCH)
      tagc_grad_segment_set_density_seen(s->codec, 0);
  }
  if (started && step > 0 && e->rank == 0)
    LOG_INFO("engine", "step %lld: the compression warm-up (%lld steps) is over: %d tagc "
             "segments sketch from now on", (long long)step + 1,
             (long long)e->cfg.compress_warmup, started);
}

/* Records the global density of each tagc segment (all ranks see the same sums, so they
 * all choose the same rho next step) and the step's compression figures. */
static void update_density(tagc_engine *e, tagc_step_stats *stats) {
  double bits = 0, elements = 0, rho = 0, tagc_len = 0, all = 0, path[TAGC_MODE_COUNT] = {0};
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    all += (double)s->len;
    if (!s->step.tagc) { /* a fixed dense policy */
      path[s->pol.kind == TAGC_POLICY_BF16 ? TAGC_MODE_BF16 : TAGC_MODE_FP32] += (double)s->len;
      continue;
    }
    path[s->step.wire] += (double)s->len;
    if (s->step.wire == TAGC_MODE_SKETCH && s->step.rho >= TAGC_AUTO_MIN_RHO)
      s->codec_s = e->sums[SUM_SEG0 + 2 * e->n_segs + 1 + i]; /* not a lossless probe's */
    tagc_len += (double)s->len;
    if (s->step.dense)
      continue; /* sent dense: nothing measured */
    tagc_grad_segment_set_density_seen(s->codec, e->sums[SUM_SEG0 + e->n_segs + i]);
    bits += e->sums[SUM_SEG0 + i];
    elements += (double)s->len;
    rho += s->step.rho * (double)s->len;
  }
  stats->global_density = elements > 0 ? bits / elements : 0;
  stats->rho = elements > 0 ? rho / elements : 0;
  stats->sketch_coverage = tagc_len > 0 ? elements / tagc_len : 0;
  for (int m = 0; m < TAGC_MODE_COUNT; m++)
    stats->path_fraction[m] = all > 0 ? path[m] / all : 0;
  stats->gather = tagc_gather_mode_name(e->gather);
  stats->unpeeled = (uint64_t)e->sums[SUM_ESTIMATED];
  if (e->sums[SUM_FB_ABS] > 0)
    stats->feedback_error = fabs(e->sums[SUM_FB_IN] - e->sums[SUM_FB_OUT]) / e->sums[SUM_FB_ABS];
  stats->tagc_elements = (uint64_t)bits;
}

/* The step's traffic and times. */
static void finish_stats(tagc_engine *e, tagc_step_stats *stats, const tagc_comm_stats *c0,
                         double t0) {
  if (e->cfg.comm) {
    tagc_comm_stats c1;
    tagc_comm_stats_get(e->cfg.comm, &c1);
    for (int k = 0; k < TAGC_COMM_OP_COUNT; k++) {
      stats->bytes_sent += c1.op[k].bytes_sent - c0->op[k].bytes_sent;
      stats->bytes_recv += c1.op[k].bytes_recv - c0->op[k].bytes_recv;
    }
  }
  pthread_mutex_lock(&e->mu);
  stats->comm_s = e->comm_s;
  pthread_mutex_unlock(&e->mu);
  stats->exposed_comm_s = e->exposed_s;
  stats->step_s = tagc_now() - t0;
}

tagc_status tagc_engine_step(tagc_engine *e, const tagc_corpus *corpus, int64_t step,
                             tagc_step_stats *stats) {
  memset(stats, 0, sizeof *stats);
  double t0 = tagc_now();
  int T = e->L->cfg.ctx;
  tagc_comm_stats c0 = {0};
  if (e->cfg.comm)
    tagc_comm_stats_get(e->cfg.comm, &c0);
  e->exposed_s = 0;
  pthread_mutex_lock(&e->mu);
  e->comm_s = 0;
  pthread_mutex_unlock(&e->mu);

  reset_slots(e);
  TAGC_CHECK(tagc_device_zero(e->dev, TAGC_LANE_COMPUTE, e->grads, e->L->n_params * sizeof(float)));
  e->step_now = step;
  warmup_wires(e, step);
  double *sums = e->sums;
  int n_sums = SUM_SEG0 + 3 * e->n_segs + 1, at_rate = SUM_SEG0 + 2 * e->n_segs;
  memset(sums, 0, (size_t)n_sums * sizeof(double));
  if (e->train_passes == 0) /* first step of this engine */
    TAGC_CHECK(agree_passes(e, e->cfg.batch, &e->train_passes));
  tagc_status st = run_passes(e, corpus, step, e->cfg.batch, e->train_passes, 1, tagc_batch_fill,
                              &sums[SUM_LOSS]);
  tagc_status drained = engine_drain(e);
  e->nan_step = -1; /* an injected NaN is for one run of the step */
  if (st == TAGC_OK)
    st = drained;
  if (st != TAGC_OK)
    return st;
  int local_bad = !isfinite(sums[SUM_LOSS]);
  for (int i = 0; i < e->n_segs; i++)
    local_bad |= e->segs[i].step.nonfinite > 0;
  double feedback[3];
  tagc_grad_codec_take_feedback(e->codec, feedback);
  sums[SUM_FB_IN] = feedback[0];
  sums[SUM_FB_OUT] = feedback[1];
  sums[SUM_FB_ABS] = feedback[2];
  for (int i = 0; i < e->n_segs; i++) {
    e->sq_x[i] = e->segs[i].g;
    e->sq_n[i] = e->segs[i].S;
  }
  TAGC_CHECK(tagc_device_sumsq_many(e->dev, e->sq_x, e->sq_n, e->n_segs, e->sq));
  for (int i = 0; i < e->n_segs; i++) {
    const tagc_grad_stats *g = &e->segs[i].step;
    local_bad |= !isfinite(e->sq[i]);
    sums[SUM_SQ] += e->sq[i];
    if (g->tagc) {
      sums[SUM_ESTIMATED] += (double)g->estimated;
      sums[SUM_SEG0 + i] = (double)g->global_bits;
      sums[SUM_SEG0 + e->n_segs + i] = g->lane_density;
      sums[at_rate + 1 + i] = g->codec_s;
    }
  }
  if (e->n_adaptive && e->cfg.comm) /* the rate when peers are ready (comm.h) */
    sums[at_rate] = -(e->cfg.link_rate > 0
                          ? e->cfg.link_rate
                          : tagc_comm_link_peak_rate(tagc_comm_backend_of(e->cfg.comm)));
  sums[SUM_NONFINITE] = local_bad;
  sums[SUM_CANNOT_HOLD] = e->reshard_adaptive && e->slot_cap < e->L->n_units;
  stats->reshard = e->reshard;
  TAGC_CHECK(reduce_over_ranks(e, sums, n_sums, SUM_SEG0 + e->n_segs));
  choose_reshard(e, step, sums[SUM_CANNOT_HOLD]);
  stats->loss = sums[SUM_LOSS] / ((double)e->cfg.batch * T);
  stats->grad_norm = sqrt(sums[SUM_SQ]);
  stats->lr = tagc_lr_at(&e->cfg.adam, step);
  /* One decision from the same summed figures on every rank: a non-finite step is skipped by
   * all of them, leaving parameters, moments and residuals as they were. */
  int skip = sums[SUM_NONFINITE] != 0 || !isfinite(stats->loss) || !isfinite(stats->grad_norm);
  for (int i = 0; i < e->n_segs; i++)
    TAGC_CHECK(tagc_grad_segment_commit(e->codec, e->segs[i].codec, TAGC_LANE_COMPUTE, !skip));
  if (skip) {
    stats->nonfinite = 1;
    stats->nonfinite_ranks = (int)sums[SUM_NONFINITE];
    if (e->rank == 0)
      LOG_WARN("engine", "step %lld: non-finite values (loss %g, gradient norm %g, reported by "
               "%d of %d ranks): step skipped on every rank", (long long)step + 1, stats->loss,
               stats->grad_norm, stats->nonfinite_ranks, e->world);
    TAGC_CHECK(tagc_device_sync(e->dev, TAGC_LANE_COMPUTE));
    finish_stats(e, stats, &c0, t0);
    return TAGC_OK;
  }
  update_density(e, stats);
  if (e->n_adaptive && e->world > 1)
    choose_wires(e, step, -sums[at_rate]);
  float clip = 1.0f;
  if (e->cfg.adam.grad_clip > 0 && stats->grad_norm > e->cfg.adam.grad_clip)
    clip = (float)(e->cfg.adam.grad_clip / stats->grad_norm);
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    size_t n, off = engine_shard_range(e, s, &n);
    TAGC_CHECK(tagc_device_adamw(e->dev, e->L, s->off + off, n, s->p, s->g, s->m, s->v,
                                 &e->cfg.adam, step + 1, (float)stats->lr, clip));
  }
  TAGC_CHECK(tagc_device_sync(e->dev, TAGC_LANE_COMPUTE)); /* the next gathers read the shards */
  finish_stats(e, stats, &c0, t0);
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
  tagc_status drained = engine_drain(e);
  TAGC_CHECK(st);
  TAGC_CHECK(drained);
  TAGC_CHECK(reduce_over_ranks(e, &sum, 1, 1));
  *val_loss = sum / ((double)n_windows * T);
  return TAGC_OK;
}

tagc_status tagc_engine_gather_params(tagc_engine *e, float *out) {
  TAGC_CHECK(engine_drain(e));
  reset_slots(e); /* slot 0 is the device buffer of each gathered unit in turn */
  for (int u = 0; u < e->L->n_units; u++) {
    TAGC_CHECK(gather_unit(e, u, e->slot_buf[0], 0));
    TAGC_CHECK(tagc_device_copy(e->dev, task_lane(e), out + e->L->units[u].offset, e->slot_buf[0],
                                e->L->units[u].numel * sizeof(float), TAGC_COPY_D2H));
  }
  return TAGC_OK;
}

void tagc_engine_set_op_delay(tagc_engine *e, double seconds) { e->op_delay_s = seconds; }

void tagc_engine_inject_nan(tagc_engine *e, int64_t step) { e->nan_step = step; }

int tagc_engine_world_size(const tagc_engine *e) { return e->world; }
int tagc_engine_rank(const tagc_engine *e) { return e->rank; }
int tagc_engine_n_segments(const tagc_engine *e) { return e->n_segs; }

void tagc_engine_segment_info(const tagc_engine *e, int i, tagc_segment_info *out) {
  const engine_segment *s = &e->segs[i];
  *out = (tagc_segment_info){s->unit, s->off, s->len, s->S, s->pol.kind};
}
