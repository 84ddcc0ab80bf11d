/* AdamW over ranges of the parameter arena, learning-rate schedule, global-norm clipping.
 *
 * The sharded engine owns a contiguous range (shard) of the flat arena laid out by
 * tagc_model_layout and updates only that range; the single-process trainer passes the whole
 * arena. Weight decay is decoupled (torch.optim.AdamW): p -= lr * wd * p, applied only to
 * tensors whose layout entry has `decay` set. All functions are deterministic: the same inputs
 * give bit-identical outputs for any thread count. */
#ifndef TAGC_WORKER_ADAMW_H
#define TAGC_WORKER_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "model/model.h"

typedef struct tagc_adamw_config {
  float lr;             /* peak learning rate (after warmup) */
  float min_lr_ratio;   /* lr at total_steps = lr * min_lr_ratio */
  int64_t warmup_steps; /* linear warmup from 0 over this many steps (0 = none) */
  int64_t total_steps;  /* end of the cosine decay */
  float beta1, beta2;
  float eps;
  float weight_decay;
  float grad_clip;      /* max global gradient L2 norm; 0 = no clipping */
} tagc_adamw_config;

/* Checks ranges (lr >= 0, 0 <= min_lr_ratio <= 1, 0 <= beta < 1, eps > 0, weight_decay >= 0,
 * grad_clip >= 0, 0 <= warmup_steps, total_steps >= 1). TAGC_EINVAL names the bad field. */
tagc_status tagc_adamw_config_validate(const tagc_adamw_config *cfg);

/* Learning rate for the step with 0-based index `step` (the number of steps already taken):
 * lr * (step + 1) / warmup_steps while step < warmup_steps, then a cosine from lr down to
 * lr * min_lr_ratio reached at step == total_steps, and lr * min_lr_ratio after that. */
float tagc_lr_at(const tagc_adamw_config *cfg, int64_t step);

/* Sum of squares of x[0..n) accumulated in double over fixed blocks (independent of the
 * thread count), so every rank and every run gets the same bits. Uses OpenMP. */
double tagc_sumsq(const float *x, size_t n);

/* Gradient multiplier that clips the global norm sqrt(global_sumsq) to cfg->grad_clip, as
 * torch.nn.utils.clip_grad_norm_: min(1, grad_clip / (norm + 1e-6)); 1 when clipping is off. */
float tagc_clip_scale(const tagc_adamw_config *cfg, double global_sumsq);

/* One AdamW step on the arena range [arena_lo, arena_lo + n): params, grads, m and v point at
 * element arena_lo of their arenas (caller-owned, n floats each; params, m, v are updated in
 * place). The gradient used is grads * grad_scale (clipping and any other scaling); `step` is
 * the 1-based step number used in the bias corrections; lr is the rate for this step
 * (tagc_lr_at). Weight decay applies to the parts of the range that belong to tensors with
 * `decay` set. Returns TAGC_ENUMERIC, leaving params, m and v untouched, if a gradient in
 * the range is not finite; TAGC_EINVAL if the range is outside the layout or step < 1.
 * Uses OpenMP; deterministic. */
tagc_status tagc_adamw_update_range(const tagc_model_layout *layout, size_t arena_lo, size_t n,
                                    float *params, const float *grads, float *m, float *v,
                                    const tagc_adamw_config *cfg, int64_t step, float lr,
                                    float grad_scale);

/* One range of a multi-segment AdamW step (tagc_adamw_update_range's arguments). */
typedef struct tagc_adamw_segment {
  size_t arena_lo, n;
  float *params;
  const float *grads;
  float *m, *v;
} tagc_adamw_segment;

#endif
