#include "coordinator/coordinator.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/election.h"
#include "cluster/http.h"
#include "cluster/keys.h"
#include "coordinator/planner.h"

/* Seconds between two reads of the job's state for /status, /healthz and the final step. */
#define REFRESH_S 1.0
/* Longest sleep of the loops, so that tagc_coord_stop is seen promptly. */
#define POLL_S 0.2
/* /healthz fails when no read of etcd succeeded for this long. */
#define HEALTH_STALE_S 5.0

/* What ended a leadership (or the whole run). */
typedef enum outcome { GO_ON, JOB_DONE, DEPOSED, STOPPED } outcome;

/* When the leader first saw a failure report (key + mod revision). */
typedef struct seen_report {
  char *key;
  int64_t mod;
  double at;
} seen_report;

/* The job's state read at one revision. Pointers into r and the JSON objects stay valid
 * until view_free. */
typedef struct view {
  tagc_etcd_range_result r;
  int64_t gen, gen_mod;               /* value and mod revision of `gen` (0, 0 when absent) */
  json_t *plan, *ckpt, *progress, *done, *config;
  tagc_planner_worker *workers;
  size_t n_workers;
  json_t *worker_info;                /* {"id": registration JSON} */
  tagc_planner_report *reports;
  size_t n_reports;
  json_t *failures;                   /* {"id": report JSON} of generation gen */
  const char *leader;                 /* value of the lowest coord/ key, or NULL */
} view;

struct tagc_coord {
  tagc_etcd *etcd;
  tagc_coord_config cfg;              /* strings point at the copies below */
  char job[TAGC_KEY_ID_MAX + 1];
  char *advertise;
  char prefix[TAGC_KEY_MAX], workers_prefix[TAGC_KEY_MAX], failures_prefix[TAGC_KEY_MAX];
  char coord_prefix[TAGC_KEY_MAX], gen_key[TAGC_KEY_MAX], done_key[TAGC_KEY_MAX];
  char config_key[TAGC_KEY_MAX], ckpt_key[TAGC_KEY_MAX], progress_key[TAGC_KEY_MAX];
  tagc_http *http;

  atomic_int stop;
  atomic_int lease_lost;
  int64_t lease;
  int64_t stale_lease;                /* an old lease whose revoke failed, or 0 */
  tagc_etcd_keeper *keeper;
  tagc_election *election;
  int leading;                        /* the loop thread is in lead() */

  pthread_mutex_t lock;               /* dirty flag shared with the watch thread */
  pthread_cond_t wake;
  int dirty;
  double dirty_since;
  double started;     /* tagc_now() at creation: the first generation's wait counts from it */

  seen_report *seen;
  size_t n_seen;
  char last_reason[512];

  pthread_mutex_t snap_lock;          /* what HTTP serves */
  json_t *status;
  int leader;
  int done;
  double etcd_ok_at;
  char etcd_error[256];
};

void tagc_coord_config_init(tagc_coord_config *cfg) {
  *cfg = (tagc_coord_config){.min_workers = 1, .max_workers = 1024, .settle_s = 1,
                             .lease_ttl_s = 5, .suspect_window_s = 2, .start_wait_s = 30};
}

/* ---- reading the job's state ---- */

static void view_free(view *v) {
  tagc_etcd_range_result_free(&v->r);
  json_decref(v->plan);
  json_decref(v->ckpt);
  json_decref(v->progress);
  json_decref(v->done);
  json_decref(v->config);
  json_decref(v->worker_info);
  json_decref(v->failures);
  free(v->workers);
  free(v->reports);
  memset(v, 0, sizeof *v);
}

/* Parses a JSON value; malformed text becomes a JSON string holding it (still "present"). */
static json_t *parse_value(const tagc_etcd_kv *kv) {
  json_t *j;
  if (tagc_json_parse((const char *)kv->value, kv->value_len, &j) == TAGC_OK)
    return j;
  LOG_WARN("coord", "%s holds malformed JSON", (const char *)kv->key);
  return json_stringn((const char *)kv->value, kv->value_len);
}

/* When the report at key (mod revision mod) was first seen: from the previous list, or now. */
static double seen_at(const seen_report *old, size_t n_old, const char *key, int64_t mod, double now) {
  for (size_t i = 0; i < n_old; i++) {
    if (old[i].mod == mod && strcmp(old[i].key, key) == 0)
      return old[i].at;
  }
  return now;
}

/* Rebuilds the seen list from the view's reports. */
static void remember_reports(tagc_coord *c, view *v, const tagc_etcd_kv **kvs) {
  seen_report *fresh = calloc(v->n_reports + 1, sizeof *fresh);
  double now = tagc_now();
  for (size_t i = 0; fresh && i < v->n_reports; i++) {
    const char *key = (const char *)kvs[i]->key;
    fresh[i] = (seen_report){.key = strdup(key), .mod = kvs[i]->mod_revision,
                             .at = seen_at(c->seen, c->n_seen, key, kvs[i]->mod_revision, now)};
    v->reports[i].seen_at = fresh[i].at;
  }
  for (size_t i = 0; i < c->n_seen; i++)
    free(c->seen[i].key);
  free(c->seen);
  c->seen = fresh;
  c->n_seen = fresh ? v->n_reports : 0;
}

/* A failure report of the current generation. */
static void add_report(view *v, const char *id, const tagc_etcd_kv *kv, const tagc_etcd_kv **kvs) {
  json_t *rep = parse_value(kv);
  json_int_t peer = json_is_integer(json_object_get(rep, "peer"))
                        ? json_integer_value(json_object_get(rep, "peer"))
                        : -1;
  const char *kind = json_string_value(json_object_get(rep, "kind"));
  json_object_set_new(v->failures, id, rep);
  kvs[v->n_reports] = kv;
  v->reports[v->n_reports++] = (tagc_planner_report){
      .worker = id, .kind = kind ? kind : "unknown",
      .step = json_integer_value(json_object_get(rep, "step")),
      .peer = peer >= 0 && peer < INT32_MAX ? (int)peer : -1};
}

static void add_worker(view *v, const char *id, const tagc_etcd_kv *kv) {
  if (tagc_key_check_id(id, "worker id") != TAGC_OK) {
    LOG_WARN("coord", "ignoring %s: %s", (const char *)kv->key, tagc_last_error());
    return;
  }
  json_object_set_new(v->worker_info, id, parse_value(kv));
  v->workers[v->n_workers++] = (tagc_planner_worker){.id = id, .registration = kv->create_revision};
}

/* Sorts one key of the job into the view. */
static void classify(tagc_coord *c, view *v, const tagc_etcd_kv *kv, const char *plan_key,
                     const char *failures_gen, const tagc_etcd_kv **report_kvs,
                     int64_t *leader_rev) {
  const char *key = (const char *)kv->key, *rest;
  json_t **slot = !strcmp(key, plan_key)        ? &v->plan
                  : !strcmp(key, c->ckpt_key)     ? &v->ckpt
                  : !strcmp(key, c->progress_key) ? &v->progress
                  : !strcmp(key, c->done_key)     ? &v->done
                  : !strcmp(key, c->config_key)   ? &v->config
                                                  : NULL;
  if (slot)
    *slot = parse_value(kv);
  else if (tagc_key_suffix(key, c->workers_prefix, &rest) == TAGC_OK)
    add_worker(v, rest, kv);
  else if (tagc_key_suffix(key, failures_gen, &rest) == TAGC_OK)
    add_report(v, rest, kv, report_kvs);
  else if (tagc_key_suffix(key, c->coord_prefix, &rest) == TAGC_OK &&
           (*leader_rev == 0 || kv->create_revision < *leader_rev)) {
    *leader_rev = kv->create_revision;
    v->leader = (const char *)kv->value;
  }
}

/* The value of `gen` in the range, with its mod revision. */
static tagc_status find_gen(const tagc_coord *c, view *v) {
  for (size_t i = 0; i < v->r.n; i++) {
    const tagc_etcd_kv *kv = &v->r.kvs[i];
    if (strcmp((const char *)kv->key, c->gen_key) != 0)
      continue;
    char *end;
    errno = 0;
    long long g = strtoll((const char *)kv->value, &end, 10);
    if (errno || *end || g < 0 || kv->value_len == 0)
      return tagc_errorf(TAGC_EPROTO, "%s holds '%s', not a generation number", c->gen_key,
                         (const char *)kv->value);
    v->gen = g;
    v->gen_mod = kv->mod_revision;
  }
  return TAGC_OK;
}

static tagc_status read_view(tagc_coord *c, view *v) {
  memset(v, 0, sizeof *v);
  tagc_etcd_range_opts o = {.prefix = 1};
  TAGC_CHECK(tagc_etcd_range(c->etcd, c->prefix, &o, &v->r));
  char plan_key[TAGC_KEY_MAX], failures_gen[TAGC_KEY_MAX];
  tagc_status st;
  const tagc_etcd_kv **report_kvs = calloc(v->r.n + 1, sizeof *report_kvs);
  v->workers = calloc(v->r.n + 1, sizeof *v->workers);
  v->reports = calloc(v->r.n + 1, sizeof *v->reports);
  v->worker_info = json_object();
  v->failures = json_object();
  if (!report_kvs || !v->workers || !v->reports || !v->worker_info || !v->failures) {
    st = tagc_errorf(TAGC_ENOMEM, "coordinator: view");
    goto fail;
  }
  TAGC_CHECK_GOTO(find_gen(c, v), st, fail);
  TAGC_CHECK_GOTO(tagc_key_gen_plan(c->job, v->gen, plan_key, sizeof plan_key), st, fail);
  TAGC_CHECK_GOTO(tagc_key_failures_gen_prefix(c->job, v->gen, failures_gen, sizeof failures_gen),
                  st, fail);
  int64_t leader_rev = 0;
  for (size_t i = 0; i < v->r.n; i++)
    classify(c, v, &v->r.kvs[i], plan_key, failures_gen, report_kvs, &leader_rev);
  remember_reports(c, v, report_kvs);
  free(report_kvs);
  return TAGC_OK;
fail:
  free(report_kvs);
  view_free(v);
  return st;
}

/* ---- what HTTP serves ---- */

static int64_t int_field(const json_t *obj, const char *key) {
  return json_integer_value(json_object_get(obj, key));
}

/* Replaces the snapshot from a fresh view. */
static void publish(tagc_coord *c, const view *v, int leader) {
  json_t *s = json_pack("{s:s, s:s, s:s, s:s?, s:I, s:O?, s:O, s:O, s:O?, s:O?, s:O?, s:O?, s:s, s:I}",
                        "role", leader ? "leader" : "standby", "job", c->job, "self",
                        c->advertise, "leader", v->leader, "generation", (json_int_t)v->gen,
                        "plan", v->plan, "workers", v->worker_info, "failures", v->failures,
                        "progress", v->progress, "checkpoint", v->ckpt, "done", v->done,
                        "config", v->config, "decision", c->last_reason, "revision",
                        (json_int_t)v->r.revision);
  if (s && v->progress)
    json_object_set(s, "step", json_object_get(v->progress, "step"));
  pthread_mutex_lock(&c->snap_lock);
  if (s) {
    json_decref(c->status);
    c->status = s;
  }
  c->leader = leader;
  c->done = v->done != NULL;
  c->etcd_ok_at = tagc_now();
  pthread_mutex_unlock(&c->snap_lock);
}

static void set_leader(tagc_coord *c, int leader) {
  pthread_mutex_lock(&c->snap_lock);
  c->leader = leader;
  pthread_mutex_unlock(&c->snap_lock);
}

static void etcd_failed(tagc_coord *c, const char *what) {
  pthread_mutex_lock(&c->snap_lock);
  int changed = strcmp(c->etcd_error, tagc_last_error()) != 0;
  snprintf(c->etcd_error, sizeof c->etcd_error, "%s", tagc_last_error());
  pthread_mutex_unlock(&c->snap_lock);
  if (changed)
    LOG_WARN("coord", "%s: %s", what, tagc_last_error());
}

/* Appends printf output to a growing buffer; on allocation failure the text is cut. */
typedef struct text {
  char *buf;
  size_t len, cap;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = t->buf ? vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap) : -1;
    va_end(ap);
    if (n >= 0 && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap * 2 : 1024;
    char *bigger = realloc(t->buf, cap);
    if (!bigger)
      return;
    t->buf = bigger;
    t->cap = cap;
    t->buf[t->len] = '\0';
  }
}

static void gauge(text *t, const char *name, const char *help, double value) {
  add(t, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, value);
}

/* Prometheus text of the snapshot. Caller holds snap_lock. */
static char *metrics_text(const tagc_coord *c) {
  const json_t *plan = json_object_get(c->status, "plan");
  text t = {0};
  gauge(&t, "tagc_coordinator_leader", "1 when this coordinator is the job's leader", c->leader);
  gauge(&t, "tagc_generation", "Current generation number", (double)int_field(c->status, "generation"));
  gauge(&t, "tagc_world_size", "Workers in the current generation", (double)int_field(plan, "world"));
  gauge(&t, "tagc_step", "Training step last reported by rank 0",
        (double)int_field(c->status, "step"));
  gauge(&t, "tagc_members", "Workers registered with a live lease",
        (double)json_object_size(json_object_get(c->status, "workers")));
  gauge(&t, "tagc_job_done", "1 once the job is done", c->done);
  add(&t, "# HELP tagc_failures_total Failure reports and lost leases, by kind, over the job\n"
          "# TYPE tagc_failures_total counter\n");
  static const char *const kinds[] = {"comm", "timeout", "oom", "crash", "hang", "injected", "lease"};
  const json_t *totals = json_object_get(plan, "failures_total");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    add(&t, "tagc_failures_total{kind=\"%s\"} %lld\n", kinds[i],
        (long long)json_integer_value(json_object_get(totals, kinds[i])));
  return t.buf;
}

static void serve(void *arg, const char *path, tagc_http_response *resp) {
  tagc_coord *c = arg;
  pthread_mutex_lock(&c->snap_lock);
  if (strcmp(path, "/healthz") == 0) {
    int ok = c->etcd_ok_at > 0 && tagc_now() - c->etcd_ok_at < HEALTH_STALE_S;
    resp->status = ok ? 200 : 503;
    text t = {0};
    add(&t, ok ? "ok\n" : "etcd unreachable: %s\n", c->etcd_error[0] ? c->etcd_error : "no read yet");
    resp->body = t.buf;
  } else if (strcmp(path, "/status") == 0) {
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = c->status ? json_dumps(c->status, JSON_INDENT(2) | JSON_SORT_KEYS)
                           : strdup("{\"role\":\"starting\"}");
  } else if (strcmp(path, "/metrics") == 0) {
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp->body = metrics_text(c);
  } else {
    resp->body = strdup("not found: try /healthz, /status or /metrics\n");
  }
  pthread_mutex_unlock(&c->snap_lock);
}

/* ---- the leader's decisions ---- */

/* The configured number, else an integer field of the job's config key, else 0. */
static int64_t setting(int64_t configured, const view *v, const char *field) {
  return configured > 0 ? configured : int_field(v->config, field);
}

/* `done` = the final record, fenced. */
static outcome write_done(tagc_coord *c, const view *v, int64_t step) {
  json_t *rec = json_pack("{s:s, s:I, s:I, s:s, s:f}", "status", "finished", "gen",
                          (json_int_t)v->gen, "step", (json_int_t)step, "by", c->advertise, "time",
                          tagc_wall_time());
  char *text = rec ? tagc_json_dump(rec) : NULL;
  json_decref(rec);
  if (!text)
    return GO_ON;
  tagc_etcd_compare absent = {.key = c->done_key, .target = TAGC_ETCD_CREATE,
                              .result = TAGC_ETCD_EQUAL};
  tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = c->done_key, .value = text,
                      .value_len = strlen(text)};
  tagc_status st = tagc_election_txn(c->election, &absent, 1, &put, 1, NULL);
  free(text);
  if (st == TAGC_ECONFLICT)
    return DEPOSED;
  if (st != TAGC_OK) {
    etcd_failed(c, "writing done");
    return GO_ON;
  }
  LOG_INFO("coord", "job %s done: progress reached the final step %" PRId64, c->job, step);
  return JOB_DONE;
}

/* Writes plan as generation g = v->gen + 1, fenced by the election and by `gen`'s mod
 * revision, and deletes generation g-2's keys and failure reports. */
static outcome write_generation(tagc_coord *c, const view *v, json_t *plan) {
  int64_t g = v->gen + 1;
  char plan_key[TAGC_KEY_MAX], old_gen[TAGC_KEY_MAX], old_failures[TAGC_KEY_MAX], gen_text[32];
  if (tagc_key_gen_plan(c->job, g, plan_key, sizeof plan_key) != TAGC_OK ||
      tagc_key_gen_prefix(c->job, g - 2 > 0 ? g - 2 : 0, old_gen, sizeof old_gen) != TAGC_OK ||
      tagc_key_failures_gen_prefix(c->job, g - 2 > 0 ? g - 2 : 0, old_failures,
                                   sizeof old_failures) != TAGC_OK)
    return GO_ON;
  snprintf(gen_text, sizeof gen_text, "%" PRId64, g);
  json_object_set_new(plan, "time", json_real(tagc_wall_time()));
  json_object_set_new(plan, "leader", json_string(c->advertise));
  char *text = tagc_json_dump(plan);
  if (!text)
    return GO_ON;
  tagc_etcd_compare same = {.key = c->gen_key, .result = TAGC_ETCD_EQUAL,
                            .target = v->gen_mod ? TAGC_ETCD_MOD : TAGC_ETCD_CREATE,
                            .number = v->gen_mod};
  tagc_etcd_op ops[4] = {
      {.type = TAGC_ETCD_OP_PUT, .key = plan_key, .value = text, .value_len = strlen(text)},
      {.type = TAGC_ETCD_OP_PUT, .key = c->gen_key, .value = gen_text, .value_len = strlen(gen_text)},
      {.type = TAGC_ETCD_OP_DELETE, .key = old_gen, .prefix = 1},
      {.type = TAGC_ETCD_OP_DELETE, .key = old_failures, .prefix = 1}};
  tagc_etcd_txn_result t;
  tagc_status st = tagc_election_txn(c->election, &same, 1, ops, g - 2 > 0 ? 4 : 2, &t);
  free(text);
  if (st == TAGC_ECONFLICT) {
    LOG_WARN("coord", "write of generation %" PRId64 " fenced: %s", g, tagc_last_error());
    return DEPOSED;
  }
  if (st != TAGC_OK) {
    etcd_failed(c, "writing a generation");
    return GO_ON;
  }
  int ok = t.succeeded;
  tagc_etcd_txn_result_free(&t);
  if (!ok) {
    LOG_WARN("coord", "gen changed while planning generation %" PRId64 "; reading again", g);
    return GO_ON;
  }
  char *members = tagc_json_dump(json_object_get(plan, "members"));
  LOG_INFO("coord", "generation %" PRId64 ": %lld workers %s (%s)", g,
           (long long)int_field(plan, "world"), members ? members : "", c->last_reason);
  free(members);
  return GO_ON;
}

/* Marks the leader's state dirty (evaluated after the settle window). */
static void mark_dirty(tagc_coord *c) {
  pthread_mutex_lock(&c->lock);
  if (!c->dirty) {
    c->dirty = 1;
    c->dirty_since = tagc_now();
  }
  pthread_cond_signal(&c->wake);
  pthread_mutex_unlock(&c->lock);
}

/* The final-step and done checks, run on every read. */
static outcome check_done(tagc_coord *c, const view *v) {
  if (v->done)
    return JOB_DONE;
  int64_t final = setting(c->cfg.final_step, v, "steps");
  int64_t step = int_field(v->progress, "step");
  if (c->leading && final > 0 && step >= final)
    return write_done(c, v, step);
  return GO_ON;
}

/* Runs the planner on a view and carries out its decision. *wait_until gets a time to decide
 * again (0 = none). */
static outcome evaluate(tagc_coord *c, const view *v, double *wait_until) {
  *wait_until = 0;
  tagc_planner_config pc = {.min_workers = c->cfg.min_workers, .max_workers = c->cfg.max_workers,
                            .suspect_window_s = c->cfg.suspect_window_s,
                            .default_micro_batch = (int)setting(c->cfg.micro_batch, v, "micro_batch"),
                            .start_workers = c->cfg.start_workers,
                            .start_deadline = c->started + c->cfg.start_wait_s};
  /* a malformed current plan (not a JSON object) counts as no plan: plan the next generation */
  const json_t *plan = json_is_object(v->plan) ? v->plan : NULL;
  tagc_planner_input in = {.gen = v->gen, .plan = plan, .workers = v->workers,
                           .n_workers = v->n_workers, .reports = v->reports,
                           .n_reports = v->n_reports, .ckpt = v->ckpt, .now = tagc_now()};
  tagc_planner_decision d;
  if (tagc_planner_decide(&pc, &in, &d) != TAGC_OK) {
    LOG_ERROR("coord", "planner: %s", tagc_last_error());
    return GO_ON;
  }
  int news = strcmp(c->last_reason, d.reason) != 0;
  snprintf(c->last_reason, sizeof c->last_reason, "%s", d.reason);
  outcome out = GO_ON;
  if (d.action == TAGC_PLANNER_NEW)
    out = write_generation(c, v, d.plan);
  else if (d.action == TAGC_PLANNER_WAIT)
    *wait_until = d.wait_until;
  if (news && (d.action == TAGC_PLANNER_STALLED || d.action == TAGC_PLANNER_WAIT))
    LOG_INFO("coord", "no new generation: %s", d.reason);
  tagc_planner_decision_free(&d);
  return out;
}

/* ---- the leader's loop ---- */

static int relevant(const tagc_coord *c, const tagc_etcd_event *e) {
  const char *key = (const char *)e->kv.key, *rest;
  if (tagc_key_suffix(key, c->workers_prefix, &rest) == TAGC_OK)
    return 1;
  if (e->type != TAGC_ETCD_PUT)
    return 0;
  return tagc_key_suffix(key, c->failures_prefix, &rest) == TAGC_OK ||
         !strcmp(key, c->done_key) || !strcmp(key, c->config_key);
}

static int on_job_event(void *arg, const tagc_etcd_watch_msg *msg) {
  tagc_coord *c = arg;
  int any = msg->kind == TAGC_ETCD_WATCH_RESYNC;
  for (size_t i = 0; i < msg->n_events; i++)
    any |= relevant(c, &msg->events[i]);
  if (any)
    mark_dirty(c);
  return 0;
}

/* Sleeps until `until` (monotonic), a dirty mark or POLL_S, whichever is first. */
static void nap(tagc_coord *c, double until) {
  double s = until - tagc_now();
  if (s > POLL_S)
    s = POLL_S;
  if (s <= 0)
    return;
  struct timespec ts = tagc_deadline_in(s);
  pthread_mutex_lock(&c->lock);
  pthread_cond_timedwait(&c->wake, &c->lock, &ts);
  pthread_mutex_unlock(&c->lock);
}

/* One pass of the leader's loop: a read, the done check and, when due, a decision. */
static outcome lead_step(tagc_coord *c, int decide, double *wait_until) {
  view v;
  if (read_view(c, &v) != TAGC_OK) {
    etcd_failed(c, "reading the job's state");
    if (decide)
      mark_dirty(c);
    return GO_ON;
  }
  outcome out = check_done(c, &v);
  if (out == GO_ON && decide)
    out = evaluate(c, &v, wait_until);
  publish(c, &v, out != DEPOSED);
  view_free(&v);
  return out;
}

static outcome lead(tagc_coord *c) {
  LOG_INFO("coord", "%s leads job %s", c->advertise, c->job);
  pthread_mutex_lock(&c->lock);
  c->dirty = 1; /* decide once after the settle window, whatever happened before */
  c->dirty_since = tagc_now();
  pthread_mutex_unlock(&c->lock);
  c->leading = 1;
  tagc_etcd_watch_opts o = {.prefix = 1};
  tagc_etcd_watch *w = NULL;
  if (tagc_etcd_watch_start(c->etcd, c->prefix, &o, on_job_event, c, &w) != TAGC_OK) {
    etcd_failed(c, "watching the job");
    c->leading = 0;
    return DEPOSED;
  }
  outcome out = GO_ON;
  double wait_until = 0, next_refresh = 0;
  while (out == GO_ON) {
    if (atomic_load(&c->stop))
      out = STOPPED;
    else if (atomic_load(&c->lease_lost))
      out = DEPOSED;
    if (out != GO_ON)
      break;
    pthread_mutex_lock(&c->lock);
    double due = c->dirty ? c->dirty_since + c->cfg.settle_s : 1e300;
    pthread_mutex_unlock(&c->lock);
    if (wait_until > 0 && wait_until < due)
      due = wait_until;
    double now = tagc_now();
    if (now >= due) {
      pthread_mutex_lock(&c->lock);
      c->dirty = 0;
      pthread_mutex_unlock(&c->lock);
      out = lead_step(c, 1, &wait_until);
      next_refresh = 0; /* publish what the decision wrote */
    } else if (now >= next_refresh) {
      double keep = wait_until;
      out = lead_step(c, 0, &wait_until);
      wait_until = keep;
      next_refresh = tagc_now() + REFRESH_S;
    } else {
      nap(c, due < next_refresh ? due : next_refresh);
    }
  }
  tagc_etcd_watch_stop(w);
  c->leading = 0;
  set_leader(c, 0);
  if (out == DEPOSED)
    LOG_WARN("coord", "%s is no longer the leader of job %s", c->advertise, c->job);
  return out;
}

/* ---- candidacy ---- */

static void on_lease_lost(void *arg, int64_t lease, tagc_status why) {
  (void)lease;
  (void)why;
  atomic_store(&((tagc_coord *)arg)->lease_lost, 1);
}

/* Leaves the election: stops renewing and revokes the lease, which deletes the candidate
 * key, so that a standby takes over at once. */
static void drop_candidacy(tagc_coord *c) {
  tagc_election_destroy(c->election);
  c->election = NULL;
  tagc_etcd_keeper_stop(c->keeper);
  c->keeper = NULL;
  tagc_status st = c->lease ? tagc_etcd_lease_revoke(c->etcd, c->lease) : TAGC_OK;
  if (st != TAGC_OK && st != TAGC_ENOTFOUND)
    c->stale_lease = c->lease; /* etcd unreachable: revoke it once etcd answers again */
  c->lease = 0;
}

static tagc_status become_candidate(tagc_coord *c) {
  int64_t granted;
  atomic_store(&c->lease_lost, 0);
  /* Our own key from before an outage would otherwise rank ahead of us for up to a TTL. */
  tagc_status st = c->stale_lease ? tagc_etcd_lease_revoke(c->etcd, c->stale_lease) : TAGC_OK;
  if (st != TAGC_OK && st != TAGC_ENOTFOUND)
    return st;
  c->stale_lease = 0;
  TAGC_CHECK(tagc_etcd_lease_grant(c->etcd, (int64_t)(c->cfg.lease_ttl_s + 0.5), &c->lease, &granted));
  st = tagc_etcd_keeper_start(c->etcd, c->lease, granted, on_lease_lost, c, &c->keeper);
  if (st == TAGC_OK)
    st = tagc_election_create(c->etcd, c->job, c->lease, c->advertise, &c->election);
  if (st != TAGC_OK)
    drop_candidacy(c);
  return st;
}

/* A standby's pass: mirrors the state for HTTP; tells whether the job is done. */
static outcome stand_by(tagc_coord *c) {
  view v;
  if (read_view(c, &v) != TAGC_OK) {
    etcd_failed(c, "reading the job's state");
    return GO_ON;
  }
  outcome out = check_done(c, &v);
  publish(c, &v, 0);
  view_free(&v);
  return out;
}

tagc_status tagc_coord_run(tagc_coord *c) {
  outcome out = GO_ON;
  while (out != JOB_DONE && out != STOPPED) {
    if (atomic_load(&c->stop)) {
      out = STOPPED;
    } else if (!c->election || atomic_load(&c->lease_lost)) {
      drop_candidacy(c);
      if (become_candidate(c) != TAGC_OK) {
        etcd_failed(c, "registering as a candidate");
        tagc_sleep(POLL_S);
      }
    } else {
      tagc_status st = tagc_election_campaign(c->election, REFRESH_S);
      if (st == TAGC_OK) {
        out = lead(c);
        if (out == DEPOSED)
          drop_candidacy(c);
      } else if (st == TAGC_ETIMEDOUT) {
        out = stand_by(c);
      } else if (st == TAGC_ENOTFOUND) {
        atomic_store(&c->lease_lost, 1);
      } else {
        etcd_failed(c, "campaigning");
        tagc_sleep(POLL_S);
      }
    }
  }
  drop_candidacy(c);
  while (out == JOB_DONE && c->cfg.linger && !atomic_load(&c->stop)) {
    stand_by(c);
    tagc_sleep(REFRESH_S);
  }
  if (out == JOB_DONE) {
    LOG_INFO("coord", "job %s is done; %s stops", c->job, c->advertise);
    return TAGC_OK;
  }
  return tagc_errorf(TAGC_EABORTED, "coordinator stopped");
}

void tagc_coord_stop(tagc_coord *c) { atomic_store(&c->stop, 1); }

/* ---- creation ---- */

static tagc_status check_config(const tagc_coord_config *cfg) {
  if (cfg->min_workers < 1 || cfg->max_workers < cfg->min_workers)
    return tagc_errorf(TAGC_EINVAL, "need 1 <= min-workers (%d) <= max-workers (%d)",
                       cfg->min_workers, cfg->max_workers);
  if (!(cfg->settle_s >= 0 && cfg->settle_s <= 600) || !(cfg->lease_ttl_s >= 1 && cfg->lease_ttl_s <= 600) ||
      !(cfg->suspect_window_s >= 0 && cfg->suspect_window_s <= 600))
    return tagc_errorf(TAGC_EINVAL, "settle (%g s) and suspect window (%g s) must be in [0, 600], "
                       "lease TTL (%g s) in [1, 600]", cfg->settle_s, cfg->suspect_window_s,
                       cfg->lease_ttl_s);
  if (cfg->micro_batch < 0 || cfg->final_step < 0)
    return tagc_errorf(TAGC_EINVAL, "micro-batch and final step must not be negative");
  if (cfg->start_workers < 0 || cfg->start_workers > cfg->max_workers ||
      !(cfg->start_wait_s >= 0 && cfg->start_wait_s <= 3600))
    return tagc_errorf(TAGC_EINVAL, "start workers (%d) must be in [0, max-workers %d] and the "
                       "start wait (%g s) in [0, 3600]", cfg->start_workers, cfg->max_workers,
                       cfg->start_wait_s);
  return TAGC_OK;
}

static tagc_status init_keys(tagc_coord *c) {
  const char *j = c->job;
  TAGC_CHECK(tagc_key_job_prefix(j, c->prefix, sizeof c->prefix));
  TAGC_CHECK(tagc_key_workers_prefix(j, c->workers_prefix, sizeof c->workers_prefix));
  TAGC_CHECK(tagc_key_failures_prefix(j, c->failures_prefix, sizeof c->failures_prefix));
  TAGC_CHECK(tagc_key_coord_prefix(j, c->coord_prefix, sizeof c->coord_prefix));
  TAGC_CHECK(tagc_key_gen(j, c->gen_key, sizeof c->gen_key));
  TAGC_CHECK(tagc_key_done(j, c->done_key, sizeof c->done_key));
  TAGC_CHECK(tagc_key_config(j, c->config_key, sizeof c->config_key));
  TAGC_CHECK(tagc_key_ckpt_committed(j, c->ckpt_key, sizeof c->ckpt_key));
  return tagc_key_progress(j, c->progress_key, sizeof c->progress_key);
}

/* The election value: cfg->advertise, else the HTTP URL (with this host's name when
 * listening on every address), else host:pid. */
static tagc_status make_advertise(tagc_coord *c, const tagc_coord_config *cfg) {
  char buf[300], name[256] = "localhost";
  gethostname(name, sizeof name - 1);
  if (cfg->advertise && cfg->advertise[0]) {
    snprintf(buf, sizeof buf, "%s", cfg->advertise);
  } else if (c->http) {
    char *host;
    int port;
    TAGC_CHECK(tagc_http_parse_addr(cfg->http_addr, &host, &port));
    int any = strcmp(host, "0.0.0.0") == 0;
    snprintf(buf, sizeof buf, "http://%s:%d", any ? name : host, tagc_http_port(c->http));
    free(host);
  } else {
    snprintf(buf, sizeof buf, "%s:%ld", name, (long)getpid());
  }
  c->advertise = strdup(buf);
  return c->advertise ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "coordinator");
}

tagc_status tagc_coord_create(tagc_etcd *etcd, const tagc_coord_config *cfg, tagc_coord **out) {
  *out = NULL;
  if (!etcd || !cfg)
    return tagc_errorf(TAGC_EINVAL, "coordinator: NULL client or config");
  TAGC_CHECK(tagc_key_check_id(cfg->job, "job id"));
  TAGC_CHECK(check_config(cfg));
  tagc_coord *c = calloc(1, sizeof *c);
  if (!c)
    return tagc_errorf(TAGC_ENOMEM, "coordinator");
  c->etcd = etcd;
  c->cfg = *cfg;
  c->started = tagc_now();
  snprintf(c->job, sizeof c->job, "%s", cfg->job);
  c->cfg.job = c->job;
  c->cfg.http_addr = c->cfg.advertise = NULL;
  pthread_mutex_init(&c->lock, NULL);
  tagc_cond_init_monotonic(&c->wake);
  pthread_mutex_init(&c->snap_lock, NULL);
  tagc_status st;
  TAGC_CHECK_GOTO(init_keys(c), st, fail);
  if (cfg->http_addr && cfg->http_addr[0])
    TAGC_CHECK_GOTO(tagc_http_start(cfg->http_addr, serve, c, &c->http), st, fail);
  TAGC_CHECK_GOTO(make_advertise(c, cfg), st, fail);
  *out = c;
  return TAGC_OK;
fail:
  tagc_coord_destroy(c);
  return st;
}

int tagc_coord_http_port(const tagc_coord *c) { return c->http ? tagc_http_port(c->http) : 0; }

void tagc_coord_destroy(tagc_coord *c) {
  if (!c)
    return;
  tagc_http_stop(c->http);
  drop_candidacy(c);
  for (size_t i = 0; i < c->n_seen; i++)
    free(c->seen[i].key);
  free(c->seen);
  json_decref(c->status);
  pthread_mutex_destroy(&c->snap_lock);
  pthread_cond_destroy(&c->wake);
  pthread_mutex_destroy(&c->lock);
  free(c->advertise);
  free(c);
}
