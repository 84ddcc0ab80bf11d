/* The planner's straggler rule: a "straggler" report (--exclude-straggler) excludes the member
 * it names at once, without the suspect window, and nobody else; a report that would leave
 * fewer than min_workers is set aside (no new generation); one naming no member is set aside
 * too. */
#include <string.h>

#include <jansson.h>

#include "common/status.h"
#include "coordinator/planner.h"
#include "plan_text.h"
#include "test.h"

static const tagc_planner_worker live[] = {{"a", 1}, {"b", 2}, {"c", 3}};

/* Generation 3 of members a, b, c, registered as 1, 2, 3. */
static json_t *plan_of(void) {
  return json_pack("{s:i, s:[s,s,s], s:{s:i,s:i,s:i}, s:{s:i}}", "gen", 3, "members", "a", "b",
                   "c", "registrations", "a", 1, "b", 2, "c", 3, "resume", "step", 20);
}

static int decide(int min_workers, const json_t *plan, const tagc_planner_report *r, size_t nr,
                  tagc_planner_decision *d) {
  tagc_planner_config cfg = {.min_workers = min_workers, .max_workers = 8,
                             .suspect_window_s = 30, .default_micro_batch = 16};
  tagc_planner_input in = {.gen = 3, .plan = plan, .workers = live, .n_workers = 3,
                           .reports = r, .n_reports = nr, .now = 100.1};
  tagc_status st = tagc_planner_decide(&cfg, &in, d);
  if (st != TAGC_OK)
    fprintf(stderr, "decide: %s\n", tagc_last_error());
  return st == TAGC_OK ? (int)d->action : -1;
}

int main(void) {
  json_t *plan = plan_of();
  tagc_planner_decision d;
  char buf[256];
  /* a (rank 0) names b (rank 1) at step 57: b goes at once, not after the 30 s window */
  tagc_planner_report r[] = {{"a", "straggler", 57, 1, 100.0}};
  CHECK_EQ_INT(decide(2, plan, r, 1, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,c");
  CHECK(json_object_get(json_object_get(d.plan, "excluded"), "b") != NULL);
  CHECK(strstr(d.reason, "excluded b: a straggler, reported by a at step 57") != NULL);
  CHECK_EQ_INT((int)json_integer_value(json_object_get(json_object_get(d.plan, "failures_total"),
                                                       "straggler")), 1);
  tagc_planner_decision_free(&d);

  /* min_workers 3: excluding b would stall the job; it stays and no generation is made */
  CHECK_EQ_INT(decide(3, plan, r, 1, &d), TAGC_PLANNER_KEEP);
  tagc_planner_decision_free(&d);

  /* a report naming no member (rank 5) asks for nothing */
  tagc_planner_report stray[] = {{"a", "straggler", 57, 5, 100.0}};
  CHECK_EQ_INT(decide(2, plan, stray, 1, &d), TAGC_PLANNER_KEEP);
  tagc_planner_decision_free(&d);

  /* with a real failure beside it, the straggler still goes and the failure makes the plan */
  tagc_planner_report both[] = {{"a", "straggler", 57, 1, 100.0}, {"c", "crash", 58, -1, 100.0}};
  CHECK_EQ_INT(decide(3, plan, both, 2, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b,c");
  tagc_planner_decision_free(&d);
  json_decref(plan);
  return TEST_END();
}
