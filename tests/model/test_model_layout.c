/* Layout table, initialisation statistics, the hook protocol of forward/backward (order,
 * release pairing, failure propagation) and input validation. */
#include <stdio.h>

#include "model_fixture.h"
#include "test.h"

static void check_layout(void) {
  tagc_model_layout lay;
  tagc_model_config cfg = {256, 32, 3, 4, 48, 0};
  CHECK_OK(tagc_model_layout_init(&lay, &cfg));
  size_t C = 48, V = 256, T = 32, L = 3;
  CHECK_EQ_INT(lay.n_units, L + 2);
  CHECK_EQ_INT(lay.n_tensors, 2 + 12 * L + 3);
  CHECK_EQ_INT(lay.n_params, V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C + V * C);
  size_t next = 0;
  for (int u = 0; u < lay.n_units; u++) {
    const tagc_unit_info *ui = &lay.units[u];
    CHECK_EQ_INT(ui->offset, next);
    size_t sum = 0;
    tagc_role prev = TAGC_ROLE_COUNT;
    int roles_seen[TAGC_ROLE_COUNT] = {0};
    for (int k = 0; k < ui->n_tensors; k++) {
      const tagc_tensor_info *ti = &lay.tensors[ui->first_tensor + k];
      CHECK_EQ_INT(ti->unit, u);
      CHECK_EQ_INT(ti->offset, next + sum);
      CHECK_EQ_INT(ti->numel, (size_t)ti->rows * ti->cols);
      CHECK_EQ_INT(ti->decay, ti->cols > 1);
      /* one contiguous run per role inside a unit */
      CHECK_MSG(ti->role == prev || !roles_seen[ti->role], "%s: role %s split in unit %d", ti->name,
                tagc_role_name(ti->role), u);
      roles_seen[ti->role] = 1;
      prev = ti->role;
      sum += ti->numel;
    }
    CHECK_EQ_INT(ui->numel, sum);
    next += sum;
  }
  CHECK_EQ_INT(next, lay.n_params);
  CHECK_EQ_STR(lay.tensors[lay.units[2].first_tensor + 8].name, "h1.fc_w");
  CHECK_EQ_INT(lay.tensors[lay.units[2].first_tensor + 8].rows, 4 * C);
  CHECK_EQ_STR(tagc_role_name(TAGC_ROLE_MLP_PROJ), "mlp_proj");
}

static void check_init(void) {
  tagc_model_layout lay;
  tagc_model_config cfg = {256, 64, 8, 4, 64, 0};
  CHECK_OK(tagc_model_layout_init(&lay, &cfg));
  size_t n = lay.n_params;
  float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
  tagc_model_init_params(&lay, 1234, a);
  tagc_model_init_params(&lay, 1234, b);
  CHECK_MSG(memcmp(a, b, n * sizeof(float)) == 0, "same seed, different parameters");
  tagc_model_init_params(&lay, 1235, b);
  size_t same = 0;
  for (size_t i = 0; i < n; i++)
    same += a[i] == b[i] && a[i] != 0.0f && a[i] != 1.0f;
  CHECK_MSG(same < n / 1000, "another seed repeats %zu values", same);
  for (int t = 0; t < lay.n_tensors; t++) {
    const tagc_tensor_info *ti = &lay.tensors[t];
    const float *x = a + ti->offset;
    double sum = 0, sq = 0;
    for (size_t i = 0; i < ti->numel; i++) {
      sum += x[i];
      sq += (double)x[i] * x[i];
    }
    double mean = sum / ti->numel, sd = sqrt(sq / ti->numel - mean * mean);
    if (ti->cols == 1) {
      double want = strstr(ti->name, "_w") ? 1.0 : 0.0;
      CHECK_MSG(mean == want && sd == 0, "%s: mean %g sd %g, expected constant %g", ti->name, mean, sd, want);
      continue;
    }
    int resid = strstr(ti->name, "attn_proj_w") || strstr(ti->name, "mlp_proj_w");
    double want = resid ? 0.02 / sqrt(2.0 * cfg.n_layer) : 0.02;
    /* a sample of >= 4096 normals: sd within 5% and mean within 5 standard errors */
    CHECK_MSG(fabs(sd / want - 1) < 0.05, "%s: sd %g, expected %g", ti->name, sd, want);
    CHECK_MSG(fabs(mean) < 5 * want / sqrt((double)ti->numel), "%s: mean %g", ti->name, mean);
  }
  free(a);
  free(b);
}

/* Hooks that log every call and can fail one of them. */
typedef struct trace {
  tagc_arena_hooks arena;
  tagc_unit_hooks hooks;
  char log[1024];
  int held[TAGC_MAX_LAYERS + 2]; /* unit_params minus unit_release */
  int fail_params_unit;          /* -1: never */
} trace;

static void trace_add(trace *t, char what, int unit) {
  size_t len = strlen(t->log);
  snprintf(t->log + len, sizeof t->log - len, "%c%d ", what, unit);
}

static const float *trace_params(void *ctx, int unit) {
  trace *t = ctx;
  trace_add(t, 'P', unit);
  if (unit == t->fail_params_unit) {
    t->hooks.status = tagc_errorf(TAGC_EPEER, "injected all-gather failure");
    return NULL;
  }
  t->held[unit]++;
  return t->arena.hooks.unit_params(&t->arena, unit);
}

static float *trace_grads(void *ctx, int unit) {
  trace *t = ctx;
  trace_add(t, 'G', unit);
  return t->arena.hooks.unit_grads(&t->arena, unit);
}

static tagc_status trace_done(void *ctx, int unit) {
  trace_add(ctx, 'D', unit);
  return TAGC_OK;
}

static void trace_release(void *ctx, int unit) {
  trace *t = ctx;
  trace_add(t, 'R', unit);
  t->held[unit]--;
}

static void trace_init(trace *t, fixture *f) {
  memset(t, 0, sizeof *t);
  tagc_arena_hooks_init(&t->arena, &f->layout, f->params, f->grads);
  t->hooks = (tagc_unit_hooks){t, trace_params, trace_grads, trace_done, trace_release, TAGC_OK};
  t->fail_params_unit = -1;
}

static void check_hooks(void) {
  fixture f;
  tagc_model_config cfg = fixture_config;
  cfg.ctx = 8;
  CHECK_OK(fixture_init(&f, &cfg, 2, 1));
  trace t;
  trace_init(&t, &f);
  double loss;
  CHECK_OK(tagc_model_forward(&f.layout, f.acts, &t.hooks, f.tokens, f.targets, 2, &loss));
  CHECK_EQ_STR(t.log, "P0 R0 P1 R1 P2 R2 P3 R3 ");
  t.log[0] = '\0';
  CHECK_OK(tagc_model_backward(&f.layout, f.acts, &t.hooks, 1.0f));
  CHECK_EQ_STR(t.log, "P3 G3 D3 R3 P2 G2 D2 R2 P1 G1 D1 R1 G0 D0 ");
  CHECK_EQ_INT(tagc_model_backward(&f.layout, f.acts, &t.hooks, 1.0f), TAGC_EINVAL);

  /* A failing hook stops the pass with its status; everything taken is released. */
  t.fail_params_unit = 2;
  t.log[0] = '\0';
  CHECK_EQ_INT(tagc_model_forward(&f.layout, f.acts, &t.hooks, f.tokens, f.targets, 2, &loss), TAGC_EPEER);
  CHECK_EQ_STR(t.log, "P0 R0 P1 R1 P2 ");
  CHECK_EQ_INT(tagc_model_backward(&f.layout, f.acts, &t.hooks, 1.0f), TAGC_EINVAL);
  t.fail_params_unit = -1;
  CHECK_OK(tagc_model_forward(&f.layout, f.acts, &t.hooks, f.tokens, f.targets, 2, &loss));
  t.fail_params_unit = 1;
  CHECK_EQ_INT(tagc_model_backward(&f.layout, f.acts, &t.hooks, 1.0f), TAGC_EPEER);
  for (int u = 0; u < f.layout.n_units; u++)
    CHECK_EQ_INT(t.held[u], 0);

  /* Bad inputs. */
  t.fail_params_unit = -1;
  CHECK_EQ_INT(tagc_model_forward(&f.layout, f.acts, &t.hooks, f.tokens, f.targets, 3, &loss), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_model_forward(&f.layout, f.acts, &t.hooks, f.tokens, f.targets, 0, &loss), TAGC_EINVAL);
  tagc_model_layout small;
  tagc_model_config small_cfg = cfg;
  small_cfg.vocab = 16;
  CHECK_OK(tagc_model_layout_init(&small, &small_cfg));
  CHECK_EQ_INT(tagc_model_forward(&small, f.acts, &t.hooks, f.tokens, f.targets, 2, &loss), TAGC_EINVAL);
  tagc_model_acts *acts;
  CHECK_OK(tagc_model_acts_new(&small, 1, &acts));
  memset(f.tokens, 200, 8);
  tagc_arena_hooks_init(&t.arena, &small, f.params, f.grads);
  CHECK_EQ_INT(tagc_model_forward(&small, acts, &t.hooks, f.tokens, f.targets, 1, &loss), TAGC_EINVAL);
  tagc_model_acts_free(acts);
  CHECK_EQ_INT(tagc_model_acts_new(&small, 0, &acts), TAGC_EINVAL);
  CHECK(tagc_model_acts_bytes(&f.layout, 2) > tagc_model_acts_bytes(&f.layout, 1));
  fixture_free(&f);
}

int main(void) {
  check_layout();
  check_init();
  check_hooks();
  return TEST_END();
}
