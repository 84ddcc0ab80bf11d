/* One training job inside one worker process, run one generation at a time.
 *
 * A tagc_run holds what lives as long as the process: configuration, model layout, corpus,
 * the report (worker/report.h: metrics file, running totals, summary) and recovery accounting. A generation is a world size, a rank
 * and a bootstrap store: tagc_run_generation() builds the communicator and engine for it,
 * loads the resume state (resharded to this world size), trains until the job's end, an
 * --stop-at, a failure or a newer generation, and tears the generation down again — all
 * in-process, so a worker survives its peers' failures.
 *
 * Threading: one thread calls these; tagc_run_abort() may be called from any thread. */
#ifndef TAGC_WORKER_RUN_H
#define TAGC_WORKER_RUN_H

#include <stdint.h>

#include <jansson.h>

#include "comm/store.h"
#include "common/status.h"
#include "worker/run_config.h"

typedef struct tagc_run tagc_run;
struct tagc_gen_result;

/* What the runner asks of the job around it. Elastic mode sets them (worker/elastic.c, over
 * cluster/member.h); static mode sets none. The runner is in elastic mode exactly when hooks
 * were set (tagc_run_set_hooks): it then also finishes a job whose checkpoint is already
 * final (the job ends only once the final progress is published). A NULL callback is a no-op:
 * never superseded, no chaos, nothing recorded. */
typedef struct tagc_run_hooks {
  void *ctx; /* passed to every callback (borrowed; outlives the run) */
  /* 1 when a generation newer than gen was announced (or this worker withdrew from every
   * generation), from what is known already. Any thread (the communicator's bootstrap asks on
   * its own); must not block. */
  int (*superseded)(void *ctx, int64_t gen);
  /* The same, asked of the source itself now: a broken connection may be a peer that saw a
   * newer generation a moment before we did. 0 when it cannot tell. Training thread; blocks
   * for a round trip. */
  int (*superseded_now)(void *ctx, int64_t gen);
  /* This rank built its communicator and loaded its state in generation gen. A failure ends
   * the process with its status. Training thread; blocks. */
  tagc_status (*ready)(void *ctx, int64_t gen, int rank);
  /* The fault spec to arm now (*spec: new malloc'd string, the whole value, caller frees;
   * NULL: none); called about once a second. TAGC_EINVAL with *spec set: a value that must
   * not be armed (the detail says why; warned about once per value). Any other failure is
   * ignored. Training thread; gives up quickly. */
  tagc_status (*chaos)(void *ctx, char **spec);
  /* Rank 0, once a checkpoint is durable: record it as the job's resume point. TAGC_ECONFLICT
   * when a newer record is there already (no error). Runs on the checkpoint saver's thread;
   * blocks. */
  tagc_status (*commit_ckpt)(void *ctx, int64_t gen, int64_t step, const char *path, int world,
                             uint32_t manifest_crc);
  /* Rank 0: the progress record (borrowed JSON object), at most once a second and at the
   * end (worker/report.h). A failure is logged. Training thread; gives up quickly. */
  tagc_status (*progress)(void *ctx, json_t *progress);
  /* --exclude-straggler, one rank of generation gen (rank 0, or 1 when 0 is the one): rank
   * `rank` became a straggler at step `step` (detail: the figures); report it so that the
   * leader plans a generation without it. A failure is logged. Training thread; blocks for
   * an etcd write. */
  tagc_status (*report_straggler)(void *ctx, int64_t gen, int64_t step, int rank,
                                  const char *detail);
} tagc_run_hooks;

/* What ended a failed generation, as the run saw it (worker/failure_kind.h turns it into the
 * kind a failure report names). */
typedef enum tagc_gen_cause {
  TAGC_CAUSE_COMM,     /* a collective, the bootstrap or an agreement of the ranks failed */
  TAGC_CAUSE_TIMEOUT,  /* a deadline passed */
  TAGC_CAUSE_OOM,      /* an allocation failed, or an injected one */
  TAGC_CAUSE_HANG,     /* an injected hang */
  TAGC_CAUSE_INJECTED  /* an injected connection drop */
} tagc_gen_cause;

/* "comm", "timeout", "oom", "hang", "injected": for logs. Static. */
const char *tagc_gen_cause_name(tagc_gen_cause c);

/* How a status ends a generation: the one rule of the runner, tagc_run_classify(). */
typedef enum tagc_gen_verdict {
  TAGC_VERDICT_GOES_ON, /* TAGC_OK */
  TAGC_VERDICT_FAILED,  /* a new generation may fix it: the peers, a deadline, memory, the
                           ranks' disagreement (TAGC_ETIMEDOUT, TAGC_EPEER, TAGC_EABORTED,
                           TAGC_ENOMEM, TAGC_ECONFLICT); reported, then the next plan */
  TAGC_VERDICT_FATAL    /* no new generation can: bad configuration or input, the math, damaged
                           checkpoints, output not writable (every other status); the process
                           stops with it */
} tagc_gen_verdict;

typedef struct tagc_gen_outcome {
  tagc_gen_verdict verdict;
  tagc_gen_cause cause; /* TAGC_VERDICT_FAILED: timeout, oom, else comm */
} tagc_gen_outcome;

/* The verdict on st (see tagc_gen_verdict). Pure; any thread. */
tagc_gen_outcome tagc_run_classify(tagc_status st);

typedef struct tagc_gen_spec {
  int64_t gen;             /* generation number (0 in static mode) */
  int rank, world;
  tagc_store *store;       /* bootstrap store (borrowed); NULL when world == 1 */
  int micro_batch;         /* 0 = the configured one */
  const char *resume_path; /* checkpoint to resume from; NULL = newest valid one, if any */
  int64_t resume_step;     /* the plan's step of resume_path; 0 = not given */
  uint32_t resume_manifest_crc; /* the CRC32C of its manifest in the etcd record; 0 = not given */
  /* Called once, on the calling thread, when the generation fails (not when it is superseded),
   * as soon as the failure is known and before the tear-down, which may wait (e.g. for a
   * pending checkpoint save): elastic mode reports the failure from it. NULL = none. */
  void (*on_failure)(void *arg, const struct tagc_gen_result *res);
  void *failure_arg;
  char *const *members;    /* world worker ids, index = rank (borrowed, outlives the
                              generation), for the logs; NULL = unknown (static mode) */
} tagc_gen_spec;

typedef enum tagc_gen_end {
  TAGC_GEN_FINISHED,   /* the last step is done; summary written by rank 0 */
  TAGC_GEN_STOPPED,    /* --stop-at reached, or suspended (tagc_run_suspend) */
  TAGC_GEN_FAILED,     /* a collective failed, an allocation failed, or a fault was injected */
  TAGC_GEN_SUPERSEDED  /* a newer generation was announced */
} tagc_gen_end;

/* Most ranks a failure report names besides the suspected one (tagc_gen_result.broken). */
#define TAGC_GEN_BROKEN_MAX 64

typedef struct tagc_gen_result {
  tagc_gen_end end;
  tagc_status status;     /* the failure (TAGC_GEN_FAILED) */
  tagc_gen_cause cause;   /* what the run saw fail (TAGC_GEN_FAILED) */
  int64_t step;           /* steps completed when the generation ended */
  int64_t start_step;     /* the step it resumed at (step > start_step: it trained) */
  int suspected_rank;     /* rank blamed by the data path, -1 when unknown */
  int broken[TAGC_GEN_BROKEN_MAX]; /* every rank whose connection with this one broke with the
                                      failure (tagc_comm_broken_peers), ascending: all of the
                                      peers that died together */
  int n_broken;
  int suspended;          /* TAGC_GEN_STOPPED by tagc_run_suspend, not by --stop-at */
  char detail[256];
} tagc_gen_result;

/* Validates the configuration and loads the corpus. OUT's lock (worker/out_lock.h), and a
 * --ckpt-dir's by the same rule, is taken
 * here, before any hooks: shared within the job when cfg->etcd is set, else by rank 0. Errors
 * as tagc_train_run (worker/train.h). */
tagc_status tagc_run_new(const tagc_train_config *cfg, tagc_run **out);
void tagc_run_free(tagc_run *r);

/* Elastic mode: the run asks hooks (copied; see tagc_run_hooks) from now on. Call it before
 * the first generation, from the thread that runs them. */
void tagc_run_set_hooks(tagc_run *r, const tagc_run_hooks *hooks);

/* Runs one generation (see above). Before the first step every rank chooses its resume point
 * (resume_path, else the newest valid checkpoint, else step 0 when there is none) and the
 * ranks agree on it with one collective: different choices (step or manifest CRC32C) end the
 * generation as failed, naming them. A checkpoint commits only when every rank's snapshot
 * of that step succeeded (one collective per save). Returns TAGC_OK with *res telling how
 * it ended; an error only for what no new generation can fix (TAGC_VERDICT_FATAL: bad
 * configuration, a checkpoint that is not of this job, checkpoints that are all invalid —
 * unless --allow-restart-from-scratch —, output not writable), a final checkpoint that could
 * not be saved on this rank, or a failed hooks.ready. */
tagc_status tagc_run_generation(tagc_run *r, const tagc_gen_spec *g, tagc_gen_result *res);

/* Aborts the current generation's communicator (any thread): a collective that hangs returns
 * at once and the generation ends as failed or superseded. */
void tagc_run_abort(tagc_run *r);

/* Elastic mode, from the generation watch (any thread): when gen is newer than the running
 * generation, aborts its communicator so the generation ends as superseded at once. */
void tagc_run_supersede(tagc_run *r, int64_t gen);

/* A leave (any thread): with in-memory copies (--mirror-every), the training loop stops
 * stepping at its next step boundary, once that step's copy is with the next rank, and waits
 * there until its generation is superseded or aborted; no effect without copies. */
void tagc_run_hold(tagc_run *r);

/* The whole job is leaving (every member of the running generation asked to; any thread):
 * the ranks agree through the next step's scalar exchange on one step after which all stop
 * (a held rank steps once more for it), save a checkpoint of that step and end the
 * generation as TAGC_GEN_STOPPED with res.suspended set; rank 0 writes summary.json with
 * "end": "suspended". Idempotent; no effect once the generation's last step is done. */
void tagc_run_suspend(tagc_run *r);

/* Elastic mode, between generations, when the job cannot go on (its etcd out of reach for
 * good): describes the newest valid checkpoint into ckpt ("step M (PATH)", or "none valid")
 * and, when this process was rank 0 of the last generation and trained in it, writes
 * summary.json with "end": "gave up" from what this process knows (no collective: its peers
 * may be gone; "params_crc32c" 0). Errors of the summary's write are logged. Training thread. */
void tagc_run_give_up(tagc_run *r, int64_t step, char *ckpt, size_t cap);

/* 1 when this worker was named a straggler in its latest generation and had not recovered
 * when it ended (worker/straggler.h): an excluded straggler waits --straggler-rejoin before
 * asking back in. The thread that runs the generations. */
int tagc_run_named_straggler(const tagc_run *r);

/* The output folder's lock (tagc_out_lock) is in worker/out_lock.h. */
#include "worker/out_lock.h"

#endif
