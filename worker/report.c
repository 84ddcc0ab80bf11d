#include "report.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/json.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "engine/policy.h"
#include "worker/history.h"

void tagc_report_init(tagc_report *rp, const tagc_report_config *c) {
  memset(rp, 0, sizeof *rp);
  rp->c = *c;
  rp->first_step = -1;
  tagc_device_get_info(c->device, &rp->dev_info);
  if (c->http) { /* the job label from the first scrape on */
    rp->sample = tagc_worker_sample_empty();
    rp->sample.job = c->cfg->job;
    tagc_metrics_http_publish(c->http, &rp->sample);
  }
  rp->loss = rp->val = NAN;
  rp->t0 = tagc_now();
  rp->last_print = -1e9;
}

void tagc_report_free(tagc_report *rp) {
  free(rp->tt.step_s);
  rp->tt.step_s = NULL;
  rp->tt.n_times = rp->tt.step_cap = 0;
  if (rp->metrics)
    fclose(rp->metrics);
  rp->metrics = NULL;
}

void tagc_report_set_progress(tagc_report *rp, tagc_report_progress_fn fn, void *ctx) {
  rp->progress = fn;
  rp->progress_ctx = ctx;
}

void tagc_report_generation(tagc_report *rp, int64_t gen, int rank, int world) {
  rp->gen = gen;
  rp->rank = rank;
  rp->world = world;
  rp->has_ranks = 0;
}

void tagc_report_ranks(tagc_report *rp, const tagc_straggler_step *s, const double *compute_s,
                       const char *straggler_worker) {
  if (s->straggler >= 0 && (!rp->has_ranks || rp->ranks.straggler != s->straggler))
    rp->straggler_since = tagc_now();
  rp->has_ranks = 1;
  rp->ranks = *s;
  rp->n_compute = rp->world <= TAGC_RANK_GAUGES ? rp->world : 0;
  memcpy(rp->compute, compute_s, (size_t)rp->n_compute * sizeof(double));
  snprintf(rp->straggler_worker, sizeof rp->straggler_worker, "%s",
           s->straggler >= 0 && straggler_worker ? straggler_worker : "");
}

/* The ranks' compute times for a metrics line or the progress record: the maximum, the median
 * and the slowest rank, each rank's (world <= TAGC_RANK_GAUGES), the straggler while one is
 * named. */
static void ranks_json(const tagc_report *rp, json_t *m) {
  if (!rp->has_ranks)
    return;
  const tagc_straggler_step *s = &rp->ranks;
  json_object_update_new(m, json_pack("{s:f, s:f, s:i}", "compute_s_max", s->max,
                                      "compute_s_median", s->median, "slowest_rank", s->slowest));
  if (rp->n_compute > 0) {
    json_t *list = json_array();
    for (int r = 0; list && r < rp->n_compute; r++)
      json_array_append_new(list, json_real(rp->compute[r]));
    json_object_set_new(m, "compute_s", list);
  }
  if (s->straggler < 0)
    return;
  json_object_update_new(m, json_pack("{s:i, s:f}", "straggler", s->straggler, "straggler_ratio",
                                      s->straggler_ratio));
  if (rp->straggler_worker[0])
    json_object_set_new(m, "straggler_worker", json_string(rp->straggler_worker));
}

/* OUT/.summary-reserve: TAGC_SUMMARY_RESERVE bytes of zeros that rank 0 keeps in OUT, so
 * that summary.json can still be written when the disk filled up during the run (its writer
 * removes the reserve and tries again). Best effort: without the room for it, nothing. */
#define TAGC_SUMMARY_RESERVE (64 * 1024)

static void reserve_path(const tagc_report *rp, char *path, size_t cap) {
  snprintf(path, cap, "%s/.summary-reserve", rp->c.cfg->out);
}

static void make_reserve(const tagc_report *rp) {
  char path[4200];
  reserve_path(rp, path, sizeof path);
  struct stat st;
  if (stat(path, &st) == 0 && st.st_size >= TAGC_SUMMARY_RESERVE)
    return;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  static const char zeros[4096];
  int ok = 1;
  for (size_t done = 0; ok && done < TAGC_SUMMARY_RESERVE; done += sizeof zeros)
    ok = write(fd, zeros, sizeof zeros) == (ssize_t)sizeof zeros; /* blocks, not a sparse file */
  ok = fsync(fd) == 0 && ok;
  close(fd);
  if (!ok) {
    unlink(path);
    LOG_DEBUG("train", "no room for %s: summary.json has no reserve", path);
  }
}

tagc_status tagc_report_open_metrics(tagc_report *rp, int64_t start_step) {
  if (rp->first_step < 0)
    rp->first_step = start_step;
  if (rp->rank != 0 || rp->metrics)
    return TAGC_OK;
  make_reserve(rp);
  char path[4200];
  snprintf(path, sizeof path, "%s/metrics.jsonl", rp->c.cfg->out);
  rp->metrics = fopen(path, start_step > 0 ? "a" : "w");
  if (!rp->metrics)
    return tagc_errorf(TAGC_EIO, "%s: %s", path, strerror(errno));
  return TAGC_OK;
}

void tagc_report_end_generation(tagc_report *rp) {
  if (rp->rank != 0 && rp->metrics) {
    fclose(rp->metrics);
    rp->metrics = NULL;
  }
}

static double step_tokens(const tagc_report *rp) {
  return (double)rp->c.cfg->batch * (double)rp->c.cfg->ctx;
}

/* The tokens of this rank's share of a batch (the split of worker/run.c). */
static double rank_tokens(const tagc_report *rp) {
  int64_t b = rp->c.cfg->batch, w = rp->world > 0 ? rp->world : 1, r = rp->rank > 0 ? rp->rank : 0;
  return (double)((b * (r + 1)) / w - (b * r) / w) * (double)rp->c.cfg->ctx;
}

/* summary.json's goodput with the job at step `step`: the steps this process committed since
 * its first generation started, at its median step time, over its wall time. NaN before a
 * step. Reorders tt.step_s. */
static double goodput(tagc_report *rp, int64_t step, int64_t first) {
  const tagc_report_totals *tt = &rp->tt;
  double wall = tagc_now() - rp->t0;
  if (tt->n_times == 0 || wall <= 0)
    return NAN;
  double median = tagc_select_kth(tt->step_s, tt->n_times, tt->n_times / 2);
  double g = step > first ? (double)(step - first) * median / wall : 0.0;
  /* a ratio in [0, 1]: on a loaded machine the median step can exceed the mean (a few much
     faster steps), which would put the estimate above the wall time itself */
  return g > 1 ? 1.0 : g;
}

void tagc_report_step(tagc_report *rp, const tagc_step_stats *ss) {
  if (isfinite(ss->loss)) /* a step skipped for a non-finite loss keeps the last one */
    rp->loss = ss->loss;
  tagc_report_totals *tt = &rp->tt;
  if (tt->n_times == tt->step_cap) {
    int64_t cap = tt->step_cap ? 2 * tt->step_cap : 1024;
    double *p = realloc(tt->step_s, (size_t)cap * sizeof(double));
    if (p) { /* else the median leaves the later steps out */
      tt->step_s = p;
      tt->step_cap = cap;
    }
  }
  if (tt->n_times < tt->step_cap)
    tt->step_s[tt->n_times++] = ss->step_s;
  tt->steps++;
  tt->tokens += step_tokens(rp);
  tt->bytes_sent += (double)ss->bytes_sent;
  tt->comm_s += ss->comm_s;
  tt->exposed_s += ss->exposed_comm_s;
  tt->unpeeled += (double)ss->unpeeled;
  tt->tagc_elements += (double)ss->tagc_elements;
  tt->density += ss->global_density;
  tt->rho += ss->rho;
  tt->coverage += ss->sketch_coverage;
  for (int m = 0; m < TAGC_ENC_COUNT; m++)
    tt->paths[m] += ss->path_fraction[m];
  tt->resharded += ss->reshard;
  tt->mirror_s += ss->mirror_s;
  tt->mirror_bytes += (double)ss->mirror_bytes;
}

void tagc_report_val_loss(tagc_report *rp, double val_loss) { rp->val = val_loss; }

int64_t tagc_report_steps_run(const tagc_report *rp) { return rp->tt.steps; }

/* ---------- the progress line and metrics.jsonl ---------- */

/* Seconds to train `left` more steps at the rate since this process's first step (start-up,
 * the first step's warm-up and a recovery's pause before it are not steps); after one step,
 * that step's time. */
static double eta_s(const tagc_report *rp, int64_t left, double step_s) {
  double since = tagc_now() - rp->t_first;
  int64_t steps = rp->tt.steps - rp->steps_first;
  double per_step = steps > 0 && since > 0 ? since / (double)steps : step_s;
  return left > 0 && per_step > 0 ? per_step * (double)left : 0.0;
}

/* The first step this process finished starts the ETA's clock (eta_s). */
static void mark_first_step(tagc_report *rp) {
  if (rp->t_first > 0)
    return;
  rp->t_first = tagc_now();
  rp->steps_first = rp->tt.steps;
}

static void print_progress(const tagc_report *rp, int64_t step, double step_s, double val_loss) {
  double elapsed = tagc_now() - rp->t0;
  char el[32], eta[32];
  int64_t done = step + 1, steps = rp->c.cfg->steps;
  tagc_format_duration(elapsed, el, sizeof el);
  tagc_format_duration(eta_s(rp, steps - done, step_s), eta, sizeof eta);
  char val[32] = "", ckpt[128] = "";
  if (!isnan(val_loss))
    snprintf(val, sizeof val, " val %.4f", val_loss);
  const tagc_worker_sample *m = &rp->sample;
  if (m->ckpt_failed_in_a_row > 0) { /* saves failing: how old the protection is */
    char age[32];
    tagc_format_duration(tagc_now() - (m->ckpt_time > 0 ? m->ckpt_time : rp->t0), age,
                         sizeof age);
    if (m->ckpt_last_step >= 0)
      snprintf(ckpt, sizeof ckpt, "  CHECKPOINTS FAILING (%lld in a row; last good step %lld, "
               "%s ago)", (long long)m->ckpt_failed_in_a_row, (long long)m->ckpt_last_step, age);
    else
      snprintf(ckpt, sizeof ckpt, "  CHECKPOINTS FAILING (%lld in a row; none good in %s)",
               (long long)m->ckpt_failed_in_a_row, age);
  }
  printf("step %lld/%lld  loss %.4f%s  %.0f tok/s  workers %d  elapsed %s  eta %s%s\n",
         (long long)done, (long long)steps, rp->loss, val, rp->tt.tokens / elapsed, rp->world,
         el, eta, ckpt);
  fflush(stdout);
}

/* CRC32C of the window starts of global batch `step`: identifies the batch sequence, which
 * must not depend on world size, failures or restarts. */
static uint32_t batch_crc(const tagc_report *rp, int64_t step) {
  const tagc_train_config *cfg = rp->c.cfg;
  uint32_t crc = 0;
  for (int64_t i = 0; i < cfg->batch; i++) {
    uint64_t start = tagc_sample_start((uint64_t)cfg->seed, step, i, rp->c.corpus->n_train,
                                       (size_t)cfg->ctx + 1);
    crc = tagc_crc32c(crc, &start, sizeof start);
  }
  return crc;
}

/* {"sketch": x, "bf16": y, "fp32": z}: the fractions of gradient elements sent each way,
 * from sums over n steps. */
static json_t *paths_json(const double *sums, double n) {
  json_t *o = json_object();
  for (int m = 0; o && m < TAGC_ENC_COUNT; m++)
    json_object_set_new(o, tagc_encoding_name((tagc_encoding)m), json_real(sums[m] / n));
  return o;
}

static void write_metrics(tagc_report *rp, int64_t step, const tagc_step_stats *step_ss,
                          double val_loss) {
  tagc_step_stats finite = *step_ss, *ss = &finite; /* a skipped step's NaN: null below */
  if (!isfinite(ss->loss))
    ss->loss = 0;
  if (!isfinite(ss->grad_norm))
    ss->grad_norm = 0;
  json_t *m = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:I, s:i, s:I}",
                        "step", (json_int_t)(step + 1), "loss", ss->loss, "grad_norm",
                        ss->grad_norm, "lr", ss->lr, "step_s", ss->step_s, "tokens_per_s",
                        step_tokens(rp) / ss->step_s, "elapsed_s", tagc_now() - rp->t0,
                        "bytes_sent", (json_int_t)ss->bytes_sent, "comm_s", ss->comm_s,
                        "exposed_comm_s", ss->exposed_comm_s, "global_density",
                        ss->global_density, "rho", ss->rho, "unpeeled",
                        (json_int_t)ss->unpeeled, "world_size", rp->world, "generation",
                        (json_int_t)rp->gen);
  if (!m)
    return;
  if (!isnan(val_loss))
    json_object_set_new(m, "val_loss", json_real(val_loss));
  if (rp->c.cfg->check_feedback)
    json_object_set_new(m, "feedback_error", json_real(ss->feedback_error));
  json_object_set_new(m, "sketch_coverage", json_real(ss->sketch_coverage));
  json_object_set_new(m, "paths", paths_json(ss->path_fraction, 1));
  if (ss->gather)
    json_object_set_new(m, "gather", json_string(ss->gather));
  json_object_set_new(m, "reshard", json_boolean(ss->reshard));
  if (ss->mirror_bytes) /* this step's in-memory copy (also in step_s) */
    json_object_update_new(m, json_pack("{s:I, s:f}", "mirror_bytes",
                                        (json_int_t)ss->mirror_bytes, "mirror_s", ss->mirror_s));
  json_object_set_new(m, "batch_crc32c", json_integer(batch_crc(rp, step)));
  json_object_set_new(m, "nonfinite_skips", json_integer(ss->nonfinite));
  ranks_json(rp, m);
  if (!isfinite(step_ss->loss))
    json_object_set_new(m, "loss", json_null());
  if (!isfinite(step_ss->grad_norm))
    json_object_set_new(m, "grad_norm", json_null());
  char *row = json_dumps(m, JSON_COMPACT);
  json_decref(m);
  if (!row)
    return;
  /* "time" last, in milliseconds exactly (a JSON real would print 17 digits); the whole line
     in one write, or none of it (a full disk): a reader never finds a line cut short */
  size_t cap = strlen(row) + 32;
  char *line = malloc(cap);
  int n = line ? snprintf(line, cap, "%.*s,\"time\":%.3f}\n", (int)strlen(row) - 1, row,
                          tagc_wall_time()) : -1;
  free(row);
  static int failing; /* warned once per run of failed lines */
  char path[4200];
  snprintf(path, sizeof path, "%s/metrics.jsonl", rp->c.cfg->out);
  if (n > 0 && (size_t)n < cap &&
      tagc_append_whole(fileno(rp->metrics), line, (size_t)n, path) != TAGC_OK) {
    if (!failing)
      LOG_WARN("train", "%s; its lines are left out until it can be written", tagc_last_error());
    failing = 1;
  } else if (n > 0 && failing) {
    LOG_INFO("train", "%s is written again from step %lld", path, (long long)(step + 1));
    failing = 0;
  }
  free(line);
}

void tagc_report_metrics_line(tagc_report *rp, int64_t step, const tagc_step_stats *ss,
                              double val_loss, int force) {
  write_metrics(rp, step, ss, val_loss);
  mark_first_step(rp);
  double now = tagc_now();
  if (force || !isnan(val_loss) || now - rp->last_print >= 1.0) {
    print_progress(rp, step, ss->step_s, val_loss);
    rp->last_print = now;
  }
}

/* ---------- etcd progress and /metrics ---------- */

void tagc_report_progress(tagc_report *rp, int64_t step, const tagc_step_stats *ss, int force) {
  double now = tagc_now();
  if (!rp->progress || rp->rank != 0 || (!force && now - rp->last_progress < 1.0))
    return;
  if (!force && step + 1 >= rp->c.cfg->steps)
    return;
  rp->last_progress = now;
  double tokens_per_s = ss->step_s > 0 ? step_tokens(rp) / ss->step_s : 0;
  int64_t done = step + 1, left = rp->c.cfg->steps - done;
  mark_first_step(rp);
  double eta = eta_s(rp, left, ss->step_s);
  json_t *p = json_pack("{s:I, s:I, s:f, s:f, s:f, s:I, s:i, s:I, s:i}", "step", (json_int_t)done,
                        "steps", (json_int_t)rp->c.cfg->steps, "eta_s", left > 0 ? eta : 0.0,
                        "loss", isfinite(ss->loss) ? ss->loss : 0.0, "tokens_per_s", tokens_per_s,
                        "bytes_per_step", (json_int_t)ss->bytes_sent, "world_size", rp->world,
                        "generation", (json_int_t)rp->gen, "recoveries", rp->recoveries);
  if (p && rp->first_step >= 0) /* the coordinator's tagc_coordinator_goodput_ratio */
    json_object_set_new(p, "goodput", json_real(goodput(rp, done, rp->first_step)));
  if (p) { /* tagctl status: the slowest rank, the straggler and how long it has been one */
    ranks_json(rp, p);
    if (rp->has_ranks && rp->ranks.straggler >= 0)
      json_object_set_new(p, "straggler_s", json_real(now - rp->straggler_since));
  }
  if (p && rp->progress(rp->progress_ctx, p) != TAGC_OK)
    LOG_WARN("train", "progress not recorded: %s", tagc_last_error());
  json_decref(p);
}

/* Folds the checkpoint saver's counts into the sample: a new saver (a new generation) starts
 * from zero, so the previous one's last counts move into the totals. */
static void sample_checkpoints(tagc_report *rp, tagc_ckpt_saver *saver) {
  tagc_worker_sample *m = &rp->sample;
  tagc_ckpt_saver_stats cs;
  if (saver)
    tagc_ckpt_saver_stats_get(saver, &cs);
  /* a saver at the address of the previous one starts from zero, too */
  if (saver != rp->saver_seen || (saver && cs.saves_done < rp->saver_done)) {
    rp->saves_before += rp->saver_done;
    rp->failed_before += rp->saver_failed;
    rp->saver_done = rp->saver_failed = 0;
    rp->saver_seen = saver;
  }
  if (!saver)
    return;
  if (cs.saves_done > rp->saver_done) { /* a save finished since the last sample */
    m->ckpt_write_s = cs.last_write_s;
    if (cs.last_status == TAGC_OK && cs.last_step >= 0) {
      m->ckpt_last_step = cs.last_step;
      m->ckpt_time = tagc_now();
    }
  }
  rp->saver_done = cs.saves_done;
  rp->saver_failed = cs.saves_failed;
  m->ckpt_failed_in_a_row = cs.failed_in_a_row;
  m->ckpt_saves = rp->saves_before + cs.saves_done;
  m->ckpt_failures = rp->failed_before + cs.saves_failed;
}

static void sample_step(tagc_report *rp, const tagc_step_stats *ss) {
  tagc_worker_sample *m = &rp->sample;
  m->loss = ss->loss;
  m->step_s = ss->step_s;
  m->tokens_per_s = step_tokens(rp) / ss->step_s;
  m->steps_total++;
  m->tokens_total += rank_tokens(rp);
  m->bytes_sent += ss->bytes_sent;
  m->bytes_recv += ss->bytes_recv;
  m->lr = ss->lr;
  m->grad_norm = ss->grad_norm;
  m->sketch_coverage = ss->sketch_coverage;
  m->reshard = ss->reshard;
  tagc_worker_sample_observe_step(m, ss->step_s);
}

void tagc_report_sample(tagc_report *rp, int64_t steps_done, const tagc_step_stats *ss,
                        const tagc_recovery_counts *rec, const tagc_comm *comm,
                        tagc_ckpt_saver *saver) {
  rp->recoveries = rec->recoveries;
  sample_checkpoints(rp, saver); /* the progress line shows failing saves, too */
  if (!rp->c.http)
    return;
  tagc_worker_sample *m = &rp->sample;
  if (ss)
    sample_step(rp, ss);
  m->job = rp->c.cfg->job;
  m->val_loss = rp->val;
  m->step = steps_done;
  m->failures = rec->failures;
  m->recoveries = rec->recoveries;
  m->steps_lost = rec->steps_lost;
  m->max_recovery_s = rec->max_recovery_s;
  m->last_recovery_s = rec->last_recovery_s;
  m->recovering = rec->recovering;
  m->nonfinite_skips = rec->nonfinite_skips;
  m->generation = rp->gen;
  m->world_size = rp->world;
  m->rank = rp->rank;
  double now = tagc_now(); /* the median costs O(steps): at most once a second */
  if (rp->first_step >= 0 && (now - rp->goodput_at >= 1.0 || !ss)) {
    m->goodput = goodput(rp, steps_done, rp->first_step);
    rp->goodput_at = now;
  }
  if (comm)
    m->link_rate = tagc_comm_link_rate(tagc_comm_backend_of(comm));
  if (ss && rp->has_ranks) {
    m->n_compute = rp->n_compute;
    memcpy(m->compute_ranks, rp->compute, (size_t)rp->n_compute * sizeof(double));
    m->compute_max = rp->ranks.max;
    m->compute_median = rp->ranks.median;
    m->slowest_rank = rp->ranks.slowest;
    m->straggler_rank = rp->ranks.straggler;
    m->straggler_ratio = rp->ranks.straggler_ratio;
  }
  tagc_metrics_http_publish(rp->c.http, m);
}

/* ---------- summary.json ---------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Where this worker computed, and its model FLOPs utilisation at the median step when the
 * device's peak is known (the whole job's tokens over all its devices' peaks). */
static json_t *device_json(const tagc_report *rp, double tokens_per_s) {
  const tagc_device_info *d = &rp->dev_info;
  uint64_t cur, peak;
  tagc_device_usage(rp->c.device, &cur, &peak);
  double flops = tokens_per_s * tagc_model_flops_per_token(rp->c.layout);
  json_t *j = json_pack("{s:s, s:i, s:s, s:s, s:f, s:I, s:I}", "kind", d->kind, "index", d->index,
                        "name", d->name, "compute", rp->c.cfg->compute, "model_tflops_per_s",
                        flops / 1e12, "engine_bytes_peak", (json_int_t)peak, "total_bytes",
                        (json_int_t)d->total_bytes);
  if (j)
    json_object_set_new(j, "mfu", d->peak_tflops > 0
                                      ? json_real(flops / (d->peak_tflops * 1e12 * rp->world))
                                      : json_null());
  return j;
}

/* The rows of OUT/metrics.jsonl whose step is at or below that of a row before them: the
 * steps recomputed over the whole OUT (every process and run since it started at step 0),
 * or -1 when the file cannot be read. */
static int64_t recomputed_steps(tagc_report *rp) {
  if (rp->metrics)
    fflush(rp->metrics);
  char path[4200];
  snprintf(path, sizeof path, "%s/metrics.jsonl", rp->c.cfg->out);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  char *line = NULL;
  size_t cap = 0;
  int64_t max = -1, n = 0;
  while (getline(&line, &cap, f) > 0) {
    const char *at = strstr(line, "\"step\":");
    if (!at)
      continue;
    int64_t step = strtoll(at + 7, NULL, 10);
    if (step <= max)
      n++;
    else
      max = step;
  }
  free(line);
  fclose(f);
  return n;
}

/* The job's failure figures: over the whole OUT in elastic mode (history.jsonl counts each
 * failure once, whichever processes saw it; metrics.jsonl the steps recomputed), this
 * process's under "process" (what /metrics serves). */
static void failure_figures(tagc_report *rp, json_t *s, const json_t *hist,
                            const tagc_recovery_counts *rec) {
  int elastic = *rp->c.cfg->etcd != '\0';
  json_int_t failures = rec->failures, recoveries = rec->recoveries;
  if (elastic && hist) {
    failures = json_integer_value(json_object_get(hist, "failures"));
    recoveries = json_integer_value(json_object_get(hist, "recoveries"));
  }
  int64_t lost = recomputed_steps(rp);
  json_object_set_new(s, "failures", json_integer(failures));
  json_object_set_new(s, "recoveries", json_integer(recoveries));
  json_object_set_new(s, "steps_lost", json_integer(lost >= 0 ? lost : rec->steps_lost));
  json_object_set_new(s, "process", json_pack("{s:i, s:i, s:I}", "failures", rec->failures,
                                              "recoveries", rec->recoveries, "steps_lost",
                                              (json_int_t)rec->steps_lost));
}

static tagc_status write_summary(tagc_report *rp, const tagc_report_final *f, const char *path) {
  const tagc_train_config *cfg = rp->c.cfg;
  const tagc_report_totals *tt = &rp->tt;
  const tagc_recovery_counts *rec = f->recovery;
  double n = tt->steps ? (double)tt->steps : 1, wall = tagc_now() - rp->t0;
  int64_t first = rp->first_step >= 0 ? rp->first_step : f->resumed_from;
  double good = goodput(rp, f->step, first);
  qsort(tt->step_s, (size_t)tt->n_times, sizeof(double), cmp_double);
  double median = tt->n_times ? tt->step_s[tt->n_times / 2] : 0;
  json_t *s = json_pack(
      "{s:I, s:f, s:f, s:f, s:f, s:i, s:s, s:s, s:i, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
      "steps", (json_int_t)f->step, "final_train_loss", isnan(rp->loss) ? 0.0 : rp->loss,
      "final_val_loss", isnan(rp->val) ? 0.0 : rp->val, "tokens_per_s", tt->tokens / wall,
      "wall_s", wall, "world_size", rp->world, "compress", cfg->compress, "blas",
      openblas_get_config(), "threads", rp->c.threads, "params",
      (json_int_t)rp->c.layout->n_params, "seed", (json_int_t)cfg->seed, "params_crc32c",
      (json_int_t)f->params_crc32c, "bytes_sent_per_step", tt->bytes_sent / n,
      "comm_s_per_step", tt->comm_s / n, "exposed_comm_s_per_step", tt->exposed_s / n,
      "step_s_median", median, "unpeeled_fraction",
      tt->tagc_elements > 0 ? tt->unpeeled / tt->tagc_elements : 0.0, "global_density",
      tt->density / n, "rho", tt->rho / n);
  if (!s)
    return tagc_errorf(TAGC_ENOMEM, "summary");
  json_object_set_new(s, "sketch_coverage", json_real(tt->coverage / n));
  json_object_set_new(s, "paths", paths_json(tt->paths, n));
  tagc_compress_policy pol; /* the gather encoding in effect ("auto": metrics.jsonl has each step's) */
  tagc_encoding gather;
  int gather_auto;
  if (tagc_policy_parse(cfg->compress, &pol) == TAGC_OK &&
      tagc_policy_gather(cfg->gather, &pol, &gather, &gather_auto) == TAGC_OK)
    json_object_set_new(s, "gather", json_string(gather_auto ? "auto" : tagc_encoding_name(gather)));
  json_object_set_new(s, "reshard_after_forward", json_string(cfg->reshard_after_forward));
  json_object_set_new(s, "resharded_fraction", json_real(tt->resharded / n));
  if (isnan(rp->loss)) /* no step of the job ran in this process */
    json_object_set_new(s, "final_train_loss", json_null());
  if (isnan(rp->val)) /* no evaluation completed in this process */
    json_object_set_new(s, "final_val_loss", json_null());
  json_object_set_new(s, "end", json_string(f->end));
  json_object_set_new(s, "steps_this_run", json_integer(tt->steps));
  json_object_set_new(s, "resumed_from", json_integer(f->resumed_from));
  json_object_set_new(s, "generation", json_integer(rp->gen));
  json_object_set_new(s, "device", device_json(rp, median > 0 ? step_tokens(rp) / median : 0));
  json_object_set_new(s, "max_recovery_s", json_real(rec->max_recovery_s));
  json_object_set_new(s, "max_pause_s", json_real(rec->max_pause_s));
  json_object_set_new(s, "max_regain_s", json_real(rec->max_regain_s));
  /* the fault-free time of the steps this process committed (at the median step time) over
     its wall time: what the failures, restarts and start-up cost */
  json_object_set_new(s, "goodput", json_real(isnan(good) ? 0.0 : good));
  json_object_set_new(s, "nonfinite_skips", json_integer(rec->nonfinite_skips));
  json_object_set_new(s, "nonfinite_rollbacks", json_integer(rec->rollbacks));
  json_object_set_new(s, "memory_rebuilds", json_integer(rec->memory_rebuilds));
  json_object_set_new(s, "mirror_bytes_per_step", json_real(tt->mirror_bytes / n));
  json_object_set_new(s, "mirror_s_per_step", json_real(tt->mirror_s / n));
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0) /* this process's peak resident memory */
    json_object_set_new(s, "peak_rss_bytes", json_integer((json_int_t)ru.ru_maxrss * 1024));
  json_object_set_new(s, "disk_fallbacks", json_integer(rec->disk_fallbacks));
  json_object_set(s, "model", f->model);
  tagc_history hist; /* the whole OUT's failures, joins, interrupts...: OUT/history.jsonl */
  json_t *counts = NULL;
  if (tagc_history_read(cfg->out, &hist) == TAGC_OK) {
    counts = tagc_history_counts(&hist);
    json_object_set(s, "history", counts);
    tagc_history_free(&hist);
  } else {
    LOG_WARN("train", "summary without history: %s", tagc_last_error());
  }
  failure_figures(rp, s, counts, rec);
  json_decref(counts);
  if (f->ckpt)
    json_object_set_new(s, "ckpt", json_pack("{s:I, s:I, s:I, s:f, s:f}", "saves",
                                             (json_int_t)f->ckpt->saves_done, "failed",
                                             (json_int_t)f->ckpt->saves_failed,
                                             "backpressure_waits",
                                             (json_int_t)f->ckpt->backpressure_waits,
                                             "last_write_s", f->ckpt->last_write_s,
                                             "last_stall_s", f->ckpt->last_stall_s));
  tagc_status st = tagc_json_write_file(path, s);
  char reserve[4200];
  reserve_path(rp, reserve, sizeof reserve);
  if (st != TAGC_OK && unlink(reserve) == 0) { /* a full disk: the reserve makes the room */
    LOG_WARN("train", "%s (%s): writing it into the room of %s", path, tagc_last_error(), reserve);
    tagc_clear_error();
    st = tagc_json_write_file(path, s);
  }
  json_decref(s);
  return st;
}

tagc_status tagc_report_finish(tagc_report *rp, const tagc_report_final *f) {
  char path[4200];
  snprintf(path, sizeof path, "%s/summary.json", rp->c.cfg->out);
  if (rp->tt.steps == 0 && access(path, F_OK) == 0) {
    LOG_INFO("train", "the checkpoint is final and %s exists: kept", path);
    return TAGC_OK;
  }
  TAGC_CHECK(write_summary(rp, f, path));
  LOG_INFO("train", "%s at step %lld: train loss %.4f, val loss %.4f, %.0f tokens/s",
           strcmp(f->end, "stopped") == 0 ? "stopped (--stop-at)" : f->end, (long long)f->step,
           rp->loss, rp->val,
           rp->tt.tokens / (tagc_now() - rp->t0));
  return TAGC_OK;
}
