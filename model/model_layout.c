/* The GPT model's parameter layout (the arena table of model.h), its deterministic
 * initialisation and its FLOP count. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


int tagc_padded_vocab(int vocab) {
  return (vocab + TAGC_VOCAB_PAD - 1) / TAGC_VOCAB_PAD * TAGC_VOCAB_PAD;
}

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
  } spec[] = { /* the block's tensor order (model.h) */
      {"ln1_w", TAGC_ROLE_NORM, 0, 1, 0},       {"ln1_b", TAGC_ROLE_NORM, 0, 1, 0},
      {"ln2_w", TAGC_ROLE_NORM, 0, 1, 0},       {"ln2_b", TAGC_ROLE_NORM, 0, 1, 0},
      {"qkv_w", TAGC_ROLE_ATTN_QKV, 1, 3, 1},   {"qkv_b", TAGC_ROLE_ATTN_QKV, 0, 3, 0},
      {"attn_proj_w", TAGC_ROLE_ATTN_PROJ, 1, 1, 1}, {"attn_proj_b", TAGC_ROLE_ATTN_PROJ, 0, 1, 0},
      {"fc_w", TAGC_ROLE_MLP_FC, 1, 4, 1},      {"fc_b", TAGC_ROLE_MLP_FC, 0, 4, 0},
      {"mlp_proj_w", TAGC_ROLE_MLP_PROJ, 1, 1, 4}, {"mlp_proj_b", TAGC_ROLE_MLP_PROJ, 0, 1, 0},
  };
  begin_unit(lay);
  for (size_t k = 0; k < sizeof spec / sizeof spec[0]; k++) {
    char name[32];
    snprintf(name, sizeof name, "h%d.%s", l, spec[k].name);
    int cols = spec[k].cols_c ? spec[k].cols_c * C : 1;
    add_tensor(lay, name, spec[k].role, spec[k].decay, spec[k].rows_mul * C, cols);
  }
  end_unit(lay);
}

tagc_status tagc_model_layout_init(tagc_model_layout *layout, const tagc_model_config *cfg) {
  if (cfg->vocab < 2 || cfg->vocab > TAGC_MAX_VOCAB)
    return tagc_errorf(TAGC_EINVAL, "model: vocab must be in [2, %d] (got %d)", TAGC_MAX_VOCAB,
                       cfg->vocab);
  if (cfg->padded_vocab != 0 && cfg->padded_vocab < cfg->vocab)
    return tagc_errorf(TAGC_EINVAL, "model: padded_vocab %d is below vocab %d", cfg->padded_vocab,
                       cfg->vocab);
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
  if (!layout->cfg.padded_vocab)
    layout->cfg.padded_vocab = tagc_padded_vocab(cfg->vocab);
  int V = layout->cfg.padded_vocab, T = cfg->ctx, C = cfg->d_model;
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

double tagc_model_flops_per_token(const tagc_model_layout *layout) {
  const tagc_model_config *c = &layout->cfg;
  return 6.0 * (double)(layout->n_params - layout->units[0].numel) +
         12.0 * c->n_layer * (double)c->d_model * (double)c->ctx;
}
