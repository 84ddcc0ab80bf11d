/* The records a worker writes and reads in its job for the training thread (cluster/member.h):
 * gen/<g>/ready/<rank>, failures/<g>/<id>, progress, ckpt/committed, done and chaos/<id>; and
 * leaving/<id>, which a supervisor writes too for a worker that died. */
#include "cluster/member_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"

/* Attempts of a compare-and-swap write before giving up. */
#define CAS_ATTEMPTS 8
/* Longest wait of the training thread's calls for information only (progress, chaos): they
 * are skipped rather than stall training while etcd does not answer. */
#define INFO_DEADLINE_S 0.5

tagc_status tagc_member_committed_step(tagc_member *m, int64_t *step) {
  *step = 0;
  char key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_ckpt_committed(m->job, key, sizeof key));
  char *text = NULL;
  size_t len = 0;
  tagc_status st = tagc_etcd_get(m->c, key, &text, &len, NULL);
  if (st == TAGC_ENOTFOUND) {
    tagc_clear_error();
    return TAGC_OK;
  }
  TAGC_CHECK(st);
  json_t *rec;
  st = tagc_json_parse(text, len, &rec);
  free(text);
  TAGC_CHECK(st);
  if (tagc_json_get_int(rec, "step", step) != TAGC_OK)
    st = tagc_errorf(TAGC_EPROTO, "%s has no \"step\"", key);
  json_decref(rec);
  return st;
}

tagc_status tagc_member_ready(tagc_member *m, int64_t gen, int rank) {
  char key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_gen_ready(m->job, gen, rank, key, sizeof key));
  /* etcd refuses a put under a lease it no longer has (ENOTFOUND): the keeper reports the loss
   * at its next renewal and the supervisor registers again; the key then goes under the new
   * lease. A lost lease is no reason for the worker to die here. */
  double until = tagc_now() + 2 * m->ttl_s + 1;
  for (int64_t tried = -1;;) {
    int64_t lease = atomic_load(&m->lease);
    if (lease != tried && lease != 0) {
      json_t *rec = json_pack("{s:s, s:f}", "id", m->id, "time", tagc_wall_time());
      tagc_status st = member_put_json(m, key, rec, lease);
      if (st != TAGC_ENOTFOUND || tagc_now() >= until)
        return st;
      tried = lease;
    } else if (tagc_now() >= until) {
      return tagc_errorf(TAGC_ENOTFOUND, "member %s: lease lost and not registered again in "
                         "%.0f s", m->id, 2 * m->ttl_s + 1);
    }
    tagc_sleep(0.05);
  }
}

/* The kinds a worker reports (every kind but the coordinator's own "lease"). */
static int reportable(const char *kind) {
  tagc_failure_kind k = tagc_failure_kind_parse(kind);
  return k != TAGC_FAIL_UNKNOWN && k != TAGC_FAIL_LEASE;
}

tagc_status tagc_member_report_failure(tagc_member *m, int64_t gen, const char *kind,
                                       int64_t step, int suspected_rank, const int *broken,
                                       int n_broken, const char *detail) {
  if (!reportable(kind))
    return tagc_errorf(TAGC_EINVAL,
                       "failure kind '%s' is not one of comm, timeout, oom, crash, hang, partition, "
                       "injected, straggler",
                       kind ? kind : "(null)");
  char key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_failure(m->job, gen, m->id, key, sizeof key));
  LOG_WARN("member", "%s reports %s in generation %" PRId64 " at step %" PRId64
           " (suspected rank %d): %s", m->id, kind, gen, step, suspected_rank, detail ? detail : "");
  json_t *rec = json_pack("{s:s, s:I, s:i, s:s, s:f}", "kind", kind, "step", (json_int_t)step,
                          "peer", suspected_rank < 0 ? -1 : suspected_rank, "detail",
                          detail ? detail : "", "time", tagc_wall_time());
  json_t *peers = n_broken > 0 ? json_array() : NULL;
  for (int i = 0; peers && i < n_broken; i++)
    json_array_append_new(peers, json_integer(broken[i]));
  if (rec && peers && json_object_set_new(rec, "peers", peers) != 0) {
    json_decref(rec);
    rec = NULL;
  }
  return member_put_json(m, key, rec, 0);
}

tagc_status tagc_member_progress(tagc_member *m, json_t *progress) {
  if (!json_is_object(progress))
    return tagc_errorf(TAGC_EINVAL, "member progress: not a JSON object");
  if (tagc_member_etcd_silent(m))
    return tagc_errorf(TAGC_EIO, "etcd is not answering the lease renewals: progress skipped");
  char key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_progress(m->job, key, sizeof key));
  json_t *copy = json_copy(progress);
  if (copy && (json_object_set_new(copy, "worker", json_string(m->id)) != 0 ||
               json_object_set_new(copy, "time", json_real(tagc_wall_time())) != 0)) {
    json_decref(copy);
    copy = NULL;
  }
  char *text = copy ? tagc_json_dump(copy) : NULL;
  json_decref(copy);
  if (!text)
    return tagc_errorf(TAGC_ENOMEM, "JSON value of %s", key);
  tagc_status st = tagc_etcd_put_within(m->c, key, text, strlen(text), 0, INFO_DEADLINE_S);
  free(text);
  return st;
}

/* Whether a ckpt/committed record (JSON text) is newer than (gen, step). */
static int record_newer(const char *text, size_t len, int64_t gen, int64_t step) {
  json_t *old;
  if (tagc_json_parse(text, len, &old) != TAGC_OK)
    return 0; /* a malformed record is replaced */
  int64_t old_gen = 0, old_step = 0;
  int newer = tagc_json_get_int(old, "gen", &old_gen) == TAGC_OK &&
              tagc_json_get_int(old, "step", &old_step) == TAGC_OK &&
              (old_gen > gen || (old_gen == gen && old_step > step));
  json_decref(old);
  return newer;
}

tagc_status tagc_member_commit_ckpt(tagc_member *m, int64_t gen, int64_t step, const char *path,
                                    int world, uint32_t manifest_crc) {
  if (!path || gen < 0 || step < 0 || world < 1)
    return tagc_errorf(TAGC_EINVAL, "commit ckpt: NULL path or bad gen, step or world");
  char key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_ckpt_committed(m->job, key, sizeof key));
  json_t *rec = json_pack("{s:I, s:I, s:s, s:i, s:I, s:f}", "gen", (json_int_t)gen, "step",
                          (json_int_t)step, "path", path, "world", world, "manifest_crc",
                          (json_int_t)manifest_crc, "time", tagc_wall_time());
  char *text = NULL;
  tagc_status st = rec ? member_dump(rec, &text) : tagc_errorf(TAGC_ENOMEM, "ckpt record");
  json_decref(rec);
  TAGC_CHECK(st);
  for (int attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
    tagc_etcd_range_result r;
    TAGC_CHECK_GOTO(tagc_etcd_range(m->c, key, NULL, &r), st, out);
    int64_t mod = r.n ? r.kvs[0].mod_revision : 0;
    int newer = r.n && record_newer((char *)r.kvs[0].value, r.kvs[0].value_len, gen, step);
    tagc_etcd_range_result_free(&r);
    if (newer) {
      st = tagc_errorf(TAGC_ECONFLICT, "ckpt/committed already holds a newer record than gen %" PRId64
                       " step %" PRId64, gen, step);
      goto out;
    }
    tagc_etcd_compare same = {.key = key, .target = TAGC_ETCD_MOD, .result = TAGC_ETCD_EQUAL,
                              .number = mod};
    tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = key, .value = text, .value_len = strlen(text)};
    tagc_etcd_txn_result t;
    TAGC_CHECK_GOTO(tagc_etcd_txn(m->c, &same, 1, &put, 1, NULL, 0, &t), st, out);
    int ok = t.succeeded;
    tagc_etcd_txn_result_free(&t);
    if (ok) {
      LOG_INFO("member", "checkpoint of step %" PRId64 " (gen %" PRId64 ") committed: %s", step,
               gen, path);
      goto out;
    }
  }
  st = tagc_errorf(TAGC_ECONFLICT, "ckpt/committed kept changing; gave up after %d attempts",
                   CAS_ATTEMPTS);
out:
  free(text);
  return st;
}

tagc_status tagc_member_finish(tagc_member *m, int64_t gen, int64_t step) {
  char gen_text[32];
  snprintf(gen_text, sizeof gen_text, "%" PRId64, gen);
  json_t *rec = json_pack("{s:s, s:I, s:I, s:s, s:f}", "status", "finished", "gen", (json_int_t)gen,
                          "step", (json_int_t)step, "by", m->id, "time", tagc_wall_time());
  char *text = NULL;
  tagc_status st = rec ? member_dump(rec, &text) : tagc_errorf(TAGC_ENOMEM, "done record");
  json_decref(rec);
  TAGC_CHECK(st);
  tagc_etcd_compare cmp[2] = {
      {.key = m->gen_key, .target = TAGC_ETCD_VALUE, .result = TAGC_ETCD_EQUAL, .value = gen_text,
       .value_len = strlen(gen_text)},
      {.key = m->done_key, .target = TAGC_ETCD_CREATE, .result = TAGC_ETCD_EQUAL}};
  tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = m->done_key, .value = text,
                      .value_len = strlen(text)};
  tagc_etcd_op get = {.type = TAGC_ETCD_OP_RANGE, .key = m->done_key};
  tagc_etcd_txn_result t;
  st = tagc_etcd_txn(m->c, cmp, 2, &put, 1, &get, 1, &t);
  free(text);
  TAGC_CHECK(st);
  int ok = t.succeeded || (t.n_responses == 1 && t.responses[0].range.n == 1);
  tagc_etcd_txn_result_free(&t);
  if (!ok)
    return tagc_errorf(TAGC_ECONFLICT, "finish: generation %" PRId64 " is no longer current", gen);
  LOG_INFO("member", "%s: job finished at step %" PRId64 " (generation %" PRId64 ")", m->id, step,
           gen);
  member_see_done(m);
  return TAGC_OK;
}

tagc_status tagc_member_chaos(tagc_member *m, char **spec) {
  *spec = NULL;
  if (tagc_member_etcd_silent(m))
    return tagc_errorf(TAGC_EIO, "etcd is not answering the lease renewals: chaos not read");
  char key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_chaos(m->job, m->id, key, sizeof key));
  size_t len = 0;
  tagc_status st = tagc_etcd_get_within(m->c, key, INFO_DEADLINE_S, spec, &len);
  if (st == TAGC_ENOTFOUND) {
    tagc_clear_error();
    return TAGC_OK;
  }
  if (st == TAGC_OK && len > TAGC_CHAOS_SPEC_MAX)
    return tagc_errorf(TAGC_EINVAL, "%s holds %zu bytes, more than the %d a fault spec may "
                       "have", key, len, TAGC_CHAOS_SPEC_MAX);
  return st;
}

/* The kv of prefix + id in r, or NULL. */
static const tagc_etcd_kv *kv_of(const tagc_etcd_range_result *r, const char *prefix,
                                 const char *id) {
  for (size_t i = 0; i < r->n; i++) {
    const char *suffix;
    if (tagc_key_suffix((const char *)r->kvs[i].key, prefix, &suffix) == TAGC_OK &&
        strcmp(suffix, id) == 0)
      return &r->kvs[i];
  }
  return NULL;
}

/* Whether id left: its leaving/ record is of the process that holds workers/<id> (or held
 * it, when the key is gone), not of an earlier process with the same id. */
static int has_left(const tagc_etcd_range_result *leaving, const char *lprefix,
                    const tagc_etcd_range_result *workers, const char *wprefix, const char *id) {
  const tagc_etcd_kv *l = kv_of(leaving, lprefix, id), *w = kv_of(workers, wprefix, id);
  if (!l)
    return 0;
  json_t *rec = json_loadb((const char *)l->value, l->value_len, 0, NULL);
  int64_t reg = json_integer_value(json_object_get(rec, "registration"));
  json_decref(rec);
  return !w || w->create_revision == reg;
}

tagc_status tagc_member_all_leaving(tagc_member *m, char *const *ids, int n, int *all) {
  *all = 0;
  char lprefix[TAGC_KEY_MAX], wprefix[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_leaving_prefix(m->job, lprefix, sizeof lprefix));
  TAGC_CHECK(tagc_key_workers_prefix(m->job, wprefix, sizeof wprefix));
  tagc_etcd_range_opts prefix = {.prefix = 1};
  tagc_etcd_range_result leaving, workers;
  TAGC_CHECK(tagc_etcd_range(m->c, lprefix, &prefix, &leaving));
  tagc_status st = tagc_etcd_range(m->c, wprefix, &prefix, &workers);
  if (st != TAGC_OK) {
    tagc_etcd_range_result_free(&leaving);
    return st;
  }
  *all = n > 0;
  for (int i = 0; i < n && *all; i++)
    *all = has_left(&leaving, lprefix, &workers, wprefix, ids[i]);
  tagc_etcd_range_result_free(&leaving);
  tagc_etcd_range_result_free(&workers);
  return TAGC_OK;
}

tagc_status tagc_member_put_leaving(tagc_etcd *c, const char *job, const char *id,
                                    const tagc_leave_record *rec) {
  char key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_leaving(job, id, key, sizeof key));
  json_t *obj = json_pack("{s:I, s:s, s:f}", "registration", (json_int_t)rec->registration,
                          "reason", rec->reason ? rec->reason : "", "time", tagc_wall_time());
  if (obj && rec->died &&
      (json_object_set_new(obj, "died", json_true()) != 0 ||
       json_object_set_new(obj, "uptime", json_real(rec->uptime_s)) != 0)) {
    json_decref(obj);
    obj = NULL;
  }
  char *text = obj ? tagc_json_dump(obj) : NULL;
  json_decref(obj);
  if (!text)
    return tagc_errorf(TAGC_ENOMEM, "JSON value of %s", key);
  tagc_status st = tagc_etcd_put(c, key, text, strlen(text), 0, NULL);
  free(text);
  return st;
}

tagc_status tagc_member_registration_of(tagc_etcd *c, const char *job, const char *id,
                                        long pid, int64_t *registration) {
  *registration = 0;
  char key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_worker(job, id, key, sizeof key));
  tagc_etcd_range_result r;
  TAGC_CHECK(tagc_etcd_range(c, key, NULL, &r));
  json_t *info = r.n == 1 ? json_loadb((const char *)r.kvs[0].value, r.kvs[0].value_len, 0, NULL)
                          : NULL;
  int ours = info && json_integer_value(json_object_get(info, "pid")) == (json_int_t)pid;
  if (ours)
    *registration = r.kvs[0].create_revision;
  json_decref(info);
  tagc_etcd_range_result_free(&r);
  return ours ? TAGC_OK
              : tagc_errorf(TAGC_ENOTFOUND, "%s holds no registration of pid %ld", key, pid);
}
