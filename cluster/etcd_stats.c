/* The etcd client's request counters (see etcd_stats.h). */
#include "cluster/etcd_stats.h"

#include <stdatomic.h>

const double tagc_etcd_latency_bounds[TAGC_ETCD_LATENCY_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

static _Atomic uint64_t requests, errors, micros, sent_bytes, received_bytes;
static _Atomic uint64_t le[TAGC_ETCD_LATENCY_BUCKETS];

/* The total is counted before the buckets and read after them (sequentially consistent), so
 * a copy never shows a bucket above the total. */
void tagc_etcd_stats_record(double seconds, int failed, uint64_t sent, uint64_t received) {
  atomic_fetch_add(&requests, 1);
  atomic_fetch_add(&sent_bytes, sent);
  atomic_fetch_add(&received_bytes, received);
  if (failed)
    atomic_fetch_add(&errors, 1);
  atomic_fetch_add(&micros, (uint64_t)(seconds > 0 ? seconds * 1e6 : 0));
  for (int i = 0; i < TAGC_ETCD_LATENCY_BUCKETS; i++) {
    if (seconds <= tagc_etcd_latency_bounds[i])
      atomic_fetch_add(&le[i], 1);
  }
}

void tagc_etcd_stats_get(tagc_etcd_stats *out) {
  for (int i = 0; i < TAGC_ETCD_LATENCY_BUCKETS; i++)
    out->le[i] = atomic_load(&le[i]);
  out->seconds = (double)atomic_load(&micros) / 1e6;
  out->errors = atomic_load(&errors);
  out->bytes_sent = atomic_load(&sent_bytes);
  out->bytes_received = atomic_load(&received_bytes);
  out->requests = atomic_load(&requests);
}
