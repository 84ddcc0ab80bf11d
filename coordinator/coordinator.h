/* The coordinator of a tagc job: leader election among coordinator processes, and the
 * leader's loop that turns membership changes and failure reports into generations.
 *
 * Every coordinator is a candidate (coordinator/election.h) on its own lease. A standby waits
 * for its predecessor's key to go and meanwhile mirrors the job's state for /status. The
 * leader watches the job's keys; a change of workers/, a failure report, or no generation yet
 * starts a settle window (batching simultaneous events; a new generation that the planner
 * calls settled, every member's report in, is written at once); then it reads the job's state
 * at one revision, asks the planner (coordinator/planner.h) and, for a new generation, writes
 * gen/<g+1>/plan and gen = g+1 in one txn fenced by its election key and by the mod revision
 * of `gen` it read, deleting generation g-1's keys in the same txn. A leader whose write is
 * fenced, or whose lease is lost, steps down and campaigns again as a new candidate.
 * The job is done when `done` exists (rank 0's tagc_member_finish), or when the progress
 * record reaches the final step, which the leader then writes to `done`; coordinators stop
 * planning and tagc_coord_run returns.
 *
 * HTTP (when configured): /healthz (200 while reads from etcd succeed, else 503), /status
 * (JSON: role, leader, generation, plan, workers, failures, step, progress, checkpoint, done,
 * last decision), /metrics (Prometheus text, tagc_coordinator_ prefix: leader, generation,
 * world_size, step, members, failures_total{kind}, job_done, goodput_ratio, ...).
 *
 * Threading: tagc_coord_run() runs the loop on the calling thread; the coordinator adds a
 * lease keep-alive thread, a watch thread while leading, and the HTTP server's thread.
 * tagc_coord_stop() may be called from any thread and from a signal handler. */
#ifndef TAGC_COORDINATOR_COORDINATOR_H
#define TAGC_COORDINATOR_COORDINATOR_H

#include <stdint.h>

#include "common/status.h"
#include "cluster/etcd.h"

typedef struct tagc_coord_config {
  const char *job;          /* job id (required) */
  int min_workers;          /* fewest workers of a generation (default 1) */
  int max_workers;          /* most workers of a generation (default 1024) */
  double settle_s;          /* batching window after a change (default 1) */
  double lease_ttl_s;       /* the coordinator's lease: a dead leader is replaced after it
                               (default 5) */
  double suspect_window_s;  /* time a suspected worker has to report itself (default 2) */
  int start_workers;        /* the first generation waits for this many workers (default 0:
                               min_workers) ... */
  double start_wait_s;      /* ... at most this long after the coordinator started (default 30) */
  int micro_batch;          /* job's micro-batch for oom halving; 0 = "micro_batch" of the
                               job's config key, if any */
  int64_t final_step;       /* done when progress reaches it; 0 = "steps" of the config key,
                               if any (else only rank 0's finish ends the job) */
  const char *http_addr;    /* "HOST:PORT" to serve HTTP on (port 0 = any), NULL or "" = none */
  int linger;               /* after the job is done, keep serving HTTP until stopped */
  const char *advertise;    /* value of the election key; NULL = "http://<HOST>:<port>" when
                               serving HTTP (the host name for 0.0.0.0), else
                               "<hostname>:<pid>" */
} tagc_coord_config;

typedef struct tagc_coord tagc_coord;

/* Fills cfg with the defaults above and no job. */
void tagc_coord_config_init(tagc_coord_config *cfg);

/* Creates a coordinator on etcd (borrowed; must outlive it) and starts its HTTP server.
 * Copies cfg. TAGC_EINVAL for a bad job id or out-of-range numbers, TAGC_EIO when the HTTP
 * address cannot be bound. Contacts no etcd yet. */
tagc_status tagc_coord_create(tagc_etcd *etcd, const tagc_coord_config *cfg, tagc_coord **out);

/* Campaigns and leads until the job is done (TAGC_OK; with cfg.linger only after
 * tagc_coord_stop, serving the final state meanwhile, and campaigning again when the job is
 * reset — `done` deleted, tagctl job reset) or tagc_coord_stop() (TAGC_EABORTED; the
 * candidate's lease is revoked first, so a standby takes over at once: a clean step-down).
 * etcd outages are retried, never fatal. Blocks. */
tagc_status tagc_coord_run(tagc_coord *c);

/* Makes tagc_coord_run return within about a second. Async-signal-safe. */
void tagc_coord_stop(tagc_coord *c);

/* The port the HTTP server listens on, or 0 without one. */
int tagc_coord_http_port(const tagc_coord *c);

/* Stops the HTTP server and frees. Not while tagc_coord_run runs. NULL is ignored. */
void tagc_coord_destroy(tagc_coord *c);

#endif
