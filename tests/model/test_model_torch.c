/* The C model's loss and every parameter gradient against the same model in torch
 * (tests/model/torch_ref.py, run with /usr/bin/python3; skipped when torch is missing).
 *
 * Exchange file, little-endian, written here and read by torch_ref.py:
 *   char[8]  "TAGCMREF"
 *   int32    V, T, L, NH, C, B
 *   int64    n_params
 *   float32  params[n_params]       the arena, in the layout order of model/model.h
 *   uint16   tokens[B*T], targets[B*T]
 *   float64  mean loss (loss_sum / (B*T))
 *   float32  grads[n_params]        gradient of the mean loss (loss_scale = 1 / (B*T)) */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model_fixture.h"
#include "test.h"

static int write_all(FILE *f, const void *p, size_t size) {
  return fwrite(p, 1, size, f) == size;
}

static int write_exchange(const char *path, const fixture *f, double mean_loss) {
  const tagc_model_config *c = &f->layout.cfg;
  int32_t dims[6] = {c->vocab, c->ctx, c->n_layer, c->n_head, c->d_model, f->B};
  int64_t n = (int64_t)f->layout.n_params;
  size_t bt = (size_t)f->B * c->ctx;
  FILE *out = fopen(path, "wb");
  if (!out)
    return 0;
  int ok = write_all(out, "TAGCMREF", 8) && write_all(out, dims, sizeof dims) &&
           write_all(out, &n, sizeof n) && write_all(out, f->params, (size_t)n * sizeof(float)) &&
           write_all(out, f->tokens, bt * sizeof *f->tokens) &&
           write_all(out, f->targets, bt * sizeof *f->targets) &&
           write_all(out, &mean_loss, sizeof mean_loss) &&
           write_all(out, f->grads, (size_t)n * sizeof(float));
  return fclose(out) == 0 && ok;
}

int main(void) {
  const char *src = getenv("TAGC_SOURCE_DIR");
  if (!src)
    TEST_SKIP("TAGC_SOURCE_DIR is not set (run through ctest)");
  if (access("/usr/bin/python3", X_OK) != 0)
    TEST_SKIP("/usr/bin/python3 not found");

  fixture f;
  CHECK_OK(fixture_init(&f, &fixture_config, 3, 42));
  int bt = f.B * f.layout.cfg.ctx;
  double loss_sum = 0;
  CHECK_OK(fixture_pass(&f, 0, f.B, 1.0f / (float)bt, &loss_sum));

  char path[] = "/tmp/tagc_model_torch_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0)
    close(fd);
  CHECK(write_exchange(path, &f, loss_sum / bt));

  char cmd[8192];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/model/torch_ref.py %s", src, path);
  int rc = system(cmd);
  unlink(path);
  fixture_free(&f);
  CHECK(rc != -1 && WIFEXITED(rc));
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
    TEST_SKIP("torch is not importable by /usr/bin/python3");
  CHECK_MSG(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "torch_ref.py reported a mismatch (status %d)", rc);
  return TEST_END();
}
