/* etcd client core: configuration, endpoint failover, retries, auth, and the one call every
 * request goes through (etcd_call). The requests themselves: etcd_kv.c (keys, transactions),
 * etcd_lease.c, etcd_watch.c; a client from a program's options: etcd_connect.c. */
#include "cluster/etcd.h"

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
  tagc_etcd_transport *own_transport; /* the pooled libcurl one when cfg gave none */
  pthread_mutex_t token_lock;
  char token[ETCD_TOKEN_MAX]; /* "" when none is held */
};

void tagc_etcd_config_init(tagc_etcd_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->request_timeout_s = 5;
  /* Linux sends a lost SYN again after 1 s: a connect may take one retransmission. */
  cfg->connect_timeout_s = 1.5;
  cfg->deadline_s = TAGC_ETCD_DEADLINE_S;
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

/* TLS files with a plain http:// endpoint: libcurl would connect in clear text and never read
 * them. Refused, naming the option that gives the file. */
static tagc_status refuse_tls_over_http(const tagc_etcd *c, const tagc_etcd_config *cfg) {
  const char *tls = cfg->ca_file ? "--etcd-ca" : cfg->cert_file ? "--etcd-cert" : cfg->key_file ? "--etcd-key" : NULL;
  for (size_t i = 0; tls && i < c->n_endpoints; i++)
    if (strncmp(c->endpoints[i], "http://", 7) == 0)
      return tagc_errorf(TAGC_EINVAL, "%s with the plain http:// etcd endpoint %s: TLS files need "
                         "https:// endpoints (over http:// they would be ignored)", tls, c->endpoints[i]);
  return TAGC_OK;
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
  tagc_status st;
  if (!cfg->transport)
    TAGC_CHECK_GOTO(etcd_curl_pool_create(&c->own_transport), st, fail);
  c->transport = cfg->transport ? cfg->transport : c->own_transport;
  TAGC_CHECK_GOTO(parse_endpoints(c, cfg->endpoints), st, fail);
  TAGC_CHECK_GOTO(refuse_tls_over_http(c, cfg), st, fail);
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
  etcd_curl_pool_free(c->own_transport);
  pthread_mutex_destroy(&c->token_lock);
  free(c);
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
double etcd_deadline(const tagc_etcd *c) { return c->cfg.deadline_s; }

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

/* One attempt on one endpoint, of at most attempt_s seconds. *retry says whether another
 * attempt may help. */
static tagc_status attempt_once(tagc_etcd *c, const char *endpoint, const char *path,
                                const char *body, int idempotent, double attempt_s, json_t **reply,
                                int *retry) {
  char token[ETCD_TOKEN_MAX];
  tagc_etcd_request req;
  *retry = 0;
  tagc_status st = etcd_prepare(c, &req, endpoint, path, body, token);
  if (st != TAGC_OK) {
    *retry = st == TAGC_EPEER || st == TAGC_ETIMEDOUT || st == TAGC_EIO;
    return st;
  }
  if (req.timeout_s > attempt_s)
    req.timeout_s = attempt_s;
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
    /* With several members an attempt leaves half the time to the next one: a stopped member
     * must not use up a short call (a lease renewal) alone. With one, the attempt may take
     * it all: its open connection retransmits a lost packet sooner than a new one would. */
    double left = deadline - tagc_now();
    int more = c->n_endpoints > 1 && attempt + 1 < c->cfg.max_attempts;
    st = attempt_once(c, etcd_endpoint(c, ep), path, body, idempotent, more ? left / 2 : left,
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

