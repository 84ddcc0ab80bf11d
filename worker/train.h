/* Static mode of a training job: a fixed rank and world size, rendezvous through a shared
 * directory; or, when cfg->etcd is set, elastic mode (worker/elastic.h).
 *
 * tagc_train_run() trains from step 0 (or a resume point) to cfg->steps, printing one
 * progress line per second (and on the first, last and evaluation steps), appending one JSON
 * object per step to OUT/metrics.jsonl, and writing OUT/summary.json at the end
 * (worker/run.h, worker/report.h). */
#ifndef TAGC_WORKER_TRAIN_H
#define TAGC_WORKER_TRAIN_H

#include "common/status.h"
#include "worker/run_config.h"

/* Runs the training job described by cfg. Errors: bad configuration or corpus
 * (TAGC_EINVAL / TAGC_ENOTFOUND / TAGC_EIO, detail set), out of memory, non-finite loss. */
tagc_status tagc_train_run(const tagc_train_config *cfg);

#endif
