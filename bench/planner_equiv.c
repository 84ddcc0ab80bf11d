/* planner_equiv: compares the planner of another commit (compiled with its entry points renamed
 * old_planner_decide / old_planner_decision_free, by bench/planner_equiv.sh) with this tree's
 * on N random small inputs: members (some listed twice), live workers and joiners,
 * re-registrations with "previous", leave and death records, reports of every kind and peer,
 * carried exclusions, strikes, suspicion pairs, fruitless streaks, quick deaths, grace and
 * start settings. Prints the first differences (action, settled, times, reason, plan) and a
 * count; exits 1 when any differs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "coordinator/planner.h"

tagc_status old_planner_decide(const tagc_planner_config *cfg, const tagc_planner_input *in,
                               tagc_planner_decision *out);
void old_planner_decision_free(tagc_planner_decision *d);

static unsigned rng;
static int rnd(int n) { return (int)(rand_r(&rng) % (unsigned)n); }

static const char *names[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
static const char *kinds[] = {"comm", "hang", "partition", "oom", "crash", "straggler", "timeout", "injected"};

int main(int argc, char **argv) {
  long cases = argc > 1 ? atol(argv[1]) : 100000, diffs = 0, news = 0;
  for (long c = 0; c < cases; c++) {
    rng = (unsigned)c * 2654435761u + 7;
    int nm = rnd(8) + (c % 10 == 0 ? 0 : 1); /* 0 = no plan sometimes */
    int nall = 10;
    json_t *plan = NULL;
    if (nm > 0) {
      json_t *members = json_array(), *regs = json_object(), *excl = json_object(),
             *strikes = json_object(), *susp = json_array(), *blame = json_object(),
             *micro = json_object(), *qd = json_object();
      for (int i = 0; i < nm; i++) {
        const char *id = names[(i * 3 + c) % nall];
        if (rnd(20) == 0 && i > 0) id = json_string_value(json_array_get(members, 0)); /* dup */
        json_array_append_new(members, json_string(id));
        json_object_set_new(regs, id, json_integer(rnd(3) + 1));
        if (rnd(4) == 0) json_object_set_new(micro, id, json_integer(rnd(4)));
        if (rnd(6) == 0) json_object_set_new(strikes, id, json_integer(rnd(3)));
        if (rnd(6) == 0) json_object_set_new(blame, id, json_integer(rnd(3)));
        if (rnd(8) == 0) json_object_set_new(qd, id, json_pack("{s:i,s:i}", "count", rnd(4), "registration", rnd(3)));
      }
      for (int k = 0; k < 2; k++) {
        if (rnd(3) == 0) {
          const char *x = names[rnd(nall)];
          json_object_set_new(excl, x, json_pack("{s:i,s:s}", "registration", rnd(3) + 1, "why", "t"));
        }
        if (rnd(3) == 0)
          json_array_append_new(susp, json_pack("{s:[s,s],s:i}", "pair", names[rnd(nall)], names[rnd(nall)], "count", rnd(2) + 1));
      }
      plan = json_pack("{s:i,s:i,s:o,s:o,s:o,s:o,s:o,s:{s:i,s:o},s:o,s:o,s:{s:i,s:n}}", "gen", 5, "world", nm,
                       "members", members, "registrations", regs, "excluded", excl, "strikes", strikes,
                       "suspicion", susp, "fruitless", "gens", rnd(3), "blame", blame, "micro_batch", micro,
                       "quick_deaths", qd, "resume", "step", 100, "path");
    }
    tagc_planner_worker workers[10];
    double seen[10];
    size_t nw = 0;
    json_t *info = json_object();
    for (int i = 0; i < nall; i++) {
      if (rnd(4) == 0) continue;
      workers[nw] = (tagc_planner_worker){names[i], rnd(3) + 1};
      seen[nw] = 90 + rnd(20);
      if (rnd(5) == 0) json_object_set_new(info, names[i], json_pack("{s:[i]}", "previous", rnd(3) + 1));
      nw++;
    }
    tagc_planner_report reports[10];
    size_t nr = 0;
    int nrep = rnd(3) == 0 ? 0 : rnd(nall);
    for (int i = 0; i < nrep; i++) {
      reports[nr++] = (tagc_planner_report){names[rnd(nall)], kinds[rnd(8)], rnd(3) == 0 ? 0 : 50 + rnd(100),
                                            rnd(nm + 2) - 1, 97.0 + rnd(4)};
    }
    tagc_planner_worker leaving[4];
    tagc_planner_death deaths[4];
    size_t nl = 0;
    for (int i = 0; i < 4; i++) {
      if (rnd(3)) continue;
      leaving[nl] = (tagc_planner_worker){names[rnd(nall)], rnd(3) + 1};
      deaths[nl] = (tagc_planner_death){rnd(2), rnd(60)};
      nl++;
    }
    tagc_planner_config cfg = {.min_workers = 1 + rnd(3), .max_workers = 3 + rnd(8), .suspect_window_s = 2,
                               .default_micro_batch = rnd(3) * 4, .start_workers = rnd(4), .start_deadline = 95 + rnd(10),
                               .lost_grace_until = rnd(3) == 0 ? 101 : 0};
    if (cfg.max_workers < cfg.min_workers) cfg.max_workers = cfg.min_workers;
    tagc_planner_input in = {.gen = nm ? 5 : 0, .plan = plan, .workers = workers, .n_workers = nw,
                             .seen_at = rnd(2) ? seen : NULL, .worker_info = info, .reports = reports,
                             .n_reports = nr, .leaving = leaving, .n_leaving = nl,
                             .deaths = rnd(2) ? deaths : NULL, .now = 100.0};
    tagc_planner_decision a, b;
    tagc_status sa = old_planner_decide(&cfg, &in, &a), sb = tagc_planner_decide(&cfg, &in, &b);
    int same = sa == sb && (sa != TAGC_OK || (a.action == b.action && a.settled == b.settled &&
               a.wait_until == b.wait_until && a.wake_at == b.wake_at && !strcmp(a.reason, b.reason) &&
               ((!a.plan && !b.plan) || (a.plan && b.plan && json_equal(a.plan, b.plan)))));
    news += sa == TAGC_OK && a.action == TAGC_PLANNER_NEW;
    if (!same && diffs++ < 5) {
      printf("case %ld differs: %d/%d action %d/%d settled %d/%d\n  old: %s\n  new: %s\n", c, sa, sb, a.action, b.action,
             a.settled, b.settled, a.reason, b.reason);
      char *pa = a.plan ? json_dumps(a.plan, JSON_SORT_KEYS | JSON_COMPACT) : NULL, *pb = b.plan ? json_dumps(b.plan, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
      printf("  %s\n  %s\n", pa ? pa : "-", pb ? pb : "-");
      free(pa); free(pb);
    }
    old_planner_decision_free(&a);
    tagc_planner_decision_free(&b);
    json_decref(plan);
    json_decref(info);
  }
  printf("%ld cases, %ld NEW, %ld differ\n", cases, news, diffs);
  return diffs != 0;
}
