/* Lease keeper: a thread that renews one lease every TTL/3 (one request per renewal, as the
 * gateway requires) and reports once when the lease is lost. The impatient keeper counts the
 * lease lost after a TTL without a successful renewal; the patient one only when etcd says so. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "cluster/etcd_internal.h"

struct tagc_etcd_keeper {
  tagc_etcd *c;
  int64_t id;
  double ttl_s;
  tagc_etcd_lease_lost_fn lost;
  void *arg;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  int stop;
  int patient;
  _Atomic double last_ok; /* tagc_now() of the last successful renewal */
};

/* Waits s seconds or until stopped; returns non-zero when stopped. */
static int wait_or_stop(tagc_etcd_keeper *k, double s) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + s;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  pthread_mutex_lock(&k->lock);
  while (!k->stop && pthread_cond_timedwait(&k->wake, &k->lock, &ts) != ETIMEDOUT) {
  }
  int stop = k->stop;
  pthread_mutex_unlock(&k->lock);
  return stop;
}

static void *keeper_main(void *arg) {
  tagc_etcd_keeper *k = arg;
  double period = k->ttl_s / 3;
  double last_ok = tagc_now();
  int failing = 0;
  while (!wait_or_stop(k, period)) {
    int64_t ttl = 0;
    /* Each renewal must finish well before the lease could lapse. */
    tagc_status st = etcd_keepalive(k->c, k->id, k->ttl_s / 3, &ttl);
    if (st == TAGC_OK) {
      if (failing)
        LOG_INFO("etcd", "lease %llx renewed again after %.1f s", (unsigned long long)k->id,
                 tagc_now() - last_ok);
      failing = 0;
      last_ok = tagc_now();
      atomic_store(&k->last_ok, last_ok);
      period = (double)ttl / 3;
      continue;
    }
    if (st == TAGC_ENOTFOUND || (!k->patient && tagc_now() - last_ok >= k->ttl_s)) {
      tagc_status why = st == TAGC_ENOTFOUND ? TAGC_ENOTFOUND : TAGC_ETIMEDOUT;
      LOG_WARN("etcd", "lease %llx lost: %s", (unsigned long long)k->id, tagc_last_error());
      k->lost(k->arg, k->id, why);
      break;
    }
    if (!failing++ || !k->patient)
      LOG_WARN("etcd", "lease %llx renewal failed (%s); retrying", (unsigned long long)k->id,
               tagc_last_error());
    period = k->ttl_s / 10 < 1.0 ? k->ttl_s / 10 : 1.0;
  }
  return NULL;
}

static tagc_status start(tagc_etcd *c, int64_t id, int64_t ttl_s, tagc_etcd_lease_lost_fn lost,
                         void *arg, int patient, tagc_etcd_keeper **out) {
  *out = NULL;
  if (!c || !lost || ttl_s <= 0)
    return tagc_errorf(TAGC_EINVAL, "etcd keeper: NULL client or callback, or TTL %lld",
                       (long long)ttl_s);
  tagc_etcd_keeper *k = calloc(1, sizeof *k);
  if (!k)
    return tagc_errorf(TAGC_ENOMEM, "etcd keeper");
  *k = (tagc_etcd_keeper){.c = c, .id = id, .ttl_s = (double)ttl_s, .lost = lost, .arg = arg,
                          .patient = patient};
  atomic_init(&k->last_ok, tagc_now());
  pthread_mutex_init(&k->lock, NULL);
  pthread_cond_init(&k->wake, NULL);
  int rc = pthread_create(&k->thread, NULL, keeper_main, k);
  if (rc != 0) {
    pthread_cond_destroy(&k->wake);
    pthread_mutex_destroy(&k->lock);
    free(k);
    return tagc_errorf(TAGC_ENOMEM, "etcd keeper thread: error %d", rc);
  }
  *out = k;
  return TAGC_OK;
}

tagc_status tagc_etcd_keeper_start(tagc_etcd *c, int64_t id, int64_t ttl_s,
                                   tagc_etcd_lease_lost_fn lost, void *arg,
                                   tagc_etcd_keeper **out) {
  return start(c, id, ttl_s, lost, arg, 0, out);
}

tagc_status tagc_etcd_keeper_start_patient(tagc_etcd *c, int64_t id, int64_t ttl_s,
                                           tagc_etcd_lease_lost_fn lost, void *arg,
                                           tagc_etcd_keeper **out) {
  return start(c, id, ttl_s, lost, arg, 1, out);
}

double tagc_etcd_keeper_silence_s(const tagc_etcd_keeper *k) {
  return tagc_now() - atomic_load(&((tagc_etcd_keeper *)k)->last_ok);
}

void tagc_etcd_keeper_stop(tagc_etcd_keeper *k) {
  if (!k)
    return;
  pthread_mutex_lock(&k->lock);
  k->stop = 1;
  pthread_cond_signal(&k->wake);
  pthread_mutex_unlock(&k->lock);
  pthread_join(k->thread, NULL);
  pthread_cond_destroy(&k->wake);
  pthread_mutex_destroy(&k->lock);
  free(k);
}
