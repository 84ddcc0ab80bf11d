/* Stragglers in a generation (run_internal.h): the detection of worker/straggler.h fed with
 * each step's compute seconds of every rank, its warnings, and the report that excludes a
 * straggler under --exclude-straggler. */
#include "worker/run_internal.h"

#include <stdio.h>

#include "common/log.h"

/* Detection steps before the window is judged at all. */
#define STRAGGLER_MIN_STEPS 8

tagc_status run_straggler_begin(tagc_run *t) {
  tagc_straggler_config sc = {t->cfg->straggler_ratio, t->cfg->straggler_window,
                              STRAGGLER_MIN_STEPS};
  t->named_straggler = 0;
  run_straggler_end(t);
  return tagc_straggler_init(&t->strag, &sc, t->world);
}

void run_straggler_end(tagc_run *t) { tagc_straggler_free(&t->strag); }

int tagc_run_named_straggler(const tagc_run *r) { return r->named_straggler; }

/* The worker id of rank r, or "" when not known. */
static const char *worker_of(const tagc_run *t, int r) {
  return t->members && r >= 0 && r < t->world && t->members[r] ? t->members[r] : "";
}

/* The rank that speaks for the others about rank `slow`: 0, or 1 when 0 is the one. */
static int speaker(int slow) { return slow == 0 ? 1 : 0; }

static void began(tagc_run *t, int64_t step, const tagc_straggler_step *s) {
  const char *id = worker_of(t, s->event_rank);
  char detail[256];
  snprintf(detail, sizeof detail, "rank %d (worker %s) computes %.2fx the median per step over "
           "the last %.0f s, slow for %.0f s", s->event_rank, *id ? id : "?", s->event_ratio,
           t->cfg->straggler_window, s->event_s);
  if (s->event_rank == t->rank) {
    t->named_straggler = 1;
    LOG_WARN("straggler", "this worker is the straggler of generation %lld at step %lld: %s",
             (long long)t->gen, (long long)step + 1, detail);
  }
  if (t->rank != speaker(s->event_rank))
    return;
  int exclude = t->cfg->exclude_straggler && t->hooks.report_straggler;
  LOG_WARN("straggler", "straggler at step %lld: %s; %s", (long long)step + 1, detail,
           exclude ? "reporting it so that the coordinator plans a generation without it "
                     "(--exclude-straggler)"
                   : "the job runs at its pace (--exclude-straggler would leave it out)");
  if (exclude && t->hooks.report_straggler(t->hooks.ctx, t->gen, step + 1, s->event_rank,
                                           detail) != TAGC_OK)
    LOG_WARN("straggler", "straggler report not recorded: %s", tagc_last_error());
}

static void ended(tagc_run *t, int64_t step, const tagc_straggler_step *s) {
  if (s->event_rank == t->rank)
    t->named_straggler = 0;
  if (t->rank != speaker(s->event_rank))
    return;
  const char *id = worker_of(t, s->event_rank);
  LOG_INFO("straggler", "rank %d (worker %s) is no longer a straggler at step %lld, after "
           "%.0f s: %.2fx the median over the last %.0f s", s->event_rank, *id ? id : "?",
           (long long)step + 1, s->event_s, s->event_ratio, t->cfg->straggler_window);
}

void run_straggler_step(tagc_run *t, int64_t step, const tagc_step_stats *ss) {
  if (!ss->compute_ranks || !t->strag.clock)
    return;
  tagc_straggler_step s;
  tagc_straggler_step_in(&t->strag, ss->clock_s, ss->compute_ranks, &s);
  tagc_report_ranks(&t->report, &s, ss->compute_ranks, worker_of(t, s.straggler));
  if (s.event == TAGC_STRAGGLER_BEGAN)
    began(t, step, &s);
  else if (s.event == TAGC_STRAGGLER_ENDED)
    ended(t, step, &s);
}
