/* The leader's planner as a pure function: membership order, min/max, failure rules. */
#include <string.h>

#include <jansson.h>

#include "common/status.h"
#include "cluster/member.h"
#include "coordinator/planner.h"
#include "plan_text.h"
#include "test.h"

static const tagc_planner_config cfg3 = {.min_workers = 2, .max_workers = 8, .suspect_window_s = 2,
                                         .default_micro_batch = 16};

static json_int_t int_at(const json_t *plan, const char *obj, const char *key) {
  return json_integer_value(json_object_get(json_object_get(plan, obj), key));
}

/* Runs the planner; returns the action (or -1 on error) and leaves the decision in *d. */
static int run(const tagc_planner_config *c, const json_t *plan, const tagc_planner_worker *w,
               size_t nw, const tagc_planner_report *r, size_t nr, double now,
               tagc_planner_decision *d) {
  tagc_planner_input in = {.gen = json_integer_value(json_object_get(plan, "gen")),
                           .plan = plan, .workers = w, .n_workers = nw, .reports = r,
                           .n_reports = nr, .now = now};
  tagc_status st = tagc_planner_decide(c, &in, d);
  if (st != TAGC_OK)
    fprintf(stderr, "decide: %s\n", tagc_last_error());
  return st == TAGC_OK ? (int)d->action : -1;
}

static void test_first_and_keep(void) {
  tagc_planner_worker w[] = {{"w2", 12}, {"w0", 10}, {"w1", 11}};
  tagc_planner_decision d;
  char buf[256];
  CHECK_EQ_INT(run(&cfg3, NULL, w, 1, NULL, 0, 0, &d), TAGC_PLANNER_STALLED);
  CHECK(strstr(d.reason, "need 2") != NULL);
  tagc_planner_decision_free(&d);

  CHECK_EQ_INT(run(&cfg3, NULL, w, 3, NULL, 0, 0, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1,w2");
  CHECK_EQ_INT(json_integer_value(json_object_get(d.plan, "gen")), 1);
  CHECK_EQ_INT(json_integer_value(json_object_get(d.plan, "world")), 3);
  CHECK_EQ_INT(int_at(d.plan, "resume", "step"), 0);
  CHECK(json_is_null(json_object_get(json_object_get(d.plan, "resume"), "path")));
  CHECK_EQ_INT(int_at(d.plan, "registrations", "w2"), 12);
  CHECK(strstr(d.reason, "first generation") != NULL);

  /* The plan as a worker sees it. */
  char *text = json_dumps(d.plan, 0);
  tagc_plan p;
  CHECK_OK(tagc_plan_parse(text, strlen(text), "w1", &p));
  CHECK_EQ_INT(p.gen, 1);
  CHECK_EQ_INT(p.rank, 1);
  CHECK_EQ_INT(p.world, 3);
  CHECK_EQ_STR(p.members[2], "w2");
  CHECK(p.resume_path == NULL && p.micro_batch == 0 && !p.excluded);
  tagc_plan_free(&p);
  CHECK_OK(tagc_plan_parse(text, strlen(text), "w9", &p));
  CHECK_EQ_INT(p.rank, -1);
  tagc_plan_free(&p);
  CHECK_EQ_INT(tagc_plan_parse("{\"gen\":1}", 9, "w1", &p), TAGC_EPROTO);
  free(text);

  tagc_planner_decision same;
  CHECK_EQ_INT(run(&cfg3, d.plan, w, 3, NULL, 0, 0, &same), TAGC_PLANNER_KEEP);
  CHECK(same.plan == NULL);
  tagc_planner_decision_free(&same);
  tagc_planner_decision_free(&d);
}

static void test_order_joiners_max(void) {
  json_t *plan = json_pack("{s:i, s:[s,s,s], s:{s:i,s:i,s:i}}", "gen", 4, "members", "w2", "w0",
                           "w1", "registrations", "w2", 2, "w0", 3, "w1", 4);
  tagc_planner_worker w[] = {{"w4", 9}, {"w1", 4}, {"w3", 8}, {"w2", 2}};
  tagc_planner_decision d;
  char buf[256];
  CHECK_EQ_INT(run(&cfg3, plan, w, 4, NULL, 0, 0, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w2,w1,w3,w4");
  CHECK_EQ_INT(json_integer_value(json_object_get(d.plan, "gen")), 5);
  CHECK_EQ_INT(int_at(d.plan, "failures_total", "lease"), 1);
  CHECK(strstr(d.reason, "lost w0") && strstr(d.reason, "w3 joined"));
  tagc_planner_decision_free(&d);

  tagc_planner_config small = cfg3;
  small.max_workers = 3;
  CHECK_EQ_INT(run(&small, plan, w, 4, NULL, 0, 0, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w2,w1,w3");
  /* Full: a waiting joiner (w4) alone makes no new generation. */
  tagc_planner_decision again;
  CHECK_EQ_INT(run(&small, d.plan, w, 4, NULL, 0, 0, &again), TAGC_PLANNER_KEEP);
  tagc_planner_decision_free(&again);
  /* max shrinks under the world size: the last ranks are left out. */
  small.max_workers = 2;
  CHECK_EQ_INT(run(&small, d.plan, w, 4, NULL, 0, 0, &again), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(again.plan, buf, sizeof buf), "w2,w1");
  tagc_planner_decision_free(&again);
  tagc_planner_decision_free(&d);

  /* A member that registered again keeps its place but makes a new generation. */
  tagc_planner_worker re[] = {{"w2", 2}, {"w0", 30}, {"w1", 4}};
  CHECK_EQ_INT(run(&cfg3, plan, re, 3, NULL, 0, 0, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w2,w0,w1");
  CHECK_EQ_INT(int_at(d.plan, "registrations", "w0"), 30);
  CHECK(strstr(d.reason, "w0 registered again") != NULL);
  tagc_planner_decision_free(&d);

  /* Below min after losses: stalled, nothing written. */
  CHECK_EQ_INT(run(&cfg3, plan, w + 1, 1, NULL, 0, 0, &d), TAGC_PLANNER_STALLED);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

static void test_oom(void) {
  json_t *plan = json_pack("{s:i, s:[s,s,s], s:{s:i,s:i,s:i}, s:{s:i,s:i,s:i}}", "gen", 2,
                           "members", "a", "b", "c", "registrations", "a", 1, "b", 2, "c", 3,
                           "micro_batch", "a", 8, "b", 0, "c", 1);
  tagc_planner_worker w[] = {{"a", 1}, {"b", 2}, {"c", 3}};
  tagc_planner_report r[] = {{"a", "oom", 7, -1, 0}, {"b", "oom", 7, -1, 0}, {"c", "oom", 7, -1, 0}};
  tagc_planner_decision d;
  char buf[256];
  CHECK_EQ_INT(run(&cfg3, plan, w, 3, r, 3, 0, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_INT(int_at(d.plan, "micro_batch", "a"), 4);  /* from its plan value */
  CHECK_EQ_INT(int_at(d.plan, "micro_batch", "b"), 8);  /* from the job's default 16 */
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b"); /* c: oom at 1 */
  CHECK(json_object_get(json_object_get(d.plan, "excluded"), "c") != NULL);
  CHECK_EQ_INT(int_at(d.plan, "failures_total", "oom"), 3);
  tagc_planner_decision_free(&d);

  tagc_planner_config unknown = cfg3;
  unknown.default_micro_batch = 0;
  CHECK_EQ_INT(run(&unknown, plan, w, 3, r + 1, 1, 0, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_INT(int_at(d.plan, "micro_batch", "b"), 0);
  CHECK(strstr(d.reason, "unknown") != NULL);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

static void test_suspect_dropped(void) {
  json_t *plan = json_pack("{s:i, s:[s,s,s], s:{s:i,s:i,s:i}}", "gen", 3, "members", "a", "b",
                           "c", "registrations", "a", 1, "b", 2, "c", 3);
  tagc_planner_worker w[] = {{"a", 1}, {"b", 2}, {"c", 3}};
  tagc_planner_report r[] = {{"a", "timeout", 40, 2, 100.0}};
  tagc_planner_decision d;
  char buf[256];
  CHECK_EQ_INT(run(&cfg3, plan, w, 3, r, 1, 101.0, &d), TAGC_PLANNER_WAIT);
  CHECK_NEAR(d.wait_until, 102.0, 1e-9);
  tagc_planner_decision_free(&d);

  CHECK_EQ_INT(run(&cfg3, plan, w, 3, r, 1, 102.5, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b");
  CHECK_EQ_INT(json_integer_value(json_object_get(
                   json_object_get(json_object_get(d.plan, "excluded"), "c"), "registration")),
               3);
  char *text = json_dumps(d.plan, 0);
  tagc_plan p;
  CHECK_OK(tagc_plan_parse(text, strlen(text), "c", &p));
  CHECK(p.rank == -1 && p.excluded == 1);
  tagc_plan_free(&p);
  free(text);

  /* c is alive with the same registration: it stays out, no churn. */
  tagc_planner_decision next;
  CHECK_EQ_INT(run(&cfg3, d.plan, w, 3, NULL, 0, 200, &next), TAGC_PLANNER_KEEP);
  tagc_planner_decision_free(&next);
  /* c registers again: it joins at the end. */
  tagc_planner_worker re[] = {{"a", 1}, {"b", 2}, {"c", 50}};
  CHECK_EQ_INT(run(&cfg3, d.plan, re, 3, NULL, 0, 200, &next), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(next.plan, buf, sizeof buf), "a,b,c");
  CHECK(json_object_size(json_object_get(next.plan, "excluded")) == 0);
  tagc_planner_decision_free(&next);
  tagc_planner_decision_free(&d);

  /* A suspect whose lease is gone is simply lost; no waiting. */
  CHECK_EQ_INT(run(&cfg3, plan, w, 2, r, 1, 100.5, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b");
  CHECK(json_object_get(json_object_get(d.plan, "excluded"), "c") == NULL);
  tagc_planner_decision_free(&d);

  /* The suspect was restarted (registered again, new registration) before its window ended:
     the process accused is gone, its successor is not excluded and joins at once. */
  tagc_planner_worker again[] = {{"a", 1}, {"b", 2}, {"c", 60}};
  CHECK_EQ_INT(run(&cfg3, plan, again, 3, r, 1, 102.5, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b,c");
  CHECK(json_object_size(json_object_get(d.plan, "excluded")) == 0);
  CHECK_EQ_INT(int_at(d.plan, "registrations", "c"), 60);
  tagc_planner_decision_free(&d);

  /* The suspect reported too: both stay. */
  tagc_planner_report both[] = {{"a", "comm", 40, 2, 100.0}, {"c", "comm", 40, -1, 100.2}};
  CHECK_EQ_INT(run(&cfg3, plan, w, 3, both, 2, 100.5, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b,c");
  CHECK_EQ_INT(int_at(d.plan, "failures_total", "comm"), 2);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

/* A partition where both sides still reach etcd: they accuse each other every generation. */
static void test_partition_resolved(void) {
  tagc_planner_worker w[] = {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}};
  tagc_planner_decision d;
  char buf[256];
  CHECK_EQ_INT(run(&cfg3, NULL, w, 4, NULL, 0, 0, &d), TAGC_PLANNER_NEW);
  json_t *plan = json_incref(d.plan);
  tagc_planner_decision_free(&d);
  int gens = 0;
  for (; gens < 3; gens++) {
    /* b (rank 1) and d (rank 3) blame each other. */
    tagc_planner_report r[] = {{"b", "timeout", 10, 3, 0}, {"d", "timeout", 10, 1, 0}};
    CHECK_EQ_INT(run(&cfg3, plan, w, 4, r, 2, 0.1, &d), TAGC_PLANNER_NEW);
    json_decref(plan);
    plan = json_incref(d.plan);
    tagc_planner_decision_free(&d);
    if (json_object_get(json_object_get(plan, "excluded"), "d"))
      break;
  }
  CHECK_MSG(gens <= 2, "partition not resolved after %d generations", gens + 1);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b,c");
  CHECK(json_object_get(json_object_get(plan, "excluded"), "b") == NULL);
  CHECK_EQ_INT(int_at(plan, "strikes", "d"), 1);

  /* d registers again and rejoins at the end; the partition is still there: with a strike,
   * d goes at the first mutual accusation. */
  tagc_planner_worker again[] = {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 40}};
  CHECK_EQ_INT(run(&cfg3, plan, again, 4, NULL, 0, 0, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b,c,d");
  json_decref(plan);
  plan = json_incref(d.plan);
  tagc_planner_decision_free(&d);
  tagc_planner_report r[] = {{"b", "timeout", 11, 3, 0}, {"d", "timeout", 11, 1, 0}};
  CHECK_EQ_INT(run(&cfg3, plan, again, 4, r, 2, 0.1, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "a,b,c");
  CHECK_EQ_INT(int_at(d.plan, "strikes", "d"), 2);
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

static int is_excluded(const json_t *plan, const char *id) {
  return json_object_get(json_object_get(plan, "excluded"), id) != NULL;
}

/* Runs one generation's reports on *plan and replaces it with the new plan; returns the
 * action. */
static int next_gen(const tagc_planner_config *c, json_t **plan, const tagc_planner_worker *w,
                    size_t nw, const tagc_planner_report *r, size_t nr) {
  tagc_planner_decision d;
  int action = run(c, *plan, w, nw, r, nr, 0.1, &d);
  if (action == TAGC_PLANNER_NEW) {
    json_decref(*plan);
    *plan = json_incref(d.plan);
  }
  tagc_planner_decision_free(&d);
  return action;
}

static json_t *first_plan(const tagc_planner_config *c, const tagc_planner_worker *w, size_t nw) {
  json_t *plan = NULL;
  next_gen(c, &plan, w, nw, NULL, 0);
  return plan;
}

/* One worker cut off from the others, all still reaching etcd. In the bootstrap (failed before
 * a step) both others cannot reach it and it cannot reach the lowest rank: it goes at once.
 * The generation in which the cut happens fails in collectives, where a rank blocked on the
 * cut-off one stops feeding the next, so the bystander b blames a: two accusers of a, which
 * must not exclude it (that generation only records the pairs). */
static void test_partition_majority(void) {
  tagc_planner_worker w[] = {{"a", 1}, {"b", 2}, {"c", 3}};
  char buf[256];
  tagc_planner_report boot[] = {{"a", "timeout", 0, 2, 0}, {"b", "timeout", 0, 2, 0},
                                {"c", "timeout", 0, 0, 0}};
  json_t *plan = first_plan(&cfg3, w, 3);
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, boot, 3), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b");
  CHECK(is_excluded(plan, "c") && !is_excluded(plan, "a"));
  CHECK_EQ_INT(int_at(plan, "strikes", "c"), 1);
  const char *why = json_string_value(json_object_get(plan, "reason"));
  CHECK(strstr(why, "2 of the other 2 members could not reach") != NULL);
  json_decref(plan);

  tagc_planner_report cascade[] = {{"a", "timeout", 57, 2, 0}, {"b", "timeout", 57, 0, 0},
                                   {"c", "timeout", 57, 0, 0}};
  plan = first_plan(&cfg3, w, 3);
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, cascade, 3), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b,c");
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, boot, 3), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b");
  json_decref(plan);

  /* Two halves {a,b} | {c,d}: both a and c are timed out on by two of three; one side at a
   * time (c: same strikes, higher rank), then d, which a and b now blame. */
  tagc_planner_worker w4[] = {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}};
  tagc_planner_report split[] = {{"a", "timeout", 0, 2, 0}, {"b", "timeout", 0, 2, 0},
                                 {"c", "timeout", 0, 0, 0}, {"d", "timeout", 0, 0, 0}};
  plan = first_plan(&cfg3, w4, 4);
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w4, 4, split, 4), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b,d");
  tagc_planner_report rest[] = {{"a", "timeout", 0, 2, 0}, {"b", "timeout", 0, 2, 0},
                                {"d", "timeout", 0, 0, 0}};
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w4, 4, rest, 3), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b");
  json_decref(plan);

  /* min_workers 3: nobody can be spared, the world stays and tries again. */
  tagc_planner_config min3 = cfg3;
  min3.min_workers = 3;
  plan = first_plan(&min3, w, 3);
  CHECK_EQ_INT(next_gen(&min3, &plan, w, 3, boot, 3), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b,c");
  CHECK(strstr(json_string_value(json_object_get(plan, "reason")), "c kept") != NULL);
  json_decref(plan);
}

/* Failures that name no peer, generation after generation, none completing a step: the
 * fruitless rule excludes someone at the third, so the planner does not loop for ever. */
static void test_fruitless(void) {
  tagc_planner_worker w[] = {{"a", 1}, {"b", 2}, {"c", 3}};
  tagc_planner_report none[] = {{"a", "comm", 0, -1, 0}, {"b", "timeout", 0, -1, 0},
                                {"c", "comm", 0, -1, 0}};
  char buf[256];
  json_t *plan = first_plan(&cfg3, w, 3);
  for (int g = 1; g <= 2; g++) {
    CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, none, 3), TAGC_PLANNER_NEW);
    CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b,c");
    CHECK_EQ_INT(int_at(plan, "fruitless", "gens"), g);
  }
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, none, 3), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b"); /* no blame: the last rank */
  CHECK_EQ_INT(int_at(plan, "fruitless", "gens"), 0);
  json_decref(plan);

  /* Blame adds up across the streak even when no pair repeats (so the mutual rule never
   * fires): b, accused in turn by a and by c, goes. */
  tagc_planner_report by_a[] = {{"a", "comm", 0, 1, 0}, {"b", "comm", 0, -1, 0}};
  tagc_planner_report by_c[] = {{"c", "comm", 0, 1, 0}, {"b", "comm", 0, -1, 0}};
  plan = first_plan(&cfg3, w, 3);
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, by_a, 2), TAGC_PLANNER_NEW);
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, by_c, 2), TAGC_PLANNER_NEW);
  CHECK_EQ_INT(int_at(json_object_get(plan, "fruitless"), "blame", "b"), 2);
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, by_a, 2), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,c");
  json_decref(plan);

  /* A generation that completed steps ends the streak. */
  tagc_planner_report late[] = {{"a", "comm", 5, -1, 0}};
  plan = first_plan(&cfg3, w, 3);
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, none, 3), TAGC_PLANNER_NEW);
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, none, 3), TAGC_PLANNER_NEW);
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, late, 1), TAGC_PLANNER_NEW);
  CHECK_EQ_INT(int_at(plan, "fruitless", "gens"), 0);
  CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 3, none, 3), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b,c");
  json_decref(plan);

  /* At min_workers nobody is excluded; generations go on being made (the link may heal). */
  plan = first_plan(&cfg3, w, 2);
  for (int g = 0; g < 5; g++)
    CHECK_EQ_INT(next_gen(&cfg3, &plan, w, 2, none, 2), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(plan, buf, sizeof buf), "a,b");
  json_decref(plan);
}

static void test_resume_and_errors(void) {
  tagc_planner_worker w[] = {{"a", 1}, {"b", 2}};
  json_t *ckpt = json_pack("{s:i, s:s, s:i}", "step", 100, "path", "/ck/step-100", "world", 3);
  tagc_planner_input in = {.workers = w, .n_workers = 2, .ckpt = ckpt};
  tagc_planner_decision d;
  CHECK_OK(tagc_planner_decide(&cfg3, &in, &d));
  CHECK_EQ_INT(int_at(d.plan, "resume", "step"), 100);
  CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(d.plan, "resume"), "path")),
               "/ck/step-100");
  tagc_planner_decision_free(&d);
  json_decref(ckpt);
  /* A generation whose plan is missing: numbering goes on, never restarts at 1. */
  in.gen = 7;
  in.ckpt = NULL;
  CHECK_OK(tagc_planner_decide(&cfg3, &in, &d));
  CHECK_EQ_INT(json_integer_value(json_object_get(d.plan, "gen")), 8);
  CHECK_EQ_INT(int_at(d.plan, "resume", "step"), 0);
  tagc_planner_decision_free(&d);
  in.gen = 0;

  tagc_planner_config bad = cfg3;
  bad.max_workers = 1;
  CHECK_EQ_INT(tagc_planner_decide(&bad, &in, &d), TAGC_EINVAL);
  json_t *broken = json_pack("{s:i, s:[i]}", "gen", 2, "members", 5);
  in.plan = broken;
  CHECK_EQ_INT(tagc_planner_decide(&cfg3, &in, &d), TAGC_EPROTO);
  json_decref(broken);
}

/* The first generation waits for the expected workers until the start deadline; later
 * generations need only min_workers. */
static void test_start_quorum(void) {
  tagc_planner_config c = cfg3;
  c.start_workers = 4;
  c.start_deadline = 30;
  tagc_planner_worker w[] = {{"w0", 10}, {"w1", 11}, {"w2", 12}, {"w3", 13}};
  tagc_planner_decision d;
  char buf[256];
  CHECK_EQ_INT(run(&c, NULL, w, 3, NULL, 0, 5, &d), TAGC_PLANNER_WAIT);
  CHECK(d.wait_until == 30);
  CHECK(strstr(d.reason, "3 of 4 expected") != NULL);
  tagc_planner_decision_free(&d);
  CHECK_EQ_INT(run(&c, NULL, w, 4, NULL, 0, 5, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1,w2,w3");
  tagc_planner_decision_free(&d);
  /* the deadline passed: min_workers (2) suffice */
  CHECK_EQ_INT(run(&c, NULL, w, 3, NULL, 0, 31, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1,w2");
  /* with a plan in place (a member lost), no waiting for the start quorum */
  json_t *plan = json_incref(d.plan);
  tagc_planner_decision_free(&d);
  CHECK_EQ_INT(run(&c, plan, w, 2, NULL, 0, 6, &d), TAGC_PLANNER_NEW);
  CHECK_EQ_STR(plan_members_text(d.plan, buf, sizeof buf), "w0,w1");
  tagc_planner_decision_free(&d);
  json_decref(plan);
}

int main(void) {
  test_first_and_keep();
  test_start_quorum();
  test_order_joiners_max();
  test_oom();
  test_suspect_dropped();
  test_partition_resolved();
  test_partition_majority();
  test_fruitless();
  test_resume_and_errors();
  return TEST_END();
}
