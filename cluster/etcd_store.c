#include "cluster/etcd_store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "cluster/keys.h"

/* Longest wait between two reads of a missing key, in case a watch misses its creation. */
#define RECHECK_S 1.0

typedef struct etcd_store {
  tagc_store base;
  tagc_etcd *c;
  char job[TAGC_KEY_ID_MAX + 1];
  int64_t gen;
  char own_prefix[48]; /* "gen/<g>/boot/" */
} etcd_store;

/* The etcd key of store key `key`. */
static tagc_status full_key(const etcd_store *s, const char *key, char *buf, size_t cap) {
  size_t n = strlen(s->own_prefix);
  const char *name = strncmp(key, s->own_prefix, n) == 0 && key[n] ? key + n : key;
  return tagc_key_gen_boot(s->job, s->gen, name, buf, cap);
}

static tagc_status store_set(tagc_store *store, const char *key, const void *value, size_t len) {
  etcd_store *s = (etcd_store *)store;
  char k[TAGC_KEY_MAX];
  TAGC_CHECK(full_key(s, key, k, sizeof k));
  return tagc_etcd_put(s->c, k, value, len, 0, NULL);
}

/* Wakes a waiting get when its key is written. */
typedef struct key_waiter {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int seen;
} key_waiter;

static int on_key_message(void *arg, const tagc_etcd_watch_msg *msg) {
  key_waiter *w = arg;
  int put = msg->kind == TAGC_ETCD_WATCH_RESYNC && msg->snapshot->n > 0;
  for (size_t i = 0; i < msg->n_events; i++)
    put |= msg->events[i].type == TAGC_ETCD_PUT;
  if (put) {
    pthread_mutex_lock(&w->lock);
    w->seen = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
  }
  return put;
}

/* Watches key from after revision rev until it is written, `until` (monotonic) or RECHECK_S
 * passes, or the store's cancel function says stop (asked every TAGC_STORE_CANCEL_POLL_S). */
static tagc_status wait_for_put(tagc_store *store, tagc_etcd *c, const char *key, int64_t rev,
                                double until) {
  key_waiter w = {.seen = 0};
  pthread_mutex_init(&w.lock, NULL);
  tagc_cond_init_monotonic(&w.cond);
  tagc_etcd_watch_opts o = {.start_revision = rev + 1, .no_delete = 1};
  tagc_etcd_watch *watch;
  tagc_status st = tagc_etcd_watch_start(c, key, &o, on_key_message, &w, &watch);
  if (st == TAGC_OK) {
    double left = until - tagc_now();
    double end = tagc_now() + (left < RECHECK_S ? left : RECHECK_S);
    pthread_mutex_lock(&w.lock);
    while (!w.seen && tagc_now() < end) {
      pthread_mutex_unlock(&w.lock);
      int stop = tagc_store_cancelled(store);
      pthread_mutex_lock(&w.lock);
      if (stop)
        break;
      double s = end - tagc_now();
      struct timespec ts = tagc_deadline_in(s < TAGC_STORE_CANCEL_POLL_S ? s : TAGC_STORE_CANCEL_POLL_S);
      while (!w.seen && pthread_cond_timedwait(&w.cond, &w.lock, &ts) != ETIMEDOUT) {
      }
    }
    pthread_mutex_unlock(&w.lock);
    tagc_etcd_watch_stop(watch);
  }
  pthread_cond_destroy(&w.cond);
  pthread_mutex_destroy(&w.lock);
  return st;
}

static tagc_status store_get(tagc_store *store, const char *key, double timeout_s, void **value,
                             size_t *len) {
  etcd_store *s = (etcd_store *)store;
  char k[TAGC_KEY_MAX];
  TAGC_CHECK(full_key(s, key, k, sizeof k));
  double until = tagc_now() + (timeout_s > 0 ? timeout_s : 0);
  for (;;) {
    tagc_etcd_range_result r;
    TAGC_CHECK(tagc_etcd_range(s->c, k, NULL, &r));
    if (r.n == 1) {
      *value = r.kvs[0].value; /* NUL-terminated by the decoder; ownership moves out */
      *len = r.kvs[0].value_len;
      r.kvs[0].value = NULL;
      tagc_etcd_range_result_free(&r);
      return TAGC_OK;
    }
    int64_t rev = r.revision;
    tagc_etcd_range_result_free(&r);
    if (tagc_now() >= until)
      return tagc_errorf(TAGC_ETIMEDOUT, "etcd store: %s did not appear within %.1f s", k,
                         timeout_s);
    if (tagc_store_cancelled(store))
      return tagc_errorf(TAGC_EABORTED, "etcd store: waiting for %s cancelled", k);
    TAGC_CHECK(wait_for_put(store, s->c, k, rev, until));
  }
}

static tagc_status store_remove(tagc_store *store, const char *key) {
  etcd_store *s = (etcd_store *)store;
  char k[TAGC_KEY_MAX];
  TAGC_CHECK(full_key(s, key, k, sizeof k));
  return tagc_etcd_delete(s->c, k, 0, NULL);
}

static void store_free(tagc_store *store) { free(store); }

static const tagc_store_ops etcd_store_ops = {
    .set = store_set, .get = store_get, .remove = store_remove, .free = store_free};

tagc_status tagc_etcd_store_new(tagc_etcd *etcd, const char *job, int64_t gen, tagc_store **out) {
  *out = NULL;
  if (!etcd)
    return tagc_errorf(TAGC_EINVAL, "etcd store: NULL client");
  char probe[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_gen_boot_prefix(job, gen, probe, sizeof probe));
  etcd_store *s = calloc(1, sizeof *s);
  if (!s)
    return tagc_errorf(TAGC_ENOMEM, "etcd store");
  s->base.ops = &etcd_store_ops;
  s->c = etcd;
  snprintf(s->job, sizeof s->job, "%s", job);
  s->gen = gen;
  snprintf(s->own_prefix, sizeof s->own_prefix, "gen/%" PRId64 "/boot/", gen);
  *out = &s->base;
  return TAGC_OK;
}
