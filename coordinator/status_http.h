/* What a coordinator serves over HTTP (internal to coordinator/): a snapshot of the job's
 * state, replaced after every read of etcd, and the handler that answers /healthz (200 while
 * reads from etcd succeed, else 503 with the last etcd error), /status (the snapshot as JSON)
 * and /metrics (Prometheus text) from it.
 *
 * Threading: the coordinator's loop publishes; the HTTP server's thread reads through
 * coord_status_serve; `lock` orders them. */
#ifndef TAGC_COORDINATOR_STATUS_HTTP_H
#define TAGC_COORDINATOR_STATUS_HTTP_H

#include <pthread.h>

#include <jansson.h>

#include "cluster/http.h"
#include "coordinator/view.h"

typedef struct coord_status {
  pthread_mutex_t lock;
  json_t *snapshot;    /* the /status body; NULL before the first read */
  int leader;          /* this coordinator leads the job */
  int done;            /* the job's `done` key exists */
  double etcd_ok_at;   /* tagc_now() of the last successful read, 0 before one */
  char etcd_error[256];
} coord_status;

/* Empty snapshot, no read yet. */
void coord_status_init(coord_status *s);

/* Frees the snapshot and the lock. Not while a server may call coord_status_serve. */
void coord_status_free(coord_status *s);

/* Replaces the snapshot from a fresh view: role, job, self (this coordinator's election
 * value), leader, generation, plan, workers, failures, step, progress, checkpoint, done,
 * config, decision (the planner's last reason), ignored_keys and revision. Copies what it
 * keeps; v stays the caller's. A snapshot that cannot be allocated keeps the previous one. */
void coord_status_publish(coord_status *s, const coord_view *v, int leader, const char *job,
                          const char *self, const char *decision);

/* Sets the role served without a new read. */
void coord_status_set_leader(coord_status *s, int leader);

/* Records this thread's last error as the etcd error /healthz reports, logging it as a
 * warning (with `what`, the operation that failed) only when it differs from the previous. */
void coord_status_etcd_failed(coord_status *s, const char *what);

/* The tagc_http_handler of the coordinator; arg is the coord_status. */
void coord_status_serve(void *arg, const char *path, tagc_http_response *resp);

#endif
