/* The sharded engine's schedule (engine.h): segments and shards, the communication thread
 * and its tasks, the parameter slots, the model hooks, the micro-batch passes and the step.
 * Gradient reduction is the gradient codec's (grad_codec.h), parameter gathers the gather
 * codec's (gather_codec.h), the adaptive decisions engine_auto.c's, checkpoints
 * engine_ckpt.c's. */
#include "engine/engine_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "engine/codec_params.h"
#include "engine/device.h"
#include "kernels/tagc_kernels.h"

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
    s->S = e->world == 1 ? s->len
                         : round_up((s->len + (size_t)e->world - 1) / (size_t)e->world, TAGC_SHARD_BLOCK);
    float *block;
    TAGC_CHECK(tagc_device_alloc(e->dev, 4 * s->S * sizeof(float), (void **)&block));
    s->p = block;
    s->m = block + s->S;
    s->v = block + 2 * s->S;
    s->g = block + 3 * s->S;
    if (s->S * (size_t)e->world > max_padded)
      max_padded = s->S * (size_t)e->world;
    TAGC_CHECK(tagc_grad_segment_new(e->codec, &s->pol, s->len, s->S, (uint32_t)s->unit, &s->codec));
    /* a unit's bf16/int8 gather (gather_codec.h) sends all its shards at once */
    int first = i == e->unit_first_seg[s->unit];
    unit_S = (first ? 0 : unit_S) + s->S;
    unit_chunks = (first ? 0 : unit_chunks) + (size_t)tagc_q8_chunk_bytes((int64_t)s->S);
    max_unit_S = unit_S > max_unit_S ? unit_S : max_unit_S;
    max_unit_chunks = unit_chunks > max_unit_chunks ? unit_chunks : max_unit_chunks;
    if (e->unit_n_segs[s->unit] > max_unit_segs)
      max_unit_segs = e->unit_n_segs[s->unit];
  }
  e->jobs = calloc((size_t)max_unit_segs, sizeof *e->jobs);
  e->parts = calloc((size_t)max_unit_segs, sizeof *e->parts);
  if (!e->jobs || !e->parts)
    return tagc_errorf(TAGC_ENOMEM, "engine segments");
  TAGC_CHECK(tagc_device_alloc(e->dev, max_padded * sizeof(float), (void **)&e->staging));
  e->gather_adaptive = e->cfg.gather_auto && e->n_adaptive > 0 && e->world > 1;
  e->gather = e->cfg.gather;
  tagc_gather_codec_config gc = {e->dev, e->cfg.comm, e->cfg.op_timeout_s,
                                 e->gather_adaptive ? TAGC_ENC_DENSE : TAGC_ENC_BIT(e->gather),
                                 max_unit_S, max_unit_chunks};
  TAGC_CHECK(tagc_gather_codec_new(&gc, &e->gathers));
  TAGC_CHECK(tagc_step_scalars_init(&e->scalars, e->n_segs, e->world));
  size_t n_scalars = tagc_step_scalars_count(&e->scalars);
  e->xfer_bytes = n_scalars * ((size_t)e->world + 1) * sizeof(double);
  TAGC_CHECK(tagc_device_alloc(e->dev, e->xfer_bytes, &e->xfer));
  e->scalars_packed = malloc(n_scalars * sizeof(double));
  e->scalars_all = malloc(n_scalars * (size_t)e->world * sizeof(double));
  e->seg_names = malloc((size_t)e->n_segs * sizeof(char *));
  e->seg_numel = malloc((size_t)e->n_segs * sizeof(int64_t));
  e->sq_x = malloc((size_t)e->n_segs * sizeof *e->sq_x);
  e->sq_n = malloc((size_t)e->n_segs * sizeof *e->sq_n);
  e->opt_segs = malloc((size_t)e->n_segs * sizeof *e->opt_segs);
  e->sq = malloc((size_t)e->n_segs * sizeof *e->sq);
  if (!e->scalars_packed || !e->scalars_all || !e->seg_names || !e->seg_numel || !e->sq_x ||
      !e->sq_n || !e->sq || !e->opt_segs)
    return tagc_errorf(TAGC_ENOMEM, "engine tables");
  for (int i = 0; i < e->n_segs; i++) {
    e->seg_names[i] = e->segs[i].name;
    e->seg_numel[i] = (int64_t)e->segs[i].len;
  }
  return TAGC_OK;
}

size_t engine_max_shard(const tagc_engine *e) {
  size_t m = 0;
  for (int i = 0; i < e->n_segs; i++)
    m = e->segs[i].S > m ? e->segs[i].S : m;
  return m;
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
      e->slot_task[s] = engine_submit(e, TASK_GATHER, unit, s);
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
  tagc_status st = engine_wait_task(e, e->slot_task[s]);
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
    mark(e, ENGINE_MARK_SLOT + s);
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
    engine_submit(e, TASK_REDUCE, unit, -1);
  }
  return TAGC_OK;
}

/* ---------- parameter slots ---------- */

tagc_status engine_grow_slots(tagc_engine *e, int n) {
  for (; e->slot_cap < n; e->slot_cap++)
    TAGC_CHECK(tagc_device_alloc(e->dev, e->max_unit * sizeof(float), (void **)&e->slot_buf[e->slot_cap]));
  return TAGC_OK;
}

void engine_shrink_slots(tagc_engine *e, int n) {
  for (; e->slot_buf && e->slot_cap > n; e->slot_cap--) {
    tagc_device_free(e->dev, e->slot_buf[e->slot_cap - 1]);
    e->slot_buf[e->slot_cap - 1] = NULL;
  }
}

/* ---------- lifecycle ---------- */

static tagc_status init_params(tagc_engine *e) {
  float *own = e->cfg.init_params ? NULL : malloc(e->L->n_params * sizeof(float));
  const float *full = e->cfg.init_params ? e->cfg.init_params : own;
  if (!full)
    return tagc_errorf(TAGC_ENOMEM, "initial parameters (%zu floats)", e->L->n_params);
  if (own)
    tagc_model_init_params(e->L, e->cfg.seed, own);
  tagc_status st = TAGC_OK;
  for (int i = 0; st == TAGC_OK && i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    size_t n, lo = engine_shard_range(e, s, &n);
    st = tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, s->p, full + s->off + lo, n * sizeof(float),
                          TAGC_COPY_H2D);
  }
  free(own);
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
  e->delay_fd = tagc_thread_delay_open(); /* the calling thread is the compute thread */
  e->rank = cfg->comm ? tagc_comm_rank(cfg->comm) : 0;
  e->world = cfg->comm ? tagc_comm_world_size(cfg->comm) : 1;
  tagc_status st;
  e->dev = cfg->device;
  if (!e->dev) {
    TAGC_CHECK_GOTO(tagc_device_open("cpu", TAGC_DEVICE_FP32, &e->dev), st, fail);
    e->own_dev = 1;
  }
  tagc_grad_codec_config codec = {e->dev, cfg->comm, cfg->op_timeout_s, cfg->check_feedback};
  TAGC_CHECK_GOTO(tagc_grad_codec_new(&codec, &e->codec), st, fail);
  if (e->L->n_units >= ENGINE_MARK_SLOT || ENGINE_MARK_SLOT + e->L->n_units > TAGC_DEVICE_MARKS) {
    st = tagc_errorf(TAGC_EINVAL, "engine: %d units is more than the %d device marks allow",
                     e->L->n_units, ENGINE_MARK_SLOT);
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
  int max_slots = e->L->n_units > ENGINE_ROLLING_SLOTS ? e->L->n_units : ENGINE_ROLLING_SLOTS;
  e->n_slots = e->reshard ? ENGINE_ROLLING_SLOTS : e->L->n_units;
  e->slot_buf = calloc((size_t)max_slots, sizeof(float *));
  e->slot_unit = malloc((size_t)max_slots * sizeof(int));
  e->slot_task = calloc((size_t)max_slots, sizeof(int64_t));
  if (!e->slot_buf || !e->slot_unit || !e->slot_task) {
    st = tagc_errorf(TAGC_ENOMEM, "unit parameter slots");
    goto fail;
  }
  for (int s = 0; s < max_slots; s++)
    e->slot_unit[s] = -1;
  TAGC_CHECK_GOTO(engine_grow_slots(e, e->n_slots), st, fail);
  if (e->reshard_adaptive)
    engine_prepare_hold_all(e);
  TAGC_CHECK_GOTO(tagc_device_model_new(e->dev, e->L, cfg->micro_batch, &e->model), st, fail);
  TAGC_CHECK_GOTO(init_params(e), st, fail);
  e->hooks = (tagc_unit_hooks){e, hook_params, hook_grads, hook_backward_done, hook_release, TAGC_OK};
  TAGC_CHECK_GOTO(engine_comm_start(e), st, fail);
  *out = e;
  return TAGC_OK;
fail:
  tagc_engine_free(e);
  return st;
}

void tagc_engine_free(tagc_engine *e) {
  if (!e)
    return;
  engine_comm_stop(e);
  if (e->delay_fd >= 0)
    close(e->delay_fd);
  tagc_device *d = e->dev;
  if (d) {
    for (int i = 0; e->segs && i < e->n_segs; i++) {
      tagc_device_free(d, e->segs[i].p);
      tagc_grad_segment_free(e->codec, e->segs[i].codec);
    }
    tagc_grad_codec_free(e->codec);
    tagc_gather_codec_free(e->gathers);
    void *bufs[] = {e->grads, e->staging, e->xfer};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
      tagc_device_free(d, bufs[i]);
    engine_shrink_slots(e, 0);
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
  free(e->parts);
  tagc_step_scalars_free(&e->scalars);
  free(e->scalars_packed);
  free(e->scalars_all);
  free(e->sq_x);
  free(e->sq_n);
  free(e->opt_segs);
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

/* The step's scalars reduced over ranks (one all-gather; the comm thread must be idle). */
static tagc_status reduce_scalars(tagc_engine *e) {
  if (e->world == 1)
    return TAGC_OK;
  tagc_step_scalars_pack(&e->scalars, e->scalars_packed);
  TAGC_CHECK(all_gather_host(e, e->scalars_packed, e->scalars_all,
                             tagc_step_scalars_count(&e->scalars) * sizeof(double)));
  tagc_step_scalars_reduce(&e->scalars, e->scalars_all, e->world);
  return TAGC_OK;
}

/* Sum of v over ranks in rank order (collective; the comm thread must be idle). */
static tagc_status sum_over_ranks(tagc_engine *e, double *v) {
  if (e->world == 1)
    return TAGC_OK;
  TAGC_CHECK(all_gather_host(e, v, e->scalars_all, sizeof *v));
  double acc = 0;
  for (int r = 0; r < e->world; r++)
    acc += e->scalars_all[r];
  *v = acc;
  return TAGC_OK;
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
  /* a shard cut or rewritten under the run (one check per step, not per micro-batch): the
     step fails before anything is applied */
  return tagc_corpus_check(corpus);
}

/* tagc_val_fill with the sampler's signature (validation windows ignore seed and step). */
static void val_fill(const tagc_corpus *c, uint64_t seed, int64_t step, int64_t first, int count,
                     int T, uint16_t *tokens, uint16_t *targets) {
  (void)seed;
  (void)step;
  tagc_val_fill(c, first, count, T, tokens, targets);
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
  e->exposed_s = e->held_in_wait_s = 0;
  double optimizer_s = e->optimizer_s; /* the previous step's, reported with this one */
  e->optimizer_s = 0;
  pthread_mutex_lock(&e->mu);
  e->comm_s = e->comm_held_s = 0;
  pthread_mutex_unlock(&e->mu);

  reset_slots(e);
  TAGC_CHECK(tagc_device_zero(e->dev, TAGC_LANE_COMPUTE, e->grads, e->L->n_params * sizeof(float)));
  e->step_now = step;
  engine_warmup_wires(e, step);
  tagc_step_scalars *x = &e->scalars;
  tagc_step_scalars_clear(x);
  if (e->train_passes == 0) /* first step of this engine */
    TAGC_CHECK(agree_passes(e, e->cfg.batch, &e->train_passes));
  tagc_status st = run_passes(e, corpus, step, e->cfg.batch, e->train_passes, 1, tagc_batch_fill,
                              &x->loss);
  tagc_status drained = engine_drain(e);
  e->nan_step = -1; /* an injected NaN is for one run of the step */
  if (st == TAGC_OK)
    st = drained;
  if (st != TAGC_OK)
    return st;
  int local_bad = !isfinite(x->loss);
  for (int i = 0; i < e->n_segs; i++)
    local_bad |= e->segs[i].step.nonfinite > 0;
  double feedback[3];
  tagc_grad_codec_take_feedback(e->codec, feedback);
  x->fb_in = feedback[0];
  x->fb_out = feedback[1];
  x->fb_abs = feedback[2];
  for (int i = 0; i < e->n_segs; i++) {
    e->sq_x[i] = e->segs[i].g;
    e->sq_n[i] = e->segs[i].S;
  }
  TAGC_CHECK(tagc_device_sumsq_many(e->dev, e->sq_x, e->sq_n, e->n_segs, e->sq));
  for (int i = 0; i < e->n_segs; i++) {
    const tagc_grad_stats *g = &e->segs[i].step;
    local_bad |= !isfinite(e->sq[i]);
    x->sumsq += e->sq[i];
    if (g->feedback) {
      x->estimated += (double)g->estimated;
      x->global_bits[i] = (double)g->global_bits;
      x->lane_density[i] = g->lane_density;
      x->codec_s[i] = g->codec_s;
    }
  }
  if (e->n_adaptive && e->cfg.comm) /* the rate when peers are ready (comm.h) */
    x->link_rate = e->cfg.link_rate > 0
                       ? e->cfg.link_rate
                       : tagc_comm_link_peak_rate(tagc_comm_backend_of(e->cfg.comm));
  x->nonfinite = local_bad;
  x->save_due = e->save_due;
  e->save_due = 0;
  x->copy_due = e->copy_due;
  e->copy_due = 0;
  x->stop_due = e->stop_due;
  x->cannot_hold = e->reshard_adaptive && e->slot_cap < e->L->n_units;
  /* the passes and the previous step's optimizer, less the waits on the comm thread (and so
     on the peers), plus the time either thread was ready to run but held off a CPU (a CPU
     quota throttles the comm thread's collectives as much as the compute): what a slow rank
     has more of than the others */
  pthread_mutex_lock(&e->mu);
  double comm_held = e->comm_held_s;
  pthread_mutex_unlock(&e->mu);
  x->clock_s = tagc_now();
  x->compute_s = x->clock_s - t0 - e->exposed_s + e->held_in_wait_s + comm_held + optimizer_s;
  x->compute_ranks[0] = x->compute_s; /* world 1: no exchange */
  stats->reshard = e->reshard;
  TAGC_CHECK(reduce_scalars(e));
  stats->compute_s = e->world > 1 ? x->compute_ranks[e->rank] : x->compute_s;
  stats->compute_ranks = x->compute_ranks;
  stats->clock_s = x->clock_s;
  stats->save_due = x->save_due > 0;
  stats->copy_due = x->copy_due > 0;
  stats->stop_due = x->stop_due > 0;
  engine_choose_reshard(e, step, x->cannot_hold);
  stats->loss = x->loss / ((double)e->cfg.batch * T);
  stats->grad_norm = sqrt(x->sumsq);
  stats->lr = tagc_lr_at(&e->cfg.adam, step);
  /* One decision from the same summed figures on every rank: a non-finite step is skipped by
   * all of them, leaving parameters, moments and residuals as they were. */
  int skip = x->nonfinite != 0 || !isfinite(stats->loss) || !isfinite(stats->grad_norm);
  for (int i = 0; i < e->n_segs; i++)
    TAGC_CHECK(tagc_grad_segment_commit(e->codec, e->segs[i].codec, TAGC_LANE_COMPUTE, !skip));
  if (skip) {
    stats->nonfinite = 1;
    stats->nonfinite_ranks = (int)x->nonfinite;
    if (e->rank == 0)
      LOG_WARN("engine", "step %lld: non-finite values (loss %g, gradient norm %g, reported by "
               "%d of %d ranks): step skipped on every rank", (long long)step + 1, stats->loss,
               stats->grad_norm, stats->nonfinite_ranks, e->world);
    TAGC_CHECK(tagc_device_sync(e->dev, TAGC_LANE_COMPUTE));
    finish_stats(e, stats, &c0, t0);
    return TAGC_OK;
  }
  e->canonical = 0; /* the step's residuals are each rank's own again */
  engine_update_density(e, stats);
  if (e->n_adaptive && e->world > 1)
    TAGC_CHECK(engine_choose_wires(e, step, x->link_rate));
  double t_opt = tagc_now();
  float clip = 1.0f;
  if (e->cfg.adam.grad_clip > 0 && stats->grad_norm > e->cfg.adam.grad_clip)
    clip = (float)(e->cfg.adam.grad_clip / stats->grad_norm);
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    size_t n, off = engine_shard_range(e, s, &n);
    e->opt_segs[i] = (tagc_adamw_segment){s->off + off, n, s->p, s->g, s->m, s->v};
  }
  TAGC_CHECK(tagc_device_adamw(e->dev, e->L, e->opt_segs, e->n_segs, &e->cfg.adam, step + 1,
                               (float)stats->lr, clip));
  TAGC_CHECK(tagc_device_sync(e->dev, TAGC_LANE_COMPUTE)); /* the next gathers read the shards */
  e->optimizer_s = tagc_now() - t_opt;
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
  TAGC_CHECK(sum_over_ranks(e, &sum));
  *val_loss = sum / ((double)n_windows * T);
  return TAGC_OK;
}

tagc_status tagc_engine_gather_params(tagc_engine *e, float *out) {
  TAGC_CHECK(engine_drain(e));
  reset_slots(e); /* slot 0 is the device buffer of each gathered unit in turn */
  for (int u = 0; u < e->L->n_units; u++) {
    TAGC_CHECK(engine_gather_unit(e, u, e->slot_buf[0], 0));
    TAGC_CHECK(tagc_device_copy(e->dev, engine_task_lane(e), out + e->L->units[u].offset, e->slot_buf[0],
                                e->L->units[u].numel * sizeof(float), TAGC_COPY_D2H));
  }
  return TAGC_OK;
}

void tagc_engine_set_op_delay(tagc_engine *e, double seconds) { e->op_delay_s = seconds; }

void tagc_engine_request_save(tagc_engine *e, int due) { e->save_due = due != 0; }

void tagc_engine_request_copy(tagc_engine *e, int due) { e->copy_due = due != 0; }

void tagc_engine_request_stop(tagc_engine *e, int due) { e->stop_due = due != 0; }

void tagc_engine_inject_nan(tagc_engine *e, int64_t step) { e->nan_step = step; }

int tagc_engine_world_size(const tagc_engine *e) { return e->world; }
int tagc_engine_rank(const tagc_engine *e) { return e->rank; }
int tagc_engine_n_segments(const tagc_engine *e) { return e->n_segs; }

void tagc_engine_segment_info(const tagc_engine *e, int i, tagc_segment_info *out) {
  const engine_segment *s = &e->segs[i];
  *out = (tagc_segment_info){s->unit, s->off, s->len, s->S, s->pol};
}
