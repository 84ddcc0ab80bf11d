/* Prometheus text exposition (see prom.h). */
#include "cluster/prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/etcd_stats.h"

static void add(tagc_prom *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(tagc_prom *p, const char *fmt, ...) {
  while (!p->failed) {
    va_list ap;
    va_start(ap, fmt);
    int n = p->buf ? vsnprintf(p->buf + p->len, p->cap - p->len, fmt, ap) : -1;
    va_end(ap);
    if (n >= 0 && p->len + (size_t)n < p->cap) {
      p->len += (size_t)n;
      return;
    }
    size_t cap = p->cap ? p->cap * 2 : 4096;
    char *bigger = realloc(p->buf, cap);
    if (!bigger) {
      p->failed = 1;
      return;
    }
    p->buf = bigger;
    p->cap = cap;
    p->buf[p->len] = '\0';
  }
}

void tagc_prom_init(tagc_prom *p, const char *job) {
  memset(p, 0, sizeof *p);
  size_t o = 0; /* label values escape backslash, double quote and newline */
  for (const char *c = job ? job : ""; *c && o + 3 < sizeof p->job; c++) {
    if (*c == '\\' || *c == '"' || *c == '\n')
      p->job[o++] = '\\';
    p->job[o++] = *c == '\n' ? 'n' : *c;
  }
  p->job[o] = '\0';
}

void tagc_prom_family(tagc_prom *p, const char *name, const char *type, const char *help) {
  add(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void number(double v, char *buf, size_t cap) {
  if (isnan(v))
    snprintf(buf, cap, "NaN");
  else if (isinf(v))
    snprintf(buf, cap, v > 0 ? "+Inf" : "-Inf");
  else
    snprintf(buf, cap, "%.17g", v);
}

void tagc_prom_sample(tagc_prom *p, const char *name, const char *labels, double v) {
  char num[40];
  number(v, num, sizeof num);
  add(p, "%s{tagc_job=\"%s\"%s%s} %s\n", name, p->job, labels ? "," : "", labels ? labels : "",
      num);
}

void tagc_prom_gauge(tagc_prom *p, const char *name, const char *help, double v) {
  tagc_prom_family(p, name, "gauge", help);
  tagc_prom_sample(p, name, NULL, v);
}

void tagc_prom_counter(tagc_prom *p, const char *name, const char *help, double v) {
  tagc_prom_family(p, name, "counter", help);
  tagc_prom_sample(p, name, NULL, v);
}

void tagc_prom_histogram(tagc_prom *p, const char *name, const char *help, const double *bounds,
                         const uint64_t *cumulative, int n, uint64_t count, double sum) {
  tagc_prom_family(p, name, "histogram", help);
  char sample[200], le[64];
  snprintf(sample, sizeof sample, "%s_bucket", name);
  for (int i = 0; i < n; i++) {
    snprintf(le, sizeof le, "le=\"%g\"", bounds[i]);
    tagc_prom_sample(p, sample, le, (double)cumulative[i]);
  }
  tagc_prom_sample(p, sample, "le=\"+Inf\"", (double)count);
  snprintf(sample, sizeof sample, "%s_sum", name);
  tagc_prom_sample(p, sample, NULL, sum);
  snprintf(sample, sizeof sample, "%s_count", name);
  tagc_prom_sample(p, sample, NULL, (double)count);
}

void tagc_prom_observe(const double *bounds, uint64_t *cumulative, int n, uint64_t *count,
                       double *sum, double v) {
  for (int i = 0; i < n; i++)
    cumulative[i] += v <= bounds[i];
  *count += 1;
  *sum += v;
}

/* Fields 14 (utime), 15 (stime) and 22 (starttime, clock ticks after boot) of /proc/self/stat. */
static int proc_stat(double *cpu_s, double *start_ticks) {
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f)
    return 0;
  char line[1024];
  int ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  const char *after = ok ? strrchr(line, ')') : NULL; /* the command name may hold spaces */
  unsigned long long ut, st, start;
  if (!after || sscanf(after + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d "
                                   "%*d %*d %*d %*d %llu", &ut, &st, &start) != 3)
    return 0;
  double hz = (double)sysconf(_SC_CLK_TCK);
  *cpu_s = (double)(ut + st) / hz;
  *start_ticks = (double)start / hz;
  return 1;
}

/* The boot time (btime of /proc/stat, seconds since the epoch), or -1. */
static double boot_time(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f)
    return -1;
  char line[256];
  double btime = -1;
  unsigned long long v;
  while (btime < 0 && fgets(line, sizeof line, f)) {
    if (sscanf(line, "btime %llu", &v) == 1)
      btime = (double)v;
  }
  fclose(f);
  return btime;
}

static double resident_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size, rss;
  int ok = f && fscanf(f, "%llu %llu", &size, &rss) == 2;
  if (f)
    fclose(f);
  return ok ? (double)rss * (double)sysconf(_SC_PAGESIZE) : -1;
}

static void etcd_metrics(tagc_prom *p) {
  tagc_etcd_stats es;
  tagc_etcd_stats_get(&es);
  tagc_prom_counter(p, "tagc_etcd_requests_total", "Requests this process sent to etcd "
                    "(watch streams excluded)", (double)es.requests);
  tagc_prom_counter(p, "tagc_etcd_request_errors_total", "etcd requests that failed (no "
                    "reply, or HTTP status 400 or more)", (double)es.errors);
  tagc_prom_histogram(p, "tagc_etcd_request_duration_seconds", "Duration of etcd requests",
                      tagc_etcd_latency_bounds, es.le, TAGC_ETCD_LATENCY_BUCKETS, es.requests,
                      es.seconds);
}

void tagc_prom_common(tagc_prom *p, const char *program) {
  double cpu, start, boot = boot_time(), rss = resident_bytes();
  if (proc_stat(&cpu, &start)) {
    tagc_prom_counter(p, "process_cpu_seconds_total", "User and system CPU time spent in "
                      "seconds", cpu);
    if (boot >= 0)
      tagc_prom_gauge(p, "process_start_time_seconds", "Start time of the process since unix "
                      "epoch in seconds", boot + start);
  }
  if (rss >= 0)
    tagc_prom_gauge(p, "process_resident_memory_bytes", "Resident memory size in bytes", rss);
  char labels[160];
  snprintf(labels, sizeof labels, "version=\"%s\",program=\"%s\"", TAGC_VERSION, program);
  tagc_prom_family(p, "tagc_build_info", "gauge", "Always 1; the labels name the build");
  tagc_prom_sample(p, "tagc_build_info", labels, 1);
  etcd_metrics(p);
}

char *tagc_prom_finish(tagc_prom *p) {
  char *text = p->buf;
  if (p->failed) {
    free(text);
    text = NULL;
  } else if (!text) {
    text = calloc(1, 1); /* nothing was added */
  }
  memset(p, 0, sizeof *p);
  return text;
}
