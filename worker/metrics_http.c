/* The worker's /metrics and /healthz (see metrics_http.h). */
#include "worker/metrics_http.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "cluster/http.h"

struct tagc_metrics_http {
  tagc_http *http;
  double started;
  pthread_mutex_t mu; /* guards sample */
  tagc_worker_sample sample;
};

/* One metric: HELP, TYPE and the value (NaN and infinities as Prometheus spells them). */
static void metric(FILE *f, const char *name, const char *type, const char *help, double v) {
  char num[40];
  if (isnan(v))
    snprintf(num, sizeof num, "NaN");
  else if (isinf(v))
    snprintf(num, sizeof num, v > 0 ? "+Inf" : "-Inf");
  else
    snprintf(num, sizeof num, "%.17g", v);
  fprintf(f, "# HELP tagc_worker_%s %s\n# TYPE tagc_worker_%s %s\ntagc_worker_%s %s\n", name,
          help, name, type, name, num);
}

char *tagc_metrics_text(const tagc_worker_sample *s, double uptime_s) {
  char *buf = NULL;
  size_t len = 0;
  FILE *t = open_memstream(&buf, &len);
  if (!t)
    return NULL;
  metric(t, "step", "gauge", "Steps completed", (double)s->step);
  metric(t, "loss", "gauge", "Training loss of the last step", s->loss);
  metric(t, "step_seconds", "gauge", "Wall time of the last step", s->step_s);
  metric(t, "tokens_per_second", "gauge", "Global tokens per second of the last step",
         s->tokens_per_s);
  metric(t, "bytes_sent_total", "counter", "Collective payload bytes this worker sent",
         (double)s->bytes_sent);
  metric(t, "bytes_received_total", "counter", "Collective payload bytes this worker received",
         (double)s->bytes_recv);
  metric(t, "failures_total", "counter", "Failures this worker saw (data path or superseded)",
         (double)s->failures);
  metric(t, "recoveries_total", "counter", "Failures followed by a completed step",
         (double)s->recoveries);
  metric(t, "steps_lost_total", "counter", "Steps recomputed after failures",
         (double)s->steps_lost);
  metric(t, "max_recovery_seconds", "gauge", "Longest time from a failure to the next "
         "completed step", s->max_recovery_s);
  metric(t, "last_recovery_seconds", "gauge", "Time from the last failure to the next "
         "completed step", s->last_recovery_s);
  metric(t, "recovering", "gauge", "1 while a failure awaits its first completed step",
         s->recovering);
  metric(t, "nonfinite_skips_total", "counter", "Steps every rank skipped for a non-finite "
         "loss or gradient", (double)s->nonfinite_skips);
  metric(t, "generation", "gauge", "Generation this worker runs or last ran", (double)s->generation);
  metric(t, "world_size", "gauge", "Workers in that generation", s->world_size);
  metric(t, "rank", "gauge", "This worker's rank in that generation (-1: none yet)", s->rank);
  metric(t, "link_rate_bytes_per_second", "gauge", "Measured link rate the collective "
         "deadlines use (0: not measured yet)", s->link_rate);
  metric(t, "uptime_seconds", "gauge", "Seconds since the metrics server started", uptime_s);
  int bad = ferror(t);
  if (fclose(t) != 0 || bad) {
    free(buf);
    return NULL;
  }
  return buf;
}

static void serve(void *arg, const char *path, tagc_http_response *resp) {
  tagc_metrics_http *m = arg;
  pthread_mutex_lock(&m->mu);
  tagc_worker_sample s = m->sample;
  pthread_mutex_unlock(&m->mu);
  if (strcmp(path, "/metrics") == 0) {
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp->body = tagc_metrics_text(&s, tagc_now() - m->started);
    if (!resp->body)
      resp->status = 500;
  } else if (strcmp(path, "/healthz") == 0) {
    char line[160];
    if (s.rank >= 0)
      snprintf(line, sizeof line, "ok: generation %lld, rank %d of %d, step %lld\n",
               (long long)s.generation, s.rank, s.world_size, (long long)s.step);
    else
      snprintf(line, sizeof line, "ok: waiting for a generation\n");
    resp->body = strdup(line);
    resp->status = resp->body ? 200 : 500;
  } else {
    resp->body = strdup("not found: try /metrics or /healthz\n");
  }
}

tagc_status tagc_metrics_http_start(const char *addr, tagc_metrics_http **out) {
  *out = NULL;
  tagc_metrics_http *m = calloc(1, sizeof *m);
  if (!m)
    return tagc_errorf(TAGC_ENOMEM, "metrics server");
  m->started = tagc_now();
  m->sample.loss = NAN;
  m->sample.rank = -1;
  pthread_mutex_init(&m->mu, NULL);
  tagc_status st = tagc_http_start(addr, serve, m, &m->http);
  if (st != TAGC_OK) {
    char detail[256];
    snprintf(detail, sizeof detail, "%s", tagc_last_error());
    st = tagc_errorf(st, "--metrics-addr: %s", detail);
    pthread_mutex_destroy(&m->mu);
    free(m);
    return st;
  }
  *out = m;
  return TAGC_OK;
}

int tagc_metrics_http_port(const tagc_metrics_http *m) {
  return tagc_http_port(m->http);
}

void tagc_metrics_http_publish(tagc_metrics_http *m, const tagc_worker_sample *s) {
  pthread_mutex_lock(&m->mu);
  m->sample = *s;
  pthread_mutex_unlock(&m->mu);
}

void tagc_metrics_http_stop(tagc_metrics_http *m) {
  if (!m)
    return;
  tagc_http_stop(m->http);
  pthread_mutex_destroy(&m->mu);
  free(m);
}
