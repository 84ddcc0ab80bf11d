/* Finite-difference check of the model's gradients, determinism, and config validation.
 *
 * Gradients: for every tensor, the 3 entries with the largest analytic |gradient| of loss_sum
 * (loss_scale = 1) are compared with central differences (f(x+h) - f(x-h)) / 2h of the
 * forward's loss_sum, which is accumulated in double from fp32 per-position losses. Two error
 * sources bound the difference:
 *  - rounding: each fp32 per-position loss carries ~1e-6 relative error, so loss_sum (~5.5 per
 *    position) jitters by about FD_NOISE_REL * loss_sum between the two evaluations; divided by
 *    2h that is the absolute tolerance term;
 *  - truncation: O(h^2 f''') — with h = 1e-2 against nonlinearities of unit scale (LayerNorm,
 *    GELU, softmax of O(1) logits) this stays below 1% of the gradient: the relative term.
 * Each entry is checked with h and h/2, so a lucky cancellation at one step size cannot pass. */
#include <stdio.h>

#include "model_fixture.h"
#include "test.h"

#define FD_STEP 1e-2
#define FD_REL_TOL 1e-2
#define FD_NOISE_REL 2e-7
#define ENTRIES_PER_TENSOR 3

static double loss_at(fixture *f) {
  double loss = 0;
  CHECK_OK(tagc_model_forward(&f->layout, f->acts, &f->hooks.hooks, f->tokens, f->targets, f->B, &loss));
  return loss;
}

/* Indices of the k largest |g| in g[0..n). */
static void top_entries(const float *g, size_t n, size_t *idx, int k) {
  for (int j = 0; j < k; j++) {
    size_t best = 0;
    double best_abs = -1;
    for (size_t i = 0; i < n; i++) {
      int taken = 0;
      for (int q = 0; q < j; q++)
        taken |= idx[q] == i;
      if (!taken && fabs(g[i]) > best_abs) {
        best_abs = fabs(g[i]);
        best = i;
      }
    }
    idx[j] = best;
  }
}

static void check_finite_differences(void) {
  fixture f;
  CHECK_OK(fixture_init(&f, &fixture_config, 2, 7));
  double loss0 = 0;
  CHECK_OK(fixture_pass(&f, 0, f.B, 1.0f, &loss0));
  double worst = 0;
  const char *worst_name = "";
  for (int t = 0; t < f.layout.n_tensors; t++) {
    const tagc_tensor_info *ti = &f.layout.tensors[t];
    size_t idx[ENTRIES_PER_TENSOR];
    top_entries(f.grads + ti->offset, ti->numel, idx, ENTRIES_PER_TENSOR);
    for (int j = 0; j < ENTRIES_PER_TENSOR; j++) {
      float *x = &f.params[ti->offset + idx[j]];
      double g = f.grads[ti->offset + idx[j]];
      for (double h = FD_STEP; h >= FD_STEP / 2; h /= 2) {
        float saved = *x;
        *x = saved + (float)h;
        double up = loss_at(&f);
        double hu = (double)*x - saved;
        *x = saved - (float)h;
        double down = loss_at(&f);
        double hd = saved - (double)*x;
        *x = saved;
        double fd = (up - down) / (hu + hd);
        double tol = FD_REL_TOL * fabs(g) + FD_NOISE_REL * loss0 / (hu + hd);
        double err = fabs(fd - g);
        CHECK_MSG(err <= tol, "%s[%zu] h=%g: analytic %.6g, finite difference %.6g (err %.3g > %.3g)",
                  ti->name, idx[j], h, g, fd, err, tol);
        if (err / tol > worst) {
          worst = err / tol;
          worst_name = ti->name;
        }
      }
    }
  }
  printf("finite differences: %d tensors x %d entries x 2 steps, worst error/tolerance %.3f (%s)\n",
         f.layout.n_tensors, ENTRIES_PER_TENSOR, worst, worst_name);
  fixture_free(&f);
}

/* Gradients of one fresh pass into out. */
static void fresh_grads(fixture *f, float *out) {
  memset(f->grads, 0, f->layout.n_params * sizeof(float));
  double loss;
  CHECK_OK(fixture_pass(f, 0, f->B, 1.0f / 160.0f, &loss));
  memcpy(out, f->grads, f->layout.n_params * sizeof(float));
}

/* Same inputs and thread count: bit-identical gradients (the BLAS splits work by thread
 * count, so bits across different thread counts are not promised). */
static void check_determinism(void) {
  fixture f;
  CHECK_OK(fixture_init(&f, &fixture_config, 2, 11));
  size_t n = f.layout.n_params;
  float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
  fresh_grads(&f, a);
  fresh_grads(&f, b);
  CHECK_MSG(memcmp(a, b, n * sizeof(float)) == 0, "two passes gave different gradient bits");
  free(a), free(b);
  fixture_free(&f);
}

static void check_bad_configs(void) {
  static const struct {
    tagc_model_config cfg;
    const char *why;
  } bad[] = {
      {{256, 16, 2, 3, 32, 0}, "d_model not divisible by n_head"},
      {{256, 16, 0, 4, 32, 0}, "zero layers"},
      {{256, 0, 2, 4, 32, 0}, "ctx 0"},
      {{256, 16, TAGC_MAX_LAYERS + 1, 4, 32, 0}, "too many layers"},
      {{256, 16, 2, 0, 32, 0}, "zero heads"},
      {{65537, 16, 2, 4, 32, 0}, "vocab above 65536"},
      {{0, 16, 2, 4, 32, 0}, "vocab 0"},
      {{256, 16, 2, 4, 0, 0}, "d_model 0"},
      {{256, 16, 2, 4, 32, 200}, "padded_vocab below vocab"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tagc_model_layout lay;
    tagc_status st = tagc_model_layout_init(&lay, &bad[i].cfg);
    CHECK_MSG(st == TAGC_EINVAL, "%s: status %d, expected TAGC_EINVAL", bad[i].why, st);
    CHECK_MSG(tagc_last_error()[0] != '\0', "%s: no error detail", bad[i].why);
  }
  tagc_model_layout lay;
  tagc_model_config max_layers = {256, 4, TAGC_MAX_LAYERS, 1, 4, 0};
  CHECK_OK(tagc_model_layout_init(&lay, &max_layers));
}

int main(void) {
  check_finite_differences();
  check_determinism();
  check_bad_configs();
  return TEST_END();
}
