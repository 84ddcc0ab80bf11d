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
#include "ckpt/ckpt_saver.h"
#include "worker/data.h"
#include "worker/engine.h"
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
    {"compress", TAGC_OPT_STRING, OFF(compress), "tagc", 0, -1, NULL,
     "gradient compression: tagc|bf16|none, optionally with role=kind[:density[:rho]] rules"},
    {"rank", TAGC_OPT_INT, OFF(rank), "0", 0, 4095, NULL, "rank of this worker"},
    {"world", TAGC_OPT_INT, OFF(world), "1", 1, 4096, NULL, "number of workers"},
    {"rendezvous", TAGC_OPT_STRING, OFF(rendezvous), "", 0, -1, NULL,
     "directory shared by the workers for the static rendezvous (world > 1)"},
    {"ckpt-every", TAGC_OPT_INT, OFF(ckpt_every), "100", 0, 1e9, NULL,
     "save a checkpoint every N steps and at the end (0 = never)"},
    {"ckpt-dir", TAGC_OPT_STRING, OFF(ckpt_dir), "", 0, -1, NULL,
     "checkpoint root (default OUT/ckpt); shared by all workers"},
    {"ckpt-keep-last", TAGC_OPT_INT, OFF(ckpt_keep_last), "3", 0, 1e6, NULL,
     "keep the newest N checkpoints (0 = keep all) ..."},
    {"ckpt-keep-every", TAGC_OPT_INT, OFF(ckpt_keep_every), "0", 0, 1e9, NULL,
     "... and every checkpoint whose step is a multiple of N (0 = none)"},
    {"resume", TAGC_OPT_BOOL, OFF(resume), "true", 0, -1, NULL,
     "continue from the newest valid checkpoint in the checkpoint root"},
    {"stop-at", TAGC_OPT_INT, OFF(stop_at), "0", 0, 1e9, NULL,
     "stop after this step as if interrupted, without changing the schedule (0 = run to --steps)"},
    {"check-feedback", TAGC_OPT_BOOL, OFF(check_feedback), "false", 0, -1, NULL,
     "test hook: measure error-feedback mass conservation each step (metrics: feedback_error)"},
    {"dump-params", TAGC_OPT_STRING, OFF(dump_params), "", 0, -1, NULL,
     "at the end, rank 0 writes the full fp32 parameter arena to this file (tests, tools)"},
    {"gather", TAGC_OPT_CHOICE, OFF(gather), "fp32", 0, -1, "fp32|bf16",
     "parameter all-gather precision (bf16 = mixed-precision FSDP: fp32 master shards)"},
    {"reshard-after-forward", TAGC_OPT_BOOL, OFF(reshard_after_forward), "true", 0, -1, NULL,
     "free a unit's gathered parameters after forward and gather again for backward (ZeRO-3); "
     "false keeps them for the whole step"},
    {"host", TAGC_OPT_STRING, OFF(host), "127.0.0.1", 0, -1, NULL,
     "address this worker listens on and advertises to its peers"},
    {"op-timeout", TAGC_OPT_DOUBLE, OFF(op_timeout), "60", 0.1, 86400, NULL,
     "seconds a collective may take before the worker treats it as failed"},
};

const tagc_opt_program tagc_train_program = {
    "tagc-worker", "[options]",
    "Trains a GPT-style byte-level transformer on a text corpus.", train_opts,
    sizeof train_opts / sizeof train_opts[0]};

/* Everything one training run owns. */
typedef struct trainer {
  const tagc_train_config *cfg;
  tagc_model_layout layout;
  tagc_corpus corpus;
  tagc_store *store;
  tagc_comm *comm;
  tagc_engine *engine;
  int rank, world;
  FILE *metrics; /* rank 0 only */
  int threads;
  char ckpt_root[4096];
  tagc_ckpt_range *ranges;
  tagc_ckpt_saver *saver;
  int64_t start_step; /* first step to run (resume point) */
  int64_t end_step;   /* step this run stops after */
} trainer;

static void trainer_free(trainer *t) {
  tagc_ckpt_saver_destroy(t->saver);
  free(t->ranges);
  tagc_engine_free(t->engine);
  tagc_comm_destroy(t->comm);
  tagc_store_free(t->store);
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

/* Connects to the other ranks through the rendezvous directory (world size > 1). */
static tagc_status connect_ranks(trainer *t) {
  const tagc_train_config *cfg = t->cfg;
  if (t->world == 1)
    return TAGC_OK;
  if (!cfg->rendezvous || !*cfg->rendezvous)
    return tagc_errorf(TAGC_EINVAL, "--world %d needs --rendezvous DIR", t->world);
  TAGC_CHECK(tagc_store_file_new(cfg->rendezvous, &t->store));
  tagc_comm_config cc;
  tagc_comm_config_init(&cc);
  cc.backend = TAGC_COMM_GLOO;
  cc.rank = t->rank;
  cc.world_size = t->world;
  cc.store = t->store;
  cc.prefix = "static";
  cc.timeout_s = cfg->op_timeout;
  cc.host = cfg->host;
  return tagc_comm_create(&cc, &t->comm);
}

/* ---------- checkpoints ---------- */

static json_t *model_json(const trainer *t) {
  const tagc_model_config *m = &t->layout.cfg;
  return json_pack("{s:i, s:i, s:i, s:i, s:i}", "vocab", m->vocab, "ctx", m->ctx, "layers",
                   m->n_layer, "heads", m->n_head, "dim", m->d_model);
}

static json_t *tensors_json(const trainer *t) {
  json_t *a = json_array();
  for (int i = 0; a && i < t->layout.n_tensors; i++) {
    const tagc_tensor_info *ti = &t->layout.tensors[i];
    json_array_append_new(a, json_pack("{s:s, s:s, s:i, s:i, s:i, s:I}", "name", ti->name, "role",
                                       tagc_role_name(ti->role), "unit", ti->unit, "rows", ti->rows,
                                       "cols", ti->cols, "offset", (json_int_t)ti->offset));
  }
  return a;
}

static json_t *sampler_json(const trainer *t, int64_t step) {
  return json_pack("{s:I, s:I, s:I, s:I, s:I}", "seed", (json_int_t)t->cfg->seed, "batch",
                   (json_int_t)t->cfg->batch, "ctx", (json_int_t)t->cfg->ctx, "step",
                   (json_int_t)step, "corpus_crc32c", (json_int_t)t->corpus.crc);
}

/* Rank 0's barrier before commit: every rank's shard file is durable once it has its final
 * name (ckpt/ renames it after fsync), so waiting for the W files is the barrier, and it needs
 * no collective on the saver's thread. */
static tagc_status shard_files_barrier(void *arg, int64_t step) {
  trainer *t = arg;
  if (t->rank != 0)
    return TAGC_OK;
  double deadline = tagc_now() + 10 * t->cfg->op_timeout;
  for (int r = 0; r < t->world; r++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/step-%lld.tmp/rank-%05d.bin", t->ckpt_root, (long long)step, r);
    while (access(path, F_OK) != 0) {
      if (tagc_now() > deadline)
        return tagc_errorf(TAGC_ETIMEDOUT, "checkpoint %lld: rank %d's shard did not arrive",
                           (long long)step, r);
      tagc_sleep(0.01);
    }
  }
  return TAGC_OK;
}

static tagc_status open_saver(trainer *t) {
  if (t->cfg->ckpt_every == 0)
    return TAGC_OK;
  if (t->rank == 0 && mkdir(t->ckpt_root, 0755) != 0 && errno != EEXIST)
    return tagc_errorf(TAGC_EIO, "checkpoint root %s: %s", t->ckpt_root, strerror(errno));
  /* Leftover shards of an abandoned save would satisfy shard_files_barrier: remove them now,
   * before any rank can save (saves come after collective steps, which wait for rank 0). */
  if (t->rank == 0)
    TAGC_CHECK(tagc_ckpt_remove_partial(t->ckpt_root, NULL));
  int n = tagc_engine_n_segments(t->engine);
  t->ranges = calloc((size_t)n, sizeof *t->ranges);
  if (!t->ranges)
    return tagc_errorf(TAGC_ENOMEM, "checkpoint ranges");
  tagc_ckpt_writer_config wc = {0};
  wc.dir = t->ckpt_root;
  wc.rank = t->rank;
  wc.world_size = t->world;
  tagc_engine_ckpt_layout(t->engine, &wc.layout, t->ranges);
  wc.ranges = t->ranges;
  wc.barrier = shard_files_barrier;
  wc.barrier_arg = t;
  wc.keep_last = (int)t->cfg->ckpt_keep_last;
  wc.keep_every = (int)t->cfg->ckpt_keep_every;
  return tagc_ckpt_saver_create(&wc, &t->saver);
}

/* Starts an asynchronous save of the state after `step` completed steps. */
static tagc_status save_checkpoint(trainer *t, int64_t step) {
  float *const *views;
  TAGC_CHECK(tagc_ckpt_saver_begin(t->saver, step, &views));
  tagc_status st = tagc_engine_snapshot(t->engine, views);
  json_t *model = model_json(t), *tensors = tensors_json(t), *sampler = sampler_json(t, step);
  json_t *rng = json_pack("{s:I}", "seed", (json_int_t)t->cfg->seed);
  json_t *comp = tagc_engine_compression_state(t->engine);
  if (comp)
    json_object_set_new(comp, "policy", json_string(t->cfg->compress));
  tagc_ckpt_meta meta = {model, tensors, sampler, rng, comp};
  tagc_status fin = tagc_ckpt_saver_finish(t->saver, &meta);
  json_decref(model);
  json_decref(tensors);
  json_decref(sampler);
  json_decref(rng);
  json_decref(comp);
  return st != TAGC_OK ? st : fin;
}

/* Loads the newest valid checkpoint, if any, after checking it belongs to this job. */
static tagc_status try_resume(trainer *t) {
  if (!t->cfg->resume)
    return TAGC_OK;
  tagc_ckpt_reader *rd;
  tagc_status st = tagc_ckpt_find_latest_valid(t->ckpt_root, TAGC_CKPT_VERIFY_FULL, &rd);
  if (st == TAGC_ENOTFOUND) {
    tagc_clear_error();
    return TAGC_OK;
  }
  TAGC_CHECK(st);
  json_t *model = model_json(t), *sampler = sampler_json(t, tagc_ckpt_reader_step(rd));
  const json_t *saved_model = tagc_ckpt_reader_meta(rd, "model");
  const json_t *saved_sampler = tagc_ckpt_reader_meta(rd, "sampler");
  if (!json_equal(model, saved_model) || !json_equal(sampler, saved_sampler))
    st = tagc_errorf(TAGC_EINVAL, "checkpoint %s is of another model, batch, seed or corpus: "
                     "use another --out or --no-resume", tagc_ckpt_reader_path(rd));
  if (st == TAGC_OK)
    st = tagc_engine_load(t->engine, rd);
  if (st == TAGC_OK)
    st = tagc_engine_set_compression_state(t->engine, tagc_ckpt_reader_meta(rd, "compression"));
  if (st == TAGC_OK) {
    t->start_step = tagc_ckpt_reader_step(rd);
    if (t->rank == 0)
      LOG_INFO("train", "resuming from %s (step %lld, saved by %d workers)", tagc_ckpt_reader_path(rd),
               (long long)t->start_step, tagc_ckpt_reader_world_size(rd));
  }
  json_decref(model);
  json_decref(sampler);
  tagc_ckpt_close(rd);
  return st;
}

static tagc_status trainer_init(trainer *t, const tagc_train_config *cfg) {
  memset(t, 0, sizeof *t);
  t->cfg = cfg;
  t->rank = (int)cfg->rank;
  t->world = (int)cfg->world;
  if (t->rank >= t->world)
    return tagc_errorf(TAGC_EINVAL, "--rank %d is not below --world %d", t->rank, t->world);
  tagc_model_config mc = {256, (int)cfg->ctx, (int)cfg->layers, (int)cfg->heads, (int)cfg->dim};
  TAGC_CHECK(tagc_model_layout_init(&t->layout, &mc));
  if (cfg->micro_batch > cfg->batch)
    return tagc_errorf(TAGC_EINVAL, "--micro-batch %lld is larger than --batch %lld",
                       (long long)cfg->micro_batch, (long long)cfg->batch);
  if (cfg->batch < cfg->world)
    return tagc_errorf(TAGC_EINVAL, "--batch %lld is smaller than --world %d",
                       (long long)cfg->batch, t->world);
  tagc_engine_config ec = {0};
  TAGC_CHECK(tagc_policy_parse(cfg->compress, &ec.policy));
  t->threads = cfg->threads ? (int)cfg->threads : omp_get_num_procs();
  omp_set_num_threads(t->threads);
  openblas_set_num_threads(t->threads);
  TAGC_CHECK(tagc_corpus_load(cfg->corpus, (size_t)cfg->ctx + 1, &t->corpus));
  if (t->rank == 0)
    TAGC_CHECK(make_dir(cfg->out));
  if ((size_t)snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s", *cfg->ckpt_dir ? cfg->ckpt_dir : cfg->out) >= sizeof t->ckpt_root - 8)
    return tagc_errorf(TAGC_EINVAL, "checkpoint path too long");
  if (!*cfg->ckpt_dir)
    strcat(t->ckpt_root, "/ckpt");
  TAGC_CHECK(connect_ranks(t));
  int64_t local = (cfg->batch * (t->rank + 1)) / t->world - (cfg->batch * t->rank) / t->world;
  ec.layout = &t->layout;
  ec.comm = t->comm;
  ec.adam = (tagc_adamw_config){.lr = (float)cfg->lr,
                                .min_lr_ratio = (float)cfg->min_lr_ratio,
                                .warmup_steps = cfg->warmup,
                                .total_steps = cfg->steps,
                                .beta1 = (float)cfg->beta1,
                                .beta2 = (float)cfg->beta2,
                                .eps = (float)cfg->eps,
                                .weight_decay = (float)cfg->weight_decay,
                                .grad_clip = (float)cfg->grad_clip};
  ec.batch = cfg->batch;
  ec.micro_batch = (int)(cfg->micro_batch ? cfg->micro_batch : local);
  ec.seed = (uint64_t)cfg->seed;
  ec.op_timeout_s = cfg->op_timeout;
  ec.check_feedback = cfg->check_feedback;
  ec.gather_bf16 = !strcmp(cfg->gather, "bf16");
  ec.reshard_after_forward = cfg->reshard_after_forward;
  TAGC_CHECK(tagc_engine_new(&ec, &t->engine));
  TAGC_CHECK(try_resume(t));
  TAGC_CHECK(open_saver(t));
  if (t->rank == 0) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->out);
    t->metrics = fopen(path, t->start_step > 0 ? "a" : "w");
    if (!t->metrics)
      return tagc_errorf(TAGC_EIO, "%s: %s", path, strerror(errno));
  }
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
  format_duration(elapsed / (double)(done - t->start_step) * (double)(t->cfg->steps - done), eta,
                  sizeof eta);
  char val[32] = "";
  if (!isnan(val_loss))
    snprintf(val, sizeof val, " val %.4f", val_loss);
  printf("step %lld/%lld  loss %.4f%s  %.0f tok/s  elapsed %s  eta %s\n", (long long)done,
         (long long)t->cfg->steps, loss, val, tok_s, el, eta);
  fflush(stdout);
}

/* Gathers the final parameters: their CRC32C for the summary and, when asked, a raw dump. */
static tagc_status finish_params(trainer *t, uint32_t *crc) {
  size_t bytes = t->layout.n_params * sizeof(float);
  float *full = malloc(bytes);
  if (!full)
    return tagc_errorf(TAGC_ENOMEM, "parameter gather of %zu bytes", bytes);
  tagc_status st = tagc_engine_gather_params(t->engine, full);
  if (st == TAGC_OK)
    *crc = tagc_crc32c(0, full, bytes);
  const char *path = t->cfg->dump_params;
  if (st == TAGC_OK && t->rank == 0 && path && *path) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(full, 1, bytes, f) != bytes)
      st = tagc_errorf(TAGC_EIO, "%s: %s", path, strerror(errno));
    if (f && fclose(f) != 0 && st == TAGC_OK)
      st = tagc_errorf(TAGC_EIO, "%s: %s", path, strerror(errno));
  }
  free(full);
  return st;
}

/* Running totals for summary.json. */
typedef struct totals {
  double tokens, bytes_sent, comm_s, exposed_s, unpeeled, tagc_elements, density, rho;
  int64_t steps;
  double *step_s; /* per step, for the median */
} totals;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static tagc_status write_summary(const trainer *t, const totals *tt, double train_loss,
                                 double val_loss, double wall, uint32_t params_crc) {
  const tagc_train_config *cfg = t->cfg;
  double n = tt->steps ? (double)tt->steps : 1;
  qsort(tt->step_s, (size_t)tt->steps, sizeof(double), cmp_double);
  double median = tt->steps ? tt->step_s[tt->steps / 2] : 0;
  json_t *s = json_pack(
      "{s:I, s:f, s:f, s:f, s:f, s:i, s:s, s:s, s:i, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
      "steps", (json_int_t)t->end_step, "final_train_loss", train_loss, "final_val_loss", val_loss,
      "tokens_per_s", tt->tokens / wall, "wall_s", wall, "world_size", t->world, "compress",
      cfg->compress, "blas", openblas_get_config(), "threads", t->threads, "params",
      (json_int_t)t->layout.n_params, "seed", (json_int_t)cfg->seed, "params_crc32c",
      (json_int_t)params_crc, "bytes_sent_per_step", tt->bytes_sent / n, "comm_s_per_step",
      tt->comm_s / n, "exposed_comm_s_per_step", tt->exposed_s / n, "step_s_median", median,
      "unpeeled_fraction", tt->tagc_elements > 0 ? tt->unpeeled / tt->tagc_elements : 0.0,
      "global_density", tt->density / n, "rho", tt->rho / n);
  if (!s)
    return tagc_errorf(TAGC_ENOMEM, "summary");
  json_object_set_new(s, "steps_this_run", json_integer(tt->steps));
  json_object_set_new(s, "resumed_from", json_integer(t->start_step));
  json_object_set_new(s, "model", json_pack("{s:i, s:i, s:i, s:i, s:i}", "vocab", 256, "ctx",
                                            (int)cfg->ctx, "layers", (int)cfg->layers, "heads",
                                            (int)cfg->heads, "dim", (int)cfg->dim));
  char path[4096];
  snprintf(path, sizeof path, "%s/summary.json", cfg->out);
  tagc_status st = tagc_json_write_file(path, s);
  json_decref(s);
  return st;
}

static void write_metrics(trainer *t, int64_t step, const tagc_step_stats *ss, double val_loss,
                          double elapsed) {
  double tok = (double)t->cfg->batch * (double)t->cfg->ctx;
  json_t *m = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:I}",
                        "step", (json_int_t)(step + 1), "loss", ss->loss, "grad_norm",
                        ss->grad_norm, "lr", ss->lr, "step_s", ss->step_s, "tokens_per_s",
                        tok / ss->step_s, "elapsed_s", elapsed, "bytes_sent",
                        (json_int_t)ss->bytes_sent, "comm_s", ss->comm_s, "exposed_comm_s",
                        ss->exposed_comm_s, "global_density", ss->global_density, "rho", ss->rho,
                        "unpeeled", (json_int_t)ss->unpeeled);
  if (!m)
    return;
  if (!isnan(val_loss))
    json_object_set_new(m, "val_loss", json_real(val_loss));
  if (t->cfg->check_feedback)
    json_object_set_new(m, "feedback_error", json_real(ss->feedback_error));
  json_dumpf(m, t->metrics, JSON_COMPACT);
  fputc('\n', t->metrics);
  fflush(t->metrics);
  json_decref(m);
}

static void accumulate(totals *tt, const tagc_step_stats *ss, double step_tokens) {
  tt->step_s[tt->steps++] = ss->step_s;
  tt->tokens += step_tokens;
  tt->bytes_sent += (double)ss->bytes_sent;
  tt->comm_s += ss->comm_s;
  tt->exposed_s += ss->exposed_comm_s;
  tt->unpeeled += (double)ss->unpeeled;
  tt->tagc_elements += (double)ss->tagc_elements;
  tt->density += ss->global_density;
  tt->rho += ss->rho;
}

tagc_status tagc_train_run(const tagc_train_config *cfg) {
  trainer t;
  tagc_status st;
  totals tt = {0};
  TAGC_CHECK_GOTO(trainer_init(&t, cfg), st, done);
  tt.step_s = calloc((size_t)cfg->steps, sizeof(double));
  if (!tt.step_s) {
    st = tagc_errorf(TAGC_ENOMEM, "per-step times");
    goto done;
  }
  if (t.rank == 0) {
    tagc_opts_log(&tagc_train_program, cfg);
    LOG_INFO("train", "model: %d layers, width %d, %d heads, context %d, %zu parameters; batch %lld; "
             "world %d; %d threads; BLAS %s", t.layout.cfg.n_layer, t.layout.cfg.d_model,
             t.layout.cfg.n_head, t.layout.cfg.ctx, t.layout.n_params, (long long)cfg->batch,
             t.world, t.threads, openblas_get_config());
  }
  double t0 = tagc_now(), last_print = -1e9, loss = NAN, val = NAN;
  double step_tokens = (double)cfg->batch * (double)cfg->ctx;
  if (t.start_step >= cfg->steps) {
    if (t.rank == 0)
      LOG_INFO("train", "the checkpoint is already at step %lld of %lld: nothing to train",
               (long long)t.start_step, (long long)cfg->steps);
    goto done;
  }
  int64_t end = cfg->stop_at > t.start_step && cfg->stop_at < cfg->steps ? cfg->stop_at : cfg->steps;
  t.end_step = end;
  for (int64_t step = t.start_step; step < end; step++) {
    tagc_step_stats ss;
    TAGC_CHECK_GOTO(tagc_engine_step(t.engine, &t.corpus, step, &ss), st, done);
    int last = step + 1 == end;
    if (t.saver && ((step + 1) % cfg->ckpt_every == 0 || last))
      TAGC_CHECK_GOTO(save_checkpoint(&t, step + 1), st, done);
    loss = ss.loss;
    accumulate(&tt, &ss, step_tokens);
    double step_val = NAN;
    if (last || (cfg->eval_every && (step + 1) % cfg->eval_every == 0)) {
      TAGC_CHECK_GOTO(tagc_engine_eval(t.engine, &t.corpus, cfg->eval_windows, &step_val), st, done);
      val = step_val;
    }
    if (t.rank != 0)
      continue;
    double now = tagc_now();
    write_metrics(&t, step, &ss, step_val, now - t0);
    if (step == t.start_step || last || !isnan(step_val) || now - last_print >= 1.0) {
      print_progress(&t, step, loss, step_val, tt.tokens / (now - t0), now - t0);
      last_print = now;
    }
  }
  if (end < cfg->steps && t.rank == 0)
    LOG_INFO("train", "stopped after step %lld of %lld as asked (--stop-at)", (long long)end,
             (long long)cfg->steps);
  if (t.saver)
    TAGC_CHECK_GOTO(tagc_ckpt_saver_wait(t.saver), st, done);
  double wall = tagc_now() - t0;
  uint32_t crc = 0;
  TAGC_CHECK_GOTO(finish_params(&t, &crc), st, done);
  if (t.rank == 0) {
    TAGC_CHECK_GOTO(write_summary(&t, &tt, loss, val, wall, crc), st, done);
    LOG_INFO("train", "done: step %lld, %lld steps in this run, train loss %.4f, val loss %.4f, "
             "%.0f tokens/s, %.1f s", (long long)end, (long long)tt.steps, loss, val,
             tt.tokens / wall, wall);
  }
done:
  free(tt.step_s);
  trainer_free(&t);
  return st;
}
