/* The leader's decision, as a pure function: from the current plan, the live workers, the
 * failure reports of the current generation and the committed checkpoint, decide whether to
 * make a new generation and what it looks like. No etcd, no clock, no threads: unit-tested
 * directly (tests/coordinator_proc/test_planner.c).
 *
 * Rules (docs/etcd-schema.md repeats them for operators):
 *  - Membership: survivors of the current plan keep their relative order (so their ranks only
 *    move down when someone before them leaves); joiners (live, not excluded, not members) are
 *    appended in id order; the world is cut at max_workers. A plan needs min_workers.
 *  - A new generation is made when there is no plan yet, when a member's lease is gone, when
 *    a member left, when a member registered again (new lease), when an eligible joiner fits
 *    under max_workers, or when any failure report exists for the current generation.
 *  - Leaving: a worker that announced it stops for good (leaving/<id>, SIGTERM) is gone at
 *    once for every rule, whether its lease is still there or not: a member that left is
 *    dropped without counting a failure ("left", not "lease"); a live worker that leaves is
 *    no joiner. A record counts for the registration it names (the member's in the current
 *    plan, or its live one), so a worker that registers again later is a joiner again.
 *  - Suspicion (PFAIL -> FAIL): a report naming a peer rank suspects that member. A suspect
 *    that reports its own failure too is alive and stays; a suspect that has not reported
 *    suspect_window_s after the accusation was first seen is excluded; until then the
 *    decision is WAIT. A suspect whose lease is gone is dropped as lost. A suspect that every
 *    other member still in the job (at least two) reported and named, while it reported
 *    nothing itself, went silent for all of them (a hang, a stopped or dead process): it is excluded
 *    at once, without the window. So are several members that went silent together (workers
 *    killed at once): each reported nothing, every member that reported named each of them
 *    (as its suspect or among its report's broken links, "peers"), and those that reported
 *    outnumber them. With two members (one accuser) the window decides, since a
 *    link cut between them reads the same from each side until the other's report arrives.
 *  - Partitions, the accusation graph: in a generation that failed before completing a step
 *    (every report's step <= the plan's resume step; a worker whose communicator bootstrap
 *    failed reports step 0 and the rank it could not reach), a member named by at least two
 *    other members and by a strict majority of the others is excluded at once (one member per
 *    generation: the most named, then the side rule below). The bootstrap connects every pair
 *    on its own, so there the accusations are direct; once collectives run, a rank blocked on
 *    a cut-off peer stops feeding the next one and gets blamed in its place, so later
 *    failures are left to the pairwise rule. A partition that shows in collectives is thus
 *    resolved by the next generation (which fails in its bootstrap), within 2 generations.
 *  - Partitions, pairwise: when the same pair of members accuses each other (or one accuses
 *    the other and both report) in two consecutive generations, one side is excluded: the one
 *    with more strikes (earlier exclusions), else the higher rank (the later joiner). When one
 *    side has been excluded before (it rejoined), at the first.
 *  - Fruitless generations: generations in a row that failed before a step, excluded nobody
 *    and kept the same members add up "blame" (every accusation of a member, any kind); at
 *    the 3rd the most blamed member is excluded (ties: the side rule), so failures that name
 *    no peer cannot make failing generations without end. A generation that completes a step
 *    or changes the members starts over.
 *  - The partition and fruitless rules never exclude below min_workers: the member stays
 *    (noted in the reason) and the next generation tries again, since the link may heal.
 *  - Out of memory: an oom report halves the reporter's micro-batch (from its plan value, or
 *    default_micro_batch when that is 0; minimum 1); the worker raises its accumulation steps so
 *    the global batch stays the same. An oom at micro-batch 1 excludes the reporter.
 *  - Exclusion lasts as long as the excluded worker's registration (the create revision of
 *    workers/<id>): a worker that registers again (tagc_member_rejoin, or a restart) is a
 *    joiner again.
 *  - Lease loss: a registration that names the planned one in "previous" (the same process
 *    registered again after etcd dropped its lease) continues it: the member stays, with no
 *    new generation, and an exclusion stays too. While now < lost_grace_until (the leader sets
 *    it to its lease TTL after it regained etcd or became leader), a member whose lease is gone
 *    makes a WAIT (until then) instead of a new generation, unless a failure is reported: after
 *    an etcd outage every lease may have expired at once, and the workers register again
 *    within a keep-alive retry.
 *  - Deaths: a leaving/<id> record with "died" (the worker's supervisor saw its process die)
 *    drops the member at once like a leave, but counts a "crash" failure ("lost w1 (crashed,
 *    seen by its supervisor)"), and the new generation is settled: the survivors' reports of
 *    the dead peer are moot. A report naming a member that died counts as "crash" whatever
 *    link kind (partition, comm, timeout, hang) the reporter saw.
 *  - Crash loops: each worker's deaths with uptime < TAGC_QUICK_DEATH_S in a row (a longer uptime
 *    resets the count) are counted in the plan's "quick_deaths". After n >= 2 quick deaths a
 *    worker is kept out of new generations (on probation) until TAGC_PROBATION_FIRST_S * 2^(n-2)
 *    seconds, at most TAGC_PROBATION_MAX_S, after the leader first saw its current registration;
 *    the decision's wake_at tells the leader when to decide again.
 *  - Stragglers: a "straggler" report (a member computes persistently slower than the others,
 *    --exclude-straggler; its peer is the slow rank) excludes that member at once, unless that
 *    would leave fewer than min_workers eligible workers: then the report is set aside (no new
 *    generation for it; the job goes on at the straggler's pace).
 *  - Reports from workers that are not members of the current plan, or naming ranks outside
 *    it, only count as a failure (a new generation), never as suspicion.
 *
 * Plan JSON (the value of gen/<g>/plan):
 *   {"gen":g, "world":n, "members":[ids, index = rank],
 *    "resume":{"step":s, "path":p|null},            from ckpt/committed, else step 0
 *    "micro_batch":{"<id>":n, ...},                  every member; 0 = the job's default
 *    "registrations":{"<id>":create_revision, ...}, every member
 *    "excluded":{"<id>":{"registration":r, "why":text}, ...},
 *    "suspicion":[{"pair":[a,b], "count":c}, ...],  pairs accused in the last generation
 *    "failures_total":{"<kind>":n, ...},            every report and lost lease so far
 *    "strikes":{"<id>":n, ...},                     exclusions of each worker so far
 *    "fruitless":{"gens":n, "blame":{"<id>":n}},    the current streak of fruitless generations
 *    "quick_deaths":{"<id>":{"count":n, "registration":r}}, quick deaths in a row, r the
 *                                                   registration of the last death counted
 *    "reason":text} */
#ifndef TAGC_COORDINATOR_PLANNER_H
#define TAGC_COORDINATOR_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/status.h"

/* A death within this many seconds of the process's start is a quick death (the supervisor,
 * tagctl/supervise.c, doubles its restart backoff by the same rule). */
#define TAGC_QUICK_DEATH_S 30.0
/* Probation after the 2nd quick death in a row; it doubles with each further one. */
#define TAGC_PROBATION_FIRST_S 5.0
#define TAGC_PROBATION_MAX_S 120.0

typedef struct tagc_planner_config {
  int min_workers;          /* >= 1 */
  int max_workers;          /* >= min_workers */
  double suspect_window_s;  /* how long a suspected member has to report itself (>= 0) */
  int default_micro_batch;  /* the job's micro-batch, what a first oom halves; 0 = unknown */
  int start_workers;        /* the first generation waits for this many workers ... */
  double start_deadline;    /* ... until this time (clock of `now`); after it, min_workers do */
  double lost_grace_until;  /* lease-loss grace: before this time (clock of `now`), members
                               whose lease is gone only make a WAIT when no failure is
                               reported; 0 = none */
} tagc_planner_config;

typedef struct tagc_planner_worker {
  const char *id;           /* worker id (workers/<id>) */
  int64_t registration;     /* create revision of workers/<id> */
} tagc_planner_worker;

/* What a leaving/<id> record says of the process's death (its supervisor wrote it). */
typedef struct tagc_planner_death {
  int died;                 /* "died": true */
  double uptime_s;          /* "uptime": seconds from the process's start to its death */
} tagc_planner_death;

typedef struct tagc_planner_report {
  const char *worker;       /* who reported (failures/<g>/<worker>) */
  const char *kind;         /* comm, timeout, oom, crash, hang, injected, straggler */
  int64_t step;
  int peer;                 /* suspected rank in the current plan, -1 for none */
  double seen_at;           /* when the leader first saw the report (monotonic seconds) */
} tagc_planner_report;

typedef struct tagc_planner_input {
  int64_t gen;                           /* current generation (the value of `gen`), 0 = none;
                                            a new plan is generation gen + 1 */
  const json_t *plan;                    /* that generation's plan; NULL when none */
  const tagc_planner_worker *workers;    /* live workers, any order, unique ids */
  size_t n_workers;
  const double *seen_at;                 /* seen_at[i]: when the leader first saw workers[i]'s
                                            registration (clock of `now`); NULL = all at 0 */
  const json_t *worker_info;             /* {"<id>": value of workers/<id>}, or NULL: its
                                            "previous" (an array of registrations) names the
                                            registrations a worker continues (lease loss) */
  const tagc_planner_report *reports;    /* failures/<current gen>/..., any order */
  size_t n_reports;
  const json_t *failures;                /* {"<id>": value of failures/<current gen>/<id>}, or
                                            NULL: a report's "peers" (the ranks whose connection
                                            with the reporter broke) is read from there */
  const tagc_planner_worker *leaving;    /* leaving/<id> records: the worker and the
                                            registration that leaves; any order */
  size_t n_leaving;
  const tagc_planner_death *deaths;      /* deaths[i] of leaving[i]; NULL = none died */
  const json_t *ckpt;                    /* ckpt/committed record, NULL when none */
  double now;                            /* same clock as seen_at */
} tagc_planner_input;

typedef enum tagc_planner_action {
  TAGC_PLANNER_KEEP,    /* nothing to do */
  TAGC_PLANNER_WAIT,    /* a suspect may still report: decide again at wait_until */
  TAGC_PLANNER_STALLED, /* something changed but fewer than min_workers are eligible */
  TAGC_PLANNER_NEW      /* write `plan` as generation plan.gen */
} tagc_planner_action;

typedef struct tagc_planner_decision {
  tagc_planner_action action;
  double wait_until;    /* WAIT */
  json_t *plan;         /* NEW: the new plan (owned by the decision) */
  int settled;          /* NEW: every member of the current plan is accounted for (it
                           reported, is gone or is excluded): no report of this generation is
                           still to come, so the leader need not wait out its settle window */
  double wake_at;       /* KEEP, NEW, STALLED: decide again then although nothing changes
                           (a probation ends); 0 = none */
  char reason[512];     /* why (every action), for logs and /status */
} tagc_planner_decision;

/* Decides (rules above) into *out (free with tagc_planner_decision_free). TAGC_EINVAL for a
 * bad config, TAGC_EPROTO for a malformed current plan, TAGC_ENOMEM. Pure; any thread.
 * Cost: O((M + R + L) log(M + R + L)) for M members and workers, R reports and L leave
 * records, plus the suspicion pairs each mutual accusation looks up (bench/planner_bench.c,
 * docs/scaling-membership.md). */
tagc_status tagc_planner_decide(const tagc_planner_config *cfg, const tagc_planner_input *in,
                                tagc_planner_decision *out);

/* Releases the plan of a decision; idempotent. */
void tagc_planner_decision_free(tagc_planner_decision *d);

#endif
