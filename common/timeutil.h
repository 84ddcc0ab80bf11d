/* Clocks used for deadlines, rates and ETAs. */
#ifndef TAGC_COMMON_TIMEUTIL_H
#define TAGC_COMMON_TIMEUTIL_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Monotonic time in seconds (CLOCK_MONOTONIC). */
double tagc_now(void);

/* Monotonic time in nanoseconds. */
int64_t tagc_now_ns(void);

/* Wall-clock time in seconds since the epoch (for records humans read). */
double tagc_wall_time(void);

/* s seconds for people: "12.3s", "4m05s", "2h03m" into buf. */
void tagc_format_duration(double s, char *buf, size_t cap);

/* Initialises a condition variable whose timed waits use CLOCK_MONOTONIC, so that a jump of
 * the wall clock neither stretches nor cuts a wait. Returns pthread's error number (0 = ok). */
int tagc_cond_init_monotonic(pthread_cond_t *cv);

/* The absolute CLOCK_MONOTONIC time `seconds` from now, for pthread_cond_timedwait on a
 * condition variable made by tagc_cond_init_monotonic. Negative seconds count as 0. */
struct timespec tagc_deadline_in(double seconds);

/* Sleeps for the given seconds, resuming after signals. */
void tagc_sleep(double seconds);

/* The run-queue delay of a thread: the seconds it was ready to run but held off a CPU (other
 * threads on its cores, a CPU quota such as a cgroup's cpu.max), from Linux's
 * /proc/thread-self/schedstat. tagc_thread_delay_open() opens it for the calling thread
 * (a descriptor the caller closes; -1 where the kernel has none); tagc_thread_delay_s(fd)
 * reads the total since the thread started (0 for -1 or a failed read). One pread. */
int tagc_thread_delay_open(void);
double tagc_thread_delay_s(int fd);

#ifdef __cplusplus
}
#endif

#endif
