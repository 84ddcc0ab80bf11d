/* One AdamW step with weight decay (decayed and non-decayed tensors) and global-norm clipping
 * active, C (tagc_sumsq + tagc_clip_scale + tagc_adamw_update_range over three shards) against
 * torch.nn.utils.clip_grad_norm_ + torch.optim.AdamW (tests/model/adamw_ref.py).
 *
 * Exchange file, little-endian, written here and read by adamw_ref.py:
 *   char[8]  "TAGCAREF"
 *   int32    V, T, L, NH, C
 *   int64    n_params, step (1-based; the moments hold step - 1 earlier steps)
 *   float32  lr, beta1, beta2, eps, weight_decay, grad_clip
 *   float32  params[n], grads[n], m[n], v[n]   before the step
 *   float32  params[n], m[n], v[n]             after the C step */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model_fixture.h"
#include "test.h"
#include "model/adamw.h"

static int write_all(FILE *f, const void *p, size_t size) {
  return fwrite(p, 1, size, f) == size;
}

int main(void) {
  const char *src = getenv("TAGC_SOURCE_DIR");
  if (!src)
    TEST_SKIP("TAGC_SOURCE_DIR is not set (run through ctest)");
  if (access("/usr/bin/python3", X_OK) != 0)
    TEST_SKIP("/usr/bin/python3 not found");

  tagc_model_layout lay;
  CHECK_OK(tagc_model_layout_init(&lay, &fixture_config));
  size_t n = lay.n_params, bytes = n * sizeof(float);
  float *before = malloc(4 * bytes), *after = malloc(3 * bytes);
  float *p = before, *g = before + n, *m = before + 2 * n, *v = before + 3 * n;
  tagc_model_init_params(&lay, 5, p);
  uint64_t rng = 17;
  for (size_t i = 0; i < n; i++) {
    g[i] = 0.05f * ((float)fixture_rng(&rng) / 2147483648.0f - 0.5f);
    m[i] = 0.01f * ((float)fixture_rng(&rng) / 2147483648.0f - 0.5f);
    v[i] = 1e-4f * (float)fixture_rng(&rng) / 2147483648.0f;
  }
  memcpy(after, p, bytes);
  memcpy(after + n, m, bytes);
  memcpy(after + 2 * n, v, bytes);

  int64_t step = 4;
  double sumsq = tagc_sumsq(g, n);
  tagc_adamw_config cfg = {.lr = 2e-3f, .min_lr_ratio = 0.1f, .warmup_steps = 0, .total_steps = 10,
                           .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                           .grad_clip = (float)(0.5 * sqrt(sumsq))};
  float clip = tagc_clip_scale(&cfg, sumsq);
  CHECK(clip < 0.51f && clip > 0.49f); /* clipping is active */
  size_t cuts[] = {0, n / 3 + 7, 2 * n / 3 + 1, n};
  for (int s = 0; s < 3; s++) {
    size_t lo = cuts[s], len = cuts[s + 1] - cuts[s];
    CHECK_OK(tagc_adamw_update_range(&lay, lo, len, after + lo, g + lo, after + n + lo,
                                     after + 2 * n + lo, &cfg, step, cfg.lr, clip));
  }

  char path[] = "/tmp/tagc_adamw_torch_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE *out = fd >= 0 ? fdopen(fd, "wb") : NULL;
  CHECK(out != NULL);
  if (out) {
    const tagc_model_config *c = &lay.cfg;
    int32_t dims[5] = {c->vocab, c->ctx, c->n_layer, c->n_head, c->d_model};
    int64_t counts[2] = {(int64_t)n, step};
    float hyper[6] = {cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.grad_clip};
    int ok = write_all(out, "TAGCAREF", 8) && write_all(out, dims, sizeof dims) &&
             write_all(out, counts, sizeof counts) && write_all(out, hyper, sizeof hyper) &&
             write_all(out, before, 4 * bytes) && write_all(out, after, 3 * bytes);
    CHECK(fclose(out) == 0 && ok);
  }

  char cmd[8192];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/model/adamw_ref.py %s", src, path);
  int rc = system(cmd);
  unlink(path);
  free(before);
  free(after);
  CHECK(rc != -1 && WIFEXITED(rc));
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
    TEST_SKIP("torch is not importable by /usr/bin/python3");
  CHECK_MSG(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "adamw_ref.py reported a mismatch (status %d)", rc);
  return TEST_END();
}
