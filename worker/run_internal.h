/* The state of one worker's run (worker/run.h), shared by its two files: run.c (generations,
 * the training loop, faults, recovery accounting) and run_ckpt.c (checkpoints, resuming, and
 * what the ranks of a generation agree on before they train). */
#ifndef TAGC_WORKER_RUN_INTERNAL_H
#define TAGC_WORKER_RUN_INTERNAL_H

#include "worker/run.h"

#include <pthread.h>
#include <stdint.h>

#include <jansson.h>

#include "ckpt/ckpt_saver.h"
#include "data/data.h"
#include "engine/engine.h"
#include "engine/mirror.h"
#include "worker/fault.h"
#include "worker/metrics_http.h"
#include "model/model.h"
#include "worker/report.h"
#include "worker/straggler.h"

/* Recovery accounting: one failure at a time. */
typedef struct recovery {
  tagc_recovery_counts n; /* what summary.json and /metrics show */
  double pending_since;   /* while n.recovering: the last completed step before the failure
                             (the failure itself when no step completed before it) */
  double last_step_at;    /* when the latest step completed (tagc_now), 0 before the first */
  int64_t failed_at_step;
  int regaining;          /* a recovered failure's lost steps are being recomputed */
  double regain_since;    /* its pending_since */
  int64_t regain_step;    /* the step to complete again (its failed_at_step) */
  char pending_kind[16];
} recovery;

struct tagc_run {
  const tagc_train_config *cfg;
  tagc_model_layout layout;
  float *init_params; /* --init-from fitted to layout (owned), until an engine took it; NULL */
  tagc_compress_policy policy;
  tagc_corpus corpus;
  int threads;
  char ckpt_root[4096];
  tagc_report report; /* progress, metrics.jsonl, summary.json, /metrics */
  recovery rec;
  tagc_faults faults;
  tagc_run_hooks hooks; /* tagc_run_set_hooks; zeroed in static mode */
  int elastic;          /* hooks were set */
  double last_chaos;
  char *chaos_seen;        /* the chaos value last seen, whole (owned), or NULL */
  tagc_metrics_http *http; /* --metrics-addr, else NULL */
  tagc_device *device;     /* --device: kept across generations */
  tagc_device_info dev_info;
  tagc_step_stats last_ss; /* the latest completed step */
  int out_lock;            /* OUT/.lock while this process owns OUT (tagc_out_lock), else -1 */
  int out_inherited;       /* out_lock is the one `tagctl run` handed down */
  int ckpt_lock;           /* --ckpt-dir's .lock while this process owns it, else -1 */
  double save_started;     /* when the latest save was handed to the saver (its barrier's clock) */
  double started_at;       /* when the process began (the first --ckpt-every-s interval) */
  int64_t skip_streak;     /* consecutive steps skipped for a non-finite gradient */
  int64_t rollback_at;     /* the step whose skip made the last rollback, or -1 */
  tagc_mirror *mirror;     /* with --mirror-every: the in-memory copies */
  int64_t mirror_k;        /* the copies' period in effect (0: no copies) */
  int mirror_shift[TAGC_MIRROR_MAX_COPIES]; /* copy c goes to rank + mirror_shift[c] */
  int mirror_copies;       /* ... for c < mirror_copies (tagc_mirror_shifts) */
  int mirror_auto;         /* --mirror-every -1 in elastic mode: mirror_k from the costs */
  int64_t mirror_last;     /* the step of the last copy in this generation */
  int64_t mirror_pushes;   /* copies in this generation */
  double mirror_cost_s, mirror_step_s; /* since the last choice: copy seconds, step seconds */
  int64_t mirror_steps;    /* ... and steps */
  _Atomic int hold;        /* tagc_run_hold: stop stepping at the next step boundary */
  _Atomic int suspend;     /* tagc_run_suspend: every rank stops after one agreed step */

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
  int64_t ckpt_streak; /* failed saves in a row when the previous generation's saver ended */
  int64_t start_step;
  int suspect; /* the rank blamed for a disagreement this rank detected, or -1 */
  int fault_cause; /* the tagc_gen_cause of the fault fired in this generation, or -1 */
  void (*on_failure)(void *arg, const struct tagc_gen_result *res); /* tagc_gen_spec's */
  void *failure_arg;
  char *const *members;   /* tagc_gen_spec's (borrowed), or NULL */
  tagc_straggler strag;   /* the generation's straggler detection (run_straggler.c) */
  int named_straggler;    /* this rank is a straggler now (tagc_run_named_straggler) */
};

/* ---- run_straggler.c: who is slower than the others ---- */

/* At a generation's start: the detection for its world (--straggler-ratio, --straggler-window).
 * Errors: TAGC_ENOMEM. */
tagc_status run_straggler_begin(tagc_run *t);

/* After each completed step (every rank, the same verdicts): feeds the ranks' compute seconds
 * to the detection and the report; the reporting rank warns when a rank becomes a straggler
 * and when it recovers, and with --exclude-straggler reports it (tagc_run_hooks). */
void run_straggler_step(tagc_run *t, int64_t step, const tagc_step_stats *ss);

/* At a generation's end. Idempotent. */
void run_straggler_end(tagc_run *t);

/* The model's shape as the checkpoint manifest and the summary record it (new reference). */
json_t *run_model_json(const tagc_run *t);

/* Opens this generation's asynchronous checkpoint saver (rank 0 also prepares the root).
 * Errors: TAGC_EIO, TAGC_ENOMEM. */
tagc_status run_open_saver(tagc_run *t);

/* Collective: snapshots the engine into the saver and commits step `step` only when every
 * rank's snapshot succeeded; otherwise every rank abandons it and the generation fails. */
tagc_status run_save_checkpoint(tagc_run *t, int64_t step);
/* Failed saves in a row of this process, across generations (after the latest good one). */
int64_t run_ckpt_streak(const tagc_run *t);
/* "step M (PATH)" of the newest valid checkpoint under the checkpoint root, or "none valid". */
void run_newest_valid(const tagc_run *r, char *buf, size_t cap);
/* Rank 0 of a run that trained: summary.json with "end" as given (a run cut short). */
void run_write_cut_short(tagc_run *r, int64_t step, const char *end);

/* Collective, after --max-nonfinite-skips consecutive non-finite steps ending at `step`
 * (every rank decides alike from the engine's shared flag): waits for a pending save, loads
 * the newest valid checkpoint on every rank (they agree on it) and sets *to to its step.
 * Bound: a rollback must follow a skip at a later step than the last one's; otherwise, or
 * without a checkpoint, TAGC_ENUMERIC with the reason (the run fails). Errors otherwise: the
 * loader's and the agreement's (communication failures, TAGC_ECONFLICT). */
tagc_status run_rollback(tagc_run *t, int64_t step, int64_t *to);

/* Collective, in a new generation with t->mirror: rebuilds the engine from the in-memory
 * copies (engine/mirror.h) when every old rank's copy of a step at least the plan's survived
 * (*rebuilt = 1, t->start_step set); otherwise says which was lost (when any copy existed),
 * forgets the copies and leaves *rebuilt = 0 for run_resume. Errors: the rebuild's. */
tagc_status run_rebuild(tagc_run *t, const tagc_gen_spec *g, int *rebuilt);

/* Collective: chooses the resume point of generation g (the plan's checkpoint, else the newest
 * valid one), checks it matches this job, makes every rank agree on (step, manifest CRC) and
 * loads it resharded to this world size. Errors: the loader's, TAGC_ECONFLICT on disagreement,
 * TAGC_ECORRUPT when checkpoints exist but none is valid (unless a restart is allowed). */
tagc_status run_resume(tagc_run *t, const tagc_gen_spec *g);

#endif
