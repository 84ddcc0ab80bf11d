/* AdamW on arena ranges, the learning-rate schedule, sumsq and the clipping factor. */
#include <omp.h>
#include <stdio.h>

#include "model_fixture.h"
#include "test.h"
#include "model/adamw.h"

static const tagc_adamw_config base_cfg = {.lr = 1e-3f, .min_lr_ratio = 0.1f, .warmup_steps = 10,
                                           .total_steps = 110, .beta1 = 0.9f, .beta2 = 0.95f,
                                           .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f};

static void check_schedule(void) {
  const tagc_adamw_config *c = &base_cfg;
  double lr = c->lr, lr_min = c->lr * c->min_lr_ratio;
  CHECK_NEAR(tagc_lr_at(c, 0), lr / 10, 1e-12);
  CHECK_NEAR(tagc_lr_at(c, 4), lr * 5 / 10, 1e-10);
  CHECK_NEAR(tagc_lr_at(c, 9), lr, 1e-10);
  CHECK_NEAR(tagc_lr_at(c, 10), lr, 1e-10);          /* cosine starts at the peak */
  CHECK_NEAR(tagc_lr_at(c, 60), (lr + lr_min) / 2, 1e-10); /* half way down the cosine */
  CHECK_NEAR(tagc_lr_at(c, 110), lr_min, 1e-10);
  CHECK_NEAR(tagc_lr_at(c, 500), lr_min, 1e-10);
  int monotone = 1;
  for (int64_t s = 11; s <= 110; s++)
    monotone &= tagc_lr_at(c, s) <= tagc_lr_at(c, s - 1);
  CHECK_MSG(monotone, "lr increases somewhere in the cosine phase");
  tagc_adamw_config no_warmup = base_cfg;
  no_warmup.warmup_steps = 0;
  CHECK_NEAR(tagc_lr_at(&no_warmup, 0), lr, 1e-10);
}

static void check_validation(void) {
  CHECK_OK(tagc_adamw_config_validate(&base_cfg));
  tagc_adamw_config bad[7];
  for (int i = 0; i < 7; i++)
    bad[i] = base_cfg;
  bad[0].lr = -1;
  bad[1].beta1 = 1.0f;
  bad[2].beta2 = -0.1f;
  bad[3].eps = 0;
  bad[4].min_lr_ratio = 2;
  bad[5].total_steps = 0;
  bad[6].grad_clip = -1;
  for (int i = 0; i < 7; i++)
    CHECK_EQ_INT(tagc_adamw_config_validate(&bad[i]), TAGC_EINVAL);
}

static void check_sumsq_and_clip(void) {
  size_t n = 100003;
  float *x = malloc(n * sizeof(float));
  uint64_t rng = 5;
  double naive = 0;
  for (size_t i = 0; i < n; i++) {
    x[i] = (float)fixture_rng(&rng) / 2147483648.0f - 0.5f;
    naive += (double)x[i] * x[i];
  }
  int procs = omp_get_max_threads();
  omp_set_num_threads(1);
  double one = tagc_sumsq(x, n);
  omp_set_num_threads(procs > 1 ? procs : 2);
  double many = tagc_sumsq(x, n);
  omp_set_num_threads(procs);
  CHECK_NEAR(one, naive, 1e-12 * naive);
  CHECK_MSG(memcmp(&one, &many, sizeof one) == 0, "sumsq depends on the thread count");
  CHECK_NEAR(tagc_sumsq(x, 0), 0.0, 0.0);
  free(x);

  tagc_adamw_config c = base_cfg;
  CHECK_NEAR(tagc_clip_scale(&c, 0.25), 1.0, 0.0);      /* norm 0.5 < 1 */
  CHECK_NEAR(tagc_clip_scale(&c, 16.0), 1.0 / (4.0 + 1e-6), 1e-7); /* norm 4 */
  c.grad_clip = 0;
  CHECK_NEAR(tagc_clip_scale(&c, 16.0), 1.0, 0.0);
}

/* Random params, grads and moments for a small layout. */
typedef struct state {
  tagc_model_layout lay;
  float *p, *g, *m, *v;
} state;

static void state_init(state *s) {
  CHECK_OK(tagc_model_layout_init(&s->lay, &fixture_config));
  size_t n = s->lay.n_params;
  s->p = malloc(n * sizeof(float)), s->g = malloc(n * sizeof(float));
  s->m = malloc(n * sizeof(float)), s->v = malloc(n * sizeof(float));
  uint64_t rng = 9;
  for (size_t i = 0; i < n; i++) {
    s->p[i] = (float)fixture_rng(&rng) / 2147483648.0f - 0.5f;
    s->g[i] = (float)fixture_rng(&rng) / 2147483648.0f - 0.5f;
    s->m[i] = 0.1f * ((float)fixture_rng(&rng) / 2147483648.0f - 0.5f);
    s->v[i] = 0.01f * (float)fixture_rng(&rng) / 2147483648.0f;
  }
}

static void state_copy(state *dst, const state *src) {
  size_t n = src->lay.n_params * sizeof(float);
  dst->lay = src->lay;
  dst->p = malloc(n), dst->g = malloc(n), dst->m = malloc(n), dst->v = malloc(n);
  memcpy(dst->p, src->p, n), memcpy(dst->g, src->g, n), memcpy(dst->m, src->m, n), memcpy(dst->v, src->v, n);
}

static void state_free(state *s) {
  free(s->p), free(s->g), free(s->m), free(s->v);
}

static int state_equal(const state *a, const state *b) {
  size_t n = a->lay.n_params * sizeof(float);
  return !memcmp(a->p, b->p, n) && !memcmp(a->m, b->m, n) && !memcmp(a->v, b->v, n);
}

static tagc_status update(state *s, size_t lo, size_t n, int64_t step) {
  return tagc_adamw_update_range(&s->lay, lo, n, s->p + lo, s->g + lo, s->m + lo, s->v + lo,
                                 &base_cfg, step, 1e-3f, 0.5f);
}

static void check_update(void) {
  state whole, split, before;
  state_init(&whole);
  state_copy(&split, &whole);
  state_copy(&before, &whole);
  size_t n = whole.lay.n_params;

  /* Shards with boundaries inside tensors give the same bits as one update. */
  CHECK_OK(update(&whole, 0, n, 3));
  size_t cuts[] = {0, 1, 777, n / 3, n / 2 + 5, n - 1, n};
  for (size_t i = 0; i + 1 < sizeof cuts / sizeof cuts[0]; i++)
    CHECK_OK(update(&split, cuts[i], cuts[i + 1] - cuts[i], 3));
  CHECK_MSG(state_equal(&whole, &split), "sharded update differs from the whole-arena update");

  /* Closed form for one element of a decayed and of a non-decayed tensor. */
  for (int t = 0; t < whole.lay.n_tensors; t++) {
    const tagc_tensor_info *ti = &whole.lay.tensors[t];
    if (strcmp(ti->name, "h0.fc_w") && strcmp(ti->name, "h0.fc_b"))
      continue;
    size_t i = ti->offset + ti->numel / 2;
    double g = before.g[i] * 0.5, lr = 1e-3f, b1 = base_cfg.beta1, b2 = base_cfg.beta2;
    double m = b1 * before.m[i] + (1 - b1) * g, v = b2 * before.v[i] + (1 - b2) * g * g;
    double mhat = m / (1 - pow(b1, 3)), vhat = v / (1 - pow(b2, 3));
    double decay = ti->decay ? 1 - lr * base_cfg.weight_decay : 1.0;
    double p = before.p[i] * decay - lr * mhat / (sqrt(vhat) + base_cfg.eps);
    CHECK_EQ_INT(ti->decay, ti->cols > 1);
    CHECK_NEAR(whole.p[i], p, 1e-6 * fabs(before.p[i]) + 1e-9);
    CHECK_NEAR(whole.m[i], m, 1e-6 * fabs(m));
    CHECK_NEAR(whole.v[i], v, 1e-6 * fabs(v));
  }

  /* A non-finite gradient refuses the step and changes nothing. */
  state bad;
  state_copy(&bad, &before);
  state pristine;
  state_copy(&pristine, &before);
  bad.g[n / 2] = NAN;
  CHECK_EQ_INT(update(&bad, 0, n, 3), TAGC_ENUMERIC);
  bad.g[n / 2] = INFINITY;
  CHECK_EQ_INT(update(&bad, n / 4, n / 2, 3), TAGC_ENUMERIC);
  CHECK_MSG(state_equal(&bad, &pristine), "a refused step changed the state");
  CHECK_EQ_INT(update(&bad, n / 2 + 1, n / 2 - 1, 3), TAGC_OK); /* range without the bad entry */

  CHECK_EQ_INT(update(&pristine, n - 2, 3, 3), TAGC_EINVAL);
  CHECK_EQ_INT(update(&pristine, 0, n, 0), TAGC_EINVAL);
  state_free(&whole), state_free(&split), state_free(&before), state_free(&bad), state_free(&pristine);
}

int main(void) {
  check_schedule();
  check_validation();
  check_sumsq_and_clip();
  check_update();
  return TEST_END();
}
