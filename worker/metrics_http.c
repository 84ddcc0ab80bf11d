/* The worker's /metrics and /healthz (see metrics_http.h). */
#include "worker/metrics_http.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "cluster/http.h"
#include "cluster/prom.h"

struct tagc_metrics_http {
  tagc_http *http;
  double started;
  pthread_mutex_t mu; /* guards sample */
  tagc_worker_sample sample;
};

const double tagc_step_bounds[TAGC_STEP_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                    2.5, 5, 10, 30, 60, 300};

void tagc_worker_sample_observe_step(tagc_worker_sample *s, double step_s) {
  tagc_prom_observe(tagc_step_bounds, s->step_le, TAGC_STEP_BUCKETS, &s->step_count, &s->step_sum,
                    step_s);
}

tagc_worker_sample tagc_worker_sample_empty(void) {
  return (tagc_worker_sample){.loss = NAN, .rank = -1, .val_loss = NAN, .lr = NAN,
                              .grad_norm = NAN, .sketch_coverage = NAN, .reshard = NAN,
                              .goodput = NAN, .ckpt_last_step = -1, .compute_max = NAN,
                              .compute_median = NAN, .slowest_rank = -1, .straggler_rank = -1};
}

/* The last step, its losses and the step duration histogram. */
static void step_metrics(tagc_prom *p, const tagc_worker_sample *s) {
  tagc_prom_gauge(p, "tagc_worker_step", "Steps completed", (double)s->step);
  tagc_prom_gauge(p, "tagc_worker_loss", "Training loss of the last step", s->loss);
  tagc_prom_gauge(p, "tagc_worker_step_seconds", "Wall time of the last step", s->step_s);
  tagc_prom_counter(p, "tagc_worker_steps_total", "Steps this process ran (a step recomputed "
                    "after a failure counts again)", (double)s->steps_total);
  tagc_prom_counter(p, "tagc_worker_tokens_total", "Tokens of this worker's share of the "
                    "batches of those steps (the sum over workers is the job's)", s->tokens_total);
  tagc_prom_histogram(p, "tagc_worker_step_duration_seconds", "Wall time of the steps this "
                      "process ran", tagc_step_bounds, s->step_le, TAGC_STEP_BUCKETS,
                      s->step_count, s->step_sum);
  tagc_prom_gauge(p, "tagc_worker_tokens_per_second", "Global tokens per second of the last "
                  "step's step_seconds (throughput with pauses: rate of tokens_total)",
                  s->tokens_per_s);
  tagc_prom_gauge(p, "tagc_worker_val_loss", "Validation loss of the latest evaluation (NaN "
                  "before one)", s->val_loss);
  tagc_prom_gauge(p, "tagc_worker_learning_rate", "Learning rate of the last step", s->lr);
  tagc_prom_gauge(p, "tagc_worker_grad_norm", "Global gradient norm of the last step",
                  s->grad_norm);
  tagc_prom_gauge(p, "tagc_worker_sketch_coverage_ratio", "Fraction of the compressed "
                  "gradient elements sent as sketches in the last step", s->sketch_coverage);
  tagc_prom_gauge(p, "tagc_worker_reshard_after_forward", "1 when the last step gathered its "
                  "units again for backward (ZeRO-3), 0 when it kept them", s->reshard);
}

static void recovery_metrics(tagc_prom *p, const tagc_worker_sample *s) {
  tagc_prom_counter(p, "tagc_worker_failures_total", "Failures this worker saw (data path or "
                    "superseded)", (double)s->failures);
  tagc_prom_counter(p, "tagc_worker_recoveries_total", "Failures followed by a completed step",
                    (double)s->recoveries);
  tagc_prom_counter(p, "tagc_worker_steps_lost_total", "Steps recomputed after failures",
                    (double)s->steps_lost);
  tagc_prom_gauge(p, "tagc_worker_max_recovery_seconds", "Longest time from a failure to the "
                  "next completed step", s->max_recovery_s);
  tagc_prom_gauge(p, "tagc_worker_last_recovery_seconds", "Time from the last failure to the "
                  "next completed step", s->last_recovery_s);
  tagc_prom_gauge(p, "tagc_worker_recovering", "1 while a failure awaits its first completed "
                  "step", s->recovering);
  tagc_prom_gauge(p, "tagc_worker_goodput_ratio", "Fault-free time of the steps this process "
                  "committed (at its median step time) over its wall time (NaN before a step)",
                  s->goodput);
  tagc_prom_counter(p, "tagc_worker_nonfinite_skips_total", "Steps every rank skipped for a "
                    "non-finite loss or gradient", (double)s->nonfinite_skips);
}

/* The ranks' compute seconds of the last step and the straggler, if any (worker/straggler.h). */
static void rank_metrics(tagc_prom *p, const tagc_worker_sample *s) {
  if (s->n_compute > 0) {
    tagc_prom_family(p, "tagc_worker_compute_seconds", "gauge", "Each rank's compute seconds "
                     "(forward, backward, optimizer; waits on peers excluded) in the last step");
    for (int r = 0; r < s->n_compute; r++) {
      char label[32];
      snprintf(label, sizeof label, "rank=\"%d\"", r);
      tagc_prom_sample(p, "tagc_worker_compute_seconds", label, s->compute_ranks[r]);
    }
  }
  tagc_prom_gauge(p, "tagc_worker_compute_seconds_max", "The slowest rank's compute seconds in "
                  "the last step", s->compute_max);
  tagc_prom_gauge(p, "tagc_worker_compute_seconds_median", "The ranks' median compute seconds "
                  "in the last step", s->compute_median);
  tagc_prom_gauge(p, "tagc_worker_slowest_rank", "The rank with the most compute seconds in the "
                  "last step (-1: no step yet)", s->slowest_rank);
  tagc_prom_gauge(p, "tagc_worker_slowest_ratio", "Its compute seconds over the median",
                  s->compute_median > 0 ? s->compute_max / s->compute_median : NAN);
  tagc_prom_gauge(p, "tagc_worker_straggler_rank", "The rank persistently slower than the "
                  "others now (docs/operations.md, Stragglers; -1: none)", s->straggler_rank);
  tagc_prom_gauge(p, "tagc_worker_straggler_ratio", "Its compute seconds over the ranks' "
                  "median, the mean over the detection window (0: none)", s->straggler_ratio);
}

/* This process's checkpoint saves; the age counts from the server's start before a save. */
static void checkpoint_metrics(tagc_prom *p, const tagc_worker_sample *s, double started,
                               double now) {
  tagc_prom_gauge(p, "tagc_worker_checkpoint_last_step", "Step of this worker's latest "
                  "successful checkpoint save (-1: none yet)", (double)s->ckpt_last_step);
  double since = s->ckpt_time > 0 ? s->ckpt_time : started;
  tagc_prom_gauge(p, "tagc_worker_checkpoint_age_seconds", "Seconds since this worker's "
                  "latest successful checkpoint save (since start before one)", now - since);
  tagc_prom_gauge(p, "tagc_worker_checkpoint_duration_seconds", "Background write time of "
                  "the latest finished checkpoint save", s->ckpt_write_s);
  tagc_prom_counter(p, "tagc_worker_checkpoint_saves_total", "Checkpoint saves finished (ok or "
                    "failed)", (double)s->ckpt_saves);
  tagc_prom_counter(p, "tagc_worker_checkpoint_failures_total", "Checkpoint saves that failed",
                    (double)s->ckpt_failures);
  tagc_prom_gauge(p, "tagc_worker_checkpoint_failures_in_a_row", "Checkpoint saves that failed "
                  "since the latest good one (0: the latest save is good)",
                  (double)s->ckpt_failed_in_a_row);
}

char *tagc_metrics_text(const tagc_worker_sample *s, double uptime_s, double now) {
  tagc_prom p;
  tagc_prom_init(&p, s->job);
  step_metrics(&p, s);
  tagc_prom_counter(&p, "tagc_worker_bytes_sent_total", "Collective payload bytes this worker "
                    "sent", (double)s->bytes_sent);
  tagc_prom_counter(&p, "tagc_worker_bytes_received_total", "Collective payload bytes this "
                    "worker received", (double)s->bytes_recv);
  recovery_metrics(&p, s);
  tagc_prom_gauge(&p, "tagc_worker_generation", "Generation this worker runs or last ran",
                  (double)s->generation);
  tagc_prom_gauge(&p, "tagc_worker_world_size", "Workers in that generation", s->world_size);
  tagc_prom_gauge(&p, "tagc_worker_rank", "This worker's rank in that generation (-1: none "
                  "yet)", s->rank);
  tagc_prom_gauge(&p, "tagc_worker_link_rate_bytes_per_second", "Measured link rate the "
                  "collective deadlines use (0: not measured yet)", s->link_rate);
  rank_metrics(&p, s);
  checkpoint_metrics(&p, s, now - uptime_s, now);
  tagc_prom_gauge(&p, "tagc_worker_uptime_seconds", "Seconds since the metrics server started",
                  uptime_s);
  tagc_prom_common(&p, "tagc-worker");
  return tagc_prom_finish(&p);
}

static void serve(void *arg, const char *path, tagc_http_response *resp) {
  tagc_metrics_http *m = arg;
  pthread_mutex_lock(&m->mu);
  tagc_worker_sample s = m->sample;
  pthread_mutex_unlock(&m->mu);
  if (strcmp(path, "/metrics") == 0) {
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    double now = tagc_now();
    resp->body = tagc_metrics_text(&s, now - m->started, now);
    if (!resp->body)
      resp->status = 500;
  } else if (strcmp(path, "/healthz") == 0) {
    char line[160];
    if (s.rank >= 0)
      snprintf(line, sizeof line, "ok: generation %lld, rank %d of %d, step %lld\n",
               (long long)s.generation, s.rank, s.world_size, (long long)s.step);
    else
      snprintf(line, sizeof line, "ok: waiting for a generation\n");
    resp->body = strdup(line);
    resp->status = resp->body ? 200 : 500;
  } else {
    resp->body = strdup("not found: try /metrics or /healthz\n");
  }
}

tagc_status tagc_metrics_http_start(const char *addr, const char *job, tagc_metrics_http **out) {
  *out = NULL;
  tagc_metrics_http *m = calloc(1, sizeof *m);
  if (!m)
    return tagc_errorf(TAGC_ENOMEM, "metrics server");
  m->started = tagc_now();
  m->sample = tagc_worker_sample_empty();
  m->sample.job = job; /* labelled from the first scrape, before the first sample */
  pthread_mutex_init(&m->mu, NULL);
  tagc_status st = tagc_http_start(addr, serve, m, &m->http);
  if (st != TAGC_OK) {
    char detail[256];
    snprintf(detail, sizeof detail, "%s", tagc_last_error());
    /* an address this host cannot listen on is the option's fault (exit 2, not restarted:
     * the same address fails again), not an I/O failure of the run */
    st = tagc_errorf(st == TAGC_EIO ? TAGC_EINVAL : st, "--metrics-addr: %s", detail);
    pthread_mutex_destroy(&m->mu);
    free(m);
    return st;
  }
  *out = m;
  return TAGC_OK;
}

int tagc_metrics_http_port(const tagc_metrics_http *m) {
  return tagc_http_port(m->http);
}

void tagc_metrics_http_publish(tagc_metrics_http *m, const tagc_worker_sample *s) {
  pthread_mutex_lock(&m->mu);
  m->sample = *s;
  pthread_mutex_unlock(&m->mu);
}

void tagc_metrics_http_stop(tagc_metrics_http *m) {
  if (!m)
    return;
  tagc_http_stop(m->http);
  pthread_mutex_destroy(&m->mu);
  free(m);
}
