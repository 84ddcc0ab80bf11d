/* Prometheus text exposition (version 0.0.4) for the worker's and the coordinator's /metrics:
 * a growing text buffer, metric families whose every sample carries the `tagc_job` label (not
 * `job`, which Prometheus sets to the scrape job's name), a
 * histogram writer, and the metrics every tagc process exports (process_* from /proc,
 * tagc_build_info, the etcd client's request counters of cluster/etcd_stats.h).
 *
 * Usage: tagc_prom p; tagc_prom_init(&p, job); tagc_prom_gauge(&p, ...); ...;
 * char *text = tagc_prom_finish(&p);  (caller frees; NULL when out of memory).
 *
 * Names follow Prometheus conventions: base units (seconds, bytes) in the name, counters end
 * in _total. Threading: a tagc_prom belongs to one thread. */
#ifndef TAGC_CLUSTER_PROM_H
#define TAGC_CLUSTER_PROM_H

#include <stddef.h>
#include <stdint.h>

typedef struct tagc_prom {
  char *buf;
  size_t len, cap;
  int failed;          /* an allocation failed: finish returns NULL */
  char job[160];       /* the tagc_job label's value, escaped */
} tagc_prom;

/* Starts an empty text; job (may be NULL: "") is the value of every sample's tagc_job label. */
void tagc_prom_init(tagc_prom *p, const char *job);

/* HELP and TYPE lines of family name (type: gauge, counter or histogram). */
void tagc_prom_family(tagc_prom *p, const char *name, const char *type, const char *help);

/* One sample of name with the tagc_job label, then `labels` (e.g. "kind=\"crash\"", or NULL). NaN
 * and infinities are written as Prometheus spells them. */
void tagc_prom_sample(tagc_prom *p, const char *name, const char *labels, double v);

/* A family with one sample: tagc_prom_family + tagc_prom_sample(name, NULL, v). */
void tagc_prom_gauge(tagc_prom *p, const char *name, const char *help, double v);
void tagc_prom_counter(tagc_prom *p, const char *name, const char *help, double v);

/* A histogram family: cumulative[i] observations <= bounds[i] for i < n, then count (+Inf)
 * and sum. */
void tagc_prom_histogram(tagc_prom *p, const char *name, const char *help, const double *bounds,
                         const uint64_t *cumulative, int n, uint64_t count, double sum);

/* process_cpu_seconds_total, process_resident_memory_bytes, process_start_time_seconds (from
 * /proc/self; a value that cannot be read is left out), tagc_build_info{version, program} 1
 * and the etcd client's tagc_etcd_requests_total, tagc_etcd_request_errors_total and
 * tagc_etcd_request_duration_seconds. */
void tagc_prom_common(tagc_prom *p, const char *program);

/* The text (caller frees), or NULL when an allocation failed. p is empty afterwards. */
char *tagc_prom_finish(tagc_prom *p);

/* Records one observation of v into cumulative buckets (n bounds) and the sum and count. */
void tagc_prom_observe(const double *bounds, uint64_t *cumulative, int n, uint64_t *count,
                       double *sum, double v);

#endif
