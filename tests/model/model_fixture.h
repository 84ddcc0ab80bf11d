/* Shared set-up for the model tests: a small model with seeded parameters (norm weights and
 * biases perturbed away from their 1/0 init so that their gradients are exercised), a batch
 * of pseudo-random tokens, and helpers to run forward + backward on part of it. */
#ifndef TAGC_TESTS_WORKER_MODEL_FIXTURE_H
#define TAGC_TESTS_WORKER_MODEL_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

typedef struct fixture {
  tagc_model_layout layout;
  int B;                     /* sequences in the batch */
  float *params, *grads;     /* arenas of layout.n_params floats */
  uint16_t *tokens, *targets; /* (B, T) */
  tagc_model_acts *acts;     /* for up to B sequences */
  tagc_arena_hooks hooks;
} fixture;

static inline uint64_t fixture_rng(uint64_t *state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return *state >> 33;
}

/* A config the tests share: T = 80 spans two attention row blocks (the second partial). */
static const tagc_model_config fixture_config = {.vocab = 256, .ctx = 80, .n_layer = 2,
                                                 .n_head = 4, .d_model = 32};

static inline tagc_status fixture_init(fixture *f, const tagc_model_config *cfg, int B, uint64_t seed) {
  memset(f, 0, sizeof *f);
  TAGC_CHECK(tagc_model_layout_init(&f->layout, cfg));
  size_t n = f->layout.n_params, bt = (size_t)B * cfg->ctx;
  f->B = B;
  f->params = calloc(n, sizeof(float));
  f->grads = calloc(n, sizeof(float));
  f->tokens = malloc(bt * sizeof(uint16_t));
  f->targets = malloc(bt * sizeof(uint16_t));
  if (!f->params || !f->grads || !f->tokens || !f->targets)
    return tagc_errorf(TAGC_ENOMEM, "fixture");
  tagc_model_init_params(&f->layout, seed, f->params);
  uint64_t rng = seed;
  for (int t = 0; t < f->layout.n_tensors; t++) {
    const tagc_tensor_info *ti = &f->layout.tensors[t];
    if (ti->cols != 1)
      continue;
    for (size_t i = 0; i < ti->numel; i++)
      f->params[ti->offset + i] += 0.1f * ((float)fixture_rng(&rng) / 2147483648.0f - 0.5f);
  }
  for (size_t i = 0; i < bt; i++) {
    f->tokens[i] = (uint16_t)(fixture_rng(&rng) % (uint64_t)cfg->vocab);
    f->targets[i] = (uint16_t)(fixture_rng(&rng) % (uint64_t)cfg->vocab);
  }
  tagc_arena_hooks_init(&f->hooks, &f->layout, f->params, f->grads);
  return tagc_model_acts_new(&f->layout, B, &f->acts);
}

static inline void fixture_free(fixture *f) {
  tagc_model_acts_free(f->acts);
  free(f->params);
  free(f->grads);
  free(f->tokens);
  free(f->targets);
  memset(f, 0, sizeof *f);
}

/* Forward + backward over sequences [first, first + count), adding the gradient of
 * loss_scale * loss_sum into f->grads; the loss sum goes to *loss_sum. */
static inline tagc_status fixture_pass(fixture *f, int first, int count, float loss_scale, double *loss_sum) {
  size_t off = (size_t)first * f->layout.cfg.ctx;
  TAGC_CHECK(tagc_model_forward(&f->layout, f->acts, &f->hooks.hooks, f->tokens + off,
                                f->targets + off, count, loss_sum));
  return tagc_model_backward(&f->layout, f->acts, &f->hooks.hooks, loss_scale);
}

/* max |a - b| / max |b| over n floats (0 when both are all zero). */
static inline double max_rel_diff(const float *a, const float *b, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    diff = d > diff ? d : diff;
    scale = fabs((double)b[i]) > scale ? fabs((double)b[i]) : scale;
  }
  return scale > 0 ? diff / scale : diff;
}

#endif
