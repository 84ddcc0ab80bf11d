/* What a training job in one worker process tells the world: the progress line on stdout,
 * OUT/metrics.jsonl (one JSON object per step, rank 0), OUT/summary.json (rank 0, at the end),
 * rank 0's progress record in etcd (elastic mode) and the sample served on /metrics.
 *
 * A tagc_report lives as long as the process (worker/run.c owns it): it keeps the running
 * totals over every generation, the latest losses, the clock of the job and the metrics file.
 * worker/run.c tells it which generation runs (tagc_report_generation) and hands it each
 * completed step; the recovery accounting stays in run.c and comes in as tagc_recovery_counts.
 *
 * Threading: one thread (the training thread) calls these. */
#ifndef TAGC_WORKER_REPORT_H
#define TAGC_WORKER_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "ckpt/ckpt_saver.h"
#include "comm/comm.h"
#include "common/status.h"
#include "data/data.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "worker/metrics_http.h"
#include "model/model.h"
#include "worker/run_config.h"
#include "worker/straggler.h"

/* Where rank 0's progress records go (elastic mode: tagc_run_hooks.progress). */
typedef tagc_status (*tagc_report_progress_fn)(void *ctx, json_t *progress);

/* Failures and recoveries over the process, as summary.json and /metrics show them. */
typedef struct tagc_recovery_counts {
  int failures, recoveries;
  /* the last completed step before a failure -> the first completed step after it */
  double max_recovery_s, last_recovery_s;
  double max_pause_s;                     /* longest time between two completed steps, any
                                             cause (a stall without failure too) */
  int64_t steps_lost;                     /* steps recomputed since the checkpoint */
  int recovering;                         /* a failure awaits its first completed step */
  int64_t nonfinite_skips;                /* steps skipped for a non-finite gradient */
  int rollbacks;                          /* rollbacks after too many skips in a row */
  /* the last completed step before a failure -> that step completed again (recomputation
     included; equal to the recovery when no step was lost) */
  double max_regain_s, last_regain_s;
  int memory_rebuilds;                    /* generations rebuilt from in-memory copies */
  int disk_fallbacks;                     /* ... that had to resume from disk instead */
} tagc_recovery_counts;

/* Running totals over the whole process (all generations), for summary.json. */
typedef struct tagc_report_totals {
  double tokens, bytes_sent, comm_s, exposed_s, unpeeled, tagc_elements, density, rho;
  double coverage; /* sum over steps of the fraction of tagc elements sent as sketches */
  double paths[TAGC_ENC_COUNT]; /* sums over steps of tagc_step_stats.path_fraction */
  double resharded; /* steps that gathered units again for backward (ZeRO-3) */
  double mirror_s, mirror_bytes; /* in-memory copies (--mirror-every): seconds, bytes sent */
  int64_t steps;  /* steps run by this process, recomputed ones included */
  double *step_s; /* per step, for the median */
  int64_t n_times, step_cap;
} tagc_report_totals;

/* What the report reads and never owns (all borrowed; they outlive the report). */
typedef struct tagc_report_config {
  const tagc_train_config *cfg;
  const tagc_model_layout *layout;
  const tagc_corpus *corpus; /* the batch CRC of each metrics line */
  tagc_device *device;       /* summary.json: where the model computed, its memory peak */
  int threads;               /* compute threads, for summary.json */
  tagc_metrics_http *http;   /* --metrics-addr server, or NULL */
} tagc_report_config;

typedef struct tagc_report {
  tagc_report_config c;
  tagc_device_info dev_info;
  tagc_report_progress_fn progress; /* elastic mode: progress records; else NULL */
  void *progress_ctx;
  int64_t gen;                /* the current (or last) generation */
  int64_t first_step;         /* the step this process's first generation started from, or -1 */
  int rank, world;
  FILE *metrics;              /* OUT/metrics.jsonl while this process is rank 0 */
  tagc_report_totals tt;
  double t0, last_print, last_progress;
  double t_first;      /* when this process finished its first step (the ETA leaves start-up out) */
  int64_t steps_first; /* tt.steps then */
  double goodput_at;          /* tagc_now() of the sample's last goodput figure */
  double loss, val;           /* latest training and validation loss, NAN until known */
  int recoveries;             /* of this process so far, for the progress record */
  tagc_worker_sample sample;  /* what /metrics serves */
  const tagc_ckpt_saver *saver_seen;   /* the saver of the last sample (NULL: none) */
  int64_t saves_before, failed_before; /* of the savers of earlier generations */
  int64_t saver_done, saver_failed;    /* of saver_seen at the last sample */
  /* the ranks' compute times of the latest step (tagc_report_ranks); has_ranks 0 before one
     in this generation */
  int has_ranks;
  tagc_straggler_step ranks;
  int n_compute;                       /* the world when at most TAGC_RANK_GAUGES, else 0 */
  double compute[TAGC_RANK_GAUGES];
  char straggler_worker[128];          /* the straggler's worker id ("" when unknown or none) */
  double straggler_since;              /* tagc_now() when the current straggler was named */
} tagc_report;

/* Initialises rp (caller-owned) and starts the job's clock: elapsed and wall times count
 * from here. Cannot fail. */
void tagc_report_init(tagc_report *rp, const tagc_report_config *c);

/* Closes the metrics file and frees the totals. Idempotent. */
void tagc_report_free(tagc_report *rp);

/* Elastic mode: rank 0's progress records go to fn(ctx, record) (NULL fn: none). */
void tagc_report_set_progress(tagc_report *rp, tagc_report_progress_fn fn, void *ctx);

/* The generation the following reports come from. */
void tagc_report_generation(tagc_report *rp, int64_t gen, int rank, int world);

/* Rank 0: opens OUT/metrics.jsonl unless it is open already, appending when the generation
 * resumes from a checkpoint (start_step > 0), else truncating it. Other ranks: nothing.
 * TAGC_EIO with the path when it cannot be opened. */
tagc_status tagc_report_open_metrics(tagc_report *rp, int64_t start_step);

/* At a generation's end: a rank other than 0 closes the metrics file (the generation gave
 * rank 0 to another process). */
void tagc_report_end_generation(tagc_report *rp);

/* A completed step (every rank): its loss and the running totals. */
void tagc_report_step(tagc_report *rp, const tagc_step_stats *ss);

/* A completed step (every rank): what the ranks' compute times tell (worker/straggler.h;
 * compute_s[world], borrowed for the call) for its metrics line, the sample and the progress
 * record; straggler_worker (may be NULL) is the id of s->straggler's worker. */
void tagc_report_ranks(tagc_report *rp, const tagc_straggler_step *s, const double *compute_s,
                       const char *straggler_worker);

/* A completed evaluation: the validation loss of the summary. */
void tagc_report_val_loss(tagc_report *rp, double val_loss);

/* Rank 0, after step `step` (0-based): one line of metrics.jsonl, and the progress line on
 * stdout when `force`, on evaluation steps (val_loss not NAN) and otherwise once a second. */
void tagc_report_metrics_line(tagc_report *rp, int64_t step, const tagc_step_stats *ss,
                              double val_loss, int force);

/* Elastic mode, rank 0: the progress record (to tagc_report_set_progress's fn) after step
 * `step` (0-based), at most once a second unless `force`. The final step is published only
 * with force, once summary.json is written: the coordinator ends the job when progress
 * reaches it. A failed write is logged. Blocks while fn does when it writes. */
void tagc_report_progress(tagc_report *rp, int64_t step, const tagc_step_stats *ss, int force);

/* --metrics-addr: the served sample after a step (ss) or, with ss NULL, at a generation's
 * start or end. comm (borrowed, may be NULL) gives the measured link rate, saver (borrowed,
 * NULL between generations) the checkpoint saves; the counts add up over generations. */
void tagc_report_sample(tagc_report *rp, int64_t steps_done, const tagc_step_stats *ss,
                        const tagc_recovery_counts *rec, const tagc_comm *comm,
                        tagc_ckpt_saver *saver);

/* Steps this process has run so far (recomputed ones included). */
int64_t tagc_report_steps_run(const tagc_report *rp);

/* The end of the job in this process, for summary.json. */
typedef struct tagc_report_final {
  int64_t step;         /* the job's steps done */
  int64_t resumed_from; /* the step the generation started from */
  const char *end;      /* summary.json "end": "finished", "stopped" (--stop-at),
                           "suspended" (tagc_run_suspend: every member left) or "gave up"
                           (tagc_run_give_up: the job could not go on) */
  uint32_t params_crc32c;
  const tagc_recovery_counts *recovery;
  const tagc_ckpt_saver_stats *ckpt; /* NULL when the run saves no checkpoints */
  json_t *model;        /* the model configuration (borrowed; the summary takes a reference) */
} tagc_report_final;

/* Rank 0: writes OUT/summary.json and logs the result, except that an existing summary is
 * kept when this process trained no step (its checkpoint was already final). Errors of the
 * write (TAGC_EIO, TAGC_ENOMEM). */
tagc_status tagc_report_finish(tagc_report *rp, const tagc_report_final *f);

#endif
