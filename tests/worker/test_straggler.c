/* Straggler detection (worker/straggler.h) on made-up step timings: the median, a rank held to
 * a fifth of its speed named once about window_s after it slowed and released once it
 * recovers, noisy ranks never named, and bad configurations refused. */
#include "test.h"
#include "worker/straggler.h"

enum { W = 3 };
static const tagc_straggler_config CFG = {1.5, 10.0, 5};

/* Runs steps of `dt` seconds from *clock until `until`, with rank `slow` (or -1) taking
 * `factor` x the others' 20 ms; returns the first event seen (its step in *at), and counts
 * every event in *events. noise: every 7th step rank (step % W) takes 3x (a core taken now
 * and then). */
static tagc_straggler_step run(tagc_straggler *d, double *clock, double until, double dt,
                               int slow, double factor, int noise, double *at, int *events) {
  tagc_straggler_step first = {.event = TAGC_STRAGGLER_NONE, .event_rank = -1};
  for (long i = 0; *clock < until; i++, *clock += dt) {
    double c[W];
    for (int r = 0; r < W; r++)
      c[r] = 0.020 * (r == slow ? factor : 1) * (noise && i % 7 == 0 && i / 7 % W == r ? 3 : 1);
    tagc_straggler_step s;
    tagc_straggler_step_in(d, *clock, c, &s);
    if (s.event != TAGC_STRAGGLER_NONE) {
      if (first.event == TAGC_STRAGGLER_NONE) {
        first = s;
        *at = *clock;
      }
      (*events)++;
    }
  }
  return first;
}

int main(void) {
  double v[] = {5, 1, 4, 2, 3}, even[] = {4, 1, 3, 2}, one[] = {7};
  CHECK(tagc_straggler_median(v, 5) == 3);
  CHECK(tagc_straggler_median(even, 4) == 2); /* the lower median */
  CHECK(tagc_straggler_median(one, 1) == 7 && tagc_straggler_median(one, 0) == 0);
  /* against a sort, on values with repeats */
  for (int n = 1; n < 40; n++) {
    double a[40], b[40];
    for (int i = 0; i < n; i++)
      a[i] = b[i] = (double)((i * 37 + n * 11) % 9);
    for (int i = 1; i < n; i++) /* insertion sort of b */
      for (int j = i; j > 0 && b[j - 1] > b[j]; j--) {
        double t = b[j];
        b[j] = b[j - 1];
        b[j - 1] = t;
      }
    double m = tagc_straggler_median(a, n);
    CHECK_MSG(m == b[(n - 1) / 2], "n %d: median %g, sorted says %g", n, m, b[(n - 1) / 2]);
  }

  tagc_straggler d;
  CHECK_OK(tagc_straggler_init(&d, &CFG, W));
  double clock = 100, at = 0;
  int events = 0;
  /* 60 s of a noisy but fair job: nothing */
  tagc_straggler_step e = run(&d, &clock, 160, 0.025, -1, 1, 1, &at, &events);
  CHECK_MSG(events == 0, "a fair, noisy job gave %d events (first: rank %d at %.1f s)", events,
            e.event_rank, at - 100);
  /* the step summary: rank 1 at 5x */
  tagc_straggler_step s;
  double c[W] = {0.02, 0.1, 0.03};
  tagc_straggler_step_in(&d, clock, c, &s);
  CHECK(s.slowest == 1 && s.max == 0.1 && s.median == 0.03 && s.straggler == -1);

  /* rank 2 held to a fifth of its speed from t = 160 s, steps 5x longer: named once, within
   * [window/2, 2 window] of the slow-down, with its window mean ratio: above the threshold,
   * below 5x since the window still holds steps from before the slow-down */
  double t_slow = clock;
  events = 0;
  e = run(&d, &clock, t_slow + 60, 0.1, 2, 5, 1, &at, &events);
  CHECK_EQ_INT(events, 1);
  CHECK_EQ_INT(e.event, TAGC_STRAGGLER_BEGAN);
  CHECK_EQ_INT(e.event_rank, 2);
  CHECK_MSG(at - t_slow >= 5 && at - t_slow <= 20, "named %.1f s after the slow-down",
            at - t_slow);
  CHECK_MSG(e.event_ratio > CFG.ratio && e.event_ratio < 5, "ratio %g", e.event_ratio);
  tagc_straggler_step_in(&d, clock, (double[W]){0.02, 0.02, 0.1}, &s);
  CHECK(s.straggler == 2 && s.straggler_ratio > 4);

  /* it recovers: one ENDED, with the episode's length; then silence */
  double t_ok = clock;
  events = 0;
  e = run(&d, &clock, t_ok + 60, 0.025, -1, 1, 1, &at, &events);
  CHECK_EQ_INT(events, 1);
  CHECK_EQ_INT(e.event, TAGC_STRAGGLER_ENDED);
  CHECK_EQ_INT(e.event_rank, 2);
  CHECK_MSG(at - t_ok >= 5 && at - t_ok <= 20, "recovered %.1f s after", at - t_ok);
  CHECK_MSG(e.event_s > 50 && e.event_s < 80, "episode of %.1f s", e.event_s);

  /* 1.3x: below the ratio, never named */
  events = 0;
  run(&d, &clock, clock + 60, 0.025, 0, 1.3, 0, &at, &events);
  CHECK_EQ_INT(events, 0);
  /* two ranks slow at once: both named, one event per step */
  events = 0;
  for (double until = clock + 30; clock < until; clock += 0.05) {
    tagc_straggler_step_in(&d, clock, (double[W]){0.02, 0.1, 0.1}, &s);
    events += s.event == TAGC_STRAGGLER_BEGAN;
  }
  CHECK_EQ_INT(events, 0); /* the median is a slow rank then: 1x, nobody stands out */

  /* a reset forgets the episode; a clock that goes back resets too */
  tagc_straggler_reset(&d);
  tagc_straggler_step_in(&d, 5.0, (double[W]){0.02, 0.02, 0.1}, &s);
  CHECK(s.straggler == -1 && s.event == TAGC_STRAGGLER_NONE);
  tagc_straggler_free(&d);
  tagc_straggler_free(&d); /* idempotent */

  /* W = 2: the lower median is the faster rank */
  CHECK_OK(tagc_straggler_init(&d, &CFG, 2));
  int began = -1;
  for (double t = 0; t < 30; t += 0.05) {
    tagc_straggler_step_in(&d, t, (double[2]){0.1, 0.02}, &s);
    if (s.event == TAGC_STRAGGLER_BEGAN)
      began = s.event_rank;
  }
  CHECK_EQ_INT(began, 0);
  tagc_straggler_free(&d);

  /* bad configurations */
  CHECK(tagc_straggler_init(&d, &(tagc_straggler_config){1.0, 10, 5}, W) == TAGC_EINVAL);
  CHECK(tagc_straggler_init(&d, &(tagc_straggler_config){1.5, 0, 5}, W) == TAGC_EINVAL);
  CHECK(tagc_straggler_init(&d, &(tagc_straggler_config){1.5, 10, 0}, W) == TAGC_EINVAL);
  tagc_straggler_free(&d);
  return TEST_END();
}
