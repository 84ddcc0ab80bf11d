#include "cluster/election.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/keys.h"

/* Longest wait between two reads of the candidates, in case a watch misses a deletion. */
#define RECHECK_S 1.0

struct tagc_election {
  tagc_etcd *c;
  int64_t lease;
  char *value;
  char key[TAGC_KEY_MAX];    /* coord/<lease-hex> */
  char prefix[TAGC_KEY_MAX]; /* coord/ */
  int64_t rev;               /* create revision of key; 0 before registering */
  int won;                   /* a campaign returned TAGC_OK */
  pthread_mutex_t lock;
  pthread_cond_t changed;
  int signaled;
  atomic_int canceled;
};

tagc_status tagc_election_create(tagc_etcd *c, const char *job, int64_t lease, const char *value,
                                 tagc_election **out) {
  *out = NULL;
  if (!c || !value || lease == 0)
    return tagc_errorf(TAGC_EINVAL, "election: NULL client or value, or lease 0");
  tagc_election *e = calloc(1, sizeof *e);
  if (!e)
    return tagc_errorf(TAGC_ENOMEM, "election");
  tagc_status st;
  TAGC_CHECK_GOTO(tagc_key_coord(job, lease, e->key, sizeof e->key), st, fail);
  TAGC_CHECK_GOTO(tagc_key_coord_prefix(job, e->prefix, sizeof e->prefix), st, fail);
  e->value = strdup(value);
  if (!e->value) {
    st = tagc_errorf(TAGC_ENOMEM, "election value");
    goto fail;
  }
  e->c = c;
  e->lease = lease;
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->changed, NULL);
  atomic_init(&e->canceled, 0);
  *out = e;
  return TAGC_OK;
fail:
  free(e);
  return st;
}

void tagc_election_destroy(tagc_election *e) {
  if (!e)
    return;
  pthread_cond_destroy(&e->changed);
  pthread_mutex_destroy(&e->lock);
  free(e->value);
  free(e);
}

int64_t tagc_election_revision(const tagc_election *e) { return e->rev; }

static void wake(tagc_election *e) {
  pthread_mutex_lock(&e->lock);
  e->signaled = 1;
  pthread_cond_broadcast(&e->changed);
  pthread_mutex_unlock(&e->lock);
}

void tagc_election_cancel(tagc_election *e) {
  atomic_store(&e->canceled, 1);
  wake(e);
}

/* Creates the candidate key if absent (bound to the lease) and learns its create revision. */
static tagc_status register_key(tagc_election *e) {
  tagc_etcd_compare absent = {.key = e->key, .target = TAGC_ETCD_CREATE, .result = TAGC_ETCD_EQUAL};
  tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = e->key, .value = e->value,
                      .value_len = strlen(e->value), .lease = e->lease};
  tagc_etcd_op get = {.type = TAGC_ETCD_OP_RANGE, .key = e->key};
  tagc_etcd_txn_result t;
  TAGC_CHECK(tagc_etcd_txn(e->c, &absent, 1, &put, 1, &get, 1, &t));
  tagc_status st = TAGC_OK;
  if (t.succeeded)
    e->rev = t.revision;
  else if (t.n_responses == 1 && t.responses[0].range.n == 1)
    e->rev = t.responses[0].range.kvs[0].create_revision;
  else
    st = tagc_errorf(TAGC_EPROTO, "election: candidate key %s neither created nor found", e->key);
  tagc_etcd_txn_result_free(&t);
  if (st == TAGC_OK)
    LOG_INFO("election", "candidate %s registered at revision %lld", e->key, (long long)e->rev);
  return st;
}

static int wake_on_message(void *arg, const tagc_etcd_watch_msg *msg) {
  (void)msg;
  wake(arg);
  return 0;
}

/* Waits until the predecessor key changes (watch from after `rev`) or until `until`. */
static tagc_status wait_for_change(tagc_election *e, const char *pred, int64_t rev, double until) {
  tagc_etcd_watch_opts o = {.start_revision = rev + 1, .no_put = 1};
  tagc_etcd_watch *w;
  TAGC_CHECK(tagc_etcd_watch_start(e->c, pred, &o, wake_on_message, e, &w));
  double end = tagc_now() + RECHECK_S;
  if (end > until)
    end = until;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double abs = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (end - tagc_now());
  ts.tv_sec = (time_t)abs;
  ts.tv_nsec = (long)((abs - (double)ts.tv_sec) * 1e9);
  pthread_mutex_lock(&e->lock);
  while (!e->signaled && pthread_cond_timedwait(&e->changed, &e->lock, &ts) != ETIMEDOUT) {
  }
  e->signaled = 0;
  pthread_mutex_unlock(&e->lock);
  tagc_etcd_watch_stop(w);
  return TAGC_OK;
}

/* Reads the candidates: *leader = 1 when ours has the lowest create revision, else pred gets
 * the key just below ours and *rev the revision of the read. */
static tagc_status inspect(tagc_election *e, int *leader, char *pred, size_t cap, int64_t *rev) {
  tagc_etcd_range_opts o = {.prefix = 1, .keys_only = 1};
  tagc_etcd_range_result r;
  TAGC_CHECK(tagc_etcd_range(e->c, e->prefix, &o, &r));
  int mine = 0;
  int64_t best = 0;
  for (size_t i = 0; i < r.n; i++) {
    int64_t cr = r.kvs[i].create_revision;
    if (cr == e->rev && strcmp((char *)r.kvs[i].key, e->key) == 0)
      mine = 1;
    else if (cr < e->rev && cr > best && r.kvs[i].key_len < cap) {
      best = cr;
      memcpy(pred, r.kvs[i].key, r.kvs[i].key_len + 1);
    }
  }
  *leader = best == 0;
  *rev = r.revision;
  tagc_etcd_range_result_free(&r);
  if (!mine)
    return tagc_errorf(TAGC_ENOTFOUND, "election: candidate key %s is gone (lease lost?)", e->key);
  return TAGC_OK;
}

tagc_status tagc_election_campaign(tagc_election *e, double timeout_s) {
  double until = tagc_now() + timeout_s;
  if (e->rev == 0)
    TAGC_CHECK(register_key(e));
  for (;;) {
    if (atomic_load(&e->canceled))
      return tagc_errorf(TAGC_EABORTED, "election: campaign canceled");
    int leader;
    char pred[TAGC_KEY_MAX];
    int64_t rev;
    TAGC_CHECK(inspect(e, &leader, pred, sizeof pred, &rev));
    if (leader) {
      e->won = 1;
      LOG_INFO("election", "%s is the leader (revision %lld)", e->key, (long long)e->rev);
      return TAGC_OK;
    }
    if (tagc_now() >= until)
      return tagc_errorf(TAGC_ETIMEDOUT, "election: still waiting for %s after %.1f s", pred, timeout_s);
    TAGC_CHECK(wait_for_change(e, pred, rev, until));
  }
}

tagc_status tagc_election_txn(tagc_election *e, const tagc_etcd_compare *cmp, size_t n_cmp,
                              const tagc_etcd_op *ops, size_t n_ops, tagc_etcd_txn_result *out) {
  if (!e->won)
    return tagc_errorf(TAGC_ECONFLICT, "election: %s has not won an election", e->key);
  tagc_etcd_compare *all = calloc(n_cmp + 1, sizeof *all);
  if (!all)
    return tagc_errorf(TAGC_ENOMEM, "election txn");
  all[0] = (tagc_etcd_compare){.key = e->key, .target = TAGC_ETCD_CREATE, .result = TAGC_ETCD_EQUAL,
                               .number = e->rev};
  if (n_cmp)
    memcpy(all + 1, cmp, n_cmp * sizeof *cmp);
  tagc_etcd_op mine = {.type = TAGC_ETCD_OP_RANGE, .key = e->key};
  tagc_etcd_txn_result t;
  tagc_status st = tagc_etcd_txn(e->c, all, n_cmp + 1, ops, n_ops, &mine, 1, &t);
  free(all);
  TAGC_CHECK(st);
  if (!t.succeeded) {
    const tagc_etcd_range_result *r = t.n_responses == 1 ? &t.responses[0].range : NULL;
    if (!r || r->n != 1 || r->kvs[0].create_revision != e->rev)
      st = tagc_errorf(TAGC_ECONFLICT, "election: %s (revision %lld) is no longer a candidate: fenced",
                       e->key, (long long)e->rev);
  }
  if (out && st == TAGC_OK)
    *out = t;
  else
    tagc_etcd_txn_result_free(&t);
  return st;
}

tagc_status tagc_election_resign(tagc_election *e) {
  tagc_etcd_op del = {.type = TAGC_ETCD_OP_DELETE, .key = e->key};
  tagc_etcd_txn_result t;
  TAGC_CHECK(tagc_election_txn(e, NULL, 0, &del, 1, &t));
  tagc_etcd_txn_result_free(&t);
  e->rev = 0;
  e->won = 0;
  return TAGC_OK;
}

tagc_status tagc_election_leader(tagc_etcd *c, const char *job, tagc_etcd_range_result *leader) {
  memset(leader, 0, sizeof *leader);
  char prefix[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_coord_prefix(job, prefix, sizeof prefix));
  tagc_etcd_range_opts o = {.prefix = 1};
  tagc_etcd_range_result r;
  TAGC_CHECK(tagc_etcd_range(c, prefix, &o, &r));
  if (r.n == 0) {
    tagc_etcd_range_result_free(&r);
    return tagc_errorf(TAGC_ENOTFOUND, "election: job %s has no coordinator candidates", job);
  }
  size_t lowest = 0;
  for (size_t i = 1; i < r.n; i++) {
    if (r.kvs[i].create_revision < r.kvs[lowest].create_revision)
      lowest = i;
  }
  /* Keep only the leader's entry: swap it to the front and free the rest. */
  tagc_etcd_kv first = r.kvs[0];
  r.kvs[0] = r.kvs[lowest];
  r.kvs[lowest] = first;
  *leader = r;
  leader->n = 1;
  for (size_t i = 1; i < r.n; i++) {
    free(r.kvs[i].key);
    free(r.kvs[i].value);
  }
  return TAGC_OK;
}
