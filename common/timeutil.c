#include "timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

double tagc_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int64_t tagc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double tagc_wall_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tagc_sleep(double seconds) {
  if (seconds <= 0)
    return;
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int tagc_cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  int rc = pthread_condattr_init(&attr);
  if (rc == 0)
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  if (rc == 0)
    rc = pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
  return rc;
}

struct timespec tagc_deadline_in(double seconds) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  if (seconds < 0)
    seconds = 0;
  if (seconds > 1e9)
    seconds = 1e9;
  int64_t ns = (int64_t)ts.tv_nsec + (int64_t)((seconds - (double)(int64_t)seconds) * 1e9);
  ts.tv_sec += (time_t)seconds + (time_t)(ns / 1000000000);
  ts.tv_nsec = (long)(ns % 1000000000);
  return ts;
}

void tagc_format_duration(double s, char *buf, size_t cap) {
  if (s < 60)
    snprintf(buf, cap, "%.1fs", s);
  else if (s < 3600)
    snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
  else
    snprintf(buf, cap, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

int tagc_thread_delay_open(void) { return open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC); }

double tagc_thread_delay_s(int fd) {
  char buf[128];
  ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  unsigned long long on_cpu = 0, waiting = 0; /* ns: on a CPU, runnable on a run queue */
  return sscanf(buf, "%llu %llu", &on_cpu, &waiting) == 2 ? (double)waiting * 1e-9 : 0;
}
