/* The etcd client's error paths against a scripted transport: every request takes the next
 * scripted answer (HTTP status + body, or a transport failure), and the script records what
 * the client sent so the checks can look at endpoints, paths, bodies and auth tokens. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/status.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "test.h"

enum { MAX_STEPS = 16 };

typedef struct step {
  tagc_status st;     /* transport result */
  long http;
  const char *body;   /* reply (request) or stream content (stream) */
  int hold;           /* stream: stay open after the content until the client closes it */
} step;

typedef struct script {
  pthread_mutex_t lock;
  step steps[MAX_STEPS];
  int n, next;
  /* what the client sent, per step */
  char endpoint[MAX_STEPS][64];
  char path[MAX_STEPS][64];
  char body[MAX_STEPS][512];
  char auth[MAX_STEPS][64];
} script;

static script S = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void script_reset(void) {
  pthread_mutex_lock(&S.lock);
  S.n = S.next = 0;
  pthread_mutex_unlock(&S.lock);
}

static void add(tagc_status st, long http, const char *body) {
  S.steps[S.n++] = (step){st, http, body, 0};
}

static void add_stream(const char *content, int hold) {
  S.steps[S.n++] = (step){TAGC_OK, 200, content, hold};
}

static int used(void) {
  pthread_mutex_lock(&S.lock);
  int n = S.next;
  pthread_mutex_unlock(&S.lock);
  return n;
}

/* Takes the next step and records the request; NULL when the script is exhausted. */
static const step *take(const tagc_etcd_request *req) {
  pthread_mutex_lock(&S.lock);
  const step *s = NULL;
  if (S.next < S.n) {
    int i = S.next++;
    snprintf(S.endpoint[i], sizeof S.endpoint[i], "%s", req->endpoint);
    snprintf(S.path[i], sizeof S.path[i], "%s", req->path);
    snprintf(S.body[i], sizeof S.body[i], "%s", req->body);
    snprintf(S.auth[i], sizeof S.auth[i], "%s", req->auth_token ? req->auth_token : "");
    s = &S.steps[i];
  }
  pthread_mutex_unlock(&S.lock);
  return s;
}

static tagc_status fake_request(void *ctx, const tagc_etcd_request *req, long *http, char **body,
                                size_t *len) {
  (void)ctx;
  const step *s = take(req);
  if (!s)
    return tagc_errorf(TAGC_EPEER, "script exhausted");
  if (s->st != TAGC_OK)
    return tagc_errorf(s->st, "scripted transport failure");
  *http = s->http;
  *body = strdup(s->body);
  *len = strlen(s->body);
  return TAGC_OK;
}

/* Feeds the content in 7-byte pieces (so messages straddle chunks), then closes or holds. */
static tagc_status fake_stream(void *ctx, const tagc_etcd_request *req, tagc_etcd_sink_fn sink,
                               void *arg, long *http) {
  (void)ctx;
  const step *s = take(req);
  if (!s) { /* nothing scripted: an idle open stream */
    while (sink(arg, NULL, 0) == 0)
      tagc_sleep(0.01);
    return TAGC_EABORTED;
  }
  *http = s->http;
  if (s->st != TAGC_OK)
    return tagc_errorf(s->st, "scripted stream failure");
  size_t n = strlen(s->body);
  for (size_t off = 0; off < n; off += 7) {
    if (sink(arg, s->body + off, n - off < 7 ? n - off : 7) != 0)
      return TAGC_EABORTED;
  }
  while (s->hold) {
    if (sink(arg, NULL, 0) != 0)
      return TAGC_EABORTED;
    tagc_sleep(0.01);
  }
  return TAGC_OK;
}

static const tagc_etcd_transport fake = {fake_request, fake_stream, NULL};

static tagc_etcd *client(const char *user) {
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = "http://a:1, http://b:2/";
  cfg.transport = &fake;
  cfg.backoff_initial_s = 0.001;
  cfg.backoff_max_s = 0.002;
  cfg.max_attempts = 3;
  cfg.user = user;
  cfg.password = user ? "secret" : NULL;
  tagc_etcd *c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  return c;
}

#define HDR "\"header\":{\"cluster_id\":\"1\",\"revision\":\"42\"}"
#define RANGE_ONE "{" HDR ",\"kvs\":[{\"key\":\"L2s=\",\"value\":\"dg==\",\"create_revision\":\"3\",\"mod_revision\":\"4\",\"version\":\"2\"}],\"count\":\"1\"}"

static void test_config(void) {
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  tagc_etcd *c;
  cfg.endpoints = "";
  CHECK_EQ_INT(tagc_etcd_create(&cfg, &c), TAGC_EINVAL);
  cfg.endpoints = "ftp://x:1";
  CHECK_EQ_INT(tagc_etcd_create(&cfg, &c), TAGC_EINVAL);
  cfg.endpoints = "http://x:1";
  cfg.max_attempts = 0;
  CHECK_EQ_INT(tagc_etcd_create(&cfg, &c), TAGC_EINVAL);
  cfg.max_attempts = 1;
  cfg.user = "u";
  CHECK_EQ_INT(tagc_etcd_create(&cfg, &c), TAGC_EINVAL);
}

static void test_retry_5xx(tagc_etcd *c) {
  script_reset();
  add(TAGC_OK, 503, "{\"error\":\"etcdserver: leader changed\",\"message\":\"etcdserver: leader changed\",\"code\":14}");
  add(TAGC_OK, 200, RANGE_ONE);
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "/k", NULL, &r));
  CHECK_EQ_INT(used(), 2);
  CHECK(r.n == 1 && strcmp((char *)r.kvs[0].key, "/k") == 0 && strcmp((char *)r.kvs[0].value, "v") == 0);
  CHECK_EQ_INT(r.revision, 42);
  tagc_etcd_range_result_free(&r);
  /* The retry moved to the next endpoint; the trailing '/' and space were trimmed. */
  CHECK_EQ_STR(S.endpoint[0], "http://a:1");
  CHECK_EQ_STR(S.endpoint[1], "http://b:2");
  CHECK_EQ_STR(S.path[1], "/v3/kv/range");
  CHECK(strstr(S.body[1], "\"key\":\"L2s=\"") != NULL);

  /* The endpoint that answered is tried first next time; a non-etcd 5xx page is retried. */
  script_reset();
  add(TAGC_OK, 502, "<html>bad gateway</html>");
  add(TAGC_OK, 200, "{" HDR "}");
  CHECK_OK(tagc_etcd_put(c, "/k", "v", 1, 0, NULL));
  CHECK_EQ_STR(S.endpoint[0], "http://b:2");
  CHECK_EQ_STR(S.endpoint[1], "http://a:1");

  /* Out of attempts: the last error comes back. */
  script_reset();
  for (int i = 0; i < 3; i++)
    add(TAGC_OK, 503, "{\"error\":\"etcdserver: no leader\",\"code\":14}");
  CHECK_EQ_INT(tagc_etcd_range(c, "/k", NULL, &r), TAGC_EPEER);
  CHECK(strstr(tagc_last_error(), "no leader") != NULL);
  CHECK_EQ_INT(used(), 3);
}

static void test_txn_not_repeated(tagc_etcd *c) {
  tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = "/k", .value = "v", .value_len = 1};
  tagc_etcd_txn_result t;
  script_reset();
  add(TAGC_OK, 503, "{\"error\":\"etcdserver: request timed out\",\"code\":14}");
  add(TAGC_OK, 200, "{" HDR ",\"succeeded\":true}");
  CHECK_EQ_INT(tagc_etcd_txn(c, NULL, 0, &put, 1, NULL, 0, &t), TAGC_EPEER);
  CHECK_EQ_INT(used(), 1); /* the outcome is unknown: no second attempt */

  script_reset();
  add(TAGC_ETIMEDOUT, 0, "");
  add(TAGC_OK, 200, "{" HDR ",\"succeeded\":true}");
  CHECK_EQ_INT(tagc_etcd_txn(c, NULL, 0, &put, 1, NULL, 0, &t), TAGC_ETIMEDOUT);
  CHECK_EQ_INT(used(), 1);

  /* Could not connect: nothing was sent, so trying elsewhere is safe. */
  script_reset();
  add(TAGC_EPEER, 0, "");
  add(TAGC_OK, 200, "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_put\":{\"header\":{}}},"
                    "{\"response_delete_range\":{\"deleted\":\"2\"}},{\"response_range\":{}}]}");
  CHECK_OK(tagc_etcd_txn(c, NULL, 0, &put, 1, NULL, 0, &t));
  CHECK_EQ_INT(used(), 2);
  CHECK_EQ_INT(t.succeeded, 1);
  CHECK_EQ_INT(t.n_responses, 3);
  if (t.n_responses == 3) {
    CHECK_EQ_INT(t.responses[0].type, TAGC_ETCD_OP_PUT);
    CHECK_EQ_INT(t.responses[1].deleted, 2);
    CHECK_EQ_INT(t.responses[2].range.n, 0);
  }
  tagc_etcd_txn_result_free(&t);
  tagc_etcd_txn_result_free(&t); /* idempotent */

  /* "succeeded" left out means false. */
  script_reset();
  add(TAGC_OK, 200, "{" HDR "}");
  CHECK_OK(tagc_etcd_txn(c, NULL, 0, &put, 1, NULL, 0, &t));
  CHECK_EQ_INT(t.succeeded, 0);
  CHECK_EQ_INT(t.revision, 42);
  tagc_etcd_txn_result_free(&t);
}

static void test_bad_replies(tagc_etcd *c) {
  static const char *const bad[] = {
      "garbage",
      "{\"header\":{\"revision\":\"4",                       /* truncated */
      "",                                                      /* empty */
      "[1,2]",                                                 /* not an object */
      "{" HDR ",\"kvs\":[{\"key\":\"!!!\"}]}",                 /* bad base64 */
      "{" HDR ",\"kvs\":{}}",                                  /* kvs not an array */
      "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"mod_revision\":\"12x\"}]}", /* bad number */
      "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"version\":true}]}",
      "{\"header\":[]}",
      "{\"result\":7}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    script_reset();
    add(TAGC_OK, 200, bad[i]);
    add(TAGC_OK, 200, RANGE_ONE);
    tagc_etcd_range_result r;
    tagc_status st = tagc_etcd_range(c, "/k", NULL, &r);
    CHECK_MSG(st == TAGC_EPROTO, "reply %zu gave %d, not TAGC_EPROTO", i, (int)st);
    CHECK_MSG(used() == 1, "reply %zu was retried", i); /* a malformed 200 is not retried */
  }
}

/* An --etcd URL that is a web server: the error is one line, the HTTP status and the page's
 * first words without its tags, cut with "...". */
static void test_html_reply(tagc_etcd *c) {
  static const char page[] =
      "<!DOCTYPE html>\n<html>\n<head><title>404 Not Found</title></head>\n<body>\n"
      "<h1>Not Found</h1>\n<p>The requested URL was not found on this server.</p>\n"
      "<p>Additionally, a 404 Not Found error was encountered while trying to use an "
      "ErrorDocument to handle the request.</p>\n<hr>\n<address>Apache Server</address>\n"
      "</body></html>\n";
  script_reset();
  add(TAGC_OK, 404, page);
  tagc_etcd_range_result r;
  CHECK_EQ_INT(tagc_etcd_range(c, "/k", NULL, &r), TAGC_EPROTO);
  const char *e = tagc_last_error();
  CHECK_MSG(strstr(e, "HTTP 404") && strstr(e, "404 Not Found Not Found The requested URL"),
            "error: %s", e);
  CHECK_MSG(!strchr(e, '\n') && !strchr(e, '<') && strlen(e) < 200 && strstr(e, "..."),
            "not one short line: %s", e);
}

static void test_timeouts(tagc_etcd *c) {
  script_reset();
  add(TAGC_ETIMEDOUT, 0, "");
  add(TAGC_OK, 200, RANGE_ONE);
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "/k", NULL, &r));
  tagc_etcd_range_result_free(&r);
  CHECK_EQ_INT(used(), 2);

  script_reset();
  for (int i = 0; i < 3; i++)
    add(TAGC_ETIMEDOUT, 0, "");
  CHECK_EQ_INT(tagc_etcd_range(c, "/k", NULL, &r), TAGC_ETIMEDOUT);
  CHECK_EQ_INT(used(), 3);
}

/* An endpoint that timed out is no longer preferred, even when the call was not retried (out
 * of attempts, or a lease renewal whose deadline the attempt used up): the next call starts
 * on the next endpoint, so a stopped member does not take every call's deadline. */
static void test_timeout_moves_preference(void) {
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = "http://a:1,http://b:2";
  cfg.transport = &fake;
  cfg.max_attempts = 1; /* as a renewal whose deadline one attempt used up */
  tagc_etcd *c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  if (!c)
    return;
  script_reset();
  add(TAGC_ETIMEDOUT, 0, "");
  CHECK_EQ_INT(tagc_etcd_put(c, "/k", "v", 1, 0, NULL), TAGC_ETIMEDOUT);
  CHECK_EQ_INT(used(), 1);
  CHECK_EQ_STR(S.endpoint[0], "http://a:1");
  script_reset();
  add(TAGC_OK, 200, "{" HDR "}");
  CHECK_OK(tagc_etcd_put(c, "/k", "v", 1, 0, NULL));
  CHECK_EQ_STR(S.endpoint[0], "http://b:2");
  tagc_etcd_destroy(c);
}

static void test_numbers_and_leases(tagc_etcd *c) {
  int64_t id = 0, ttl = 0, granted = 0;
  script_reset();
  add(TAGC_OK, 200, "{" HDR ",\"ID\":\"7587823380406781187\",\"TTL\":\"10\"}");
  CHECK_OK(tagc_etcd_lease_grant(c, 10, &id, &ttl));
  CHECK(id == INT64_C(7587823380406781187));
  CHECK_EQ_INT(ttl, 10);
  CHECK(strstr(S.body[0], "\"TTL\":\"10\"") != NULL);

  script_reset();
  add(TAGC_OK, 200, "{" HDR ",\"ID\":9,\"TTL\":3}"); /* plain JSON integers are fine too */
  CHECK_OK(tagc_etcd_lease_grant(c, 3, &id, &ttl));
  CHECK(id == 9 && ttl == 3);

  /* Keepalive of a lost lease: the gateway leaves TTL out. */
  script_reset();
  add(TAGC_OK, 200, "{\"result\":{" HDR ",\"ID\":\"9\"}}");
  CHECK_EQ_INT(tagc_etcd_lease_keepalive(c, 9, &ttl), TAGC_ENOTFOUND);
  CHECK_EQ_STR(S.path[0], "/v3/lease/keepalive");
  script_reset();
  add(TAGC_OK, 200, "{\"result\":{" HDR ",\"ID\":\"9\",\"TTL\":\"4\"}}");
  CHECK_OK(tagc_etcd_lease_keepalive(c, 9, &ttl));
  CHECK_EQ_INT(ttl, 4);
  script_reset();
  add(TAGC_OK, 200, "{" HDR ",\"ID\":\"9\",\"TTL\":\"-1\"}");
  CHECK_EQ_INT(tagc_etcd_lease_ttl(c, 9, &ttl, &granted), TAGC_ENOTFOUND);
  script_reset();
  add(TAGC_OK, 404, "{\"error\":\"etcdserver: requested lease not found\",\"message\":\"etcdserver: requested lease not found\",\"code\":5}");
  CHECK_EQ_INT(tagc_etcd_lease_revoke(c, 9), TAGC_ENOTFOUND);
  CHECK(strstr(tagc_last_error(), "requested lease not found") != NULL);
  CHECK_EQ_INT(used(), 1); /* a definite answer is not retried */

  /* Big revisions stay exact (no detour through double). */
  script_reset();
  add(TAGC_OK, 200, "{\"header\":{\"revision\":\"9223372036854775807\"},\"kvs\":[{\"key\":\"YQ==\","
                    "\"create_revision\":\"9007199254740993\",\"lease\":\"-5\"}],\"more\":true}");
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "a", NULL, &r));
  CHECK(r.revision == INT64_MAX);
  CHECK(r.n == 1 && r.kvs[0].create_revision == INT64_C(9007199254740993));
  CHECK(r.n == 1 && r.kvs[0].lease == -5 && r.kvs[0].value_len == 0 && r.kvs[0].mod_revision == 0);
  CHECK_EQ_INT(r.more, 1);
  CHECK_EQ_INT(r.count, 0); /* left out = 0 */
  tagc_etcd_range_result_free(&r);

  /* A reply with only a header: no keys. */
  script_reset();
  add(TAGC_OK, 200, "{" HDR "}");
  CHECK_OK(tagc_etcd_range(c, "a", NULL, &r));
  CHECK(r.n == 0 && r.kvs == NULL && r.more == 0);
  tagc_etcd_range_result_free(&r);
  script_reset();
  add(TAGC_OK, 200, "{" HDR "}");
  char *v = NULL;
  CHECK_EQ_INT(tagc_etcd_get(c, "a", &v, NULL, NULL), TAGC_ENOTFOUND);
  CHECK(v == NULL);
}

static void test_auth(void) {
  tagc_etcd *c = client("root");
  if (!c)
    return;
  script_reset();
  add(TAGC_OK, 200, "{" HDR ",\"token\":\"tok1\"}");
  add(TAGC_OK, 200, "{" HDR "}");
  add(TAGC_OK, 401, "{\"error\":\"etcdserver: invalid auth token\",\"code\":16}");
  add(TAGC_OK, 200, "{" HDR ",\"token\":\"tok2\"}");
  add(TAGC_OK, 200, "{" HDR "}");
  CHECK_OK(tagc_etcd_put(c, "/k", "v", 1, 0, NULL));
  CHECK_EQ_STR(S.path[0], "/v3/auth/authenticate");
  CHECK(strstr(S.body[0], "\"password\":\"secret\"") != NULL);
  CHECK_EQ_STR(S.auth[1], "tok1");
  CHECK_OK(tagc_etcd_put(c, "/k", "v", 1, 0, NULL));
  CHECK_EQ_INT(used(), 5);
  CHECK_EQ_STR(S.path[3], "/v3/auth/authenticate");
  CHECK_EQ_STR(S.auth[4], "tok2");
  script_reset();
  add(TAGC_OK, 400, "{\"error\":\"etcdserver: authentication failed, invalid user ID or password\",\"code\":3}");
  tagc_etcd_destroy(c);
  c = client("root");
  CHECK_EQ_INT(tagc_etcd_put(c, "/k", "v", 1, 0, NULL), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "authentication failed") != NULL);
  tagc_etcd_destroy(c);
}

/* Watch collector. */
typedef struct seen {
  pthread_mutex_t lock;
  int events, resyncs;
  int64_t revs[16];
  int types[16];
  int64_t compact_revision, snapshot_revision;
  size_t snapshot_n;
  char reason[64];
} seen;

static int collect(void *arg, const tagc_etcd_watch_msg *m) {
  seen *s = arg;
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < m->n_events && s->events < 16; i++, s->events++) {
    s->revs[s->events] = m->events[i].kv.mod_revision;
    s->types[s->events] = m->events[i].type;
  }
  if (m->kind == TAGC_ETCD_WATCH_RESYNC) {
    s->resyncs++;
    s->compact_revision = m->compact_revision;
    s->snapshot_revision = m->snapshot->revision;
    s->snapshot_n = m->snapshot->n;
    snprintf(s->reason, sizeof s->reason, "%s", m->cancel_reason);
  }
  pthread_mutex_unlock(&s->lock);
  return 0;
}

static int wait_for(seen *s, int events, int resyncs, int steps) {
  double deadline = tagc_now() + 5;
  for (;;) {
    pthread_mutex_lock(&s->lock);
    int ok = s->events >= events && s->resyncs >= resyncs && used() >= steps;
    pthread_mutex_unlock(&s->lock);
    if (ok)
      return 1;
    if (tagc_now() > deadline)
      return 0;
    tagc_sleep(0.01);
  }
}

#define CREATED "{\"result\":{" HDR ",\"created\":true}}\n"
#define EV(rev, extra) "{\"result\":{" HDR ",\"events\":[{" extra "\"kv\":{\"key\":\"L3cvYQ==\",\"mod_revision\":\"" #rev "\"}}]}}\n"

static void test_watch(tagc_etcd *c) {
  script_reset();
  /* 1: two events, then the connection drops. */
  add_stream(CREATED EV(5, ) EV(6, "\"type\":\"DELETE\","), 0);
  /* 2: resumed at 7, then canceled by a compaction. */
  add_stream(CREATED "{\"result\":{\"header\":{},\"canceled\":true,\"compact_revision\":\"8\"}}\n", 1);
  /* 3: the re-read. */
  add(TAGC_OK, 200, "{\"header\":{\"revision\":\"10\"},\"kvs\":[{\"key\":\"L3cvYg==\",\"value\":\"eA==\"}],\"count\":\"1\"}");
  /* 4: resumed after the re-read; garbage breaks the stream. */
  add_stream(CREATED EV(11, ) "not json\n", 1);
  /* 5: an error message in the stream. */
  add_stream("{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"no leader\"}}\n", 1);
  /* 6: a truncated last message when the server closes. */
  add_stream(CREATED EV(12, ) "{\"result\":{\"events\":[", 0);
  /* 7: canceled without compaction. */
  add_stream("{\"result\":{" HDR ",\"canceled\":true,\"cancel_reason\":\"permission denied\"}}\n", 1);
  add(TAGC_OK, 200, "{\"header\":{\"revision\":\"20\"}}");
  /* 8: held open: the idle stream. */
  add_stream(CREATED, 1);

  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  tagc_etcd_watch_opts o = {.prefix = 1, .start_revision = 5};
  CHECK_OK(tagc_etcd_watch_start(c, "/w/", &o, collect, &s, &w));
  CHECK_MSG(wait_for(&s, 4, 2, 9), "watch script stalled at step %d (%d events, %d resyncs)", used(),
            s.events, s.resyncs);
  double t0 = tagc_now();
  tagc_etcd_watch_stop(w);
  CHECK(tagc_now() - t0 < 1);

  CHECK_EQ_INT(s.events, 4);
  CHECK(s.revs[0] == 5 && s.revs[1] == 6 && s.revs[2] == 11 && s.revs[3] == 12);
  CHECK(s.types[0] == TAGC_ETCD_PUT && s.types[1] == TAGC_ETCD_DELETE);
  CHECK_EQ_INT(s.resyncs, 2);
  CHECK_EQ_INT(s.snapshot_revision, 20);
  CHECK_EQ_STR(s.reason, "permission denied");
  CHECK(strstr(S.body[0], "\"start_revision\":\"5\"") != NULL);
  CHECK(strstr(S.body[0], "\"range_end\":\"L3cw\"") != NULL); /* "/w0": the prefix end */
  CHECK(strstr(S.body[1], "\"start_revision\":\"7\"") != NULL);
  CHECK_EQ_STR(S.path[2], "/v3/kv/range");
  CHECK(strstr(S.body[3], "\"start_revision\":\"11\"") != NULL);
  CHECK(strstr(S.body[4], "\"start_revision\":\"12\"") != NULL);
  CHECK(strstr(S.body[5], "\"start_revision\":\"12\"") != NULL);
  CHECK(strstr(S.body[6], "\"start_revision\":\"13\"") != NULL);
  CHECK(strstr(S.body[8], "\"start_revision\":\"21\"") != NULL);
}

static void test_watch_first_compaction(tagc_etcd *c) {
  script_reset();
  add_stream(CREATED "{\"result\":{\"header\":{\"revision\":\"9\"},\"canceled\":true,\"compact_revision\":\"8\"}}\n", 1);
  add(TAGC_OK, 200, "{\"header\":{\"revision\":\"9\"},\"kvs\":[{\"key\":\"L3cvYg==\"},{\"key\":\"L3cvYw==\"}]}");
  add_stream(CREATED, 1);
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  tagc_etcd_watch_opts o = {.prefix = 1, .start_revision = 2};
  CHECK_OK(tagc_etcd_watch_start(c, "/w/", &o, collect, &s, &w));
  CHECK(wait_for(&s, 0, 1, 3));
  tagc_etcd_watch_stop(w);
  CHECK_EQ_INT(s.compact_revision, 8);
  CHECK_EQ_INT(s.snapshot_n, 2);
  CHECK(strstr(S.body[2], "\"start_revision\":\"10\"") != NULL);
  CHECK_EQ_INT(tagc_etcd_watch_start(c, "/w/", &(tagc_etcd_watch_opts){.start_revision = -1}, collect, &s, &w),
               TAGC_EINVAL);
}

/* A watch whose token expires authenticates again and carries the new token. */
static void test_watch_auth(void) {
  tagc_etcd *c = client("root");
  if (!c)
    return;
  script_reset();
  add(TAGC_OK, 200, "{" HDR ",\"token\":\"tok1\"}");
  add_stream("{\"error\":{\"grpc_code\":16,\"http_code\":401,\"message\":\"etcdserver: invalid auth token\"}}\n", 1);
  add(TAGC_OK, 200, "{" HDR ",\"token\":\"tok2\"}");
  add_stream(CREATED EV(3, ), 1);
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  CHECK_OK(tagc_etcd_watch_start(c, "/w/a", NULL, collect, &s, &w));
  CHECK(wait_for(&s, 1, 0, 4));
  tagc_etcd_watch_stop(w);
  CHECK_EQ_STR(S.auth[1], "tok1");
  CHECK_EQ_STR(S.path[2], "/v3/auth/authenticate");
  CHECK_EQ_STR(S.auth[3], "tok2");
  CHECK(strstr(S.body[3], "range_end") == NULL); /* a single key, not a prefix */
  tagc_etcd_destroy(c);
}

typedef struct lost {
  pthread_mutex_t lock;
  int calls;
  tagc_status why;
  double at;
} lost;

static void on_lost(void *arg, int64_t lease, tagc_status why) {
  lost *l = arg;
  (void)lease;
  pthread_mutex_lock(&l->lock);
  l->calls++;
  l->why = why;
  l->at = tagc_now();
  pthread_mutex_unlock(&l->lock);
}

static int wait_lost(lost *l, double timeout_s) {
  double deadline = tagc_now() + timeout_s;
  for (;;) {
    pthread_mutex_lock(&l->lock);
    int calls = l->calls;
    pthread_mutex_unlock(&l->lock);
    if (calls || tagc_now() > deadline)
      return calls;
    tagc_sleep(0.01);
  }
}

/* The keeper: renewals at TTL/3; a lease the server no longer knows is reported at once; a
 * server that cannot be reached is reported once the TTL has passed without a renewal. */
static void test_keeper(tagc_etcd *c) {
  script_reset();
  add(TAGC_OK, 200, "{\"result\":{" HDR ",\"ID\":\"9\",\"TTL\":\"1\"}}");
  add(TAGC_OK, 200, "{\"result\":{" HDR ",\"ID\":\"9\"}}");
  lost l = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_keeper *k = NULL;
  double t0 = tagc_now();
  CHECK_OK(tagc_etcd_keeper_start(c, 9, 1, on_lost, &l, &k));
  CHECK(wait_lost(&l, 3));
  tagc_etcd_keeper_stop(k);
  CHECK_EQ_INT(l.calls, 1);
  CHECK_EQ_INT(l.why, TAGC_ENOTFOUND);
  CHECK_NEAR(l.at - t0, 2.0 / 3.0, 0.3); /* two renewals, a third of the TTL apart */
  CHECK_EQ_STR(S.path[1], "/v3/lease/keepalive");
  CHECK(strstr(S.body[1], "\"ID\":\"9\"") != NULL);

  script_reset(); /* nothing scripted: every renewal fails to connect */
  l.calls = 0;
  t0 = tagc_now();
  CHECK_OK(tagc_etcd_keeper_start(c, 9, 1, on_lost, &l, &k));
  CHECK(wait_lost(&l, 3));
  tagc_etcd_keeper_stop(k);
  CHECK_EQ_INT(l.calls, 1);
  CHECK_EQ_INT(l.why, TAGC_ETIMEDOUT);
  CHECK_NEAR(l.at - t0, 1.0, 0.5);

  /* Stopping is prompt even in the middle of a long period. */
  l.calls = 0;
  CHECK_OK(tagc_etcd_keeper_start(c, 9, 60, on_lost, &l, &k));
  t0 = tagc_now();
  tagc_etcd_keeper_stop(k);
  CHECK(tagc_now() - t0 < 0.5);
  CHECK_EQ_INT(l.calls, 0);
  CHECK_EQ_INT(tagc_etcd_keeper_start(c, 9, 0, on_lost, &l, &k), TAGC_EINVAL);
}

/* The patient keeper: an unreachable server for three TTLs is no lost lease (etcd may still
 * hold it when it answers again); renewals resume; only "not found" is a loss. */
static void test_patient_keeper(tagc_etcd *c) {
  script_reset(); /* nothing scripted: every renewal fails to connect */
  lost l = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_keeper *k = NULL;
  CHECK_OK(tagc_etcd_keeper_start_patient(c, 9, 1, on_lost, &l, &k));
  CHECK_EQ_INT(wait_lost(&l, 3), 0);
  CHECK(tagc_etcd_keeper_silence_s(k) > 2.5);
  int tried = used();
  CHECK_MSG(tried == 0, "%d scripted steps used", tried); /* failures to connect take none */
  pthread_mutex_lock(&S.lock);
  add(TAGC_OK, 200, "{\"result\":{" HDR ",\"ID\":\"9\",\"TTL\":\"1\"}}");
  add(TAGC_OK, 200, "{\"result\":{" HDR ",\"ID\":\"9\"}}");
  pthread_mutex_unlock(&S.lock);
  CHECK(wait_lost(&l, 3));
  tagc_etcd_keeper_stop(k);
  CHECK_EQ_INT(l.calls, 1);
  CHECK_EQ_INT(l.why, TAGC_ENOTFOUND);
  CHECK_EQ_INT(used(), 2); /* a renewal succeeded before the lease was found gone */
}

int main(void) {
  test_config();
  tagc_etcd *c = client(NULL);
  if (!c)
    return TEST_END();
  test_retry_5xx(c);
  test_txn_not_repeated(c);
  test_bad_replies(c);
  test_html_reply(c);
  test_timeouts(c);
  test_timeout_moves_preference();
  test_numbers_and_leases(c);
  test_watch(c);
  test_watch_first_compaction(c);
  test_keeper(c);
  test_patient_keeper(c);
  tagc_etcd_destroy(c);
  test_auth();
  test_watch_auth();
  return TEST_END();
}
