/* The etcd client against a real etcd server started on loopback by the test harness.
 * `test_etcd_real tls` runs only the TLS section (its own CTest entry, test_etcd_real_tls), on
 * a second server with throw-away certificates; it exits 77 (skipped, with the reason) where
 * no such server can be started. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/status.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "etcd_server.h"
#include "test.h"

static tagc_test_etcd server;

static tagc_etcd *connect_to(const char *endpoints) {
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = endpoints;
  cfg.request_timeout_s = 2;
  cfg.deadline_s = 10;
  cfg.max_attempts = 20;
  cfg.backoff_max_s = 0.2;
  tagc_etcd *c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  return c;
}

static int key_exists(tagc_etcd *c, const char *key) {
  tagc_etcd_range_result r;
  if (tagc_etcd_range(c, key, NULL, &r) != TAGC_OK)
    return -1;
  int n = (int)r.n;
  tagc_etcd_range_result_free(&r);
  return n;
}

static void test_kv(tagc_etcd *c) {
  int64_t rev1 = 0, rev2 = 0, rev3 = 0;
  CHECK_OK(tagc_etcd_put(c, "/t/kv/a", "1", 1, 0, &rev1));
  CHECK_OK(tagc_etcd_put(c, "/t/kv/b", "22", 2, 0, &rev2));
  CHECK_OK(tagc_etcd_put(c, "/t/kv/a", "333", 3, 0, &rev3));
  CHECK_OK(tagc_etcd_put(c, "/t/kv0", "other", 5, 0, NULL));
  CHECK(rev1 > 0 && rev2 == rev1 + 1 && rev3 == rev2 + 1);

  char *v = NULL;
  size_t len = 0;
  int64_t mod = 0;
  CHECK_OK(tagc_etcd_get(c, "/t/kv/a", &v, &len, &mod));
  CHECK_EQ_STR(v, "333");
  CHECK_EQ_INT(len, 3);
  CHECK_EQ_INT(mod, rev3);
  free(v);
  CHECK_EQ_INT(tagc_etcd_get(c, "/t/kv/missing", &v, &len, NULL), TAGC_ENOTFOUND);

  tagc_etcd_range_result r;
  tagc_etcd_range_opts prefix = {.prefix = 1};
  CHECK_OK(tagc_etcd_range(c, "/t/kv/", &prefix, &r));
  CHECK_EQ_INT(r.n, 2); /* "/t/kv0" is not under "/t/kv/" */
  if (r.n == 2) {
    CHECK_EQ_STR((char *)r.kvs[0].key, "/t/kv/a");
    CHECK_EQ_INT(r.kvs[0].create_revision, rev1);
    CHECK_EQ_INT(r.kvs[0].version, 2);
    CHECK_EQ_STR((char *)r.kvs[1].key, "/t/kv/b");
    CHECK_EQ_STR((char *)r.kvs[1].value, "22");
  }
  CHECK(r.revision >= rev3);
  tagc_etcd_range_result_free(&r);

  /* [key, range_end): "/t/kv/b" up to "/t/kv0" leaves "/t/kv/a" out (and wins over prefix) */
  tagc_etcd_range_opts span = {.prefix = 1, .range_end = "/t/kv0"};
  CHECK_OK(tagc_etcd_range(c, "/t/kv/b", &span, &r));
  CHECK(r.n == 1 && strcmp((char *)r.kvs[0].key, "/t/kv/b") == 0);
  tagc_etcd_range_result_free(&r);

  tagc_etcd_range_opts limited = {.prefix = 1, .limit = 1};
  CHECK_OK(tagc_etcd_range(c, "/t/kv/", &limited, &r));
  CHECK_EQ_INT(r.n, 1);
  CHECK_EQ_INT(r.count, 2);
  CHECK_EQ_INT(r.more, 1);
  tagc_etcd_range_result_free(&r);

  tagc_etcd_range_opts old = {.revision = rev1};
  CHECK_OK(tagc_etcd_range(c, "/t/kv/a", &old, &r));
  CHECK(r.n == 1 && strcmp((char *)r.kvs[0].value, "1") == 0);
  tagc_etcd_range_result_free(&r);

  tagc_etcd_range_opts future = {.revision = rev3 + 1000};
  CHECK_EQ_INT(tagc_etcd_range(c, "/t/kv/a", &future, &r), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "future revision") != NULL);

  /* Binary values survive base64 both ways. */
  const unsigned char bin[5] = {0, 0xff, '\n', 0x80, 0};
  CHECK_OK(tagc_etcd_put(c, "/t/kv/bin", bin, sizeof bin, 0, NULL));
  CHECK_OK(tagc_etcd_range(c, "/t/kv/bin", NULL, &r));
  CHECK(r.n == 1 && r.kvs[0].value_len == 5 && memcmp(r.kvs[0].value, bin, 5) == 0);
  tagc_etcd_range_result_free(&r);

  int64_t deleted = 0;
  CHECK_OK(tagc_etcd_delete(c, "/t/kv/", 1, &deleted));
  CHECK_EQ_INT(deleted, 3);
  CHECK_EQ_INT(key_exists(c, "/t/kv/a"), 0);
  CHECK_EQ_INT(key_exists(c, "/t/kv0"), 1);
}

static void test_txn(tagc_etcd *c) {
  tagc_etcd_compare absent = {.key = "/t/txn/k", .target = TAGC_ETCD_CREATE, .result = TAGC_ETCD_EQUAL};
  tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = "/t/txn/k", .value = "first", .value_len = 5};
  tagc_etcd_op get = {.type = TAGC_ETCD_OP_RANGE, .key = "/t/txn/k"};
  tagc_etcd_txn_result t;
  CHECK_OK(tagc_etcd_txn(c, &absent, 1, &put, 1, &get, 1, &t));
  CHECK_EQ_INT(t.succeeded, 1);
  CHECK(t.n_responses == 1 && t.responses[0].type == TAGC_ETCD_OP_PUT);
  int64_t created = t.revision;
  tagc_etcd_txn_result_free(&t);

  put.value = "second";
  put.value_len = 6;
  CHECK_OK(tagc_etcd_txn(c, &absent, 1, &put, 1, &get, 1, &t));
  CHECK_EQ_INT(t.succeeded, 0);
  CHECK(t.n_responses == 1 && t.responses[0].type == TAGC_ETCD_OP_RANGE);
  if (t.n_responses == 1 && t.responses[0].range.n == 1) {
    CHECK_EQ_STR((char *)t.responses[0].range.kvs[0].value, "first");
    CHECK_EQ_INT(t.responses[0].range.kvs[0].create_revision, created);
  }
  tagc_etcd_txn_result_free(&t);

  /* Fencing: guarded by the create revision, a delete + put succeed only with the right one. */
  tagc_etcd_compare fence = {.key = "/t/txn/k", .target = TAGC_ETCD_CREATE, .result = TAGC_ETCD_EQUAL,
                             .number = created};
  tagc_etcd_op ops[2] = {{.type = TAGC_ETCD_OP_PUT, .key = "/t/txn/x", .value = "v", .value_len = 1},
                         {.type = TAGC_ETCD_OP_DELETE, .key = "/t/txn/k"}};
  CHECK_OK(tagc_etcd_txn(c, &fence, 1, ops, 2, NULL, 0, &t));
  CHECK_EQ_INT(t.succeeded, 1);
  CHECK(t.n_responses == 2 && t.responses[1].type == TAGC_ETCD_OP_DELETE && t.responses[1].deleted == 1);
  tagc_etcd_txn_result_free(&t);
  CHECK_OK(tagc_etcd_txn(c, &fence, 1, ops, 1, NULL, 0, &t));
  CHECK_EQ_INT(t.succeeded, 0);
  CHECK_EQ_INT(t.n_responses, 0);
  tagc_etcd_txn_result_free(&t);

  tagc_etcd_compare value_cmp = {.key = "/t/txn/x", .target = TAGC_ETCD_VALUE, .result = TAGC_ETCD_EQUAL,
                                 .value = "v", .value_len = 1};
  CHECK_OK(tagc_etcd_txn(c, &value_cmp, 1, NULL, 0, NULL, 0, &t));
  CHECK_EQ_INT(t.succeeded, 1);
  tagc_etcd_txn_result_free(&t);
}

typedef struct lost_flag {
  pthread_mutex_t lock;
  int lost;
  tagc_status why;
} lost_flag;

static void on_lost(void *arg, int64_t lease, tagc_status why) {
  (void)lease;
  lost_flag *f = arg;
  pthread_mutex_lock(&f->lock);
  f->lost = 1;
  f->why = why;
  pthread_mutex_unlock(&f->lock);
}

/* Polls until the key's presence equals want, up to timeout_s. */
static int wait_key(tagc_etcd *c, const char *key, int want, double timeout_s) {
  double deadline = tagc_now() + timeout_s;
  while (tagc_now() < deadline) {
    if (key_exists(c, key) == want)
      return 1;
    tagc_sleep(0.05);
  }
  return 0;
}

static void test_lease(tagc_etcd *c) {
  int64_t id = 0, ttl = 0, left = 0, granted = 0;
  CHECK_OK(tagc_etcd_lease_grant(c, 5, &id, &ttl));
  CHECK(id != 0);
  CHECK_EQ_INT(ttl, 5);
  CHECK_OK(tagc_etcd_put(c, "/t/lease/k", "x", 1, id, NULL));
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "/t/lease/k", NULL, &r));
  CHECK(r.n == 1 && r.kvs[0].lease == id);
  tagc_etcd_range_result_free(&r);
  CHECK_OK(tagc_etcd_lease_keepalive(c, id, &left));
  CHECK_EQ_INT(left, 5);
  CHECK_OK(tagc_etcd_lease_ttl(c, id, &left, &granted));
  CHECK(left > 0 && left <= 5);
  CHECK_EQ_INT(granted, 5);

  CHECK_OK(tagc_etcd_lease_revoke(c, id));
  CHECK_EQ_INT(key_exists(c, "/t/lease/k"), 0);
  CHECK_EQ_INT(tagc_etcd_lease_keepalive(c, id, &left), TAGC_ENOTFOUND);
  CHECK_EQ_INT(tagc_etcd_lease_ttl(c, id, &left, NULL), TAGC_ENOTFOUND);
  CHECK_EQ_INT(tagc_etcd_lease_revoke(c, id), TAGC_ENOTFOUND);
  CHECK_EQ_INT(tagc_etcd_put(c, "/t/lease/k", "x", 1, id, NULL), TAGC_ENOTFOUND);

  /* A 2 s lease kept alive by a keeper outlives its TTL; without the keeper it expires. */
  CHECK_OK(tagc_etcd_lease_grant(c, 2, &id, &ttl));
  CHECK_OK(tagc_etcd_put(c, "/t/lease/kept", "x", 1, id, NULL));
  lost_flag f = {PTHREAD_MUTEX_INITIALIZER, 0, TAGC_OK};
  tagc_etcd_keeper *k = NULL;
  CHECK_OK(tagc_etcd_keeper_start(c, id, ttl, on_lost, &f, &k));
  tagc_sleep(3);
  CHECK_EQ_INT(key_exists(c, "/t/lease/kept"), 1);
  tagc_etcd_keeper_stop(k);
  CHECK_EQ_INT(f.lost, 0);
  CHECK_MSG(wait_key(c, "/t/lease/kept", 0, 8), "key of an expired lease still present after 8 s");

  /* A keeper whose lease is revoked reports it lost. */
  CHECK_OK(tagc_etcd_lease_grant(c, 2, &id, &ttl));
  CHECK_OK(tagc_etcd_keeper_start(c, id, ttl, on_lost, &f, &k));
  CHECK_OK(tagc_etcd_lease_revoke(c, id));
  double deadline = tagc_now() + 5;
  int lost = 0;
  while (!lost && tagc_now() < deadline) {
    tagc_sleep(0.05);
    pthread_mutex_lock(&f.lock);
    lost = f.lost;
    pthread_mutex_unlock(&f.lock);
  }
  tagc_etcd_keeper_stop(k);
  CHECK_EQ_INT(lost, 1);
  CHECK_EQ_INT(f.why, TAGC_ENOTFOUND);
}

/* Collects watch messages for the checks. */
typedef struct seen {
  pthread_mutex_t lock;
  int n;
  char keys[64][32];
  char values[64][16];
  int types[64];
  int64_t revs[64];
  int has_prev[64];
  int resyncs;
  int64_t compact_revision;
  size_t snapshot_n;
} seen;

static int collect(void *arg, const tagc_etcd_watch_msg *m) {
  seen *s = arg;
  pthread_mutex_lock(&s->lock);
  if (m->kind == TAGC_ETCD_WATCH_RESYNC) {
    s->resyncs++;
    s->compact_revision = m->compact_revision;
    s->snapshot_n = m->snapshot->n;
  }
  for (size_t i = 0; i < m->n_events && s->n < 64; i++, s->n++) {
    snprintf(s->keys[s->n], sizeof s->keys[0], "%s", (char *)m->events[i].kv.key);
    snprintf(s->values[s->n], sizeof s->values[0], "%s", (char *)m->events[i].kv.value);
    s->types[s->n] = m->events[i].type;
    s->revs[s->n] = m->events[i].kv.mod_revision;
    s->has_prev[s->n] = m->events[i].has_prev;
  }
  pthread_mutex_unlock(&s->lock);
  return 0;
}

static int wait_seen(seen *s, int n, int resyncs, double timeout_s) {
  double deadline = tagc_now() + timeout_s;
  for (;;) {
    pthread_mutex_lock(&s->lock);
    int ok = s->n >= n && s->resyncs >= resyncs;
    pthread_mutex_unlock(&s->lock);
    if (ok)
      return 1;
    if (tagc_now() > deadline)
      return 0;
    tagc_sleep(0.02);
  }
}

static void test_watch(tagc_etcd *c) {
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  tagc_etcd_watch_opts o = {.prefix = 1, .prev_kv = 1};
  CHECK_OK(tagc_etcd_watch_start(c, "/t/w/", &o, collect, &s, &w));
  tagc_sleep(0.3); /* "from now": let the watch be created before the writes */
  CHECK_OK(tagc_etcd_put(c, "/t/w/a", "1", 1, 0, NULL));
  CHECK_OK(tagc_etcd_put(c, "/t/w/b", "2", 1, 0, NULL));
  CHECK_OK(tagc_etcd_put(c, "/t/other", "x", 1, 0, NULL));
  CHECK_OK(tagc_etcd_delete(c, "/t/w/a", 0, NULL));
  CHECK_MSG(wait_seen(&s, 3, 0, 5), "watch saw %d of 3 events", s.n);
  pthread_mutex_lock(&s.lock);
  CHECK_EQ_INT(s.n, 3);
  CHECK_EQ_STR(s.keys[0], "/t/w/a");
  CHECK_EQ_INT(s.types[0], TAGC_ETCD_PUT);
  CHECK_EQ_STR(s.keys[1], "/t/w/b");
  CHECK_EQ_STR(s.keys[2], "/t/w/a");
  CHECK_EQ_INT(s.types[2], TAGC_ETCD_DELETE);
  CHECK_EQ_INT(s.has_prev[2], 1);
  CHECK(s.revs[0] < s.revs[1] && s.revs[1] < s.revs[2]);
  int64_t last = s.revs[2];
  pthread_mutex_unlock(&s.lock);
  CHECK_EQ_INT(tagc_etcd_watch_revision(w), last);

  /* The server goes away and comes back: the watch reconnects and resumes after the last
   * revision it reported, without repeating or losing events. */
  CHECK_OK(tagc_test_etcd_kill(&server));
  tagc_sleep(0.3);
  CHECK_OK(tagc_test_etcd_restart(&server));
  CHECK_OK(tagc_etcd_put(c, "/t/w/c", "3", 1, 0, NULL));
  CHECK_OK(tagc_etcd_put(c, "/t/w/d", "4", 1, 0, NULL));
  CHECK_MSG(wait_seen(&s, 5, 0, 10), "after the restart the watch saw %d of 5 events", s.n);
  tagc_sleep(0.2);
  pthread_mutex_lock(&s.lock);
  CHECK_EQ_INT(s.n, 5);
  CHECK_EQ_STR(s.keys[3], "/t/w/c");
  CHECK_EQ_STR(s.keys[4], "/t/w/d");
  CHECK(s.revs[3] > last && s.revs[4] > s.revs[3]);
  pthread_mutex_unlock(&s.lock);
  tagc_etcd_watch_stop(w);
}

static void test_watch_compacted(tagc_etcd *c) {
  int64_t first = 0, rev = 0;
  CHECK_OK(tagc_etcd_put(c, "/t/wc/a", "1", 1, 0, &first));
  CHECK_OK(tagc_etcd_put(c, "/t/wc/a", "2", 1, 0, NULL));
  CHECK_OK(tagc_etcd_put(c, "/t/wc/b", "3", 1, 0, &rev));
  CHECK_OK(tagc_etcd_compact(c, rev));

  /* Watching from a compacted revision: the server cancels, the client re-reads. */
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  tagc_etcd_watch_opts o = {.prefix = 1, .start_revision = first};
  CHECK_OK(tagc_etcd_watch_start(c, "/t/wc/", &o, collect, &s, &w));
  CHECK_MSG(wait_seen(&s, 0, 1, 5), "no resync after a compacted start revision");
  pthread_mutex_lock(&s.lock);
  CHECK_EQ_INT(s.compact_revision, rev);
  CHECK_EQ_INT(s.snapshot_n, 2);
  CHECK_EQ_INT(s.n, 0);
  pthread_mutex_unlock(&s.lock);
  CHECK(tagc_etcd_watch_revision(w) >= rev);
  CHECK_OK(tagc_etcd_put(c, "/t/wc/c", "4", 1, 0, NULL));
  CHECK_MSG(wait_seen(&s, 1, 1, 5), "no event after the resync");
  pthread_mutex_lock(&s.lock);
  CHECK_EQ_STR(s.keys[0], "/t/wc/c");
  pthread_mutex_unlock(&s.lock);
  tagc_etcd_watch_stop(w);
}

static void test_watch_filter(tagc_etcd *c) {
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  int64_t rev = 0;
  CHECK_OK(tagc_etcd_put(c, "/t/wf", "1", 1, 0, &rev));
  CHECK_OK(tagc_etcd_put(c, "/t/wf", "2", 1, 0, NULL));
  CHECK_OK(tagc_etcd_delete(c, "/t/wf", 0, NULL));
  tagc_etcd_watch_opts o = {.start_revision = rev, .no_put = 1};
  CHECK_OK(tagc_etcd_watch_start(c, "/t/wf", &o, collect, &s, &w));
  CHECK_MSG(wait_seen(&s, 1, 0, 5), "no DELETE event seen");
  tagc_sleep(0.2);
  tagc_etcd_watch_stop(w);
  CHECK_EQ_INT(s.n, 1);
  CHECK_EQ_INT(s.types[0], TAGC_ETCD_DELETE);
}

static void test_watch_initial_read(tagc_etcd *c) {
  CHECK_OK(tagc_etcd_put(c, "/t/ir/a", "1", 1, 0, NULL));
  CHECK_OK(tagc_etcd_put(c, "/t/ir/b", "2", 1, 0, NULL));
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  tagc_etcd_watch_opts o = {.prefix = 1, .initial_read = 1};
  CHECK_OK(tagc_etcd_watch_start(c, "/t/ir/", &o, collect, &s, &w));
  CHECK_MSG(wait_seen(&s, 0, 1, 5), "no initial read");
  CHECK_OK(tagc_etcd_put(c, "/t/ir/c", "3", 1, 0, NULL));
  CHECK_MSG(wait_seen(&s, 1, 1, 5), "no event after the initial read");
  tagc_sleep(0.2);
  tagc_etcd_watch_stop(w);
  CHECK_EQ_INT(s.resyncs, 1);
  CHECK_EQ_INT(s.snapshot_n, 2);
  CHECK_EQ_INT(s.compact_revision, 0);
  CHECK_EQ_INT(s.n, 1);
  CHECK_EQ_STR(s.keys[0], "/t/ir/c");
  o.start_revision = 5;
  CHECK_EQ_INT(tagc_etcd_watch_start(c, "/t/ir/", &o, collect, &s, &w), TAGC_EINVAL);
}

/* A hung server (SIGSTOP): calls time out within their deadline; a watch resumes once it
 * thaws. */
static void test_hung_server(void) {
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = server.url;
  cfg.request_timeout_s = 0.4;
  cfg.deadline_s = 1.2;
  tagc_etcd *c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  if (!c)
    return;
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  tagc_etcd_watch_opts o = {.initial_read = 1};
  CHECK_OK(tagc_etcd_watch_start(c, "/t/hung", &o, collect, &s, &w));
  CHECK(wait_seen(&s, 0, 1, 5));
  CHECK_OK(tagc_test_etcd_pause(&server));
  double t0 = tagc_now();
  tagc_etcd_range_result r;
  CHECK_EQ_INT(tagc_etcd_range(c, "/t/hung", NULL, &r), TAGC_ETIMEDOUT);
  double took = tagc_now() - t0;
  CHECK_MSG(took > 0.3 && took < 3.0, "a call to a hung server took %.2f s (deadline 1.2 s)", took);
  CHECK_OK(tagc_test_etcd_resume(&server));
  CHECK_OK(tagc_etcd_put(c, "/t/hung", "after", 5, 0, NULL));
  CHECK_MSG(wait_seen(&s, 1, 1, 5), "the watch did not resume after the server thawed");
  CHECK_EQ_STR(s.values[0], "after");
  tagc_etcd_watch_stop(w);
  tagc_etcd_destroy(c);
}

static void test_failover(void) {
  char endpoints[256];
  snprintf(endpoints, sizeof endpoints, "http://127.0.0.1:%d,%s", tagc_test_free_port(), server.url);
  tagc_etcd *c = connect_to(endpoints);
  if (!c)
    return;
  CHECK_OK(tagc_etcd_put(c, "/t/fo", "ok", 2, 0, NULL));
  char *v = NULL;
  CHECK_OK(tagc_etcd_get(c, "/t/fo", &v, NULL, NULL));
  CHECK_EQ_STR(v, "ok");
  free(v);

  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  int64_t rev = 0;
  CHECK_OK(tagc_etcd_put(c, "/t/fo", "again", 5, 0, &rev));
  tagc_etcd_watch_opts o = {.start_revision = rev};
  CHECK_OK(tagc_etcd_watch_start(c, "/t/fo", &o, collect, &s, &w));
  CHECK_MSG(wait_seen(&s, 1, 0, 5), "watch through the second endpoint saw nothing");
  CHECK_EQ_STR(s.values[0], "again");
  tagc_etcd_watch_stop(w);
  tagc_etcd_destroy(c);

  /* Every endpoint dead: a bounded failure, not a hang. */
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  snprintf(endpoints, sizeof endpoints, "http://127.0.0.1:%d", tagc_test_free_port());
  cfg.endpoints = endpoints;
  cfg.max_attempts = 3;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  double t0 = tagc_now();
  CHECK_EQ_INT(tagc_etcd_put(c, "/t/fo", "x", 1, 0, NULL), TAGC_EPEER);
  CHECK(tagc_now() - t0 < 3);
  tagc_etcd_destroy(c);
}

typedef struct worker_arg {
  tagc_etcd *c;
  int id;
  int failures;
} worker_arg;

static void *hammer(void *p) {
  worker_arg *a = p;
  char key[64], val[32];
  for (int i = 0; i < 30; i++) {
    snprintf(key, sizeof key, "/t/mt/%d/%d", a->id, i);
    snprintf(val, sizeof val, "%d", i * a->id);
    char *got = NULL;
    if (tagc_etcd_put(a->c, key, val, strlen(val), 0, NULL) != TAGC_OK ||
        tagc_etcd_get(a->c, key, &got, NULL, NULL) != TAGC_OK || strcmp(got, val) != 0)
      a->failures++;
    free(got);
  }
  return NULL;
}

static void test_threads(tagc_etcd *c) {
  pthread_t t[4];
  worker_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (worker_arg){c, i + 1, 0};
    pthread_create(&t[i], NULL, hammer, &a[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ_INT(a[i].failures, 0);
  }
  tagc_etcd_range_opts count = {.prefix = 1, .count_only = 1};
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "/t/mt/", &count, &r));
  CHECK_EQ_INT(r.count, 120);
  CHECK_EQ_INT(r.n, 0);
  tagc_etcd_range_result_free(&r);
}

static void test_tls(void) {
  tagc_test_etcd secure;
  tagc_status st = tagc_test_etcd_start_tls(&secure);
  if (st == TAGC_EUNSUPPORTED) {
    printf("SKIPPED PART: tls (%s)\n", tagc_last_error());
    TEST_SKIP(tagc_last_error());
  }
  CHECK_OK(st);
  if (st != TAGC_OK)
    return;
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = secure.url;
  cfg.ca_file = secure.ca_file;
  cfg.cert_file = secure.cert_file;
  cfg.key_file = secure.key_file;
  tagc_etcd *c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  CHECK_OK(tagc_etcd_put(c, "/t/tls", "s", 1, 0, NULL));
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  tagc_etcd_watch_opts o = {.start_revision = 1};
  CHECK_OK(tagc_etcd_watch_start(c, "/t/tls", &o, collect, &s, &w));
  CHECK_MSG(wait_seen(&s, 1, 0, 5), "no watch event over TLS");
  tagc_etcd_watch_stop(w);
  tagc_etcd_destroy(c);

  /* Without a client certificate the server refuses. */
  cfg.cert_file = cfg.key_file = NULL;
  cfg.max_attempts = 2;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  char *v = NULL;
  CHECK(tagc_etcd_get(c, "/t/tls", &v, NULL, NULL) != TAGC_OK);
  CHECK(v == NULL);
  tagc_etcd_destroy(c);
  tagc_test_etcd_stop(&secure);
}

/* Turns on etcd's authentication (root user) and uses it: last, since it changes the server. */
static void test_auth(tagc_etcd *c) {
  json_t *reply = NULL;
  json_t *req = json_pack("{s:s, s:s}", "name", "root", "password", "pw");
  CHECK_OK(tagc_etcd_call(c, "/v3/auth/user/add", req, 0, &reply));
  json_decref(req);
  json_decref(reply);
  req = json_pack("{s:s, s:s}", "user", "root", "role", "root");
  CHECK_OK(tagc_etcd_call(c, "/v3/auth/user/grant", req, 0, &reply));
  json_decref(req);
  json_decref(reply);
  req = json_object();
  CHECK_OK(tagc_etcd_call(c, "/v3/auth/enable", req, 0, &reply));
  json_decref(req);
  json_decref(reply);

  CHECK(tagc_etcd_put(c, "/t/auth", "x", 1, 0, NULL) != TAGC_OK); /* no credentials */
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = server.url;
  cfg.user = "root";
  cfg.password = "pw";
  tagc_etcd *authed = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &authed));
  CHECK_OK(tagc_etcd_put(authed, "/t/auth", "x", 1, 0, NULL));
  char *v = NULL;
  CHECK_OK(tagc_etcd_get(authed, "/t/auth", &v, NULL, NULL));
  CHECK_EQ_STR(v, "x");
  free(v);
  tagc_etcd_destroy(authed);
  cfg.password = "wrong";
  CHECK_OK(tagc_etcd_create(&cfg, &authed));
  CHECK_EQ_INT(tagc_etcd_put(authed, "/t/auth", "y", 1, 0, NULL), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "authentication failed") != NULL);
  tagc_etcd_destroy(authed);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "tls") == 0) {
    test_tls();
    return TEST_END();
  }
  tagc_status st = tagc_test_etcd_start(&server);
  if (st == TAGC_EUNSUPPORTED)
    TEST_SKIP(tagc_last_error());
  CHECK_OK(st);
  if (st != TAGC_OK)
    return TEST_END();
  tagc_etcd *c = connect_to(server.url);
  if (c) {
    test_kv(c);
    test_txn(c);
    test_lease(c);
    test_watch(c);
    test_watch_compacted(c);
    test_watch_filter(c);
    test_watch_initial_read(c);
    test_hung_server();
    test_threads(c);
    test_failover();
    test_auth(c);
    tagc_etcd_destroy(c);
  }
  tagc_test_etcd_stop(&server);
  return TEST_END();
}
