#include "cluster/etcd_decode.h"

#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/json.h"

/* gRPC status codes that etcd puts in "code". */
enum {
  GRPC_CANCELED = 1,
  GRPC_INVALID_ARGUMENT = 3,
  GRPC_DEADLINE_EXCEEDED = 4,
  GRPC_NOT_FOUND = 5,
  GRPC_ALREADY_EXISTS = 6,
  GRPC_PERMISSION_DENIED = 7,
  GRPC_RESOURCE_EXHAUSTED = 8,
  GRPC_FAILED_PRECONDITION = 9,
  GRPC_OUT_OF_RANGE = 11,
  GRPC_UNIMPLEMENTED = 12,
  GRPC_UNAVAILABLE = 14,
  GRPC_UNAUTHENTICATED = 16
};

tagc_status tagc_etcd_error_status(int64_t code, const char *message) {
  tagc_status st;
  switch (code) {
  case GRPC_CANCELED: st = TAGC_EABORTED; break;
  case GRPC_INVALID_ARGUMENT:
  case GRPC_OUT_OF_RANGE:
  case GRPC_PERMISSION_DENIED:
  case GRPC_UNAUTHENTICATED: st = TAGC_EINVAL; break;
  case GRPC_DEADLINE_EXCEEDED: st = TAGC_ETIMEDOUT; break;
  case GRPC_NOT_FOUND: st = TAGC_ENOTFOUND; break;
  case GRPC_ALREADY_EXISTS:
  case GRPC_FAILED_PRECONDITION: st = TAGC_ECONFLICT; break;
  case GRPC_UNIMPLEMENTED: st = TAGC_EUNSUPPORTED; break;
  case GRPC_UNAVAILABLE: st = TAGC_EPEER; break;
  default: st = TAGC_EIO; break;
  }
  return tagc_errorf(st, "etcd: %s (code %lld)", message, (long long)code);
}

/* An error object: top-level {"error":"text","message":"text","code":N} of unary replies or
 * the {"grpc_code":N,"message":"text",...} inside a stream's "error". */
static tagc_status decode_error(const json_t *root, int *retryable) {
  const json_t *err = json_object_get(root, "error");
  const json_t *src = json_is_object(err) ? err : root;
  int64_t code = 2;
  TAGC_CHECK(tagc_json_get_i64_str(src, json_is_object(err) ? "grpc_code" : "code", 2, &code));
  const json_t *msg = json_object_get(src, "message");
  if (!json_is_string(msg))
    msg = json_is_string(err) ? err : NULL;
  *retryable = code == GRPC_UNAVAILABLE || code == GRPC_DEADLINE_EXCEEDED;
  return tagc_etcd_error_status(code, msg ? json_string_value(msg) : "unknown error");
}

/* A one-line excerpt of a reply body for an error message: its first EXCERPT_CHARS printable
 * characters, runs of white space and control bytes folded into one space, the tags of a body
 * that starts with '<' (HTML, XML) left out, "..." when cut: a web server's page must not
 * fill the log. */
#define EXCERPT_CHARS 80

typedef struct excerpt_text {
  char text[EXCERPT_CHARS + 4];
} excerpt_text;

static excerpt_text excerpt(const char *body, size_t len) {
  excerpt_text e;
  size_t n = 0, i = 0;
  size_t first = 0;
  while (first < len && (body[first] == ' ' || body[first] == '\t' || body[first] == '\r' ||
                         body[first] == '\n'))
    first++;
  int markup = first < len && body[first] == '<', in_tag = 0;
  for (; i < len && n < EXCERPT_CHARS; i++) {
    unsigned char ch = (unsigned char)body[i];
    if (markup && (ch == '<' || ch == '>'))
      in_tag = ch == '<';
    if (markup && (in_tag || ch == '>'))
      ch = ' ';
    if (ch > ' ' && ch < 127)
      e.text[n++] = (char)ch;
    else if (n && e.text[n - 1] != ' ')
      e.text[n++] = ' ';
  }
  while (i < len && ((unsigned char)body[i] <= ' ' || (unsigned char)body[i] >= 127 ||
                     (markup && (in_tag || body[i] == '<' || body[i] == '>')))) {
    if (markup && (body[i] == '<' || body[i] == '>'))
      in_tag = body[i] == '<';
    i++; /* trailing white space and tags are no cut */
  }
  while (n && e.text[n - 1] == ' ')
    n--;
  if (i < len)
    e.text[n++] = '.', e.text[n++] = '.', e.text[n++] = '.';
  e.text[n] = '\0';
  return e;
}

tagc_status tagc_etcd_decode_reply(long http_status, const char *body, size_t len, json_t **out,
                                   int *retryable) {
  *out = NULL;
  *retryable = 0;
  json_t *root;
  tagc_status st = tagc_json_parse(body, len, &root);
  if (st != TAGC_OK || !json_is_object(root)) {
    *retryable = http_status >= 500;
    if (st == TAGC_OK)
      json_decref(root);
    return tagc_errorf(TAGC_EPROTO, "etcd: HTTP %ld with a reply that is not a JSON object: %s",
                       http_status, excerpt(body, len).text);
  }
  if (json_object_get(root, "error")) {
    st = decode_error(root, retryable);
    json_decref(root);
    return st;
  }
  if (http_status != 200) {
    *retryable = http_status >= 500;
    json_decref(root);
    return tagc_errorf(http_status >= 500 ? TAGC_EPEER : TAGC_EPROTO, "etcd: HTTP %ld: %s",
                       http_status, excerpt(body, len).text);
  }
  json_t *result = json_object_get(root, "result");
  if (result) {
    if (!json_is_object(result)) {
      json_decref(root);
      return tagc_errorf(TAGC_EPROTO, "etcd: \"result\" is not an object");
    }
    json_incref(result);
    json_decref(root);
    root = result;
  }
  *out = root;
  return TAGC_OK;
}

tagc_status tagc_etcd_decode_revision(const json_t *reply, int64_t *revision) {
  *revision = 0;
  const json_t *header = json_object_get(reply, "header");
  if (!header)
    return TAGC_OK;
  if (!json_is_object(header))
    return tagc_errorf(TAGC_EPROTO, "etcd: \"header\" is not an object");
  return tagc_json_get_i64_str(header, "revision", 0, revision);
}

/* A base64 field into a new NUL-terminated buffer; a missing field is an empty buffer. */
static tagc_status decode_bytes(const json_t *obj, const char *name, unsigned char **out,
                                size_t *len) {
  const json_t *v = json_object_get(obj, name);
  if (!v) {
    *out = calloc(1, 1);
    *len = 0;
    return *out ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "etcd: empty %s", name);
  }
  if (!json_is_string(v))
    return tagc_errorf(TAGC_EPROTO, "etcd: \"%s\" is not a base64 string", name);
  return tagc_base64_decode_new(json_string_value(v), out, len);
}

void tagc_etcd_kv_free(tagc_etcd_kv *kv) {
  free(kv->key);
  free(kv->value);
  memset(kv, 0, sizeof *kv);
}

tagc_status tagc_etcd_decode_kv(const json_t *obj, tagc_etcd_kv *kv) {
  memset(kv, 0, sizeof *kv);
  if (!json_is_object(obj))
    return tagc_errorf(TAGC_EPROTO, "etcd: a key-value entry is not an object");
  tagc_status st;
  TAGC_CHECK_GOTO(decode_bytes(obj, "key", &kv->key, &kv->key_len), st, fail);
  TAGC_CHECK_GOTO(decode_bytes(obj, "value", &kv->value, &kv->value_len), st, fail);
  TAGC_CHECK_GOTO(tagc_json_get_i64_str(obj, "create_revision", 0, &kv->create_revision), st, fail);
  TAGC_CHECK_GOTO(tagc_json_get_i64_str(obj, "mod_revision", 0, &kv->mod_revision), st, fail);
  TAGC_CHECK_GOTO(tagc_json_get_i64_str(obj, "version", 0, &kv->version), st, fail);
  TAGC_CHECK_GOTO(tagc_json_get_i64_str(obj, "lease", 0, &kv->lease), st, fail);
  return TAGC_OK;
fail:
  tagc_etcd_kv_free(kv);
  return st;
}

void tagc_etcd_range_result_free(tagc_etcd_range_result *r) {
  for (size_t i = 0; i < r->n; i++)
    tagc_etcd_kv_free(&r->kvs[i]);
  free(r->kvs);
  memset(r, 0, sizeof *r);
}

/* A JSON array field that may be left out (= empty). */
static tagc_status get_array(const json_t *obj, const char *name, const json_t **arr, size_t *n) {
  *arr = json_object_get(obj, name);
  *n = 0;
  if (!*arr)
    return TAGC_OK;
  if (!json_is_array(*arr))
    return tagc_errorf(TAGC_EPROTO, "etcd: \"%s\" is not an array", name);
  *n = json_array_size(*arr);
  return TAGC_OK;
}

static tagc_status get_flag(const json_t *obj, const char *name, int *out) {
  const json_t *v = json_object_get(obj, name);
  *out = 0;
  if (!v)
    return TAGC_OK;
  if (!json_is_boolean(v))
    return tagc_errorf(TAGC_EPROTO, "etcd: \"%s\" is not a boolean", name);
  *out = json_is_true(v);
  return TAGC_OK;
}

tagc_status tagc_etcd_decode_range(const json_t *reply, tagc_etcd_range_result *out) {
  memset(out, 0, sizeof *out);
  if (!json_is_object(reply))
    return tagc_errorf(TAGC_EPROTO, "etcd: range reply is not an object");
  const json_t *kvs;
  size_t n;
  TAGC_CHECK(get_array(reply, "kvs", &kvs, &n));
  tagc_status st;
  TAGC_CHECK_GOTO(tagc_etcd_decode_revision(reply, &out->revision), st, fail);
  TAGC_CHECK_GOTO(tagc_json_get_i64_str(reply, "count", 0, &out->count), st, fail);
  TAGC_CHECK_GOTO(get_flag(reply, "more", &out->more), st, fail);
  if (n) {
    out->kvs = calloc(n, sizeof *out->kvs);
    if (!out->kvs)
      return tagc_errorf(TAGC_ENOMEM, "etcd: %zu key-values", n);
  }
  for (; out->n < n; out->n++)
    TAGC_CHECK_GOTO(tagc_etcd_decode_kv(json_array_get(kvs, out->n), &out->kvs[out->n]), st, fail);
  return TAGC_OK;
fail:
  tagc_etcd_range_result_free(out);
  return st;
}

void tagc_etcd_txn_result_free(tagc_etcd_txn_result *r) {
  for (size_t i = 0; i < r->n_responses; i++)
    tagc_etcd_range_result_free(&r->responses[i].range);
  free(r->responses);
  memset(r, 0, sizeof *r);
}

/* One ResponseOp: exactly one of response_range / response_put / response_delete_range. */
static tagc_status decode_op_response(const json_t *obj, tagc_etcd_op_response *out) {
  memset(out, 0, sizeof *out);
  const json_t *v;
  if (json_is_object(v = json_object_get(obj, "response_range"))) {
    out->type = TAGC_ETCD_OP_RANGE;
    return tagc_etcd_decode_range(v, &out->range);
  }
  if (json_is_object(v = json_object_get(obj, "response_put"))) {
    out->type = TAGC_ETCD_OP_PUT;
    return TAGC_OK;
  }
  if (json_is_object(v = json_object_get(obj, "response_delete_range"))) {
    out->type = TAGC_ETCD_OP_DELETE;
    return tagc_json_get_i64_str(v, "deleted", 0, &out->deleted);
  }
  return tagc_errorf(TAGC_EPROTO, "etcd: txn response op of unknown kind");
}

tagc_status tagc_etcd_decode_txn(const json_t *reply, tagc_etcd_txn_result *out) {
  memset(out, 0, sizeof *out);
  if (!json_is_object(reply))
    return tagc_errorf(TAGC_EPROTO, "etcd: txn reply is not an object");
  const json_t *arr;
  size_t n;
  TAGC_CHECK(get_array(reply, "responses", &arr, &n));
  TAGC_CHECK(get_flag(reply, "succeeded", &out->succeeded));
  TAGC_CHECK(tagc_etcd_decode_revision(reply, &out->revision));
  if (n) {
    out->responses = calloc(n, sizeof *out->responses);
    if (!out->responses)
      return tagc_errorf(TAGC_ENOMEM, "etcd: %zu txn responses", n);
  }
  tagc_status st;
  for (; out->n_responses < n; out->n_responses++) {
    TAGC_CHECK_GOTO(decode_op_response(json_array_get(arr, out->n_responses),
                                       &out->responses[out->n_responses]), st, fail);
  }
  return TAGC_OK;
fail:
  out->n_responses++; /* the failed entry was zeroed or freed by its decoder */
  tagc_etcd_txn_result_free(out);
  return st;
}

tagc_status tagc_etcd_decode_lease(const json_t *reply, int64_t *id, int64_t *ttl, int64_t *granted) {
  if (!json_is_object(reply))
    return tagc_errorf(TAGC_EPROTO, "etcd: lease reply is not an object");
  TAGC_CHECK(tagc_json_get_i64_str(reply, "ID", 0, id));
  TAGC_CHECK(tagc_json_get_i64_str(reply, "TTL", 0, ttl));
  return tagc_json_get_i64_str(reply, "grantedTTL", 0, granted);
}

void tagc_etcd_watch_reply_free(tagc_etcd_watch_reply *r) {
  for (size_t i = 0; i < r->n_events; i++) {
    tagc_etcd_kv_free(&r->events[i].kv);
    tagc_etcd_kv_free(&r->events[i].prev);
  }
  free(r->events);
  free(r->cancel_reason);
  memset(r, 0, sizeof *r);
}

static tagc_status decode_event(const json_t *obj, tagc_etcd_event *ev) {
  memset(ev, 0, sizeof *ev);
  if (!json_is_object(obj))
    return tagc_errorf(TAGC_EPROTO, "etcd: watch event is not an object");
  const json_t *type = json_object_get(obj, "type");
  if (!type || (json_is_string(type) && strcmp(json_string_value(type), "PUT") == 0))
    ev->type = TAGC_ETCD_PUT;
  else if (json_is_string(type) && strcmp(json_string_value(type), "DELETE") == 0)
    ev->type = TAGC_ETCD_DELETE;
  else
    return tagc_errorf(TAGC_EPROTO, "etcd: watch event of unknown type");
  TAGC_CHECK(tagc_etcd_decode_kv(json_object_get(obj, "kv"), &ev->kv));
  const json_t *prev = json_object_get(obj, "prev_kv");
  if (prev) {
    tagc_status st = tagc_etcd_decode_kv(prev, &ev->prev);
    if (st != TAGC_OK) {
      tagc_etcd_kv_free(&ev->kv);
      return st;
    }
    ev->has_prev = 1;
  }
  return TAGC_OK;
}

tagc_status tagc_etcd_decode_watch(const json_t *reply, tagc_etcd_watch_reply *out) {
  memset(out, 0, sizeof *out);
  if (!json_is_object(reply))
    return tagc_errorf(TAGC_EPROTO, "etcd: watch reply is not an object");
  const json_t *arr;
  size_t n;
  TAGC_CHECK(get_array(reply, "events", &arr, &n));
  TAGC_CHECK(tagc_etcd_decode_revision(reply, &out->revision));
  TAGC_CHECK(get_flag(reply, "created", &out->created));
  TAGC_CHECK(get_flag(reply, "canceled", &out->canceled));
  TAGC_CHECK(tagc_json_get_i64_str(reply, "compact_revision", 0, &out->compact_revision));
  const json_t *reason = json_object_get(reply, "cancel_reason");
  out->cancel_reason = strdup(json_is_string(reason) ? json_string_value(reason) : "");
  if (!out->cancel_reason)
    return tagc_errorf(TAGC_ENOMEM, "etcd: cancel reason");
  if (n) {
    out->events = calloc(n, sizeof *out->events);
    if (!out->events) {
      tagc_etcd_watch_reply_free(out);
      return tagc_errorf(TAGC_ENOMEM, "etcd: %zu watch events", n);
    }
  }
  for (; out->n_events < n; out->n_events++) {
    tagc_status st = decode_event(json_array_get(arr, out->n_events), &out->events[out->n_events]);
    if (st != TAGC_OK) {
      tagc_etcd_watch_reply_free(out);
      return st;
    }
  }
  return TAGC_OK;
}
