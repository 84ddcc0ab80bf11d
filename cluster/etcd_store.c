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

/* Puts per transaction of set_many: etcd refuses more than --max-txn-ops (128 by default). */
#define TXN_PUTS 64

static tagc_status store_set_many(tagc_store *store, const char *const *keys,
                                  const void *const *values, const size_t *lens, int n) {
  etcd_store *s = (etcd_store *)store;
  char (*k)[TAGC_KEY_MAX] = malloc(sizeof *k * TXN_PUTS);
  tagc_etcd_op ops[TXN_PUTS];
  if (!k)
    return tagc_errorf(TAGC_ENOMEM, "etcd store: set_many");
  tagc_status st = TAGC_OK;
  for (int first = 0; first < n && st == TAGC_OK; first += TXN_PUTS) {
    int m = n - first < TXN_PUTS ? n - first : TXN_PUTS;
    for (int i = 0; i < m && st == TAGC_OK; i++) {
      st = full_key(s, keys[first + i], k[i], sizeof k[i]);
      ops[i] = (tagc_etcd_op){.type = TAGC_ETCD_OP_PUT, .key = k[i], .value = values[first + i],
                              .value_len = lens[first + i]};
    }
    tagc_etcd_txn_result r = {0};
    if (st == TAGC_OK)
      st = tagc_etcd_txn(s->c, NULL, 0, ops, (size_t)m, NULL, 0, &r);
    tagc_etcd_txn_result_free(&r);
  }
  free(k);
  return st;
}

/* The keys of one get_many and what has come of them, filled on the watch's thread. */
typedef struct many_waiter {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  char (*keys)[TAGC_KEY_MAX]; /* the n etcd keys */
  int n;
  void **values;
  size_t *lens;
  int found;
  int out_of_memory;
} many_waiter;

/* Keeps kv's value when it is one of the keys and not yet had. Caller holds w->lock. */
static void take_kv(many_waiter *w, const tagc_etcd_kv *kv) {
  for (int i = 0; i < w->n; i++) {
    if (w->values[i] || strlen(w->keys[i]) != kv->key_len ||
        memcmp(w->keys[i], kv->key, kv->key_len) != 0)
      continue;
    char *copy = malloc(kv->value_len + 1);
    if (!copy) {
      w->out_of_memory = 1;
      return;
    }
    memcpy(copy, kv->value, kv->value_len);
    copy[kv->value_len] = '\0';
    w->values[i] = copy;
    w->lens[i] = kv->value_len;
    w->found++;
    return;
  }
}

static int on_many_message(void *arg, const tagc_etcd_watch_msg *msg) {
  many_waiter *w = arg;
  pthread_mutex_lock(&w->lock);
  if (msg->kind == TAGC_ETCD_WATCH_RESYNC) {
    for (size_t i = 0; i < msg->snapshot->n; i++)
      take_kv(w, &msg->snapshot->kvs[i]);
  }
  for (size_t i = 0; i < msg->n_events; i++) {
    if (msg->events[i].type == TAGC_ETCD_PUT)
      take_kv(w, &msg->events[i].kv);
  }
  int done = w->found == w->n || w->out_of_memory;
  if (done)
    pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->lock);
  return done;
}

/* The longest common prefix of the n keys, cut after its last '/', into buf (TAGC_KEY_MAX). */
static void shared_prefix(char (*keys)[TAGC_KEY_MAX], int n, char *buf) {
  size_t len = strlen(keys[0]);
  for (int i = 1; i < n; i++) {
    size_t j = 0;
    while (j < len && keys[i][j] == keys[0][j])
      j++;
    len = j;
  }
  while (len > 0 && keys[0][len - 1] != '/')
    len--;
  memcpy(buf, keys[0], len);
  buf[len] = '\0';
}

/* Waits on w until every key came, out of memory, `until` (monotonic) or the store's cancel
 * function says stop (asked every TAGC_STORE_CANCEL_POLL_S); returns 1 when it said stop. */
static int wait_for_all(tagc_store *store, many_waiter *w, double until) {
  int stop = 0;
  pthread_mutex_lock(&w->lock);
  while (w->found < w->n && !w->out_of_memory && !stop && tagc_now() < until) {
    double left = until - tagc_now();
    struct timespec ts =
        tagc_deadline_in(left < TAGC_STORE_CANCEL_POLL_S ? left : TAGC_STORE_CANCEL_POLL_S);
    pthread_cond_timedwait(&w->cond, &w->lock, &ts);
    pthread_mutex_unlock(&w->lock);
    stop = tagc_store_cancelled(store);
    pthread_mutex_lock(&w->lock);
  }
  pthread_mutex_unlock(&w->lock);
  return stop;
}

/* One watch of the keys' shared prefix that starts with a read of it (no gap between the
 * two), collecting the keys as they come. */
static tagc_status store_get_many(tagc_store *store, const char *const *keys, int n,
                                  double timeout_s, void **values, size_t *lens, int *missing) {
  etcd_store *s = (etcd_store *)store;
  if (n == 0)
    return TAGC_OK;
  many_waiter w = {.n = n, .values = values, .lens = lens};
  if (!(w.keys = calloc((size_t)n, sizeof *w.keys)))
    return tagc_errorf(TAGC_ENOMEM, "etcd store: get_many");
  tagc_status st = TAGC_OK;
  for (int i = 0; i < n && st == TAGC_OK; i++)
    st = full_key(s, keys[i], w.keys[i], sizeof w.keys[i]);
  char prefix[TAGC_KEY_MAX];
  if (st == TAGC_OK)
    shared_prefix(w.keys, n, prefix);
  pthread_mutex_init(&w.lock, NULL);
  tagc_cond_init_monotonic(&w.cond);
  tagc_etcd_watch_opts o = {.prefix = 1, .initial_read = 1, .no_delete = 1};
  tagc_etcd_watch *watch = NULL;
  if (st == TAGC_OK)
    st = tagc_etcd_watch_start(s->c, prefix, &o, on_many_message, &w, &watch);
  int stop = st == TAGC_OK && wait_for_all(store, &w, tagc_now() + (timeout_s > 0 ? timeout_s : 0));
  tagc_etcd_watch_stop(watch); /* from here on w is this thread's alone */
  if (st == TAGC_OK && w.out_of_memory) {
    st = tagc_errorf(TAGC_ENOMEM, "etcd store: get_many");
  } else if (st == TAGC_OK && w.found < n) {
    int first = 0;
    while (values[first])
      first++;
    if (stop) {
      st = tagc_errorf(TAGC_EABORTED, "etcd store: waiting for %s cancelled", w.keys[first]);
    } else {
      if (missing)
        *missing = first;
      st = tagc_errorf(TAGC_ETIMEDOUT, "etcd store: %s did not appear within %.1f s (%d of %d "
                       "keys came)", w.keys[first], timeout_s, w.found, n);
    }
  }
  for (int i = 0; st != TAGC_OK && i < n; i++) {
    free(values[i]);
    values[i] = NULL;
  }
  pthread_cond_destroy(&w.cond);
  pthread_mutex_destroy(&w.lock);
  free(w.keys);
  return st;
}

static void store_free(tagc_store *store) { free(store); }

static const tagc_store_ops etcd_store_ops = {.set = store_set,
                                              .get = store_get,
                                              .remove = store_remove,
                                              .free = store_free,
                                              .set_many = store_set_many,
                                              .get_many = store_get_many};

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
