/* The per-step scalars every rank contributes and every rank needs back, exchanged in one
 * all-gather of doubles after the step's reductions: the loss, the squared gradient norm, the
 * non-finite flags, the figures the codec and `auto` decide from. Each field has its reduction
 * (sum in rank order: identical bits on every rank; maximum; minimum; each rank's), in one table
 * (step_scalars.c); pack and reduce are pure functions, the engine does the all-gather. */
#ifndef TAGC_ENGINE_STEP_SCALARS_H
#define TAGC_ENGINE_STEP_SCALARS_H

#include <stddef.h>

#include "common/status.h"

typedef struct tagc_step_scalars {
  /* summed over ranks */
  double loss;        /* sum of the local losses (the engine divides by batch x context) */
  double sumsq;       /* of the reduced gradient shards: the global norm squared */
  double estimated;   /* sketched elements left to the estimate (not peeled) */
  double fb_in;       /* check_feedback: raw gradients + old residuals of sketched segments */
  double fb_out;      /* ... what was kept (sent) + the new residuals */
  double fb_abs;      /* ... the sum of their absolute values (scale of the comparison) */
  double nonfinite;   /* ranks that saw a non-finite loss, gradient or reduced shard: the step
                         is skipped on every rank when not 0 */
  double cannot_hold; /* reshard auto: ranks that cannot hold every gathered unit */
  double *global_bits; /* [n_segs]: bits set in the ORed bitmaps of each sketched segment */
  /* maximum over ranks */
  double *lane_density; /* [n_segs]: the densest lane of each sketched segment */
  /* minimum over ranks */
  double link_rate;   /* bytes/s the auto choices assume: the slowest rank's (0 = none) */
  /* maximum over ranks */
  double *codec_s;    /* [n_segs]: the sketch codec's seconds of each segment */
  /* summed over ranks */
  double save_due;    /* ranks whose wall-clock checkpoint interval passed (all then save) */
  double copy_due;    /* ranks leaving (all then make an in-memory copy of the step) */
  double stop_due;    /* ranks asking the job to stop after this step (every member leaves) */
  /* each rank's, kept apart (timing only: nothing of the training math reads them) */
  double compute_s;   /* this rank's seconds of compute in the step, waits on peers excluded;
                         after the reduction the maximum, and rank r's in compute_ranks[r] */
  double *compute_ranks; /* [world] */
  /* maximum over ranks */
  double clock_s;     /* the ranks' monotonic clocks at the exchange: their maximum is one
                         clock every rank agrees on, monotonic while the ranks stay the same */
  int n_segs;
  int world;
} tagc_step_scalars;

/* Allocates the per-segment and per-rank arrays (zeroed). Errors: TAGC_ENOMEM. */
tagc_status tagc_step_scalars_init(tagc_step_scalars *x, int n_segs, int world);

/* Frees the arrays; idempotent. */
void tagc_step_scalars_free(tagc_step_scalars *x);

/* Zeroes every field. */
void tagc_step_scalars_clear(tagc_step_scalars *x);

/* Doubles one rank contributes: 8 + 3 n_segs + 6. */
size_t tagc_step_scalars_count(const tagc_step_scalars *x);

/* Writes this rank's fields into out (tagc_step_scalars_count doubles). */
void tagc_step_scalars_pack(const tagc_step_scalars *x, double *out);

/* Sets every field to its reduction over all[0 .. world) (each rank's packed doubles, rank
 * after rank; world at most the one of init): sums add in rank order, so every rank gets the
 * same bits; compute_ranks gets each rank's compute_s. */
void tagc_step_scalars_reduce(tagc_step_scalars *x, const double *all, int world);

#endif
