/* Coordinator election on a real etcd: two candidates, the leader's lease is revoked, the
 * standby takes over, and the deposed leader's fenced writes are refused. */
#include <pthread.h>
#include <string.h>

#include "common/status.h"
#include "common/timeutil.h"
#include "cluster/election.h"
#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "etcd_server.h"
#include "test.h"

typedef struct standby {
  tagc_election *e;
  tagc_status st;
  double won_at;
} standby;

static void *campaign_thread(void *arg) {
  standby *s = arg;
  s->st = tagc_election_campaign(s->e, 20);
  s->won_at = tagc_now();
  return NULL;
}

static void lease_lost(void *arg, int64_t lease, tagc_status why) {
  (void)arg;
  (void)lease;
  (void)why;
}

/* gen = value, fenced by the candidate. */
static tagc_status write_gen(tagc_election *e, const char *value) {
  char key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_gen("job", key, sizeof key));
  tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = key, .value = value, .value_len = strlen(value)};
  return tagc_election_txn(e, NULL, 0, &put, 1, NULL);
}

static void test_takeover(tagc_etcd *c) {
  int64_t lease_a, lease_b, ttl;
  CHECK_OK(tagc_etcd_lease_grant(c, 2, &lease_a, &ttl));
  CHECK_OK(tagc_etcd_lease_grant(c, 2, &lease_b, &ttl));
  tagc_etcd_keeper *keep_a = NULL, *keep_b = NULL;
  CHECK_OK(tagc_etcd_keeper_start(c, lease_a, ttl, lease_lost, NULL, &keep_a));
  CHECK_OK(tagc_etcd_keeper_start(c, lease_b, ttl, lease_lost, NULL, &keep_b));

  tagc_election *a = NULL, *b = NULL;
  CHECK_OK(tagc_election_create(c, "job", lease_a, "http://a:1", &a));
  CHECK_OK(tagc_election_create(c, "job", lease_b, "http://b:2", &b));
  if (!a || !b)
    return;
  CHECK_EQ_INT(write_gen(a, "0"), TAGC_ECONFLICT); /* not a candidate yet */
  CHECK_OK(tagc_election_campaign(a, 5));
  CHECK(tagc_election_revision(a) > 0);
  CHECK_EQ_INT(tagc_election_campaign(b, 0.3), TAGC_ETIMEDOUT);
  CHECK(tagc_election_revision(b) > tagc_election_revision(a));
  CHECK_OK(tagc_election_campaign(a, 1)); /* campaigning again keeps the same key */

  tagc_etcd_range_result leader;
  CHECK_OK(tagc_election_leader(c, "job", &leader));
  CHECK(leader.n == 1 && strcmp((char *)leader.kvs[0].value, "http://a:1") == 0);
  tagc_etcd_range_result_free(&leader);

  CHECK_OK(write_gen(a, "1"));
  CHECK_EQ_INT(write_gen(b, "x"), TAGC_ECONFLICT); /* a standby does not write */
  char *v = NULL;
  CHECK_OK(tagc_etcd_get(c, "/tagc/job/gen", &v, NULL, NULL));
  CHECK_EQ_STR(v, "1");
  free(v);

  /* B waits on A's key; A's process "dies": its lease is revoked. */
  standby s = {b, TAGC_EINTERNAL, 0};
  pthread_t t;
  pthread_create(&t, NULL, campaign_thread, &s);
  tagc_sleep(0.3);
  tagc_etcd_keeper_stop(keep_a);
  double t0 = tagc_now();
  CHECK_OK(tagc_etcd_lease_revoke(c, lease_a));
  pthread_join(t, NULL);
  CHECK_OK(s.st);
  CHECK_MSG(s.won_at - t0 < 3, "standby took %.2f s to take over", s.won_at - t0);
  CHECK_OK(tagc_election_leader(c, "job", &leader));
  CHECK(leader.n == 1 && strcmp((char *)leader.kvs[0].value, "http://b:2") == 0);
  tagc_etcd_range_result_free(&leader);

  /* The deposed leader is fenced; the new one writes. */
  CHECK_EQ_INT(write_gen(a, "stale"), TAGC_ECONFLICT);
  CHECK_EQ_INT(tagc_election_campaign(a, 1), TAGC_ENOTFOUND);
  CHECK_OK(write_gen(b, "2"));
  CHECK_OK(tagc_etcd_get(c, "/tagc/job/gen", &v, NULL, NULL));
  CHECK_EQ_STR(v, "2");
  free(v);

  /* The caller's own compare failing is not fencing. */
  tagc_etcd_compare gen_is = {.key = "/tagc/job/gen", .target = TAGC_ETCD_VALUE, .result = TAGC_ETCD_EQUAL,
                              .value = "999", .value_len = 3};
  tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = "/tagc/job/gen", .value = "3", .value_len = 1};
  tagc_etcd_txn_result r;
  CHECK_OK(tagc_election_txn(b, &gen_is, 1, &put, 1, &r));
  CHECK_EQ_INT(r.succeeded, 0);
  tagc_etcd_txn_result_free(&r);
  gen_is.value = "2";
  gen_is.value_len = 1;
  CHECK_OK(tagc_election_txn(b, &gen_is, 1, &put, 1, &r));
  CHECK_EQ_INT(r.succeeded, 1);
  tagc_etcd_txn_result_free(&r);

  /* Resigning deletes the key; afterwards the candidate cannot write. */
  CHECK_OK(tagc_election_resign(b));
  CHECK_EQ_INT(tagc_election_leader(c, "job", &leader), TAGC_ENOTFOUND);
  CHECK_EQ_INT(write_gen(b, "4"), TAGC_ECONFLICT);

  tagc_etcd_keeper_stop(keep_b);
  tagc_election_destroy(a);
  tagc_election_destroy(b);
}

static void *cancel_later(void *arg) {
  tagc_sleep(0.3);
  tagc_election_cancel(arg);
  return NULL;
}

static void test_cancel_and_args(tagc_etcd *c) {
  tagc_election *e = NULL;
  CHECK_EQ_INT(tagc_election_create(c, "bad/job", 1, "x", &e), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_election_create(c, "job", 0, "x", &e), TAGC_EINVAL);
  int64_t l1, l2, ttl;
  CHECK_OK(tagc_etcd_lease_grant(c, 10, &l1, &ttl));
  CHECK_OK(tagc_etcd_lease_grant(c, 10, &l2, &ttl));
  tagc_election *first = NULL, *second = NULL;
  CHECK_OK(tagc_election_create(c, "job2", l1, "one", &first));
  CHECK_OK(tagc_election_create(c, "job2", l2, "two", &second));
  CHECK_OK(tagc_election_campaign(first, 5));
  pthread_t t;
  pthread_create(&t, NULL, cancel_later, second);
  double t0 = tagc_now();
  CHECK_EQ_INT(tagc_election_campaign(second, 20), TAGC_EABORTED);
  CHECK(tagc_now() - t0 < 2);
  pthread_join(t, NULL);
  tagc_election_destroy(first);
  tagc_election_destroy(second);
  CHECK_OK(tagc_etcd_lease_revoke(c, l1));
  CHECK_OK(tagc_etcd_lease_revoke(c, l2));
}

int main(void) {
  tagc_test_etcd server;
  tagc_status st = tagc_test_etcd_start(&server);
  if (st == TAGC_EUNSUPPORTED)
    TEST_SKIP(tagc_last_error());
  CHECK_OK(st);
  if (st != TAGC_OK)
    return TEST_END();
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = server.url;
  tagc_etcd *c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  if (c) {
    test_takeover(c);
    test_cancel_and_args(c);
    tagc_etcd_destroy(c);
  }
  tagc_test_etcd_stop(&server);
  return TEST_END();
}
