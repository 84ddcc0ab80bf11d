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

static void free_list(coord_seen_report **items, size_t *n) {
  for (size_t i = 0; i < *n; i++)
    free((*items)[i].key);
  free(*items);
  *items = NULL;
  *n = 0;
}

void coord_seen_free(coord_seen *s) {
  free_list(&s->items, &s->n);
  free_list(&s->registrations, &s->n_registrations);
  free_list(&s->warned, &s->n_warned);
}

static int by_key_mod(const void *a, const void *b) {
  const coord_seen_report *x = a, *y = b;
  int c = strcmp(x->key ? x->key : "", y->key ? y->key : "");
  return c ? c : (x->mod > y->mod) - (x->mod < y->mod);
}

/* The entry of list[0 .. n) (sorted by key, then mod) for key and mod, or NULL: a search
 * rather than a scan, since every registration and report of a read looks itself up. */
static const coord_seen_report *find_seen(const coord_seen_report *list, size_t n,
                                          const char *key, int64_t mod) {
  coord_seen_report probe = {.key = (char *)key, .mod = mod};
  return n ? bsearch(&probe, list, n, sizeof *list, by_key_mod) : NULL;
}

/* One read: the previous read's memory and the bad keys this read met. */
typedef struct reading {
  const coord_keys *k;
  coord_view *v;
  coord_seen *seen;
  coord_seen_report *warned; /* this read's bad keys (key + mod revision) */
  size_t n_warned, cap_warned;
} reading;

/* Whether the previous read already warned about kv (same key, same mod revision). */
static int warned_before(const coord_seen *seen, const tagc_etcd_kv *kv) {
  return find_seen(seen->warned, seen->n_warned, (const char *)kv->key, kv->mod_revision) != NULL;
}

/* Notes a bad key; true when it is new (or changed) since the previous read: log it then. */
static int bad_key(reading *rd, const tagc_etcd_kv *kv) {
  if (rd->n_warned == rd->cap_warned) {
    size_t cap = rd->cap_warned ? 2 * rd->cap_warned : 8;
    coord_seen_report *more = realloc(rd->warned, cap * sizeof *more);
    if (!more)
      return !warned_before(rd->seen, kv);
    rd->warned = more;
    rd->cap_warned = cap;
  }
  char *key = strdup((const char *)kv->key);
  if (key)
    rd->warned[rd->n_warned++] = (coord_seen_report){.key = key, .mod = kv->mod_revision};
  return !warned_before(rd->seen, kv);
}

/* Replaces the previous read's bad keys with this read's. */
static void remember_warnings(reading *rd) {
  free_list(&rd->seen->warned, &rd->seen->n_warned);
  if (rd->n_warned)
    qsort(rd->warned, rd->n_warned, sizeof *rd->warned, by_key_mod);
  rd->seen->warned = rd->warned;
  rd->seen->n_warned = rd->n_warned;
  rd->warned = NULL;
  rd->n_warned = rd->cap_warned = 0;
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
  free(v->deaths);
  free(v->seen_at);
  memset(v, 0, sizeof *v);
}

/* Parses a JSON value; malformed text becomes a JSON string holding it (still "present"). */
static json_t *parse_value(reading *rd, const tagc_etcd_kv *kv) {
  json_t *j;
  if (tagc_json_parse((const char *)kv->value, kv->value_len, &j) == TAGC_OK)
    return j;
  if (bad_key(rd, kv))
    LOG_WARN("coord", "%s holds malformed JSON", (const char *)kv->key);
  return json_stringn((const char *)kv->value, kv->value_len);
}

/* When key (revision mod) was first seen: from the previous list old[0 .. n), or now. */
static double seen_at(const coord_seen_report *old, size_t n, const char *key, int64_t mod,
                      double now) {
  const coord_seen_report *e = find_seen(old, n, key, mod);
  return e ? e->at : now;
}

/* Rebuilds the seen list from the view's reports. */
static void remember_reports(coord_seen *seen, coord_view *v, const tagc_etcd_kv **kvs) {
  coord_seen_report *fresh = calloc(v->n_reports + 1, sizeof *fresh);
  double now = tagc_now();
  for (size_t i = 0; fresh && i < v->n_reports; i++) {
    const char *key = (const char *)kvs[i]->key;
    fresh[i] = (coord_seen_report){.key = strdup(key), .mod = kvs[i]->mod_revision,
                                   .at = seen_at(seen->items, seen->n, key,
                                                 kvs[i]->mod_revision, now)};
    v->reports[i].seen_at = fresh[i].at;
  }
  free_list(&seen->items, &seen->n);
  seen->items = fresh;
  seen->n = fresh ? v->n_reports : 0;
  if (seen->n)
    qsort(seen->items, seen->n, sizeof *seen->items, by_key_mod);
}

/* Rebuilds the seen list of registrations from the view's workers (a probation counts from
 * when the leader first saw a registration: planner.h). */
static void remember_registrations(coord_seen *seen, coord_view *v) {
  coord_seen_report *fresh = calloc(v->n_workers + 1, sizeof *fresh);
  double now = tagc_now();
  for (size_t i = 0; fresh && i < v->n_workers; i++) {
    const tagc_planner_worker *w = &v->workers[i];
    fresh[i] = (coord_seen_report){.key = strdup(w->id), .mod = w->registration,
                                   .at = seen_at(seen->registrations, seen->n_registrations,
                                                 w->id, w->registration, now)};
    v->seen_at[i] = fresh[i].at;
  }
  free_list(&seen->registrations, &seen->n_registrations);
  seen->registrations = fresh;
  seen->n_registrations = fresh ? v->n_workers : 0;
  if (seen->n_registrations)
    qsort(seen->registrations, seen->n_registrations, sizeof *seen->registrations, by_key_mod);
}

/* A failure report of the current generation. */
static void add_report(reading *rd, const char *id, const tagc_etcd_kv *kv,
                       const tagc_etcd_kv **kvs) {
  coord_view *v = rd->v;
  json_t *rep = parse_value(rd, kv);
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

static void add_worker(reading *rd, const char *id, const tagc_etcd_kv *kv) {
  coord_view *v = rd->v;
  if (tagc_key_check_id(id, "worker id") != TAGC_OK) {
    v->ignored_keys++;
    if (bad_key(rd, kv))
      LOG_WARN("coord", "ignoring %s: %s", (const char *)kv->key, tagc_last_error());
    return;
  }
  json_object_set_new(v->worker_info, id, parse_value(rd, kv));
  v->workers[v->n_workers++] = (tagc_planner_worker){.id = id, .registration = kv->create_revision};
}

/* A leaving/<id> record; one without a registration number is ignored with a warning. */
static void add_leaving(reading *rd, const char *id, const tagc_etcd_kv *kv) {
  coord_view *v = rd->v;
  json_t *rec = parse_value(rd, kv);
  json_int_t reg = json_integer_value(json_object_get(rec, "registration"));
  int died = json_is_true(json_object_get(rec, "died"));
  double uptime = json_number_value(json_object_get(rec, "uptime"));
  json_decref(rec);
  if (tagc_key_check_id(id, "worker id") != TAGC_OK || reg <= 0) {
    v->ignored_keys++;
    if (bad_key(rd, kv))
      LOG_WARN("coord", "ignoring %s: not a leave record of a worker", (const char *)kv->key);
    return;
  }
  v->deaths[v->n_leaving] = (tagc_planner_death){.died = died, .uptime_s = uptime};
  v->leaving[v->n_leaving++] = (tagc_planner_worker){.id = id, .registration = reg};
}

static int by_string(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The current plan's member ids, sorted (borrowed from the plan; caller frees the array), in
 * *n; NULL when there are none or memory ran out. */
static const char **sorted_members(const coord_view *v, size_t *n) {
  const json_t *members = json_object_get(v->plan, "members");
  const char **ids = calloc(json_array_size(members) + 1, sizeof *ids);
  *n = 0;
  for (size_t i = 0; ids && i < json_array_size(members); i++)
    if (json_is_string(json_array_get(members, i)))
      ids[(*n)++] = json_string_value(json_array_get(members, i));
  if (ids)
    qsort(ids, *n, sizeof *ids, by_string);
  return ids;
}

/* Whether id is among the sorted ids[0 .. n). */
static int member(const char **ids, size_t n, const char *id) {
  return n && bsearch(&id, ids, n, sizeof *ids, by_string) != NULL;
}

/* Leaves out the failure reports of workers that are not members of the current plan: only a
 * member's report can end a generation (a stray key must not restart the whole job). Without
 * a usable plan every report stays. */
static void drop_strangers(reading *rd, const tagc_etcd_kv **kvs) {
  coord_view *v = rd->v;
  if (!json_is_array(json_object_get(v->plan, "members")))
    return;
  size_t kept = 0, n_ids;
  const char **ids = sorted_members(v, &n_ids);
  for (size_t i = 0; i < v->n_reports; i++) {
    if (!ids || member(ids, n_ids, v->reports[i].worker)) { /* no memory: keep the report */
      v->reports[kept] = v->reports[i];
      kvs[kept++] = kvs[i];
      continue;
    }
    v->ignored_keys++;
    json_object_del(v->failures, v->reports[i].worker);
    if (bad_key(rd, kvs[i]))
      LOG_WARN("coord", "ignoring %s: %s is not a member of generation %lld", (const char *)kvs[i]->key,
               v->reports[i].worker, (long long)v->gen);
  }
  free(ids);
  v->n_reports = kept;
}

/* Sorts one key of the job into the view. */
static void classify(reading *rd, const tagc_etcd_kv *kv, const char *plan_key,
                     const char *failures_gen, const tagc_etcd_kv **report_kvs,
                     int64_t *leader_rev) {
  const coord_keys *k = rd->k;
  coord_view *v = rd->v;
  const char *key = (const char *)kv->key, *rest;
  json_t **slot = !strcmp(key, plan_key)          ? &v->plan
                  : !strcmp(key, k->ckpt_key)     ? &v->ckpt
                  : !strcmp(key, k->progress_key) ? &v->progress
                  : !strcmp(key, k->done_key)     ? &v->done
                  : !strcmp(key, k->config_key)   ? &v->config
                                                  : NULL;
  if (slot)
    *slot = parse_value(rd, kv);
  else if (tagc_key_suffix(key, k->workers_prefix, &rest) == TAGC_OK)
    add_worker(rd, rest, kv);
  else if (tagc_key_suffix(key, failures_gen, &rest) == TAGC_OK)
    add_report(rd, rest, kv, report_kvs);
  else if (tagc_key_suffix(key, k->leaving_prefix, &rest) == TAGC_OK)
    add_leaving(rd, rest, kv);
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

/* Moves b's keys to the end of a's (b is freed). */
static tagc_status append_kvs(tagc_etcd_range_result *a, tagc_etcd_range_result *b) {
  if (b->n > 0) {
    tagc_etcd_kv *kvs = realloc(a->kvs, (a->n + b->n) * sizeof *kvs);
    if (!kvs) {
      tagc_etcd_range_result_free(b);
      return tagc_errorf(TAGC_ENOMEM, "coordinator: view");
    }
    memcpy(kvs + a->n, b->kvs, b->n * sizeof *kvs);
    a->kvs = kvs;
    a->n += b->n;
    a->count += b->count;
    free(b->kvs);
    b->kvs = NULL;
    b->n = 0;
  }
  tagc_etcd_range_result_free(b);
  return TAGC_OK;
}

/* Reads the job's keys the view uses into v->r, at one revision, leaving out gen/<g>/ but the
 * current plan: a generation's bootstrap keys (W (W - 1) Gloo addresses) and ready records
 * would make every read grow with W^2. Three ranges: the keys before "gen/" (ckpt, config,
 * coord/, done, failures/, gen), those after the gen/ subtree (leaving/, progress, workers/),
 * and gen/<g>/plan of the generation read. Sets v->gen. */
static tagc_status read_job(tagc_etcd *etcd, const coord_keys *k, coord_view *v) {
  char gen_sub[TAGC_KEY_MAX + 8], after_gen[TAGC_KEY_MAX + 8], job_end[TAGC_KEY_MAX];
  char plan[TAGC_KEY_MAX];
  size_t n = strlen(k->prefix);
  snprintf(gen_sub, sizeof gen_sub, "%sgen/", k->prefix);
  snprintf(after_gen, sizeof after_gen, "%sgen0", k->prefix); /* '0' follows '/' */
  snprintf(job_end, sizeof job_end, "%s", k->prefix);
  job_end[n - 1]++; /* the prefix ends in '/': the first key after every job key */
  tagc_etcd_range_opts before = {.range_end = gen_sub};
  TAGC_CHECK(tagc_etcd_range(etcd, k->prefix, &before, &v->r));
  tagc_etcd_range_result more;
  tagc_etcd_range_opts after = {.range_end = job_end, .revision = v->r.revision};
  TAGC_CHECK(tagc_etcd_range(etcd, after_gen, &after, &more));
  TAGC_CHECK(append_kvs(&v->r, &more));
  TAGC_CHECK(find_gen(k, v));
  TAGC_CHECK(tagc_key_gen_plan(k->job, v->gen, plan, sizeof plan));
  tagc_etcd_range_opts at = {.revision = v->r.revision};
  TAGC_CHECK(tagc_etcd_range(etcd, plan, &at, &more));
  return append_kvs(&v->r, &more);
}

tagc_status coord_view_read(tagc_etcd *etcd, const coord_keys *k, coord_seen *seen, coord_view *v) {
  memset(v, 0, sizeof *v);
  reading rd = {.k = k, .v = v, .seen = seen};
  tagc_status st = read_job(etcd, k, v);
  if (st != TAGC_OK) {
    coord_view_free(v);
    return st;
  }
  char plan_key[TAGC_KEY_MAX], failures_gen[TAGC_KEY_MAX];
  const tagc_etcd_kv **report_kvs = calloc(v->r.n + 1, sizeof *report_kvs);
  v->workers = calloc(v->r.n + 1, sizeof *v->workers);
  v->reports = calloc(v->r.n + 1, sizeof *v->reports);
  v->leaving = calloc(v->r.n + 1, sizeof *v->leaving);
  v->deaths = calloc(v->r.n + 1, sizeof *v->deaths);
  v->seen_at = calloc(v->r.n + 1, sizeof *v->seen_at);
  v->worker_info = json_object();
  v->failures = json_object();
  if (!report_kvs || !v->workers || !v->reports || !v->leaving || !v->deaths || !v->seen_at ||
      !v->worker_info || !v->failures) {
    st = tagc_errorf(TAGC_ENOMEM, "coordinator: view");
    goto fail;
  }
  TAGC_CHECK_GOTO(tagc_key_gen_plan(k->job, v->gen, plan_key, sizeof plan_key), st, fail);
  TAGC_CHECK_GOTO(tagc_key_failures_gen_prefix(k->job, v->gen, failures_gen, sizeof failures_gen),
                  st, fail);
  int64_t leader_rev = 0;
  for (size_t i = 0; i < v->r.n; i++)
    classify(&rd, &v->r.kvs[i], plan_key, failures_gen, report_kvs, &leader_rev);
  drop_strangers(&rd, report_kvs); /* the plan is known only now: it sorts after failures/ */
  remember_reports(seen, v, report_kvs);
  remember_registrations(seen, v);
  remember_warnings(&rd);
  free(report_kvs);
  return TAGC_OK;
fail:
  free(report_kvs);
  free_list(&rd.warned, &rd.n_warned);
  coord_view_free(v);
  return st;
}
