/* GPT-2-style decoder on the CPU: the activations and the forward and backward passes, unit
 * by unit through the caller's hooks. The kernels are in model_kernels_cpu.c, the layout and
 * the initialisation in model_layout.c.
 *
 * Threading: one OpenMP thread pool does all the work. Matrix products go to OpenBLAS
 * (cblas_sgemm) called single-threaded from inside the OpenMP regions: a linear layer splits
 * its rows over the threads, attention runs one (batch, head) pair per iteration. Running the
 * BLAS's own pthread pool next to OpenMP's would make two pools spin against each other on
 * the same cores. A block's forward or backward is one parallel region.
 *
 * Determinism: with the same thread count the outputs are bit-identical run to run. Every
 * reduction has a fixed order: per-row work is split over rows, and sums over the batch
 * (bias, norm and embedding gradients) are split over columns, each column summed by one
 * thread in row order. No atomics. */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_hooks.h"
#include "model/model_kernels_cpu.h"

/* Tensor order inside a block unit (matches the layout table in model.h). */
enum {
  K_LN1_W, K_LN1_B, K_LN2_W, K_LN2_B, K_QKV_W, K_QKV_B,
  K_PROJ_W, K_PROJ_B, K_FC_W, K_FC_B, K_MPROJ_W, K_MPROJ_B
};
/* Tensor order inside the embedding unit and the final unit. */
enum { K_WTE, K_WPE };
enum { K_LNF_W, K_LNF_B, K_HEAD_W };

/* Offset of tensor k of unit u from the start of that unit's buffer. */
static inline size_t toff(const tagc_model_layout *lay, int u, int k) {
  const tagc_unit_info *ui = &lay->units[u];
  return lay->tensors[ui->first_tensor + k].offset - ui->offset;
}

/* ---------------------------------------------------------------------------------------- */
/* Activations                                                                              */

struct tagc_model_acts {
  tagc_model_config cfg;
  int max_batch;
  int B;            /* batch of the last forward */
  int have_forward; /* a forward completed and its backward has not run yet */
  float *logits_out; /* when set, the forward copies its logits (B, T, V) here */
  void *mem;
  uint16_t *tokens, *targets; /* (B, T) copies of the last forward's input */
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
  float *logits;   /* (B, T, Vp) logits, then probabilities, then their gradient */
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
  size_t NH = (size_t)c->n_head, V = (size_t)c->padded_vocab, BT = B * T;
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
  *token_bytes = round_floats(B * (size_t)c->ctx) * sizeof(uint16_t);
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
  a->tokens = (uint16_t *)p;
  a->targets = a->tokens + token_bytes / sizeof(uint16_t);
  a->cfg = layout->cfg;
  a->max_batch = max_batch;
  *out = a;
  return TAGC_OK;
}

void tagc_model_acts_keep_logits(tagc_model_acts *acts, float *logits) {
  acts->logits_out = logits;
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
/* Forward                                                                                  */

static tagc_cpu_att_dims dims_of(const tagc_model_config *c, int B) {
  tagc_cpu_att_dims d = {B, c->ctx, c->d_model, c->n_head, c->d_model / c->n_head, 0.0f};
  d.scale = 1.0f / sqrtf((float)d.hd);
  return d;
}

/* One parallel region per block: the row chains before and after the attention need no
 * barrier of their own. */
static void block_forward(const tagc_model_layout *lay, tagc_model_acts *a, int l, const float *p) {
  const tagc_model_config *c = &lay->cfg;
  int u = l + 1, N = a->B * c->ctx, C = c->d_model;
  tagc_cpu_att_dims d = dims_of(c, a->B);
  layer_acts la = layer_get(a, l);
#define P(k) (p + toff(lay, u, k))
#pragma omp parallel
  {
    tagc_cpu_rows r = tagc_cpu_my_rows(N);
    tagc_cpu_layernorm_rows(r, la.ln1, la.ln1_stat, la.input, P(K_LN1_W), P(K_LN1_B), C);
    tagc_cpu_linear_rows(r, la.qkv, NULL, la.ln1, P(K_QKV_W), P(K_QKV_B), C, 3 * C);
#pragma omp barrier
    tagc_cpu_attention_forward(&d, la.atty, la.att, la.qkv);
    tagc_cpu_linear_rows(r, la.res2, la.input, la.atty, P(K_PROJ_W), P(K_PROJ_B), C, C);
    tagc_cpu_layernorm_rows(r, la.ln2, la.ln2_stat, la.res2, P(K_LN2_W), P(K_LN2_B), C);
    tagc_cpu_linear_rows(r, la.fch, NULL, la.ln2, P(K_FC_W), P(K_FC_B), C, 4 * C);
    tagc_cpu_gelu_rows(r, la.fch_gelu, la.fch, 4 * C);
    tagc_cpu_linear_rows(r, la.res3, la.res2, la.fch_gelu, P(K_MPROJ_W), P(K_MPROJ_B), 4 * C,
                         C);
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
    tagc_cpu_rows r = tagc_cpu_my_rows(N);
    tagc_cpu_layernorm_rows(r, a->lnf, a->lnf_stat, final_input(a), p + toff(lay, u, K_LNF_W),
                            p + toff(lay, u, K_LNF_B), c->d_model);
    tagc_cpu_linear_rows(r, a->logits, NULL, a->lnf, p + toff(lay, u, K_HEAD_W), NULL, c->d_model,
                         c->padded_vocab);
    if (a->logits_out) /* before the cross-entropy turns them into probabilities; the real
                          columns only (the caller's rows are vocab wide) */
      for (int64_t i = r.lo; i < r.hi; i++)
        memcpy(a->logits_out + (size_t)i * c->vocab, a->logits + (size_t)i * c->padded_vocab,
               (size_t)c->vocab * sizeof(float));
    tagc_cpu_crossentropy_rows(r, a->losses, a->logits, a->targets, c->vocab, c->padded_vocab);
  }
}

tagc_status tagc_model_forward(const tagc_model_layout *layout, tagc_model_acts *acts,
                               tagc_unit_hooks *hooks, const uint16_t *tokens,
                               const uint16_t *targets, int B, double *loss_sum) {
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
  tagc_cpu_blas_single_threaded();
  acts->B = B;
  memcpy(acts->tokens, tokens, n * sizeof *tokens);
  memcpy(acts->targets, targets, n * sizeof *targets);

  const float *p;
  TAGC_CHECK(tagc_unit_hooks_params(hooks, 0, &p));
  tagc_cpu_encoder_forward(acts->encoded, acts->tokens, p + toff(layout, 0, K_WTE),
                           p + toff(layout, 0, K_WPE), (int)n, c->ctx, c->d_model);
  tagc_unit_hooks_release(hooks, 0);
  for (int l = 0; l < c->n_layer; l++) {
    TAGC_CHECK(tagc_unit_hooks_params(hooks, l + 1, &p));
    block_forward(layout, acts, l, p);
    tagc_unit_hooks_release(hooks, l + 1);
  }
  TAGC_CHECK(tagc_unit_hooks_params(hooks, c->n_layer + 1, &p));
  head_forward(layout, acts, p);
  tagc_unit_hooks_release(hooks, c->n_layer + 1);

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
  int u = c->n_layer + 1, N = a->B * c->ctx, C = c->d_model, V = c->padded_vocab;
  const float *x = final_input(a), *lnf_w = p + toff(lay, u, K_LNF_W);
#pragma omp parallel
  {
    tagc_cpu_rows r = tagc_cpu_my_rows(N);
    tagc_cpu_crossentropy_backward_rows(r, a->logits, a->targets, V, loss_scale);
    tagc_cpu_linear_dinp_rows(r, a->dln2, a->logits, p + toff(lay, u, K_HEAD_W), C, V);
    for (int i = r.lo; i < r.hi; i++)
      memset(a->dres + (size_t)i * C, 0, (size_t)C * sizeof(float));
    tagc_cpu_layernorm_dinp_rows(r, a->dres, a->dres, a->dln2, x, a->lnf_stat, lnf_w, C);
#pragma omp barrier
    tagc_cpu_linear_dparams(g + toff(lay, u, K_HEAD_W), NULL, a->logits, a->lnf, N, C, V);
    tagc_cpu_layernorm_dparams(g + toff(lay, u, K_LNF_W), g + toff(lay, u, K_LNF_B), a->dln2, x,
                               a->lnf_stat, N, C);
  }
}

/* acts->dres: gradient w.r.t. block l's output on entry, w.r.t. its input on return. One
 * parallel region: the row chain down to the attention, the attention, the row chain down
 * to the block input, then (after a barrier) every parameter gradient of the block. */
static void block_backward(const tagc_model_layout *lay, tagc_model_acts *a, int l, const float *p,
                           float *g) {
  const tagc_model_config *c = &lay->cfg;
  int u = l + 1, N = a->B * c->ctx, C = c->d_model;
  tagc_cpu_att_dims d = dims_of(c, a->B);
  layer_acts la = layer_get(a, l);
  float *d3 = a->dres, *d1 = a->dres_next, *dfch = a->dbig;
#define P(k) (p + toff(lay, u, k))
#define G(k) (g + toff(lay, u, k))
#pragma omp parallel
  {
    tagc_cpu_rows r = tagc_cpu_my_rows(N);
    tagc_cpu_linear_dinp_rows(r, dfch, d3, P(K_MPROJ_W), 4 * C, C);
    tagc_cpu_gelu_backward_rows(r, dfch, la.fch, 4 * C);
    tagc_cpu_linear_dinp_rows(r, a->dln2, dfch, P(K_FC_W), C, 4 * C);
    tagc_cpu_layernorm_dinp_rows(r, a->dres2, d3, a->dln2, la.res2, la.ln2_stat, P(K_LN2_W),
                                 C);
    tagc_cpu_linear_dinp_rows(r, a->dattn, a->dres2, P(K_PROJ_W), C, C);
#pragma omp barrier
    tagc_cpu_attention_backward(&d, a->dqkv, a->datt, a->dattn, la.att, la.qkv);
    tagc_cpu_linear_dinp_rows(r, a->dln1, a->dqkv, P(K_QKV_W), C, 3 * C);
    tagc_cpu_layernorm_dinp_rows(r, d1, a->dres2, a->dln1, la.input, la.ln1_stat, P(K_LN1_W),
                                 C);
#pragma omp barrier
    tagc_cpu_linear_dparams(G(K_MPROJ_W), G(K_MPROJ_B), d3, la.fch_gelu, N, 4 * C, C);
    tagc_cpu_linear_dparams(G(K_FC_W), G(K_FC_B), dfch, la.ln2, N, C, 4 * C);
    tagc_cpu_layernorm_dparams(G(K_LN2_W), G(K_LN2_B), a->dln2, la.res2, la.ln2_stat, N, C);
    tagc_cpu_linear_dparams(G(K_PROJ_W), G(K_PROJ_B), a->dres2, la.atty, N, C, C);
    tagc_cpu_linear_dparams(G(K_QKV_W), G(K_QKV_B), a->dqkv, la.ln1, N, C, 3 * C);
    tagc_cpu_layernorm_dparams(G(K_LN1_W), G(K_LN1_B), a->dln1, la.input, la.ln1_stat, N, C);
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
    TAGC_CHECK(tagc_unit_hooks_params(h, u, &p));
  tagc_status st = tagc_unit_hooks_grads(h, u, &g);
  if (st == TAGC_OK) {
    step(lay, a, u - 1, p, g, loss_scale);
    st = h->unit_backward_done(h->ctx, u);
  }
  if (params_needed)
    tagc_unit_hooks_release(h, u);
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
  tagc_cpu_encoder_backward(g + toff(lay, 0, K_WTE), g + toff(lay, 0, K_WPE), a->dres, a->tokens,
                            a->B, lay->cfg.ctx, lay->cfg.d_model);
}

tagc_status tagc_model_backward(const tagc_model_layout *layout, tagc_model_acts *acts,
                                tagc_unit_hooks *hooks, float loss_scale) {
  if (!acts->have_forward)
    return tagc_errorf(TAGC_EINVAL, "model: backward without a completed forward");
  acts->have_forward = 0; /* the backward consumes the probabilities in place */
  tagc_cpu_blas_single_threaded();
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

int tagc_model_backward_needs_params(const tagc_model_layout *layout, int unit) {
  (void)layout;
  return unit != 0; /* the embedding gradients need only the tokens and the incoming gradient */
}
