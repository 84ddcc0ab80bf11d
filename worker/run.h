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

#include "comm/store.h"
#include "common/status.h"
#include "worker/run_config.h"

typedef struct tagc_run tagc_run;
struct tagc_member; /* coordinator/member.h */
struct tagc_gen_result;

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
} tagc_gen_spec;

typedef enum tagc_gen_end {
  TAGC_GEN_FINISHED,   /* the last step is done; summary written by rank 0 */
  TAGC_GEN_STOPPED,    /* --stop-at reached */
  TAGC_GEN_FAILED,     /* a collective failed, an allocation failed, or a fault was injected */
  TAGC_GEN_SUPERSEDED  /* a newer generation was announced */
} tagc_gen_end;

typedef struct tagc_gen_result {
  tagc_gen_end end;
  tagc_status status;     /* the failure (TAGC_GEN_FAILED) */
  const char *kind;       /* failure kind for the report: comm, timeout, oom, hang, injected */
  int64_t step;           /* steps completed when the generation ended */
  int64_t start_step;     /* the step it resumed at (step > start_step: it trained) */
  int suspected_rank;     /* rank blamed by the data path, -1 when unknown */
  char detail[256];
} tagc_gen_result;

/* Validates the configuration and loads the corpus. Errors as tagc_train_run (worker/train.h). */
tagc_status tagc_run_new(const tagc_train_config *cfg, tagc_run **out);
void tagc_run_free(tagc_run *r);

/* Elastic mode: progress, checkpoint records and the generation watch go through member. */
void tagc_run_set_member(tagc_run *r, struct tagc_member *member);

/* Runs one generation (see above). Before the first step every rank chooses its resume point
 * (resume_path, else the newest valid checkpoint, else step 0 when there is none) and the
 * ranks agree on it with one collective: different choices (step or manifest CRC32C) end the
 * generation as failed, naming them. A checkpoint commits only when every rank's snapshot
 * of that step succeeded (one collective per save). Returns TAGC_OK with *res telling how
 * it ended; an error only for what no new generation can fix (bad configuration, a
 * checkpoint that is not of this job, checkpoints that are all invalid — unless
 * TAGC_ALLOW_RESTART_FROM_SCRATCH=1 —, output not writable, a final checkpoint that could not
 * be saved). */
tagc_status tagc_run_generation(tagc_run *r, const tagc_gen_spec *g, tagc_gen_result *res);

/* Aborts the current generation's communicator (any thread): a collective that hangs returns
 * at once and the generation ends as failed or superseded. */
void tagc_run_abort(tagc_run *r);

/* Elastic mode, from the generation watch (any thread): when gen is newer than the running
 * generation, aborts its communicator so the generation ends as superseded at once. */
void tagc_run_supersede(tagc_run *r, int64_t gen);

/* The output folder's lock (tagc_out_lock) is in worker/out_lock.h. */
#include "worker/out_lock.h"

#endif
