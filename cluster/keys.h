/* The etcd key schema of a tagc job (ARCHITECTURE.md §3), in one place. Every key lives under
 * "/tagc/<job>/". Every function writes a NUL-terminated key into buf (cap bytes; TAGC_KEY_MAX
 * is always enough) and returns TAGC_OK, or TAGC_EINVAL when an id is malformed or buf is too
 * small. Pure functions: no allocation, safe from any thread.
 *
 * Job and worker ids: 1 to TAGC_KEY_ID_MAX characters of [A-Za-z0-9_.-], not "." or "..".
 * Generations and ranks are non-negative decimal numbers. Bootstrap entry names may also hold
 * '/' and ':' (Gloo store keys), but not start with '/'. */
#ifndef TAGC_COORDINATOR_KEYS_H
#define TAGC_COORDINATOR_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

enum { TAGC_KEY_ID_MAX = 64, TAGC_KEY_NAME_MAX = 128, TAGC_KEY_MAX = 512 };

/* TAGC_OK when id is a valid job or worker id, else TAGC_EINVAL naming what ("worker id"). */
tagc_status tagc_key_check_id(const char *id, const char *what);

/* "/tagc/<job>/": every key of the job. */
tagc_status tagc_key_job_prefix(const char *job, char *buf, size_t cap);

/* "config": the job configuration JSON. */
tagc_status tagc_key_config(const char *job, char *buf, size_t cap);

/* "coord/<lease-hex>": a coordinator candidate; "coord/" the election prefix. */
tagc_status tagc_key_coord(const char *job, int64_t lease, char *buf, size_t cap);
tagc_status tagc_key_coord_prefix(const char *job, char *buf, size_t cap);

/* "workers/<id>": a live worker; "workers/" the membership prefix. */
tagc_status tagc_key_worker(const char *job, const char *id, char *buf, size_t cap);
tagc_status tagc_key_workers_prefix(const char *job, char *buf, size_t cap);

/* "gen": the current generation number. */
tagc_status tagc_key_gen(const char *job, char *buf, size_t cap);

/* "gen/": every generation's keys (plans, bootstrap, ready), for a job reset. */
tagc_status tagc_key_gens_prefix(const char *job, char *buf, size_t cap);

/* "gen/<g>/": everything of generation g (deleted with old generations). */
tagc_status tagc_key_gen_prefix(const char *job, int64_t g, char *buf, size_t cap);

/* "gen/<g>/plan": the plan of generation g. */
tagc_status tagc_key_gen_plan(const char *job, int64_t g, char *buf, size_t cap);

/* "gen/<g>/boot/<name>": communicator bootstrap data; "gen/<g>/boot/" its prefix. */
tagc_status tagc_key_gen_boot(const char *job, int64_t g, const char *name, char *buf, size_t cap);
tagc_status tagc_key_gen_boot_prefix(const char *job, int64_t g, char *buf, size_t cap);

/* "gen/<g>/ready/<rank>": rank joined generation g; "gen/<g>/ready/" its prefix. */
tagc_status tagc_key_gen_ready(const char *job, int64_t g, int rank, char *buf, size_t cap);
tagc_status tagc_key_gen_ready_prefix(const char *job, int64_t g, char *buf, size_t cap);

/* "failures/<g>/<id>": a failure report; "failures/" every report, "failures/<g>/" of g. */
tagc_status tagc_key_failure(const char *job, int64_t g, const char *id, char *buf, size_t cap);
tagc_status tagc_key_failures_prefix(const char *job, char *buf, size_t cap);
tagc_status tagc_key_failures_gen_prefix(const char *job, int64_t g, char *buf, size_t cap);

/* "ckpt/committed": the last durable checkpoint. */
tagc_status tagc_key_ckpt_committed(const char *job, char *buf, size_t cap);

/* "progress": rank 0's progress record. */
tagc_status tagc_key_progress(const char *job, char *buf, size_t cap);

/* "chaos/<id>": a fault to inject into a worker; "chaos/" its prefix. Its value is a fault
 * spec (worker/fault.h) of at most TAGC_CHAOS_SPEC_MAX bytes: a worker ignores a longer one,
 * with one warning naming the key and the limit. */
enum { TAGC_CHAOS_SPEC_MAX = 1024 };
tagc_status tagc_key_chaos(const char *job, const char *id, char *buf, size_t cap);
tagc_status tagc_key_chaos_prefix(const char *job, char *buf, size_t cap);

/* "leaving/<id>": a worker that stops for good (SIGTERM) announces it; "leaving/" its prefix. */
tagc_status tagc_key_leaving(const char *job, const char *id, char *buf, size_t cap);
tagc_status tagc_key_leaving_prefix(const char *job, char *buf, size_t cap);

/* "done": the job's final status. */
tagc_status tagc_key_done(const char *job, char *buf, size_t cap);

/* The kind of a failure: the "kind" of failures/<g>/<id> and the keys of the plan's
 * "failures_total" (docs/etcd-schema.md). The names below are what etcd holds; the rule a worker
 * chooses its kind by is worker/failure_kind.h's. */
typedef enum tagc_failure_kind {
  TAGC_FAIL_UNKNOWN = -1, /* tagc_failure_kind_parse(): not a kind */
  TAGC_FAIL_CRASH,        /* "crash": the suspected peer's process is gone */
  TAGC_FAIL_HANG,         /* "hang": a collective timed out, or an injected hang */
  TAGC_FAIL_PARTITION,    /* "partition": a connection broke, the peer verifiably alive */
  TAGC_FAIL_COMM,         /* "comm": a connection broke, the peer not checkable */
  TAGC_FAIL_OOM,          /* "oom": an allocation failed */
  TAGC_FAIL_INJECTED,     /* "injected": an injected connection drop */
  TAGC_FAIL_TIMEOUT,      /* "timeout": written by older workers (now hang or crash) */
  TAGC_FAIL_LEASE,        /* "lease": counted by the coordinator for a member whose lease
                             expired; no worker reports it */
  TAGC_FAIL_STRAGGLER,    /* "straggler": a rank persistently slower than the others, reported
                             under --exclude-straggler (worker/straggler.h) */
  TAGC_FAIL_KINDS
} tagc_failure_kind;

/* The name of kind k as etcd holds it ("crash", ...); "unknown" outside the enum. Static. */
const char *tagc_failure_kind_name(tagc_failure_kind k);

/* The kind named name, or TAGC_FAIL_UNKNOWN (also for NULL). Sets no error detail. */
tagc_failure_kind tagc_failure_kind_parse(const char *name);

/* The part of key after prefix (which the key must start with), as a borrowed pointer into
 * key; TAGC_EINVAL when key is not under prefix or nothing follows it. For example the worker
 * id of a key under tagc_key_workers_prefix(). */
tagc_status tagc_key_suffix(const char *key, const char *prefix, const char **suffix);

#endif
