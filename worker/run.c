#include "run.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt/ckpt_saver.h"
#include "common/crc32c.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/member.h"
#include "worker/data.h"
#include "worker/engine.h"
#include "worker/fault.h"
#include "worker/metrics_http.h"
#include "worker/model.h"
#include "worker/report.h"

/* Recovery accounting: one failure at a time. */
typedef struct recovery {
  tagc_recovery_counts n; /* what summary.json and /metrics show */
  double pending_since;   /* while n.recovering: when the failure happened */
  int64_t failed_at_step;
  char pending_kind[16];
} recovery;

struct tagc_run {
  const tagc_train_config *cfg;
  tagc_model_layout layout;
  tagc_compress_policy policy;
  tagc_corpus corpus;
  int threads;
  char ckpt_root[4096];
  tagc_report report; /* progress, metrics.jsonl, summary.json, /metrics */
  recovery rec;
  tagc_faults faults;
  tagc_member *member; /* elastic mode only */
  double last_chaos;
  char chaos_seen[256];
  tagc_metrics_http *http; /* --metrics-addr, else NULL */
  tagc_device *device;     /* --device: kept across generations */
  tagc_device_info dev_info;
  tagc_step_stats last_ss; /* the latest completed step */
  int out_lock;            /* OUT/.lock while this process owns OUT (tagc_out_lock), else -1 */
  double save_started;     /* when the latest save was handed to the saver (its barrier's clock) */

  /* the current generation */
  int64_t gen;
  int rank, world;
  pthread_mutex_t comm_mu; /* guards comm against tagc_run_abort from other threads */
  tagc_comm *comm;
  int boot_peer; /* the rank the communicator's bootstrap could not reach, or -1 */
  int aborted;
  tagc_engine *engine;
  tagc_ckpt_range *ranges;
  tagc_ckpt_saver *saver;
  int64_t start_step;
  int suspect; /* the rank blamed for a disagreement this rank detected, or -1 */
};

/* ---------- the output folder's owner ---------- */

typedef struct out_holder {
  char text[160]; /* "pid P on host H" */
  char job[128];
} out_holder;

/* Records this process as the holder, in the file the descriptor holds exclusively. */
static void write_holder(int fd, const char *job) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  json_t *h = json_pack("{s:i, s:s, s:s, s:f}", "pid", (int)getpid(), "host", host, "job",
                        job ? job : "", "since", tagc_wall_time());
  char *text = h ? tagc_json_dump(h) : NULL;
  if (text && ftruncate(fd, 0) == 0 && pwrite(fd, text, strlen(text), 0) < 0)
    LOG_WARN("train", "cannot record this process in the output lock: %s", strerror(errno));
  free(text);
  json_decref(h);
}

static void read_holder(int fd, out_holder *h) {
  char buf[1024];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  json_t *v = NULL;
  const char *host = "?", *job = "";
  int64_t pid = 0;
  if (n > 0 && tagc_json_parse(buf, (size_t)n, &v) == TAGC_OK) {
    tagc_json_get_int(v, "pid", &pid);
    tagc_json_get_str(v, "host", &host);
    tagc_json_get_str(v, "job", &job);
  }
  snprintf(h->text, sizeof h->text, "pid %lld on host %s", (long long)pid, host);
  snprintf(h->job, sizeof h->job, "%s", job);
  json_decref(v);
  tagc_clear_error();
}

tagc_status tagc_out_lock(const char *out, const char *job, int *fd_out) {
  *fd_out = -1;
  char path[4200];
  snprintf(path, sizeof path, "%s/.lock", out);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return tagc_errnof(TAGC_EIO, "%s", path);
  /* a sharer holds the lock exclusively only while it writes the file: wait that out */
  double until = tagc_now() + (job ? 1.0 : 0.0);
  out_holder h;
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      write_holder(fd, job);
      if (!job || flock(fd, LOCK_SH | LOCK_NB) == 0)
        break;
    } else if (job && flock(fd, LOCK_SH | LOCK_NB) == 0) {
      read_holder(fd, &h);
      if (!strcmp(h.job, job))
        break;
      flock(fd, LOCK_UN); /* another job's, or a stale record: look again */
    }
    if (tagc_now() >= until) {
      read_holder(fd, &h);
      close(fd);
      return tagc_errorf(TAGC_EINVAL, "output folder %s is in use by %s%s%s: use another --out, "
                         "or stop that run first", out, h.text, *h.job ? ", job " : "", h.job);
    }
    tagc_sleep(0.01);
  }
  *fd_out = fd;
  return TAGC_OK;
}

/* The descriptor `tagctl run` handed down, when it holds OUT/.lock; else -1. */
static int inherited_lock(const char *out) {
  const char *v = getenv(TAGC_OUT_LOCK_FD_ENV);
  if (!v || !*v)
    return -1;
  int fd = atoi(v);
  char path[4200];
  snprintf(path, sizeof path, "%s/.lock", out);
  struct stat a, b;
  if (fd < 0 || fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev ||
      a.st_ino != b.st_ino || flock(fd, LOCK_EX | LOCK_NB) != 0)
    return -1; /* not our OUT's lock, or not held through this descriptor */
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

/* This process owns OUT: through `tagctl run`, or by locking it itself when it writes OUT's
 * metrics and summary (static rank 0; elastic workers, shared within their job). */
static tagc_status own_out(tagc_run *r) {
  const tagc_train_config *cfg = r->cfg;
  int elastic = cfg->etcd && *cfg->etcd;
  r->out_lock = inherited_lock(cfg->out);
  if (r->out_lock >= 0 || (!elastic && cfg->rank != 0))
    return TAGC_OK;
  return tagc_out_lock(cfg->out, elastic ? cfg->job : NULL, &r->out_lock);
}

/* ---------- the process-wide part ---------- */

tagc_status tagc_run_new(const tagc_train_config *cfg, tagc_run **out) {
  tagc_run *r = calloc(1, sizeof *r);
  if (!r)
    return tagc_errorf(TAGC_ENOMEM, "run");
  tagc_status st;
  r->cfg = cfg;
  r->out_lock = -1;
  pthread_mutex_init(&r->comm_mu, NULL);
  tagc_model_config mc = {256, (int)cfg->ctx, (int)cfg->layers, (int)cfg->heads, (int)cfg->dim};
  TAGC_CHECK_GOTO(tagc_model_layout_init(&r->layout, &mc), st, fail);
  if (cfg->micro_batch > cfg->batch) {
    st = tagc_errorf(TAGC_EINVAL, "--micro-batch %lld is larger than --batch %lld",
                     (long long)cfg->micro_batch, (long long)cfg->batch);
    goto fail;
  }
  TAGC_CHECK_GOTO(tagc_policy_parse(cfg->compress, &r->policy), st, fail);
  const char *fault = cfg->fault && *cfg->fault ? cfg->fault : getenv("TAGC_FAULT");
  TAGC_CHECK_GOTO(tagc_faults_parse(fault, &r->faults), st, fail);
  if (fault && *fault) /* its ckpt: items, if any (ckpt/ reads only TAGC_FAULT by itself) */
    TAGC_CHECK_GOTO(tagc_ckpt_fault_configure(fault), st, fail);
  TAGC_CHECK_GOTO(tagc_mkdir_p(cfg->out), st, fail);
  TAGC_CHECK_GOTO(own_out(r), st, fail); /* first: a second run in OUT is refused at once */
  if (cfg->metrics_addr && *cfg->metrics_addr) {
    TAGC_CHECK_GOTO(tagc_metrics_http_start(cfg->metrics_addr, &r->http), st, fail);
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
  TAGC_CHECK_GOTO(tagc_corpus_load(cfg->corpus, (size_t)cfg->ctx + 1, &r->corpus), st, fail);
  const char *root = *cfg->ckpt_dir ? cfg->ckpt_dir : cfg->out;
  if (strlen(root) + 8 >= sizeof r->ckpt_root) {
    st = tagc_errorf(TAGC_EINVAL, "checkpoint path too long");
    goto fail;
  }
  snprintf(r->ckpt_root, sizeof r->ckpt_root, "%s%s", root, *cfg->ckpt_dir ? "" : "/ckpt");
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
  tagc_device_close(r->device);
  if (r->out_lock >= 0)
    close(r->out_lock);
  pthread_mutex_destroy(&r->comm_mu);
  free(r);
}

void tagc_run_set_member(tagc_run *r, tagc_member *member) {
  r->member = member;
  tagc_report_set_member(&r->report, member);
}

void tagc_run_abort(tagc_run *r) {
  pthread_mutex_lock(&r->comm_mu);
  r->aborted = 1;
  if (r->comm)
    tagc_comm_abort(r->comm);
  pthread_mutex_unlock(&r->comm_mu);
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

/* ---------- checkpoints ---------- */

static json_t *model_json(const tagc_run *t) {
  const tagc_model_config *m = &t->layout.cfg;
  return json_pack("{s:i, s:i, s:i, s:i, s:i}", "vocab", m->vocab, "ctx", m->ctx, "layers",
                   m->n_layer, "heads", m->n_head, "dim", m->d_model);
}

static json_t *tensors_json(const tagc_run *t) {
  json_t *a = json_array();
  for (int i = 0; a && i < t->layout.n_tensors; i++) {
    const tagc_tensor_info *ti = &t->layout.tensors[i];
    json_array_append_new(a, json_pack("{s:s, s:s, s:i, s:i, s:i, s:I}", "name", ti->name, "role",
                                       tagc_role_name(ti->role), "unit", ti->unit, "rows", ti->rows,
                                       "cols", ti->cols, "offset", (json_int_t)ti->offset));
  }
  return a;
}

static json_t *sampler_json(const tagc_run *t, int64_t step) {
  return json_pack("{s:I, s:I, s:I, s:I, s:I}", "seed", (json_int_t)t->cfg->seed, "batch",
                   (json_int_t)t->cfg->batch, "ctx", (json_int_t)t->cfg->ctx, "step",
                   (json_int_t)step, "corpus_crc32c", (json_int_t)t->corpus.crc);
}

/* Rank 0's barrier before commit: every rank's shard file is durable once it has its final
 * name (ckpt/ renames it after fsync), so waiting for the W files is the barrier, and it needs
 * no collective on the saver's thread. Every rank agreed that all snapshots succeeded before
 * it began to write (save_checkpoint), so each shard is on its way: the wait allows for a
 * peer starting up to an operation timeout later and writing 3x slower than this rank did,
 * and no longer, so that a peer that died meanwhile does not hold the generation's end up. */
static tagc_status shard_files_barrier(void *arg, int64_t step) {
  tagc_run *t = arg;
  if (t->rank != 0)
    return TAGC_OK;
  double now = tagc_now(), deadline = now + t->cfg->op_timeout + 3 * (now - t->save_started);
  for (int r = 0; r < t->world; r++) {
    char path[4200];
    TAGC_CHECK(tagc_ckpt_shard_path(t->ckpt_root, step, r, 1, path, sizeof path));
    while (access(path, F_OK) != 0) {
      if (tagc_now() > deadline || t->aborted)
        return tagc_errorf(TAGC_ETIMEDOUT, "checkpoint of step %lld: rank %d's shard did not "
                           "arrive within %.1f s", (long long)step, r, deadline - now);
      tagc_sleep(0.01);
    }
  }
  return TAGC_OK;
}

/* Rank 0, on the saver's thread: records the committed checkpoint in etcd. */
static tagc_status record_commit(void *arg, const tagc_ckpt_committed *c) {
  tagc_run *t = arg;
  if (!t->member)
    return TAGC_OK;
  tagc_status st = tagc_member_commit_ckpt(t->member, t->gen, c->step, c->path, c->world_size,
                                           c->manifest_crc32c);
  if (st == TAGC_ECONFLICT) /* a newer generation or step is already recorded */
    return TAGC_OK;
  return st;
}

static tagc_status open_saver(tagc_run *t) {
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
  wc.on_commit = record_commit;
  wc.on_commit_arg = t;
  return tagc_ckpt_saver_create(&wc, &t->saver);
}

/* ---------- what the ranks of a generation agree on ---------- */

/* All-gather of `bytes` host bytes per rank on the training communicator, through device
 * memory (NCCL works on device memory). Collective; the engine's comm thread must be idle. */
static tagc_status allgather_host(tagc_run *t, const void *send, void *recv, size_t bytes) {
  void *dev;
  TAGC_CHECK(tagc_device_alloc(t->device, bytes * ((size_t)t->world + 1), &dev));
  char *dsend = dev, *drecv = dsend + bytes;
  tagc_status st = tagc_device_copy(t->device, TAGC_LANE_COMPUTE, dsend, send, bytes, TAGC_COPY_H2D);
  if (st == TAGC_OK)
    st = tagc_comm_allgather(t->comm, dsend, drecv, bytes, t->cfg->op_timeout);
  if (st == TAGC_OK)
    st = tagc_device_copy(t->device, TAGC_LANE_COMPUTE, recv, drecv, bytes * (size_t)t->world,
                          TAGC_COPY_D2H);
  tagc_device_free(t->device, dev);
  return st;
}

/* A status that came over the wire; anything out of range counts as a peer failure. */
static tagc_status wire_status(int64_t v) {
  return v <= TAGC_OK && v >= TAGC_EINTERNAL ? (tagc_status)v : TAGC_EPEER;
}

/* Collective: every rank tells the others how its part went (mine), and every rank learns
 * the first failure: this rank's own (its detail kept), else TAGC_EPEER naming the rank
 * whose part failed (`what`, e.g. "snapshot of step 4"), else the all-gather's failure.
 * all[r * n + k] (W * n values) gets rank r's values[k] (n values per rank, values[0] is
 * overwritten with the status). At world size 1, mine. */
static tagc_status agree(tagc_run *t, tagc_status mine, int64_t *values, int n, int64_t *all,
                         const char *what) {
  if (t->world == 1 || !t->comm)
    return mine;
  if (!all) /* no room for the answers: the peers' agreement then times out */
    return mine != TAGC_OK ? mine : tagc_errorf(TAGC_ENOMEM, "agreement on the %s", what);
  values[0] = mine;
  tagc_error_saved own;
  tagc_error_save(&own);
  tagc_status st = allgather_host(t, values, all, (size_t)n * sizeof *values);
  if (mine != TAGC_OK) {
    tagc_error_restore(&own);
    return mine;
  }
  for (int r = 0; st == TAGC_OK && r < t->world; r++)
    if (all[(size_t)r * n] != TAGC_OK) {
      t->suspect = r;
      return tagc_errorf(TAGC_EPEER, "rank %d's %s failed (%s)", r, what,
                         tagc_strerror(wire_status(all[(size_t)r * n])));
    }
  return st;
}

/* Re-tags this thread's error detail with a prefix, keeping st. */
static tagc_status prefixed(tagc_status st, const char *prefix) {
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", tagc_last_error());
  return tagc_errorf(st, "%s: %s", prefix, detail);
}

/* Starts an asynchronous save of the state after `step` completed steps. The ranks agree
 * first that every snapshot succeeded (one collective): otherwise every rank abandons the
 * save, so a stale or partly canonicalised state never becomes a checkpoint. */
static tagc_status save_checkpoint(tagc_run *t, int64_t step) {
  float *const *views;
  TAGC_CHECK(tagc_ckpt_saver_begin(t->saver, step, &views));
  if (tagc_ckpt_fault_abort_snapshot(t->rank))
    tagc_run_abort(t); /* what a newer generation or a lost lease does during a snapshot */
  char what[64];
  snprintf(what, sizeof what, "snapshot of step %lld", (long long)step);
  int64_t mine[1], *all = calloc((size_t)t->world, sizeof *all);
  tagc_status st = agree(t, tagc_engine_snapshot(t->engine, views), mine, 1, all, what);
  free(all);
  if (st != TAGC_OK) {
    TAGC_CHECK_IGNORE(tagc_ckpt_saver_abandon(t->saver), st);
    char prefix[96];
    snprintf(prefix, sizeof prefix, "checkpoint of step %lld abandoned", (long long)step);
    return prefixed(st, prefix);
  }
  json_t *model = model_json(t), *tensors = tensors_json(t), *sampler = sampler_json(t, step);
  json_t *rng = json_pack("{s:I}", "seed", (json_int_t)t->cfg->seed);
  json_t *comp = tagc_engine_compression_state(t->engine);
  if (comp)
    json_object_set_new(comp, "policy", json_string(t->cfg->compress));
  tagc_ckpt_meta meta = {model, tensors, sampler, rng, comp};
  t->save_started = tagc_now();
  st = tagc_ckpt_saver_finish(t->saver, &meta);
  json_decref(model);
  json_decref(tensors);
  json_decref(sampler);
  json_decref(rng);
  json_decref(comp);
  return st;
}

/* ---------- resuming ---------- */

/* TAGC_ALLOW_RESTART_FROM_SCRATCH=1: when every checkpoint is invalid, train from step 0. */
static int restart_from_scratch_allowed(void) {
  const char *v = getenv("TAGC_ALLOW_RESTART_FROM_SCRATCH");
  return v && (!strcmp(v, "1") || !strcmp(v, "true"));
}

/* This rank's resume point: *rd open and fully verified, or NULL for step 0 — which is
 * chosen silently only when nothing was ever saved. The plan's checkpoint first, else (it is
 * damaged or gone) the newest valid one; when the plan names the committed manifest's CRC
 * and the plan's checkpoint has another, TAGC_ECORRUPT: the folder was written over. */
static tagc_status choose_resume(tagc_run *t, const tagc_gen_spec *g, tagc_ckpt_reader **rd) {
  *rd = NULL;
  if (!t->cfg->resume)
    return TAGC_OK;
  tagc_status st;
  if (g->resume_path) {
    st = tagc_ckpt_open(g->resume_path, TAGC_CKPT_VERIFY_FULL, rd);
    uint32_t crc = st == TAGC_OK ? tagc_ckpt_reader_manifest_crc32c(*rd) : 0;
    if (st == TAGC_OK && g->resume_manifest_crc && crc != g->resume_manifest_crc) {
      tagc_ckpt_close(*rd); /* not what was committed: someone replaced it, trust none here */
      *rd = NULL;
      return tagc_errorf(TAGC_ECORRUPT, "checkpoint %s is not the one committed: its manifest "
                         "has CRC32C %08x, the job's record %08x (written over by another run?)",
                         g->resume_path, crc, g->resume_manifest_crc);
    }
    if (st == TAGC_OK)
      return TAGC_OK;
    LOG_WARN("train", "checkpoint %s: %s; looking for the newest valid one", g->resume_path,
             tagc_last_error());
  }
  st = tagc_ckpt_find_latest_valid(t->ckpt_root, TAGC_CKPT_VERIFY_FULL, rd);
  if (st == TAGC_OK || (st == TAGC_ENOTFOUND && !g->resume_path)) {
    tagc_clear_error();
    return TAGC_OK;
  }
  if (st != TAGC_ENOTFOUND && st != TAGC_ECORRUPT)
    return st;
  if (restart_from_scratch_allowed()) {
    LOG_ERROR("train", "%s: RESTARTING FROM STEP 0, as TAGC_ALLOW_RESTART_FROM_SCRATCH allows",
              tagc_last_error());
    tagc_clear_error();
    return TAGC_OK;
  }
  return prefixed(TAGC_ECORRUPT, "no checkpoint to resume from, and refusing to restart from "
                  "step 0 (set TAGC_ALLOW_RESTART_FROM_SCRATCH=1 for that, or use --no-resume)");
}

/* The checkpoint belongs to this job: same model, batch, seed and corpus. */
static tagc_status check_job(tagc_run *t, tagc_ckpt_reader *rd) {
  json_t *model = model_json(t), *sampler = sampler_json(t, tagc_ckpt_reader_step(rd));
  tagc_status st = TAGC_OK;
  if (!json_equal(model, tagc_ckpt_reader_meta(rd, "model")) ||
      !json_equal(sampler, tagc_ckpt_reader_meta(rd, "sampler")))
    st = tagc_errorf(TAGC_EINVAL, "checkpoint %s is of another model, batch, seed or corpus: "
                     "use another --out or --no-resume", tagc_ckpt_reader_path(rd));
  json_decref(model);
  json_decref(sampler);
  return st;
}

/* Collective: the ranks resume from the same checkpoint (step and manifest CRC32C), or the
 * generation fails with TAGC_ECONFLICT naming their choices. */
static tagc_status agree_resume(tagc_run *t, const tagc_gen_spec *g, tagc_status mine,
                                const tagc_ckpt_reader *rd) {
  int64_t values[3] = {0, rd ? tagc_ckpt_reader_step(rd) : 0,
                       rd ? (int64_t)tagc_ckpt_reader_manifest_crc32c(rd) : 0};
  if (g->resume_step > 0 && values[1] != g->resume_step && mine == TAGC_OK)
    LOG_WARN("train", "the plan resumes from step %lld; this rank found step %lld",
             (long long)g->resume_step, (long long)values[1]);
  int64_t *all = calloc((size_t)t->world * 3, sizeof *all);
  tagc_status st = agree(t, mine, values, 3, all, "choice of its resume point");
  char list[512] = "";
  int off_rank0 = -1, off_plan = -1;
  for (int r = 0; st == TAGC_OK && r < t->world && t->world > 1; r++) {
    const int64_t *v = all + 3 * (size_t)r;
    size_t used = strlen(list);
    if (v[1])
      snprintf(list + used, sizeof list - used, "%srank %d: step %lld (manifest %08llx)", r ? ", " : "",
               r, (long long)v[1], (unsigned long long)v[2]);
    else
      snprintf(list + used, sizeof list - used, "%srank %d: step 0 (no checkpoint)", r ? ", " : "", r);
    if (off_rank0 < 0 && (v[1] != all[1] || v[2] != all[2]))
      off_rank0 = r;
    if (off_plan < 0 && g->resume_step > 0 && v[1] != g->resume_step)
      off_plan = r;
  }
  if (off_rank0 >= 0) { /* blame the first rank off the plan, else the first off rank 0 */
    t->suspect = off_plan >= 0 ? off_plan : off_rank0;
    st = tagc_errorf(TAGC_ECONFLICT, "the ranks would resume from different checkpoints (%s): "
                     "refusing to train", list);
  }
  free(all);
  return st;
}

/* Chooses, agrees on and loads the resume point (collective). */
static tagc_status resume(tagc_run *t, const tagc_gen_spec *g) {
  tagc_ckpt_reader *rd;
  tagc_status st = choose_resume(t, g, &rd);
  if (st == TAGC_OK && rd)
    st = check_job(t, rd);
  if (st != TAGC_OK) {
    tagc_ckpt_close(rd);
    rd = NULL;
  }
  st = agree_resume(t, g, st, rd);
  if (st == TAGC_OK && rd)
    st = tagc_engine_load(t->engine, rd);
  if (st == TAGC_OK && rd)
    st = tagc_engine_set_compression_state(t->engine, tagc_ckpt_reader_meta(rd, "compression"));
  if (st == TAGC_OK && rd) {
    t->start_step = tagc_ckpt_reader_step(rd);
    if (t->rank == 0)
      LOG_INFO("train", "resuming from %s (step %lld, saved by %d workers) with %d workers",
               tagc_ckpt_reader_path(rd), (long long)t->start_step,
               tagc_ckpt_reader_world_size(rd), t->world);
  }
  tagc_ckpt_close(rd);
  return st;
}

/* ---------- one generation: set-up and tear-down ---------- */

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
  tagc_comm *comm;
  TAGC_CHECK(tagc_comm_create_ex(&cc, &comm, &t->boot_peer));
  pthread_mutex_lock(&t->comm_mu);
  t->comm = comm;
  if (t->aborted) /* a newer generation was announced while we connected */
    tagc_comm_abort(comm);
  pthread_mutex_unlock(&t->comm_mu);
  return TAGC_OK;
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
  t->aborted = t->member && tagc_member_gen(t->member) > g->gen;
  pthread_mutex_unlock(&t->comm_mu);
  t->rank = g->rank;
  t->world = g->world;
  tagc_report_generation(&t->report, g->gen, g->rank, g->world);
  t->start_step = 0;
  t->boot_peer = -1;
  t->suspect = -1;
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
  ec.op_timeout_s = cfg->op_timeout;
  ec.check_feedback = cfg->check_feedback;
  ec.gather_bf16 = tagc_policy_gather_bf16(cfg->gather, &t->policy);
  ec.reshard_after_forward = cfg->reshard_after_forward;
  ec.op_delay_s = t->faults.slow_s;
  TAGC_CHECK(tagc_engine_new(&ec, &t->engine));
  TAGC_CHECK(resume(t, g));
  TAGC_CHECK(open_saver(t));
  return tagc_report_open_metrics(&t->report, t->start_step);
}

static void gen_end(tagc_run *t) {
  tagc_ckpt_saver_destroy(t->saver); /* finishes a pending save first */
  t->saver = NULL;
  free(t->ranges);
  t->ranges = NULL;
  tagc_engine_free(t->engine);
  t->engine = NULL;
  pthread_mutex_lock(&t->comm_mu);
  tagc_comm *comm = t->comm;
  t->comm = NULL;
  t->aborted = 0;
  pthread_mutex_unlock(&t->comm_mu);
  tagc_comm_destroy(comm);
  tagc_report_end_generation(&t->report);
}

/* ---------- faults and failures ---------- */

/* Elastic mode: arms a new chaos/<id> spec (once per distinct value), polled once a second.
 * A fault whose step has already passed fires at the next step. */
static void poll_chaos(tagc_run *t, int64_t step) {
  double now = tagc_now();
  if (!t->member || now - t->last_chaos < 1.0)
    return;
  t->last_chaos = now;
  char *spec = NULL;
  if (tagc_member_chaos(t->member, &spec) != TAGC_OK || !spec || !strcmp(spec, t->chaos_seen)) {
    free(spec);
    return;
  }
  snprintf(t->chaos_seen, sizeof t->chaos_seen, "%s", spec);
  tagc_faults f;
  if (tagc_faults_parse(spec, &f) == TAGC_OK) {
    LOG_WARN("train", "chaos armed: %s", spec);
    for (int k = 0; k < TAGC_FAULT_KINDS; k++)
      if (f.at[k] >= 0 && f.at[k] < step)
        f.at[k] = step;
    tagc_faults_merge(&t->faults, &f);
    tagc_engine_set_op_delay(t->engine, t->faults.slow_s);
  } else {
    LOG_WARN("train", "chaos spec ignored: %s", tagc_last_error());
  }
  free(spec);
}

/* Fires the fault armed for this step, if any. Returns a failure status for faults that the
 * worker survives (oom, hang, drop), TAGC_OK otherwise. */
static tagc_status fire_fault(tagc_run *t, int64_t step, tagc_gen_result *res) {
  int k = tagc_faults_take(&t->faults, step);
  if (k < 0)
    return TAGC_OK;
  LOG_WARN("train", "fault injected at step %lld: %s", (long long)step, tagc_fault_name(k));
  switch ((tagc_fault_kind)k) {
  case TAGC_FAULT_CRASH:
    raise(SIGKILL);
    break;
  case TAGC_FAULT_EXIT:
    _exit(3);
  case TAGC_FAULT_OOM:
    res->kind = "oom";
    return tagc_errorf(TAGC_ENOMEM, "injected allocation failure at step %lld", (long long)step);
  case TAGC_FAULT_HANG: { /* stop making progress until this generation is given up */
    double until = tagc_now() + 3 * t->cfg->op_timeout;
    while (!t->aborted && tagc_now() < until)
      tagc_sleep(0.05);
  }
    res->kind = "hang";
    return tagc_errorf(TAGC_EABORTED, "injected hang at step %lld", (long long)step);
  case TAGC_FAULT_DROP:
    tagc_run_abort(t);
    res->kind = "injected";
    return tagc_errorf(TAGC_EPEER, "injected connection drop at step %lld", (long long)step);
  case TAGC_FAULT_KINDS:
    break;
  }
  return TAGC_OK;
}

static const char *kind_of(tagc_status st) {
  switch (st) {
  case TAGC_ETIMEDOUT: return "timeout";
  case TAGC_ENOMEM: return "oom";
  default: return "comm";
  }
}

/* Ends the generation as failed or superseded, with recovery accounting. */
static void fail_generation(tagc_run *t, tagc_status st, int64_t step, tagc_gen_result *res) {
  int superseded = t->member && tagc_member_gen(t->member) > t->gen;
  if (!superseded && t->member) {
    /* A peer leaving (or failing) breaks our connections a few milliseconds before our watch
     * delivers the new generation: ask etcd itself before calling this a failure. */
    tagc_error_saved why;
    tagc_error_save(&why);
    int64_t now = 0;
    superseded = tagc_member_read_gen(t->member, &now) == TAGC_OK && now > t->gen;
    tagc_error_restore(&why);
  }
  res->end = superseded ? TAGC_GEN_SUPERSEDED : TAGC_GEN_FAILED;
  res->status = st;
  if (!res->kind)
    res->kind = kind_of(st);
  res->step = step;
  pthread_mutex_lock(&t->comm_mu);
  res->suspected_rank = t->suspect >= 0 ? t->suspect
                       : t->comm      ? tagc_comm_failed_peer(t->comm)
                                      : t->boot_peer;
  pthread_mutex_unlock(&t->comm_mu);
  snprintf(res->detail, sizeof res->detail, "%s", tagc_last_error());
  if (!t->rec.n.recovering) {
    t->rec.n.failures += !superseded; /* a new plan (a member left or joined) is no failure */
    t->rec.n.recovering = 1;
    t->rec.pending_since = tagc_now();
    t->rec.failed_at_step = step;
    snprintf(t->rec.pending_kind, sizeof t->rec.pending_kind, "%s", superseded ? "membership" : res->kind);
  }
  LOG_WARN("train", "generation %lld ended at step %lld (%s): %s", (long long)t->gen,
           (long long)step, superseded ? "superseded" : res->kind, res->detail);
}

/* First completed step after a failure: the recovery is done. */
static void note_recovery(tagc_run *t, int64_t step) {
  recovery *rec = &t->rec;
  if (!rec->n.recovering)
    return;
  double s = tagc_now() - rec->pending_since;
  int64_t lost = rec->failed_at_step - t->start_step;
  rec->n.recoveries++;
  rec->n.steps_lost += lost > 0 ? lost : 0;
  rec->n.last_recovery_s = s;
  if (s > rec->n.max_recovery_s)
    rec->n.max_recovery_s = s;
  rec->n.recovering = 0;
  if (t->rank == 0)
    LOG_WARN("train", "recovered from %s at step %lld in %.2f s with %d workers, %lld steps recomputed",
             rec->pending_kind, (long long)(step + 1), s, t->world, (long long)(lost > 0 ? lost : 0));
}

/* --metrics-addr: the served sample, after a step (ss) or at a generation's start or end. */
static void publish_sample(tagc_run *t, int64_t steps_done, const tagc_step_stats *ss) {
  tagc_report_sample(&t->report, steps_done, ss, &t->rec.n, t->comm);
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

/* Rank 0: summary.json and the final log line (worker/report.h). */
static tagc_status write_summary(tagc_run *t, int64_t step, int stopped, uint32_t crc) {
  tagc_ckpt_saver_stats cs;
  if (t->saver)
    tagc_ckpt_saver_stats_get(t->saver, &cs);
  json_t *model = model_json(t);
  tagc_report_final f = {step, t->start_step, stopped, crc, &t->rec.n, t->saver ? &cs : NULL, model};
  tagc_status st = tagc_report_finish(&t->report, &f);
  json_decref(model);
  return st;
}

/* The end of the run in this generation (res->end and res->step set): waits for the last
 * save, gathers the final parameters (their CRC identifies the result; collective) and rank
 * 0 writes summary.json. A failure of the gather ends the generation as failed. */
static tagc_status finish_job(tagc_run *t, int64_t step, tagc_gen_result *res) {
  tagc_status saved = t->saver ? tagc_ckpt_saver_wait(t->saver) : TAGC_OK;
  if (saved == TAGC_ETIMEDOUT || saved == TAGC_EPEER || saved == TAGC_EABORTED) {
    /* a rank's shard of the final checkpoint never came: that peer is gone, and the next
       generation redoes the steps since the last committed checkpoint */
    fail_generation(t, saved, step, res);
    return TAGC_OK;
  }
  char unsaved[512] = ""; /* e.g. the disk is full: the result is still gathered and summarised */
  if (saved != TAGC_OK) {
    snprintf(unsaved, sizeof unsaved, "%s", tagc_last_error());
    LOG_ERROR("train", "the final checkpoint (step %lld) was not saved: %s", (long long)step, unsaved);
  }
  uint32_t crc = 0;
  tagc_status st = finish_params(t, &crc);
  if (st != TAGC_OK) { /* a peer died after the last step: its checkpoint holds the result */
    fail_generation(t, st, step, res);
    return TAGC_OK;
  }
  if (t->rank == 0)
    TAGC_CHECK(write_summary(t, step, res->end == TAGC_GEN_STOPPED, crc));
  if (t->rank == 0 && res->end == TAGC_GEN_FINISHED)
    tagc_report_progress(&t->report, step - 1, &t->last_ss, 1);
  if (saved != TAGC_OK) /* the run's result is not durable: the run did not succeed */
    return tagc_errorf(saved, "the final checkpoint (step %lld) was not saved: %s", (long long)step,
                       unsaved);
  return TAGC_OK;
}

static tagc_status train(tagc_run *t, tagc_gen_result *res) {
  const tagc_train_config *cfg = t->cfg;
  int64_t end = cfg->stop_at > t->start_step && cfg->stop_at < cfg->steps ? cfg->stop_at : cfg->steps;
  int64_t step = t->start_step;
  publish_sample(t, step, NULL);
  for (; step < end; step++) {
    tagc_step_stats ss;
    poll_chaos(t, step);
    tagc_status st = fire_fault(t, step, res);
    if (st == TAGC_OK && t->member && tagc_member_gen(t->member) > t->gen)
      st = tagc_errorf(TAGC_EABORTED, "generation %lld was superseded", (long long)t->gen);
    if (st == TAGC_OK)
      st = tagc_engine_step(t->engine, &t->corpus, step, &ss);
    if (st == TAGC_ENUMERIC || st == TAGC_EINVAL)
      return st; /* the math went wrong: a new generation would not help */
    if (st != TAGC_OK) {
      fail_generation(t, st, step, res);
      return TAGC_OK;
    }
    note_recovery(t, step);
    int last = step + 1 == end;
    if (t->saver && ((step + 1) % cfg->ckpt_every == 0 || last))
      st = save_checkpoint(t, step + 1);
    tagc_report_step(&t->report, &ss);
    publish_sample(t, step + 1, &ss);
    double val = NAN;
    if (st == TAGC_OK && (last || (cfg->eval_every && (step + 1) % cfg->eval_every == 0))) {
      st = tagc_engine_eval(t->engine, &t->corpus, cfg->eval_windows, &val);
      if (st == TAGC_OK)
        tagc_report_val_loss(&t->report, val);
    }
    if (st != TAGC_OK) {
      fail_generation(t, st, step + 1, res);
      return TAGC_OK;
    }
    t->last_ss = ss;
    tagc_report_progress(&t->report, step, &ss, 0);
    if (t->rank == 0)
      tagc_report_metrics_line(&t->report, step, &ss, val, step == t->start_step || last);
  }
  res->step = step;
  res->end = end < cfg->steps ? TAGC_GEN_STOPPED : TAGC_GEN_FINISHED;
  /* a fault armed for the final step count fires here: after the last step and the final
     save (this rank's shard is durable; rank 0: committed), before the gather and summary */
  if (end == cfg->steps && t->faults.next == step && t->saver)
    (void)tagc_ckpt_saver_wait(t->saver); /* its status is finish_job's business */
  tagc_status st = end == cfg->steps ? fire_fault(t, step, res) : TAGC_OK;
  if (st != TAGC_OK) {
    fail_generation(t, st, step, res);
    return TAGC_OK;
  }
  return finish_job(t, step, res);
}

tagc_status tagc_run_generation(tagc_run *r, const tagc_gen_spec *g, tagc_gen_result *res) {
  memset(res, 0, sizeof *res);
  res->suspected_rank = -1;
  tagc_status st = gen_begin(r, g);
  if (st == TAGC_OK) {
    if (r->rank == 0 && r->gen <= 1 && r->rec.n.failures == 0) {
      tagc_opts_log(&tagc_train_program, r->cfg);
      LOG_INFO("train", "model: %d layers, width %d, %d heads, context %d, %zu parameters; batch "
               "%lld; world %d; %d threads; BLAS %s", r->layout.cfg.n_layer, r->layout.cfg.d_model,
               r->layout.cfg.n_head, r->layout.cfg.ctx, r->layout.n_params, (long long)r->cfg->batch,
               r->world, r->threads, openblas_get_config());
    }
    if (r->start_step >= r->cfg->steps) {
      if (r->rank == 0)
        LOG_INFO("train", "the checkpoint is already at step %lld of %lld: nothing to train",
                 (long long)r->start_step, (long long)r->cfg->steps);
      res->end = TAGC_GEN_FINISHED;
      res->step = r->start_step;
      /* A generation change came between the last step and its summary (elastic: the job
         ends only once the final progress is published after the summary), or this process
         trained the job's steps earlier: finish here (an existing summary stays when this
         process trained nothing). A static rerun over a finished checkpoint changes nothing. */
      if (r->member || tagc_report_steps_run(&r->report) > 0)
        st = finish_job(r, r->start_step, res);
    } else {
      if (r->member)
        st = tagc_member_ready(r->member, r->gen, r->rank);
      if (st == TAGC_OK)
        st = train(r, res);
    }
  } else if (st == TAGC_ETIMEDOUT || st == TAGC_EPEER || st == TAGC_EABORTED || st == TAGC_ENOMEM ||
             st == TAGC_ECONFLICT) {
    /* peers vanished while we connected, OOM, or the ranks chose different resume points */
    fail_generation(r, st, r->start_step, res);
    st = TAGC_OK;
  }
  tagc_error_saved first; /* the tear-down must not replace the detail of st */
  tagc_error_save(&first);
  gen_end(r);
  publish_sample(r, res->step, NULL);
  tagc_error_restore(&first);
  return st;
}
