/* Worker-side membership and the etcd bootstrap store, on a real etcd: store get/set/wait and
 * set_many / get_many; a 2-rank Gloo bootstrap through it; member join, plans, lease loss and re-registration,
 * duplicate ids, failure/progress/checkpoint/finish records. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include <jansson.h>

#include "comm/comm.h"
#include "common/json.h"
#include "common/status.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "cluster/etcd_store.h"
#include "cluster/keys.h"
#include "cluster/member.h"
#include "etcd_server.h"
#include "test.h"

static tagc_etcd *client(const char *url) {
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = url;
  tagc_etcd *c = NULL;
  if (tagc_etcd_create(&cfg, &c) != TAGC_OK)
    fprintf(stderr, "etcd client: %s\n", tagc_last_error());
  return c;
}

/* ---- the bootstrap store ---- */

typedef struct delayed_set {
  tagc_store *store;
  double delay;
} delayed_set;

static void *set_later(void *arg) {
  delayed_set *d = arg;
  tagc_sleep(d->delay);
  tagc_store_set(d->store, "late", "here", 4);
  return NULL;
}

static void test_store(tagc_etcd *c) {
  tagc_store *s = NULL;
  CHECK_EQ_INT(tagc_etcd_store_new(c, "bad/job", 3, &s), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_etcd_store_new(c, "job", -1, &s), TAGC_EINVAL);
  CHECK_OK(tagc_etcd_store_new(c, "job", 3, &s));
  if (!s)
    return;
  CHECK_OK(tagc_store_set(s, "rank_0", "abc\0def", 7));
  void *v = NULL;
  size_t len = 0;
  CHECK_OK(tagc_store_get(s, "rank_0", 1, &v, &len));
  CHECK(len == 7 && memcmp(v, "abc\0def", 7) == 0);
  free(v);
  /* The communicator's generation prefix names the same key; the etcd key is the schema's. */
  CHECK_OK(tagc_store_get(s, "gen/3/boot/rank_0", 1, &v, &len));
  free(v);
  char *raw = NULL;
  CHECK_OK(tagc_etcd_get(c, "/tagc/job/gen/3/boot/rank_0", &raw, &len, NULL));
  CHECK(raw && len == 7);
  free(raw);

  double t0 = tagc_now();
  CHECK_EQ_INT(tagc_store_get(s, "missing", 0.4, &v, &len), TAGC_ETIMEDOUT);
  CHECK_NEAR(tagc_now() - t0, 0.4, 0.35);
  CHECK_EQ_INT(tagc_store_set(s, "bad key!", "x", 1), TAGC_EINVAL);

  /* get blocks until another thread sets the key, and returns soon after. */
  delayed_set d = {s, 0.5};
  pthread_t t;
  pthread_create(&t, NULL, set_later, &d);
  t0 = tagc_now();
  CHECK_OK(tagc_store_get(s, "late", 5, &v, &len));
  double waited = tagc_now() - t0;
  CHECK_MSG(waited > 0.4 && waited < 1.5, "waited %.2f s for a key set after 0.5 s", waited);
  CHECK(len == 4 && memcmp(v, "here", 4) == 0);
  free(v);
  pthread_join(t, NULL);

  CHECK_OK(tagc_store_remove(s, "late"));
  CHECK_OK(tagc_store_remove(s, "late"));
  CHECK_EQ_INT(tagc_store_get(s, "late", 0, &v, &len), TAGC_ETIMEDOUT);
  tagc_store_free(s);
}

typedef struct delayed_many {
  tagc_store *store;
  const char *key;
} delayed_many;

static void *set_one_later(void *arg) {
  delayed_many *d = arg;
  tagc_sleep(0.4);
  tagc_store_set(d->store, d->key, "late", 4);
  return NULL;
}

/* A store cancel function that says stop from a given time on. */
static int stop_at(void *arg) { return tagc_now() >= *(double *)arg; }

/* set_many over more keys than one transaction takes; get_many of one prefix ("m/1/") that
 * a longer one ("m/10/") must not answer, a key that comes while it waits, a timeout that
 * names the missing key and a cancel. */
static void test_store_many(tagc_etcd *c) {
  tagc_store *s = NULL;
  CHECK_OK(tagc_etcd_store_new(c, "job", 4, &s));
  if (!s)
    return;
  enum { N = 70 };
  char names[N][32], vals[N][32];
  const char *keys[N];
  const void *values[N];
  size_t lens[N], got_lens[N];
  void *got[N];
  for (int i = 0; i < N; i++) {
    snprintf(names[i], sizeof names[i], "m/1/%d", i);
    lens[i] = (size_t)snprintf(vals[i], sizeof vals[i], "value %d", i);
    keys[i] = names[i];
    values[i] = vals[i];
  }
  CHECK_OK(tagc_store_set_many(s, keys, values, lens, N));
  CHECK_OK(tagc_store_set(s, "m/10/0", "other", 5));
  CHECK_OK(tagc_store_get_many(s, keys, N, 2.0, got, got_lens, NULL));
  for (int i = 0; i < N; i++) {
    CHECK_MSG(got[i] && got_lens[i] == lens[i] && memcmp(got[i], vals[i], lens[i]) == 0,
              "key %s", keys[i]);
    free(got[i]);
  }

  const char *two[2] = {"m/1/0", "m/1/late"};
  delayed_many d = {s, "m/1/late"};
  pthread_t t;
  pthread_create(&t, NULL, set_one_later, &d);
  double t0 = tagc_now();
  CHECK_OK(tagc_store_get_many(s, two, 2, 5.0, got, got_lens, NULL));
  double waited = tagc_now() - t0;
  CHECK_MSG(waited > 0.3 && waited < 1.5, "waited %.2f s for a key set after 0.4 s", waited);
  CHECK(got[1] && got_lens[1] == 4 && memcmp(got[1], "late", 4) == 0);
  free(got[0]);
  free(got[1]);
  pthread_join(t, NULL);

  const char *absent[3] = {"m/1/0", "m/1/never", "m/1/3"};
  int missing = -2;
  t0 = tagc_now();
  CHECK_EQ_INT(tagc_store_get_many(s, absent, 3, 0.4, got, got_lens, &missing), TAGC_ETIMEDOUT);
  CHECK_NEAR(tagc_now() - t0, 0.4, 0.35);
  CHECK_EQ_INT(missing, 1);
  CHECK(got[0] == NULL && got[1] == NULL && got[2] == NULL);

  double at = tagc_now() + 0.3;
  tagc_store_set_cancel(s, stop_at, &at);
  t0 = tagc_now();
  CHECK_EQ_INT(tagc_store_get_many(s, absent, 3, 30.0, got, got_lens, NULL), TAGC_EABORTED);
  CHECK_MSG(tagc_now() - t0 < 2.0, "a cancelled get_many took %.2f s", tagc_now() - t0);
  tagc_store_free(s);
}

typedef struct gloo_rank {
  tagc_etcd *c;
  int rank;
  float sum;
  tagc_status st;
} gloo_rank;

static void *gloo_main(void *arg) {
  gloo_rank *g = arg;
  tagc_store *s = NULL;
  g->st = tagc_etcd_store_new(g->c, "job", 5, &s);
  tagc_comm_config cfg;
  tagc_comm_config_init(&cfg);
  cfg.rank = g->rank;
  cfg.world_size = 2;
  cfg.store = s;
  cfg.prefix = "gen/5/boot";
  cfg.timeout_s = 20;
  tagc_comm *comm = NULL;
  if (g->st == TAGC_OK)
    g->st = tagc_comm_create(&cfg, &comm);
  float x[4] = {(float)(g->rank + 1), 0, 0, 0}, y[4] = {0};
  if (g->st == TAGC_OK)
    g->st = tagc_comm_allreduce(comm, x, y, 4, TAGC_DTYPE_F32, TAGC_REDOP_SUM, 10);
  g->sum = y[0];
  if (g->st != TAGC_OK)
    fprintf(stderr, "rank %d: %s\n", g->rank, tagc_last_error());
  tagc_comm_destroy(comm);
  tagc_store_free(s);
  return NULL;
}

/* Cancels a bootstrap after a delay (tagc_comm_config.cancelled). */
typedef struct cancel_after {
  double at;
  atomic_int asked;
} cancel_after;

static int cancel_now(void *arg) {
  cancel_after *ca = arg;
  atomic_fetch_add(&ca->asked, 1);
  return tagc_now() >= ca->at;
}

/* A rank whose peer never publishes its address gives up as soon as it is cancelled, not at
 * the end of its 20 s timeout (a newer generation was published meanwhile). */
static void test_gloo_bootstrap_cancel(tagc_etcd *c) {
  tagc_store *s = NULL;
  CHECK_OK(tagc_etcd_store_new(c, "job", 6, &s));
  cancel_after ca = {.at = tagc_now() + 0.5};
  tagc_comm_config cfg;
  tagc_comm_config_init(&cfg);
  cfg.rank = 1;
  cfg.world_size = 2;
  cfg.store = s;
  cfg.prefix = "gen/6/boot";
  cfg.timeout_s = 20;
  cfg.cancelled = cancel_now;
  cfg.cancel_arg = &ca;
  tagc_comm *comm = NULL;
  double t0 = tagc_now();
  CHECK_EQ_INT(tagc_comm_create(&cfg, &comm), TAGC_EABORTED);
  double took = tagc_now() - t0;
  CHECK_MSG(took >= 0.45 && took < 3.0, "cancelled bootstrap returned after %.2f s", took);
  CHECK(atomic_load(&ca.asked) >= 2);
  CHECK(comm == NULL);
  CHECK(s->cancelled == NULL); /* create puts the store's own cancel function back */
  tagc_store_free(s);
}

static void test_gloo_bootstrap(tagc_etcd *c) {
  gloo_rank r[2] = {{c, 0, 0, TAGC_EINTERNAL}, {c, 1, 0, TAGC_EINTERNAL}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, gloo_main, &r[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    CHECK_OK(r[i].st);
    CHECK_NEAR(r[i].sum, 3.0, 0);
  }
  tagc_etcd_range_opts o = {.prefix = 1, .count_only = 1};
  tagc_etcd_range_result res;
  CHECK_OK(tagc_etcd_range(c, "/tagc/job/gen/5/boot/", &o, &res));
  CHECK_MSG(res.count >= 2, "%lld bootstrap keys under gen/5/boot/", (long long)res.count);
  tagc_etcd_range_result_free(&res);
}

/* ---- membership ---- */

typedef struct changes {
  atomic_int calls;
  atomic_llong last;
} changes;

static void on_change(void *arg, int64_t gen) {
  changes *ch = arg;
  atomic_fetch_add(&ch->calls, 1);
  atomic_store(&ch->last, gen);
}

static json_t *get_json(tagc_etcd *c, const char *key) {
  char *text = NULL;
  size_t len;
  json_t *j = NULL;
  if (tagc_etcd_get(c, key, &text, &len, NULL) == TAGC_OK)
    tagc_json_parse(text, len, &j);
  free(text);
  return j;
}

/* Writes gen/<g>/plan and gen as the leader would (no election here). */
static void write_plan(tagc_etcd *c, int64_t g, const char *members_json) {
  char key[TAGC_KEY_MAX], plan[512], gen[32];
  tagc_key_gen_plan("job", g, key, sizeof key);
  snprintf(plan, sizeof plan,
           "{\"gen\":%lld,\"world\":2,\"members\":%s,\"resume\":{\"step\":40,\"path\":\"/ck/step-40\"},"
           "\"micro_batch\":{\"w1\":4},\"reason\":\"test\"}",
           (long long)g, members_json);
  CHECK_OK(tagc_etcd_put(c, key, plan, strlen(plan), 0, NULL));
  snprintf(gen, sizeof gen, "%lld", (long long)g);
  CHECK_OK(tagc_etcd_put(c, "/tagc/job/gen", gen, strlen(gen), 0, NULL));
}

/* Writes plan text (a printf format taking the generation, then reg) as generation g of job2. */
static void put_plan2(tagc_etcd *c, int64_t g, const char *fmt, long long reg) {
  char key[TAGC_KEY_MAX], plan[512], gen[32];
  tagc_key_gen_plan("job2", g, key, sizeof key);
  snprintf(plan, sizeof plan, fmt, (long long)g, reg);
  CHECK_OK(tagc_etcd_put(c, key, plan, strlen(plan), 0, NULL));
  snprintf(gen, sizeof gen, "%lld", (long long)g);
  CHECK_OK(tagc_etcd_put(c, "/tagc/job2/gen", gen, strlen(gen), 0, NULL));
}

/* A restarted worker (same id, new registration) is neither a member of a plan made for its
 * predecessor nor excluded by the predecessor's exclusion; plans of its own registration
 * count as before. */
static void test_restarted_id(tagc_etcd *c) {
  json_t *info = json_pack("{s:s}", "host", "127.0.0.1");
  tagc_member *m = NULL;
  CHECK_OK(tagc_member_join(c, "job2", "w1", info, 2, &m));
  json_decref(info);
  if (!m)
    return;
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "/tagc/job2/workers/w1", NULL, &r));
  long long mine = r.n == 1 ? (long long)r.kvs[0].create_revision : 0;
  tagc_etcd_range_result_free(&r);
  CHECK(mine > 1);
  static const char member_of[] = "{\"gen\":%lld,\"world\":2,\"members\":[\"w0\",\"w1\"],"
                                  "\"registrations\":{\"w0\":1,\"w1\":%lld}}";
  static const char excluded[] = "{\"gen\":%lld,\"world\":1,\"members\":[\"w0\"],"
                                 "\"excluded\":{\"w1\":{\"registration\":%lld,\"why\":\"t\"}}}";
  tagc_plan p;
  put_plan2(c, 1, member_of, 1);
  CHECK_OK(tagc_member_wait_plan(m, 0, 5, &p));
  CHECK_MSG(p.gen == 1 && p.rank == -1, "predecessor's plan: gen %lld rank %d", (long long)p.gen, p.rank);
  tagc_plan_free(&p);
  put_plan2(c, 2, excluded, 1);
  CHECK_OK(tagc_member_wait_plan(m, 1, 5, &p));
  CHECK_MSG(p.gen == 2 && p.rank == -1 && !p.excluded, "predecessor excluded: excluded %d", p.excluded);
  tagc_plan_free(&p);
  put_plan2(c, 3, member_of, mine);
  CHECK_OK(tagc_member_wait_plan(m, 2, 5, &p));
  CHECK_MSG(p.gen == 3 && p.rank == 1, "own plan: rank %d", p.rank);
  tagc_plan_free(&p);
  put_plan2(c, 4, excluded, mine);
  CHECK_OK(tagc_member_wait_plan(m, 3, 5, &p));
  CHECK_MSG(p.gen == 4 && p.excluded, "own exclusion: excluded %d", p.excluded);
  tagc_plan_free(&p);
  tagc_member_leave(m);
}

/* A restarted worker whose predecessor's key (under a lease nobody renews: the predecessor was
 * SIGKILLed) still exists waits for it to expire, about a TTL, then registers; its own lease,
 * granted before that wait, must be renewed through it. Before the fix the keeper started
 * after the wait, so the new lease expired before its first renewal: the join failed or the
 * lease was lost a moment later (chaos_recovery_determinism under stress-ng: the restarted
 * worker then died on a put under the expired lease). */
static void test_predecessor_wait(tagc_etcd *c) {
  const double ttl = 3;
  int64_t old = 0, granted = 0;
  CHECK_OK(tagc_etcd_lease_grant(c, (int64_t)ttl, &old, &granted));
  static const char pred[] = "{\"id\":\"w1\",\"host\":\"127.0.0.1\",\"pid\":1}";
  CHECK_OK(tagc_etcd_put(c, "/tagc/job3/workers/w1", pred, strlen(pred), old, NULL));
  json_t *info = json_pack("{s:s}", "host", "127.0.0.1");
  tagc_member *m = NULL;
  double t0 = tagc_now();
  CHECK_OK(tagc_member_join(c, "job3", "w1", info, ttl, &m));
  json_decref(info);
  double waited = tagc_now() - t0;
  CHECK_MSG(waited >= ttl / 2, "join waited %.2f s for the predecessor's key (TTL %.0f s)", waited, ttl);
  if (!m)
    return;
  /* two TTLs later the registration still stands under the member's one lease */
  for (double until = tagc_now() + 2 * ttl; tagc_now() < until;)
    tagc_sleep(0.1);
  CHECK_MSG(tagc_member_lease_losses(m) == 0 && !tagc_member_lease_lost(m),
            "the new lease was lost %d time(s) after a %.2f s wait", tagc_member_lease_losses(m), waited);
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "/tagc/job3/workers/w1", NULL, &r));
  CHECK_MSG(r.n == 1 && r.kvs[0].lease != old, "workers/w1: %zu keys", (size_t)r.n);
  int64_t mine = r.n == 1 ? r.kvs[0].lease : 0;
  tagc_etcd_range_result_free(&r);
  /* the lease lost just before the ready put (revoked here): the put waits for the new
   * registration and goes under the new lease instead of failing (the worker died of it) */
  CHECK_OK(tagc_etcd_lease_revoke(c, mine));
  CHECK_OK(tagc_member_ready(m, 1, 0));
  CHECK_OK(tagc_etcd_range(c, "/tagc/job3/gen/1/ready/0", NULL, &r));
  CHECK_MSG(r.n == 1 && r.kvs[0].lease != mine && r.kvs[0].lease != 0,
            "ready/0 after a lost lease: %zu keys", (size_t)r.n);
  tagc_etcd_range_result_free(&r);
  CHECK(tagc_member_lease_losses(m) == 1);
  tagc_member_leave(m);
  printf("  restarted id: waited %.2f s for the predecessor's key, lease kept for 2 TTLs\n", waited);
}

static void test_join_and_plans(tagc_etcd *c) {
  json_t *info = json_pack("{s:s, s:i}", "host", "127.0.0.1", "pid", 1);
  tagc_member *m = NULL;
  CHECK_EQ_INT(tagc_member_join(c, "job", "bad id", info, 2, &m), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_member_join(c, "job", "w1", info, 0.1, &m), TAGC_EINVAL);
  CHECK_OK(tagc_member_join(c, "job", "w1", info, 2, &m));
  if (!m) {
    json_decref(info);
    return;
  }
  json_t *reg = get_json(c, "/tagc/job/workers/w1");
  CHECK_EQ_STR(json_string_value(json_object_get(reg, "id")), "w1");
  CHECK_EQ_STR(json_string_value(json_object_get(reg, "host")), "127.0.0.1");
  json_decref(reg);

  /* A second process with the same id is refused once the first keeps its lease. */
  tagc_member *dup = NULL;
  double t0 = tagc_now();
  CHECK_EQ_INT(tagc_member_join(c, "job", "w1", info, 1, &dup), TAGC_ECONFLICT);
  CHECK(tagc_now() - t0 < 6);

  changes ch = {0};
  tagc_member_on_change(m, on_change, &ch);
  tagc_plan p;
  CHECK_EQ_INT(tagc_member_wait_plan(m, 0, 0.3, &p), TAGC_ETIMEDOUT);
  write_plan(c, 1, "[\"w0\",\"w1\"]");
  CHECK_OK(tagc_member_wait_plan(m, 0, 5, &p));
  CHECK_EQ_INT(p.gen, 1);
  CHECK_EQ_INT(p.rank, 1);
  CHECK_EQ_INT(p.world, 2);
  CHECK_EQ_INT(p.resume_step, 40);
  CHECK_EQ_STR(p.resume_path, "/ck/step-40");
  CHECK_EQ_INT(p.micro_batch, 4);
  tagc_plan_free(&p);
  CHECK_EQ_INT(tagc_member_gen(m), 1);
  /* the change callback runs on the watch thread: it may come just after wait_plan returns */
  for (double until = tagc_now() + 5; atomic_load(&ch.calls) < 1 && tagc_now() < until;)
    tagc_sleep(0.01);
  CHECK(atomic_load(&ch.calls) >= 1 && atomic_load(&ch.last) == 1);

  /* A generation without me: rank -1. */
  write_plan(c, 2, "[\"w0\",\"w7\"]");
  CHECK_OK(tagc_member_wait_plan(m, 1, 5, &p));
  CHECK(p.gen == 2 && p.rank == -1);
  tagc_plan_free(&p);

  CHECK_OK(tagc_member_ready(m, 2, 1));
  json_t *ready = get_json(c, "/tagc/job/gen/2/ready/1");
  CHECK_EQ_STR(json_string_value(json_object_get(ready, "id")), "w1");
  json_decref(ready);
  CHECK_EQ_INT(tagc_member_ready(m, 2, -1), TAGC_EINVAL);

  CHECK_EQ_INT(tagc_member_report_failure(m, 2, "bogus", 5, 0, NULL, 0, NULL), TAGC_EINVAL);
  /* every kind worker/failure_kind.c reports is recorded (partition was refused, so such
   * reports never reached the coordinator) */
  int broken[2] = {0, 3};
  CHECK_OK(tagc_member_report_failure(m, 2, "partition", 56, 0, broken, 2, "reset, peer alive"));
  json_t *fp = get_json(c, "/tagc/job/failures/2/w1");
  CHECK_EQ_STR(json_string_value(json_object_get(fp, "kind")), "partition");
  json_t *peers = json_object_get(fp, "peers");
  CHECK(json_array_size(peers) == 2 && json_integer_value(json_array_get(peers, 1)) == 3);
  json_decref(fp);
  CHECK_OK(tagc_member_report_failure(m, 2, "timeout", 57, 0, NULL, 0, "allreduce deadline"));
  json_t *f = get_json(c, "/tagc/job/failures/2/w1");
  CHECK_EQ_STR(json_string_value(json_object_get(f, "kind")), "timeout");
  CHECK_EQ_INT(json_integer_value(json_object_get(f, "step")), 57);
  CHECK_EQ_INT(json_integer_value(json_object_get(f, "peer")), 0);
  CHECK_EQ_STR(json_string_value(json_object_get(f, "detail")), "allreduce deadline");
  CHECK(json_object_get(f, "peers") == NULL);
  json_decref(f);

  json_t *prog = json_pack("{s:i, s:f}", "step", 58, "loss", 2.5);
  CHECK_OK(tagc_member_progress(m, prog));
  json_decref(prog);
  json_t *pr = get_json(c, "/tagc/job/progress");
  CHECK_EQ_INT(json_integer_value(json_object_get(pr, "step")), 58);
  CHECK_EQ_STR(json_string_value(json_object_get(pr, "worker")), "w1");
  json_decref(pr);

  /* ckpt/committed: newer generations and steps win; older ones are refused. */
  CHECK_OK(tagc_member_commit_ckpt(m, 2, 50, "/ck/step-50", 2, 0xdeadbeef));
  CHECK_OK(tagc_member_commit_ckpt(m, 3, 40, "/ck/g3/step-40", 3, 1));
  CHECK_EQ_INT(tagc_member_commit_ckpt(m, 2, 60, "/ck/step-60", 2, 2), TAGC_ECONFLICT);
  CHECK_EQ_INT(tagc_member_commit_ckpt(m, 3, 30, "/ck/g3/step-30", 3, 2), TAGC_ECONFLICT);
  json_t *ck = get_json(c, "/tagc/job/ckpt/committed");
  CHECK_EQ_STR(json_string_value(json_object_get(ck, "path")), "/ck/g3/step-40");
  CHECK_EQ_INT(json_integer_value(json_object_get(ck, "world")), 3);
  json_decref(ck);

  char *spec = (char *)"x";
  CHECK_OK(tagc_member_chaos(m, &spec));
  CHECK(spec == NULL);
  CHECK_OK(tagc_etcd_put(c, "/tagc/job/chaos/w1", "crash@step=9", 12, 0, NULL));
  CHECK_OK(tagc_member_chaos(m, &spec));
  CHECK_EQ_STR(spec, "crash@step=9");
  free(spec);

  /* The lease is revoked behind the member's back: it registers again under a new one. */
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "/tagc/job/workers/w1", NULL, &r));
  int64_t lease = r.n ? r.kvs[0].lease : 0, created = r.n ? r.kvs[0].create_revision : 0;
  tagc_etcd_range_result_free(&r);
  int calls = atomic_load(&ch.calls);
  CHECK_OK(tagc_etcd_lease_revoke(c, lease));
  t0 = tagc_now();
  while (tagc_now() - t0 < 5 && (tagc_member_lease_losses(m) == 0 || tagc_member_lease_lost(m)))
    tagc_sleep(0.05);
  CHECK_EQ_INT(tagc_member_lease_losses(m), 1);
  CHECK_EQ_INT(tagc_member_lease_lost(m), 0);
  CHECK(atomic_load(&ch.calls) > calls);
  CHECK_OK(tagc_etcd_range(c, "/tagc/job/workers/w1", NULL, &r));
  CHECK(r.n == 1 && r.kvs[0].lease != lease && r.kvs[0].create_revision > created);
  tagc_etcd_range_result_free(&r);
  /* ... as the continuation of the lost registration, so the leader keeps it in its
     generation; training was not aborted (on_change was told, the run decides) */
  json_t *again = get_json(c, "/tagc/job/workers/w1");
  json_t *prev = json_object_get(again, "previous");
  CHECK(json_array_size(prev) == 1 && json_integer_value(json_array_get(prev, 0)) == created);
  json_decref(again);

  /* finish: only from the current generation; then wait_plan says "done". */
  CHECK_EQ_INT(tagc_member_finish(m, 1, 99), TAGC_ECONFLICT);
  CHECK_OK(tagc_member_finish(m, 2, 100));
  CHECK_EQ_INT(tagc_member_wait_plan(m, 2, 1, &p), TAGC_ENOTFOUND);
  CHECK_EQ_STR(tagc_last_error(), "done");
  json_t *done = get_json(c, "/tagc/job/done");
  CHECK_EQ_INT(json_integer_value(json_object_get(done, "step")), 100);
  json_decref(done);

  tagc_member_leave(m);
  CHECK_OK(tagc_etcd_range(c, "/tagc/job/workers/w1", NULL, &r));
  CHECK_EQ_INT(r.n, 0);
  tagc_etcd_range_result_free(&r);
  CHECK_OK(tagc_etcd_range(c, "/tagc/job/gen/2/ready/1", NULL, &r));
  CHECK_EQ_INT(r.n, 0); /* ready keys live on the worker's lease */
  tagc_etcd_range_result_free(&r);
  json_decref(info);
}

/* A member that joins after `done` learns it at once. */
static void test_done_before_join(tagc_etcd *c) {
  json_t *info = json_object();
  tagc_member *m = NULL;
  CHECK_OK(tagc_member_join(c, "job", "w9", info, 2, &m));
  tagc_plan p;
  double t0 = tagc_now();
  CHECK_EQ_INT(tagc_member_wait_plan(m, 0, 5, &p), TAGC_ENOTFOUND);
  CHECK(tagc_now() - t0 < 1);
  tagc_member_leave(m);
  json_decref(info);
}

int main(void) {
  tagc_test_etcd e;
  tagc_status st = tagc_test_etcd_start(&e);
  if (st == TAGC_EUNSUPPORTED)
    TEST_SKIP("no etcd binary");
  CHECK_OK(st);
  if (st != TAGC_OK)
    return TEST_END();
  tagc_etcd *c = client(e.url);
  if (c) {
    test_store(c);
    test_store_many(c);
    test_gloo_bootstrap(c);
    test_gloo_bootstrap_cancel(c);
    test_join_and_plans(c);
    test_restarted_id(c);
    test_predecessor_wait(c);
    test_done_before_join(c);
    tagc_etcd_destroy(c);
  }
  tagc_test_etcd_stop(&e);
  return TEST_END();
}
