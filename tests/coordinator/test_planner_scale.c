/* The planner at M = 3000 members: deaths, joiners, leaves, every survivor's report of a
 * death, a member every other member names (a hang), a failed bootstrap where all accuse one,
 * and the cut at max_workers give the plans the rules say (member lists and reasons). No
 * timing here: decision times are measured by bench/planner_bench.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/status.h"
#include "coordinator/planner.h"
#include "test.h"

enum { M = 3000 };

static const tagc_planner_config cfg = {.min_workers = 1000, .max_workers = 4000,
                                        .suspect_window_s = 2, .default_micro_batch = 8};

static char ids[M][16];        /* w00000 ... w02999, registered as index + 1 */
static char joiner_ids[5][16]; /* j0 ... j4, registered as 10001 ... */

/* Generation 7 of every member, resume step 100. */
static json_t *full_plan(void) {
  json_t *members = json_array(), *regs = json_object();
  for (int i = 0; i < M; i++) {
    json_array_append_new(members, json_string(ids[i]));
    json_object_set_new(regs, ids[i], json_integer(i + 1));
  }
  return json_pack("{s:i, s:i, s:o, s:o, s:{s:i, s:n}}", "gen", 7, "world", M, "members",
                   members, "registrations", regs, "resume", "step", 100, "path");
}

/* The live workers: every member but those in gone[] (-1 ended), then n_joiners joiners. */
static size_t live(tagc_planner_worker *out, const int *gone, int n_joiners) {
  size_t n = 0;
  for (int i = 0; i < M; i++) {
    int dead = 0;
    for (const int *g = gone; *g >= 0; g++)
      dead |= *g == i;
    if (!dead)
      out[n++] = (tagc_planner_worker){ids[i], i + 1};
  }
  for (int j = n_joiners - 1; j >= 0; j--) /* any order: the planner sorts joiners */
    out[n++] = (tagc_planner_worker){joiner_ids[j], 10001 + j};
  return n;
}

static tagc_status decide(const json_t *plan, const tagc_planner_worker *w, size_t nw,
                          const tagc_planner_report *r, size_t nr, const tagc_planner_worker *l,
                          size_t nl, tagc_planner_decision *d) {
  tagc_planner_input in = {.gen = 7, .plan = plan, .workers = w, .n_workers = nw, .reports = r,
                           .n_reports = nr, .leaving = l, .n_leaving = nl, .now = 100.1};
  tagc_status st = tagc_planner_decide(&cfg, &in, d);
  if (st != TAGC_OK)
    fprintf(stderr, "decide: %s\n", tagc_last_error());
  return st;
}

/* Whether the plan's members are exactly the member ids in order without those in gone[]
 * (-1 ended), followed by the ids in tail[] (NULL ended); prints the first difference. */
static int members_are(const json_t *plan, const int *gone, const char *const *tail) {
  const json_t *members = json_object_get(plan, "members");
  size_t k = 0;
  for (int i = 0; i < M; i++) {
    int dead = 0;
    for (const int *g = gone; *g >= 0; g++)
      dead |= *g == i;
    if (dead)
      continue;
    const char *got = json_string_value(json_array_get(members, k++));
    if (!got || strcmp(got, ids[i]) != 0) {
      fprintf(stderr, "rank %zu: %s, expected %s\n", k - 1, got ? got : "(none)", ids[i]);
      return 0;
    }
  }
  for (; *tail; tail++) {
    const char *got = json_string_value(json_array_get(members, k++));
    if (!got || strcmp(got, *tail) != 0) {
      fprintf(stderr, "rank %zu: %s, expected %s\n", k - 1, got ? got : "(none)", *tail);
      return 0;
    }
  }
  if (k != json_array_size(members) ||
      json_integer_value(json_object_get(plan, "world")) != (json_int_t)k) {
    fprintf(stderr, "%zu members (world %lld), expected %zu\n", json_array_size(members),
            (long long)json_integer_value(json_object_get(plan, "world")), k);
    return 0;
  }
  return 1;
}

static json_int_t total(const json_t *plan, const char *kind) {
  return json_integer_value(json_object_get(json_object_get(plan, "failures_total"), kind));
}

static tagc_planner_worker workers[M + 8];
static tagc_planner_report reports[M];

/* Nothing happened: no new generation. */
static void test_steady(void) {
  json_t *plan = full_plan();
  tagc_planner_decision d;
  size_t n = live(workers, (const int[]){-1}, 0);
  CHECK_OK(decide(plan, workers, n, NULL, 0, NULL, 0, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_KEEP);
  CHECK_EQ_STR(d.reason, "no change");
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* Three leases gone and five joiners: survivors keep their order, joiners follow by id. */
static void test_deaths_and_joiners(void) {
  json_t *plan = full_plan();
  tagc_planner_decision d;
  const int gone[] = {10, 1500, 2999, -1};
  size_t n = live(workers, gone, 5);
  CHECK_OK(decide(plan, workers, n, NULL, 0, NULL, 0, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  const char *tail[] = {"j0", "j1", "j2", "j3", "j4", NULL};
  CHECK(members_are(d.plan, gone, tail));
  CHECK(strstr(d.reason, "lost w00010 (lease expired); lost w01500 (lease expired); lost "
               "w02999 (lease expired); j0 joined; j1 joined") == d.reason);
  CHECK_EQ_INT(total(d.plan, "lease"), 3);
  CHECK(!d.settled);
  CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(d.plan, "registrations"), "j3")),
               10004);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* One member died and every survivor reported the broken link to it: settled at once. */
static void test_death_reported_by_all(void) {
  json_t *plan = full_plan();
  tagc_planner_decision d;
  const int gone[] = {1234, -1};
  size_t n = live(workers, gone, 0), nr = 0;
  for (int i = 0; i < M; i++)
    if (i != 1234)
      reports[nr++] = (tagc_planner_report){ids[i], "comm", 250, 1234, 100.0};
  CHECK_OK(decide(plan, workers, n, reports, nr, NULL, 0, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  CHECK(members_are(d.plan, gone, (const char *const[]){NULL}));
  CHECK(strstr(d.reason, "w00000 reported comm at step 250") == d.reason);
  CHECK_EQ_INT(total(d.plan, "comm"), M - 1);
  CHECK_EQ_INT(total(d.plan, "lease"), 1);
  CHECK(d.settled);
  tagc_planner_decision_free(&d);

  /* one survivor has not reported yet: not settled (its report may still come) */
  CHECK_OK(decide(plan, workers, n, reports, nr - 1, NULL, 0, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  CHECK(!d.settled);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* A hang: every other member reports "hang" naming w00042, which says nothing: excluded at
 * once; with one member still to report, the suspect window decides (WAIT). */
static void test_hang(void) {
  json_t *plan = full_plan();
  tagc_planner_decision d;
  size_t n = live(workers, (const int[]){-1}, 0), nr = 0;
  for (int i = 0; i < M; i++)
    if (i != 42)
      reports[nr++] = (tagc_planner_report){ids[i], "hang", 300, 42, 100.0};
  CHECK_OK(decide(plan, workers, n, reports, nr, NULL, 0, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  CHECK(members_are(d.plan, (const int[]){42, -1}, (const char *const[]){NULL}));
  CHECK(strstr(d.reason, "excluded w00042: all 2999 other members reported it and it did not "
               "report") != NULL);
  CHECK(json_object_get(json_object_get(d.plan, "excluded"), "w00042") != NULL);
  CHECK(d.settled);
  tagc_planner_decision_free(&d);

  CHECK_OK(decide(plan, workers, n, reports + 1, nr - 1, NULL, 0, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_WAIT);
  CHECK(d.wait_until == 102.0);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* A leave (SIGTERM) of w00007 and a supervisor-reported death of w02000 in one decision. */
static void test_leave_and_death(void) {
  json_t *plan = full_plan();
  tagc_planner_decision d;
  size_t n = live(workers, (const int[]){-1}, 0);
  tagc_planner_worker leaving[] = {{ids[7], 8}, {ids[2000], 2001}};
  tagc_planner_death deaths[] = {{0, 0}, {1, 100.0}};
  tagc_planner_input in = {.gen = 7, .plan = plan, .workers = workers, .n_workers = n,
                           .leaving = leaving, .n_leaving = 2, .deaths = deaths, .now = 100.1};
  CHECK_OK(tagc_planner_decide(&cfg, &in, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  CHECK(members_are(d.plan, (const int[]){7, 2000, -1}, (const char *const[]){NULL}));
  CHECK_EQ_STR(d.reason, "w00007 left; lost w02000 (crashed, seen by its supervisor)");
  CHECK_EQ_INT(total(d.plan, "crash"), 1);
  CHECK_EQ_INT(total(d.plan, "lease"), 0);
  CHECK(d.settled);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* A failed bootstrap (reports at step 0): every member names w00005, which names w00006. The
 * accusation graph excludes w00005 at once; w00006 stays. */
static void test_bootstrap_majority(void) {
  json_t *plan = full_plan();
  tagc_planner_decision d;
  size_t n = live(workers, (const int[]){-1}, 0), nr = 0;
  for (int i = 0; i < M; i++)
    reports[nr++] = (tagc_planner_report){ids[i], "partition", 0, i == 5 ? 6 : 5, 100.0};
  CHECK_OK(decide(plan, workers, n, reports, nr, NULL, 0, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  CHECK(members_are(d.plan, (const int[]){5, -1}, (const char *const[]){NULL}));
  CHECK(strstr(d.reason, "excluded w00005: 2999 of the other 2999 members could not reach it") ==
        d.reason);
  CHECK_EQ_INT(total(d.plan, "partition"), M);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* More live workers than max_workers: the plan is cut there, the rest wait. */
static void test_max_workers(void) {
  tagc_planner_config small = cfg;
  small.max_workers = 2998;
  json_t *plan = full_plan();
  tagc_planner_decision d;
  size_t n = live(workers, (const int[]){100, -1}, 5);
  tagc_planner_input in = {.gen = 7, .plan = plan, .workers = workers, .n_workers = n,
                           .now = 100.1};
  CHECK_OK(tagc_planner_decide(&small, &in, &d));
  CHECK_EQ_INT(d.action, TAGC_PLANNER_NEW);
  CHECK(members_are(d.plan, (const int[]){100, 2999, -1}, (const char *const[]){NULL}));
  CHECK_EQ_INT(json_integer_value(json_object_get(d.plan, "world")), 2998);
  CHECK_EQ_STR(json_string_value(json_array_get(json_object_get(d.plan, "members"), 2997)),
               "w02998");
  CHECK_EQ_STR(d.reason, "lost w00100 (lease expired); w02999 left out: more than 2998 workers");
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

int main(void) {
  for (int i = 0; i < M; i++)
    snprintf(ids[i], sizeof ids[i], "w%05d", i);
  for (int j = 0; j < 5; j++)
    snprintf(joiner_ids[j], sizeof joiner_ids[j], "j%d", j);
  test_steady();
  test_deaths_and_joiners();
  test_death_reported_by_all();
  test_hang();
  test_leave_and_death();
  test_bootstrap_majority();
  test_max_workers();
  return TEST_END();
}
