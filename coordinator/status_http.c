#include "coordinator/status_http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/timeutil.h"

/* /healthz fails when no read of etcd succeeded for this long. */
#define HEALTH_STALE_S 5.0

void coord_status_init(coord_status *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->lock, NULL);
}

void coord_status_free(coord_status *s) {
  json_decref(s->snapshot);
  s->snapshot = NULL;
  pthread_mutex_destroy(&s->lock);
}

void coord_status_publish(coord_status *s, const coord_view *v, int leader, const char *job,
                          const char *self, const char *decision) {
  json_t *snap = json_pack("{s:s, s:s, s:s, s:s?, s:I, s:O?, s:O, s:O, s:O?, s:O?, s:O?, s:O?, s:s, s:I}",
                           "role", leader ? "leader" : "standby", "job", job, "self", self,
                           "leader", v->leader, "generation", (json_int_t)v->gen, "plan", v->plan,
                           "workers", v->worker_info, "failures", v->failures, "progress",
                           v->progress, "checkpoint", v->ckpt, "done", v->done, "config",
                           v->config, "decision", decision, "revision", (json_int_t)v->r.revision);
  if (snap && v->progress)
    json_object_set(snap, "step", json_object_get(v->progress, "step"));
  if (snap) /* bad worker ids and leave records, failure reports of non-members (view.h) */
    json_object_set_new(snap, "ignored_keys", json_integer(v->ignored_keys));
  pthread_mutex_lock(&s->lock);
  if (snap) {
    json_decref(s->snapshot);
    s->snapshot = snap;
  }
  s->leader = leader;
  s->done = v->done != NULL;
  s->etcd_ok_at = tagc_now();
  pthread_mutex_unlock(&s->lock);
}

void coord_status_set_leader(coord_status *s, int leader) {
  pthread_mutex_lock(&s->lock);
  s->leader = leader;
  pthread_mutex_unlock(&s->lock);
}

void coord_status_etcd_failed(coord_status *s, const char *what) {
  pthread_mutex_lock(&s->lock);
  int changed = strcmp(s->etcd_error, tagc_last_error()) != 0;
  snprintf(s->etcd_error, sizeof s->etcd_error, "%s", tagc_last_error());
  pthread_mutex_unlock(&s->lock);
  if (changed)
    LOG_WARN("coord", "%s: %s", what, tagc_last_error());
}

/* Appends printf output to a growing buffer; on allocation failure the text is cut. */
typedef struct text {
  char *buf;
  size_t len, cap;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = t->buf ? vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap) : -1;
    va_end(ap);
    if (n >= 0 && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap * 2 : 1024;
    char *bigger = realloc(t->buf, cap);
    if (!bigger)
      return;
    t->buf = bigger;
    t->cap = cap;
    t->buf[t->len] = '\0';
  }
}

static void gauge(text *t, const char *name, const char *help, double value) {
  add(t, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, value);
}

/* Prometheus text of the snapshot. Caller holds s->lock. */
static char *metrics_text(const coord_status *s) {
  const json_t *plan = json_object_get(s->snapshot, "plan");
  text t = {0};
  gauge(&t, "tagc_coordinator_leader", "1 when this coordinator is the job's leader", s->leader);
  gauge(&t, "tagc_generation", "Current generation number",
        (double)coord_int_field(s->snapshot, "generation"));
  gauge(&t, "tagc_world_size", "Workers in the current generation",
        (double)coord_int_field(plan, "world"));
  gauge(&t, "tagc_step", "Training step last reported by rank 0",
        (double)coord_int_field(s->snapshot, "step"));
  gauge(&t, "tagc_members", "Workers registered with a live lease",
        (double)json_object_size(json_object_get(s->snapshot, "workers")));
  gauge(&t, "tagc_job_done", "1 once the job is done", s->done);
  add(&t, "# HELP tagc_failures_total Failure reports and lost leases, by kind, over the job\n"
          "# TYPE tagc_failures_total counter\n");
  static const char *const kinds[] = {"comm", "timeout", "oom", "crash", "hang", "injected", "lease"};
  const json_t *totals = json_object_get(plan, "failures_total");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    add(&t, "tagc_failures_total{kind=\"%s\"} %lld\n", kinds[i],
        (long long)json_integer_value(json_object_get(totals, kinds[i])));
  return t.buf;
}

void coord_status_serve(void *arg, const char *path, tagc_http_response *resp) {
  coord_status *s = arg;
  pthread_mutex_lock(&s->lock);
  if (strcmp(path, "/healthz") == 0) {
    int ok = s->etcd_ok_at > 0 && tagc_now() - s->etcd_ok_at < HEALTH_STALE_S;
    resp->status = ok ? 200 : 503;
    text t = {0};
    add(&t, ok ? "ok\n" : "etcd unreachable: %s\n", s->etcd_error[0] ? s->etcd_error : "no read yet");
    resp->body = t.buf;
  } else if (strcmp(path, "/status") == 0) {
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = s->snapshot ? json_dumps(s->snapshot, JSON_INDENT(2) | JSON_SORT_KEYS)
                             : strdup("{\"role\":\"starting\"}");
  } else if (strcmp(path, "/metrics") == 0) {
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp->body = metrics_text(s);
  } else {
    resp->body = strdup("not found: try /healthz, /status or /metrics\n");
  }
  pthread_mutex_unlock(&s->lock);
}
