/* Straggler detection: which rank is persistently slower than the others, from every rank's
 * compute seconds of each step (tagc_step_stats.compute_ranks: forward, backward and the
 * optimizer without the waits on peers, so that the ranks a slow one holds back do not look
 * slow themselves, plus the time its threads were held off a CPU).
 *
 * The rule, per rank r and step:
 *   ratio_r    = its compute seconds / the step's median over the ranks (the lower median:
 *                with two ranks, the faster one), at most TAGC_STRAGGLER_CLIP
 *   window     = the steps of the last window_s seconds (of the agreed clock), at most
 *                TAGC_STRAGGLER_MAX_ENTRIES / world of them
 *   slow_r     = the window holds min_steps steps over at least window_s / 2 and the mean of
 *                r's ratios in it is above ratio
 *   an episode begins when slow_r has held for window_s / 2, and ends when r's window mean
 *                has stayed below 1 + (ratio - 1) / 2 for window_s / 2 (hysteresis: one warning
 *                per episode, one line when it recovers)
 * A mean, not a median: a throttled rank (a CPU quota, or stopped and continued) is slow in
 * the steps the throttle hits, often fewer than half of them. The clip keeps one stalled step
 * (a page-in, a second of another process) from weighing more than a few steps' worth.
 * With the defaults (1.5, 10 s) a rank held to a fifth of a core is named about 10 to 20 s
 * after it slowed down; ranks that are slower now and then in turn are not.
 *
 * Pure: no clock, no I/O, no threads. Every rank feeds it the same all-gathered figures and
 * the same agreed clock (tagc_step_stats.clock_s), so every rank reaches the same verdicts at
 * the same step. Nothing of it feeds the training math. */
#ifndef TAGC_WORKER_STRAGGLER_H
#define TAGC_WORKER_STRAGGLER_H

#include <stdint.h>

#include "common/status.h"

/* Doubles the window may hold over all ranks (8 MiB). */
#define TAGC_STRAGGLER_MAX_ENTRIES (1 << 20)
/* The largest ratio one step counts with. */
#define TAGC_STRAGGLER_CLIP 10.0

typedef struct tagc_straggler_config {
  double ratio;    /* > 1: how much slower than the median a rank must be */
  double window_s; /* > 0: seconds of the window medians, and of the persistence */
  int min_steps;   /* >= 1: steps a window needs before any verdict */
} tagc_straggler_config;

typedef enum tagc_straggler_event {
  TAGC_STRAGGLER_NONE,
  TAGC_STRAGGLER_BEGAN, /* rank became a straggler at this step */
  TAGC_STRAGGLER_ENDED  /* rank is no longer one */
} tagc_straggler_event;

/* What one step tells. */
typedef struct tagc_straggler_step {
  double max, median; /* of this step's compute seconds over the ranks */
  int slowest;        /* the rank of max (the lowest of equals) */
  int straggler;      /* the rank in an episode with the largest window ratio, or -1 */
  double straggler_ratio; /* its window mean of compute / median (0 when none) */
  tagc_straggler_event event; /* at most one change per step (others follow at later steps) */
  int event_rank;     /* the rank the event is about */
  double event_ratio; /* its window mean ratio at the event */
  double event_s;     /* BEGAN: seconds since it first looked slow; ENDED: the episode's length */
} tagc_straggler_step;

typedef struct tagc_straggler {
  tagc_straggler_config cfg;
  int world;
  int cap;            /* steps the window may hold */
  int head, n;        /* ring of the window's steps: the oldest at head */
  double *clock;      /* [cap] */
  double *ratio;      /* [cap][world] */
  double *scratch;    /* [cap > world ? cap : world] */
  double *slow_since; /* [world]: when slow_r began to hold (-1: not slow) */
  double *calm_since; /* [world]: in an episode, when its median fell below the recovery line */
  double *began_at;   /* [world]: the episode's start (-1: none) */
  double *window_ratio; /* [world]: the latest window means */
} tagc_straggler;

/* Checks cfg (TAGC_EINVAL with the reason) and allocates the state for world ranks
 * (TAGC_ENOMEM). */
tagc_status tagc_straggler_init(tagc_straggler *d, const tagc_straggler_config *cfg, int world);

/* Frees it; idempotent. */
void tagc_straggler_free(tagc_straggler *d);

/* Forgets every step and episode (a new generation: other ranks, another clock). */
void tagc_straggler_reset(tagc_straggler *d);

/* Takes one step: clock_s (non-decreasing from call to call; a lower value resets the window)
 * and compute_s[world]; fills *out. */
void tagc_straggler_step_in(tagc_straggler *d, double clock_s, const double *compute_s,
                            tagc_straggler_step *out);

/* The k-th smallest of v[0 .. n) (0 <= k < n), reordering v: Hoare's selection, O(n) on
 * average. */
double tagc_select_kth(double *v, int64_t n, int64_t k);

/* The median of v[0 .. n) (the lower one for even n; 0 for n = 0); reorders v. */
double tagc_straggler_median(double *v, int n);

#endif
