/* Elastic mode of tagc-worker (ARCHITECTURE §4): the worker joins the job in etcd
 * (cfg->etcd, cfg->job), waits for plans, trains each generation it is a member of
 * (worker/run.h), reports data-path failures and keeps going in-process until the job is
 * done. */
#ifndef TAGC_WORKER_ELASTIC_H
#define TAGC_WORKER_ELASTIC_H

#include "common/status.h"
#include "worker/run_config.h"

/* Runs this worker's part of the job until it is done (TAGC_OK), --stop-at is reached
 * (TAGC_OK), or an error no new generation can fix: bad configuration, corpus or output
 * (as tagc_train_run), etcd unreachable when joining. Blocks; one call per process. */
tagc_status tagc_elastic_run(const tagc_train_config *cfg);

#endif
