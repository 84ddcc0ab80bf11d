/* etcd key-value requests: ranges, gets, puts, deletes, compaction and transactions. */
#include "cluster/etcd.h"

#include <string.h>

#include "common/json.h"
#include "cluster/etcd_decode.h"
#include "cluster/etcd_internal.h"

/* Runs a call whose request object is new (stolen here). */
static tagc_status call_new(tagc_etcd *c, const char *path, json_t *request, int idempotent,
                            json_t **reply) {
  if (!request)
    return tagc_errorf(TAGC_ENOMEM, "etcd request for %s", path);
  tagc_status st = etcd_call(c, path, request, idempotent, etcd_deadline(c), reply);
  json_decref(request);
  return st;
}

static tagc_status add_i64(json_t *obj, const char *name, int64_t v) {
  if (v == 0)
    return TAGC_OK;
  return json_object_set_new(obj, name, etcd_json_i64(v)) == 0
             ? TAGC_OK
             : tagc_errorf(TAGC_ENOMEM, "etcd request");
}

static tagc_status add_flag(json_t *obj, const char *name, int v) {
  if (!v)
    return TAGC_OK;
  return json_object_set_new(obj, name, json_true()) == 0 ? TAGC_OK
                                                           : tagc_errorf(TAGC_ENOMEM, "etcd request");
}

static tagc_status build_range(const char *key, const tagc_etcd_range_opts *o, json_t **out) {
  static const tagc_etcd_range_opts none;
  if (!o)
    o = &none;
  json_t *req = json_object();
  if (!req)
    return tagc_errorf(TAGC_ENOMEM, "etcd request");
  tagc_status st;
  TAGC_CHECK_GOTO(etcd_set_key(req, key, o->prefix && !o->range_end), st, fail);
  if (o->range_end &&
      json_object_set_new(req, "range_end", etcd_json_bytes(o->range_end, strlen(o->range_end))) != 0) {
    st = tagc_errorf(TAGC_ENOMEM, "etcd request");
    goto fail;
  }
  TAGC_CHECK_GOTO(add_i64(req, "revision", o->revision), st, fail);
  TAGC_CHECK_GOTO(add_i64(req, "limit", o->limit), st, fail);
  TAGC_CHECK_GOTO(add_flag(req, "keys_only", o->keys_only), st, fail);
  TAGC_CHECK_GOTO(add_flag(req, "count_only", o->count_only), st, fail);
  TAGC_CHECK_GOTO(add_flag(req, "serializable", o->serializable), st, fail);
  *out = req;
  return TAGC_OK;
fail:
  json_decref(req);
  return st;
}

tagc_status etcd_range(tagc_etcd *c, const char *key, const tagc_etcd_range_opts *opts,
                       double deadline_s, tagc_etcd_range_result *out) {
  memset(out, 0, sizeof *out);
  json_t *req, *reply;
  TAGC_CHECK(build_range(key, opts, &req));
  tagc_status st = etcd_call(c, "/v3/kv/range", req, 1, deadline_s, &reply);
  json_decref(req);
  TAGC_CHECK(st);
  st = tagc_etcd_decode_range(reply, out);
  json_decref(reply);
  return st;
}

tagc_status tagc_etcd_range(tagc_etcd *c, const char *key, const tagc_etcd_range_opts *opts,
                            tagc_etcd_range_result *out) {
  return etcd_range(c, key, opts, etcd_deadline(c), out);
}

tagc_status tagc_etcd_get(tagc_etcd *c, const char *key, char **value, size_t *len,
                          int64_t *mod_revision) {
  *value = NULL;
  tagc_etcd_range_result r;
  TAGC_CHECK(tagc_etcd_range(c, key, NULL, &r));
  if (r.n == 0) {
    tagc_etcd_range_result_free(&r);
    return tagc_errorf(TAGC_ENOTFOUND, "etcd: no key %s", key);
  }
  *value = (char *)r.kvs[0].value; /* NUL-terminated by the decoder; ownership moves out */
  r.kvs[0].value = NULL;
  if (len)
    *len = r.kvs[0].value_len;
  if (mod_revision)
    *mod_revision = r.kvs[0].mod_revision;
  tagc_etcd_range_result_free(&r);
  return TAGC_OK;
}

static json_t *put_request(const char *key, const void *value, size_t len, int64_t lease) {
  json_t *req = json_object();
  if (!req || etcd_set_key(req, key, 0) != TAGC_OK ||
      json_object_set_new(req, "value", etcd_json_bytes(value, len)) != 0 ||
      add_i64(req, "lease", lease) != TAGC_OK) {
    json_decref(req);
    return NULL;
  }
  return req;
}

tagc_status tagc_etcd_put(tagc_etcd *c, const char *key, const void *value, size_t len,
                          int64_t lease, int64_t *revision) {
  if (!key || (!value && len))
    return tagc_errorf(TAGC_EINVAL, "etcd put: NULL key or value");
  json_t *reply;
  TAGC_CHECK(call_new(c, "/v3/kv/put", put_request(key, value, len, lease), 1, &reply));
  int64_t rev;
  tagc_status st = tagc_etcd_decode_revision(reply, &rev);
  if (st == TAGC_OK && revision)
    *revision = rev;
  json_decref(reply);
  return st;
}

tagc_status tagc_etcd_get_within(tagc_etcd *c, const char *key, double deadline_s, char **value,
                                 size_t *len) {
  *value = NULL;
  tagc_etcd_range_result r;
  TAGC_CHECK(etcd_range(c, key, NULL, deadline_s, &r));
  if (r.n == 0) {
    tagc_etcd_range_result_free(&r);
    return tagc_errorf(TAGC_ENOTFOUND, "etcd: no key %s", key);
  }
  *value = (char *)r.kvs[0].value; /* NUL-terminated by the decoder; ownership moves out */
  r.kvs[0].value = NULL;
  if (len)
    *len = r.kvs[0].value_len;
  tagc_etcd_range_result_free(&r);
  return TAGC_OK;
}

tagc_status tagc_etcd_put_within(tagc_etcd *c, const char *key, const void *value, size_t len,
                                 int64_t lease, double deadline_s) {
  if (!key || (!value && len))
    return tagc_errorf(TAGC_EINVAL, "etcd put: NULL key or value");
  json_t *req = put_request(key, value, len, lease), *reply;
  if (!req)
    return tagc_errorf(TAGC_ENOMEM, "etcd request for %s", key);
  tagc_status st = etcd_call(c, "/v3/kv/put", req, 1, deadline_s, &reply);
  json_decref(req);
  if (st == TAGC_OK)
    json_decref(reply);
  return st;
}

static json_t *delete_request(const char *key, int prefix) {
  json_t *req = json_object();
  if (!req || etcd_set_key(req, key, prefix) != TAGC_OK) {
    json_decref(req);
    return NULL;
  }
  return req;
}

tagc_status tagc_etcd_delete(tagc_etcd *c, const char *key, int prefix, int64_t *deleted) {
  if (!key)
    return tagc_errorf(TAGC_EINVAL, "etcd delete: NULL key");
  json_t *reply;
  TAGC_CHECK(call_new(c, "/v3/kv/deleterange", delete_request(key, prefix), 1, &reply));
  int64_t n;
  tagc_status st = tagc_json_get_i64_str(reply, "deleted", 0, &n);
  if (st == TAGC_OK && deleted)
    *deleted = n;
  json_decref(reply);
  return st;
}

tagc_status tagc_etcd_compact(tagc_etcd *c, int64_t revision) {
  json_t *reply;
  TAGC_CHECK(call_new(c, "/v3/kv/compaction", json_pack("{s:o}", "revision", etcd_json_i64(revision)),
                      1, &reply));
  json_decref(reply);
  return TAGC_OK;
}

/* ---- transactions ---- */

static json_t *compare_json(const tagc_etcd_compare *cmp) {
  static const char *const targets[] = {"VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
  static const char *const fields[] = {"version", "create_revision", "mod_revision", "value", "lease"};
  static const char *const results[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
  if ((unsigned)cmp->target > TAGC_ETCD_LEASE || (unsigned)cmp->result > TAGC_ETCD_NOT_EQUAL)
    return NULL;
  json_t *o = json_object();
  if (!o || etcd_set_key(o, cmp->key, 0) != TAGC_OK) {
    json_decref(o);
    return NULL;
  }
  json_t *operand = cmp->target == TAGC_ETCD_VALUE ? etcd_json_bytes(cmp->value, cmp->value_len)
                                                   : etcd_json_i64(cmp->number);
  if (json_object_set_new(o, "target", json_string(targets[cmp->target])) != 0 ||
      json_object_set_new(o, "result", json_string(results[cmp->result])) != 0 ||
      json_object_set_new(o, fields[cmp->target], operand) != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static json_t *op_json(const tagc_etcd_op *op) {
  tagc_etcd_range_opts ro = {.prefix = op->prefix};
  json_t *inner = NULL;
  const char *name = NULL;
  switch (op->type) {
  case TAGC_ETCD_OP_RANGE:
    name = "request_range";
    if (build_range(op->key, &ro, &inner) != TAGC_OK)
      inner = NULL;
    break;
  case TAGC_ETCD_OP_PUT:
    name = "request_put";
    inner = op->key && (op->value || !op->value_len)
                ? put_request(op->key, op->value, op->value_len, op->lease)
                : NULL;
    break;
  case TAGC_ETCD_OP_DELETE:
    name = "request_delete_range";
    inner = delete_request(op->key, op->prefix);
    break;
  }
  return inner ? json_pack("{s:o}", name, inner) : NULL;
}

static tagc_status ops_json(const tagc_etcd_op *ops, size_t n, json_t **out) {
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < n; i++) {
    if (json_array_append_new(arr, op_json(&ops[i])) != 0) {
      json_decref(arr);
      arr = NULL;
    }
  }
  *out = arr;
  return arr ? TAGC_OK : tagc_errorf(TAGC_EINVAL, "etcd txn: an operation is malformed");
}

tagc_status tagc_etcd_txn(tagc_etcd *c, const tagc_etcd_compare *cmp, size_t n_cmp,
                          const tagc_etcd_op *success, size_t n_success,
                          const tagc_etcd_op *failure, size_t n_failure,
                          tagc_etcd_txn_result *out) {
  memset(out, 0, sizeof *out);
  json_t *cmps = json_array(), *ok = NULL, *bad = NULL;
  for (size_t i = 0; cmps && i < n_cmp; i++) {
    if (json_array_append_new(cmps, compare_json(&cmp[i])) != 0) {
      json_decref(cmps);
      cmps = NULL;
    }
  }
  tagc_status st = cmps ? TAGC_OK : tagc_errorf(TAGC_EINVAL, "etcd txn: a compare is malformed");
  if (st == TAGC_OK)
    st = ops_json(success, n_success, &ok);
  if (st == TAGC_OK)
    st = ops_json(failure, n_failure, &bad);
  if (st != TAGC_OK) {
    json_decref(cmps);
    json_decref(ok);
    return st;
  }
  json_t *reply;
  TAGC_CHECK(call_new(c, "/v3/kv/txn",
                      json_pack("{s:o, s:o, s:o}", "compare", cmps, "success", ok, "failure", bad),
                      0, &reply));
  st = tagc_etcd_decode_txn(reply, out);
  json_decref(reply);
  return st;
}
