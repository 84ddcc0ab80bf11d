/* The planner's silent-suspect rule: a member that every other member still in the job (at
 * least two) reported and named, while it reported nothing itself, went silent for all of
 * them (a hang, a stopped or dead process) and is excluded at once, without the suspect
 * window; everything short of that (one accuser, a bystander naming someone else, a member yet
 * to report, the suspect's own report: mutual suspicion) still waits or counts pairs. Members
 * killed together, each named by every survivor (as its suspect or a broken link), all go at
 * once. And a
 * new generation is "settled" when every member is accounted for, so the leader need not wait
 * out its settle window. */
#include <string.h>

#include <jansson.h>

#include "common/status.h"
#include "coordinator/planner.h"
#include "plan_text.h"
#include "test.h"

static const tagc_planner_config cfg = {.min_workers = 2, .max_workers = 8, .suspect_window_s = 2,
                                        .default_micro_batch = 16};

/* Generation 3 of members a, b, c (and d when n == 4), registered as 1, 2, 3, 4. */
static json_t *plan_of(int n) {
  json_t *plan = json_pack("{s:i, s:[s,s,s], s:{s:i,s:i,s:i}}", "gen", 3, "members", "a", "b",
                           "c", "registrations", "a", 1, "b", 2, "c", 3);
  if (n == 4) {
    json_array_append_new(json_object_get(plan, "members"), json_string("d"));
    json_object_set_new(json_object_get(plan, "registrations"), "d", json_integer(4));
  }
  return plan;
}

static const tagc_planner_worker live[] = {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}};

/* Decides at time 100.1 (reports seen at 100.0: the suspect window of 2 s is still open). */
static int decide(const json_t *plan, const tagc_planner_worker *w, size_t nw,
                  const tagc_planner_report *r, size_t nr, tagc_planner_decision *d) {
  tagc_planner_input in = {.gen = 3, .plan = plan, .workers = w, .n_workers = nw, .reports = r,
                           .n_reports = nr, .now = 100.1};
  tagc_status st = tagc_planner_decide(&cfg, &in, d);
  if (st != TAGC_OK)
    fprintf(stderr, "decide: %s\n", tagc_last_error());
  return st == TAGC_OK ? (int)d->action : -1;
}

static int is_excluded(const json_t *plan, const char *id) {
  return json_object_get(json_object_get(plan, "excluded"), id) != NULL;
}

/* A hang of c in a world of 3: a and b both time out on it and report; c says nothing. */
static void test_hang_excluded_at_once(void) {
  json_t *plan = plan_of(3);
  tagc_planner_report r[] = {{"a", "hang", 40, 2, 100.0}, {"b", "hang", 40, 2, 100.0}};
  tagc_planner_decision d;
  char buf[256];
  CHECK_EQ_INT(decide(plan, live, 3, r, 2, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b");
  CHECK(is_excluded(d.plan, "c"));
  CHECK(strstr(d.reason, "all 2 other members reported it") != NULL);
  CHECK(d.settled);
  tagc_planner_decision_free(&d);

  /* Only a has reported so far: b may yet name someone else; c gets its window. */
  CHECK_EQ_INT(decide(plan, live, 3, r, 1, &d), TAGC_PLANNER_WAIT);
  CHECK(d.wait_until == 102.0);
  tagc_planner_decision_free(&d);

  /* b's lease is gone (b died too): a is the only one left to accuse c, the window decides. */
  tagc_planner_worker no_b[] = {{"a", 1}, {"c", 3}};
  CHECK_EQ_INT(decide(plan, no_b, 2, r, 1, &d), TAGC_PLANNER_WAIT);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* Mutual suspicion is not misjudged: c reported too (it is alive and blocked, a link is in
 * doubt), so nobody is excluded and the pair c names back (a, c) is counted; b's naming c,
 * which names a, is not a pair (b waits on c because c waits on a). */
static void test_suspect_reported(void) {
  json_t *plan = plan_of(3);
  tagc_planner_report r[] = {{"a", "timeout", 40, 2, 100.0}, {"b", "timeout", 40, 2, 100.0},
                             {"c", "timeout", 40, 0, 100.0}};
  tagc_planner_decision d;
  char buf[256];
  CHECK_EQ_INT(decide(plan, live, 3, r, 3, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b,c");
  CHECK(!is_excluded(d.plan, "c"));
  CHECK_EQ_INT(json_array_size(json_object_get(d.plan, "suspicion")), 1);
  CHECK(d.settled);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* One kill, collateral report: c died; a names c; b names a, because a, failing on c, aborted
 * its connections (b's socket to a was reset). a reported naming c, not b: that is no mutual
 * suspicion, so neither a nor b is counted or excluded for it (before: the pair (a, b) was
 * counted, and a member with earlier strikes was excluded at once, losing a survivor and the
 * in-memory copy it held). */
static void test_collateral_not_mutual(void) {
  json_t *plan = plan_of(3);
  tagc_planner_report r[] = {{"a", "crash", 40, 2, 100.0}, {"b", "partition", 40, 0, 100.0}};
  tagc_planner_decision d;
  int act = decide(plan, live, 3, r, 2, &d);
  CHECK(act == TAGC_PLANNER_WAIT || act == TAGC_PLANNER_NEW);
  if (act == TAGC_PLANNER_NEW) {
    CHECK(!is_excluded(d.plan, "a") && !is_excluded(d.plan, "b"));
    CHECK_EQ_INT(json_array_size(json_object_get(d.plan, "suspicion")), 0);
  }
  CHECK(!d.reason || !strstr(d.reason, "suspect each other"));
  tagc_planner_decision_free(&d);
  /* after the window c, named by a and silent, goes; a and b stay */
  tagc_planner_input in = {.gen = 3, .plan = plan, .workers = live, .n_workers = 3, .reports = r,
                           .n_reports = 2, .now = 103.0};
  CHECK_OK(tagc_planner_decide(&cfg, &in, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  CHECK(is_excluded(d.plan, "c") && !is_excluded(d.plan, "a") && !is_excluded(d.plan, "b"));
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* Two members: a link cut between them reads the same from each side until the other's
 * report comes, so one accuser never excludes at once. */
static void test_two_members(void) {
  json_t *plan = json_pack("{s:i, s:[s,s], s:{s:i,s:i}}", "gen", 3, "members", "a", "b",
                           "registrations", "a", 1, "b", 2);
  tagc_planner_report r[] = {{"a", "timeout", 40, 1, 100.0}, {"b", "timeout", 40, 0, 100.0}};
  tagc_planner_decision d;
  char buf[256];
  CHECK_EQ_INT(decide(plan, live, 2, r, 1, &d), TAGC_PLANNER_WAIT);
  tagc_planner_decision_free(&d);
  CHECK_EQ_INT(decide(plan, live, 2, r, 2, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b");
  CHECK(strstr(d.reason, "suspect each other") != NULL);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* A chain in collectives: c is cut off from a only; a and c accuse each other, the bystander b
 * (blocked one collective later) names a. Nobody is named by all the others: no exclusion at
 * once, the window and the pair rules decide. */
static void test_chain_not_unanimous(void) {
  json_t *plan = plan_of(3);
  tagc_planner_report r[] = {{"a", "timeout", 57, 2, 100.0}, {"b", "timeout", 57, 0, 100.0}};
  tagc_planner_decision d;
  CHECK_EQ_INT(decide(plan, live, 3, r, 2, &d), TAGC_PLANNER_WAIT);
  tagc_planner_decision_free(&d);
  tagc_planner_report all[] = {{"a", "timeout", 57, 2, 100.0}, {"b", "timeout", 57, 0, 100.0},
                               {"c", "timeout", 57, 0, 100.0}};
  CHECK_EQ_INT(decide(plan, live, 3, all, 3, &d), TAGC_PLANNER_NEW);
  CHECK(!is_excluded(d.plan, "a") && !is_excluded(d.plan, "c"));
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* Four members: d is excluded at once only when a, b and c all named it; while c has not
 * reported (it may be the one blocked), or names someone else, d's window runs. A member
 * whose lease is gone is not waited for. */
static void test_four_members(void) {
  json_t *plan = plan_of(4);
  tagc_planner_report r[] = {{"a", "hang", 40, 3, 100.0}, {"b", "hang", 40, 3, 100.0},
                             {"c", "hang", 40, 3, 100.0}};
  tagc_planner_decision d;
  char buf[256];
  CHECK_EQ_INT(decide(plan, live, 4, r, 3, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b,c");
  CHECK(d.settled);
  tagc_planner_decision_free(&d);

  CHECK_EQ_INT(decide(plan, live, 4, r, 2, &d), TAGC_PLANNER_WAIT);
  tagc_planner_decision_free(&d);

  tagc_planner_report other[] = {{"a", "hang", 40, 3, 100.0}, {"b", "hang", 40, 3, 100.0},
                                 {"c", "timeout", 40, 0, 100.0}};
  CHECK_EQ_INT(decide(plan, live, 4, other, 3, &d), TAGC_PLANNER_WAIT);
  tagc_planner_decision_free(&d);

  /* c is gone (lease): a and b are all the others still in the job. */
  tagc_planner_worker no_c[] = {{"a", 1}, {"b", 2}, {"d", 4}};
  CHECK_EQ_INT(decide(plan, no_c, 3, r, 2, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b");
  CHECK(is_excluded(d.plan, "d"));
  CHECK(d.settled);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* Settled only when every member is accounted for: an exclusion after the window with a
 * member yet to report, or a lost lease without reports, leave the settle window to batch. */
static void test_settled(void) {
  json_t *plan = plan_of(3);
  tagc_planner_report r[] = {{"a", "hang", 40, 2, 100.0}};
  tagc_planner_input in = {.gen = 3, .plan = plan, .workers = live, .n_workers = 3, .reports = r,
                           .n_reports = 1, .now = 102.5};
  tagc_planner_decision d;
  CHECK_OK(tagc_planner_decide(&cfg, &in, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  CHECK(is_excluded(d.plan, "c"));
  CHECK(!d.settled);
  tagc_planner_decision_free(&d);
  CHECK_EQ_INT(decide(plan, live, 2, NULL, 0, &d), TAGC_PLANNER_NEW);
  CHECK(!d.settled);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* Two of eight killed together (ranks 2 and 5, c and f): every survivor's collective failed on
 * one of them (its suspect: c for most, f for one) and its report's broken links name both.
 * Both go at once, settled, without a window. Without the broken links (each survivor names
 * only its suspect) f, named by nobody, holds c back too: the window runs. With one survivor
 * still to report, nobody is excluded at once either. */
static void test_killed_together(void) {
  json_t *plan = json_pack("{s:i, s:[s,s,s,s,s,s,s,s], s:{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}}",
                           "gen", 3, "members", "a", "b", "c", "d", "e", "f", "g", "h",
                           "registrations", "a", 1, "b", 2, "c", 3, "d", 4, "e", 5, "f", 6,
                           "g", 7, "h", 8);
  const tagc_planner_worker eight[] = {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4},
                                       {"e", 5}, {"f", 6}, {"g", 7}, {"h", 8}};
  tagc_planner_report r[] = {{"a", "crash", 40, 2, 100.0}, {"b", "crash", 40, 2, 100.0},
                             {"d", "crash", 40, 2, 100.0}, {"e", "crash", 40, 5, 100.0},
                             {"g", "crash", 40, 2, 100.0}, {"h", "crash", 40, 2, 100.0}};
  json_t *failures = json_object();
  for (size_t i = 0; i < 6; i++)
    json_object_set_new(failures, r[i].worker, json_pack("{s:s, s:[i,i]}", "kind", "crash",
                                                         "peers", 2, 5));
  tagc_planner_input in = {.gen = 3, .plan = plan, .workers = eight, .n_workers = 8,
                           .reports = r, .n_reports = 6, .failures = failures, .now = 100.1};
  tagc_planner_decision d;
  char buf[256];
  CHECK_OK(tagc_planner_decide(&cfg, &in, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b,d,e,g,h");
  CHECK(is_excluded(d.plan, "c") && is_excluded(d.plan, "f"));
  CHECK(strstr(d.reason, "all 6 members that reported named it") != NULL);
  CHECK(d.settled);
  tagc_planner_decision_free(&d);

  in.failures = NULL;
  CHECK_OK(tagc_planner_decide(&cfg, &in, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_WAIT);
  tagc_planner_decision_free(&d);

  in.failures = failures;
  in.n_reports = 5; /* h has not reported */
  CHECK_OK(tagc_planner_decide(&cfg, &in, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_WAIT);
  tagc_planner_decision_free(&d);
  json_decref(failures);
  json_decref(plan);
}

int main(void) {
  test_hang_excluded_at_once();
  test_killed_together();
  test_suspect_reported();
  test_collateral_not_mutual();
  test_two_members();
  test_chain_not_unanimous();
  test_four_members();
  test_settled();
  return TEST_END();
}
