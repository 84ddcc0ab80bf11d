/* The planner's crash rules: a death its supervisor reported (leaving/<id> with "died") drops
 * the member at once, settled, counted as a crash (and the survivors' reports of it as
 * crashes, not partitions); quick deaths in a row put a worker on probation for
 * 5 s * 2^(n-2) (at most 120 s) from when its registration was first seen, and the end of the
 * probation readmits it. */
#include <string.h>

#include <jansson.h>

#include "common/status.h"
#include "coordinator/planner.h"
#include "plan_text.h"
#include "test.h"

static const tagc_planner_config cfg = {.min_workers = 2, .max_workers = 8, .suspect_window_s = 2,
                                        .default_micro_batch = 16};

/* The current plan: members w0, w1, w2 registered as 10, 11, 12; quick_deaths as given (may
 * be NULL: none). */
static json_t *plan3(json_t *quick_deaths) {
  json_t *p = json_pack("{s:i, s:[s,s,s], s:{s:i,s:i,s:i}}", "gen", 5, "members", "w0", "w1",
                        "w2", "registrations", "w0", 10, "w1", 11, "w2", 12);
  if (quick_deaths)
    json_object_set_new(p, "quick_deaths", quick_deaths);
  return p;
}

typedef struct scene {
  const json_t *plan;
  const tagc_planner_worker *live;
  const double *seen_at;
  size_t n_live;
  const tagc_planner_report *reports;
  size_t n_reports;
  const tagc_planner_worker *leaving;
  const tagc_planner_death *deaths;
  size_t n_leaving;
  double now;
} scene;

static int decide(const scene *s, tagc_planner_decision *d) {
  tagc_planner_input in = {.gen = 5, .plan = s->plan, .workers = s->live, .n_workers = s->n_live,
                           .seen_at = s->seen_at, .reports = s->reports,
                           .n_reports = s->n_reports, .leaving = s->leaving,
                           .n_leaving = s->n_leaving, .deaths = s->deaths, .now = s->now};
  tagc_status st = tagc_planner_decide(&cfg, &in, d);
  if (st != TAGC_OK)
    fprintf(stderr, "decide: %s\n", tagc_last_error());
  return st == TAGC_OK ? (int)d->action : -1;
}

static json_int_t total(const json_t *plan, const char *kind) {
  return json_integer_value(json_object_get(json_object_get(plan, "failures_total"), kind));
}

static json_int_t quick(const json_t *plan, const char *id) {
  return json_integer_value(
      json_object_get(json_object_get(json_object_get(plan, "quick_deaths"), id), "count"));
}

/* The supervisor's death record: a new generation without the member at once, settled (no
 * settle window), a crash, no lease; its lease still there changes nothing. */
static void test_death_record(void) {
  json_t *plan = plan3(NULL);
  tagc_planner_worker live[] = {{"w0", 10}, {"w1", 11}, {"w2", 12}};
  tagc_planner_worker leave[] = {{"w2", 12}};
  tagc_planner_death death[] = {{.died = 1, .uptime_s = 4.0}};
  scene s = {.plan = plan, .live = live, .n_live = 3, .leaving = leave, .deaths = death,
             .n_leaving = 1, .now = 100};
  tagc_planner_decision d;
  char buf[128];
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1");
  CHECK_EQ_STR(d.reason, "lost w2 (crashed, seen by its supervisor)");
  CHECK_EQ_INT(d.settled, 1);
  CHECK_EQ_INT(total(d.plan, "crash"), 1);
  CHECK_EQ_INT(total(d.plan, "lease"), 0);
  CHECK_EQ_INT(quick(d.plan, "w2"), 1);
  tagc_planner_decision_free(&d);

  /* the same record without "died" is a graceful leave: not settled by itself, no failure */
  s.deaths = NULL;
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(d.reason, "w2 left");
  CHECK_EQ_INT(d.settled, 0);
  CHECK_EQ_INT(total(d.plan, "crash"), 0);
  CHECK(json_object_get(json_object_get(d.plan, "quick_deaths"), "w2") == NULL);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* Survivors' reports that blame the dead member's link count as crashes: a restarted process
 * under the same id looks alive to them (partition), a timed-out collective reads hang. The
 * dead member is not suspected. */
static void test_cascade_reports(void) {
  json_t *plan = plan3(NULL);
  tagc_planner_worker live[] = {{"w0", 10}, {"w1", 11}, {"w2", 13}}; /* w2 restarted: 13 */
  tagc_planner_report rep[] = {{"w0", "partition", 40, 2, 100}, {"w1", "hang", 40, 2, 100}};
  tagc_planner_worker leave[] = {{"w2", 12}};
  tagc_planner_death death[] = {{.died = 1, .uptime_s = 50.0}};
  scene s = {.plan = plan, .live = live, .n_live = 3, .reports = rep, .n_reports = 2,
             .leaving = leave, .deaths = death, .n_leaving = 1, .now = 100};
  tagc_planner_decision d;
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_INT(total(d.plan, "crash"), 3);
  CHECK_EQ_INT(total(d.plan, "partition"), 0);
  CHECK_EQ_INT(total(d.plan, "hang"), 0);
  CHECK_EQ_INT(quick(d.plan, "w2"), 0); /* it had run 50 s: no quick death */
  CHECK(json_object_size(json_object_get(d.plan, "excluded")) == 0);
  CHECK(strstr(d.reason, "lost w2 (crashed, seen by its supervisor)") != NULL);
  tagc_planner_decision_free(&d);

  /* without the death record the same reports count as reported */
  s.deaths = NULL, s.leaving = NULL, s.n_leaving = 0;
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_INT(total(d.plan, "partition"), 1);
  CHECK_EQ_INT(total(d.plan, "crash"), 0);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* n quick deaths counted, w2 registered again (20) and first seen at 100: probation until
 * 100 + 5 * 2^(n-2), readmitted at its end. */
static void probation(int n, double expected_s) {
  json_t *plan = json_pack("{s:i, s:[s,s], s:{s:i,s:i}, s:{s:{s:i,s:i}}}", "gen", 5, "members",
                           "w0", "w1", "registrations", "w0", 10, "w1", 11, "quick_deaths", "w2",
                           "count", n - 1, "registration", 15);
  tagc_planner_worker live[] = {{"w0", 10}, {"w1", 11}, {"w2", 20}};
  double seen[] = {1, 1, 100};
  tagc_planner_worker leave[] = {{"w2", 18}}; /* the n-th death, not counted yet */
  tagc_planner_death death[] = {{.died = 1, .uptime_s = 3.0}};
  scene s = {.plan = plan, .live = live, .seen_at = seen, .n_live = 3, .leaving = leave,
             .deaths = death, .n_leaving = 1, .now = 100.5};
  tagc_planner_decision d;
  char buf[128];
  /* on probation: nothing else changed, so no generation; wake at its end */
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_KEEP);
  CHECK(d.wake_at > 100 + expected_s - 1e-9 && d.wake_at < 100 + expected_s + 1e-9);
  tagc_planner_decision_free(&d);
  /* just before the end: still out */
  s.now = 100 + expected_s - 0.01;
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_KEEP);
  tagc_planner_decision_free(&d);
  /* a new generation made meanwhile (w1 died) keeps it out and carries the count */
  tagc_planner_worker leave2[] = {{"w2", 18}, {"w1", 11}};
  tagc_planner_death death2[] = {{.died = 1, .uptime_s = 3.0}, {.died = 1, .uptime_s = 300}};
  scene s2 = s;
  s2.leaving = leave2, s2.deaths = death2, s2.n_leaving = 2, s2.now = 101;
  CHECK_EQ_INT(decide(&s2, &d), TAGC_PLANNER_STALLED); /* w0 alone < min_workers 2 */
  CHECK(d.wake_at > 100 + expected_s - 1e-9 && d.wake_at < 100 + expected_s + 1e-9);
  tagc_planner_decision_free(&d);
  /* at the end it joins */
  s.now = 100 + expected_s;
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1,w2");
  CHECK_EQ_INT(quick(d.plan, "w2"), n);
  CHECK(d.wake_at == 0);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

static void test_probation(void) {
  probation(2, 5.0);
  probation(3, 10.0);
  probation(4, 20.0);
  probation(9, 120.0); /* 5 * 2^7 = 640 s, capped */
}

/* One quick death is no probation; a long-lived death resets the count. */
static void test_no_probation(void) {
  json_t *plan = json_pack("{s:i, s:[s,s], s:{s:i,s:i}}", "gen", 5, "members", "w0", "w1",
                           "registrations", "w0", 10, "w1", 11);
  tagc_planner_worker live[] = {{"w0", 10}, {"w1", 11}, {"w2", 20}};
  double seen[] = {1, 1, 100};
  tagc_planner_worker leave[] = {{"w2", 18}};
  tagc_planner_death death[] = {{.died = 1, .uptime_s = 3.0}};
  scene s = {.plan = plan, .live = live, .seen_at = seen, .n_live = 3, .leaving = leave,
             .deaths = death, .n_leaving = 1, .now = 100.5};
  tagc_planner_decision d;
  char buf[128];
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1,w2");
  CHECK_EQ_INT(quick(d.plan, "w2"), 1);
  tagc_planner_decision_free(&d);
  json_decref(plan);

  plan = json_pack("{s:i, s:[s,s], s:{s:i,s:i}, s:{s:{s:i,s:i}}}", "gen", 5, "members", "w0",
                   "w1", "registrations", "w0", 10, "w1", 11, "quick_deaths", "w2", "count", 4,
                   "registration", 15);
  s.plan = plan;
  death[0].uptime_s = 45.0;
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1,w2");
  CHECK_EQ_INT(quick(d.plan, "w2"), 0);
  tagc_planner_decision_free(&d);
  /* a death already counted (its registration is the plan's) is not counted again */
  leave[0].registration = 15;
  death[0].uptime_s = 3.0;
  s.now = 100 + 80 - 0.5; /* 4 quick deaths: 20 s from 100, over */
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_INT(quick(d.plan, "w2"), 4);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* A member that died and registered again before the next plan joins it at once (after the
 * survivors): with min_workers 3 the job needs it, and a plan without it is never made. */
static void test_died_and_back(void) {
  json_t *plan = plan3(NULL);
  tagc_planner_worker live[] = {{"w0", 10}, {"w1", 25}, {"w2", 12}}; /* w1 restarted: 25 */
  double seen[] = {1, 100, 1};
  tagc_planner_worker leave[] = {{"w1", 11}};
  tagc_planner_death death[] = {{.died = 1, .uptime_s = 2.5}};
  scene s = {.plan = plan, .live = live, .seen_at = seen, .n_live = 3, .leaving = leave,
             .deaths = death, .n_leaving = 1, .now = 100.5};
  tagc_planner_config three = cfg;
  three.min_workers = 3;
  tagc_planner_input in = {.gen = 5, .plan = plan, .workers = live, .n_workers = 3,
                           .seen_at = seen, .leaving = leave, .n_leaving = 1, .deaths = death,
                           .now = 100.5};
  tagc_planner_decision d;
  char buf[128];
  CHECK_EQ_INT(tagc_planner_decide(&three, &in, &d), TAGC_OK);
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w2,w1");
  CHECK(strstr(d.reason, "lost w1 (crashed, seen by its supervisor)") != NULL);
  CHECK(strstr(d.reason, "w1 joined") != NULL);
  CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(d.plan, "registrations"), "w1")),
               25);
  CHECK_EQ_INT(total(d.plan, "crash"), 1);
  tagc_planner_decision_free(&d);
  /* still dead (no new registration): fewer than 3, no plan */
  live[1].registration = 11;
  CHECK_EQ_INT(decide(&s, &d), TAGC_PLANNER_NEW); /* min_workers 2: w0,w2 */
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w2");
  tagc_planner_decision_free(&d);
  CHECK_EQ_INT(tagc_planner_decide(&three, &in, &d), TAGC_OK);
  CHECK(d.action != TAGC_PLANNER_NEW);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

int main(void) {
  test_died_and_back();
  test_death_record();
  test_cascade_reports();
  test_probation();
  test_no_probation();
  return TEST_END();
}
