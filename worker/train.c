#include "train.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/crc32c.h"
#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "worker/adamw.h"
#include "worker/data.h"
#include "worker/model.h"

#define OFF(f) offsetof(tagc_train_config, f)

static const tagc_opt train_opts[] = {
    {"corpus", TAGC_OPT_STRING, OFF(corpus), TAGC_DEFAULT_CORPUS, 0, -1, NULL,
     "text file or directory to train on (*.dat and symlinks skipped)"},
    {"out", TAGC_OPT_STRING, OFF(out), "out", 0, -1, NULL,
     "output directory: metrics.jsonl, summary.json"},
    {"steps", TAGC_OPT_INT, OFF(steps), "300", 1, 1e9, NULL, "optimizer steps to run"},
    {"batch", TAGC_OPT_INT, OFF(batch), "16", 1, 1 << 20, NULL, "global batch in sequences"},
    {"micro-batch", TAGC_OPT_INT, OFF(micro_batch), "0", 0, 1 << 20, NULL,
     "sequences per forward/backward (0 = whole local batch); same math for any value"},
    {"ctx", TAGC_OPT_INT, OFF(ctx), "64", 2, 4096, NULL, "context length in bytes"},
    {"layers", TAGC_OPT_INT, OFF(layers), "2", 1, 64, NULL, "transformer blocks"},
    {"heads", TAGC_OPT_INT, OFF(heads), "4", 1, 256, NULL, "attention heads"},
    {"dim", TAGC_OPT_INT, OFF(dim), "64", 4, 16384, NULL, "model width (divisible by heads)"},
    {"lr", TAGC_OPT_DOUBLE, OFF(lr), "0.003", 0, 10, NULL, "peak learning rate"},
    {"min-lr-ratio", TAGC_OPT_DOUBLE, OFF(min_lr_ratio), "0.1", 0, 1, NULL,
     "final learning rate as a fraction of the peak (cosine decay)"},
    {"warmup", TAGC_OPT_INT, OFF(warmup), "20", 0, 1e9, NULL, "linear warmup steps"},
    {"weight-decay", TAGC_OPT_DOUBLE, OFF(weight_decay), "0.1", 0, 10, NULL,
     "AdamW decoupled weight decay (not on norms and biases)"},
    {"grad-clip", TAGC_OPT_DOUBLE, OFF(grad_clip), "1.0", 0, 1e9, NULL,
     "global gradient norm clip (0 = off)"},
    {"beta1", TAGC_OPT_DOUBLE, OFF(beta1), "0.9", 0, 0.999999, NULL, "AdamW beta1"},
    {"beta2", TAGC_OPT_DOUBLE, OFF(beta2), "0.95", 0, 0.999999, NULL, "AdamW beta2"},
    {"eps", TAGC_OPT_DOUBLE, OFF(eps), "1e-8", 1e-30, 1, NULL, "AdamW epsilon"},
    {"seed", TAGC_OPT_INT, OFF(seed), "1337", 0, 9.2e18, NULL, "seed of init and sampler"},
    {"eval-every", TAGC_OPT_INT, OFF(eval_every), "50", 0, 1e9, NULL,
     "validation every N steps (0 = only at the end)"},
    {"eval-windows", TAGC_OPT_INT, OFF(eval_windows), "64", 1, 1 << 20, NULL,
     "validation windows per evaluation"},
    {"threads", TAGC_OPT_INT, OFF(threads), "0", 0, 1024, NULL,
     "compute threads (BLAS and OpenMP; 0 = all cores)"},
    {"log", TAGC_OPT_STRING, OFF(log), "info", 0, -1, NULL,
     "log filter, e.g. info or warn,train=debug"},
    {"compress", TAGC_OPT_CHOICE, OFF(compress), "tagc", 0, -1, "tagc|bf16|none",
     "gradient compression policy (effective with more than one worker)"},
};

const tagc_opt_program tagc_train_program = {
    "tagc-worker", "[options]",
    "Trains a GPT-style byte-level transformer on a text corpus.", train_opts,
    sizeof train_opts / sizeof train_opts[0]};

/* Everything one training run owns. */
typedef struct trainer {
  const tagc_train_config *cfg;
  tagc_model_layout layout;
  tagc_adamw_config adam;
  tagc_corpus corpus;
  float *params, *grads, *m, *v;
  tagc_model_acts *acts;
  int micro;          /* sequences per forward/backward */
  uint8_t *tokens, *targets;
  tagc_arena_hooks hooks;
  FILE *metrics;
  int threads;
  double t_start;
} trainer;

static void trainer_free(trainer *t) {
  free(t->params);
  free(t->grads);
  free(t->m);
  free(t->v);
  free(t->tokens);
  free(t->targets);
  tagc_model_acts_free(t->acts);
  tagc_corpus_free(&t->corpus);
  if (t->metrics)
    fclose(t->metrics);
  memset(t, 0, sizeof *t);
}

static tagc_status make_dir(const char *path) {
  if (mkdir(path, 0755) != 0 && errno != EEXIST)
    return tagc_errorf(TAGC_EIO, "output directory %s: %s", path, strerror(errno));
  return TAGC_OK;
}

static float *alloc_floats(size_t n) {
  return calloc(n ? n : 1, sizeof(float));
}

static tagc_status trainer_init(trainer *t, const tagc_train_config *cfg) {
  memset(t, 0, sizeof *t);
  t->cfg = cfg;
  tagc_model_config mc = {256, (int)cfg->ctx, (int)cfg->layers, (int)cfg->heads, (int)cfg->dim};
  TAGC_CHECK(tagc_model_layout_init(&t->layout, &mc));
  if (cfg->micro_batch > cfg->batch)
    return tagc_errorf(TAGC_EINVAL, "--micro-batch %lld is larger than --batch %lld",
                       (long long)cfg->micro_batch, (long long)cfg->batch);
  t->micro = (int)(cfg->micro_batch ? cfg->micro_batch : cfg->batch);
  t->adam = (tagc_adamw_config){.lr = (float)cfg->lr,
                                .min_lr_ratio = (float)cfg->min_lr_ratio,
                                .warmup_steps = cfg->warmup,
                                .total_steps = cfg->steps,
                                .beta1 = (float)cfg->beta1,
                                .beta2 = (float)cfg->beta2,
                                .eps = (float)cfg->eps,
                                .weight_decay = (float)cfg->weight_decay,
                                .grad_clip = (float)cfg->grad_clip};
  t->threads = cfg->threads ? (int)cfg->threads : omp_get_num_procs();
  omp_set_num_threads(t->threads);
  openblas_set_num_threads(t->threads);

  TAGC_CHECK(tagc_corpus_load(cfg->corpus, (size_t)cfg->ctx + 1, &t->corpus));
  size_t n = t->layout.n_params;
  t->params = alloc_floats(n);
  t->grads = alloc_floats(n);
  t->m = alloc_floats(n);
  t->v = alloc_floats(n);
  t->tokens = malloc((size_t)t->micro * (size_t)cfg->ctx);
  t->targets = malloc((size_t)t->micro * (size_t)cfg->ctx);
  if (!t->params || !t->grads || !t->m || !t->v || !t->tokens || !t->targets)
    return tagc_errorf(TAGC_ENOMEM, "model state of %zu parameters", n);
  TAGC_CHECK(tagc_model_acts_new(&t->layout, t->micro, &t->acts));
  tagc_model_init_params(&t->layout, (uint64_t)cfg->seed, t->params);
  tagc_arena_hooks_init(&t->hooks, &t->layout, t->params, t->grads);

  TAGC_CHECK(make_dir(cfg->out));
  char path[4096];
  snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->out);
  t->metrics = fopen(path, "w");
  if (!t->metrics)
    return tagc_errorf(TAGC_EIO, "%s: %s", path, strerror(errno));
  return TAGC_OK;
}

/* One optimizer step over the global batch `step`; returns the mean loss and grad norm. */
static tagc_status train_step(trainer *t, int64_t step, double *loss, double *grad_norm) {
  const tagc_train_config *cfg = t->cfg;
  int T = (int)cfg->ctx;
  size_t n = t->layout.n_params;
  memset(t->grads, 0, n * sizeof(float));
  float scale = (float)(1.0 / ((double)cfg->batch * T));
  double loss_sum = 0;
  for (int64_t first = 0; first < cfg->batch; first += t->micro) {
    int count = (int)(cfg->batch - first < t->micro ? cfg->batch - first : t->micro);
    tagc_batch_fill(&t->corpus, (uint64_t)cfg->seed, step, first, count, T, t->tokens, t->targets);
    double part;
    TAGC_CHECK(tagc_model_forward(&t->layout, t->acts, &t->hooks.hooks, t->tokens, t->targets,
                                  count, &part));
    TAGC_CHECK(tagc_model_backward(&t->layout, t->acts, &t->hooks.hooks, scale));
    loss_sum += part;
  }
  *loss = loss_sum / ((double)cfg->batch * T);
  if (!isfinite(*loss))
    return tagc_errorf(TAGC_ENUMERIC, "loss is %g at step %lld", *loss, (long long)step);
  *grad_norm = sqrt(tagc_sumsq(t->grads, n));
  float clip = 1.0f;
  if (cfg->grad_clip > 0 && *grad_norm > cfg->grad_clip)
    clip = (float)(cfg->grad_clip / *grad_norm);
  float lr = tagc_lr_at(&t->adam, step);
  return tagc_adamw_update_range(&t->layout, 0, n, t->params, t->grads, t->m, t->v, &t->adam,
                                 step + 1, lr, clip);
}

/* Mean validation loss over cfg->eval_windows fixed windows. */
static tagc_status evaluate(trainer *t, double *val_loss) {
  int T = (int)t->cfg->ctx;
  double sum = 0;
  for (int64_t first = 0; first < t->cfg->eval_windows; first += t->micro) {
    int count = (int)(t->cfg->eval_windows - first < t->micro ? t->cfg->eval_windows - first : t->micro);
    tagc_val_fill(&t->corpus, first, count, T, t->tokens, t->targets);
    double part;
    TAGC_CHECK(tagc_model_forward(&t->layout, t->acts, &t->hooks.hooks, t->tokens, t->targets,
                                  count, &part));
    sum += part;
  }
  *val_loss = sum / ((double)t->cfg->eval_windows * T);
  return TAGC_OK;
}

static void format_duration(double s, char *buf, size_t cap) {
  if (s < 60)
    snprintf(buf, cap, "%.1fs", s);
  else if (s < 3600)
    snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
  else
    snprintf(buf, cap, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

static void print_progress(const trainer *t, int64_t step, double loss, double val_loss,
                           double tok_s, double elapsed) {
  char el[32], eta[32];
  int64_t done = step + 1;
  format_duration(elapsed, el, sizeof el);
  format_duration(elapsed / (double)done * (double)(t->cfg->steps - done), eta, sizeof eta);
  char val[32] = "";
  if (!isnan(val_loss))
    snprintf(val, sizeof val, " val %.4f", val_loss);
  printf("step %lld/%lld  loss %.4f%s  %.0f tok/s  elapsed %s  eta %s\n", (long long)done,
         (long long)t->cfg->steps, loss, val, tok_s, el, eta);
  fflush(stdout);
}

static tagc_status write_summary(const trainer *t, int64_t steps, double train_loss,
                                 double val_loss, double tok_s, double wall) {
  json_t *s = json_pack("{s:I, s:f, s:f, s:f, s:f, s:i, s:s, s:s, s:i, s:I, s:I}", "steps",
                        (json_int_t)steps, "final_train_loss", train_loss, "final_val_loss",
                        val_loss, "tokens_per_s", tok_s, "wall_s", wall, "world_size", 1,
                        "compress", t->cfg->compress, "blas", openblas_get_config(), "threads",
                        t->threads, "params", (json_int_t)t->layout.n_params, "seed",
                        (json_int_t)t->cfg->seed);
  uint32_t crc = tagc_crc32c(0, t->params, t->layout.n_params * sizeof(float));
  json_object_set_new(s, "params_crc32c", json_integer(crc));
  if (!s)
    return tagc_errorf(TAGC_ENOMEM, "summary");
  json_object_set_new(s, "model", json_pack("{s:i, s:i, s:i, s:i, s:i}", "vocab", 256, "ctx",
                                            (int)t->cfg->ctx, "layers", (int)t->cfg->layers,
                                            "heads", (int)t->cfg->heads, "dim", (int)t->cfg->dim));
  char path[4096];
  snprintf(path, sizeof path, "%s/summary.json", t->cfg->out);
  tagc_status st = tagc_json_write_file(path, s);
  json_decref(s);
  return st;
}

static void write_metrics(trainer *t, int64_t step, double loss, double val_loss, double gnorm,
                          double lr, double step_s, double tok_s, double elapsed) {
  json_t *m = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "step", (json_int_t)(step + 1),
                        "loss", loss, "grad_norm", gnorm, "lr", lr, "step_s", step_s,
                        "tokens_per_s", tok_s, "elapsed_s", elapsed);
  if (!m)
    return;
  if (!isnan(val_loss))
    json_object_set_new(m, "val_loss", json_real(val_loss));
  json_dumpf(m, t->metrics, JSON_COMPACT);
  fputc('\n', t->metrics);
  fflush(t->metrics);
  json_decref(m);
}

tagc_status tagc_train_run(const tagc_train_config *cfg) {
  trainer t;
  tagc_status st;
  TAGC_CHECK_GOTO(trainer_init(&t, cfg), st, done);
  tagc_opts_log(&tagc_train_program, cfg);
  LOG_INFO("train", "model: %d layers, width %d, %d heads, context %d, %zu parameters; batch %lld "
           "(micro %d); %d threads; BLAS %s", t.layout.cfg.n_layer, t.layout.cfg.d_model,
           t.layout.cfg.n_head, t.layout.cfg.ctx, t.layout.n_params, (long long)cfg->batch,
           t.micro, t.threads, openblas_get_config());
  double t0 = tagc_now(), last_print = -1e9, loss = NAN, val = NAN, tokens = 0;
  double step_tokens = (double)cfg->batch * (double)cfg->ctx;
  for (int64_t step = 0; step < cfg->steps; step++) {
    double ts = tagc_now(), gnorm;
    TAGC_CHECK_GOTO(train_step(&t, step, &loss, &gnorm), st, done);
    double step_s = tagc_now() - ts;
    tokens += step_tokens;
    double step_val = NAN;
    int last = step + 1 == cfg->steps;
    if (last || (cfg->eval_every && (step + 1) % cfg->eval_every == 0)) {
      TAGC_CHECK_GOTO(evaluate(&t, &step_val), st, done);
      val = step_val;
    }
    double now = tagc_now();
    double tok_s = tokens / (now - t0);
    write_metrics(&t, step, loss, step_val, gnorm, tagc_lr_at(&t.adam, step), step_s,
                  step_tokens / step_s, now - t0);
    if (step == 0 || last || !isnan(step_val) || now - last_print >= 1.0) {
      print_progress(&t, step, loss, step_val, tok_s, now - t0);
      last_print = now;
    }
  }
  double wall = tagc_now() - t0;
  st = write_summary(&t, cfg->steps, loss, val, tokens / wall, wall);
  if (st == TAGC_OK)
    LOG_INFO("train", "done: %lld steps, train loss %.4f, val loss %.4f, %.0f tokens/s, %.1f s",
             (long long)cfg->steps, loss, val, tokens / wall, wall);
done:
  trainer_free(&t);
  return st;
}
