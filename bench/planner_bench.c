/* planner_bench: the time of one planner decision (coordinator/planner.h) for M members, in
 * the cases a large job meets, as the median of --repeat runs. Pure CPU, no etcd.
 *
 * Cases (every member registered as its index + 1; the plan has resume step 100):
 *   steady      nothing happened: KEEP
 *   death       one member's lease is gone, the others report "comm" at step 200 naming it
 *   batch       1 % of the members gone, 1 % new workers joining, the survivors report
 *   hang        one member is silent, every other member reports "hang" naming it
 *   bootstrap   the generation failed in its bootstrap (reports at step 0), each member names
 *               the next rank: the accusation-graph rule reads every report for every rank
 * Prints one JSON line per case: {"case", "members", "ms", "action", "world"}. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/options.h"
#include "common/timeutil.h"
#include "coordinator/planner.h"

typedef struct bench_options {
  int64_t members;
  int64_t repeat;
  char *cases;
} bench_options;

#define OFF(f) offsetof(bench_options, f)

static const tagc_opt bench_opts[] = {
    {"members", TAGC_OPT_INT, OFF(members), "1000", 2, 1000000, NULL, "members M"},
    {"repeat", TAGC_OPT_INT, OFF(repeat), "5", 1, 1000, NULL, "decisions per case (median)"},
    {"cases", TAGC_OPT_STRING, OFF(cases), "steady,death,batch,hang,bootstrap", 0, -1, NULL,
     "comma-separated cases"},
};

static const tagc_opt_program bench_program = {
    "planner_bench", "[options]", "Times planner decisions for M members.", bench_opts,
    sizeof bench_opts / sizeof bench_opts[0]};

/* The inputs of one case; ids[] own the id strings. */
typedef struct scenario {
  char (*ids)[24];
  json_t *plan;
  tagc_planner_worker *workers;
  size_t n_workers;
  tagc_planner_report *reports;
  size_t n_reports;
} scenario;

static void scenario_free(scenario *s) {
  free(s->ids);
  json_decref(s->plan);
  free(s->workers);
  free(s->reports);
  memset(s, 0, sizeof *s);
}

/* Is member i gone in this case? */
static int gone(const char *name, size_t i, size_t m) {
  size_t step = m / 100 ? 100 : m;
  if (!strcmp(name, "death"))
    return i == m / 2;
  if (!strcmp(name, "batch"))
    return i % step == 1;
  return 0;
}

static void build(const char *name, size_t m, scenario *s) {
  memset(s, 0, sizeof *s);
  size_t joiners = !strcmp(name, "batch") ? (m / 100 ? m / 100 : 1) : 0;
  s->ids = calloc(m + joiners, sizeof *s->ids);
  s->workers = calloc(m + joiners, sizeof *s->workers);
  s->reports = calloc(m, sizeof *s->reports);
  json_t *members = json_array(), *regs = json_object();
  for (size_t i = 0; i < m + joiners; i++) {
    snprintf(s->ids[i], sizeof s->ids[i], "w%06zu", i);
    if (i < m) {
      json_array_append_new(members, json_string(s->ids[i]));
      json_object_set_new(regs, s->ids[i], json_integer((json_int_t)i + 1));
    }
    if (!gone(name, i, m))
      s->workers[s->n_workers++] = (tagc_planner_worker){s->ids[i], (int64_t)i + 1};
  }
  s->plan = json_pack("{s:i, s:i, s:o, s:o, s:{s:i, s:n}}", "gen", 7, "world", (int)m, "members",
                      members, "registrations", regs, "resume", "step", 100, "path");
  for (size_t i = 0; i < m && strcmp(name, "steady"); i++) {
    if (gone(name, i, m))
      continue;
    tagc_planner_report r = {.worker = s->ids[i], .kind = "comm", .step = 200, .peer = -1,
                             .seen_at = 99.0};
    if (!strcmp(name, "death"))
      r.peer = (int)(m / 2);
    else if (!strcmp(name, "batch"))
      r.peer = 1;
    else if (!strcmp(name, "hang")) {
      if (i == 0)
        continue; /* the silent one */
      r.kind = "hang";
      r.peer = 0;
    } else { /* bootstrap */
      r.step = 0;
      r.peer = (int)((i + 1) % m);
    }
    s->reports[s->n_reports++] = r;
  }
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int run_case(const bench_options *o, const char *name) {
  size_t m = (size_t)o->members;
  scenario s;
  build(name, m, &s);
  tagc_planner_config cfg = {.min_workers = 1, .max_workers = (int)(2 * m),
                             .suspect_window_s = 2, .default_micro_batch = 8};
  tagc_planner_input in = {.gen = 7, .plan = s.plan, .workers = s.workers,
                           .n_workers = s.n_workers, .reports = s.reports,
                           .n_reports = s.n_reports, .now = 100.0};
  double *ms = calloc((size_t)o->repeat, sizeof *ms);
  tagc_planner_decision d = {0};
  for (int64_t k = 0; k < o->repeat; k++) {
    tagc_planner_decision_free(&d);
    double t0 = tagc_now();
    if (tagc_planner_decide(&cfg, &in, &d) != TAGC_OK) {
      fprintf(stderr, "planner_bench: %s: %s\n", name, tagc_last_error());
      return 1;
    }
    ms[k] = 1e3 * (tagc_now() - t0);
  }
  qsort(ms, (size_t)o->repeat, sizeof *ms, by_value);
  printf("{\"case\": \"%s\", \"members\": %zu, \"ms\": %.3f, \"action\": %d, \"world\": %d}\n",
         name, m, ms[o->repeat / 2], (int)d.action,
         (int)json_integer_value(json_object_get(d.plan, "world")));
  fflush(stdout);
  tagc_planner_decision_free(&d);
  free(ms);
  scenario_free(&s);
  return 0;
}

int main(int argc, char **argv) {
  bench_options o = {0};
  int help = 0;
  if (tagc_opts_parse(&bench_program, &o, argc, argv, NULL, 0, NULL, &help) != TAGC_OK) {
    fprintf(stderr, "planner_bench: %s\n", tagc_last_error());
    return 2;
  }
  int rc = 0;
  char *cases = strdup(o.cases), *save = NULL;
  for (char *c = strtok_r(cases, ",", &save); c && !help; c = strtok_r(NULL, ",", &save))
    rc |= run_case(&o, c);
  free(cases);
  tagc_opts_free(&bench_program, &o);
  return rc;
}
