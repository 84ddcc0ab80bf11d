/* The gradient codec (grad_codec.h): per-policy reduction of a segment's gradient, the TAGC-2
 * pipeline with error feedback, and the residual's checkpoint views. */
#include "engine/grad_codec.h"

#include <math.h>
#include <stdlib.h>

#include "common/timeutil.h"
#include "engine/codec_params.h"
#include "kernels/tagc_kernels.h"

/* Scratch of the tagc reductions, grown on demand (device memory). */
typedef struct reduce_scratch {
  float *kept;
  uint64_t *bitmap, *global_bitmap;
  float *sketch, *my_sketch;
  void *ws;
  void *stats; /* sparsify stats [W], then decode stats, then the lane maximum */
  void *q8_send, *q8_recv; /* int8 wire: per rank, the chunks of kernels/q8.h of a unit's
                              int8 segments */
  float *q8_tail;          /* int8 wire: a shard that runs past the segment, zero-padded */
  size_t kept_cap, bitmap_cap, global_cap, sketch_cap, my_sketch_cap, ws_cap, stats_cap; /* bytes */
  size_t q8_send_cap, q8_recv_cap, q8_tail_cap;
} reduce_scratch;

struct tagc_grad_codec {
  tagc_grad_codec_config cfg;
  tagc_device *dev;
  int rank, world;
  reduce_scratch scratch;
  tagc_sparsify_stats *host_ss; /* [W]: the sparsify stats read back (non-finite counts) */
  double feedback[3]; /* check_feedback sums: see tagc_grad_codec_take_feedback */
};

/* What a reduction left for tagc_grad_segment_commit: the residual only changes there, once
 * every rank knows that the step is applied. */
enum { STAGE_NONE, STAGE_PENDING /* pending holds the new residual */,
       STAGE_ZERO /* sent dense with the residual: it becomes zero */,
       STAGE_FOLDED /* world size 1: the loaded residual was folded in, then freed */ };

struct tagc_grad_segment {
  tagc_role_policy pol;
  size_t len, S;            /* elements, shard size */
  uint32_t hash_seed;
  /* device memory (engine/device.h) */
  float *residual;          /* [W][S]: error feedback of this rank's local gradient (tagc) */
  float *pending;           /* [W][S]: the residual this step's sketch leaves, until commit */
  int staged;               /* what tagc_grad_segment_commit applies: a STAGE_ value */
  int residual_zero;        /* residual is known to be all +0 (allocated, or zeroed at a
                               commit): the dense wires then send the gradient itself */
  uint32_t *block_rows;     /* device copy of lay.block_rows */
  size_t block_rows_cap;    /* its bytes: it only grows, so a new rho frees nothing */
  tagc_layout lay;          /* sketch geometry at rho_used */
  double rho_used;          /* rho of the current layout (0 = none built yet) */
  double lane_density_seen; /* the maximum over ranks at the last step: decides rho */
  tagc_encoding enc;        /* with error feedback: sketch, or dense bf16/fp32/int8 (with
                               probes when the policy may sketch) */
};

tagc_status tagc_grad_codec_new(const tagc_grad_codec_config *cfg, tagc_grad_codec **out) {
  *out = NULL;
  if (tagc_device_is_cuda(cfg->device) && cfg->check_feedback)
    return tagc_errorf(TAGC_EUNSUPPORTED, "the error-feedback check reads buffers on the host: CPU only");
  tagc_grad_codec *c = calloc(1, sizeof *c);
  if (!c)
    return tagc_errorf(TAGC_ENOMEM, "gradient codec");
  c->cfg = *cfg;
  c->dev = cfg->device;
  c->rank = cfg->comm ? tagc_comm_rank(cfg->comm) : 0;
  c->world = cfg->comm ? tagc_comm_world_size(cfg->comm) : 1;
  c->host_ss = calloc((size_t)c->world, sizeof *c->host_ss);
  if (!c->host_ss) {
    free(c);
    return tagc_errorf(TAGC_ENOMEM, "gradient codec");
  }
  *out = c;
  return TAGC_OK;
}

void tagc_grad_codec_free(tagc_grad_codec *c) {
  if (!c)
    return;
  reduce_scratch *sc = &c->scratch;
  void *bufs[] = {sc->kept, sc->bitmap, sc->global_bitmap, sc->sketch, sc->my_sketch, sc->ws, sc->stats,
                  sc->q8_send, sc->q8_recv, sc->q8_tail};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    tagc_device_free(c->dev, bufs[i]);
  free(c->host_ss);
  free(c);
}

tagc_status tagc_grad_segment_new(tagc_grad_codec *c, const tagc_role_policy *pol, size_t len,
                                  size_t S, uint32_t hash_seed, tagc_grad_segment **out) {
  *out = NULL;
  tagc_grad_segment *s = calloc(1, sizeof *s);
  if (!s)
    return tagc_errorf(TAGC_ENOMEM, "gradient codec segment");
  s->pol = *pol;
  s->len = len;
  s->S = S;
  s->hash_seed = hash_seed;
  s->enc = tagc_role_policy_start(pol);
  if (tagc_role_policy_feeds_back(pol) && c->world > 1) {
    tagc_status st = tagc_device_alloc(c->dev, S * (size_t)c->world * sizeof(float), (void **)&s->residual);
    if (st != TAGC_OK) {
      free(s);
      return st;
    }
    s->residual_zero = 1; /* device memory comes zeroed */
  }
  *out = s;
  return TAGC_OK;
}

void tagc_grad_segment_free(tagc_grad_codec *c, tagc_grad_segment *s) {
  if (!s)
    return;
  tagc_device_free(c->dev, s->residual);
  tagc_device_free(c->dev, s->pending);
  tagc_device_free(c->dev, s->block_rows);
  tagc_layout_free(&s->lay);
  free(s);
}

void tagc_grad_segment_set_density_seen(tagc_grad_segment *s, double lane_density) {
  s->lane_density_seen = lane_density;
}

double tagc_grad_segment_density_seen(const tagc_grad_segment *s) { return s->lane_density_seen; }

double tagc_grad_segment_rho(const tagc_grad_segment *s) { return s->rho_used; }

/* The densest lane the next sketch is sized for: the last one seen with headroom (0 when
 * nothing was measured, or it was forgotten). */
static double sized_density(const tagc_grad_segment *s) {
  return fmin(1.0, TAGC_DENSITY_HEADROOM * s->lane_density_seen);
}

/* The kernels' advisor (kernels/rho.h): the rho whose sketch peels a densest lane of d. */
static tagc_status advise(const tagc_grad_segment *s, double d, double *rho) {
  return tagc_rho_advise(d, (int64_t)s->S, tagc_layout_lanes((int64_t)s->S), rho);
}

double tagc_grad_segment_advised_rho(const tagc_grad_segment *s) {
  double rho, d = sized_density(s);
  if (!tagc_role_policy_sketches(&s->pol) || !(d > 0) || advise(s, d, &rho) != TAGC_OK)
    return 0;
  return rho >= TAGC_SKETCH_MIN_RHO ? rho : 0;
}

void tagc_grad_segment_set_encoding(tagc_grad_segment *s, tagc_encoding enc) { s->enc = enc; }

tagc_encoding tagc_grad_segment_encoding(const tagc_grad_segment *s) { return s->enc; }

void tagc_grad_codec_take_feedback(tagc_grad_codec *c, double sums[3]) {
  for (int k = 0; k < 3; k++) {
    sums[k] = c->feedback[k];
    c->feedback[k] = 0;
  }
}

/* ---------- reduction ---------- */

/* The comm layer's wire for a dense encoding: bf16 elements, or fp32 as they are. */
static tagc_wire wire_of(tagc_encoding enc) { return enc == TAGC_ENC_BF16 ? TAGC_WIRE_BF16 : TAGC_WIRE_NATIVE; }

/* The segment's gradient as W shards of S floats: grad itself, or a zero-padded copy in work
 * when len < W*S. */
static tagc_status padded(tagc_grad_codec *c, const tagc_grad_segment *s, tagc_lane lane,
                          const float *grad, float *work, const float **out) {
  size_t n = s->S * (size_t)c->world;
  *out = grad;
  if (n == s->len)
    return TAGC_OK;
  TAGC_CHECK(tagc_device_copy(c->dev, lane, work, grad, s->len * sizeof(float), TAGC_COPY_D2D));
  TAGC_CHECK(tagc_device_zero(c->dev, lane, work + s->len, (n - s->len) * sizeof(float)));
  *out = work;
  return TAGC_OK;
}

/* Dense reduce-scatter of the segment's W*S floats (grad is already padded). */
static tagc_status reduce_dense(tagc_grad_codec *c, const tagc_grad_segment *s, tagc_lane lane,
                                const float *grad, float *shard, tagc_wire wire) {
  TAGC_CHECK(tagc_device_sync(c->dev, lane));
  return tagc_comm_reduce_scatter(c->cfg.comm, grad, shard, s->S, TAGC_DTYPE_F32, TAGC_REDOP_SUM,
                                  wire, c->cfg.op_timeout_s);
}

/* Device scratch of at least `bytes` (contents not kept when it grows). */
static tagc_status grow(tagc_grad_codec *c, void **buf, size_t *cap, size_t bytes) {
  if (bytes <= *cap)
    return TAGC_OK;
  tagc_device_free(c->dev, *buf);
  *buf = NULL;
  *cap = 0;
  TAGC_CHECK(tagc_device_alloc(c->dev, bytes, buf));
  *cap = bytes;
  return TAGC_OK;
}

/* rho for this step: the fixed one, or the advisor's from the density all ranks measured at
 * the previous step, rounded down to a quarter power of two so the sketch layout is rebuilt
 * only when the density moves. 0 means the sketch would not pay: send dense. */
static tagc_status choose_rho(const tagc_grad_segment *s, int64_t step, double *rho) {
  if (s->pol.rho > 0) {
    *rho = s->pol.rho;
    return TAGC_OK;
  }
  /* the densest lane decides whether the sketch peels (kernels/rho.h) */
  double d = sized_density(s);
  int unmeasured = d <= 0;
  if (unmeasured) /* nothing measured yet (or forgotten): assume the worst, full lanes */
    d = 1.0;
  double advised;
  TAGC_CHECK(advise(s, d, &advised));
  /* rounded down to a quarter power of two: few distinct layouts */
  double safe = exp2(floor(4 * log2(fmax(advised, TAGC_RHO_MIN))) / 4);
  if (advised >= TAGC_SKETCH_MIN_RHO)
    *rho = safe;
  else /* too dense for the sketch to pay: dense, but every TAGC_PROBE_EVERY steps, or at once
          when nothing is measured, a (lossless, larger) sketch at the advised rho measures it */
    *rho = step % TAGC_PROBE_EVERY == 0 || unmeasured ? safe : 0;
  return TAGC_OK;
}

/* Test hook (CPU only: reads the buffers on the host): error-feedback mass of one sparsify
 * call. `in` is the sum of raw gradient and old residual; what was kept (and so sent) plus
 * the new residual must sum to the same. */
static void record_feedback(tagc_grad_codec *c, const tagc_grad_segment *s, double in, double abs_in) {
  /* the new residual is the pending one until the step is committed */
  const tagc_layout *l = &s->lay;
  double out = 0;
  for (size_t j = 0; j < (size_t)c->world; j++) {
    const float *kept = c->scratch.kept + j * (size_t)l->shard_padded;
    const float *res = s->pending + j * s->S;
    for (size_t i = 0; i < s->S; i++)
      out += (double)kept[i] + (double)res[i];
  }
  c->feedback[0] += in;
  c->feedback[1] += out;
  c->feedback[2] += abs_in;
}

/* Builds the sketch layout of segment s at rho (and its device copy of the block rows, in a
 * buffer that grows only: a change of rho frees no device memory, which on CUDA would
 * synchronise the whole device inside the step). */
static tagc_status set_layout(tagc_grad_codec *c, tagc_grad_segment *s, tagc_lane lane, double rho) {
  tagc_layout_free(&s->lay);
  s->rho_used = 0;
  TAGC_CHECK(tagc_layout_init(&s->lay, c->world, (int64_t)s->S, rho, 0x7a6cu + s->hash_seed));
  size_t bytes = (size_t)s->lay.blocks * 3 * sizeof(uint32_t);
  TAGC_CHECK(grow(c, (void **)&s->block_rows, &s->block_rows_cap, bytes));
  TAGC_CHECK(tagc_device_copy(c->dev, lane, s->block_rows, s->lay.block_rows, bytes, TAGC_COPY_H2D));
  s->rho_used = rho;
  return TAGC_OK;
}

/* Grows the scratch to the needs of segment s at its current layout. */
static tagc_status grow_scratch(tagc_grad_codec *c, const tagc_grad_segment *s) {
  const tagc_layout *l = &s->lay;
  size_t W = (size_t)c->world, n = s->S * W;
  size_t words = (size_t)l->bitmap_words, cells = (size_t)l->sketch_cells;
  size_t stats_bytes = W * sizeof(tagc_sparsify_stats) + sizeof(tagc_decode_stats) + sizeof(int64_t);
  reduce_scratch *sc = &c->scratch;
  TAGC_CHECK(grow(c, (void **)&sc->kept, &sc->kept_cap, n * sizeof(float)));
  TAGC_CHECK(grow(c, (void **)&sc->bitmap, &sc->bitmap_cap, W * words * sizeof(uint64_t)));
  TAGC_CHECK(grow(c, (void **)&sc->global_bitmap, &sc->global_cap, words * sizeof(uint64_t)));
  TAGC_CHECK(grow(c, (void **)&sc->sketch, &sc->sketch_cap, W * cells * sizeof(float)));
  TAGC_CHECK(grow(c, (void **)&sc->my_sketch, &sc->my_sketch_cap, cells * sizeof(float)));
  TAGC_CHECK(grow(c, &sc->stats, &sc->stats_cap, stats_bytes));
  size_t ws = tagc_kernels_workspace_bytes(tagc_device_is_cuda(c->dev) ? TAGC_DEVICE_CUDA : TAGC_DEVICE_CPU, l, 1);
  return grow(c, &sc->ws, &sc->ws_cap, ws);
}

/* Sends v = grad + residual dense (grad already padded) on `wire`; nothing is left behind
 * (once the step is committed). A residual known to be zero is skipped: grad goes as it is,
 * as under a fixed dense policy (no copy, addition, nor zeroing at commit). */
static tagc_status reduce_tagc_dense(tagc_grad_codec *c, tagc_grad_segment *s, tagc_lane lane,
                                     const float *grad, float *shard, float *work, tagc_wire wire) {
  size_t n = s->S * (size_t)c->world;
  if (s->residual_zero)
    return reduce_dense(c, s, lane, grad, shard, wire);
  if (grad != work)
    TAGC_CHECK(tagc_device_copy(c->dev, lane, work, grad, n * sizeof(float), TAGC_COPY_D2D));
  TAGC_CHECK(tagc_device_add(c->dev, lane, work, s->residual, n));
  s->staged = STAGE_ZERO; /* the residual is zeroed at commit, kept if the step is skipped */
  return reduce_dense(c, s, lane, work, shard, wire);
}

/* Sends v = grad + residual of each of the k segments jobs[idx[0..k)] as blockwise int8
 * (kernels/q8.h) in one all-to-all: rank j gets from each rank the chunks of elements
 * [j*S, (j+1)*S) of every segment, one after the other, and sums the decodes of the W chunks
 * of each of its shards in rank order (deterministic). What the rounding lost, v - q(v), is
 * staged as each segment's new residual (error feedback), so no gradient mass is dropped; the
 * encode computes v and that residual in the same pass (a residual known to be zero is not
 * read). A shard that runs past the segment's len is encoded from a zero-padded copy (the
 * bytes of the padded gradient). A non-finite value makes its 256-element block NaN
 * (kernels/q8.h), which reaches the owner's shard as on the other dense wires. */
static tagc_status reduce_int8_group(tagc_grad_codec *c, const tagc_grad_job *jobs, const int *idx,
                                     int k, tagc_lane lane) {
  size_t W = (size_t)c->world, per_rank = 0, max_S = 0;
  for (int i = 0; i < k; i++) {
    const tagc_grad_segment *s = jobs[idx[i]].seg;
    per_rank += (size_t)tagc_q8_chunk_bytes((int64_t)s->S);
    max_S = s->S > max_S ? s->S : max_S;
  }
  for (int i = 0; i < k; i++)
    jobs[idx[i]].seg->staged = STAGE_NONE; /* until its residual is staged below */
  reduce_scratch *sc = &c->scratch;
  TAGC_CHECK(grow(c, &sc->q8_send, &sc->q8_send_cap, W * per_rank));
  TAGC_CHECK(grow(c, &sc->q8_recv, &sc->q8_recv_cap, W * per_rank));
  tagc_kernel_ctx ctx = tagc_device_kernel_ctx(c->dev, lane, NULL, NULL, 0);
  unsigned char *send = sc->q8_send, *recv = sc->q8_recv;
  size_t off = 0;
  for (int i = 0; i < k; i++) {
    const tagc_grad_job *jb = &jobs[idx[i]];
    tagc_grad_segment *s = jb->seg;
    size_t S = s->S, chunk = (size_t)tagc_q8_chunk_bytes((int64_t)S);
    if (!s->pending)
      TAGC_CHECK(tagc_device_alloc(c->dev, S * W * sizeof(float), (void **)&s->pending));
    const float *residual = s->residual_zero ? NULL : s->residual;
    for (size_t j = 0; j < W; j++) {
      const float *src = jb->grad + j * S;
      size_t valid = s->len > j * S ? s->len - j * S : 0;
      if (valid < S) { /* stream order keeps each tail until its encode has read it */
        TAGC_CHECK(grow(c, (void **)&sc->q8_tail, &sc->q8_tail_cap, max_S * sizeof(float)));
        if (valid)
          TAGC_CHECK(tagc_device_copy(c->dev, lane, sc->q8_tail, src, valid * sizeof(float),
                                      TAGC_COPY_D2D));
        TAGC_CHECK(tagc_device_zero(c->dev, lane, sc->q8_tail + valid, (S - valid) * sizeof(float)));
        src = sc->q8_tail;
      }
      TAGC_CHECK(tagc_kernels_q8_encode_ef(&ctx, src, residual ? residual + j * S : NULL,
                                           (int64_t)S, send + j * per_rank + off, s->pending + j * S));
    }
    s->staged = STAGE_PENDING;
    *jb->stats = (tagc_grad_stats){.feedback = 1, .encoding = TAGC_ENC_INT8, .global_bits = -1};
    off += chunk;
  }
  TAGC_CHECK(tagc_device_sync(c->dev, lane));
  TAGC_CHECK(tagc_comm_alltoall(c->cfg.comm, send, recv, per_rank, c->cfg.op_timeout_s));
  /* bytes [j*per_rank, (j+1)*per_rank) of recv: rank j's q(v) of this rank's shards */
  off = 0;
  for (int i = 0; i < k; i++) {
    const tagc_grad_job *jb = &jobs[idx[i]];
    int64_t S = (int64_t)jb->seg->S;
    TAGC_CHECK(tagc_kernels_q8_decode_sum(&ctx, recv + off, S, (int32_t)W, (int64_t)per_rank,
                                          jb->shard));
    off += (size_t)tagc_q8_chunk_bytes(S);
  }
  return TAGC_OK;
}

/* The rho segment s sketches with at this step; 0: a dense wire (dense_only segments, and
 * dense modes between their density probes, never ask the advisor). */
static tagc_status plan_rho(const tagc_grad_segment *s, int64_t step, double *rho) {
  *rho = 0;
  if (tagc_role_policy_sketches(&s->pol) && (s->enc == TAGC_ENC_SKETCH || step % TAGC_PROBE_EVERY == 0))
    return choose_rho(s, step, rho); /* dense wires still probe */
  return TAGC_OK;
}

/* 1 when segment s goes on the int8 wire at a step it planned rho for (with peers). */
static int goes_int8(const tagc_grad_codec *c, const tagc_grad_segment *s, double rho) {
  return c->world > 1 && tagc_role_policy_feeds_back(&s->pol) && rho == 0 && s->enc == TAGC_ENC_INT8;
}

/* One tagc segment: sparsify with error feedback, OR the bitmaps to their owners, encode the
 * W destination sketches, reduce-scatter them, decode this rank's shard. */
static tagc_status reduce_tagc(tagc_grad_codec *c, tagc_grad_segment *s, tagc_lane lane, int64_t step,
                               const float *grad, float *shard, float *work, tagc_grad_stats *stats) {
  size_t W = (size_t)c->world, n = s->S * W;
  reduce_scratch *sc = &c->scratch;
  double rho;
  TAGC_CHECK(plan_rho(s, step, &rho));
  if (goes_int8(c, s, rho)) {
    tagc_grad_job job = {s, grad, shard, stats};
    int only = 0;
    return reduce_int8_group(c, &job, &only, 1, lane);
  }
  TAGC_CHECK(padded(c, s, lane, grad, work, &grad)); /* the kernels read grad as [W][S] */
  stats->feedback = 1;
  if (rho == 0) { /* dense: a sketching segment whose sketch would not pay sends bf16 */
    stats->global_bits = -1; /* not measured */
    stats->encoding = s->enc == TAGC_ENC_SKETCH ? TAGC_ENC_BF16 : s->enc;
    return reduce_tagc_dense(c, s, lane, grad, shard, work, wire_of(stats->encoding));
  }
  stats->encoding = TAGC_ENC_SKETCH;
  double t0 = tagc_now();
  if (rho != s->rho_used)
    TAGC_CHECK(set_layout(c, s, lane, rho));
  const tagc_layout *l = &s->lay;
  size_t words = (size_t)l->bitmap_words, cells = (size_t)l->sketch_cells;
  TAGC_CHECK(grow_scratch(c, s));
  tagc_kernel_ctx ctx = tagc_device_kernel_ctx(c->dev, lane, s->block_rows, sc->ws, sc->ws_cap);
  tagc_sparsify_stats *ss = sc->stats;
  tagc_decode_stats *ds_dev = (tagc_decode_stats *)(ss + W);
  int64_t *lane_max_dev = (int64_t *)(ds_dev + 1);

  double in = 0, abs_in = 0;
  if (c->cfg.check_feedback)
    for (size_t i = 0; i < n; i++) {
      in += (double)grad[i] + (double)s->residual[i];
      abs_in += fabs((double)grad[i]) + fabs((double)s->residual[i]);
    }
  /* The sparsify works on a copy of the residual: the step may yet be skipped (a non-finite
   * gradient on any rank), and then the residual must stay as it was, bit for bit. */
  if (!s->pending)
    TAGC_CHECK(tagc_device_alloc(c->dev, n * sizeof(float), (void **)&s->pending));
  TAGC_CHECK(tagc_device_copy(c->dev, lane, s->pending, s->residual, n * sizeof(float), TAGC_COPY_D2D));
  s->staged = STAGE_PENDING;
  /* A non-finite value in grad + residual: the sparsify sends nothing of this rank (zero kept
   * values and bitmap) and leaves the residual alone; the CPU kernel also says TAGC_ENUMERIC.
   * The reduction goes on (the peers wait for its collectives) and reports the count: the
   * engine then skips the step on every rank. */
  float density = (float)tagc_policy_rank_density(s->pol.density, c->world);
  tagc_status sp = tagc_kernels_sparsify(&ctx, l, density, grad, s->pending, sc->kept, sc->bitmap, ss);
  if (sp != TAGC_OK && sp != TAGC_ENUMERIC)
    return sp;
  if (sp == TAGC_ENUMERIC)
    tagc_clear_error();
  if (c->cfg.check_feedback)
    record_feedback(c, s, in, abs_in);
  TAGC_CHECK(tagc_device_copy(c->dev, lane, c->host_ss, ss, W * sizeof *ss, TAGC_COPY_D2H));
  for (size_t j = 0; j < W; j++)
    stats->nonfinite += c->host_ss[j].nonfinite;
  TAGC_CHECK(tagc_device_sync(c->dev, lane));
  double t_index = tagc_now();
  TAGC_CHECK(tagc_comm_reduce_scatter(c->cfg.comm, sc->bitmap, sc->global_bitmap, words,
                                      TAGC_DTYPE_U64, TAGC_REDOP_BOR, TAGC_WIRE_NATIVE,
                                      c->cfg.op_timeout_s));
  t_index = tagc_now() - t_index; /* the index exchange is wire time, not codec time */
  TAGC_CHECK(tagc_kernels_encode(&ctx, l, sc->kept, sc->bitmap, sc->sketch));
  TAGC_CHECK(tagc_device_sync(c->dev, lane));
  stats->codec_s = tagc_now() - t0 - t_index;
  TAGC_CHECK(tagc_comm_reduce_scatter(c->cfg.comm, sc->sketch, sc->my_sketch, cells,
                                      TAGC_DTYPE_F32, TAGC_REDOP_SUM, TAGC_WIRE_BF16,
                                      c->cfg.op_timeout_s)); /* TAGC-2: bf16 sketch cells */
  double t1 = tagc_now();
  TAGC_CHECK(tagc_kernels_decode(&ctx, l, sc->my_sketch, sc->global_bitmap, shard, ds_dev));
  TAGC_CHECK(tagc_kernels_lane_max(&ctx, l, sc->global_bitmap, lane_max_dev));
  tagc_decode_stats ds;
  int64_t lane_max;
  TAGC_CHECK(tagc_device_copy(c->dev, lane, &ds, ds_dev, sizeof ds, TAGC_COPY_D2H));
  TAGC_CHECK(tagc_device_copy(c->dev, lane, &lane_max, lane_max_dev, sizeof lane_max, TAGC_COPY_D2H));
  stats->codec_s += tagc_now() - t1;
  stats->rho = rho;
  stats->global_bits = ds.nonzero;
  stats->estimated = ds.estimated;
  stats->lane_density = (double)lane_max / (double)l->blocks;
  return TAGC_OK;
}

tagc_status tagc_grad_reduce(tagc_grad_codec *c, tagc_grad_segment *s, tagc_lane lane,
                             int64_t step, const float *grad, float *shard, float *work,
                             tagc_grad_stats *stats) {
  *stats = (tagc_grad_stats){0};
  s->staged = STAGE_NONE;
  if (c->world == 1) { /* nothing to send; a residual loaded from a checkpoint is folded in */
    TAGC_CHECK(tagc_device_copy(c->dev, lane, shard, grad, s->len * sizeof(float), TAGC_COPY_D2D));
    if (s->residual) { /* freed at commit; a skipped step folds it in again next time */
      TAGC_CHECK(tagc_device_add(c->dev, lane, shard, s->residual, s->len));
      s->staged = STAGE_FOLDED;
    }
    return TAGC_OK;
  }
  if (tagc_role_policy_feeds_back(&s->pol))
    return reduce_tagc(c, s, lane, step, grad, shard, work, stats);
  TAGC_CHECK(padded(c, s, lane, grad, work, &grad));
  return reduce_dense(c, s, lane, grad, shard, wire_of(s->enc));
}

tagc_status tagc_grad_reduce_unit(tagc_grad_codec *c, const tagc_grad_job *jobs, int n,
                                  tagc_lane lane, int64_t step, float *work) {
  enum { GROUP_MAX = 64 }; /* int8 segments of a unit in one exchange; any more go in turn */
  int idx[GROUP_MAX], k = 0;
  unsigned char grouped[GROUP_MAX] = {0};
  for (int i = 0; i < n && i < GROUP_MAX; i++) {
    double rho;
    TAGC_CHECK(plan_rho(jobs[i].seg, step, &rho));
    if (goes_int8(c, jobs[i].seg, rho)) {
      idx[k++] = i;
      grouped[i] = 1;
    }
  }
  if (k > 1)
    TAGC_CHECK(reduce_int8_group(c, jobs, idx, k, lane));
  for (int i = 0; i < n; i++)
    if (k < 2 || i >= GROUP_MAX || !grouped[i])
      TAGC_CHECK(tagc_grad_reduce(c, jobs[i].seg, lane, step, jobs[i].grad, jobs[i].shard, work,
                                  jobs[i].stats));
  return TAGC_OK;
}

tagc_status tagc_grad_segment_commit(tagc_grad_codec *c, tagc_grad_segment *s, tagc_lane lane,
                                     int apply) {
  int staged = s->staged;
  s->staged = STAGE_NONE;
  if (!apply)
    return TAGC_OK; /* the residual of before the step stays */
  switch (staged) {
  case STAGE_PENDING: {
    float *old = s->residual;
    s->residual = s->pending;
    s->pending = old;
    s->residual_zero = 0;
    return TAGC_OK;
  }
  case STAGE_ZERO:
    s->residual_zero = 1;
    return tagc_device_zero(c->dev, lane, s->residual, s->S * (size_t)c->world * sizeof(float));
  case STAGE_FOLDED:
    TAGC_CHECK(tagc_device_sync(c->dev, lane)); /* the fold read it */
    tagc_device_free(c->dev, s->residual);
    s->residual = NULL;
    return TAGC_OK;
  default:
    return TAGC_OK;
  }
}

/* ---------- checkpoints ---------- */

tagc_status tagc_grad_segment_canonicalise(tagc_grad_codec *c, tagc_grad_segment *s,
                                           tagc_lane lane, float *work) {
  if (!s->residual || c->world == 1)
    return TAGC_OK;
  size_t n = s->S * (size_t)c->world;
  float *mine = s->residual + (size_t)c->rank * s->S;
  s->residual_zero = 0; /* mine becomes the sum over ranks */
  TAGC_CHECK(tagc_comm_reduce_scatter(c->cfg.comm, s->residual, work, s->S, TAGC_DTYPE_F32,
                                      TAGC_REDOP_SUM, TAGC_WIRE_NATIVE, c->cfg.op_timeout_s));
  TAGC_CHECK(tagc_device_zero(c->dev, lane, s->residual, n * sizeof(float)));
  return tagc_device_copy(c->dev, lane, mine, work, s->S * sizeof(float), TAGC_COPY_D2D);
}

const float *tagc_grad_segment_residual(const tagc_grad_codec *c, const tagc_grad_segment *s) {
  (void)c;
  return s->residual;
}

float *tagc_grad_segment_residual_shard(const tagc_grad_codec *c, const tagc_grad_segment *s) {
  return s->residual ? s->residual + (size_t)c->rank * s->S : NULL;
}

tagc_status tagc_grad_segment_reset_residual(tagc_grad_codec *c, tagc_grad_segment *s,
                                             tagc_lane lane, float **shard) {
  *shard = NULL;
  if (!tagc_role_policy_feeds_back(&s->pol))
    return TAGC_OK;
  size_t n = s->S * (size_t)c->world;
  if (!s->residual)
    TAGC_CHECK(tagc_device_alloc(c->dev, n * sizeof(float), (void **)&s->residual));
  TAGC_CHECK(tagc_device_zero(c->dev, lane, s->residual, n * sizeof(float)));
  s->residual_zero = 0; /* the caller loads the checkpoint's shard into it */
  *shard = s->residual + (size_t)c->rank * s->S;
  return TAGC_OK;
}
