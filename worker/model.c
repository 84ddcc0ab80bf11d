/* GPT-2-style decoder on the CPU.
 *
 * Threading: one OpenMP thread pool does all the work. Matrix products go to OpenBLAS
 * (cblas_sgemm) called single-threaded from inside the OpenMP regions: a linear layer splits
 * its rows over the threads, attention runs one (batch, head) pair per iteration. Running the
 * BLAS's own pthread pool next to OpenMP's would make two pools spin against each other on
 * the same cores.
 *
 * Determinism: with the same thread count the outputs are bit-identical run to run. Every
 * reduction has a fixed order: per-row work is split over rows, and sums over the batch
 * (bias, norm and embedding gradients) are split over columns, each column summed by one
 * thread in row order. No atomics. */
#include "worker/model.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows of the causal attention computed per sgemm: row block [r0, r1) only needs key
 * columns [0, r1), so blocking skips most of the masked upper triangle. */
#define ATT_ROW_BLOCK 64
/* Column chunk for the column-parallel reductions over the batch. */
#define COL_CHUNK 32
#define LN_EPS 1e-5f
#define MAX_VOCAB 256 /* tokens are bytes */

/* Tensor order inside a block unit (matches the layout table in model.h). */
enum {
  K_LN1_W, K_LN1_B, K_LN2_W, K_LN2_B, K_QKV_W, K_QKV_B,
  K_PROJ_W, K_PROJ_B, K_FC_W, K_FC_B, K_MPROJ_W, K_MPROJ_B, K_BLOCK_TENSORS
};
/* Tensor order inside the embedding unit and the final unit. */
enum { K_WTE, K_WPE };
enum { K_LNF_W, K_LNF_B, K_HEAD_W };

const char *tagc_role_name(tagc_role role) {
  static const char *const names[TAGC_ROLE_COUNT] = {
      "tok_emb", "pos_emb", "norm", "attn_qkv", "attn_proj", "mlp_fc", "mlp_proj", "head"};
  return (unsigned)role < TAGC_ROLE_COUNT ? names[role] : "unknown";
}

/* ---------------------------------------------------------------------------------------- */
/* Layout                                                                                   */

static void add_tensor(tagc_model_layout *lay, const char *name, tagc_role role, int decay,
                       int rows, int cols) {
  tagc_tensor_info *t = &lay->tensors[lay->n_tensors++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->role = role;
  t->unit = lay->n_units;
  t->decay = decay;
  t->rows = rows;
  t->cols = cols;
  t->offset = lay->n_params;
  t->numel = (size_t)rows * (size_t)cols;
  lay->n_params += t->numel;
}

static void begin_unit(tagc_model_layout *lay) {
  tagc_unit_info *u = &lay->units[lay->n_units];
  u->offset = lay->n_params;
  u->first_tensor = lay->n_tensors;
}

static void end_unit(tagc_model_layout *lay) {
  tagc_unit_info *u = &lay->units[lay->n_units];
  u->numel = lay->n_params - u->offset;
  u->n_tensors = lay->n_tensors - u->first_tensor;
  lay->n_units++;
}

static void add_block(tagc_model_layout *lay, int l, int C) {
  static const struct {
    const char *name;
    tagc_role role;
    int decay, rows_mul, cols_c; /* rows = rows_mul * C; cols = C, 4C or 1 */
  } spec[K_BLOCK_TENSORS] = {
      {"ln1_w", TAGC_ROLE_NORM, 0, 1, 0},       {"ln1_b", TAGC_ROLE_NORM, 0, 1, 0},
      {"ln2_w", TAGC_ROLE_NORM, 0, 1, 0},       {"ln2_b", TAGC_ROLE_NORM, 0, 1, 0},
      {"qkv_w", TAGC_ROLE_ATTN_QKV, 1, 3, 1},   {"qkv_b", TAGC_ROLE_ATTN_QKV, 0, 3, 0},
      {"attn_proj_w", TAGC_ROLE_ATTN_PROJ, 1, 1, 1}, {"attn_proj_b", TAGC_ROLE_ATTN_PROJ, 0, 1, 0},
      {"fc_w", TAGC_ROLE_MLP_FC, 1, 4, 1},      {"fc_b", TAGC_ROLE_MLP_FC, 0, 4, 0},
      {"mlp_proj_w", TAGC_ROLE_MLP_PROJ, 1, 1, 4}, {"mlp_proj_b", TAGC_ROLE_MLP_PROJ, 0, 1, 0},
  };
  begin_unit(lay);
  for (int k = 0; k < K_BLOCK_TENSORS; k++) {
    char name[32];
    snprintf(name, sizeof name, "h%d.%s", l, spec[k].name);
    int cols = spec[k].cols_c ? spec[k].cols_c * C : 1;
    add_tensor(lay, name, spec[k].role, spec[k].decay, spec[k].rows_mul * C, cols);
  }
  end_unit(lay);
}

tagc_status tagc_model_layout_init(tagc_model_layout *layout, const tagc_model_config *cfg) {
  if (cfg->vocab < 2 || cfg->vocab > MAX_VOCAB)
    return tagc_errorf(TAGC_EINVAL, "model: vocab must be in [2, %d] (got %d)", MAX_VOCAB, cfg->vocab);
  if (cfg->ctx < 1 || cfg->ctx > (1 << 16))
    return tagc_errorf(TAGC_EINVAL, "model: ctx must be in [1, 65536] (got %d)", cfg->ctx);
  if (cfg->n_layer < 1 || cfg->n_layer > TAGC_MAX_LAYERS)
    return tagc_errorf(TAGC_EINVAL, "model: n_layer must be in [1, %d] (got %d)", TAGC_MAX_LAYERS,
                       cfg->n_layer);
  if (cfg->d_model < 1 || cfg->d_model > (1 << 14))
    return tagc_errorf(TAGC_EINVAL, "model: d_model must be in [1, 16384] (got %d)", cfg->d_model);
  if (cfg->n_head < 1 || cfg->d_model % cfg->n_head != 0)
    return tagc_errorf(TAGC_EINVAL, "model: n_head %d must be >= 1 and divide d_model %d",
                       cfg->n_head, cfg->d_model);

  memset(layout, 0, sizeof *layout);
  layout->cfg = *cfg;
  int V = cfg->vocab, T = cfg->ctx, C = cfg->d_model;
  begin_unit(layout);
  add_tensor(layout, "wte", TAGC_ROLE_TOK_EMB, 1, V, C);
  add_tensor(layout, "wpe", TAGC_ROLE_POS_EMB, 1, T, C);
  end_unit(layout);
  for (int l = 0; l < cfg->n_layer; l++)
    add_block(layout, l, C);
  begin_unit(layout);
  add_tensor(layout, "lnf_w", TAGC_ROLE_NORM, 0, C, 1);
  add_tensor(layout, "lnf_b", TAGC_ROLE_NORM, 0, C, 1);
  add_tensor(layout, "head_w", TAGC_ROLE_HEAD, 1, V, C);
  end_unit(layout);
  return TAGC_OK;
}

/* Offset of tensor k of unit u from the start of that unit's buffer. */
static inline size_t toff(const tagc_model_layout *lay, int u, int k) {
  const tagc_unit_info *ui = &lay->units[u];
  return lay->tensors[ui->first_tensor + k].offset - ui->offset;
}

/* ---------------------------------------------------------------------------------------- */
/* Initialisation: splitmix64 counters -> Marsaglia polar method, with a log written in     */
/* plain IEEE arithmetic so that the bits do not depend on the platform's libm.             */

static inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Uniform in [0, 1) with 53 random bits from counter (key, counter). */
static inline double uniform01(uint64_t key, uint64_t counter) {
  return (double)(splitmix64(key ^ splitmix64(counter)) >> 11) * 0x1.0p-53;
}

/* Natural log for x in (0, 1]: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), then
 * log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, series to below 1 ulp. */
static double portable_log(double x) {
  int e = 0;
  while (x < 0.70710678118654752) {
    x *= 2.0;
    e--;
  }
  double s = (x - 1.0) / (x + 1.0), s2 = s * s, term = s, sum = 0.0;
  for (int k = 1; k < 40; k += 2) {
    sum += term / k;
    term *= s2;
  }
  return 2.0 * sum + e * 0.69314718055994531;
}

/* Two independent N(0, 1) deviates for pair `pair` of stream `key`. */
static void normal_pair(uint64_t key, uint64_t pair, double out[2]) {
  for (uint64_t attempt = 0;; attempt++) {
    uint64_t c = (pair << 8 | (attempt & 0xff)) * 2;
    double u = 2.0 * uniform01(key, c) - 1.0, w = 2.0 * uniform01(key, c + 1) - 1.0;
    double s = u * u + w * w;
    if (s > 0.0 && s < 1.0) {
      double f = sqrt(-2.0 * portable_log(s) / s);
      out[0] = u * f;
      out[1] = w * f;
      return;
    }
  }
}

static void fill_normal(float *x, size_t n, uint64_t key, double std) {
#pragma omp parallel for schedule(static)
  for (size_t pair = 0; pair < (n + 1) / 2; pair++) {
    double z[2];
    normal_pair(key, pair, z);
    x[2 * pair] = (float)(z[0] * std);
    if (2 * pair + 1 < n)
      x[2 * pair + 1] = (float)(z[1] * std);
  }
}

void tagc_model_init_params(const tagc_model_layout *layout, uint64_t seed, float *params) {
  double resid_std = 0.02 / sqrt(2.0 * layout->cfg.n_layer);
  for (int t = 0; t < layout->n_tensors; t++) {
    const tagc_tensor_info *ti = &layout->tensors[t];
    float *x = params + ti->offset;
    if (ti->cols == 1) { /* biases 0, norm weights 1 */
      float value = ti->role == TAGC_ROLE_NORM && strstr(ti->name, "_w") ? 1.0f : 0.0f;
      for (size_t i = 0; i < ti->numel; i++)
        x[i] = value;
      continue;
    }
    int residual = strstr(ti->name, "attn_proj_w") || strstr(ti->name, "mlp_proj_w");
    uint64_t key = splitmix64(seed ^ splitmix64(0x7461676300000000ULL + (uint64_t)t));
    fill_normal(x, ti->numel, key, residual ? resid_std : 0.02);
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Activations                                                                              */

struct tagc_model_acts {
  tagc_model_config cfg;
  int max_batch;
  int B;            /* batch of the last forward */
  int have_forward; /* a forward completed and its backward has not run yet */
  void *mem;
  uint8_t *tokens, *targets; /* (B, T) copies of the last forward's input */
  /* Per-layer activations; layer l of each starts at l * (stride of one layer). */
  float *encoded;  /* (B, T, C) block 0 input */
  float *ln1;      /* (L, B, T, C) */
  float *ln1_stat; /* (L, B, T, 2) mean, rstd */
  float *qkv;      /* (L, B, T, 3C) */
  float *att;      /* (L, B, NH, T, T) softmax probabilities, causal */
  float *atty;     /* (L, B, T, C) attention output before the projection */
  float *res2;     /* (L, B, T, C) residual after attention */
  float *ln2;      /* (L, B, T, C) */
  float *ln2_stat; /* (L, B, T, 2) */
  float *fch;      /* (L, B, T, 4C) fc output before GELU */
  float *fch_gelu; /* (L, B, T, 4C) */
  float *res3;     /* (L, B, T, C) block output */
  float *lnf;      /* (B, T, C) */
  float *lnf_stat; /* (B, T, 2) */
  float *logits;   /* (B, T, V) logits, then probabilities, then their gradient */
  float *losses;   /* (B, T) per-position cross-entropy */
  /* Backward scratch (gradients). */
  float *dres;      /* (B, T, C) residual stream at the current block's output */
  float *dres_next; /* (B, T, C) residual stream at its input; swapped with dres per block */
  float *dres2;     /* (B, T, C) residual after the attention (res2) */
  float *dln2;      /* (B, T, C) ln2 output (lnf output in the head) */
  float *dattn;     /* (B, T, C) attention output before the projection */
  float *dln1;      /* (B, T, C) ln1 output */
  float *dbig;      /* (B, T, 4C) MLP hidden */
  float *dqkv;      /* (B, T, 3C) */
  float *datt;      /* (B, NH, T, T) attention scores */
};

/* Sizes in floats of each array, for a batch of B; index order matches the struct. */
enum { A_ENC, A_LN1, A_LN1S, A_QKV, A_ATT, A_ATTY, A_RES2, A_LN2, A_LN2S, A_FCH, A_FCHG, A_RES3,
       A_LNF, A_LNFS, A_LOGITS, A_LOSSES, A_DRES, A_DRESN, A_DRES2, A_DLN2, A_DATTN, A_DLN1,
       A_DBIG, A_DQKV, A_DATT, A_COUNT };

static void acts_sizes(const tagc_model_config *c, size_t B, size_t sz[A_COUNT]) {
  size_t T = (size_t)c->ctx, C = (size_t)c->d_model, L = (size_t)c->n_layer;
  size_t NH = (size_t)c->n_head, V = (size_t)c->vocab, BT = B * T;
  sz[A_ENC] = BT * C;
  sz[A_LN1] = L * BT * C;
  sz[A_LN1S] = L * BT * 2;
  sz[A_QKV] = L * BT * 3 * C;
  sz[A_ATT] = L * B * NH * T * T;
  sz[A_ATTY] = L * BT * C;
  sz[A_RES2] = L * BT * C;
  sz[A_LN2] = L * BT * C;
  sz[A_LN2S] = L * BT * 2;
  sz[A_FCH] = L * BT * 4 * C;
  sz[A_FCHG] = L * BT * 4 * C;
  sz[A_RES3] = L * BT * C;
  sz[A_LNF] = BT * C;
  sz[A_LNFS] = BT * 2;
  sz[A_LOGITS] = BT * V;
  sz[A_LOSSES] = BT;
  sz[A_DRES] = sz[A_DRESN] = sz[A_DRES2] = sz[A_DLN2] = sz[A_DATTN] = sz[A_DLN1] = BT * C;
  sz[A_DBIG] = BT * 4 * C;
  sz[A_DQKV] = BT * 3 * C;
  sz[A_DATT] = B * NH * T * T;
}

/* Each array starts on a 64-byte boundary. */
static size_t round_floats(size_t n) {
  return (n + 15) / 16 * 16;
}

/* Bytes of the activation block for max_batch sequences: the float arrays (sizes in sz), then
 * the token and target copies of *token_bytes each. */
static size_t acts_plan(const tagc_model_config *c, int max_batch, size_t sz[A_COUNT],
                        size_t *token_bytes) {
  size_t B = (size_t)(max_batch > 0 ? max_batch : 0), floats = 0;
  acts_sizes(c, B, sz);
  for (int i = 0; i < A_COUNT; i++)
    floats += round_floats(sz[i]);
  *token_bytes = round_floats(B * (size_t)c->ctx);
  return floats * sizeof(float) + 2 * *token_bytes;
}

size_t tagc_model_acts_bytes(const tagc_model_layout *layout, int max_batch) {
  size_t sz[A_COUNT], token_bytes;
  return acts_plan(&layout->cfg, max_batch, sz, &token_bytes) + sizeof(struct tagc_model_acts);
}

tagc_status tagc_model_acts_new(const tagc_model_layout *layout, int max_batch, tagc_model_acts **out) {
  *out = NULL;
  if (max_batch < 1)
    return tagc_errorf(TAGC_EINVAL, "model: max_batch must be >= 1 (got %d)", max_batch);
  tagc_model_acts *a = calloc(1, sizeof *a);
  if (!a)
    return tagc_errorf(TAGC_ENOMEM, "model: activations struct");
  size_t sz[A_COUNT], token_bytes;
  size_t bytes = acts_plan(&layout->cfg, max_batch, sz, &token_bytes);
  a->mem = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!a->mem) {
    free(a);
    return tagc_errorf(TAGC_ENOMEM, "model: %zu bytes of activations for micro-batch %d", bytes,
                       max_batch);
  }
  float **slot[A_COUNT] = {&a->encoded, &a->ln1,  &a->ln1_stat, &a->qkv,   &a->att,
                           &a->atty,    &a->res2, &a->ln2,      &a->ln2_stat, &a->fch,
                           &a->fch_gelu, &a->res3, &a->lnf,     &a->lnf_stat, &a->logits,
                           &a->losses,  &a->dres, &a->dres_next, &a->dres2, &a->dln2,
                           &a->dattn,   &a->dln1, &a->dbig,     &a->dqkv,  &a->datt};
  float *p = a->mem;
  for (int i = 0; i < A_COUNT; i++) {
    *slot[i] = p;
    p += round_floats(sz[i]);
  }
  a->tokens = (uint8_t *)p;
  a->targets = a->tokens + token_bytes;
  a->cfg = layout->cfg;
  a->max_batch = max_batch;
  *out = a;
  return TAGC_OK;
}

void tagc_model_acts_free(tagc_model_acts *acts) {
  if (!acts)
    return;
  free(acts->mem);
  free(acts);
}

/* Pointers to layer l's activations for a batch of B. */
typedef struct layer_acts {
  float *ln1, *ln1_stat, *qkv, *att, *atty, *res2, *ln2, *ln2_stat, *fch, *fch_gelu, *res3;
  const float *input; /* block input: encoded or the previous block's res3 */
} layer_acts;

static layer_acts layer_get(const tagc_model_acts *a, int l) {
  size_t BT = (size_t)a->max_batch * (size_t)a->cfg.ctx, C = (size_t)a->cfg.d_model;
  size_t TT = (size_t)a->max_batch * (size_t)a->cfg.n_head * (size_t)a->cfg.ctx * (size_t)a->cfg.ctx;
  size_t L = (size_t)l;
  layer_acts la = {
      .ln1 = a->ln1 + L * BT * C,
      .ln1_stat = a->ln1_stat + L * BT * 2,
      .qkv = a->qkv + L * BT * 3 * C,
      .att = a->att + L * TT,
      .atty = a->atty + L * BT * C,
      .res2 = a->res2 + L * BT * C,
      .ln2 = a->ln2 + L * BT * C,
      .ln2_stat = a->ln2_stat + L * BT * 2,
      .fch = a->fch + L * BT * 4 * C,
      .fch_gelu = a->fch_gelu + L * BT * 4 * C,
      .res3 = a->res3 + L * BT * C,
      .input = l == 0 ? a->encoded : a->res3 + (L - 1) * BT * C,
  };
  return la;
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels                                                                                  */

/* exp(x) for x in float range, rel. error ~2 ulp: Cody-Waite reduction by ln 2 and a degree-6
 * polynomial (Cephes expf coefficients). Branch-free so that the loops calling it vectorise. */
#pragma omp declare simd notinbranch
static inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  float n = x * 1.44269504088896341f + 12582912.0f; /* round to nearest integer */
  n = n - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float poly = 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  float y = poly * (r * r) + r + 1.0f;
  union { int32_t i; float f; } scale;
  scale.i = ((int32_t)n + 127) << 23;
  return y * scale.f;
}

#pragma omp declare simd notinbranch
static inline float tanh_approx(float x) {
  x = x < -9.0f ? -9.0f : x;
  x = x > 9.0f ? 9.0f : x;
  return 1.0f - 2.0f / (exp_approx(2.0f * x) + 1.0f);
}

#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f

static void encoder_forward(float *out, const uint8_t *tokens, const float *wte, const float *wpe,
                            int BT, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < BT; bt++) {
    const float *te = wte + (size_t)tokens[bt] * C, *pe = wpe + (size_t)(bt % T) * C;
    float *o = out + (size_t)bt * C;
#pragma omp simd
    for (int c = 0; c < C; c++)
      o[c] = te[c] + pe[c];
  }
}

/* dwte[token] += dout rows, dwpe[t] += sum over b of dout: column chunks per thread, rows in
 * order, so each sum has a fixed order. */
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const uint8_t *tokens,
                             int B, int T, int C) {
  int chunks = (C + COL_CHUNK - 1) / COL_CHUNK;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < chunks; ch++) {
    int c0 = ch * COL_CHUNK, c1 = c0 + COL_CHUNK < C ? c0 + COL_CHUNK : C;
    for (int bt = 0; bt < B * T; bt++) {
      const float *d = dout + (size_t)bt * C;
      float *w = dwte + (size_t)tokens[bt] * C;
      for (int c = c0; c < c1; c++)
        w[c] += d[c];
    }
  }
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) {
    float *w = dwpe + (size_t)t * C;
    for (int b = 0; b < B; b++) {
      const float *d = dout + ((size_t)b * T + t) * C;
#pragma omp simd
      for (int c = 0; c < C; c++)
        w[c] += d[c];
    }
  }
}

/* The kernels below run inside an enclosing `#pragma omp parallel` region. Row kernels work
 * on the calling thread's share of the rows (my_rows: the same split for every call with the
 * same row count, so a chain of row kernels needs no barrier between its steps). Parameter-
 * gradient kernels split the output rows or columns instead and need all input rows ready. */
typedef struct rows {
  int lo, hi;
} rows;

/* The calling thread's share of n: equal parts rounded to multiples of 16. */
static rows my_rows(int n) {
  int nth = omp_get_num_threads(), tid = omp_get_thread_num();
  int share = ((n + nth - 1) / nth + 15) / 16 * 16;
  rows r = {tid * share < n ? tid * share : n, 0};
  r.hi = r.lo + share < n ? r.lo + share : n;
  return r;
}

/* C (M, N) = alpha op(A) op(B) + beta C for rows [r.lo, r.hi) of C. Each call is
 * single-threaded; OpenBLAS rounds differently for different row splits, so results are
 * bit-identical for a given thread count, not across thread counts. */
static void sgemm_part(rows r, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc) {
  if (r.lo >= r.hi)
    return;
  const float *a = ta == CblasNoTrans ? A + (size_t)r.lo * lda : A + r.lo;
  cblas_sgemm(CblasRowMajor, ta, tb, r.hi - r.lo, N, K, alpha, a, lda, B, ldb, beta,
              C + (size_t)r.lo * ldc, ldc);
}

static void layernorm_rows(rows r, float *out, float *stat, const float *inp, const float *w,
                           const float *b, int C) {
  for (int i = r.lo; i < r.hi; i++) {
    const float *x = inp + (size_t)i * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; c++)
      sum += x[c];
    float mean = sum / C, var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; c++)
      var += (x[c] - mean) * (x[c] - mean);
    float rstd = 1.0f / sqrtf(var / C + LN_EPS);
    float *o = out + (size_t)i * C;
#pragma omp simd
    for (int c = 0; c < C; c++)
      o[c] = (x[c] - mean) * rstd * w[c] + b[c];
    stat[2 * i] = mean;
    stat[2 * i + 1] = rstd;
  }
}

/* dinp = dres + d LN / d inp (dres may alias dinp). */
static void layernorm_dinp_rows(rows r, float *dinp, const float *dres, const float *dout,
                                const float *inp, const float *stat, const float *w, int C) {
  for (int i = r.lo; i < r.hi; i++) {
    const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C, *dr = dres + (size_t)i * C;
    float mean = stat[2 * i], rstd = stat[2 * i + 1];
    float sum_d = 0.0f, sum_dx = 0.0f;
#pragma omp simd reduction(+ : sum_d, sum_dx)
    for (int c = 0; c < C; c++) {
      float dn = d[c] * w[c];
      sum_d += dn;
      sum_dx += dn * (x[c] - mean) * rstd;
    }
    float mean_d = sum_d / C, mean_dx = sum_dx / C;
    float *di = dinp + (size_t)i * C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float xhat = (x[c] - mean) * rstd;
      di[c] = dr[c] + rstd * (d[c] * w[c] - mean_d - xhat * mean_dx);
    }
  }
}

/* dw, db += column sums over N rows; this thread's share of the C columns, rows in order. */
static void layernorm_dparams(float *dw, float *db, const float *dout, const float *inp,
                              const float *stat, int N, int C) {
  rows cols = my_rows(C);
  for (int i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
    float mean = stat[2 * i], rstd = stat[2 * i + 1];
#pragma omp simd
    for (int c = cols.lo; c < cols.hi; c++) {
      dw[c] += d[c] * ((x[c] - mean) * rstd);
      db[c] += d[c];
    }
  }
}

/* out (rows, OC) = add + inp (rows, IC) @ w (OC, IC)^T + bias; add and bias may be NULL. */
static void linear_rows(rows r, float *out, const float *add, const float *inp, const float *w,
                        const float *bias, int IC, int OC) {
  for (int i = r.lo; i < r.hi; i++) {
    float *o = out + (size_t)i * OC;
    const float *a = add ? add + (size_t)i * OC : NULL;
    if (a && bias) {
#pragma omp simd
      for (int c = 0; c < OC; c++)
        o[c] = a[c] + bias[c];
    } else if (a || bias) {
      memcpy(o, a ? a : bias, (size_t)OC * sizeof(float));
    } else {
      memset(o, 0, (size_t)OC * sizeof(float));
    }
  }
  sgemm_part(r, CblasNoTrans, CblasTrans, OC, IC, 1.0f, inp, IC, w, IC, 1.0f, out, OC);
}

/* dinp (rows, IC) = dout (rows, OC) @ w (OC, IC). */
static void linear_dinp_rows(rows r, float *dinp, const float *dout, const float *w, int IC, int OC) {
  sgemm_part(r, CblasNoTrans, CblasNoTrans, IC, OC, 1.0f, dout, OC, w, IC, 0.0f, dinp, IC);
}

/* dw += dout^T @ inp over all N rows and dbias += column sums of dout (NULL = no bias), for
 * this thread's share of the OC output rows; each bias column summed in row order. */
static void linear_dparams(float *dw, float *dbias, const float *dout, const float *inp, int N,
                           int IC, int OC) {
  rows o = my_rows(OC);
  sgemm_part(o, CblasTrans, CblasNoTrans, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
  if (!dbias)
    return;
  for (int i = 0; i < N; i++) {
    const float *d = dout + (size_t)i * OC;
#pragma omp simd
    for (int c = o.lo; c < o.hi; c++)
      dbias[c] += d[c];
  }
}

static void gelu_rows(rows r, float *out, const float *inp, int width) {
  size_t lo = (size_t)r.lo * width, hi = (size_t)r.hi * width;
#pragma omp simd
  for (size_t i = lo; i < hi; i++) {
    float x = inp[i];
    float t = tanh_approx(GELU_K0 * (x + GELU_K1 * x * x * x));
    out[i] = 0.5f * x * (1.0f + t);
  }
}

/* d (in place): dout -> dinp. */
static void gelu_backward_rows(rows r, float *d, const float *inp, int width) {
  size_t lo = (size_t)r.lo * width, hi = (size_t)r.hi * width;
#pragma omp simd
  for (size_t i = lo; i < hi; i++) {
    float x = inp[i];
    float t = tanh_approx(GELU_K0 * (x + GELU_K1 * x * x * x));
    float dt = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x) * (1.0f - t * t);
    d[i] *= 0.5f * (1.0f + t) + 0.5f * x * dt;
  }
}

/* Geometry of the attention of one layer. */
typedef struct att_dims {
  int B, T, C, NH, hd;
  float scale; /* 1 / sqrt(hd) */
} att_dims;

static inline size_t att_row(const att_dims *d, int b, int h, int t) {
  return (((size_t)b * d->NH + h) * d->T + t) * d->T;
}

/* Last column (exclusive) computed for query row t: the end of its row block. */
static inline int att_cols(const att_dims *d, int t) {
  int r1 = (t / ATT_ROW_BLOCK + 1) * ATT_ROW_BLOCK;
  return r1 < d->T ? r1 : d->T;
}

/* Causal softmax of score row t in place; columns past the diagonal up to the row block's
 * end are set to 0 so that the block products can use them. */
static void softmax_causal_row(const att_dims *d, float *s, int t) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j <= t; j++)
    mx = s[j] > mx ? s[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j <= t; j++) {
    s[j] = exp_approx(s[j] - mx);
    sum += s[j];
  }
  float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j <= t; j++)
    s[j] *= inv;
  int end = att_cols(d, t);
  for (int j = t + 1; j < end; j++)
    s[j] = 0.0f;
}

/* Score-row gradient in place: ds = p * (dp - sum_j p dp) * scale, zero past the diagonal. */
static void softmax_causal_row_backward(const att_dims *d, float *ds, const float *p, int t) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int j = 0; j <= t; j++)
    dot += p[j] * ds[j];
#pragma omp simd
  for (int j = 0; j <= t; j++)
    ds[j] = p[j] * (ds[j] - dot) * d->scale;
  int end = att_cols(d, t);
  for (int j = t + 1; j < end; j++)
    ds[j] = 0.0f;
}

/* y (B, T, C) = per head softmax(q k^T * scale, causal) v; att keeps the probabilities.
 * One (batch, head) pair per iteration, shared out over the enclosing region's threads
 * (with the implied barrier at the end). */
static void attention_forward(const att_dims *d, float *y, float *att, const float *qkv) {
  int C3 = 3 * d->C;
#pragma omp for schedule(static)
  for (int bh = 0; bh < d->B * d->NH; bh++) {
    int b = bh / d->NH, h = bh % d->NH;
    const float *base = qkv + (size_t)b * d->T * C3 + (size_t)h * d->hd;
    float *p = att + att_row(d, b, h, 0);
    for (int r0 = 0; r0 < d->T; r0 += ATT_ROW_BLOCK) {
      int r1 = att_cols(d, r0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, d->hd, d->scale,
                  base + (size_t)r0 * C3, C3, base + d->C, C3, 0.0f, p + (size_t)r0 * d->T, d->T);
    }
    for (int t = 0; t < d->T; t++)
      softmax_causal_row(d, p + (size_t)t * d->T, t);
    for (int r0 = 0; r0 < d->T; r0 += ATT_ROW_BLOCK) {
      int r1 = att_cols(d, r0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, d->hd, r1, 1.0f,
                  p + (size_t)r0 * d->T, d->T, base + 2 * d->C, C3, 0.0f,
                  y + ((size_t)b * d->T + r0) * d->C + (size_t)h * d->hd, d->C);
    }
  }
}

/* dqkv (B, T, 3C) = gradient of attention_forward given dy; datt is scratch. Worksharing
 * like attention_forward. */
static void attention_backward(const att_dims *d, float *dqkv, float *datt, const float *dy,
                               const float *att, const float *qkv) {
  int C3 = 3 * d->C;
#pragma omp for schedule(static)
  for (int bh = 0; bh < d->B * d->NH; bh++) {
    int b = bh / d->NH, h = bh % d->NH;
    size_t off = (size_t)b * d->T * C3 + (size_t)h * d->hd;
    const float *base = qkv + off, *p = att + att_row(d, b, h, 0);
    const float *dyb = dy + (size_t)b * d->T * d->C + (size_t)h * d->hd;
    float *dbase = dqkv + off, *ds = datt + att_row(d, b, h, 0);
    /* Row blocks run last to first: the last one covers every key row, so its dV and dK
     * products initialise them (beta 0) and the earlier, shorter ones accumulate. */
    int last = (d->T - 1) / ATT_ROW_BLOCK * ATT_ROW_BLOCK;
    /* dP = dY V^T and dV (+)= P^T dY. */
    for (int r0 = last; r0 >= 0; r0 -= ATT_ROW_BLOCK) {
      int r1 = att_cols(d, r0);
      const float *dyr = dyb + (size_t)r0 * d->C;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, d->hd, 1.0f, dyr, d->C,
                  base + 2 * d->C, C3, 0.0f, ds + (size_t)r0 * d->T, d->T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, d->hd, r1 - r0, 1.0f,
                  p + (size_t)r0 * d->T, d->T, dyr, d->C, r0 == last ? 0.0f : 1.0f,
                  dbase + 2 * d->C, C3);
    }
    for (int t = 0; t < d->T; t++)
      softmax_causal_row_backward(d, ds + (size_t)t * d->T, p + (size_t)t * d->T, t);
    /* dQ = dS K and dK (+)= dS^T Q. */
    for (int r0 = last; r0 >= 0; r0 -= ATT_ROW_BLOCK) {
      int r1 = att_cols(d, r0);
      const float *dsr = ds + (size_t)r0 * d->T;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, d->hd, r1, 1.0f, dsr, d->T,
                  base + d->C, C3, 0.0f, dbase + (size_t)r0 * C3, C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, d->hd, r1 - r0, 1.0f, dsr, d->T,
                  base + (size_t)r0 * C3, C3, r0 == last ? 0.0f : 1.0f, dbase + d->C, C3);
    }
  }
}

/* Softmax cross-entropy per row: losses[i], and logits replaced by probabilities. */
static void crossentropy_rows(rows r, float *losses, float *logits, const uint8_t *targets, int V) {
  for (int i = r.lo; i < r.hi; i++) {
    float *z = logits + (size_t)i * V;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; j++)
      mx = z[j] > mx ? z[j] : mx;
    float target_logit = z[targets[i]];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; j++) {
      z[j] = exp_approx(z[j] - mx);
      sum += z[j];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < V; j++)
      z[j] *= inv;
    losses[i] = logf(sum) + mx - target_logit;
  }
}

/* Probabilities -> scale * (p - onehot(target)), in place. */
static void crossentropy_backward_rows(rows r, float *probs, const uint8_t *targets, int V, float scale) {
  for (int i = r.lo; i < r.hi; i++) {
    float *p = probs + (size_t)i * V;
    p[targets[i]] -= 1.0f;
#pragma omp simd
    for (int j = 0; j < V; j++)
      p[j] *= scale;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Hooks                                                                                    */

static tagc_status hook_failed(tagc_unit_hooks *h, const char *what, int unit) {
  if (h->status != TAGC_OK)
    return h->status;
  return tagc_errorf(TAGC_EINTERNAL, "model: %s hook for unit %d returned NULL without a status",
                     what, unit);
}

static tagc_status get_params(tagc_unit_hooks *h, int unit, const float **out) {
  h->status = TAGC_OK;
  *out = h->unit_params(h->ctx, unit);
  return *out ? TAGC_OK : hook_failed(h, "unit_params", unit);
}

static tagc_status get_grads(tagc_unit_hooks *h, int unit, float **out) {
  h->status = TAGC_OK;
  *out = h->unit_grads(h->ctx, unit);
  return *out ? TAGC_OK : hook_failed(h, "unit_grads", unit);
}

static void release(tagc_unit_hooks *h, int unit) {
  if (h->unit_release)
    h->unit_release(h->ctx, unit);
}

/* ---------------------------------------------------------------------------------------- */
/* Forward                                                                                  */

/* The model parallelises with OpenMP and calls the BLAS from inside its parallel regions,
 * so the BLAS's own thread pool must stay at one thread (two pools would fight for cores). */
static void blas_single_threaded(void) {
  if (openblas_get_num_threads() != 1)
    openblas_set_num_threads(1);
}

static att_dims dims_of(const tagc_model_config *c, int B) {
  att_dims d = {B, c->ctx, c->d_model, c->n_head, c->d_model / c->n_head, 0.0f};
  d.scale = 1.0f / sqrtf((float)d.hd);
  return d;
}

/* One parallel region per block: the row chains before and after the attention need no
 * barrier of their own. */
static void block_forward(const tagc_model_layout *lay, tagc_model_acts *a, int l, const float *p) {
  const tagc_model_config *c = &lay->cfg;
  int u = l + 1, N = a->B * c->ctx, C = c->d_model;
  att_dims d = dims_of(c, a->B);
  layer_acts la = layer_get(a, l);
#define P(k) (p + toff(lay, u, k))
#pragma omp parallel
  {
    rows r = my_rows(N);
    layernorm_rows(r, la.ln1, la.ln1_stat, la.input, P(K_LN1_W), P(K_LN1_B), C);
    linear_rows(r, la.qkv, NULL, la.ln1, P(K_QKV_W), P(K_QKV_B), C, 3 * C);
#pragma omp barrier
    attention_forward(&d, la.atty, la.att, la.qkv);
    linear_rows(r, la.res2, la.input, la.atty, P(K_PROJ_W), P(K_PROJ_B), C, C);
    layernorm_rows(r, la.ln2, la.ln2_stat, la.res2, P(K_LN2_W), P(K_LN2_B), C);
    linear_rows(r, la.fch, NULL, la.ln2, P(K_FC_W), P(K_FC_B), C, 4 * C);
    gelu_rows(r, la.fch_gelu, la.fch, 4 * C);
    linear_rows(r, la.res3, la.res2, la.fch_gelu, P(K_MPROJ_W), P(K_MPROJ_B), 4 * C, C);
  }
#undef P
}

static const float *final_input(const tagc_model_acts *a) {
  return layer_get(a, a->cfg.n_layer - 1).res3;
}

static void head_forward(const tagc_model_layout *lay, tagc_model_acts *a, const float *p) {
  const tagc_model_config *c = &lay->cfg;
  int u = c->n_layer + 1, N = a->B * c->ctx;
#pragma omp parallel
  {
    rows r = my_rows(N);
    layernorm_rows(r, a->lnf, a->lnf_stat, final_input(a), p + toff(lay, u, K_LNF_W),
                   p + toff(lay, u, K_LNF_B), c->d_model);
    linear_rows(r, a->logits, NULL, a->lnf, p + toff(lay, u, K_HEAD_W), NULL, c->d_model, c->vocab);
    crossentropy_rows(r, a->losses, a->logits, a->targets, c->vocab);
  }
}

tagc_status tagc_model_forward(const tagc_model_layout *layout, tagc_model_acts *acts,
                               tagc_unit_hooks *hooks, const uint8_t *tokens,
                               const uint8_t *targets, int B, double *loss_sum) {
  const tagc_model_config *c = &layout->cfg;
  acts->have_forward = 0;
  if (B < 1 || B > acts->max_batch)
    return tagc_errorf(TAGC_EINVAL, "model: batch %d outside [1, %d]", B, acts->max_batch);
  if (memcmp(&acts->cfg, c, sizeof *c) != 0)
    return tagc_errorf(TAGC_EINVAL, "model: activations were allocated for another config");
  size_t n = (size_t)B * c->ctx;
  for (size_t i = 0; i < n; i++)
    if (tokens[i] >= c->vocab || targets[i] >= c->vocab)
      return tagc_errorf(TAGC_EINVAL, "model: token %d or target %d at position %zu >= vocab %d",
                         tokens[i], targets[i], i, c->vocab);
  blas_single_threaded();
  acts->B = B;
  memcpy(acts->tokens, tokens, n);
  memcpy(acts->targets, targets, n);

  const float *p;
  TAGC_CHECK(get_params(hooks, 0, &p));
  encoder_forward(acts->encoded, acts->tokens, p + toff(layout, 0, K_WTE), p + toff(layout, 0, K_WPE),
                  (int)n, c->ctx, c->d_model);
  release(hooks, 0);
  for (int l = 0; l < c->n_layer; l++) {
    TAGC_CHECK(get_params(hooks, l + 1, &p));
    block_forward(layout, acts, l, p);
    release(hooks, l + 1);
  }
  TAGC_CHECK(get_params(hooks, c->n_layer + 1, &p));
  head_forward(layout, acts, p);
  release(hooks, c->n_layer + 1);

  double sum = 0.0;
  for (size_t i = 0; i < n; i++)
    sum += acts->losses[i];
  *loss_sum = sum;
  acts->have_forward = 1;
  return TAGC_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Backward                                                                                 */

/* Gradient of the loss w.r.t. the final unit; sets acts->dres to d loss / d (last res3). */
static void head_backward(const tagc_model_layout *lay, tagc_model_acts *a, const float *p, float *g,
                          float loss_scale) {
  const tagc_model_config *c = &lay->cfg;
  int u = c->n_layer + 1, N = a->B * c->ctx, C = c->d_model, V = c->vocab;
  const float *x = final_input(a), *lnf_w = p + toff(lay, u, K_LNF_W);
#pragma omp parallel
  {
    rows r = my_rows(N);
    crossentropy_backward_rows(r, a->logits, a->targets, V, loss_scale);
    linear_dinp_rows(r, a->dln2, a->logits, p + toff(lay, u, K_HEAD_W), C, V);
    for (int i = r.lo; i < r.hi; i++)
      memset(a->dres + (size_t)i * C, 0, (size_t)C * sizeof(float));
    layernorm_dinp_rows(r, a->dres, a->dres, a->dln2, x, a->lnf_stat, lnf_w, C);
#pragma omp barrier
    linear_dparams(g + toff(lay, u, K_HEAD_W), NULL, a->logits, a->lnf, N, C, V);
    layernorm_dparams(g + toff(lay, u, K_LNF_W), g + toff(lay, u, K_LNF_B), a->dln2, x, a->lnf_stat, N, C);
  }
}

/* acts->dres: gradient w.r.t. block l's output on entry, w.r.t. its input on return. One
 * parallel region: the row chain down to the attention, the attention, the row chain down
 * to the block input, then (after a barrier) every parameter gradient of the block. */
static void block_backward(const tagc_model_layout *lay, tagc_model_acts *a, int l, const float *p,
                           float *g) {
  const tagc_model_config *c = &lay->cfg;
  int u = l + 1, N = a->B * c->ctx, C = c->d_model;
  att_dims d = dims_of(c, a->B);
  layer_acts la = layer_get(a, l);
  float *d3 = a->dres, *d1 = a->dres_next, *dfch = a->dbig;
#define P(k) (p + toff(lay, u, k))
#define G(k) (g + toff(lay, u, k))
#pragma omp parallel
  {
    rows r = my_rows(N);
    linear_dinp_rows(r, dfch, d3, P(K_MPROJ_W), 4 * C, C);
    gelu_backward_rows(r, dfch, la.fch, 4 * C);
    linear_dinp_rows(r, a->dln2, dfch, P(K_FC_W), C, 4 * C);
    layernorm_dinp_rows(r, a->dres2, d3, a->dln2, la.res2, la.ln2_stat, P(K_LN2_W), C);
    linear_dinp_rows(r, a->dattn, a->dres2, P(K_PROJ_W), C, C);
#pragma omp barrier
    attention_backward(&d, a->dqkv, a->datt, a->dattn, la.att, la.qkv);
    linear_dinp_rows(r, a->dln1, a->dqkv, P(K_QKV_W), C, 3 * C);
    layernorm_dinp_rows(r, d1, a->dres2, a->dln1, la.input, la.ln1_stat, P(K_LN1_W), C);
#pragma omp barrier
    linear_dparams(G(K_MPROJ_W), G(K_MPROJ_B), d3, la.fch_gelu, N, 4 * C, C);
    linear_dparams(G(K_FC_W), G(K_FC_B), dfch, la.ln2, N, C, 4 * C);
    layernorm_dparams(G(K_LN2_W), G(K_LN2_B), a->dln2, la.res2, la.ln2_stat, N, C);
    linear_dparams(G(K_PROJ_W), G(K_PROJ_B), a->dres2, la.atty, N, C, C);
    linear_dparams(G(K_QKV_W), G(K_QKV_B), a->dqkv, la.ln1, N, C, 3 * C);
    layernorm_dparams(G(K_LN1_W), G(K_LN1_B), a->dln1, la.input, la.ln1_stat, N, C);
  }
#undef P
#undef G
  a->dres = d1;
  a->dres_next = d3;
}

/* Gets unit u's parameters (unless params_needed is 0) and gradient buffer, runs `step`, then
 * reports the unit done and releases it. */
typedef void (*unit_backward_fn)(const tagc_model_layout *lay, tagc_model_acts *a, int l,
                                 const float *p, float *g, float loss_scale);

static tagc_status backward_unit(const tagc_model_layout *lay, tagc_model_acts *a,
                                 tagc_unit_hooks *h, int u, int params_needed, unit_backward_fn step,
                                 float loss_scale) {
  const float *p = NULL;
  float *g;
  if (params_needed)
    TAGC_CHECK(get_params(h, u, &p));
  tagc_status st = get_grads(h, u, &g);
  if (st == TAGC_OK) {
    step(lay, a, u - 1, p, g, loss_scale);
    st = h->unit_backward_done(h->ctx, u);
  }
  if (params_needed)
    release(h, u);
  return st;
}

static void head_step(const tagc_model_layout *lay, tagc_model_acts *a, int l, const float *p,
                      float *g, float loss_scale) {
  (void)l;
  head_backward(lay, a, p, g, loss_scale);
}

static void block_step(const tagc_model_layout *lay, tagc_model_acts *a, int l, const float *p,
                       float *g, float loss_scale) {
  (void)loss_scale;
  block_backward(lay, a, l, p, g);
}

static void embedding_step(const tagc_model_layout *lay, tagc_model_acts *a, int l, const float *p,
                           float *g, float loss_scale) {
  (void)l, (void)p, (void)loss_scale;
  encoder_backward(g + toff(lay, 0, K_WTE), g + toff(lay, 0, K_WPE), a->dres, a->tokens, a->B,
                   lay->cfg.ctx, lay->cfg.d_model);
}

tagc_status tagc_model_backward(const tagc_model_layout *layout, tagc_model_acts *acts,
                                tagc_unit_hooks *hooks, float loss_scale) {
  if (!acts->have_forward)
    return tagc_errorf(TAGC_EINVAL, "model: backward without a completed forward");
  acts->have_forward = 0; /* the backward consumes the probabilities in place */
  blas_single_threaded();
  int L = layout->cfg.n_layer;
  TAGC_CHECK(backward_unit(layout, acts, hooks, L + 1, 1, head_step, loss_scale));
  for (int l = L - 1; l >= 0; l--)
    TAGC_CHECK(backward_unit(layout, acts, hooks, l + 1, 1, block_step, loss_scale));
  return backward_unit(layout, acts, hooks, 0, tagc_model_backward_needs_params(layout, 0),
                       embedding_step, loss_scale);
}

/* ---------------------------------------------------------------------------------------- */
/* Arena hooks                                                                              */

static const float *arena_params(void *ctx, int unit) {
  tagc_arena_hooks *ah = ctx;
  return ah->params + ah->layout->units[unit].offset;
}

static float *arena_grads(void *ctx, int unit) {
  tagc_arena_hooks *ah = ctx;
  return ah->grads + ah->layout->units[unit].offset;
}

static tagc_status arena_done(void *ctx, int unit) {
  (void)ctx, (void)unit;
  return TAGC_OK;
}

void tagc_arena_hooks_init(tagc_arena_hooks *ah, const tagc_model_layout *layout,
                           const float *params, float *grads) {
  ah->hooks = (tagc_unit_hooks){.ctx = ah,
                                .unit_params = arena_params,
                                .unit_grads = arena_grads,
                                .unit_backward_done = arena_done,
                                .unit_release = NULL,
                                .status = TAGC_OK};
  ah->layout = layout;
  ah->params = params;
  ah->grads = grads;
}

double tagc_model_flops_per_token(const tagc_model_layout *layout) {
  const tagc_model_config *c = &layout->cfg;
  return 6.0 * (double)(layout->n_params - layout->units[0].numel) +
         12.0 * c->n_layer * (double)c->d_model * (double)c->ctx;
}

int tagc_model_backward_needs_params(const tagc_model_layout *layout, int unit) {
  (void)layout;
  return unit != 0; /* the embedding gradients need only the tokens and the incoming gradient */
}
