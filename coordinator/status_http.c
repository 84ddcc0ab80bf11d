#include "coordinator/status_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/keys.h"
#include "cluster/prom.h"
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

/* Failure kinds always exported (0 until seen), in the order of docs/operations.md; a kind
 * outside this list that appears in failures_total is exported too. */
static const tagc_failure_kind kinds[] = {TAGC_FAIL_CRASH, TAGC_FAIL_LEASE, TAGC_FAIL_HANG,
                                           TAGC_FAIL_PARTITION, TAGC_FAIL_OOM, TAGC_FAIL_INJECTED,
                                           TAGC_FAIL_TIMEOUT, TAGC_FAIL_COMM, TAGC_FAIL_STRAGGLER};
_Static_assert(sizeof kinds / sizeof kinds[0] == TAGC_FAIL_KINDS, "every failure kind exported");

static int listed_kind(const char *kind) {
  return tagc_failure_kind_parse(kind) != TAGC_FAIL_UNKNOWN;
}

static void failure_metrics(tagc_prom *p, const json_t *totals) {
  tagc_prom_family(p, "tagc_coordinator_failures_total", "counter", "Failure reports and lost "
                   "leases, by kind, over the job");
  char label[128];
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    const char *name = tagc_failure_kind_name(kinds[i]);
    snprintf(label, sizeof label, "kind=\"%s\"", name);
    tagc_prom_sample(p, "tagc_coordinator_failures_total", label,
                     (double)json_integer_value(json_object_get(totals, name)));
  }
  const char *kind;
  json_t *n;
  json_object_foreach((json_t *)totals, kind, n) {
    if (listed_kind(kind) || strspn(kind, "abcdefghijklmnopqrstuvwxyz_") != strlen(kind) ||
        strlen(kind) > 64)
      continue;
    snprintf(label, sizeof label, "kind=\"%s\"", kind);
    tagc_prom_sample(p, "tagc_coordinator_failures_total", label,
                     (double)json_integer_value(n));
  }
}

/* The committed checkpoint (ckpt/committed): its step and age; nothing before the first. */
static void checkpoint_metrics(tagc_prom *p, const json_t *ckpt) {
  const json_t *time = json_object_get(ckpt, "time");
  if (!json_is_number(time))
    return;
  tagc_prom_gauge(p, "tagc_coordinator_checkpoint_last_step", "Step of the job's latest "
                  "committed checkpoint", (double)coord_int_field(ckpt, "step"));
  tagc_prom_gauge(p, "tagc_coordinator_checkpoint_age_seconds", "Seconds since the job's "
                  "latest checkpoint was committed", tagc_wall_time() - json_number_value(time));
}

/* Prometheus text of the snapshot. Caller holds s->lock. */
static char *metrics_text(const coord_status *s) {
  const json_t *plan = json_object_get(s->snapshot, "plan");
  const json_t *progress = json_object_get(s->snapshot, "progress");
  tagc_prom p;
  tagc_prom_init(&p, json_string_value(json_object_get(s->snapshot, "job")));
  tagc_prom_gauge(&p, "tagc_coordinator_leader", "1 when this coordinator is the job's leader",
                  s->leader);
  tagc_prom_gauge(&p, "tagc_coordinator_generation", "Current generation number",
                  (double)coord_int_field(s->snapshot, "generation"));
  tagc_prom_gauge(&p, "tagc_coordinator_world_size", "Workers in the current generation",
                  (double)coord_int_field(plan, "world"));
  tagc_prom_gauge(&p, "tagc_coordinator_step", "Training step last reported by rank 0",
                  (double)coord_int_field(s->snapshot, "step"));
  if (json_is_object(progress)) {
    tagc_prom_gauge(&p, "tagc_coordinator_loss", "Training loss last reported by rank 0",
                    json_number_value(json_object_get(progress, "loss")));
    tagc_prom_gauge(&p, "tagc_coordinator_tokens_per_second", "Global tokens per second last "
                    "reported by rank 0 (of its last step's step_seconds)",
                    json_number_value(json_object_get(progress, "tokens_per_s")));
    const json_t *good = json_object_get(progress, "goodput");
    if (json_is_number(good))
      tagc_prom_gauge(&p, "tagc_coordinator_goodput_ratio", "Goodput rank 0 last reported: "
                      "fault-free time of its committed steps over its wall time",
                      json_number_value(good));
  }
  tagc_prom_gauge(&p, "tagc_coordinator_members", "Workers registered with a live lease",
                  (double)json_object_size(json_object_get(s->snapshot, "workers")));
  tagc_prom_gauge(&p, "tagc_coordinator_job_done", "1 once the job is done", s->done);
  failure_metrics(&p, json_object_get(plan, "failures_total"));
  checkpoint_metrics(&p, json_object_get(s->snapshot, "checkpoint"));
  tagc_prom_common(&p, "tagc-coordinator");
  return tagc_prom_finish(&p);
}

void coord_status_serve(void *arg, const char *path, tagc_http_response *resp) {
  coord_status *s = arg;
  pthread_mutex_lock(&s->lock);
  if (strcmp(path, "/healthz") == 0) {
    int ok = s->etcd_ok_at > 0 && tagc_now() - s->etcd_ok_at < HEALTH_STALE_S;
    resp->status = ok ? 200 : 503;
    char line[300];
    snprintf(line, sizeof line, ok ? "ok\n" : "etcd unreachable: %s\n",
             s->etcd_error[0] ? s->etcd_error : "no read yet");
    resp->body = strdup(line);
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
