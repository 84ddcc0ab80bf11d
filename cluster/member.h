/* The worker side of a tagc job's membership: registration under a lease, the generation
 * watch, plans, readiness, failure reports, progress, checkpoint records and the end of the
 * job. Keys and values: docs/etcd-schema.md (built with cluster/keys.h only).
 *
 * Life of a worker (ARCHITECTURE.md §4):
 *   tagc_member_join()          lease + workers/<id>, keep-alive and watches start
 *   loop:
 *     tagc_member_wait_plan()   the next generation (rank -1: stand by and wait again)
 *     tagc_member_store()       bootstrap store of that generation -> tagc_comm_create()
 *     tagc_member_ready()       after the communicator is built and the resume state loaded
 *     train; on a data-path failure: tagc_member_report_failure(), then wait for a plan
 *   tagc_member_finish()        rank 0 at the last step; every wait_plan then returns "done"
 *   tagc_member_leave()
 *
 * Stopping for good (SIGTERM, a scale-down): tagc_member_announce_leave() tells the leader,
 * which plans a generation without this worker at once and counts no failure; once that
 * generation exists (or a bounded wait passed) tagc_member_withdraw() ends the worker's part
 * of the running generation at its next step, then tagc_member_leave().
 *
 * Threading: a tagc_member runs three threads of its own: the lease keep-alive (renews at
 * TTL/3; a failed renewal is retried every min(TTL/10, 1 s) for as long as etcd does not
 * answer: the lease is only lost when etcd says it is gone, tagc_etcd_keeper_start_patient),
 * the watch of `gen` and `done`, and a supervisor that re-registers the worker under a new
 * lease when the old one is lost. A lost lease does not stop training: the re-registration
 * names the lost registrations ("previous" in workers/<id>), and the leader keeps the worker
 * in its generation (docs/etcd-schema.md, "Lease loss"). Every function below may be called from any thread, except that
 * tagc_member_leave() must not race with the others and must not be called from the
 * on_change callback. The etcd client is borrowed and must outlive the member. */
#ifndef TAGC_COORDINATOR_MEMBER_H
#define TAGC_COORDINATOR_MEMBER_H

#include <stdint.h>

#include <jansson.h>

#include "comm/store.h"
#include "common/status.h"
#include "cluster/etcd.h"

/* One generation's plan, as seen by one worker. Owned by the caller: tagc_plan_free(). */
typedef struct tagc_plan {
  int64_t gen;          /* generation number (>= 1) */
  int world;            /* members */
  int rank;             /* my rank, or -1 when I am not a member of this generation */
  char **members;       /* world worker ids, index = rank */
  int64_t resume_step;  /* step to resume from (0 = from scratch) */
  char *resume_path;    /* checkpoint directory to resume from, or NULL */
  uint32_t resume_manifest_crc; /* CRC32C of its manifest as committed; 0 = not given */
  int micro_batch;      /* my micro-batch (0 = the job's default); halved after an oom report */
  char *reason;         /* why this generation was made (human text) */
  char *failures_total; /* the plan's failures_total as compact JSON text ("{}" when absent) */
  int excluded;         /* 1 when the leader excluded me (suspected, partitioned, oom at 1):
                           I stay out until I tagc_member_rejoin() */
  int64_t registration; /* the plan's registration of my id (0: none): a plan that lists my id
                           under another registration was made for an earlier process with
                           my id, and tagc_member_wait_plan() returns it with rank -1; an
                           exclusion of another registration of my id does not set excluded */
  int64_t excluded_registration; /* the registration the exclusion of my id names (0: none) */
  int job_done;         /* set by tagc_member_wait_plan() alone: 1 when it returned because
                           the job is done (the other fields are then empty) */
} tagc_plan;

/* Frees what p owns and zeroes it. Idempotent; NULL is ignored. */
void tagc_plan_free(tagc_plan *p);

/* Decodes plan JSON text (the value of gen/<g>/plan) as seen by worker my_id into *out
 * (caller frees with tagc_plan_free). TAGC_EPROTO for malformed JSON or missing fields.
 * Pure; any thread. */
tagc_status tagc_plan_parse(const char *text, size_t len, const char *my_id, tagc_plan *out);

typedef struct tagc_member tagc_member;

/* Joins job as worker_id: grants a lease of ttl_s seconds (>= 1; etcd raises small values to
 * its minimum), writes workers/<id> = info (borrowed; a JSON object, e.g. host, pid, device;
 * "id" and "registered_at" are added) under the lease, starts the keep-alive, the watch of
 * `gen` and `done`, and the supervisor. Errors: TAGC_EINVAL (bad job or worker id, info not
 * an object, ttl), TAGC_ECONFLICT (workers/<id> is still held by another lease after waiting
 * 2 x TTL + 1 s for it to expire: a second live worker with the same id), or the etcd error
 * (e.g. TAGC_EIO when unreachable). Blocks for a few etcd round trips, or up to that wait
 * when a previous process with this id has not expired yet. */
tagc_status tagc_member_join(tagc_etcd *etcd, const char *job, const char *worker_id,
                             json_t *info, double ttl_s, tagc_member **out);

/* Stops the threads, revokes the lease (so workers/<id> and our ready keys disappear at once)
 * and frees the member. NULL is ignored. Blocks for about one etcd request (longer when it
 * interrupts a re-registration that waits for an old key to expire). */
void tagc_member_leave(tagc_member *m);

/* Sets fn, called with the latest generation whenever `gen` changes and whenever the lease
 * is lost, so that the training thread can tagc_comm_abort() a hung collective at once.
 * Called from the watch or keep-alive thread: it must be quick and must not call
 * tagc_member_leave(). NULL fn removes it. */
void tagc_member_on_change(tagc_member *m, void (*fn)(void *arg, int64_t gen), void *arg);

/* Reads `gen` from etcd now (not from the watch, which may lag by a few milliseconds) into
 * *gen (0 when absent) and notes it as seen (on_change fires when it is newer). Errors: the
 * etcd error, TAGC_EPROTO for a malformed value. Blocks for one etcd read. */
tagc_status tagc_member_read_gen(tagc_member *m, int64_t *gen);

/* The latest generation seen (0 before the first plan); INT64_MAX after
 * tagc_member_withdraw(), so that a training loop comparing it with its own generation ends
 * that generation (as superseded) at its next step. Any thread, non-blocking. */
int64_t tagc_member_gen(const tagc_member *m);

/* 1 while the worker is not registered: etcd said its lease is gone (it expired while etcd or
 * the worker could not be reached) and the supervisor has not yet registered it again under a
 * new lease; else 0. The re-registration continues the lost one ("previous"): the leader keeps
 * the worker in its generation unless it decided otherwise meanwhile. */
int tagc_member_lease_lost(const tagc_member *m);

/* 1 when etcd has not answered the lease renewals for more than half the TTL (or the worker
 * is registering again): the calls the training thread makes for information only (progress,
 * chaos) then fail at once with TAGC_EIO instead of waiting for etcd. Any thread. */
int tagc_member_etcd_silent(tagc_member *m);

/* Number of times the lease was lost since join (any thread). */
int tagc_member_lease_losses(const tagc_member *m);

/* Blocks until a generation > after_gen exists and returns the plan of the newest one in
 * *out (caller frees). Errors: TAGC_ENOTFOUND with out->job_done set (detail "done") once
 * the job is done (`done` exists; checked first, so it wins over a newer plan),
 * TAGC_EABORTED at once after tagc_member_announce_leave(), TAGC_ETIMEDOUT after timeout_s
 * (call again), TAGC_EPROTO for a malformed plan, or an etcd error. */
tagc_status tagc_member_wait_plan(tagc_member *m, int64_t after_gen, double timeout_s,
                                  tagc_plan *out);

/* Announces that this worker stops for good (reason: human text, e.g. "SIGTERM", may be
 * NULL): writes leaving/<id> = {"registration","reason","time"} (no lease; the registration
 * is the create revision of our workers/<id>). The leader treats the worker as gone at once:
 * a new generation without it, no failure counted (docs/etcd-schema.md). From the call on,
 * tagc_member_wait_plan() returns TAGC_EABORTED at once and a lost lease is not replaced.
 * The caller keeps training until the generation without it exists, so that its peers are
 * superseded rather than see a broken collective. Any thread; blocks for one etcd write;
 * errors of tagc_etcd_put (the flags are set even then). */
tagc_status tagc_member_announce_leave(tagc_member *m, const char *reason);

/* A leaving/<id> record (docs/etcd-schema.md): the registration it speaks for, why, and for a
 * process that died (its supervisor saw it: tagctl run) its uptime. */
typedef struct tagc_leave_record {
  int64_t registration;  /* create revision of workers/<id> */
  const char *reason;    /* human text, may be NULL */
  int died;              /* 1: the process is dead ("died": true, "uptime") */
  double uptime_s;       /* died: seconds from the process's start to its death */
} tagc_leave_record;

/* Writes leaving/<id> of job = {"registration","reason","time"} (plus "died" and "uptime"
 * when rec->died), without a lease, so that it outlives the registration it names. What
 * tagc_member_announce_leave writes, for a caller without a member (a supervisor reporting
 * its child's death). Errors: of cluster/keys.h and tagc_etcd_put. Blocks for one write. */
tagc_status tagc_member_put_leaving(tagc_etcd *c, const char *job, const char *id,
                                    const tagc_leave_record *rec);

/* *registration = the create revision of workers/<id> of job when its value names pid as
 * its "pid" (that process's registration). TAGC_ENOTFOUND when the key is absent or holds
 * another process's registration; else the etcd error. Blocks for one read. */
tagc_status tagc_member_registration_of(tagc_etcd *c, const char *job, const char *id,
                                        long pid, int64_t *registration);

/* Ends this worker's part in every generation: tagc_member_gen() returns INT64_MAX from now
 * on (see there). Does not call on_change (the collective in flight is not aborted). Any
 * thread, non-blocking. */
void tagc_member_withdraw(tagc_member *m);

/* *all = 1 when each of ids[0 .. n) has announced its leave (leaving/<id>, written by the
 * process that holds workers/<id>, or held it while the key is gone), else 0: with every
 * member of a generation leaving, no later generation comes and the job suspends. Errors:
 * the etcd error. Blocks for two reads (the leaving/ and workers/ prefixes). */
tagc_status tagc_member_all_leaving(tagc_member *m, char *const *ids, int n, int *all);

/* The step of the job's committed checkpoint (ckpt/committed), 0 when there is none. Errors:
 * the etcd error, TAGC_EPROTO for a record without "step". Blocks for one etcd read. */
tagc_status tagc_member_committed_step(tagc_member *m, int64_t *step);

/* A bootstrap store over gen/<gen>/boot/ (coordinator/etcd_store.h) for tagc_comm_create;
 * the caller frees it with tagc_store_free() before tagc_member_leave(). */
tagc_status tagc_member_store(tagc_member *m, int64_t gen, tagc_store **out);

/* Writes gen/<gen>/ready/<rank> = {"id","time"} under the worker's lease: this rank has built
 * its communicator and loaded its state. TAGC_EINVAL for a negative gen or rank. */
tagc_status tagc_member_ready(tagc_member *m, int64_t gen, int rank);

/* Reports a failure seen in generation gen: failures/<gen>/<id> = {"kind","step","peer",
 * "detail","time"} and "peers" when n_broken > 0. kind is a tagc_failure_kind_name()
 * (cluster/keys.h) other than "lease" (the worker's rule: worker/failure_kind.h);
 * suspected_rank is the rank blamed (-1 when unknown); broken[0 .. n_broken) (borrowed; NULL
 * when n_broken is 0) every rank whose connection with this worker broke with the failure
 * ("peers": the peers that died together); detail may be NULL. The leader then makes a new
 * generation (rules: docs/etcd-schema.md, coordinator/planner.h). TAGC_EINVAL for an unknown
 * kind or negative gen. */
tagc_status tagc_member_report_failure(tagc_member *m, int64_t gen, const char *kind,
                                       int64_t step, int suspected_rank, const int *broken,
                                       int n_broken, const char *detail);

/* Rank 0: writes `progress` = progress (borrowed JSON object; "step" expected, "worker" and
 * "time" added). The caller keeps to at most one call per second. TAGC_EINVAL when progress
 * is not an object, TAGC_EIO at once while tagc_member_etcd_silent(); gives up after 0.5 s. */
tagc_status tagc_member_progress(tagc_member *m, json_t *progress);

/* Rank 0, after a checkpoint is durable: ckpt/committed = {"gen","step","path","world",
 * "manifest_crc","time"}, written by compare-and-swap so that a record of an older
 * generation, or an older step of the same generation, never replaces a newer one:
 * TAGC_ECONFLICT (nothing written) in that case. TAGC_EINVAL for a NULL path. */
tagc_status tagc_member_commit_ckpt(tagc_member *m, int64_t gen, int64_t step, const char *path,
                                    int world, uint32_t manifest_crc);

/* Rank 0: training reached the last step. Writes `done` = {"status":"finished","gen","step",
 * "by"} if gen is still the current generation and the job is not done yet; every
 * tagc_member_wait_plan() then returns "done" and the leader stops planning.
 * TAGC_ECONFLICT when gen is no longer current (a newer generation replaced it). */
tagc_status tagc_member_finish(tagc_member *m, int64_t gen, int64_t step);

/* The current value of chaos/<id> in *spec (new malloc'd string, caller frees), or NULL when
 * there is none. A value longer than TAGC_CHAOS_SPEC_MAX (cluster/keys.h) gives TAGC_EINVAL
 * naming the key and the limit, with *spec set all the same (whole), so that the caller can
 * tell one value from the next. TAGC_EIO at once while tagc_member_etcd_silent(); gives up
 * after 0.5 s. */
tagc_status tagc_member_chaos(tagc_member *m, char **spec);

/* Registers again under a new lease with new info (borrowed JSON object, or NULL to keep the
 * old one): the old lease is revoked first, so the leader sees a new registration. This is
 * how a worker the leader excluded (plan.excluded) asks to be considered again, e.g. after it
 * checked its own health. Blocks for a few etcd round trips. */
tagc_status tagc_member_rejoin(tagc_member *m, json_t *info);

#endif
