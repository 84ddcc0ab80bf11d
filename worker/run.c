#include "worker/run_internal.h"

#include <cblas.h> /* openblas_get_config */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/crc32c.h"
#include "common/exit_codes.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/model_io.h"
#include "worker/out_lock.h"

/* This process owns OUT: through `tagctl run`, or by locking it itself when it writes OUT's
 * metrics and summary (static rank 0; elastic workers, shared within their job). */
static tagc_status own_out(tagc_run *r) {
  const tagc_train_config *cfg = r->cfg;
  int elastic = cfg->etcd && *cfg->etcd;
  r->out_lock = tagc_out_lock_inherited(cfg->out);
  r->out_inherited = r->out_lock >= 0;
  if (r->out_lock >= 0 || (!elastic && cfg->rank != 0))
    return TAGC_OK;
  return tagc_out_lock(cfg->out, elastic ? cfg->job : NULL, &r->out_lock);
}

/* A --ckpt-dir is owned like OUT, by the same processes (rank 0 of a static run, every
 * worker of an elastic job): a second run there would remove this one's partial saves and
 * its checkpoints by retention. Workers of one `tagctl run` share it under the job's name
 * and tagctl's pid (that OUT is exclusive to one tagctl run, a job name of a local etcd is
 * not); elastic workers started by hand, under the job's name. Not when it is OUT itself. */
static tagc_status own_ckpt_dir(tagc_run *r) {
  const tagc_train_config *cfg = r->cfg;
  int elastic = cfg->etcd && *cfg->etcd;
  if (!*cfg->ckpt_dir || (!elastic && cfg->rank != 0))
    return TAGC_OK;
  TAGC_CHECK(tagc_mkdir_p(cfg->ckpt_dir));
  char a[PATH_MAX], b[PATH_MAX];
  if (realpath(cfg->ckpt_dir, a) && realpath(cfg->out, b) && !strcmp(a, b))
    return TAGC_OK; /* OUT's lock */
  char job[128]; /* what out_lock.c reads back of a holder's job */
  if (elastic && r->out_inherited)
    snprintf(job, sizeof job, "%.64s (tagctl run pid %d)", cfg->job, (int)getppid());
  else if (elastic)
    snprintf(job, sizeof job, "%s", cfg->job);
  return tagc_dir_lock(cfg->ckpt_dir, "checkpoint folder", "--ckpt-dir", elastic ? job : NULL,
                       &r->ckpt_lock);
}

/* ---------- the process-wide part ---------- */

/* --init-from: the model file's weights in this run's layout, into r->init_params. */
static tagc_status load_init(tagc_run *r) {
  const char *path = r->cfg->init_from;
  tagctl_model m;
  tagc_status st = tagctl_model_load(path, &m);
  if (st == TAGC_OK) {
    r->init_params = malloc(r->layout.n_params * sizeof(float));
    st = r->init_params ? tagctl_model_fit(&m, &r->layout, r->init_params)
                        : tagc_errorf(TAGC_ENOMEM, "--init-from: %zu floats", r->layout.n_params);
    tagctl_model_free(&m);
  }
  if (st != TAGC_OK) {
    free(r->init_params);
    r->init_params = NULL;
    char detail[512]; /* the detail lives in the buffer tagc_errorf writes */
    snprintf(detail, sizeof detail, "%s", tagc_last_error());
    /* a file that is not a model of this shape is the run's configuration */
    return tagc_errorf(st == TAGC_ENOMEM || st == TAGC_EIO ? st : TAGC_EINVAL, "--init-from %s: %s",
                       path, detail);
  }
  return TAGC_OK;
}

tagc_status tagc_run_new(const tagc_train_config *cfg, tagc_run **out) {
  tagc_run *r = calloc(1, sizeof *r);
  if (!r)
    return tagc_errorf(TAGC_ENOMEM, "run");
  tagc_status st;
  r->cfg = cfg;
  r->out_lock = -1;
  r->ckpt_lock = -1;
  r->rollback_at = -1;
  r->started_at = tagc_now();
  pthread_mutex_init(&r->comm_mu, NULL);
  tagc_model_config mc = {256, (int)cfg->ctx, (int)cfg->layers, (int)cfg->heads, (int)cfg->dim, 0};
  TAGC_CHECK_GOTO(tagc_model_layout_init(&r->layout, &mc), st, fail);
  if (cfg->micro_batch > cfg->batch) {
    st = tagc_errorf(TAGC_EINVAL, "--micro-batch %lld is larger than --batch %lld",
                     (long long)cfg->micro_batch, (long long)cfg->batch);
    goto fail;
  }
  if (cfg->exclude_straggler && !*cfg->etcd) {
    st = tagc_errorf(TAGC_EINVAL, "--exclude-straggler needs elastic mode (--etcd, or tagctl "
                     "run with 2 or more workers): a static run cannot go on without a worker");
    goto fail;
  }
  TAGC_CHECK_GOTO(tagc_policy_parse(cfg->compress, &r->policy), st, fail);
  const char *fault = cfg->fault && *cfg->fault ? cfg->fault : getenv("TAGC_FAULT");
  TAGC_CHECK_GOTO(tagc_faults_parse(fault, &r->faults), st, fail);
  if (fault && *fault) /* its ckpt: items, if any (ckpt/ reads only TAGC_FAULT by itself) */
    TAGC_CHECK_GOTO(tagc_ckpt_fault_configure(fault), st, fail);
  TAGC_CHECK_GOTO(tagc_mkdir_p(cfg->out), st, fail);
  TAGC_CHECK_GOTO(own_out(r), st, fail); /* first: a second run in OUT is refused at once */
  TAGC_CHECK_GOTO(own_ckpt_dir(r), st, fail);
  if (cfg->metrics_addr && *cfg->metrics_addr) {
    TAGC_CHECK_GOTO(tagc_metrics_http_start(cfg->metrics_addr, cfg->job, &r->http), st, fail);
    LOG_INFO("train", "serving /metrics and /healthz on port %d (--metrics-addr %s)",
             tagc_metrics_http_port(r->http), cfg->metrics_addr);
  }
  TAGC_CHECK_GOTO(tagc_device_open(cfg->device, strcmp(cfg->compute, "bf16") ? TAGC_DEVICE_FP32
                                                                          : TAGC_DEVICE_BF16,
                                   &r->device), st, fail);
  tagc_device_get_info(r->device, &r->dev_info);
  if (tagc_device_is_cuda(r->device))
    LOG_INFO("train", "device cuda:%d: %s, %.1f GiB, %s matrix products", r->dev_info.index,
             r->dev_info.name, (double)r->dev_info.total_bytes / (1 << 30), cfg->compute);
  r->threads = cfg->threads ? (int)cfg->threads : omp_get_num_procs();
  omp_set_num_threads(r->threads); /* the model runs the BLAS single-threaded inside OpenMP */
  tagc_data_spec ds = {cfg->corpus, cfg->data, cfg->val_data, cfg->data_format, (int)cfg->vocab};
  TAGC_CHECK_GOTO(tagc_data_open(&ds, (size_t)cfg->ctx + 1, &r->corpus), st, fail);
  mc.vocab = r->corpus.vocab; /* the model's vocabulary comes from the data */
  TAGC_CHECK_GOTO(tagc_model_layout_init(&r->layout, &mc), st, fail);
  const char *root = *cfg->ckpt_dir ? cfg->ckpt_dir : cfg->out;
  if (strlen(root) + 8 >= sizeof r->ckpt_root) {
    st = tagc_errorf(TAGC_EINVAL, "checkpoint path too long");
    goto fail;
  }
  snprintf(r->ckpt_root, sizeof r->ckpt_root, "%s%s", root, *cfg->ckpt_dir ? "" : "/ckpt");
  if (*cfg->init_from) /* checked at start, whether or not a checkpoint takes precedence */
    TAGC_CHECK_GOTO(load_init(r), st, fail);
  tagc_report_config rc = {cfg, &r->layout, &r->corpus, r->device, r->threads, r->http};
  tagc_report_init(&r->report, &rc);
  *out = r;
  return TAGC_OK;
fail:
  tagc_run_free(r);
  return st;
}

void tagc_run_free(tagc_run *r) {
  if (!r)
    return;
  tagc_report_free(&r->report);
  tagc_metrics_http_stop(r->http);
  tagc_corpus_free(&r->corpus);
  free(r->init_params);
  run_straggler_end(r);
  tagc_mirror_free(r->mirror); /* its staging buffer is the device's */
  tagc_device_close(r->device);
  free(r->chaos_seen);
  if (r->out_lock >= 0)
    close(r->out_lock);
  if (r->ckpt_lock >= 0)
    close(r->ckpt_lock);
  pthread_mutex_destroy(&r->comm_mu);
  free(r);
}

void tagc_run_set_hooks(tagc_run *r, const tagc_run_hooks *hooks) {
  r->hooks = *hooks;
  r->elastic = 1;
  tagc_report_set_progress(&r->report, hooks->progress, hooks->ctx);
}

void tagc_run_abort(tagc_run *r) {
  pthread_mutex_lock(&r->comm_mu);
  r->aborted = 1;
  if (r->comm)
    tagc_comm_abort(r->comm);
  pthread_mutex_unlock(&r->comm_mu);
}

void tagc_run_hold(tagc_run *r) {
  if (r->mirror && r->elastic)
    r->hold = 1;
}

void tagc_run_suspend(tagc_run *r) { r->suspend = 1; }

void run_newest_valid(const tagc_run *r, char *buf, size_t cap) {
  tagc_ckpt_reader *rd;
  tagc_error_saved saved;
  tagc_error_save(&saved);
  if (tagc_ckpt_find_latest_valid(r->ckpt_root, TAGC_CKPT_VERIFY_QUICK, &rd) == TAGC_OK) {
    snprintf(buf, cap, "step %lld (%s)", (long long)tagc_ckpt_reader_step(rd),
             tagc_ckpt_reader_path(rd));
    tagc_ckpt_close(rd);
  } else {
    snprintf(buf, cap, "none valid");
  }
  tagc_error_restore(&saved);
}

void run_write_cut_short(tagc_run *r, int64_t step, const char *end) {
  if (r->rank != 0 || r->gen == 0 || tagc_report_steps_run(&r->report) == 0)
    return;
  tagc_error_saved saved;
  tagc_error_save(&saved);
  json_t *model = run_model_json(r);
  tagc_report_final f = {step, r->start_step, end, 0, &r->rec.n, NULL, model};
  if (tagc_report_finish(&r->report, &f) != TAGC_OK)
    LOG_ERROR("train", "summary.json not written: %s", tagc_last_error());
  json_decref(model);
  tagc_error_restore(&saved);
}

void tagc_run_give_up(tagc_run *r, int64_t step, char *ckpt, size_t cap) {
  run_newest_valid(r, ckpt, cap);
  run_write_cut_short(r, step, "gave up");
}

void tagc_run_supersede(tagc_run *r, int64_t gen) {
  pthread_mutex_lock(&r->comm_mu);
  if (gen > r->gen) {
    r->aborted = 1;
    if (r->comm)
      tagc_comm_abort(r->comm);
  }
  pthread_mutex_unlock(&r->comm_mu);
}

/* ---------- one generation: set-up and tear-down ---------- */

/* A generation newer than gen was announced (tagc_run_hooks.superseded). */
static int superseded(const tagc_run *t, int64_t gen) {
  return t->hooks.superseded && t->hooks.superseded(t->hooks.ctx, gen);
}

/* The communicator's bootstrap gives up once this generation is aborted or superseded
 * (tagc_comm_config.cancelled): a peer it waits for may be gone for good. */
static int gen_cancelled(void *arg) {
  tagc_run *t = arg;
  pthread_mutex_lock(&t->comm_mu);
  int stop = t->aborted;
  int64_t gen = t->gen;
  pthread_mutex_unlock(&t->comm_mu);
  return stop || superseded(t, gen);
}

static tagc_status connect(tagc_run *t, const tagc_gen_spec *g) {
  if (g->world == 1)
    return TAGC_OK;
  if (t->faults.boot_crash_gen == g->gen) {
    LOG_WARN("train", "fault injected: crash while bootstrapping generation %lld", (long long)g->gen);
    raise(SIGKILL);
  }
  tagc_comm_config cc;
  tagc_comm_config_init(&cc);
  cc.backend = tagc_device_is_cuda(t->device) ? TAGC_COMM_NCCL : TAGC_COMM_GLOO;
  cc.device = t->dev_info.index;
  cc.rank = g->rank;
  cc.world_size = g->world;
  cc.store = g->store;
  cc.prefix = "comm";
  cc.timeout_s = t->cfg->op_timeout;
  cc.host = t->cfg->host;
  cc.cancelled = gen_cancelled;
  cc.cancel_arg = t;
  tagc_comm *comm;
  TAGC_CHECK(tagc_comm_create_ex(&cc, &comm, &t->boot_peer));
  pthread_mutex_lock(&t->comm_mu);
  t->comm = comm;
  if (t->aborted) /* a newer generation was announced while we connected */
    tagc_comm_abort(comm);
  pthread_mutex_unlock(&t->comm_mu);
  return TAGC_OK;
}

/* This worker's failure domain: --failure-domain, $TAGC_FAILURE_DOMAIN, $NODE_NAME (the
 * Kubernetes downward API), else the host name. */
static void failure_domain(const tagc_train_config *cfg, char *out, size_t cap) {
  const char *d = cfg->failure_domain && *cfg->failure_domain ? cfg->failure_domain
                  : getenv("TAGC_FAILURE_DOMAIN") && *getenv("TAGC_FAILURE_DOMAIN")
                      ? getenv("TAGC_FAILURE_DOMAIN")
                      : getenv("NODE_NAME");
  if (d && *d)
    snprintf(out, cap, "%s", d);
  else if (gethostname(out, cap) != 0)
    snprintf(out, cap, "unknown");
  out[cap - 1] = '\0';
}

/* Collective: where this generation's in-memory copies go (rank + t->mirror_shift[c]), from
 * every rank's failure domain (one all-gather of 64 bytes each). */
static tagc_status place_copies(tagc_run *t) {
  enum { CAP = 64 };
  char mine[CAP] = {0};
  failure_domain(t->cfg, mine, CAP);
  char *all = calloc((size_t)t->world, CAP);
  const char **names = calloc((size_t)t->world, sizeof *names);
  tagc_status st = all && names ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "failure domains");
  if (st == TAGC_OK)
    st = tagc_device_allgather_host(t->device, t->comm, mine, all, CAP, NULL, t->cfg->op_timeout);
  if (st == TAGC_OK) {
    for (int r = 0; r < t->world; r++) {
      all[(size_t)r * CAP + CAP - 1] = '\0';
      names[r] = all + (size_t)r * CAP;
    }
    t->mirror_copies = tagc_mirror_shifts(names, t->world, (int)t->cfg->mirror_copies,
                                          t->mirror_shift);
    for (int c = 0; c < t->mirror_copies && t->rank == 0; c++) {
      int apart = 0;
      for (int r = 0; r < t->world; r++)
        apart += strcmp(names[r], names[(r + t->mirror_shift[c]) % t->world]) != 0;
      if (t->mirror_shift[c] != c + 1 || (apart < t->world && apart > 0))
        LOG_INFO("train", "in-memory copies go to rank + %d: %d of %d ranks' copies are outside "
                 "their failure domain", t->mirror_shift[c], apart, t->world);
    }
    if (t->rank == 0 && t->cfg->mirror_copies > t->mirror_copies)
      LOG_WARN("train", "--mirror-copies %lld at world size %d: %d copies of each state",
               (long long)t->cfg->mirror_copies, t->world, t->mirror_copies);
  }
  free(all);
  free(names);
  return st;
}

static tagc_status gen_begin(tagc_run *t, const tagc_gen_spec *g) {
  const tagc_train_config *cfg = t->cfg;
  if (g->rank < 0 || g->rank >= g->world)
    return tagc_errorf(TAGC_EINVAL, "rank %d is not below world size %d", g->rank, g->world);
  if (cfg->batch < g->world)
    return tagc_errorf(TAGC_EINVAL, "--batch %lld is smaller than the world size %d",
                       (long long)cfg->batch, g->world);
  pthread_mutex_lock(&t->comm_mu);
  t->gen = g->gen;
  t->aborted = superseded(t, g->gen);
  pthread_mutex_unlock(&t->comm_mu);
  t->rank = g->rank;
  t->world = g->world;
  tagc_report_generation(&t->report, g->gen, g->rank, g->world);
  t->start_step = 0;
  t->boot_peer = -1;
  t->suspect = -1;
  t->on_failure = g->on_failure;
  t->failure_arg = g->failure_arg;
  t->members = g->members;
  TAGC_CHECK(run_straggler_begin(t));
  TAGC_CHECK(connect(t, g));
  int64_t local = (cfg->batch * (g->rank + 1)) / g->world - (cfg->batch * g->rank) / g->world;
  int micro = g->micro_batch ? g->micro_batch : (int)cfg->micro_batch;
  tagc_engine_config ec = {0};
  ec.layout = &t->layout;
  ec.comm = t->comm;
  ec.device = t->device;
  ec.policy = t->policy;
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
  ec.micro_batch = micro > 0 && micro < local ? micro : (int)local;
  ec.seed = (uint64_t)cfg->seed;
  if (*cfg->init_from && !t->init_params) /* a later generation: read again */
    TAGC_CHECK(load_init(t));
  ec.init_params = t->init_params;
  ec.op_timeout_s = cfg->op_timeout;
  ec.check_feedback = cfg->check_feedback;
  TAGC_CHECK(tagc_policy_gather(cfg->gather, &t->policy, &ec.gather, &ec.gather_auto));
  ec.link_rate = cfg->link_rate;
  ec.reshard_after_forward = strcmp(cfg->reshard_after_forward, "false") != 0;
  ec.reshard_auto = strcmp(cfg->reshard_after_forward, "auto") == 0;
  ec.max_gather_bytes = cfg->max_gather_mem * 1048576.0;
  ec.compress_warmup = cfg->compress_warmup >= 0 ? cfg->compress_warmup /* -1: the rule below */
                                                : tagc_compress_warmup_auto(cfg->warmup, cfg->steps);
  ec.op_delay_s = t->faults.slow_s;
  tagc_status made = tagc_engine_new(&ec, &t->engine);
  free(t->init_params); /* the engine holds its shard; a checkpoint may yet replace it */
  t->init_params = NULL;
  TAGC_CHECK(made);
  /* -1: auto in elastic mode, off in a static run (no recovery); -2: auto in either (benches) */
  t->mirror_auto = cfg->mirror_every == -2 || (cfg->mirror_every == -1 && t->elastic);
  t->mirror_k = cfg->mirror_every >= 0 ? cfg->mirror_every : t->mirror_auto ? 1 : 0;
  t->mirror_pushes = 0;
  t->mirror_cost_s = t->mirror_step_s = 0;
  t->mirror_steps = 0;
  if (t->mirror_k > 0 && !t->mirror)
    TAGC_CHECK(tagc_mirror_new(&t->mirror));
  t->mirror_shift[0] = 1;
  t->mirror_copies = 1;
  if (t->mirror && t->world > 1)
    TAGC_CHECK(place_copies(t));
  int rebuilt = 0;
  if (t->mirror)
    TAGC_CHECK(run_rebuild(t, g, &rebuilt));
  if (!rebuilt)
    TAGC_CHECK(run_resume(t, g));
  if (*cfg->init_from && !rebuilt && t->start_step == 0 && t->rank == 0)
    LOG_INFO("train", "starting from the weights of --init-from %s", cfg->init_from);
  TAGC_CHECK(run_open_saver(t));
  return tagc_report_open_metrics(&t->report, t->start_step);
}

static void gen_end(tagc_run *t) {
  if (t->saver) { /* the failed saves in a row go on counting in the next generation */
    (void)tagc_ckpt_saver_wait(t->saver);
    t->ckpt_streak = run_ckpt_streak(t);
  }
  tagc_ckpt_saver_destroy(t->saver); /* finishes a pending save first */
  t->saver = NULL;
  free(t->ranges);
  t->ranges = NULL;
  tagc_engine_free(t->engine);
  t->engine = NULL;
  run_straggler_end(t);
  t->members = NULL;
  pthread_mutex_lock(&t->comm_mu);
  tagc_comm *comm = t->comm;
  t->comm = NULL;
  t->aborted = 0;
  pthread_mutex_unlock(&t->comm_mu);
  tagc_comm_destroy(comm);
  tagc_report_end_generation(&t->report);
}

/* ---------- faults and failures ---------- */

/* Elastic mode: arms a new chaos spec (tagc_run_hooks.chaos; once per distinct value, compared
 * whole), polled once a second. A fault whose step has already passed fires at the next step.
 * A value the hook refuses (too long) is warned about once. */
static void poll_chaos(tagc_run *t, int64_t step) {
  double now = tagc_now();
  if (!t->hooks.chaos || now - t->last_chaos < 1.0)
    return;
  t->last_chaos = now;
  char *spec = NULL;
  tagc_status st = t->hooks.chaos(t->hooks.ctx, &spec);
  if (!spec || (st != TAGC_OK && st != TAGC_EINVAL) ||
      (t->chaos_seen && !strcmp(spec, t->chaos_seen))) {
    free(spec);
    return;
  }
  free(t->chaos_seen);
  t->chaos_seen = spec; /* owned from here */
  if (st != TAGC_OK) {
    LOG_WARN("train", "chaos spec ignored: %s", tagc_last_error());
    return;
  }
  tagc_faults f;
  if (tagc_faults_parse(spec, &f) == TAGC_OK) {
    LOG_WARN("train", "chaos armed: %s", spec);
    for (int k = 0; k < TAGC_FAULT_KINDS; k++)
      if (f.at[k] >= 0 && f.at[k] < step)
        f.at[k] = step;
    for (int i = 0; i < f.n_nan; i++)
      if (!f.nan[i].repeat && f.nan[i].from < step)
        f.nan[i].from = f.nan[i].to = step;
    tagc_faults_merge(&t->faults, &f);
    tagc_engine_set_op_delay(t->engine, t->faults.slow_s);
    if (strstr(spec, "ckpt:") && tagc_ckpt_fault_configure(spec) != TAGC_OK) /* next save */
      LOG_WARN("train", "chaos ckpt fault ignored: %s", tagc_last_error());
  } else {
    LOG_WARN("train", "chaos spec ignored: %s", tagc_last_error());
  }
}

/* Fires the fault armed for this step, if any. Returns a failure status for faults that the
 * worker survives (oom, hang, drop), with its cause in t->fault_cause; TAGC_OK otherwise. */
static tagc_status fire_fault(tagc_run *t, int64_t step) {
  int k = tagc_faults_take(&t->faults, step);
  if (k < 0)
    return TAGC_OK;
  LOG_WARN("train", "fault injected at step %lld: %s", (long long)step, tagc_fault_name(k));
  switch ((tagc_fault_kind)k) {
  case TAGC_FAULT_CRASH:
    raise(SIGKILL);
    break;
  case TAGC_FAULT_EXIT:
    /* a process that died (restarted like a crash), once its shard of a save in flight is
       durable: a fixed point whose checkpoint survives (tests compare with it) */
    if (t->saver)
      (void)tagc_ckpt_saver_wait(t->saver);
    _exit(TAGC_EXIT_FAILURE);
  case TAGC_FAULT_OOM:
    t->fault_cause = TAGC_CAUSE_OOM;
    return tagc_errorf(TAGC_ENOMEM, "injected allocation failure at step %lld", (long long)step);
  case TAGC_FAULT_HANG: { /* stop making progress until this generation is given up */
    double until = tagc_now() + 3 * t->cfg->op_timeout;
    while (!t->aborted && tagc_now() < until)
      tagc_sleep(0.05);
  }
    t->fault_cause = TAGC_CAUSE_HANG;
    return tagc_errorf(TAGC_EABORTED, "injected hang at step %lld", (long long)step);
  case TAGC_FAULT_DROP: /* the connections close once it is reported (fail_generation) */
    t->fault_cause = TAGC_CAUSE_INJECTED;
    return tagc_errorf(TAGC_EPEER, "injected connection drop at step %lld", (long long)step);
  case TAGC_FAULT_KINDS:
    break;
  }
  return TAGC_OK;
}

const char *tagc_gen_cause_name(tagc_gen_cause c) {
  switch (c) {
  case TAGC_CAUSE_COMM: return "comm";
  case TAGC_CAUSE_TIMEOUT: return "timeout";
  case TAGC_CAUSE_OOM: return "oom";
  case TAGC_CAUSE_HANG: return "hang";
  case TAGC_CAUSE_INJECTED: return "injected";
  }
  return "comm";
}

tagc_gen_outcome tagc_run_classify(tagc_status st) {
  tagc_gen_outcome o = {TAGC_VERDICT_FAILED, TAGC_CAUSE_COMM};
  switch (st) {
  case TAGC_OK: o.verdict = TAGC_VERDICT_GOES_ON; break;
  case TAGC_ETIMEDOUT: o.cause = TAGC_CAUSE_TIMEOUT; break;
  case TAGC_ENOMEM: o.cause = TAGC_CAUSE_OOM; break;
  case TAGC_EPEER:
  case TAGC_EABORTED:
  case TAGC_ECONFLICT: break;
  default: o.verdict = TAGC_VERDICT_FATAL; break;
  }
  return o;
}

/* Ends the generation (res->step steps done) as failed or superseded, with recovery
 * accounting. */
static void fail_generation(tagc_run *t, tagc_status st, tagc_gen_cause cause,
                            tagc_gen_result *res) {
  int gone = superseded(t, t->gen);
  if (!gone && t->hooks.superseded_now) {
    /* A peer leaving (or failing) breaks our connections a few milliseconds before our watch
     * delivers the new generation: ask etcd itself before calling this a failure. */
    tagc_error_saved why;
    tagc_error_save(&why);
    gone = t->hooks.superseded_now(t->hooks.ctx, t->gen);
    tagc_error_restore(&why);
  }
  int64_t step = res->step;
  res->end = gone ? TAGC_GEN_SUPERSEDED : TAGC_GEN_FAILED;
  res->status = st;
  res->cause = cause;
  pthread_mutex_lock(&t->comm_mu);
  res->suspected_rank = t->suspect >= 0 ? t->suspect
                       : t->comm      ? tagc_comm_failed_peer(t->comm)
                                      : t->boot_peer;
  res->n_broken = t->comm ? tagc_comm_broken_peers(t->comm, res->broken, TAGC_GEN_BROKEN_MAX) : 0;
  pthread_mutex_unlock(&t->comm_mu);
  snprintf(res->detail, sizeof res->detail, "%s", tagc_last_error());
  const char *kind = tagc_gen_cause_name(cause);
  if (!t->rec.n.recovering) {
    t->rec.n.failures += !gone; /* a new plan (a member left or joined) is no failure */
    t->rec.n.recovering = 1;
    /* the pause began with the last step that completed, not when the failure was noticed
       (a hung or stopped process notices late, a peer's timeout later still) */
    t->rec.pending_since = t->rec.last_step_at > 0 ? t->rec.last_step_at : tagc_now();
    t->rec.failed_at_step = step;
    snprintf(t->rec.pending_kind, sizeof t->rec.pending_kind, "%s", gone ? "membership" : kind);
  }
  LOG_WARN("train", "generation %lld ended at step %lld (%s): %s", (long long)t->gen,
           (long long)step, gone ? "superseded" : kind, res->detail);
  if (!gone && t->on_failure) { /* now, not after the tear-down */
    t->on_failure(t->failure_arg, res);
    t->on_failure = NULL;
  }
  /* Reported: peers still waiting on this rank fail now, not at its tear-down. Only after the
     report, so that the leader never sees their accusations without it (an oom or a drop
     would otherwise look like a member that went silent). */
  tagc_run_abort(t);
}

/* The one place a generation's status is judged (tagc_run_classify): a failure a new
 * generation may fix ends the generation now (fail_generation) and gives TAGC_OK; TAGC_OK and
 * what no new generation can fix pass through. */
static tagc_status judge(tagc_run *t, tagc_status st, tagc_gen_result *res) {
  tagc_gen_outcome o = tagc_run_classify(st);
  if (o.verdict != TAGC_VERDICT_FAILED)
    return st;
  fail_generation(t, st, t->fault_cause >= 0 ? (tagc_gen_cause)t->fault_cause : o.cause, res);
  return TAGC_OK;
}

/* Whether fail_generation ended the generation. */
static int gen_ended(const tagc_gen_result *res) {
  return res->end == TAGC_GEN_FAILED || res->end == TAGC_GEN_SUPERSEDED;
}

/* A completed step: the longest pause so far and, after a failure, the recovery is done. */
static void note_recovery(tagc_run *t, int64_t step) {
  recovery *rec = &t->rec;
  double now = tagc_now();
  if (rec->last_step_at > 0 && now - rec->last_step_at > rec->n.max_pause_s)
    rec->n.max_pause_s = now - rec->last_step_at;
  rec->last_step_at = now;
  if (rec->regaining && step + 1 >= rec->regain_step) {
    rec->regaining = 0;
    rec->n.last_regain_s = now - rec->regain_since;
    if (rec->n.last_regain_s > rec->n.max_regain_s)
      rec->n.max_regain_s = rec->n.last_regain_s;
  }
  if (!rec->n.recovering)
    return;
  double s = now - rec->pending_since;
  int64_t lost = rec->failed_at_step - t->start_step;
  rec->n.recoveries++;
  rec->n.steps_lost += lost > 0 ? lost : 0;
  rec->n.last_recovery_s = s;
  if (s > rec->n.max_recovery_s)
    rec->n.max_recovery_s = s;
  rec->n.recovering = 0;
  rec->regaining = 1; /* done at once when nothing was lost */
  rec->regain_since = rec->pending_since;
  rec->regain_step = rec->failed_at_step;
  if (step + 1 >= rec->regain_step) {
    rec->regaining = 0;
    rec->n.last_regain_s = s;
    if (s > rec->n.max_regain_s)
      rec->n.max_regain_s = s;
  }
  if (t->rank == 0)
    LOG_WARN("train", "recovered from %s at step %lld in %.2f s with %d workers, %lld steps recomputed",
             rec->pending_kind, (long long)(step + 1), s, t->world, (long long)(lost > 0 ? lost : 0));
}

/* --metrics-addr: the served sample, after a step (ss) or at a generation's start or end. */
static void publish_sample(tagc_run *t, int64_t steps_done, const tagc_step_stats *ss) {
  tagc_report_sample(&t->report, steps_done, ss, &t->rec.n, t->comm, t->saver);
}

/* ---------- the training loop of one generation ---------- */

/* Gathers the final parameters (collective): their CRC32C and, when asked, a raw dump. */
static tagc_status finish_params(tagc_run *t, uint32_t *crc) {
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

/* Collective: the recovery figures of summary.json are the worst over the ranks (a process
 * that was stopped, or that failed and came back, saw the longest pause): *job gets this
 * rank's counts with max_recovery_s and max_pause_s the maxima over the generation. */
static tagc_status gather_recovery(tagc_run *t, tagc_recovery_counts *job) {
  *job = t->rec.n;
  if (t->world == 1 || !t->comm)
    return TAGC_OK;
  double mine[2] = {t->rec.n.max_recovery_s, t->rec.n.max_pause_s};
  double *all = calloc((size_t)t->world * 2, sizeof *all);
  if (!all)
    return tagc_errorf(TAGC_ENOMEM, "recovery figures of %d ranks", t->world);
  tagc_status st = tagc_device_allgather_host(t->device, t->comm, mine, all, sizeof mine, NULL,
                                              t->cfg->op_timeout);
  for (int r = 0; st == TAGC_OK && r < t->world; r++) {
    if (all[2 * r] > job->max_recovery_s)
      job->max_recovery_s = all[2 * r];
    if (all[2 * r + 1] > job->max_pause_s)
      job->max_pause_s = all[2 * r + 1];
  }
  free(all);
  return st;
}

/* Rank 0: summary.json and the final log line (worker/report.h). */
static tagc_status write_summary(tagc_run *t, int64_t step, const char *end, uint32_t crc,
                                 const tagc_recovery_counts *job) {
  tagc_ckpt_saver_stats cs;
  if (t->saver)
    tagc_ckpt_saver_stats_get(t->saver, &cs);
  json_t *model = run_model_json(t);
  tagc_report_final f = {step, t->start_step, end, crc, job, t->saver ? &cs : NULL, model};
  tagc_status st = tagc_report_finish(&t->report, &f);
  json_decref(model);
  return st;
}

/* What the end of the run gathered, for its records (write_end). */
typedef struct final_state {
  tagc_status saved;  /* the final checkpoint's save */
  char unsaved[512];  /* why it was not saved, when it was not */
  uint32_t crc;       /* of the final parameters */
  tagc_recovery_counts job;
} final_state;

/* A final save that failed because a peer's shard never came (the data path: a timeout, an
 * abort, a broken connection) fails the generation; one that failed on this rank (the disk is
 * full, memory) leaves the result unsaved. */
static int save_lost_to_peer(tagc_status saved) {
  tagc_gen_outcome o = tagc_run_classify(saved);
  return o.verdict == TAGC_VERDICT_FAILED && o.cause != TAGC_CAUSE_OOM;
}

/* The end of the run in this generation (res->end and res->step set): waits for the last
 * save and gathers the final parameters (their CRC identifies the result) and the recovery
 * figures; collective. A peer lost meanwhile is the status (its checkpoint holds the result;
 * the next generation redoes the steps since the last committed checkpoint). */
static tagc_status finish_job(tagc_run *t, int64_t step, final_state *fin) {
  fin->saved = t->saver ? tagc_ckpt_saver_wait(t->saver) : TAGC_OK;
  fin->unsaved[0] = '\0';
  if (save_lost_to_peer(fin->saved))
    return fin->saved;
  if (fin->saved != TAGC_OK) { /* e.g. the disk is full: the result is still gathered, summarised */
    snprintf(fin->unsaved, sizeof fin->unsaved, "%s", tagc_last_error());
    LOG_ERROR("train", "the final checkpoint (step %lld) was not saved: %s", (long long)step,
              fin->unsaved);
  }
  TAGC_CHECK(finish_params(t, &fin->crc));
  return gather_recovery(t, &fin->job);
}

/* Rank 0: summary.json and, when the job is finished, the final progress record. A final
 * checkpoint that was not saved makes the run fail (its result is not durable). */
static tagc_status write_end(tagc_run *t, const tagc_gen_result *res, const final_state *fin) {
  if (t->rank == 0)
    TAGC_CHECK(write_summary(t, res->step,
                             res->end == TAGC_GEN_FINISHED ? "finished"
                             : res->suspended              ? "suspended"
                                                           : "stopped",
                             fin->crc, &fin->job));
  if (t->rank == 0 && res->end == TAGC_GEN_FINISHED)
    tagc_report_progress(&t->report, res->step - 1, &t->last_ss, 1);
  if (fin->saved != TAGC_OK)
    return tagc_errorf(fin->saved, "the final checkpoint (step %lld) was not saved: %s",
                       (long long)res->step, fin->unsaved);
  return TAGC_OK;
}

/* A copy is due after `done` steps: every mirror_k steps (counted from the generation's start
 * under auto, whose period changes). */
static int mirror_due(const tagc_run *t, int64_t done) {
  if (t->mirror_k <= 0)
    return 0;
  if (!t->mirror_auto)
    return done % t->mirror_k == 0;
  return t->mirror_pushes == 0 || done - t->mirror_last >= t->mirror_k;
}

/* --mirror-every -1: after the 2nd, 8th and then every 32nd copy of a generation, the period
 * that keeps the copies within --mirror-budget of the step time, from the slowest rank's
 * measured copy and step seconds (one all-gather: every rank gets the same period). */
static tagc_status mirror_choose_period(tagc_run *t, int64_t step) {
  int64_t n = t->mirror_pushes;
  if (n != 2 && n != 8 && n % 32 != 0)
    return TAGC_OK;
  double mine[2] = {t->mirror_cost_s / (double)n,
                    t->mirror_steps ? t->mirror_step_s / (double)t->mirror_steps : 0};
  double worst[2] = {mine[0], mine[1]};
  if (t->world > 1) {
    double *all = calloc((size_t)t->world * 2, sizeof *all);
    if (!all)
      return tagc_errorf(TAGC_ENOMEM, "copy costs of %d ranks", t->world);
    tagc_status st = tagc_device_allgather_host(t->device, t->comm, mine, all, sizeof mine, NULL,
                                                t->cfg->op_timeout);
    for (int r = 0; st == TAGC_OK && r < t->world; r++)
      for (int k = 0; k < 2; k++)
        worst[k] = all[2 * r + k] > worst[k] ? all[2 * r + k] : worst[k];
    free(all);
    TAGC_CHECK(st);
  }
  int64_t k = tagc_mirror_period(worst[0], worst[1], t->cfg->mirror_budget);
  if (k != t->mirror_k && t->rank == 0)
    LOG_INFO("train", "in-memory copies every %lld steps from step %lld (a copy takes %.3f s, a "
             "step %.3f s; budget %.0f %%): up to %lld steps at risk per failure", (long long)k,
             (long long)step, worst[0], worst[1], 100 * t->cfg->mirror_budget, (long long)(k - 1));
  t->mirror_k = k;
  return TAGC_OK;
}

/* The training loop: res->step follows the steps completed (a failure's step), res->end is
 * set once the loop is done. Returns the first failure, fired faults included. */
static tagc_status train(tagc_run *t, tagc_gen_result *res) {
  const tagc_train_config *cfg = t->cfg;
  int64_t end = cfg->stop_at > t->start_step && cfg->stop_at < cfg->steps ? cfg->stop_at : cfg->steps;
  int64_t step = t->start_step;
  publish_sample(t, step, NULL);
  for (; step < end; step++) {
    tagc_step_stats ss;
    res->step = step;
    poll_chaos(t, step);
    tagc_status st = fire_fault(t, step);
    if (st == TAGC_OK && superseded(t, t->gen))
      st = tagc_errorf(TAGC_EABORTED, "generation %lld was superseded", (long long)t->gen);
    if (st == TAGC_OK && tagc_faults_nan(&t->faults, step)) {
      LOG_WARN("train", "fault injected at step %lld: nan", (long long)step);
      tagc_engine_inject_nan(t->engine, step);
    }
    if (cfg->ckpt_every_s > 0) /* --ckpt-every-s: every rank learns if any rank's time is up */
      tagc_engine_request_save(t->engine, tagc_now() - (t->save_started > 0 ? t->save_started
                                                        : t->started_at) >= cfg->ckpt_every_s);
    if (t->mirror) /* leaving (tagc_run_hold): every rank copies after this step */
      tagc_engine_request_copy(t->engine, t->hold);
    tagc_engine_request_stop(t->engine, t->suspend); /* the whole job leaves: all stop alike */
    if (st == TAGC_OK)
      st = tagc_engine_step(t->engine, &t->corpus, step, &ss);
    TAGC_CHECK(st);
    res->step = step + 1;
    note_recovery(t, step);
    run_straggler_step(t, step, &ss); /* timing only: nothing here feeds the math */
    /* a non-finite step was skipped by every rank alike (engine/engine.h); too many in a row
       roll back to the newest valid checkpoint */
    t->skip_streak = ss.nonfinite ? t->skip_streak + 1 : 0;
    t->rec.n.nonfinite_skips += ss.nonfinite;
    int rollback = t->skip_streak >= cfg->max_nonfinite_skips;
    /* suspended (every rank learnt it from this step's scalars): this step is the last one
       of the job for now, saved like the final one; a rollback first goes back, and the
       stop comes with the next step */
    int suspend_now = ss.stop_due && !rollback && step + 1 < end;
    int last = step + 1 == end || suspend_now;
    /* the evaluation (a collective that changes no state) comes before the save and the copy,
       so that once this step's copy is with the other ranks nothing collective stands between
       it and its metrics row: a rank lost after the copy leaves the step rebuilt from memory
       with its row written, not a rebuilt step without a row */
    double val = NAN;
    if (st == TAGC_OK && !rollback &&
        (step + 1 == end || (cfg->eval_every && (step + 1) % cfg->eval_every == 0))) {
      st = tagc_engine_eval(t->engine, &t->corpus, cfg->eval_windows, &val);
      if (st == TAGC_OK)
        tagc_report_val_loss(&t->report, val);
    }
    TAGC_CHECK(st);
    /* no checkpoint on a skipped step (but the final one): the newest valid checkpoint is
       then one from before the non-finite steps, which a rollback goes back to */
    if (t->saver && !rollback && (!ss.nonfinite || last) &&
        ((cfg->ckpt_every && (step + 1) % cfg->ckpt_every == 0) || ss.save_due || last))
      st = run_save_checkpoint(t, step + 1);
    /* the in-memory copy: after the save, so that it holds what the checkpoint holds */
    t->mirror_step_s += ss.step_s;
    t->mirror_steps++;
    int copied = 0;
    if (st == TAGC_OK && t->mirror && t->mirror_k > 0 && !rollback &&
        (mirror_due(t, step + 1) || ss.copy_due)) {
      double m0 = tagc_now();
      st = tagc_engine_mirror_push(t->engine, t->mirror, t->gen, step + 1, t->mirror_shift,
                                   t->mirror_copies);
      ss.mirror_s = tagc_now() - m0;
      ss.step_s += ss.mirror_s;
      ss.mirror_bytes = t->world > 1 ? tagc_mirror_image_bytes(t->mirror) * (size_t)t->mirror_copies : 0;
      t->mirror_last = step + 1;
      t->mirror_pushes++;
      t->mirror_cost_s += ss.mirror_s;
      copied = st == TAGC_OK;
    }
    tagc_report_step(&t->report, &ss);
    publish_sample(t, step + 1, &ss);
    TAGC_CHECK(st);
    t->last_ss = ss;
    t->last_ss.compute_ranks = NULL; /* the engine's, valid for this step only */
    tagc_report_progress(&t->report, step, &ss, 0);
    if (t->rank == 0)
      tagc_report_metrics_line(&t->report, step, &ss, val, step == t->start_step || last);
    if (copied && t->mirror_auto) /* collective: after the row (see the evaluation above) */
      TAGC_CHECK(mirror_choose_period(t, step + 1));
    /* leaving (tagc_run_hold): once this step's copy is with the other ranks (the request
       above made every rank copy it, whatever the period), wait here, at a step boundary,
       until the generation without this worker supersedes this one (or the leave gives up
       and aborts it), so that the peers rebuild this very step */
    while (t->hold && copied && !t->aborted && !t->suspend && !superseded(t, t->gen) &&
           step + 1 < end)
      tagc_sleep(0.01);
    if (suspend_now) {
      res->suspended = 1;
      step++;
      break;
    }
    if (rollback) {
      int64_t to = 0;
      TAGC_CHECK(run_rollback(t, step, &to));
      t->rec.n.rollbacks++;
      t->skip_streak = 0;
      publish_sample(t, to, NULL);
      step = to - 1; /* the loop goes on at step `to` */
    }
  }
  res->step = step;
  int final = end == cfg->steps && !res->suspended;
  res->end = final ? TAGC_GEN_FINISHED : TAGC_GEN_STOPPED;
  /* a fault armed for the final step count fires here: after the last step and the final
     save (this rank's shard is durable; rank 0: committed), before the gather and summary */
  if (final && t->faults.next == step && t->saver)
    (void)tagc_ckpt_saver_wait(t->saver); /* its status is finish_job's business */
  return final ? fire_fault(t, step) : TAGC_OK;
}

/* Rank 0 of a first generation: the configuration and the model, once per process. */
static void log_start(const tagc_run *r) {
  if (r->rank != 0 || r->gen > 1 || r->rec.n.failures != 0)
    return;
  tagc_opts_log(&tagc_train_program, r->cfg);
  LOG_INFO("train", "model: %d layers, width %d, %d heads, context %d, %zu parameters; batch "
           "%lld; world %d; %d threads; BLAS %s", r->layout.cfg.n_layer, r->layout.cfg.d_model,
           r->layout.cfg.n_head, r->layout.cfg.ctx, r->layout.n_params, (long long)r->cfg->batch,
           r->world, r->threads, openblas_get_config());
}

/* A generation after its set-up: trains to its end (or finishes a job whose checkpoint is
 * final), gathers the result and writes the end's records. Training and the gather are
 * judged (a failure a new generation may fix ends the generation, TAGC_OK); a failed
 * hooks.ready and the records' errors are returned as they are. */
static tagc_status gen_run(tagc_run *r, tagc_gen_result *res) {
  log_start(r);
  if (r->start_step >= r->cfg->steps) {
    if (r->rank == 0)
      LOG_INFO("train", "the checkpoint is already at step %lld of %lld: nothing to train",
               (long long)r->start_step, (long long)r->cfg->steps);
    res->end = TAGC_GEN_FINISHED;
    /* A generation change came between the last step and its summary (elastic: the job
       ends only once the final progress is published after the summary), or this process
       trained the job's steps earlier: finish here (an existing summary stays when this
       process trained nothing). A static rerun over a finished checkpoint changes nothing. */
    if (!r->elastic && tagc_report_steps_run(&r->report) == 0)
      return TAGC_OK;
  } else if (r->cfg->stop_at > 0 && r->start_step >= r->cfg->stop_at) {
    /* a rerun of the same --stop-at: what was asked is done (training on would change the
       meaning of the option with the folder's state) */
    if (r->rank == 0)
      LOG_WARN("train", "already at step %lld: --stop-at %lld reached; nothing to train",
               (long long)r->start_step, (long long)r->cfg->stop_at);
    res->end = TAGC_GEN_STOPPED;
    return TAGC_OK;
  } else {
    if (r->hooks.ready)
      TAGC_CHECK(r->hooks.ready(r->hooks.ctx, r->gen, r->rank));
    tagc_status st = judge(r, train(r, res), res);
    if (st != TAGC_OK || gen_ended(res))
      return st;
  }
  final_state fin;
  tagc_status st = judge(r, finish_job(r, res->step, &fin), res);
  if (st != TAGC_OK || gen_ended(res))
    return st;
  return write_end(r, res, &fin);
}

tagc_status tagc_run_generation(tagc_run *r, const tagc_gen_spec *g, tagc_gen_result *res) {
  memset(res, 0, sizeof *res);
  res->suspected_rank = -1;
  r->on_failure = NULL; /* gen_begin sets it once the generation is this one */
  r->fault_cause = -1;
  /* peers vanished while we connected, OOM, or the ranks chose different resume points:
     failed; bad configuration, checkpoints or output: fatal */
  tagc_status st = gen_begin(r, g);
  res->step = r->start_step;
  st = judge(r, st, res);
  if (st == TAGC_OK && !gen_ended(res))
    st = gen_run(r, res);
  res->start_step = r->start_step;
  tagc_error_saved first; /* the tear-down must not replace the detail of st */
  tagc_error_save(&first);
  gen_end(r);
  publish_sample(r, res->step, NULL);
  tagc_error_restore(&first);
  return st;
}
