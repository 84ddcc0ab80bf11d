/* tagctl status: a job's state for people (done, running, recovering, waiting or failed; step
 * of total, percent, ETA, throughput, loss, world, generation, leader, the last checkpoint and
 * its age, failures by kind, recoveries and each worker's state) or, with --json, the same as
 * one JSON object for scripts. One read of the job's etcd keys (coordinator/view.h;
 * docs/etcd-schema.md); an unknown job is an error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "common/timeutil.h"
#include "coordinator/view.h"
#include "tagctl/tagctl.h"

#define LABEL "%-12s"

/* Registration of worker id, or -1 when it is not registered. */
static int64_t registration(const coord_view *v, const char *id) {
  for (size_t i = 0; i < v->n_workers; i++) {
    if (!strcmp(v->workers[i].id, id))
      return v->workers[i].registration;
  }
  return -1;
}

/* Whether registered worker id announced that it leaves (SIGTERM). */
static int leaving(const coord_view *v, const char *id) {
  int64_t reg = registration(v, id);
  for (size_t i = 0; reg > 0 && i < v->n_leaving; i++) {
    if (v->leaving[i].registration == reg && !strcmp(v->leaving[i].id, id))
      return 1;
  }
  return 0;
}

/* Members of the plan that are not registered (any more). */
static int missing_members(const coord_view *v) {
  const json_t *members = json_object_get(v->plan, "members");
  size_t i;
  json_t *m;
  int n = 0;
  json_array_foreach(members, i, m) n += registration(v, json_string_value(m)) < 0;
  return n;
}

/* Rank of id in the plan, or -1. */
static int rank_of(const coord_view *v, const char *id) {
  const json_t *members = json_object_get(v->plan, "members");
  for (size_t r = 0; r < json_array_size(members); r++) {
    const char *m = json_string_value(json_array_get(members, r));
    if (m && !strcmp(m, id))
      return (int)r;
  }
  return -1;
}

/* The final step: the job's config, else rank 0's progress record; 0 when unknown. */
static int64_t final_step(const coord_view *v) {
  int64_t final = coord_int_field(v->config, "steps");
  return final > 0 ? final : coord_int_field(v->progress, "steps");
}

/* Seconds since the record's "time" (wall clock), or NaN without one. */
static double age_of(const json_t *record) {
  const json_t *t = json_object_get(record, "time");
  if (!json_is_number(t))
    return NAN;
  double ago = tagc_wall_time() - json_number_value(t);
  return ago > 0 ? ago : 0;
}

/* The job's state in one word and a sentence saying why. */
static const char *state_of(const coord_view *v, char *why, size_t cap) {
  long long step = (long long)coord_int_field(v->progress, "step");
  int missing = missing_members(v);
  size_t world = json_array_size(json_object_get(v->plan, "members"));
  if (v->done) {
    const char *by = json_string_value(json_object_get(v->done, "by"));
    snprintf(why, cap, "finished at step %lld (generation %lld%s%s)",
             (long long)coord_int_field(v->done, "step"), (long long)coord_int_field(v->done, "gen"),
             by ? ", recorded by " : "", by ? by : "");
    return "done";
  }
  if (v->n_workers == 0 && v->gen > 0) {
    long long final = (long long)final_step(v);
    char of[40] = "";
    if (final > 0)
      snprintf(of, sizeof of, " of %lld", final);
    snprintf(why, cap, "not done and no worker is registered (stopped at step %lld%s); start "
             "workers to resume from the last checkpoint, or `tagctl job reset`", step, of);
    return "failed";
  }
  if (v->gen == 0) {
    snprintf(why, cap, "no generation yet, %zu worker(s) registered", v->n_workers);
    return "waiting";
  }
  if (missing > 0 || v->n_reports > 0) {
    snprintf(why, cap, "generation %lld lost %d of %zu member(s), %zu failure report(s)",
             (long long)v->gen, missing, world, v->n_reports);
    return "recovering";
  }
  snprintf(why, cap, "generation %lld with %zu worker(s)", (long long)v->gen, world);
  return "running";
}

/* A duration for people: 42s, 3m07s, 2h05m. */
static void duration(double s, char *buf, size_t cap) {
  if (!isfinite(s))
    snprintf(buf, cap, "?");
  else if (s < 60)
    snprintf(buf, cap, "%.0fs", s);
  else if (s < 3600)
    snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
  else
    snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)s % 3600 / 60);
}

/* Seconds to the final step: rank 0's estimate at its record, less the time since. */
static double eta_of(const coord_view *v) {
  const json_t *eta = json_object_get(v->progress, "eta_s");
  if (v->done)
    return 0;
  if (!json_is_number(eta))
    return NAN;
  double left = json_number_value(eta) - age_of(v->progress);
  return left > 0 ? left : 0;
}

/* The state of worker id: its rank and what it does, a failure it reported, or standby. */
static void worker_state(const coord_view *v, const char *id, char *buf, size_t cap) {
  int rank = rank_of(v, id);
  const json_t *report = json_object_get(v->failures, id);
  if (leaving(v, id))
    snprintf(buf, cap, "leaving");
  else if (rank < 0)
    snprintf(buf, cap, "standby");
  else if (registration(v, id) < 0)
    snprintf(buf, cap, "lost");
  else if (report)
    snprintf(buf, cap, "reported %s at step %lld",
             json_string_value(json_object_get(report, "kind")) ?: "?",
             (long long)coord_int_field(report, "step"));
  else if (v->done)
    snprintf(buf, cap, "done");
  else
    snprintf(buf, cap, "training");
}

/* ---------- for people ---------- */

static void print_progress(const coord_view *v) {
  if (!json_is_object(v->progress)) {
    printf(LABEL "-\n", "progress");
    return;
  }
  int64_t step = coord_int_field(v->progress, "step"), final = final_step(v);
  char of[64] = "", eta[32];
  if (final > 0)
    snprintf(of, sizeof of, "/%lld (%.0f%%)", (long long)final, 100.0 * (double)step / (double)final);
  duration(eta_of(v), eta, sizeof eta);
  printf(LABEL "step %lld%s, ETA %s, %.0f tokens/s, loss %.4f, world %lld", "progress",
         (long long)step, of, eta, json_number_value(json_object_get(v->progress, "tokens_per_s")),
         json_number_value(json_object_get(v->progress, "loss")),
         (long long)coord_int_field(v->progress, "world_size"));
  double age = age_of(v->progress);
  if (isfinite(age))
    printf(", updated %.0f s ago", age);
  printf("\n");
}

/* The ranks' compute times in rank 0's progress record: the straggler while one is named
 * (docs/operations.md, Stragglers), else the slowest rank of the last step. */
static void print_stragglers(const coord_view *v) {
  const json_t *p = v->progress;
  double max = json_number_value(json_object_get(p, "compute_s_max"));
  double median = json_number_value(json_object_get(p, "compute_s_median"));
  if (!json_is_integer(json_object_get(p, "slowest_rank")) || !(median > 0))
    return;
  printf(LABEL, "stragglers");
  if (json_is_integer(json_object_get(p, "straggler"))) {
    const char *id = json_string_value(json_object_get(p, "straggler_worker"));
    char since[32];
    duration(json_number_value(json_object_get(p, "straggler_s")), since, sizeof since);
    printf("rank %lld (worker %s), %.2fx the median compute time per step, for %s\n",
           (long long)coord_int_field(p, "straggler"), id ? id : "?",
           json_number_value(json_object_get(p, "straggler_ratio")), since);
    return;
  }
  printf("none; slowest rank %lld at the last step, %.2fx the median compute time (%.3f s vs "
         "%.3f s)\n", (long long)coord_int_field(p, "slowest_rank"), max / median, max, median);
}

void tagctl_print_compute(const json_t *compute_s) {
  if (!json_is_array(compute_s) || json_array_size(compute_s) == 0)
    return;
  printf(LABEL, "compute");
  for (size_t r = 0; r < json_array_size(compute_s); r++)
    printf("%srank %zu %.3f s", r ? ", " : "", r,
           json_number_value(json_array_get(compute_s, r)));
  printf(" (each rank's compute seconds, the last step)\n");
}

static void print_plan(const coord_view *v) {
  const json_t *members = json_object_get(v->plan, "members");
  if (!json_is_array(members)) {
    printf(LABEL "-\n", "generation");
    return;
  }
  printf(LABEL "%lld: ", "generation", (long long)v->gen);
  size_t i;
  json_t *m;
  json_array_foreach(members, i, m) printf("%s%s", i ? ", " : "", json_string_value(m));
  const char *reason = json_string_value(json_object_get(v->plan, "reason"));
  printf("%s%s%s\n", reason && *reason ? " (" : "", reason && *reason ? reason : "",
         reason && *reason ? ")" : "");
}

static void print_checkpoint(const coord_view *v) {
  const char *path = json_string_value(json_object_get(v->ckpt, "path"));
  if (!path) {
    printf(LABEL "-\n", "checkpoint");
    return;
  }
  char age[32];
  duration(age_of(v->ckpt), age, sizeof age);
  printf(LABEL "step %lld, %s ago (generation %lld, world %lld): %s\n", "checkpoint",
         (long long)coord_int_field(v->ckpt, "step"), age,
         (long long)coord_int_field(v->ckpt, "gen"), (long long)coord_int_field(v->ckpt, "world"),
         path);
}

/* Failure reports by kind over the job (the plan's failures_total: every report and lost
 * lease, so one dead peer counts once per survivor that saw it; `tagctl status OUT` counts
 * failures once each, from OUT/history.jsonl) and rank 0's recoveries. */
static void print_failures(const coord_view *v) {
  const json_t *totals = json_object_get(v->plan, "failures_total");
  printf(LABEL, "reports");
  const char *kind;
  json_t *n;
  int any = 0;
  json_object_foreach((json_t *)totals, kind, n) {
    printf("%s%s %lld", any ? ", " : "", kind, (long long)json_integer_value(n));
    any = 1;
  }
  printf("%s", any ? "" : "none");
  if (json_is_integer(json_object_get(v->progress, "recoveries")))
    printf("; recoveries %lld", (long long)coord_int_field(v->progress, "recoveries"));
  printf("\n");
}

static void print_workers(const coord_view *v) {
  char state[160];
  for (size_t i = 0; i < v->n_workers; i++) {
    const char *id = v->workers[i].id;
    const json_t *info = json_object_get(v->worker_info, id);
    int rank = rank_of(v, id);
    worker_state(v, id, state, sizeof state);
    const char *host = json_string_value(json_object_get(info, "host"));
    char r[32] = "";
    if (rank >= 0)
      snprintf(r, sizeof r, "rank %d, ", rank);
    printf(LABEL "%s: %s%s, host %s, pid %lld\n", "worker", id, r, state, host ? host : "?",
           (long long)coord_int_field(info, "pid"));
  }
  const json_t *members = json_object_get(v->plan, "members");
  size_t r;
  json_t *m;
  json_array_foreach(members, r, m) {
    if (registration(v, json_string_value(m)) < 0)
      printf(LABEL "%s: rank %zu, lost (not registered)\n", "worker", json_string_value(m), r);
  }
}

static void print_status(const coord_view *v, const char *job) {
  char why[512];
  const char *state = state_of(v, why, sizeof why);
  printf(LABEL "%s\n", "job", job);
  printf(LABEL "%s: %s\n", "state", state, why);
  print_progress(v);
  print_stragglers(v);
  tagctl_print_compute(json_object_get(v->progress, "compute_s"));
  print_checkpoint(v);
  print_failures(v);
  print_plan(v);
  printf(LABEL "%s\n", "leader", v->leader ? v->leader : "-");
  print_workers(v);
}

/* ---------- --json ---------- */

/* A number, or null when it is not finite. */
static json_t *number_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *checkpoint_json(const coord_view *v) {
  if (!json_string_value(json_object_get(v->ckpt, "path")))
    return json_null();
  return json_pack("{s:I, s:I, s:I, s:O, s:o}", "step", (json_int_t)coord_int_field(v->ckpt, "step"),
                   "generation", (json_int_t)coord_int_field(v->ckpt, "gen"), "world",
                   (json_int_t)coord_int_field(v->ckpt, "world"), "path",
                   json_object_get(v->ckpt, "path"), "age_s", number_or_null(age_of(v->ckpt)));
}

static json_t *workers_json(const coord_view *v) {
  json_t *a = json_array();
  char state[160];
  for (size_t i = 0; a && i < v->n_workers; i++) {
    const char *id = v->workers[i].id;
    const json_t *info = json_object_get(v->worker_info, id);
    worker_state(v, id, state, sizeof state);
    json_array_append_new(a, json_pack("{s:s, s:i, s:s, s:O?, s:I}", "id", id, "rank",
                                       rank_of(v, id), "state", state, "host",
                                       json_object_get(info, "host"), "pid",
                                       (json_int_t)coord_int_field(info, "pid")));
  }
  const json_t *members = json_object_get(v->plan, "members");
  size_t r;
  json_t *m;
  json_array_foreach(members, r, m) {
    if (a && registration(v, json_string_value(m)) < 0)
      json_array_append_new(a, json_pack("{s:O, s:i, s:s}", "id", m, "rank", (int)r, "state",
                                         "lost"));
  }
  return a;
}

static json_t *status_json(const coord_view *v, const char *job) {
  char why[512];
  const char *state = state_of(v, why, sizeof why);
  int64_t step = coord_int_field(v->progress, "step"), final = final_step(v);
  const json_t *totals = json_object_get(v->plan, "failures_total");
  json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:I, s:o, s:s?}",
                        "job", job, "state", state, "reason", why, "generation", (json_int_t)v->gen,
                        "step", (json_int_t)step, "steps",
                        final > 0 ? json_integer(final) : json_null(), "percent",
                        final > 0 ? json_real(100.0 * (double)step / (double)final) : json_null(),
                        "eta_s", number_or_null(eta_of(v)), "tokens_per_s",
                        json_is_object(v->progress)
                            ? json_real(json_number_value(json_object_get(v->progress, "tokens_per_s")))
                            : json_null(),
                        "loss", json_is_object(v->progress)
                                    ? json_real(json_number_value(json_object_get(v->progress, "loss")))
                                    : json_null(),
                        "world_size", (json_int_t)json_array_size(json_object_get(v->plan, "members")),
                        "progress_age_s", number_or_null(age_of(v->progress)), "leader", v->leader);
  if (!o)
    return NULL;
  json_object_set_new(o, "checkpoint", checkpoint_json(v));
  json_object_set_new(o, "failures", json_is_object(totals) ? json_deep_copy(totals) : json_object());
  json_object_set_new(o, "recoveries", json_is_integer(json_object_get(v->progress, "recoveries"))
                                           ? json_integer(coord_int_field(v->progress, "recoveries"))
                                           : json_null());
  json_object_set_new(o, "workers", workers_json(v));
  const json_t *p = v->progress;
  if (json_is_integer(json_object_get(p, "slowest_rank"))) {
    json_t *s = json_object();
    const char *keys[] = {"slowest_rank", "compute_s", "compute_s_max", "compute_s_median", "straggler",
                          "straggler_worker", "straggler_ratio", "straggler_s"};
    for (size_t k = 0; s && k < sizeof keys / sizeof keys[0]; k++)
      if (json_object_get(p, keys[k]))
        json_object_set(s, keys[k], json_object_get(p, keys[k]));
    json_object_set_new(o, "stragglers", s ? s : json_null());
  }
  return o;
}

static tagc_status print_json(const coord_view *v, const char *job) {
  json_t *o = status_json(v, job);
  char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(o);
  if (!text)
    return tagc_errorf(TAGC_ENOMEM, "status JSON");
  printf("%s\n", text);
  free(text);
  return TAGC_OK;
}

static const tagc_opt status_opts[] = {
    {"json", TAGC_OPT_BOOL, TAGCTL_ARGOFF(json), "false", 0, -1, NULL,
     "print one JSON object instead of the text"},
};

static const tagctl_etcd_command status_command = {
    "tagctl status", "--etcd URL --job J [--json] | OUT [--json]",
    "Says whether a job is done, running, recovering, waiting for its workers or failed, with "
    "its progress, ETA, last checkpoint, failure reports and workers, from etcd. "
    "`tagctl status OUT` says the same of a local run from its files, also after it ended "
    "(failures counted once per interruption, as summary.json and tagctl plot do).",
    status_opts, sizeof status_opts / sizeof status_opts[0]};

int tagctl_status(int argc, char **argv) {
  if (argc > 1 && argv[1][0] != '-') /* tagctl status OUT: from the run's files */
    return tagctl_status_out(argc, argv);
  tagctl_etcd_args a = {0};
  tagc_etcd *etcd = NULL;
  int code = tagctl_etcd_setup(&status_command, argc, argv, &a, NULL, 0, NULL, &etcd);
  if (code >= 0)
    goto done;
  coord_keys keys;
  coord_seen seen = {0};
  coord_view v;
  tagc_status st = coord_keys_init(&keys, a.job);
  if (st == TAGC_OK)
    st = coord_view_read(etcd, &keys, &seen, &v);
  if (st == TAGC_OK && v.r.n == 0) {
    coord_view_free(&v);
    st = tagc_errorf(TAGC_ENOTFOUND, "no such job '%s' in etcd %s", a.job, a.etcd);
  }
  coord_seen_free(&seen);
  if (st == TAGC_OK) {
    if (a.json)
      st = print_json(&v, a.job);
    else
      print_status(&v, a.job);
    coord_view_free(&v);
  }
  if (st != TAGC_OK) {
    const char *err = tagc_last_error();
    fprintf(stderr, "tagctl status: %s%s\n", err,
            strstr(err, "connect") ? " (a local run that has ended: tagctl status OUT)" : "");
    code = 1;
    goto done;
  }
  code = 0;
done:
  tagctl_etcd_args_free(&a);
  tagc_etcd_destroy(etcd);
  return code;
}
