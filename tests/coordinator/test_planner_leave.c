/* The planner's leaving rule (leaving/<id>, a worker stopped by SIGTERM): the member is gone at
 * once whether its lease is there or not, no failure is counted, a live leaver is no joiner, a
 * record of an older registration is ignored; and the plan carries the committed checkpoint's
 * manifest CRC to the workers. */
#include <string.h>

#include <jansson.h>

#include "common/status.h"
#include "cluster/member.h"
#include "coordinator/planner.h"
#include "plan_text.h"
#include "test.h"

static const tagc_planner_config cfg = {.min_workers = 2, .max_workers = 8, .suspect_window_s = 2,
                                        .default_micro_batch = 16};

/* The current plan: members w0, w1, w2 registered as 10, 11, 12; one lost lease so far. */
static json_t *plan3(void) {
  return json_pack("{s:i, s:[s,s,s], s:{s:i,s:i,s:i}, s:{s:i}}", "gen", 5, "members", "w0", "w1",
                   "w2", "registrations", "w0", 10, "w1", 11, "w2", 12, "failures_total", "lease", 1);
}

static int decide(const json_t *plan, const tagc_planner_worker *w, size_t nw,
                  const tagc_planner_worker *leaving, size_t nl, const json_t *ckpt,
                  tagc_planner_decision *d) {
  tagc_planner_input in = {.gen = 5, .plan = plan, .workers = w, .n_workers = nw,
                           .leaving = leaving, .n_leaving = nl, .ckpt = ckpt};
  tagc_status st = tagc_planner_decide(&cfg, &in, d);
  if (st != TAGC_OK)
    fprintf(stderr, "decide: %s\n", tagc_last_error());
  return st == TAGC_OK ? (int)d->action : -1;
}

static json_int_t lease_failures(const json_t *plan) {
  return json_integer_value(json_object_get(json_object_get(plan, "failures_total"), "lease"));
}

/* A member that announced its leave is gone at once, lease or not, and is not a failure. */
static void test_member_leaves(void) {
  json_t *plan = plan3();
  tagc_planner_worker live[] = {{"w0", 10}, {"w1", 11}, {"w2", 12}};
  tagc_planner_worker leave[] = {{"w2", 12}};
  tagc_planner_decision d;
  char buf[128];
  CHECK_EQ_INT(decide(plan, live, 3, leave, 1, NULL, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1");
  CHECK_EQ_STR(d.reason, "w2 left");
  CHECK_EQ_INT(lease_failures(d.plan), 1);
  tagc_planner_decision_free(&d);

  /* its lease already revoked: still "left", not "lost" */
  CHECK_EQ_INT(decide(plan, live, 2, leave, 1, NULL, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(d.reason, "w2 left");
  CHECK_EQ_INT(lease_failures(d.plan), 1);
  tagc_planner_decision_free(&d);

  /* without the record the same departure is a lost lease */
  CHECK_EQ_INT(decide(plan, live, 2, NULL, 0, NULL, &d), TAGC_PLANNER_NEW);
  CHECK(strstr(d.reason, "lost w2 (lease expired)") != NULL);
  CHECK_EQ_INT(lease_failures(d.plan), 2);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* Leavers below min_workers: no generation (stalled), still no failure. */
static void test_leaving_below_min(void) {
  json_t *plan = plan3();
  tagc_planner_worker live[] = {{"w0", 10}, {"w1", 11}, {"w2", 12}};
  tagc_planner_worker leave[] = {{"w1", 11}, {"w2", 12}};
  tagc_planner_decision d;
  CHECK_EQ_INT(decide(plan, live, 3, leave, 2, NULL, &d), TAGC_PLANNER_STALLED);
  CHECK(strstr(d.reason, "w1 left") && strstr(d.reason, "w2 left") && strstr(d.reason, "need 2"));
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* A live standby that leaves is no joiner; a record of an older registration is stale. */
static void test_joiners(void) {
  json_t *plan = plan3();
  tagc_planner_worker live[] = {{"w0", 10}, {"w1", 11}, {"w2", 12}, {"w3", 20}, {"w4", 21}};
  tagc_planner_worker leave[] = {{"w3", 20}, {"w4", 7}, {"w1", 3}};
  tagc_planner_decision d;
  char buf[128];
  CHECK_EQ_INT(decide(plan, live, 5, leave, 3, NULL, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1,w2,w4");
  CHECK_EQ_STR(d.reason, "w4 joined");
  tagc_planner_decision_free(&d);

  /* the only change is a leaving standby: nothing to do */
  CHECK_EQ_INT(decide(plan, live, 4, leave, 1, NULL, &d), TAGC_PLANNER_KEEP);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* A report naming a member that leaves suspects nobody (it is gone, not hung). */
static void test_no_suspicion_of_leaver(void) {
  json_t *plan = plan3();
  tagc_planner_worker live[] = {{"w0", 10}, {"w1", 11}, {"w2", 12}};
  tagc_planner_worker leave[] = {{"w2", 12}};
  tagc_planner_report r[] = {{"w0", "comm", 30, 2, 0}};
  tagc_planner_input in = {.gen = 5, .plan = plan, .workers = live, .n_workers = 3,
                           .reports = r, .n_reports = 1, .leaving = leave, .n_leaving = 1,
                           .now = 100};
  tagc_planner_decision d;
  CHECK_OK(tagc_planner_decide(&cfg, &in, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  char buf[128];
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1");
  CHECK(strstr(d.reason, "excluded") == NULL);
  CHECK(json_object_get(json_object_get(d.plan, "strikes"), "w2") == NULL);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* The committed record's manifest CRC travels in the plan's resume point to the workers. */
static void test_resume_crc(void) {
  json_t *plan = plan3();
  tagc_planner_worker live[] = {{"w0", 10}, {"w1", 11}};
  json_t *ckpt = json_pack("{s:i, s:s, s:I}", "step", 40, "path", "/c/step-40", "manifest_crc",
                           (json_int_t)3000000000u);
  tagc_planner_decision d;
  CHECK_EQ_INT(decide(plan, live, 2, NULL, 0, ckpt, &d), TAGC_PLANNER_NEW);
  char *text = json_dumps(d.plan, 0);
  tagc_plan p;
  CHECK_OK(tagc_plan_parse(text, strlen(text), "w1", &p));
  CHECK_EQ_INT(p.resume_step, 40);
  CHECK_EQ_STR(p.resume_path, "/c/step-40");
  CHECK(p.resume_manifest_crc == 3000000000u);
  tagc_plan_free(&p);
  free(text);
  tagc_planner_decision_free(&d);
  json_decref(ckpt);
  json_decref(plan);
}

int main(void) {
  test_member_leaves();
  test_leaving_below_min();
  test_joiners();
  test_no_suspicion_of_leaver();
  test_resume_crc();
  return TEST_END();
}
