/* Tokens per second of one training step of the C model: forward + backward + global-norm
 * clipping + AdamW over the whole arena, on one random batch.
 *
 * Usage: bench_model_step L C NH T B [STEPS [WARMUP]]  (vocab 256; threads from
 * OMP_NUM_THREADS / OPENBLAS_NUM_THREADS). Prints one line: the median step time and the
 * median tokens/s over STEPS timed steps after WARMUP untimed ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "model/adamw.h"
#include "model/model.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static tagc_status bench_step(const tagc_model_layout *lay, tagc_model_acts *acts,
                              tagc_arena_hooks *ah, const tagc_adamw_config *adam, float *params,
                              float *grads, float *m, float *v, const uint16_t *tokens,
                              const uint16_t *targets, int B, int64_t step) {
  size_t n = lay->n_params;
  memset(grads, 0, n * sizeof(float));
  double loss;
  TAGC_CHECK(tagc_model_forward(lay, acts, &ah->hooks, tokens, targets, B, &loss));
  TAGC_CHECK(tagc_model_backward(lay, acts, &ah->hooks, 1.0f / (float)((size_t)B * lay->cfg.ctx)));
  float clip = tagc_clip_scale(adam, tagc_sumsq(grads, n));
  return tagc_adamw_update_range(lay, 0, n, params, grads, m, v, adam, step,
                                 tagc_lr_at(adam, step - 1), clip);
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s L C NH T B [STEPS [WARMUP]]\n", argv[0]);
    return 2;
  }
  tagc_model_config cfg = {.vocab = 256, .n_layer = atoi(argv[1]), .d_model = atoi(argv[2]),
                           .n_head = atoi(argv[3]), .ctx = atoi(argv[4])};
  int B = atoi(argv[5]);
  int steps = argc > 6 ? atoi(argv[6]) : 10, warmup = argc > 7 ? atoi(argv[7]) : 3;
  tagc_model_layout lay;
  tagc_model_acts *acts = NULL;
  if (tagc_model_layout_init(&lay, &cfg) != TAGC_OK || steps < 1 || warmup < 0 ||
      tagc_model_acts_new(&lay, B, &acts) != TAGC_OK) {
    fprintf(stderr, "bench_model_step: bad arguments: %s\n", tagc_last_error());
    return 2;
  }
  size_t n = lay.n_params, bt = (size_t)B * cfg.ctx;
  float *params = malloc(n * sizeof(float)), *grads = malloc(n * sizeof(float));
  float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
  uint16_t *tokens = malloc(bt * sizeof(uint16_t)), *targets = malloc(bt * sizeof(uint16_t));
  double *times = malloc((size_t)steps * sizeof(double));
  if (!params || !grads || !m || !v || !tokens || !targets || !times) {
    fprintf(stderr, "bench_model_step: out of memory\n");
    return 1;
  }
  tagc_model_init_params(&lay, 1, params);
  for (size_t i = 0; i < bt; i++) {
    tokens[i] = (uint16_t)((uint8_t)(i * 2654435761u >> 13));
    targets[i] = (uint16_t)((uint8_t)(i * 40503u >> 7));
  }
  tagc_arena_hooks ah;
  tagc_arena_hooks_init(&ah, &lay, params, grads);
  tagc_adamw_config adam = {.lr = 3e-4f, .min_lr_ratio = 0.1f, .warmup_steps = 2, .total_steps = 1000,
                            .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                            .grad_clip = 1.0f};
  for (int s = 0; s < warmup + steps; s++) {
    double t0 = tagc_now();
    tagc_status st = bench_step(&lay, acts, &ah, &adam, params, grads, m, v, tokens, targets, B, s + 1);
    if (st != TAGC_OK) {
      fprintf(stderr, "bench_model_step: step %d: %s\n", s, tagc_last_error());
      return 1;
    }
    if (s >= warmup)
      times[s - warmup] = tagc_now() - t0;
  }
  qsort(times, (size_t)steps, sizeof(double), cmp_double);
  double med = times[steps / 2];
  printf("c L=%d C=%d NH=%d T=%d B=%d params=%zu step_ms=%.2f tokens_per_s=%.0f\n", cfg.n_layer,
         cfg.d_model, cfg.n_head, cfg.ctx, B, n, med * 1e3, (double)bt / med);
  tagc_model_acts_free(acts);
  free(params), free(grads), free(m), free(v), free(tokens), free(targets), free(times);
  return 0;
}
