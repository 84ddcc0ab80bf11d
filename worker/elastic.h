/* Elastic mode of tagc-worker (ARCHITECTURE §4): the worker joins the job in etcd
 * (cfg->etcd, cfg->job), waits for plans, trains each generation it is a member of
 * (worker/run.h), reports data-path failures and keeps going in-process until the job is
 * done. */
#ifndef TAGC_WORKER_ELASTIC_H
#define TAGC_WORKER_ELASTIC_H

#include "common/status.h"
#include "worker/run_config.h"

/* Runs this worker's part of the job until it is done (TAGC_OK), --stop-at is reached
 * (TAGC_OK), the worker left after a signal (TAGC_OK, see tagc_elastic_terminate), or an
 * error no new generation can fix: bad configuration, corpus or output (as tagc_train_run),
 * bad etcd credentials options (TAGC_EINVAL), an etcd that cannot be used at the start
 * (unreachable, TLS or auth refused: TAGC_EPEER, one line). A job that is already done
 * (`done` exists) prints one line saying so and returns TAGC_OK before loading anything.
 * Blocks; one call per process. */
tagc_status tagc_elastic_run(const tagc_train_config *cfg);

/* For the worker's signal thread, on SIGTERM or SIGINT (tagc-worker blocks both in every
 * thread and takes them with sigwait on one, so that they work for PID 1 as well). During
 * tagc_elastic_run the first signal makes the worker leave the job: optionally keep training
 * up to --leave-ckpt-wait s for the next committed checkpoint, announce the leave
 * (tagc_member_announce_leave: the coordinator re-plans at once and counts no failure), keep
 * training until that generation exists (at most --leave-timeout s) so the peers are
 * superseded rather than broken, then stop at the next step; tagc_elastic_run then revokes
 * the lease and returns TAGC_OK. Returns 1 when it handled the signal so, 0 when there is
 * nothing to leave (static mode, a second signal): the caller then exits at once. Blocks
 * for the leave; call it only from the signal thread. */
int tagc_elastic_terminate(int sig);

/* After tagc_elastic_run returned TAGC_OK: 1 when it returned because this worker left on a
 * signal before the job was done, 0 when the job is done (or there was no signal). */
int tagc_elastic_left(void);

#endif
