#include "model/adamw.h"

#include <math.h>

/* tagc_sumsq splits its input into this many equal ranges whatever the thread count, so the
 * order of the double additions depends only on n. */
#define SUMSQ_RANGES 256

tagc_status tagc_adamw_config_validate(const tagc_adamw_config *cfg) {
  if (!(cfg->lr >= 0 && isfinite(cfg->lr)))
    return tagc_errorf(TAGC_EINVAL, "adamw: lr must be finite and >= 0 (got %g)", cfg->lr);
  if (!(cfg->min_lr_ratio >= 0 && cfg->min_lr_ratio <= 1))
    return tagc_errorf(TAGC_EINVAL, "adamw: min_lr_ratio must be in [0, 1] (got %g)", cfg->min_lr_ratio);
  if (!(cfg->beta1 >= 0 && cfg->beta1 < 1))
    return tagc_errorf(TAGC_EINVAL, "adamw: beta1 must be in [0, 1) (got %g)", cfg->beta1);
  if (!(cfg->beta2 >= 0 && cfg->beta2 < 1))
    return tagc_errorf(TAGC_EINVAL, "adamw: beta2 must be in [0, 1) (got %g)", cfg->beta2);
  if (!(cfg->eps > 0 && isfinite(cfg->eps)))
    return tagc_errorf(TAGC_EINVAL, "adamw: eps must be finite and > 0 (got %g)", cfg->eps);
  if (!(cfg->weight_decay >= 0 && isfinite(cfg->weight_decay)))
    return tagc_errorf(TAGC_EINVAL, "adamw: weight_decay must be finite and >= 0 (got %g)",
                       cfg->weight_decay);
  if (!(cfg->grad_clip >= 0 && isfinite(cfg->grad_clip)))
    return tagc_errorf(TAGC_EINVAL, "adamw: grad_clip must be finite and >= 0 (got %g)", cfg->grad_clip);
  if (cfg->warmup_steps < 0)
    return tagc_errorf(TAGC_EINVAL, "adamw: warmup_steps must be >= 0 (got %lld)",
                       (long long)cfg->warmup_steps);
  if (cfg->total_steps < 1)
    return tagc_errorf(TAGC_EINVAL, "adamw: total_steps must be >= 1 (got %lld)",
                       (long long)cfg->total_steps);
  return TAGC_OK;
}

float tagc_lr_at(const tagc_adamw_config *cfg, int64_t step) {
  double lr_max = cfg->lr;
  double lr_min = lr_max * cfg->min_lr_ratio;
  if (step < cfg->warmup_steps)
    return (float)(lr_max * (double)(step + 1) / (double)cfg->warmup_steps);
  if (step >= cfg->total_steps)
    return (float)lr_min;
  double span = (double)(cfg->total_steps - cfg->warmup_steps);
  double progress = (double)(step - cfg->warmup_steps) / span;
  return (float)(lr_min + 0.5 * (lr_max - lr_min) * (1.0 + cos(M_PI * progress)));
}

static double sumsq_serial(const float *x, size_t n) {
  double acc[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; k++)
      acc[k] += (double)x[i + k] * (double)x[i + k];
  for (; i < n; i++)
    acc[0] += (double)x[i] * (double)x[i];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

double tagc_sumsq(const float *x, size_t n) {
  double part[SUMSQ_RANGES];
#pragma omp parallel for schedule(static)
  for (int r = 0; r < SUMSQ_RANGES; r++) {
    size_t lo = n * (size_t)r / SUMSQ_RANGES, hi = n * (size_t)(r + 1) / SUMSQ_RANGES;
    part[r] = sumsq_serial(x + lo, hi - lo);
  }
  double total = 0;
  for (int r = 0; r < SUMSQ_RANGES; r++)
    total += part[r];
  return total;
}

float tagc_clip_scale(const tagc_adamw_config *cfg, double global_sumsq) {
  if (cfg->grad_clip <= 0)
    return 1.0f;
  double scale = cfg->grad_clip / (sqrt(global_sumsq) + 1e-6);
  return scale < 1.0 ? (float)scale : 1.0f;
}

/* Per-step constants, computed in double and rounded once, as torch.optim.AdamW does. */
typedef struct adamw_step {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float neg_step_size;  /* -lr / (1 - beta1^step) */
  float bc2_sqrt;       /* sqrt(1 - beta2^step) */
  float eps;
  float decay_mul;      /* 1 - lr * weight_decay */
  float grad_scale;
} adamw_step;

static tagc_status grads_check_finite(const float *g, size_t n, size_t arena_lo) {
  long long bad = -1;
#pragma omp parallel for schedule(static) reduction(max : bad)
  for (size_t i = 0; i < n; i++)
    if (!isfinite(g[i]) && (long long)i > bad)
      bad = (long long)i;
  if (bad >= 0)
    return tagc_errorf(TAGC_ENUMERIC, "adamw: gradient at arena index %zu is %g; step refused",
                       arena_lo + (size_t)bad, g[bad]);
  return TAGC_OK;
}

/* Updates one span of one tensor; runs as an omp for inside the caller's parallel region. */
static void update_span(const adamw_step *s, int decay, float *p, const float *grads, float *m,
                        float *v, size_t n) {
#pragma omp for schedule(static) nowait
  for (size_t i = 0; i < n; i++) {
    float g = grads[i] * s->grad_scale;
    float pi = decay ? p[i] * s->decay_mul : p[i];
    float mi = m[i] * s->beta1 + g * s->one_minus_beta1;
    float vi = v[i] * s->beta2 + s->one_minus_beta2 * g * g;
    float denom = sqrtf(vi) / s->bc2_sqrt + s->eps;
    p[i] = pi + s->neg_step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

tagc_status tagc_adamw_update_range(const tagc_model_layout *layout, size_t arena_lo, size_t n,
                                    float *params, const float *grads, float *m, float *v,
                                    const tagc_adamw_config *cfg, int64_t step, float lr,
                                    float grad_scale) {
  if (arena_lo > layout->n_params || n > layout->n_params - arena_lo)
    return tagc_errorf(TAGC_EINVAL, "adamw: range [%zu, %zu) outside the arena of %zu floats",
                       arena_lo, arena_lo + n, layout->n_params);
  if (step < 1)
    return tagc_errorf(TAGC_EINVAL, "adamw: step must be >= 1 (got %lld)", (long long)step);
  if (!isfinite(grad_scale) || !isfinite(lr))
    return tagc_errorf(TAGC_ENUMERIC, "adamw: lr %g or grad_scale %g is not finite", lr, grad_scale);
  TAGC_CHECK(grads_check_finite(grads, n, arena_lo));

  double b1 = cfg->beta1, b2 = cfg->beta2;
  adamw_step s = {
      .beta1 = cfg->beta1,
      .one_minus_beta1 = (float)(1.0 - b1),
      .beta2 = cfg->beta2,
      .one_minus_beta2 = (float)(1.0 - b2),
      .neg_step_size = (float)(-(double)lr / (1.0 - pow(b1, (double)step))),
      .bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)step)),
      .eps = cfg->eps,
      .decay_mul = (float)(1.0 - (double)lr * (double)cfg->weight_decay),
      .grad_scale = grad_scale,
  };
  size_t hi = arena_lo + n;
#pragma omp parallel
  for (int t = 0; t < layout->n_tensors; t++) {
    const tagc_tensor_info *ti = &layout->tensors[t];
    size_t lo = ti->offset > arena_lo ? ti->offset : arena_lo;
    size_t end = ti->offset + ti->numel < hi ? ti->offset + ti->numel : hi;
    if (lo >= end)
      continue;
    size_t k = lo - arena_lo;
    update_span(&s, ti->decay, params + k, grads + k, m + k, v + k, end - lo);
  }
  return TAGC_OK;
}
