/* Straggler detection (straggler.h): window means of clipped ratios, episodes and their
 * hysteresis. */
#include "worker/straggler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double tagc_select_kth(double *v, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1; /* Hoare's selection */
  while (lo < hi) {
    double pivot = v[lo + (hi - lo) / 2];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (v[i] < pivot)
        i++;
      while (v[j] > pivot)
        j--;
      if (i <= j) {
        double t = v[i];
        v[i++] = v[j];
        v[j--] = t;
      }
    }
    if (k <= j)
      hi = j;
    else if (k >= i)
      lo = i;
    else
      break;
  }
  return v[k];
}

double tagc_straggler_median(double *v, int n) { return n > 0 ? tagc_select_kth(v, n, (n - 1) / 2) : 0; }

tagc_status tagc_straggler_init(tagc_straggler *d, const tagc_straggler_config *cfg, int world) {
  memset(d, 0, sizeof *d);
  if (!(cfg->ratio > 1) || !(cfg->window_s > 0) || cfg->min_steps < 1 || world < 1)
    return tagc_errorf(TAGC_EINVAL, "straggler detection: ratio %g must be above 1, window %g s "
                       "above 0, min steps %d and world %d at least 1", cfg->ratio, cfg->window_s,
                       cfg->min_steps, world);
  d->cfg = *cfg;
  d->world = world;
  int cap = TAGC_STRAGGLER_MAX_ENTRIES / world;
  d->cap = cap < 16 ? 16 : cap > 4096 ? 4096 : cap;
  size_t w = (size_t)world;
  d->clock = calloc((size_t)d->cap, sizeof(double));
  d->ratio = calloc((size_t)d->cap * w, sizeof(double));
  d->scratch = calloc((size_t)(d->cap > world ? d->cap : world), sizeof(double));
  d->slow_since = calloc(w, sizeof(double));
  d->calm_since = calloc(w, sizeof(double));
  d->began_at = calloc(w, sizeof(double));
  d->window_ratio = calloc(w, sizeof(double));
  if (!d->clock || !d->ratio || !d->scratch || !d->slow_since || !d->calm_since ||
      !d->began_at || !d->window_ratio) {
    tagc_straggler_free(d);
    return tagc_errorf(TAGC_ENOMEM, "straggler detection of %d ranks", world);
  }
  tagc_straggler_reset(d);
  return TAGC_OK;
}

void tagc_straggler_free(tagc_straggler *d) {
  free(d->clock);
  free(d->ratio);
  free(d->scratch);
  free(d->slow_since);
  free(d->calm_since);
  free(d->began_at);
  free(d->window_ratio);
  d->clock = d->ratio = d->scratch = d->slow_since = d->calm_since = d->began_at =
      d->window_ratio = NULL;
}

void tagc_straggler_reset(tagc_straggler *d) {
  d->head = d->n = 0;
  for (int r = 0; r < d->world; r++) {
    d->slow_since[r] = d->calm_since[r] = d->began_at[r] = -1;
    d->window_ratio[r] = 0;
  }
}

/* Appends a step's ratios, dropping the steps older than the window (or the oldest when full). */
static void push(tagc_straggler *d, double clock_s, const double *ratio) {
  if (d->n > 0 && clock_s < d->clock[(d->head + d->n - 1) % d->cap])
    tagc_straggler_reset(d); /* another clock */
  while (d->n > 0 && (d->n == d->cap || d->clock[d->head] < clock_s - d->cfg.window_s)) {
    d->head = (d->head + 1) % d->cap;
    d->n--;
  }
  int at = (d->head + d->n) % d->cap;
  d->clock[at] = clock_s;
  memcpy(d->ratio + (size_t)at * (size_t)d->world, ratio, (size_t)d->world * sizeof(double));
  d->n++;
}

/* Rank r's mean ratio over the window. */
static double window_mean(const tagc_straggler *d, int r) {
  double sum = 0;
  for (int i = 0; i < d->n; i++)
    sum += d->ratio[(size_t)((d->head + i) % d->cap) * (size_t)d->world + (size_t)r];
  return d->n > 0 ? sum / d->n : 0;
}

/* Moves rank r's episode state on at clock `now`; returns the event (at most one per step:
 * when `quiet`, only the conditions' clocks move, so a change waits for a later step). */
static tagc_straggler_event advance(tagc_straggler *d, int r, double now, int judged, int quiet,
                                    tagc_straggler_step *out) {
  double med = d->window_ratio[r], hold = d->cfg.window_s / 2;
  int slow = judged && med > d->cfg.ratio;
  d->slow_since[r] = !slow ? -1 : d->slow_since[r] < 0 ? now : d->slow_since[r];
  if (d->began_at[r] < 0) {
    if (!slow || now - d->slow_since[r] < hold || quiet)
      return TAGC_STRAGGLER_NONE;
    d->began_at[r] = now;
    d->calm_since[r] = -1;
    out->event_s = now - d->slow_since[r];
    return TAGC_STRAGGLER_BEGAN;
  }
  int calm = judged && med < 1 + (d->cfg.ratio - 1) / 2;
  d->calm_since[r] = !calm ? -1 : d->calm_since[r] < 0 ? now : d->calm_since[r];
  if (!calm || now - d->calm_since[r] < hold || quiet)
    return TAGC_STRAGGLER_NONE;
  out->event_s = now - d->began_at[r];
  d->began_at[r] = -1;
  d->slow_since[r] = -1;
  return TAGC_STRAGGLER_ENDED;
}

void tagc_straggler_step_in(tagc_straggler *d, double clock_s, const double *compute_s,
                            tagc_straggler_step *out) {
  int W = d->world;
  memset(out, 0, sizeof *out);
  out->straggler = out->event_rank = -1;
  memcpy(d->scratch, compute_s, (size_t)W * sizeof(double));
  out->median = tagc_straggler_median(d->scratch, W);
  for (int r = 0; r < W; r++)
    if (r == 0 || compute_s[r] > out->max) {
      out->max = compute_s[r];
      out->slowest = r;
    }
  double *ratio = d->window_ratio; /* this step's ratios, until the window means replace them */
  for (int r = 0; r < W; r++) {
    double q = out->median > 0 && isfinite(compute_s[r]) ? compute_s[r] / out->median : 1;
    ratio[r] = q < TAGC_STRAGGLER_CLIP ? q : TAGC_STRAGGLER_CLIP;
  }
  push(d, clock_s, ratio);
  double span = d->clock[(d->head + d->n - 1) % d->cap] - d->clock[d->head];
  int judged = d->n >= d->cfg.min_steps && span >= d->cfg.window_s / 2;
  for (int r = 0; r < W; r++)
    d->window_ratio[r] = window_mean(d, r);
  for (int r = 0; r < W; r++) {
    tagc_straggler_event ev = advance(d, r, clock_s, judged, out->event != TAGC_STRAGGLER_NONE, out);
    if (ev != TAGC_STRAGGLER_NONE) {
      out->event = ev;
      out->event_rank = r;
      out->event_ratio = d->window_ratio[r];
    }
    if (d->began_at[r] >= 0 && d->window_ratio[r] > out->straggler_ratio) {
      out->straggler = r;
      out->straggler_ratio = d->window_ratio[r];
    }
  }
}
