/* Process-wide counters of the etcd client's unary requests (not watch streams): how many,
 * how many failed, the bytes of their JSON bodies each way (HTTP headers not counted), and a
 * latency histogram, for /metrics and bench/member_sim.c. The transport (etcd_curl.c) records
 * each request; everything else only reads a copy.
 *
 * A request counts as failed when the transport could not complete it (connection refused,
 * timeout, TLS, reply too long) or etcd answered with HTTP status 400 or more.
 *
 * Threading: any thread; lock-free (C11 atomics). */
#ifndef TAGC_CLUSTER_ETCD_STATS_H
#define TAGC_CLUSTER_ETCD_STATS_H

#include <stdint.h>

/* Upper bounds (seconds) of the latency buckets; the +Inf bucket is `requests`. */
#define TAGC_ETCD_LATENCY_BUCKETS 12
extern const double tagc_etcd_latency_bounds[TAGC_ETCD_LATENCY_BUCKETS];

typedef struct tagc_etcd_stats {
  uint64_t requests;                                /* completed or failed */
  uint64_t errors;
  uint64_t le[TAGC_ETCD_LATENCY_BUCKETS];           /* requests that took <= bound (cumulative) */
  double seconds;                                   /* their total duration */
  uint64_t bytes_sent;                              /* request bodies */
  uint64_t bytes_received;                          /* reply bodies */
} tagc_etcd_stats;

/* Records one request that took `seconds`, failed when `failed` is non-zero, and sent and
 * received bodies of `sent` and `received` bytes. */
void tagc_etcd_stats_record(double seconds, int failed, uint64_t sent, uint64_t received);

/* A copy of the counters so far (each field read atomically; the copy as a whole is not a
 * snapshot: a concurrent request may show in one field and not yet in another). */
void tagc_etcd_stats_get(tagc_etcd_stats *out);

#endif
