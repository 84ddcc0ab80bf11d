/* The planner's lease-loss rules (docs/etcd-schema.md, "Lease loss"): a registration that
 * names the planned one in "previous" continues it (no new generation, an exclusion stays);
 * during the lease-loss grace a member without a lease makes a WAIT, unless a failure is
 * reported; after the grace it is lost as before; a registration that continues nothing is a
 * new member. */
#include <string.h>

#include <jansson.h>

#include "common/status.h"
#include "coordinator/planner.h"
#include "plan_text.h"
#include "test.h"

/* The current plan: members w0, w1, w2 registered as 10, 11, 12; w3 (13) excluded. */
static json_t *plan3(void) {
  return json_pack("{s:i, s:[s,s,s], s:{s:i,s:i,s:i}, s:{s:{s:i,s:s}}}", "gen", 5, "members", "w0",
                   "w1", "w2", "registrations", "w0", 10, "w1", 11, "w2", 12, "excluded", "w3",
                   "registration", 13, "why", "suspected");
}

static int decide(double grace_until, double now, const json_t *plan, const tagc_planner_worker *w,
                  size_t nw, const json_t *info, const tagc_planner_report *rep, size_t nr,
                  tagc_planner_decision *d) {
  tagc_planner_config cfg = {.min_workers = 1, .max_workers = 8, .suspect_window_s = 2,
                             .lost_grace_until = grace_until};
  tagc_planner_input in = {.gen = 5, .plan = plan, .workers = w, .n_workers = nw,
                           .worker_info = info, .reports = rep, .n_reports = nr, .now = now};
  tagc_status st = tagc_planner_decide(&cfg, &in, d);
  if (st != TAGC_OK)
    fprintf(stderr, "decide: %s\n", tagc_last_error());
  return st == TAGC_OK ? (int)d->action : -1;
}

/* Every member registered again after etcd dropped the leases, naming the lost ones. */
static void test_continuation(void) {
  json_t *plan = plan3();
  tagc_planner_worker live[] = {{"w0", 20}, {"w1", 21}, {"w2", 22}, {"w3", 23}};
  json_t *info = json_pack("{s:{s:[i]}, s:{s:[i,i]}, s:{s:[i]}, s:{s:[i]}}", "w0", "previous", 10,
                           "w1", "previous", 7, 11, "w2", "previous", 12, "w3", "previous", 13);
  tagc_planner_decision d;
  CHECK_EQ_INT(decide(0, 100, plan, live, 4, info, NULL, 0, &d), TAGC_PLANNER_KEEP);
  CHECK_EQ_STR(d.reason, "no change");
  tagc_planner_decision_free(&d);

  /* w2 restarted instead (its registration continues nothing): a new generation */
  json_object_set_new(info, "w2", json_object());
  CHECK_EQ_INT(decide(0, 100, plan, live, 4, info, NULL, 0, &d), TAGC_PLANNER_NEW);
  CHECK(strstr(d.reason, "w2 registered again") != NULL);
  char buf[64];
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1,w2");
  /* w3 continues its excluded registration: still excluded, no joiner */
  CHECK(json_object_get(json_object_get(d.plan, "excluded"), "w3") != NULL);
  /* the new plan records the live registrations */
  CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(d.plan, "registrations"), "w0")), 20);
  tagc_planner_decision_free(&d);

  /* without "previous" every member is a new registration */
  CHECK_EQ_INT(decide(0, 100, plan, live, 4, NULL, NULL, 0, &d), TAGC_PLANNER_NEW);
  CHECK(strstr(d.reason, "w0 registered again") != NULL);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1,w2,w3");
  tagc_planner_decision_free(&d);
  json_decref(info);
  json_decref(plan);
}

/* Members without a lease during the grace: WAIT until its end; a report ends the grace. */
static void test_grace(void) {
  json_t *plan = plan3();
  tagc_planner_worker live[] = {{"w0", 10}};
  tagc_planner_decision d;
  CHECK_EQ_INT(decide(105, 100, plan, live, 1, NULL, NULL, 0, &d), TAGC_PLANNER_WAIT);
  CHECK_NEAR(d.wait_until, 105, 0);
  CHECK(strstr(d.reason, "lease-loss grace: 2 members") != NULL);
  tagc_planner_decision_free(&d);

  /* the grace is over: lost as before */
  CHECK_EQ_INT(decide(105, 105, plan, live, 1, NULL, NULL, 0, &d), TAGC_PLANNER_NEW);
  CHECK(strstr(d.reason, "lost w1 (lease expired)") != NULL);
  char buf[64];
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0");
  tagc_planner_decision_free(&d);

  /* a failure report is evidence from the data path: no waiting */
  tagc_planner_report rep = {.worker = "w0", .kind = "comm", .step = 7, .peer = -1, .seen_at = 99};
  CHECK_EQ_INT(decide(105, 100, plan, live, 1, NULL, &rep, 1, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0");
  tagc_planner_decision_free(&d);

  /* everyone back within the grace: nothing to do */
  tagc_planner_worker all[] = {{"w0", 10}, {"w1", 11}, {"w2", 12}};
  CHECK_EQ_INT(decide(105, 100, plan, all, 3, NULL, NULL, 0, &d), TAGC_PLANNER_KEEP);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

int main(void) {
  test_continuation();
  test_grace();
  return TEST_END();
}
