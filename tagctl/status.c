/* tagctl status: a job's state in words (done, running, recovering, waiting or failed) with
 * its generation, progress, last checkpoint, failures and workers, from one read of its etcd
 * keys (coordinator/view.h; docs/etcd-schema.md). */
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

/* " of F" when the job's config names its final step, else "". */
static void of_final(const coord_view *v, char *buf, size_t cap) {
  int64_t final = coord_int_field(v->config, "steps");
  if (final > 0)
    snprintf(buf, cap, " of %lld", (long long)final);
  else
    buf[0] = '\0';
}

/* The state line: done, waiting, failed, recovering or running, and why. */
static void print_state(const coord_view *v) {
  char of[40];
  of_final(v, of, sizeof of);
  long long step = (long long)coord_int_field(v->progress, "step");
  int missing = missing_members(v);
  size_t world = json_array_size(json_object_get(v->plan, "members"));
  if (v->done) {
    const char *by = json_string_value(json_object_get(v->done, "by"));
    printf(LABEL "done: finished at step %lld (generation %lld%s%s)\n", "state",
           (long long)coord_int_field(v->done, "step"), (long long)coord_int_field(v->done, "gen"),
           by ? ", recorded by " : "", by ? by : "");
  } else if (v->n_workers == 0 && v->gen > 0) {
    printf(LABEL "failed: not done and no worker is registered (stopped at step %lld%s); start "
           "workers to resume from the last checkpoint, or `tagctl job reset`\n",
           "state", step, of);
  } else if (v->gen == 0) {
    printf(LABEL "waiting: no generation yet, %zu worker(s) registered\n", "state", v->n_workers);
  } else if (missing > 0 || v->n_reports > 0) {
    printf(LABEL "recovering: generation %lld lost %d of %zu member(s), %zu failure report(s); "
           "step %lld%s\n", "state", (long long)v->gen, missing, world, v->n_reports, step, of);
  } else {
    printf(LABEL "running: generation %lld with %zu worker(s), step %lld%s\n", "state",
           (long long)v->gen, world, step, of);
  }
}

static void print_plan(const coord_view *v) {
  const json_t *members = json_object_get(v->plan, "members");
  if (!json_is_array(members)) {
    printf(LABEL "-\n", "plan");
    return;
  }
  printf(LABEL, "plan");
  size_t i;
  json_t *m;
  json_array_foreach(members, i, m) printf("%s%s", i ? ", " : "", json_string_value(m));
  const char *reason = json_string_value(json_object_get(v->plan, "reason"));
  printf("%s%s%s\n", reason && *reason ? " (" : "", reason && *reason ? reason : "",
         reason && *reason ? ")" : "");
}

static void print_progress(const coord_view *v) {
  if (!json_is_object(v->progress)) {
    printf(LABEL "-\n", "progress");
    return;
  }
  double ago = tagc_wall_time() - json_number_value(json_object_get(v->progress, "time"));
  printf(LABEL "step %lld, loss %.4f, %.0f tokens/s, world %lld, updated %.0f s ago\n", "progress",
         (long long)coord_int_field(v->progress, "step"),
         json_number_value(json_object_get(v->progress, "loss")),
         json_number_value(json_object_get(v->progress, "tokens_per_s")),
         (long long)coord_int_field(v->progress, "world_size"), ago > 0 ? ago : 0);
}

static void print_checkpoint(const coord_view *v) {
  const char *path = json_string_value(json_object_get(v->ckpt, "path"));
  if (!path) {
    printf(LABEL "-\n", "checkpoint");
    return;
  }
  printf(LABEL "step %lld of generation %lld (world %lld): %s\n", "checkpoint",
         (long long)coord_int_field(v->ckpt, "step"), (long long)coord_int_field(v->ckpt, "gen"),
         (long long)coord_int_field(v->ckpt, "world"), path);
}

/* Failures by kind over the job (the plan's failures_total). */
static void print_failures(const coord_view *v) {
  const json_t *totals = json_object_get(v->plan, "failures_total");
  printf(LABEL, "failures");
  const char *kind;
  json_t *n;
  int any = 0;
  json_object_foreach((json_t *)totals, kind, n) {
    printf("%s%s %lld", any ? ", " : "", kind, (long long)json_integer_value(n));
    any = 1;
  }
  printf("%s\n", any ? "" : "none");
}

static void print_workers(const coord_view *v) {
  const json_t *members = json_object_get(v->plan, "members");
  for (size_t i = 0; i < v->n_workers; i++) {
    const char *id = v->workers[i].id;
    const json_t *info = json_object_get(v->worker_info, id);
    int rank = -1;
    for (size_t r = 0; r < json_array_size(members); r++) {
      if (!strcmp(json_string_value(json_array_get(members, r)), id))
        rank = (int)r;
    }
    char role[32];
    if (rank >= 0)
      snprintf(role, sizeof role, "rank %d", rank);
    else
      snprintf(role, sizeof role, "standby");
    const char *host = json_string_value(json_object_get(info, "host"));
    printf(LABEL "%s: %s, host %s, pid %lld%s\n", "worker", id, role, host ? host : "?",
           (long long)coord_int_field(info, "pid"), leaving(v, id) ? ", leaving" : "");
  }
}

/* The whole report of a job with keys. */
static void print_status(const coord_view *v, const char *job) {
  printf(LABEL "%s\n", "job", job);
  print_state(v);
  print_plan(v);
  print_progress(v);
  print_checkpoint(v);
  print_failures(v);
  print_workers(v);
  printf(LABEL "%s\n", "coordinator", v->leader ? v->leader : "-");
}

int tagctl_status(int argc, char **argv) {
  tagctl_etcd_args a = {0};
  tagc_etcd *etcd = NULL;
  int code = tagctl_etcd_setup("tagctl status", "--etcd URL --job J",
                               "Says whether a job is done, running, recovering, waiting for "
                               "its workers or failed, with its generation, progress, last "
                               "checkpoint, failures and workers.",
                               argc, argv, &a, NULL, 0, NULL, &etcd);
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
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl status: %s\n", tagc_last_error());
    code = 1;
    goto done;
  }
  print_status(&v, a.job);
  coord_view_free(&v);
  code = 0;
done:
  tagctl_etcd_args_free(&a);
  tagc_etcd_destroy(etcd);
  return code;
}
