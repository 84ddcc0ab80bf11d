/* A worker's own HTTP endpoints (--metrics-addr): /metrics in the Prometheus text format and
 * /healthz, over coordinator/http.h.
 *
 * The training loop owns a tagc_worker_sample and hands a copy to the server whenever it
 * changes (after a step, at a generation's start and end); the server keeps the copy under a
 * mutex and renders each scrape from it, so a scrape never waits on training and never reads
 * a half-updated sample. Every sample carries the label tagc_job="<--job>" ("default" unless
 * given). Metrics (prefixed tagc_worker_ unless said otherwise):
 *   step, loss, step_seconds, tokens_per_second         the last completed step
 *   steps_total, tokens_total                            steps this process ran, its share of
 *                                                        their tokens (sum over workers = job)
 *   step_duration_seconds (histogram)                    every step of the process
 *   goodput_ratio                                        as summary.json's goodput, so far
 *   val_loss, learning_rate, grad_norm                    latest evaluation / step
 *   sketch_coverage_ratio                                 fraction sent as sketches, last step
 *   reshard_after_forward                                 1: the last step gathered twice
 *   bytes_sent_total, bytes_received_total               collective payload over the process
 *   failures_total, recoveries_total, steps_lost_total   recovery accounting (as summary.json)
 *   max_recovery_seconds, last_recovery_seconds          failure -> first completed step
 *   recovering                                           1 while a failure awaits recovery
 *   nonfinite_skips_total                                steps skipped: non-finite gradient
 *   generation, world_size, rank                         the current (or last) generation
 *   link_rate_bytes_per_second                           the comm layer's measured link rate
 *   compute_seconds{rank="r"}                            each rank's compute seconds in the
 *                                                        last step (world <= 64)
 *   compute_seconds_max, compute_seconds_median,         over the ranks, last step; the slowest
 *   slowest_rank, slowest_ratio                          rank and its max / median
 *   straggler_rank, straggler_ratio                      the rank named a straggler now (-1:
 *                                                        none) and its window mean ratio
 *   checkpoint_last_step, checkpoint_age_seconds,        this process's latest good save, the
 *   checkpoint_duration_seconds,                         seconds since it (since the server
 *   checkpoint_saves_total, checkpoint_failures_total    started before one), its write time
 *   uptime_seconds                                       since the server started
 *   process_*, tagc_build_info, tagc_etcd_*              cluster/prom.h
 * /healthz answers 200 "ok" with the generation and rank while the process runs. */
#ifndef TAGC_WORKER_METRICS_HTTP_H
#define TAGC_WORKER_METRICS_HTTP_H

#include <stdint.h>

#include "common/status.h"

/* Ranks whose compute seconds are served one by one (a rank label each). */
#define TAGC_RANK_GAUGES 64

/* Upper bounds (seconds) of the step duration histogram's buckets. */
#define TAGC_STEP_BUCKETS 13
extern const double tagc_step_bounds[TAGC_STEP_BUCKETS];

typedef struct tagc_worker_sample {
  int64_t step;         /* steps completed (the next step's index) */
  double loss;          /* NaN before the first step */
  double step_s;
  double tokens_per_s;
  uint64_t bytes_sent;  /* totals over the process */
  uint64_t bytes_recv;
  int64_t failures, recoveries, steps_lost;
  double max_recovery_s, last_recovery_s;
  int recovering;       /* a failure awaits its first completed step */
  int64_t generation;
  int world_size, rank; /* rank -1 while in no generation */
  double link_rate;     /* bytes/s, 0 before the first measurement */
  const char *job;      /* borrowed, outlives the server; NULL: "" */
  double val_loss, lr, grad_norm, sketch_coverage; /* NaN until known */
  double reshard;      /* 1: the last step resharded after forward, 0: it kept the units; NaN */
  uint64_t step_le[TAGC_STEP_BUCKETS]; /* steps that took <= tagc_step_bounds[i] (cumulative) */
  uint64_t step_count;
  double step_sum;
  uint64_t steps_total;     /* steps this process ran (recomputed ones again) */
  double tokens_total;      /* the tokens of this rank's share of their batches */
  double goodput;           /* summary.json's goodput so far; NaN before the first step */
  int64_t ckpt_last_step;   /* latest good save, -1 before one */
  double ckpt_time;         /* tagc_now() when it was seen finished, 0 before one */
  double ckpt_write_s;      /* background write time of the latest finished save */
  int64_t ckpt_saves, ckpt_failures; /* over the process */
  int64_t ckpt_failed_in_a_row; /* failed saves since the latest good one */
  int64_t nonfinite_skips; /* steps skipped for a non-finite gradient, over the process */
  /* the ranks' compute seconds of the last step (worker/straggler.h) */
  int n_compute;            /* ranks in compute_ranks: the world when at most TAGC_RANK_GAUGES */
  double compute_ranks[TAGC_RANK_GAUGES];
  double compute_max, compute_median; /* NaN before a step */
  int slowest_rank;         /* -1 before a step */
  int straggler_rank;       /* -1: none */
  double straggler_ratio;   /* 0 when none */
} tagc_worker_sample;

typedef struct tagc_metrics_http tagc_metrics_http;

/* The sample before any step: zeros, NaN losses and gauges, rank -1, no checkpoint. */
tagc_worker_sample tagc_worker_sample_empty(void);

/* A step of step_s seconds into s's step duration histogram. */
void tagc_worker_sample_observe_step(tagc_worker_sample *s, double step_s);

/* Renders s as Prometheus text (version 0.0.4) at time `now` (tagc_now()), uptime_s included,
 * with the process metrics of cluster/prom.h. Returns a new string (caller frees) or NULL when
 * out of memory. Reads /proc. */
char *tagc_metrics_text(const tagc_worker_sample *s, double uptime_s, double now);

/* Starts serving on addr ("HOST:PORT", IPv4, port 0 = a free one). The first sample is
 * tagc_worker_sample_empty() with the job label `job` (kept, not copied: it must outlive the
 * server), so even a scrape before the first published sample is labelled. Errors: TAGC_EINVAL
 * (a bad address, or one this host cannot listen on; one-line detail naming --metrics-addr),
 * TAGC_ENOMEM. */
tagc_status tagc_metrics_http_start(const char *addr, const char *job, tagc_metrics_http **out);

/* The port the server listens on. */
int tagc_metrics_http_port(const tagc_metrics_http *m);

/* Replaces the served sample with a copy of *s. Any thread; does not block on scrapes for
 * longer than copying a sample. */
void tagc_metrics_http_publish(tagc_metrics_http *m, const tagc_worker_sample *s);

/* Stops serving (waits for a scrape in progress) and frees; NULL is a no-op. */
void tagc_metrics_http_stop(tagc_metrics_http *m);

#endif
