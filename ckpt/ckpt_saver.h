/* Asynchronous checkpoint saver: the training step copies its shard into a host buffer and
 * returns; a background thread writes it, runs the barrier and (rank 0) commits.
 *
 * Threading: the barrier callback of the config is called on the saver's background thread,
 * never on the thread that calls submit. With a communicator, that barrier must be safe to run
 * concurrently with the training thread's collectives (e.g. its own communicator or a store
 * barrier). One saver per rank; its functions may be called from one thread at a time. */
#ifndef TAGC_CKPT_SAVER_H
#define TAGC_CKPT_SAVER_H

#include "ckpt/ckpt.h"

typedef struct tagc_ckpt_saver tagc_ckpt_saver;

typedef struct tagc_ckpt_saver_stats {
  int64_t saves_done;          /* saves finished (ok or failed) */
  int64_t saves_failed;
  int64_t failed_in_a_row;     /* failed saves since the latest good one (0 after a good one) */
  int64_t saves_abandoned;     /* begun, then given up with tagc_ckpt_saver_abandon */
  int64_t backpressure_waits;  /* submits that had to wait for the previous save */
  double last_stall_s;         /* time the latest submit blocked the caller (wait + copy) */
  double last_write_s;         /* background time of the latest finished save */
  int64_t last_step;           /* step of the latest finished save, -1 before the first */
  tagc_status last_status;     /* its result */
  char last_error[256];        /* its error detail ("" when it succeeded) */
  tagc_ckpt_committed last_committed; /* rank 0: what the latest successful commit produced */
} tagc_ckpt_saver_stats;

/* Copies cfg (dir, layout names, ranges) and allocates the host buffer for this rank's shard
 * (sum of range counts x streams floats), then starts the background thread.
 * Errors: TAGC_EINVAL (bad config), TAGC_ENOMEM, TAGC_EINTERNAL (thread creation). */
tagc_status tagc_ckpt_saver_create(const tagc_ckpt_writer_config *cfg, tagc_ckpt_saver **out);

/* Hands step's shard to the background thread: waits (logged as backpressure) while the
 * previous save is still running, copies data (same shape as tagc_ckpt_write_shard) and a
 * deep copy of meta, then returns. Errors: TAGC_EINVAL, TAGC_ENOMEM, TAGC_EABORTED after
 * destroy began. The result of the save itself is in the stats and in tagc_ckpt_saver_wait(). */
tagc_status tagc_ckpt_saver_submit(tagc_ckpt_saver *sv, int64_t step, const float *const *data,
                                   const tagc_ckpt_meta *meta);

/* The same in two halves, so that a device can copy straight into the host buffer:
 * begin waits like submit, then gives views[u * n_streams + s] (this rank's range count of
 * floats each, owned by the saver) to fill; finish deep-copies meta and starts the write.
 * Every successful begin must be followed by finish or abandon. Errors: TAGC_EINVAL
 * (negative step, begin twice, finish without begin), TAGC_EABORTED after destroy began. */
tagc_status tagc_ckpt_saver_begin(tagc_ckpt_saver *sv, int64_t step, float *const **views);
tagc_status tagc_ckpt_saver_finish(tagc_ckpt_saver *sv, const tagc_ckpt_meta *meta);

/* Gives up the save begun with begin: nothing of it is written (the views may hold a partly
 * filled, stale state — e.g. the caller's snapshot failed, or another rank's did, so the
 * step must not become a checkpoint). Counted in saves_abandoned; the saver is ready for
 * the next begin. TAGC_EINVAL without a begin. */
tagc_status tagc_ckpt_saver_abandon(tagc_ckpt_saver *sv);

/* Blocks until no save is pending or running; returns the status of the latest save
 * (TAGC_OK when none ran), its detail (from the saver's thread) as this thread's error. */
tagc_status tagc_ckpt_saver_wait(tagc_ckpt_saver *sv);

/* Copies the counters. */
void tagc_ckpt_saver_stats_get(tagc_ckpt_saver *sv, tagc_ckpt_saver_stats *out);

/* Finishes a pending save, stops the thread and frees everything. NULL is a no-op. */
void tagc_ckpt_saver_destroy(tagc_ckpt_saver *sv);

#endif
