/* Worker-side membership (cluster/member.h): registration, watches, plans, leaving. The
 * records a member writes for the training thread are in member_records.c. */
#include "cluster/member_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/etcd_store.h"

/* Pause between two reads while another lease still holds workers/<id>. */
#define HELD_POLL_S 0.25

/* ---- plans ---- */

void tagc_plan_free(tagc_plan *p) {
  if (!p)
    return;
  for (int i = 0; p->members && i < p->world; i++)
    free(p->members[i]);
  free(p->members);
  free(p->resume_path);
  free(p->reason);
  free(p->failures_total);
  memset(p, 0, sizeof *p);
}

/* Fills members/world/rank from the JSON array. */
static tagc_status parse_members(const json_t *arr, const char *my_id, tagc_plan *p) {
  if (!json_is_array(arr) || json_array_size(arr) == 0)
    return tagc_errorf(TAGC_EPROTO, "plan: \"members\" is not a non-empty array");
  size_t n = json_array_size(arr);
  p->members = calloc(n, sizeof *p->members);
  if (!p->members)
    return tagc_errorf(TAGC_ENOMEM, "plan members");
  p->world = (int)n;
  for (size_t i = 0; i < n; i++) {
    const char *id = json_string_value(json_array_get(arr, i));
    if (!id)
      return tagc_errorf(TAGC_EPROTO, "plan: member %zu is not a string", i);
    p->members[i] = strdup(id);
    if (!p->members[i])
      return tagc_errorf(TAGC_ENOMEM, "plan members");
    if (strcmp(id, my_id) == 0)
      p->rank = (int)i;
  }
  return TAGC_OK;
}

/* A required integer field; a missing one is a malformed plan. */
static tagc_status need_int(const json_t *obj, const char *key, int64_t *out) {
  if (tagc_json_get_int(obj, key, out) != TAGC_OK)
    return tagc_errorf(TAGC_EPROTO, "plan: \"%s\" is missing or not an integer", key);
  return TAGC_OK;
}

static tagc_status parse_plan(const json_t *root, const char *my_id, tagc_plan *p) {
  int64_t world = 0;
  TAGC_CHECK(need_int(root, "gen", &p->gen));
  TAGC_CHECK(need_int(root, "world", &world));
  TAGC_CHECK(parse_members(json_object_get(root, "members"), my_id, p));
  if (world != p->world)
    return tagc_errorf(TAGC_EPROTO, "plan: world %" PRId64 " but %d members", world, p->world);
  const json_t *resume = json_object_get(root, "resume");
  if (json_is_object(resume)) {
    TAGC_CHECK(need_int(resume, "step", &p->resume_step));
    json_int_t crc = json_integer_value(json_object_get(resume, "manifest_crc"));
    if (crc < 0 || crc > UINT32_MAX)
      return tagc_errorf(TAGC_EPROTO, "plan: manifest CRC %lld", (long long)crc);
    p->resume_manifest_crc = (uint32_t)crc;
    const char *path = json_string_value(json_object_get(resume, "path"));
    if (path && !(p->resume_path = strdup(path)))
      return tagc_errorf(TAGC_ENOMEM, "plan resume path");
  }
  json_int_t mb = json_integer_value(json_object_get(json_object_get(root, "micro_batch"), my_id));
  if (mb < 0 || mb > INT32_MAX)
    return tagc_errorf(TAGC_EPROTO, "plan: micro-batch %lld of %s", (long long)mb, my_id);
  p->micro_batch = (int)mb;
  const json_t *exclusion = json_object_get(json_object_get(root, "excluded"), my_id);
  p->excluded = exclusion != NULL;
  p->excluded_registration = json_integer_value(json_object_get(exclusion, "registration"));
  p->registration = json_integer_value(json_object_get(json_object_get(root, "registrations"), my_id));
  const char *reason = json_string_value(json_object_get(root, "reason"));
  if (!(p->reason = strdup(reason ? reason : "")))
    return tagc_errorf(TAGC_ENOMEM, "plan reason");
  const json_t *totals = json_object_get(root, "failures_total");
  p->failures_total = json_is_object(totals) ? json_dumps(totals, JSON_COMPACT | JSON_SORT_KEYS)
                                             : strdup("{}");
  if (!p->failures_total)
    return tagc_errorf(TAGC_ENOMEM, "plan failures_total");
  return TAGC_OK;
}

tagc_status tagc_plan_parse(const char *text, size_t len, const char *my_id, tagc_plan *out) {
  memset(out, 0, sizeof *out);
  out->rank = -1;
  json_t *root;
  TAGC_CHECK(tagc_json_parse(text, len, &root));
  tagc_status st = json_is_object(root) ? parse_plan(root, my_id, out)
                                        : tagc_errorf(TAGC_EPROTO, "plan is not a JSON object");
  json_decref(root);
  if (st != TAGC_OK)
    tagc_plan_free(out);
  return st;
}

/* ---- small helpers ---- */

tagc_status member_dump(const json_t *obj, char **out) {
  *out = tagc_json_dump(obj);
  return *out ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "JSON text");
}

tagc_status member_put_json(tagc_member *m, const char *key, json_t *obj, int64_t lease) {
  if (!obj)
    return tagc_errorf(TAGC_ENOMEM, "JSON value of %s", key);
  char *text;
  tagc_status st = member_dump(obj, &text);
  json_decref(obj);
  TAGC_CHECK(st);
  st = tagc_etcd_put(m->c, key, text, strlen(text), lease, NULL);
  free(text);
  return st;
}

/* Decimal generation number of a `gen` value; -1 when malformed. */
static int64_t parse_gen(const unsigned char *value, size_t len) {
  char buf[32];
  if (len == 0 || len >= sizeof buf)
    return -1;
  memcpy(buf, value, len);
  buf[len] = '\0';
  char *end;
  errno = 0;
  long long g = strtoll(buf, &end, 10);
  return errno || *end || g < 0 ? -1 : (int64_t)g;
}

static void notify(tagc_member *m, int64_t gen) {
  pthread_mutex_lock(&m->lock);
  void (*fn)(void *, int64_t) = m->fn;
  void *arg = m->fn_arg;
  pthread_mutex_unlock(&m->lock);
  if (fn)
    fn(arg, gen);
}

static void see_gen(tagc_member *m, int64_t g) {
  pthread_mutex_lock(&m->lock);
  int newer = g > m->gen;
  if (newer) {
    m->gen = g;
    pthread_cond_broadcast(&m->changed);
  }
  pthread_mutex_unlock(&m->lock);
  if (newer) {
    LOG_INFO("member", "%s: generation %" PRId64, m->id, g);
    notify(m, g);
  }
}

void member_see_done(tagc_member *m) {
  pthread_mutex_lock(&m->lock);
  m->done = 1;
  pthread_cond_broadcast(&m->changed);
  pthread_mutex_unlock(&m->lock);
}

/* ---- watches of `gen` and `done` ---- */

static int on_gen(void *arg, const tagc_etcd_watch_msg *msg) {
  tagc_member *m = arg;
  if (msg->kind == TAGC_ETCD_WATCH_RESYNC && msg->snapshot->n == 1)
    see_gen(m, parse_gen(msg->snapshot->kvs[0].value, msg->snapshot->kvs[0].value_len));
  for (size_t i = 0; i < msg->n_events; i++) {
    if (msg->events[i].type == TAGC_ETCD_PUT)
      see_gen(m, parse_gen(msg->events[i].kv.value, msg->events[i].kv.value_len));
  }
  return 0;
}

static int on_done(void *arg, const tagc_etcd_watch_msg *msg) {
  int put = msg->kind == TAGC_ETCD_WATCH_RESYNC && msg->snapshot->n == 1;
  for (size_t i = 0; i < msg->n_events; i++)
    put |= msg->events[i].type == TAGC_ETCD_PUT;
  if (put)
    member_see_done(arg);
  return 0;
}

/* Reads key once and watches it from just after that read, so no change is missed. */
static tagc_status read_and_watch(tagc_member *m, const char *key, tagc_etcd_watch_fn fn,
                                  tagc_etcd_watch **out) {
  tagc_etcd_range_result r;
  TAGC_CHECK(tagc_etcd_range(m->c, key, NULL, &r));
  tagc_etcd_watch_msg msg = {.kind = TAGC_ETCD_WATCH_RESYNC, .snapshot = &r, .cancel_reason = ""};
  fn(m, &msg);
  tagc_etcd_watch_opts o = {.start_revision = r.revision + 1};
  tagc_etcd_range_result_free(&r);
  return tagc_etcd_watch_start(m->c, key, &o, fn, m, out);
}

/* ---- registration ---- */

static void on_lease_lost(void *arg, int64_t lease, tagc_status why) {
  tagc_member *m = arg;
  LOG_WARN("member", "%s: lease %" PRIx64 " lost (%s); registering again", m->id, (uint64_t)lease,
           tagc_strerror(why));
  atomic_store(&m->lease_lost, 1);
  atomic_fetch_add(&m->losses, 1);
  pthread_mutex_lock(&m->lock);
  m->lost_pending = 1;
  int64_t gen = m->gen;
  pthread_cond_broadcast(&m->changed);
  pthread_mutex_unlock(&m->lock);
  notify(m, gen);
}

/* The value of workers/<id>: the registration text, plus "previous" (the registrations this
 * one continues) after a lost lease. New malloc'd text in *out. Caller holds reg_lock. */
static tagc_status worker_value(const tagc_member *m, char **out) {
  if (m->n_previous == 0) {
    *out = strdup(m->info);
    return *out ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "member: worker info");
  }
  json_t *v;
  TAGC_CHECK(tagc_json_parse(m->info, strlen(m->info), &v));
  json_t *prev = json_array();
  for (int i = 0; prev && i < m->n_previous; i++)
    json_array_append_new(prev, json_integer(m->previous[i]));
  tagc_status st = prev && json_object_set_new(v, "previous", prev) == 0
                       ? member_dump(v, out)
                       : tagc_errorf(TAGC_ENOMEM, "member: worker info");
  json_decref(v);
  return st;
}

/* Creates workers/<id> under lease unless another lease holds it; waits up to until
 * (monotonic) for such a holder to go (a restarted worker's old lease expiring). */
static tagc_status put_if_absent(tagc_member *m, int64_t lease, const char *value, double until) {
  tagc_etcd_compare absent = {.key = m->worker_key, .target = TAGC_ETCD_CREATE,
                              .result = TAGC_ETCD_EQUAL};
  tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = m->worker_key, .value = value,
                      .value_len = strlen(value), .lease = lease};
  tagc_etcd_op get = {.type = TAGC_ETCD_OP_RANGE, .key = m->worker_key};
  for (;;) {
    tagc_etcd_txn_result t;
    TAGC_CHECK(tagc_etcd_txn(m->c, &absent, 1, &put, 1, &get, 1, &t));
    int ok = t.succeeded;
    int64_t holder = !ok && t.n_responses == 1 && t.responses[0].range.n == 1
                         ? t.responses[0].range.kvs[0].lease
                         : 0;
    int64_t created = t.revision; /* the txn created the key: its create revision */
    tagc_etcd_txn_result_free(&t);
    if (ok) {
      atomic_store(&m->registration, created);
      return TAGC_OK;
    }
    if (tagc_now() >= until)
      return tagc_errorf(TAGC_ECONFLICT,
                         "worker id %s is in use by another live worker (lease %" PRIx64 ")",
                         m->id, (uint64_t)holder);
    tagc_sleep(HELD_POLL_S);
  }
}

/* (Re-)registers: drops the old lease and keeper, grants a new lease, writes workers/<id>
 * and starts a keeper. Caller holds reg_lock. */
static tagc_status register_worker(tagc_member *m) {
  tagc_etcd_keeper_stop(m->keeper);
  m->keeper = NULL;
  int64_t old = atomic_load(&m->lease);
  if (old) {
    tagc_status st = tagc_etcd_lease_revoke(m->c, old);
    if (st != TAGC_OK && st != TAGC_ENOTFOUND)
      return st;
    atomic_store(&m->lease, 0);
  }
  int64_t lease, granted;
  TAGC_CHECK(tagc_etcd_lease_grant(m->c, (int64_t)(m->ttl_s + 0.5), &lease, &granted));
  /* The keeper renews the new lease from now on: the wait below for a previous process's key
   * can last longer than the lease lives unrenewed (a restarted worker's predecessor holds the
   * key up to its TTL; the keeper used to start after the wait, and a wait of over 2/3 of the
   * TTL let the new lease expire before its first renewal). Patient: an unreachable etcd is
   * no reason to give the lease up (docs/operations.md). */
  tagc_status st = tagc_etcd_keeper_start_patient(m->c, lease, granted, on_lease_lost, m, &m->keeper);
  /* A previous process with our id holds the key for at most its TTL (twice on an etcd
   * leader change, orchestration-anchors §4). */
  char *value = NULL;
  if (st == TAGC_OK)
    st = worker_value(m, &value);
  if (st == TAGC_OK)
    st = put_if_absent(m, lease, value, tagc_now() + 2 * m->ttl_s + 1);
  free(value);
  if (st != TAGC_OK) {
    tagc_etcd_keeper_stop(m->keeper);
    m->keeper = NULL;
    tagc_etcd_lease_revoke(m->c, lease);
    return st;
  }
  atomic_store(&m->lease, lease);
  LOG_INFO("member", "%s registered under lease %" PRIx64 " (TTL %" PRId64 " s)", m->id,
           (uint64_t)lease, granted);
  return TAGC_OK;
}

/* Waits up to s seconds for a signal of m->changed; returns m->stopping. Caller holds m->lock. */
static int wait_locked(tagc_member *m, double s) {
  struct timespec ts = tagc_deadline_in(s);
  pthread_cond_timedwait(&m->changed, &m->lock, &ts);
  return m->stopping;
}

/* Adds the current registration to the ones a re-registration continues (once; the oldest
 * is dropped when full). Caller holds reg_lock. */
static void note_previous(tagc_member *m) {
  int64_t reg = atomic_load(&m->registration);
  if (reg <= 0 || (m->n_previous && m->previous[m->n_previous - 1] == reg))
    return;
  if (m->n_previous == MAX_PREVIOUS) {
    memmove(m->previous, m->previous + 1, (MAX_PREVIOUS - 1) * sizeof *m->previous);
    m->n_previous--;
  }
  m->previous[m->n_previous++] = reg;
}

/* Whether reg is this member's registration or one that it continues after a lost lease
 * (the leader keeps an exclusion across such a re-registration, so this worker must ask back
 * in, as after any exclusion). */
static int continues_registration(tagc_member *m, int64_t reg) {
  if (reg == atomic_load(&m->registration))
    return 1;
  pthread_mutex_lock(&m->reg_lock);
  int found = 0;
  for (int i = 0; i < m->n_previous && !found; i++)
    found = m->previous[i] == reg;
  pthread_mutex_unlock(&m->reg_lock);
  return found;
}

/* The supervisor: after a lost lease, registers again (retrying every TTL/4) until it works.
 * The new registration names the lost ones ("previous"): the leader keeps this worker in its
 * generation rather than seeing a new member (docs/etcd-schema.md, lease-loss grace). */
static void *supervise(void *arg) {
  tagc_member *m = arg;
  pthread_mutex_lock(&m->lock);
  while (!m->stopping) {
    if (!m->lost_pending || m->leaving) { /* a leaving worker does not come back */
      wait_locked(m, 60); /* on_lease_lost and leave signal `changed` */
      continue;
    }
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_lock(&m->reg_lock);
    note_previous(m);
    tagc_status st = register_worker(m);
    pthread_mutex_unlock(&m->reg_lock);
    int64_t gen = 0; /* the lost lease is a reason to check: has the job moved on? */
    if (st == TAGC_OK && tagc_member_read_gen(m, &gen) != TAGC_OK)
      LOG_WARN("member", "%s: reading gen after registering again: %s", m->id, tagc_last_error());
    pthread_mutex_lock(&m->lock);
    if (st == TAGC_OK) {
      m->lost_pending = 0;
      atomic_store(&m->lease_lost, 0);
    } else {
      LOG_WARN("member", "%s: registering again failed (%s); retrying", m->id, tagc_last_error());
      wait_locked(m, m->ttl_s / 4);
    }
  }
  pthread_mutex_unlock(&m->lock);
  return NULL;
}

/* info + "id" and "registered_at", as text in *out. */
static tagc_status registration_text(const char *id, json_t *info, char **out) {
  if (!json_is_object(info))
    return tagc_errorf(TAGC_EINVAL, "member: worker info is not a JSON object");
  json_t *copy = json_deep_copy(info);
  if (!copy || json_object_set_new(copy, "id", json_string(id)) != 0 ||
      json_object_set_new(copy, "registered_at", json_real(tagc_wall_time())) != 0) {
    json_decref(copy);
    return tagc_errorf(TAGC_ENOMEM, "member: worker info");
  }
  tagc_status st = member_dump(copy, out);
  json_decref(copy);
  return st;
}

static tagc_status init_keys(tagc_member *m, const char *job, const char *id) {
  TAGC_CHECK(tagc_key_check_id(id, "worker id"));
  TAGC_CHECK(tagc_key_worker(job, id, m->worker_key, sizeof m->worker_key));
  TAGC_CHECK(tagc_key_gen(job, m->gen_key, sizeof m->gen_key));
  TAGC_CHECK(tagc_key_done(job, m->done_key, sizeof m->done_key));
  snprintf(m->job, sizeof m->job, "%s", job);
  snprintf(m->id, sizeof m->id, "%s", id);
  return TAGC_OK;
}

tagc_status tagc_member_join(tagc_etcd *etcd, const char *job, const char *worker_id,
                             json_t *info, double ttl_s, tagc_member **out) {
  *out = NULL;
  if (!etcd || !job || !worker_id || !(ttl_s >= 1 && ttl_s <= 3600))
    return tagc_errorf(TAGC_EINVAL, "member join: NULL client, job or id, or TTL %.3g outside [1, 3600] s",
                       ttl_s);
  tagc_member *m = calloc(1, sizeof *m);
  if (!m)
    return tagc_errorf(TAGC_ENOMEM, "member");
  m->c = etcd;
  m->ttl_s = ttl_s;
  pthread_mutex_init(&m->reg_lock, NULL);
  pthread_mutex_init(&m->lock, NULL);
  tagc_cond_init_monotonic(&m->changed);
  tagc_status st;
  TAGC_CHECK_GOTO(init_keys(m, job, worker_id), st, fail);
  TAGC_CHECK_GOTO(registration_text(worker_id, info, &m->info), st, fail);
  TAGC_CHECK_GOTO(register_worker(m), st, fail);
  TAGC_CHECK_GOTO(read_and_watch(m, m->gen_key, on_gen, &m->gen_watch), st, fail);
  TAGC_CHECK_GOTO(read_and_watch(m, m->done_key, on_done, &m->done_watch), st, fail);
  if (pthread_create(&m->supervisor, NULL, supervise, m) != 0) {
    st = tagc_errorf(TAGC_ENOMEM, "member: supervisor thread");
    goto fail;
  }
  m->supervisor_started = 1;
  *out = m;
  return TAGC_OK;
fail:
  tagc_member_leave(m);
  return st;
}

void tagc_member_leave(tagc_member *m) {
  if (!m)
    return;
  pthread_mutex_lock(&m->lock);
  m->stopping = 1;
  pthread_cond_broadcast(&m->changed);
  pthread_mutex_unlock(&m->lock);
  if (m->supervisor_started)
    pthread_join(m->supervisor, NULL);
  tagc_etcd_watch_stop(m->gen_watch);
  tagc_etcd_watch_stop(m->done_watch);
  tagc_etcd_keeper_stop(m->keeper);
  int64_t lease = atomic_load(&m->lease);
  if (lease && tagc_etcd_lease_revoke(m->c, lease) != TAGC_OK)
    LOG_WARN("member", "%s: revoking lease %" PRIx64 ": %s", m->id, (uint64_t)lease,
             tagc_last_error());
  pthread_cond_destroy(&m->changed);
  pthread_mutex_destroy(&m->lock);
  pthread_mutex_destroy(&m->reg_lock);
  free(m->info);
  free(m);
}

tagc_status tagc_member_rejoin(tagc_member *m, json_t *info) {
  char *text = NULL;
  if (info)
    TAGC_CHECK(registration_text(m->id, info, &text));
  pthread_mutex_lock(&m->reg_lock);
  if (text) {
    free(m->info);
    m->info = text;
  }
  m->n_previous = 0; /* asking back in: a new member, continuing nothing */
  tagc_status st = register_worker(m);
  pthread_mutex_unlock(&m->reg_lock);
  return st;
}

/* ---- queries ---- */

void tagc_member_on_change(tagc_member *m, void (*fn)(void *arg, int64_t gen), void *arg) {
  pthread_mutex_lock(&m->lock);
  m->fn = fn;
  m->fn_arg = arg;
  pthread_mutex_unlock(&m->lock);
}

int64_t tagc_member_gen(const tagc_member *m) {
  tagc_member *mm = (tagc_member *)m; /* the lock is not part of the logical state */
  pthread_mutex_lock(&mm->lock);
  int64_t g = mm->withdrawn ? INT64_MAX : mm->gen;
  pthread_mutex_unlock(&mm->lock);
  return g;
}

int tagc_member_lease_lost(const tagc_member *m) { return atomic_load(&m->lease_lost); }

int tagc_member_lease_losses(const tagc_member *m) { return atomic_load(&m->losses); }

tagc_status tagc_member_wait_plan(tagc_member *m, int64_t after_gen, double timeout_s,
                                  tagc_plan *out) {
  memset(out, 0, sizeof *out);
  double until = tagc_now() + timeout_s;
  pthread_mutex_lock(&m->lock);
  while (!m->done && !m->leaving && m->gen <= after_gen && !m->stopping && tagc_now() < until)
    wait_locked(m, until - tagc_now());
  int64_t gen = m->gen;
  int done = m->done, leaving = m->leaving;
  pthread_mutex_unlock(&m->lock);
  if (done) {
    out->job_done = 1;
    return tagc_errorf(TAGC_ENOTFOUND, "done");
  }
  if (leaving)
    return tagc_errorf(TAGC_EABORTED, "member %s is leaving the job", m->id);
  if (gen <= after_gen)
    return tagc_errorf(TAGC_ETIMEDOUT, "member %s: no generation after %" PRId64 " within %.1f s",
                       m->id, after_gen, timeout_s);
  char key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_gen_plan(m->job, gen, key, sizeof key));
  char *text;
  size_t len;
  TAGC_CHECK(tagc_etcd_get(m->c, key, &text, &len, NULL));
  tagc_status st = tagc_plan_parse(text, len, m->id, out);
  free(text);
  if (st == TAGC_OK && out->gen != gen)
    st = tagc_errorf(TAGC_EPROTO, "plan at %s says generation %" PRId64, key, out->gen);
  if (st != TAGC_OK) {
    tagc_plan_free(out);
    return st;
  }
  /* A restarted worker with the id of a member it replaces: that generation is not its own
     (its peers wait for the process that died); the leader plans one with the new registration. */
  int64_t mine = atomic_load(&m->registration);
  if (out->rank >= 0 && out->registration && mine &&
      !continues_registration(m, out->registration)) {
    LOG_INFO("member", "generation %" PRId64 " lists %s under registration %" PRId64 ", not ours (%"
             PRId64 "): waiting for the next", gen, m->id, out->registration, mine);
    out->rank = -1;
  }
  if (out->excluded && out->excluded_registration && mine &&
      !continues_registration(m, out->excluded_registration))
    out->excluded = 0; /* the exclusion was of a predecessor with our id: nothing to rejoin */
  return TAGC_OK;
}

tagc_status tagc_member_read_gen(tagc_member *m, int64_t *gen) {
  *gen = 0;
  tagc_etcd_range_result r;
  TAGC_CHECK(tagc_etcd_range(m->c, m->gen_key, NULL, &r));
  int64_t g = r.n == 1 ? parse_gen(r.kvs[0].value, r.kvs[0].value_len) : 0;
  tagc_etcd_range_result_free(&r);
  if (g < 0)
    return tagc_errorf(TAGC_EPROTO, "%s is not a generation number", m->gen_key);
  see_gen(m, g);
  *gen = g;
  return TAGC_OK;
}

tagc_status tagc_member_announce_leave(tagc_member *m, const char *reason) {
  pthread_mutex_lock(&m->lock);
  m->leaving = 1;
  pthread_cond_broadcast(&m->changed);
  pthread_mutex_unlock(&m->lock);
  LOG_INFO("member", "%s leaves the job (%s)", m->id, reason ? reason : "");
  tagc_leave_record rec = {.registration = atomic_load(&m->registration), .reason = reason};
  return tagc_member_put_leaving(m->c, m->job, m->id, &rec);
}

void tagc_member_withdraw(tagc_member *m) {
  pthread_mutex_lock(&m->lock);
  m->withdrawn = 1;
  pthread_cond_broadcast(&m->changed);
  pthread_mutex_unlock(&m->lock);
}

tagc_status tagc_member_store(tagc_member *m, int64_t gen, tagc_store **out) {
  return tagc_etcd_store_new(m->c, m->job, gen, out);
}

int tagc_member_etcd_silent(tagc_member *m) {
  if (pthread_mutex_trylock(&m->reg_lock) != 0)
    return 1; /* (re-)registering */
  int silent = !m->keeper || tagc_etcd_keeper_silence_s(m->keeper) > m->ttl_s / 2;
  pthread_mutex_unlock(&m->reg_lock);
  return silent;
}
