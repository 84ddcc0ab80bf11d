/* Clocks used for deadlines, rates and ETAs. */
#ifndef TAGC_COMMON_TIMEUTIL_H
#define TAGC_COMMON_TIMEUTIL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Monotonic time in seconds (CLOCK_MONOTONIC). */
double tagc_now(void);

/* Monotonic time in nanoseconds. */
int64_t tagc_now_ns(void);

/* Wall-clock time in seconds since the epoch (for records humans read). */
double tagc_wall_time(void);

/* Sleeps for the given seconds, resuming after signals. */
void tagc_sleep(double seconds);

#ifdef __cplusplus
}
#endif

#endif
