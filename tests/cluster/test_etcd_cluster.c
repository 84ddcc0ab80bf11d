/* The etcd client against a three-member etcd cluster: members die and come back one at a
 * time; calls fail over to a live member and a watch follows without losing or repeating
 * events. A SIGSTOPped member (connections accepted, nothing answered) that every call tries
 * first does not cost a lease: a renewal whose deadline it used up moves the next one on. */
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/status.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "etcd_server.h"
#include "test.h"

typedef struct seen {
  pthread_mutex_t lock;
  int n, resyncs;
  char keys[16][32];
  int64_t revs[16];
} seen;

static int collect(void *arg, const tagc_etcd_watch_msg *m) {
  seen *s = arg;
  pthread_mutex_lock(&s->lock);
  s->resyncs += m->kind == TAGC_ETCD_WATCH_RESYNC;
  for (size_t i = 0; i < m->n_events && s->n < 16; i++, s->n++) {
    snprintf(s->keys[s->n], sizeof s->keys[0], "%s", (char *)m->events[i].kv.key);
    s->revs[s->n] = m->events[i].kv.mod_revision;
  }
  pthread_mutex_unlock(&s->lock);
  return 0;
}

static atomic_int lease_lost;

static void on_lost(void *arg, int64_t lease, tagc_status why) {
  (void)arg, (void)lease, (void)why;
  atomic_store(&lease_lost, 1);
}

static int wait_seen(seen *s, int n, double timeout_s) {
  double deadline = tagc_now() + timeout_s;
  for (;;) {
    pthread_mutex_lock(&s->lock);
    int ok = s->n >= n && s->resyncs >= 1;
    pthread_mutex_unlock(&s->lock);
    if (ok)
      return 1;
    if (tagc_now() > deadline)
      return 0;
    tagc_sleep(0.02);
  }
}

int main(void) {
  tagc_test_etcd_cluster cl;
  tagc_status st = tagc_test_etcd_cluster_start(&cl, 3);
  if (st == TAGC_EUNSUPPORTED)
    TEST_SKIP(tagc_last_error());
  CHECK_OK(st);
  if (st != TAGC_OK)
    return TEST_END();

  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = cl.endpoints;
  cfg.request_timeout_s = 1;
  cfg.deadline_s = 10;
  cfg.max_attempts = 30;
  cfg.backoff_max_s = 0.2;
  tagc_etcd *c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  if (!c) {
    tagc_test_etcd_cluster_stop(&cl);
    return TEST_END();
  }
  CHECK_OK(tagc_etcd_put(c, "/c/a", "1", 1, 0, NULL));
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  tagc_etcd_watch *w = NULL;
  tagc_etcd_watch_opts o = {.prefix = 1, .initial_read = 1};
  CHECK_OK(tagc_etcd_watch_start(c, "/c/", &o, collect, &s, &w));
  CHECK_MSG(wait_seen(&s, 0, 5), "no initial read");

  /* Member 0 (first in the list, so the one in use) dies. */
  CHECK_OK(tagc_test_etcd_kill(&cl.member[0]));
  double t0 = tagc_now();
  CHECK_OK(tagc_etcd_put(c, "/c/b", "2", 1, 0, NULL));
  CHECK_MSG(tagc_now() - t0 < 5, "failover took %.2f s", tagc_now() - t0);
  CHECK_MSG(wait_seen(&s, 1, 10), "the watch missed /c/b after member 0 died");

  /* It comes back, and member 1 dies. */
  CHECK_OK(tagc_test_etcd_restart(&cl.member[0]));
  CHECK_OK(tagc_test_etcd_kill(&cl.member[1]));
  CHECK_OK(tagc_etcd_put(c, "/c/c", "3", 1, 0, NULL));
  CHECK_OK(tagc_etcd_delete(c, "/c/a", 0, NULL));
  CHECK_MSG(wait_seen(&s, 3, 10), "the watch missed events after member 1 died");
  tagc_sleep(0.3);
  tagc_etcd_watch_stop(w);

  CHECK_EQ_INT(s.n, 3);
  CHECK_EQ_STR(s.keys[0], "/c/b");
  CHECK_EQ_STR(s.keys[1], "/c/c");
  CHECK_EQ_STR(s.keys[2], "/c/a");
  CHECK(s.revs[0] < s.revs[1] && s.revs[1] < s.revs[2]);
  char *v = NULL;
  CHECK_OK(tagc_etcd_get(c, "/c/c", &v, NULL, NULL));
  CHECK_EQ_STR(v, "3");
  free(v);
  tagc_etcd_destroy(c);

  /* Member 0 stops answering (SIGSTOP) under a client that prefers it: each renewal of a 3 s
   * lease has 1 s (TTL/3), all of which an attempt on member 0 uses up. The keeper must
   * renew through another member within the TTL, for 3 TTLs of the stop. */
  CHECK_OK(tagc_test_etcd_restart(&cl.member[1]));
  cfg.deadline_s = 5;
  c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  int64_t lease = 0, ttl = 0;
  if (c)
    CHECK_OK(tagc_etcd_lease_grant(c, 3, &lease, &ttl)); /* through member 0: it is preferred */
  tagc_etcd_keeper *k = NULL;
  if (c && lease)
    CHECK_OK(tagc_etcd_keeper_start(c, lease, ttl, on_lost, NULL, &k));
  if (k) {
    CHECK_OK(tagc_test_etcd_pause(&cl.member[0]));
    double stop_end = tagc_now() + 3 * (double)ttl;
    while (tagc_now() < stop_end && !atomic_load(&lease_lost))
      tagc_sleep(0.05);
    double silence = tagc_etcd_keeper_silence_s(k);
    CHECK_OK(tagc_test_etcd_resume(&cl.member[0]));
    CHECK_MSG(!atomic_load(&lease_lost), "the %lld s lease was lost while member 0 was stopped",
              (long long)ttl);
    CHECK_MSG(silence < (double)ttl, "no renewal for %.1f s of a %lld s lease", silence, (long long)ttl);
    tagc_etcd_keeper_stop(k);
  }
  tagc_etcd_destroy(c);
  tagc_test_etcd_cluster_stop(&cl);
  return TEST_END();
}
