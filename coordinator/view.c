#include "coordinator/view.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"

tagc_status coord_keys_init(coord_keys *k, const char *job) {
  snprintf(k->job, sizeof k->job, "%s", job);
  const char *j = k->job;
  TAGC_CHECK(tagc_key_job_prefix(j, k->prefix, sizeof k->prefix));
  TAGC_CHECK(tagc_key_workers_prefix(j, k->workers_prefix, sizeof k->workers_prefix));
  TAGC_CHECK(tagc_key_failures_prefix(j, k->failures_prefix, sizeof k->failures_prefix));
  TAGC_CHECK(tagc_key_coord_prefix(j, k->coord_prefix, sizeof k->coord_prefix));
  TAGC_CHECK(tagc_key_gen(j, k->gen_key, sizeof k->gen_key));
  TAGC_CHECK(tagc_key_done(j, k->done_key, sizeof k->done_key));
  TAGC_CHECK(tagc_key_config(j, k->config_key, sizeof k->config_key));
  TAGC_CHECK(tagc_key_ckpt_committed(j, k->ckpt_key, sizeof k->ckpt_key));
  TAGC_CHECK(tagc_key_leaving_prefix(j, k->leaving_prefix, sizeof k->leaving_prefix));
  return tagc_key_progress(j, k->progress_key, sizeof k->progress_key);
}

void coord_seen_free(coord_seen *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->items[i].key);
  free(s->items);
  s->items = NULL;
  s->n = 0;
}

void coord_view_free(coord_view *v) {
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
  free(v->leaving);
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
static double seen_at(const coord_seen *old, const char *key, int64_t mod, double now) {
  for (size_t i = 0; i < old->n; i++) {
    if (old->items[i].mod == mod && strcmp(old->items[i].key, key) == 0)
      return old->items[i].at;
  }
  return now;
}

/* Rebuilds the seen list from the view's reports. */
static void remember_reports(coord_seen *seen, coord_view *v, const tagc_etcd_kv **kvs) {
  coord_seen_report *fresh = calloc(v->n_reports + 1, sizeof *fresh);
  double now = tagc_now();
  for (size_t i = 0; fresh && i < v->n_reports; i++) {
    const char *key = (const char *)kvs[i]->key;
    fresh[i] = (coord_seen_report){.key = strdup(key), .mod = kvs[i]->mod_revision,
                                   .at = seen_at(seen, key, kvs[i]->mod_revision, now)};
    v->reports[i].seen_at = fresh[i].at;
  }
  coord_seen_free(seen);
  seen->items = fresh;
  seen->n = fresh ? v->n_reports : 0;
}

/* A failure report of the current generation. */
static void add_report(coord_view *v, const char *id, const tagc_etcd_kv *kv,
                       const tagc_etcd_kv **kvs) {
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

static void add_worker(coord_view *v, const char *id, const tagc_etcd_kv *kv) {
  if (tagc_key_check_id(id, "worker id") != TAGC_OK) {
    LOG_WARN("coord", "ignoring %s: %s", (const char *)kv->key, tagc_last_error());
    return;
  }
  json_object_set_new(v->worker_info, id, parse_value(kv));
  v->workers[v->n_workers++] = (tagc_planner_worker){.id = id, .registration = kv->create_revision};
}

/* A leaving/<id> record; one without a registration number is ignored with a warning. */
static void add_leaving(coord_view *v, const char *id, const tagc_etcd_kv *kv) {
  json_t *rec = parse_value(kv);
  json_int_t reg = json_integer_value(json_object_get(rec, "registration"));
  json_decref(rec);
  if (tagc_key_check_id(id, "worker id") != TAGC_OK || reg <= 0) {
    LOG_WARN("coord", "ignoring %s: not a leave record of a worker", (const char *)kv->key);
    return;
  }
  v->leaving[v->n_leaving++] = (tagc_planner_worker){.id = id, .registration = reg};
}

/* Sorts one key of the job into the view. */
static void classify(const coord_keys *k, coord_view *v, const tagc_etcd_kv *kv,
                     const char *plan_key, const char *failures_gen,
                     const tagc_etcd_kv **report_kvs, int64_t *leader_rev) {
  const char *key = (const char *)kv->key, *rest;
  json_t **slot = !strcmp(key, plan_key)          ? &v->plan
                  : !strcmp(key, k->ckpt_key)     ? &v->ckpt
                  : !strcmp(key, k->progress_key) ? &v->progress
                  : !strcmp(key, k->done_key)     ? &v->done
                  : !strcmp(key, k->config_key)   ? &v->config
                                                  : NULL;
  if (slot)
    *slot = parse_value(kv);
  else if (tagc_key_suffix(key, k->workers_prefix, &rest) == TAGC_OK)
    add_worker(v, rest, kv);
  else if (tagc_key_suffix(key, failures_gen, &rest) == TAGC_OK)
    add_report(v, rest, kv, report_kvs);
  else if (tagc_key_suffix(key, k->leaving_prefix, &rest) == TAGC_OK)
    add_leaving(v, rest, kv);
  else if (tagc_key_suffix(key, k->coord_prefix, &rest) == TAGC_OK &&
           (*leader_rev == 0 || kv->create_revision < *leader_rev)) {
    *leader_rev = kv->create_revision;
    v->leader = (const char *)kv->value;
  }
}

/* The value of `gen` in the range, with its mod revision. */
static tagc_status find_gen(const coord_keys *k, coord_view *v) {
  for (size_t i = 0; i < v->r.n; i++) {
    const tagc_etcd_kv *kv = &v->r.kvs[i];
    if (strcmp((const char *)kv->key, k->gen_key) != 0)
      continue;
    char *end;
    errno = 0;
    long long g = strtoll((const char *)kv->value, &end, 10);
    if (errno || *end || g < 0 || kv->value_len == 0)
      return tagc_errorf(TAGC_EPROTO, "%s holds '%s', not a generation number", k->gen_key,
                         (const char *)kv->value);
    v->gen = g;
    v->gen_mod = kv->mod_revision;
  }
  return TAGC_OK;
}

tagc_status coord_view_read(tagc_etcd *etcd, const coord_keys *k, coord_seen *seen, coord_view *v) {
  memset(v, 0, sizeof *v);
  tagc_etcd_range_opts o = {.prefix = 1};
  TAGC_CHECK(tagc_etcd_range(etcd, k->prefix, &o, &v->r));
  char plan_key[TAGC_KEY_MAX], failures_gen[TAGC_KEY_MAX];
  tagc_status st;
  const tagc_etcd_kv **report_kvs = calloc(v->r.n + 1, sizeof *report_kvs);
  v->workers = calloc(v->r.n + 1, sizeof *v->workers);
  v->reports = calloc(v->r.n + 1, sizeof *v->reports);
  v->leaving = calloc(v->r.n + 1, sizeof *v->leaving);
  v->worker_info = json_object();
  v->failures = json_object();
  if (!report_kvs || !v->workers || !v->reports || !v->leaving || !v->worker_info || !v->failures) {
    st = tagc_errorf(TAGC_ENOMEM, "coordinator: view");
    goto fail;
  }
  TAGC_CHECK_GOTO(find_gen(k, v), st, fail);
  TAGC_CHECK_GOTO(tagc_key_gen_plan(k->job, v->gen, plan_key, sizeof plan_key), st, fail);
  TAGC_CHECK_GOTO(tagc_key_failures_gen_prefix(k->job, v->gen, failures_gen, sizeof failures_gen),
                  st, fail);
  int64_t leader_rev = 0;
  for (size_t i = 0; i < v->r.n; i++)
    classify(k, v, &v->r.kvs[i], plan_key, failures_gen, report_kvs, &leader_rev);
  remember_reports(seen, v, report_kvs);
  free(report_kvs);
  return TAGC_OK;
fail:
  free(report_kvs);
  coord_view_free(v);
  return st;
}
