/* Byte-scaled operation deadlines from a measured link rate.
 *
 * A collective that moves many bytes over a slow link takes long without anything being
 * wrong, so a fixed timeout either fires falsely on large transfers or detects hangs late on
 * small ones. Instead every operation gets
 *
 *     timeout = base + min(max_extra_s, slack * wire_bytes / rate)
 *
 * where base is the caller's timeout (what a latency-bound exchange may take: skew between
 * ranks, scheduling), wire_bytes is the payload of this rank's busier direction, and rate is
 * the link rate measured over recently completed transfers:
 *
 *   - only transfers of at least min_sample_bytes are measured, since the time of a small
 *     one is latency, not bandwidth;
 *   - the estimate is the lower median of the last TAGC_LINK_WINDOW samples, so a few
 *     transfers that waited for a late peer (a low rate) or hit a burst allowance (a high
 *     one) do not move it, and of two middle values the slower (more lenient) one counts;
 *   - before the first sample the rate is initial_rate (100 Mbit/s by default: conservative
 *     for a data centre, so a first large transfer is not a false failure), and the rate used
 *     is never below min_rate, which bounds the deadline together with max_extra_s.
 *
 * Pure logic: no clock, no I/O, no locking (the caller serialises access to an estimator). */
#ifndef TAGC_COMM_DEADLINE_H
#define TAGC_COMM_DEADLINE_H

#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TAGC_LINK_WINDOW 31

typedef struct tagc_deadline_config {
  double slack;              /* expected transfer time is multiplied by this (>= 1) */
  double initial_rate;       /* bytes/s assumed before any sample (> 0) */
  double min_rate;           /* floor on the rate used, bytes/s (> 0, <= initial_rate) */
  uint64_t min_sample_bytes; /* smaller transfers are not measured */
  double max_extra_s;        /* cap on the time added to the base timeout (>= 0) */
} tagc_deadline_config;

typedef struct tagc_link_estimator {
  tagc_deadline_config cfg;
  double rate[TAGC_LINK_WINDOW]; /* ring of the last samples, bytes/s */
  int n;                         /* samples held (<= TAGC_LINK_WINDOW) */
  int next;                      /* ring slot of the next sample */
  uint64_t samples;              /* samples taken in total */
} tagc_link_estimator;

/* Defaults: slack 3, initial rate 12.5e6 B/s (100 Mbit/s), min rate 1e6 B/s, samples from
 * 256 KiB, at most 3600 s added. */
void tagc_deadline_config_init(tagc_deadline_config *cfg);

/* Starts an estimator with no samples. TAGC_EINVAL (one-line detail naming the field) when
 * cfg breaks the bounds above; est is then left unusable. cfg is copied. */
tagc_status tagc_link_init(tagc_link_estimator *est, const tagc_deadline_config *cfg);

/* Records one completed transfer of `bytes` (this rank's busier direction) that took
 * `seconds`. Ignored when bytes < min_sample_bytes or seconds is not a positive finite
 * number (a clock step). */
void tagc_link_record(tagc_link_estimator *est, uint64_t bytes, double seconds);

/* The rate the deadlines use now: the lower median of the samples, or initial_rate before
 * the first one; never below min_rate. Bytes per second. */
double tagc_link_rate(const tagc_link_estimator *est);

/* The measured lower median alone, or 0 before the first sample. */
double tagc_link_measured_rate(const tagc_link_estimator *est);

/* The upper quartile of the samples (the sorted sample at 3(n-1)/4), or 0 before the first:
 * what the link carries when the peer is ready. A blocking exchange's time includes the wait
 * for a late peer, so on a fast link the median measures the ranks' skew more than the wire
 * (loopback, 2 busy cores: a median of 133 MB/s); `--compress auto` prices wires with this
 * one. A burst allowance can only lift samples above it, and a quarter of them may. */
double tagc_link_peak_rate(const tagc_link_estimator *est);

/* base_s + min(max_extra_s, slack * bytes / tagc_link_rate(est)): the timeout of an
 * operation that moves `bytes` with base timeout base_s. */
double tagc_link_timeout(const tagc_link_estimator *est, double base_s, uint64_t bytes);

#ifdef __cplusplus
}
#endif

#endif
