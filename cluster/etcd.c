/* etcd client core: configuration, endpoint failover, retries, auth, and the unary calls. */
#include "cluster/etcd.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/etcd_decode.h"
#include "cluster/etcd_internal.h"

enum { MAX_ENDPOINTS = 16 };

struct tagc_etcd {
  char *endpoints[MAX_ENDPOINTS];
  size_t n_endpoints;
  atomic_size_t preferred;
  tagc_etcd_config cfg;   /* numbers, and the string fields below pointing at owned copies */
  char *ca_file, *cert_file, *key_file, *user, *password;
  const tagc_etcd_transport *transport;
  pthread_mutex_t token_lock;
  char token[ETCD_TOKEN_MAX]; /* "" when none is held */
};

void tagc_etcd_config_init(tagc_etcd_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->request_timeout_s = 5;
  cfg->connect_timeout_s = 1;
  cfg->deadline_s = 15;
  cfg->max_attempts = 6;
  cfg->backoff_initial_s = 0.05;
  cfg->backoff_max_s = 1;
}

static tagc_status copy_opt(const char *s, char **out) {
  *out = NULL;
  if (!s)
    return TAGC_OK;
  *out = strdup(s);
  return *out ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "etcd config string");
}

/* Splits "url,url" into owned, trimmed URLs without a trailing slash. */
static tagc_status parse_endpoints(tagc_etcd *c, const char *list) {
  if (!list || !*list)
    return tagc_errorf(TAGC_EINVAL, "etcd: no endpoints given");
  const char *p = list;
  while (*p) {
    while (*p == ' ' || *p == ',')
      p++;
    if (!*p)
      break;
    size_t n = strcspn(p, ", ");
    while (n > 0 && p[n - 1] == '/')
      n--;
    if (c->n_endpoints == MAX_ENDPOINTS)
      return tagc_errorf(TAGC_EINVAL, "etcd: more than %d endpoints", MAX_ENDPOINTS);
    if (!(strncmp(p, "http://", 7) == 0 && n > 7) && !(strncmp(p, "https://", 8) == 0 && n > 8))
      return tagc_errorf(TAGC_EINVAL, "etcd endpoint '%.*s' must start with http:// or https://",
                         (int)n, p);
    char *e = strndup(p, n);
    if (!e)
      return tagc_errorf(TAGC_ENOMEM, "etcd endpoint");
    c->endpoints[c->n_endpoints++] = e;
    p += strcspn(p, ",");
  }
  return c->n_endpoints ? TAGC_OK : tagc_errorf(TAGC_EINVAL, "etcd: no endpoints in '%s'", list);
}

static tagc_status check_config(const tagc_etcd_config *cfg) {
  if (!(cfg->request_timeout_s > 0) || !(cfg->connect_timeout_s > 0) || !(cfg->deadline_s > 0))
    return tagc_errorf(TAGC_EINVAL, "etcd: timeouts must be positive");
  if (cfg->max_attempts < 1)
    return tagc_errorf(TAGC_EINVAL, "etcd: max_attempts must be at least 1");
  if (cfg->backoff_initial_s < 0 || cfg->backoff_max_s < cfg->backoff_initial_s)
    return tagc_errorf(TAGC_EINVAL, "etcd: backoff must satisfy 0 <= initial <= max");
  if ((cfg->user != NULL) != (cfg->password != NULL))
    return tagc_errorf(TAGC_EINVAL, "etcd: user and password go together");
  if ((cfg->cert_file != NULL) != (cfg->key_file != NULL))
    return tagc_errorf(TAGC_EINVAL, "etcd: client certificate and key go together");
  return TAGC_OK;
}

tagc_status tagc_etcd_create(const tagc_etcd_config *cfg, tagc_etcd **out) {
  *out = NULL;
  TAGC_CHECK(check_config(cfg));
  tagc_etcd *c = calloc(1, sizeof *c);
  if (!c)
    return tagc_errorf(TAGC_ENOMEM, "etcd client");
  pthread_mutex_init(&c->token_lock, NULL);
  c->cfg = *cfg;
  c->transport = cfg->transport ? cfg->transport : tagc_etcd_curl_transport();
  tagc_status st;
  TAGC_CHECK_GOTO(parse_endpoints(c, cfg->endpoints), st, fail);
  TAGC_CHECK_GOTO(copy_opt(cfg->ca_file, &c->ca_file), st, fail);
  TAGC_CHECK_GOTO(copy_opt(cfg->cert_file, &c->cert_file), st, fail);
  TAGC_CHECK_GOTO(copy_opt(cfg->key_file, &c->key_file), st, fail);
  TAGC_CHECK_GOTO(copy_opt(cfg->user, &c->user), st, fail);
  TAGC_CHECK_GOTO(copy_opt(cfg->password, &c->password), st, fail);
  c->cfg.endpoints = NULL;
  c->cfg.ca_file = c->ca_file;
  c->cfg.cert_file = c->cert_file;
  c->cfg.key_file = c->key_file;
  c->cfg.user = c->user;
  c->cfg.password = c->password;
  *out = c;
  return TAGC_OK;
fail:
  tagc_etcd_destroy(c);
  return st;
}

void tagc_etcd_destroy(tagc_etcd *c) {
  if (!c)
    return;
  for (size_t i = 0; i < c->n_endpoints; i++)
    free(c->endpoints[i]);
  free(c->ca_file);
  free(c->cert_file);
  free(c->key_file);
  free(c->user);
  free(c->password);
  pthread_mutex_destroy(&c->token_lock);
  free(c);
}

static const char *given(const char *s) { return s && *s ? s : NULL; }

/* The first line of a password file, in a new string. */
static tagc_status read_password_file(const char *path, char **out) {
  FILE *f = fopen(path, "r");
  if (!f)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "--etcd-password-file %s",
                       path);
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  int bad = ferror(f);
  fclose(f);
  if (bad)
    return tagc_errorf(TAGC_EIO, "--etcd-password-file %s: read error", path);
  buf[n] = '\0';
  buf[strcspn(buf, "\r\n")] = '\0';
  *out = strdup(buf);
  memset(buf, 0, sizeof buf);
  return *out ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "etcd password");
}

/* TAGC_EINVAL when any endpoint of the comma-separated list is plain http://. */
static tagc_status refuse_clear_text(const char *endpoints) {
  for (const char *p = endpoints; p && *p;) {
    p += strspn(p, ", ");
    size_t n = strcspn(p, ", ");
    if (strncmp(p, "http://", 7) == 0)
      return tagc_errorf(TAGC_EINVAL,
                         "refusing to send the etcd password over plain http:// (%.*s): use "
                         "https:// endpoints with --etcd-user",
                         (int)n, p);
    p += n;
  }
  return TAGC_OK;
}

tagc_status tagc_etcd_config_credentials(tagc_etcd_config *cfg, const tagc_etcd_credentials *cred,
                                         char **password) {
  *password = NULL;
  cfg->ca_file = given(cred->ca_file);
  cfg->cert_file = given(cred->cert_file);
  cfg->key_file = given(cred->key_file);
  cfg->user = given(cred->user);
  cfg->password = NULL;
  if ((cfg->cert_file != NULL) != (cfg->key_file != NULL))
    return tagc_errorf(TAGC_EINVAL, "--etcd-cert and --etcd-key go together");
  if (!cfg->user)
    return TAGC_OK;
  TAGC_CHECK(refuse_clear_text(cfg->endpoints));
  if (given(cred->password_file)) {
    TAGC_CHECK(read_password_file(cred->password_file, password));
  } else {
    const char *env = getenv(TAGC_ETCD_PASSWORD_ENV);
    if (!given(env))
      return tagc_errorf(TAGC_EINVAL, "--etcd-user %s needs a password: set %s or "
                         "--etcd-password-file", cfg->user, TAGC_ETCD_PASSWORD_ENV);
    if (!(*password = strdup(env)))
      return tagc_errorf(TAGC_ENOMEM, "etcd password");
  }
  cfg->password = *password;
  return TAGC_OK;
}

tagc_status tagc_etcd_create_with_credentials(const tagc_etcd_config *cfg,
                                              const tagc_etcd_credentials *cred, tagc_etcd **out) {
  *out = NULL;
  tagc_etcd_config ec = *cfg;
  char *password = NULL;
  tagc_status st = tagc_etcd_config_credentials(&ec, cred, &password);
  if (st == TAGC_OK)
    st = tagc_etcd_create(&ec, out);
  if (password)
    memset(password, 0, strlen(password));
  free(password);
  return st;
}

size_t etcd_endpoint_count(const tagc_etcd *c) { return c->n_endpoints; }
size_t etcd_preferred_endpoint(tagc_etcd *c) { return atomic_load(&c->preferred); }
const char *etcd_endpoint(const tagc_etcd *c, size_t i) { return c->endpoints[i % c->n_endpoints]; }
void etcd_set_preferred_endpoint(tagc_etcd *c, size_t i) { atomic_store(&c->preferred, i % c->n_endpoints); }
/* The endpoint after i becomes preferred, unless another call already moved the preference. */
static void etcd_move_off_endpoint(tagc_etcd *c, size_t i) {
  size_t failed = i % c->n_endpoints;
  atomic_compare_exchange_strong(&c->preferred, &failed, (failed + 1) % c->n_endpoints);
}
const tagc_etcd_transport *etcd_transport(const tagc_etcd *c) { return c->transport; }
double etcd_request_timeout(const tagc_etcd *c) { return c->cfg.request_timeout_s; }

double etcd_backoff_s(const tagc_etcd *c, int attempt) {
  double b = c->cfg.backoff_initial_s;
  for (int i = 1; i < attempt && b < c->cfg.backoff_max_s; i++)
    b *= 2;
  if (b > c->cfg.backoff_max_s)
    b = c->cfg.backoff_max_s;
  /* Jitter in [0.5, 1) x b so that many clients retrying at once spread out. */
  unsigned seed = (unsigned)tagc_now_ns();
  return b * (0.5 + 0.5 * (double)(rand_r(&seed) % 1000) / 1000.0);
}

json_t *etcd_json_bytes(const void *data, size_t len) {
  char *text = tagc_base64_encode_new(data, len);
  if (!text)
    return NULL;
  json_t *v = json_string_nocheck(text);
  free(text);
  return v;
}

json_t *etcd_json_i64(int64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)v);
  return json_string(buf);
}

/* The smallest key above every key with this prefix (clientv3 getPrefix): the prefix with its
 * last byte below 0xff incremented and what follows dropped; "\0" (= no end) if there is none. */
static json_t *prefix_end(const char *key) {
  size_t n = strlen(key);
  unsigned char *end = malloc(n + 1);
  if (!end)
    return NULL;
  memcpy(end, key, n);
  while (n > 0 && end[n - 1] == 0xff)
    n--;
  json_t *v;
  if (n == 0) {
    v = etcd_json_bytes("", 1);
  } else {
    end[n - 1]++;
    v = etcd_json_bytes(end, n);
  }
  free(end);
  return v;
}

tagc_status etcd_set_key(json_t *obj, const char *key, int prefix) {
  if (!key)
    return tagc_errorf(TAGC_EINVAL, "etcd: key is NULL");
  if (json_object_set_new(obj, "key", etcd_json_bytes(key, strlen(key))) != 0)
    return tagc_errorf(TAGC_ENOMEM, "etcd request");
  if (prefix && json_object_set_new(obj, "range_end", prefix_end(key)) != 0)
    return tagc_errorf(TAGC_ENOMEM, "etcd request");
  return TAGC_OK;
}

/* POSTs the user's name and password and keeps the returned token. */
static tagc_status authenticate(tagc_etcd *c, const char *endpoint) {
  json_t *req = json_pack("{s:s, s:s}", "name", c->user, "password", c->password);
  char *body = req ? tagc_json_dump(req) : NULL;
  json_decref(req);
  if (!body)
    return tagc_errorf(TAGC_ENOMEM, "etcd auth request");
  tagc_etcd_request r = {endpoint, "/v3/auth/authenticate", body, NULL, c->cfg.request_timeout_s,
                         c->cfg.connect_timeout_s, c->ca_file, c->cert_file, c->key_file,
                         TAGC_ETCD_MAX_REPLY_BYTES};
  long http = 0;
  char *text = NULL;
  size_t len = 0;
  tagc_status st = c->transport->request(c->transport->ctx, &r, &http, &text, &len);
  free(body);
  TAGC_CHECK(st);
  json_t *reply = NULL;
  int retryable;
  st = tagc_etcd_decode_reply(http, text, len, &reply, &retryable);
  free(text);
  TAGC_CHECK(st);
  const char *token;
  st = tagc_json_get_str(reply, "token", &token);
  if (st == TAGC_OK && strlen(token) >= ETCD_TOKEN_MAX)
    st = tagc_errorf(TAGC_EPROTO, "etcd: auth token too long");
  if (st == TAGC_OK) {
    pthread_mutex_lock(&c->token_lock);
    snprintf(c->token, sizeof c->token, "%s", token);
    pthread_mutex_unlock(&c->token_lock);
  }
  json_decref(reply);
  return st;
}

void etcd_drop_token(tagc_etcd *c) {
  pthread_mutex_lock(&c->token_lock);
  c->token[0] = '\0';
  pthread_mutex_unlock(&c->token_lock);
}

static void copy_token(tagc_etcd *c, char *token) {
  pthread_mutex_lock(&c->token_lock);
  memcpy(token, c->token, ETCD_TOKEN_MAX);
  pthread_mutex_unlock(&c->token_lock);
}

int etcd_token_rejected(void) { return strstr(tagc_last_error(), "invalid auth token") != NULL; }

tagc_status etcd_prepare(tagc_etcd *c, tagc_etcd_request *req, const char *endpoint,
                         const char *path, const char *body, char *token) {
  token[0] = '\0';
  if (c->user) {
    copy_token(c, token);
    if (!token[0]) {
      TAGC_CHECK(authenticate(c, endpoint));
      copy_token(c, token);
    }
  }
  *req = (tagc_etcd_request){endpoint, path, body, token[0] ? token : NULL, c->cfg.request_timeout_s,
                             c->cfg.connect_timeout_s, c->ca_file, c->cert_file, c->key_file,
                             TAGC_ETCD_MAX_REPLY_BYTES};
  return TAGC_OK;
}

/* One attempt on one endpoint. *retry says whether another attempt may help. */
static tagc_status attempt_once(tagc_etcd *c, const char *endpoint, const char *path,
                                const char *body, int idempotent, double left_s, json_t **reply,
                                int *retry) {
  char token[ETCD_TOKEN_MAX];
  tagc_etcd_request req;
  *retry = 0;
  tagc_status st = etcd_prepare(c, &req, endpoint, path, body, token);
  if (st != TAGC_OK) {
    *retry = st == TAGC_EPEER || st == TAGC_ETIMEDOUT || st == TAGC_EIO;
    return st;
  }
  if (req.timeout_s > left_s)
    req.timeout_s = left_s;
  long http = 0;
  char *text = NULL;
  size_t len = 0;
  st = c->transport->request(c->transport->ctx, &req, &http, &text, &len);
  if (st != TAGC_OK) {
    *retry = st == TAGC_EPEER || (idempotent && (st == TAGC_ETIMEDOUT || st == TAGC_EIO));
    return st;
  }
  int retryable;
  st = tagc_etcd_decode_reply(http, text, len, reply, &retryable);
  free(text);
  if (st != TAGC_OK && token[0] && etcd_token_rejected()) {
    etcd_drop_token(c); /* expired: the next attempt authenticates again */
    *retry = 1;
    return st;
  }
  *retry = idempotent && retryable;
  return st;
}

tagc_status etcd_call(tagc_etcd *c, const char *path, json_t *request, int idempotent,
                      double deadline_s, json_t **reply) {
  *reply = NULL;
  char *body = tagc_json_dump(request);
  if (!body)
    return tagc_errorf(TAGC_ENOMEM, "etcd request for %s", path);
  double deadline = tagc_now() + deadline_s;
  size_t first = etcd_preferred_endpoint(c);
  tagc_status st = TAGC_OK;
  for (int attempt = 0;; attempt++) {
    size_t ep = first + (size_t)attempt;
    int retry;
    st = attempt_once(c, etcd_endpoint(c, ep), path, body, idempotent, deadline - tagc_now(),
                      reply, &retry);
    if (st == TAGC_OK) {
      etcd_set_preferred_endpoint(c, ep);
      break;
    }
    /* A member that did not answer (timeout, refused, reset) is no longer preferred: a call
     * whose deadline it used up (a lease renewal has TTL/3) would otherwise send the next
     * call to it again, and a stopped member would cost every short call (and the lease). */
    if (st == TAGC_ETIMEDOUT || st == TAGC_EPEER || st == TAGC_EIO)
      etcd_move_off_endpoint(c, ep);
    double pause = etcd_backoff_s(c, attempt + 1);
    if (!retry || attempt + 1 >= c->cfg.max_attempts || tagc_now() + pause >= deadline)
      break;
    LOG_DEBUG("etcd", "%s failed on %s (%s), retrying in %.3f s", path, etcd_endpoint(c, ep),
              tagc_last_error(), pause);
    tagc_sleep(pause);
  }
  free(body);
  return st;
}

tagc_status tagc_etcd_call(tagc_etcd *c, const char *path, json_t *request, int idempotent,
                           json_t **reply) {
  return etcd_call(c, path, request, idempotent, c->cfg.deadline_s, reply);
}

/* Runs a call whose request object is new (stolen here). */
static tagc_status call_new(tagc_etcd *c, const char *path, json_t *request, int idempotent,
                            json_t **reply) {
  if (!request)
    return tagc_errorf(TAGC_ENOMEM, "etcd request for %s", path);
  tagc_status st = etcd_call(c, path, request, idempotent, c->cfg.deadline_s, reply);
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
  TAGC_CHECK_GOTO(etcd_set_key(req, key, o->prefix), st, fail);
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
  return etcd_range(c, key, opts, c->cfg.deadline_s, out);
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

/* ---- leases ---- */

/* POSTs {field: v} to a lease path and decodes the lease reply's ID, TTL and grantedTTL. */
static tagc_status lease_call(tagc_etcd *c, const char *path, const char *field, int64_t v,
                              int idempotent, double deadline_s, int64_t *id, int64_t *ttl,
                              int64_t *granted) {
  json_t *req = json_pack("{s:o}", field, etcd_json_i64(v)), *reply;
  if (!req)
    return tagc_errorf(TAGC_ENOMEM, "etcd request for %s", path);
  tagc_status st = etcd_call(c, path, req, idempotent, deadline_s, &reply);
  json_decref(req);
  TAGC_CHECK(st);
  st = tagc_etcd_decode_lease(reply, id, ttl, granted);
  json_decref(reply);
  return st;
}

static tagc_status lease_gone(int64_t id) {
  return tagc_errorf(TAGC_ENOTFOUND, "etcd: lease %llx expired or not found", (unsigned long long)id);
}

tagc_status tagc_etcd_lease_grant(tagc_etcd *c, int64_t ttl_s, int64_t *id, int64_t *granted_ttl) {
  if (ttl_s <= 0)
    return tagc_errorf(TAGC_EINVAL, "etcd lease TTL must be positive, not %lld", (long long)ttl_s);
  int64_t lid, ttl, unused;
  TAGC_CHECK(lease_call(c, "/v3/lease/grant", "TTL", ttl_s, 0, c->cfg.deadline_s, &lid, &ttl, &unused));
  if (lid == 0 || ttl <= 0)
    return tagc_errorf(TAGC_EPROTO, "etcd: lease grant answered ID %lld TTL %lld", (long long)lid,
                       (long long)ttl);
  *id = lid;
  if (granted_ttl)
    *granted_ttl = ttl;
  return TAGC_OK;
}

tagc_status etcd_keepalive(tagc_etcd *c, int64_t id, double deadline_s, int64_t *ttl) {
  int64_t lid, left, unused;
  TAGC_CHECK(lease_call(c, "/v3/lease/keepalive", "ID", id, 1, deadline_s, &lid, &left, &unused));
  if (left <= 0) /* the gateway leaves TTL out (= 0) for an expired or unknown lease */
    return lease_gone(id);
  if (ttl)
    *ttl = left;
  return TAGC_OK;
}

tagc_status tagc_etcd_lease_keepalive(tagc_etcd *c, int64_t id, int64_t *ttl) {
  return etcd_keepalive(c, id, c->cfg.deadline_s, ttl);
}

tagc_status tagc_etcd_lease_revoke(tagc_etcd *c, int64_t id) {
  int64_t unused[3];
  return lease_call(c, "/v3/lease/revoke", "ID", id, 1, c->cfg.deadline_s, &unused[0], &unused[1],
                    &unused[2]);
}

tagc_status tagc_etcd_lease_ttl(tagc_etcd *c, int64_t id, int64_t *ttl, int64_t *granted_ttl) {
  int64_t lid, left, granted;
  TAGC_CHECK(lease_call(c, "/v3/lease/timetolive", "ID", id, 1, c->cfg.deadline_s, &lid, &left, &granted));
  if (left < 0 || (left == 0 && granted == 0)) /* -1 for an unknown lease */
    return lease_gone(id);
  if (ttl)
    *ttl = left;
  if (granted_ttl)
    *granted_ttl = granted;
  return TAGC_OK;
}
