/* Elastic mode of tagc-worker: membership, generations and recovery through etcd. */
#include "elastic.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "cluster/member.h"
#include "worker/failure_kind.h"
#include "worker/history.h"
#include "worker/run.h"

/* Pause between two reads of ckpt/committed while --leave-ckpt-wait waits for a save. */
#define CKPT_POLL_S 0.2
/* After a leaving worker withdrew, how long its generation may take to end by itself before
 * it is aborted. When the leader re-planned, the peers abort on the same watch event within
 * milliseconds and so end ours; what is left then is a wait on peers that moved on (e.g. a
 * communicator bootstrap), which only an abort ends early. */
#define WITHDRAW_GRACE_S 1.0
/* Pause between two looks, while a leave waits, at whether every member is leaving. */
#define LEAVE_POLL_S 0.1
/* Longest a suspending job may take, after its --leave-timeout, to reach its last step and
 * save it (one more step, the checkpoint, the final gather) before the leave aborts it. */
#define SUSPEND_SAVE_S 30.0

/* The process's elastic run as the signal thread sees it (tagc_elastic_terminate). One per
 * process; `lock` guards every field, `changed` signals a change of any. */
typedef struct session {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  const tagc_train_config *cfg;
  tagc_run *run;
  tagc_member *member;  /* NULL before the join and once the run winds down */
  int active;           /* tagc_elastic_run is running */
  int stop;             /* a signal asked this worker to leave the job */
  int finishing;        /* tagc_elastic_run is about to return: a leave stops waiting */
  int job_done;         /* the job was found done (a plan or the done key) */
  int leaving;          /* the signal thread is leaving through member */
  int64_t seen_gen;     /* the latest generation the member's watch saw */
  int64_t run_gen;      /* the generation being trained, 0 between generations */
  int run_world;
  char **run_members;   /* its run_world member ids (owned), NULL between generations */
} session;

static session S = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t session_once = PTHREAD_ONCE_INIT;

static void init_session(void) { tagc_cond_init_monotonic(&S.changed); }

/* Waits up to `until` (monotonic) for a change. Caller holds S.lock. */
static void wait_until(double until) {
  double s = until - tagc_now();
  if (s <= 0)
    return;
  struct timespec ts = tagc_deadline_in(s);
  pthread_cond_timedwait(&S.changed, &S.lock, &ts);
}

/* From the member's threads: a newer generation supersedes the running one. A lost lease
 * does not stop training: etcd's view of this worker is not its data path, which is what the
 * generation needs; the member registers again as the continuation of the lost registration
 * and the leader keeps the generation unless it decides otherwise, which this watch then sees
 * as a newer generation (docs/operations.md, "etcd outages"). While the worker leaves, a newer
 * generation is only noted: the peers abort their collectives on it themselves, so they see a
 * superseded generation, never a peer that vanished. */
static void on_change(void *arg, int64_t gen) {
  (void)arg;
  pthread_mutex_lock(&S.lock);
  if (gen > S.seen_gen)
    S.seen_gen = gen;
  int leaving = S.stop;
  tagc_run *run = S.run;
  tagc_member *m = S.member;
  pthread_cond_broadcast(&S.changed);
  pthread_mutex_unlock(&S.lock);
  if (!run || !m)
    return;
  if (tagc_member_lease_lost(m))
    LOG_WARN("elastic", "lease lost: training on while the member registers again");
  if (!leaving)
    tagc_run_supersede(run, gen); /* nothing unless gen is newer than the one being trained */
}

static json_t *worker_info(const tagc_train_config *cfg) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return json_pack("{s:s, s:s, s:i, s:s, s:I}", "host", host, "address", cfg->host, "pid",
                   (int)getpid(), "device", cfg->device, "threads", (json_int_t)cfg->threads);
}

static void free_ids(char **ids, int n) {
  for (int i = 0; ids && i < n; i++)
    free(ids[i]);
  free(ids);
}

/* A copy of ids[0 .. n) (new; NULL when out of memory). */
static char **copy_ids(char *const *ids, int n) {
  char **c = calloc((size_t)n + 1, sizeof *c);
  for (int i = 0; c && i < n; i++) {
    if (!(c[i] = strdup(ids[i]))) {
      free_ids(c, n);
      return NULL;
    }
  }
  return c;
}

/* Marks the generation of plan as about to be trained, or (plan NULL) the end of the one
 * trained. Returns 0 when the worker is leaving: no new generation starts then. */
static int mark_generation(const tagc_plan *plan) {
  char **ids = plan ? copy_ids(plan->members, plan->world) : NULL;
  pthread_mutex_lock(&S.lock);
  int go = !S.stop || !plan;
  free_ids(S.run_members, S.run_world);
  S.run_gen = go && plan ? plan->gen : 0;
  S.run_world = go && plan ? plan->world : 0;
  S.run_members = go ? ids : NULL;
  if (!go)
    free_ids(ids, plan->world);
  pthread_cond_broadcast(&S.changed);
  pthread_mutex_unlock(&S.lock);
  return go;
}

static int stop_requested(void) {
  pthread_mutex_lock(&S.lock);
  int stop = S.stop;
  pthread_mutex_unlock(&S.lock);
  return stop;
}

/* How long a suspected peer on this host may take to exit before it counts as alive. A peer
 * that a collective timed out on has been silent for the whole op timeout: a dying one is gone
 * by then, so it is looked at once. */
#define PEER_SETTLE_S 0.25

/* The kind to report for a failed generation whose suspect is `suspect` (NULL: none), by the
 * rule of worker/failure_kind.h: its registration (workers/<id>) and, on this host, its pid. */
static tagc_failure_kind report_kind(tagc_etcd *etcd, const json_t *info, const char *suspect,
                                     const tagc_gen_result *res) {
  double settle = res->cause == TAGC_CAUSE_TIMEOUT ? 0 : PEER_SETTLE_S;
  tagc_peer_state peer = TAGC_PEER_UNKNOWN;
  char key[512];
  char *text = NULL;
  if (suspect && tagc_key_worker(S.cfg->job, suspect, key, sizeof key) == TAGC_OK) {
    tagc_error_saved why;
    tagc_error_save(&why);
    tagc_status st = tagc_etcd_get(etcd, key, &text, NULL, NULL);
    json_t *peer_info = st == TAGC_OK ? json_loads(text, 0, NULL) : NULL;
    if (st == TAGC_ENOTFOUND || peer_info)
      peer = tagc_peer_check(peer_info, json_string_value(json_object_get(info, "host")),
                             settle);
    json_decref(peer_info);
    free(text);
    tagc_error_restore(&why);
  }
  return tagc_failure_kind_for(res->cause, peer);
}

/* What a failure report of one generation needs (tagc_gen_spec.on_failure). */
typedef struct failure_report {
  tagc_etcd *etcd;
  tagc_member *m;
  const json_t *info;
  const tagc_plan *plan;
} failure_report;

/* tagc_gen_spec.on_failure: reports failures/<g>/<id> with the kind and the suspected rank,
 * the moment the data path gave up (the generation is not superseded: tagc_run_generation
 * just asked etcd), so that the leader need not wait for this worker's tear-down. */
static void report_failure(void *arg, const tagc_gen_result *res) {
  const failure_report *f = arg;
  if (stop_requested()) /* our own leaving ended it: not a failure of the job */
    return;
  const char *suspect = res->suspected_rank >= 0 && res->suspected_rank < f->plan->world &&
                                res->suspected_rank != f->plan->rank
                            ? f->plan->members[res->suspected_rank]
                            : NULL;
  tagc_failure_kind kind = report_kind(f->etcd, f->info, suspect, res);
  if (tagc_member_report_failure(f->m, f->plan->gen, tagc_failure_kind_name(kind), res->step,
                                 res->suspected_rank, res->broken, res->n_broken,
                                 res->detail) != TAGC_OK)
    LOG_WARN("elastic", "failure report not recorded: %s", tagc_last_error());
}

/* ---- the runner's hooks (worker/run.h) over the member ---- */

/* Rank 0 of a generation records it in OUT/history.jsonl: its members and the plan's
 * failure counts, from which readers tell a failure from a join or a leave. */
static void record_generation(const tagc_plan *plan) {
  json_t *members = json_array(), *totals = json_loads(plan->failures_total, 0, NULL);
  for (int i = 0; members && i < plan->world; i++)
    json_array_append_new(members, json_string(plan->members[i]));
  if (!members || !totals) {
    json_decref(members);
    json_decref(totals);
    return;
  }
  /* "o" steals both, also when json_pack fails (jansson >= 2.11) */
  tagc_history_append(S.cfg->out, json_pack("{s:s, s:I, s:i, s:o, s:o}", "event", "generation",
                                            "gen", (json_int_t)plan->gen, "world", plan->world,
                                            "members", members, "failures_total", totals));
}

static int hook_superseded(void *ctx, int64_t gen) { return tagc_member_gen(ctx) > gen; }

static int hook_superseded_now(void *ctx, int64_t gen) {
  int64_t now = 0;
  return tagc_member_read_gen(ctx, &now) == TAGC_OK && now > gen;
}

static tagc_status hook_ready(void *ctx, int64_t gen, int rank) {
  return tagc_member_ready(ctx, gen, rank);
}

static tagc_status hook_chaos(void *ctx, char **spec) { return tagc_member_chaos(ctx, spec); }

static tagc_status hook_commit_ckpt(void *ctx, int64_t gen, int64_t step, const char *path,
                                    int world, uint32_t manifest_crc) {
  return tagc_member_commit_ckpt(ctx, gen, step, path, world, manifest_crc);
}

static tagc_status hook_progress(void *ctx, json_t *progress) {
  return tagc_member_progress(ctx, progress);
}

static tagc_status hook_report_straggler(void *ctx, int64_t gen, int64_t step, int rank,
                                         const char *detail) {
  return tagc_member_report_failure(ctx, gen, tagc_failure_kind_name(TAGC_FAIL_STRAGGLER), step,
                                    rank, NULL, 0, detail);
}

/* Elastic mode of the runner: generations, checkpoint records, chaos and progress through m
 * (borrowed; outlives the run's generations). */
static void set_hooks(tagc_run *run, tagc_member *m) {
  tagc_run_hooks hooks = {.ctx = m,
                          .superseded = hook_superseded,
                          .superseded_now = hook_superseded_now,
                          .ready = hook_ready,
                          .chaos = hook_chaos,
                          .commit_ckpt = hook_commit_ckpt,
                          .progress = hook_progress,
                          .report_straggler = hook_report_straggler};
  tagc_run_set_hooks(run, &hooks);
}

/* The longest wait for etcd after this worker trained the job's final step (the summary and
 * the final checkpoint are written; only the job's `done` record is missing). */
#define FINISHED_PATIENCE_S 15.0

/* etcd out of reach while the worker waits for a plan (--etcd-patience). */
typedef struct outage {
  double since;       /* tagc_now() when etcd was found out of reach; 0 while it answers */
  int64_t step;       /* the job's step when this worker's last generation ended */
  int finished;       /* that generation trained the final step */
  int finish_pending; /* ... on rank 0, and the job's done record is not written yet */
} outage;

/* Notes whether etcd is out of reach (lost) after a wait for a plan after generation gen
 * and retries gen's pending done record once it answers. Returns 1 when the worker stops waiting, with *st its status:
 * TAGC_OK after a finished job (its done record unwritten), else TAGC_EPEER with the one line
 * that says why, after tagc_run_give_up. */
static int etcd_given_up(outage *o, int64_t gen, int lost, tagc_member *m, tagc_run *run,
                         tagc_status *st) {
  const tagc_train_config *cfg = S.cfg;
  double now = tagc_now();
  double patience = o->finished && cfg->etcd_patience > FINISHED_PATIENCE_S ? FINISHED_PATIENCE_S
                                                                            : cfg->etcd_patience;
  if (!lost) {
    if (o->since > 0)
      LOG_INFO("elastic", "etcd answers again after %.1f s", now - o->since);
    o->since = 0;
    if (o->finish_pending && tagc_member_finish(m, gen, o->step) == TAGC_OK)
      o->finish_pending = 0;
    return 0;
  }
  if (o->since == 0) {
    o->since = now;
    LOG_WARN("elastic", "etcd at %s is out of reach while waiting for a plan; waiting %.0f s "
             "for it (--etcd-patience)", cfg->etcd, patience);
  }
  if (now - o->since < patience)
    return 0;
  if (o->finished) {
    LOG_WARN("elastic", "the job finished at step %lld, but etcd at %s stayed out of reach for "
             "%.0f s: its done record is not written (a rerun finds the final checkpoint and "
             "trains nothing)", (long long)o->step, cfg->etcd, patience);
    *st = TAGC_OK;
    return 1;
  }
  char ckpt[4400];
  tagc_run_give_up(run, o->step, ckpt, sizeof ckpt);
  *st = tagc_errorf(TAGC_EPEER, "etcd at %s out of reach for %.0f s while waiting for a plan: "
                    "giving up at step %lld; the newest valid checkpoint: %s", cfg->etcd,
                    patience, (long long)o->step, ckpt);
  return 1;
}

/* An excluded worker's wait of `seconds` before it asks back in, which ends early when the
 * job is done (returns 1) or the worker leaves (returns 0). */
static int stay_out(tagc_member *m, int64_t gen, double seconds) {
  for (double until = tagc_now() + seconds; !stop_requested() && tagc_now() < until;) {
    double left = until - tagc_now();
    tagc_plan p = {0};
    tagc_status st = tagc_member_wait_plan(m, gen, left < 5 ? left : 5, &p);
    int done = p.job_done;
    if (st == TAGC_OK)
      gen = p.gen; /* a generation without this worker */
    tagc_plan_free(&p);
    if (done) {
      pthread_mutex_lock(&S.lock);
      S.job_done = 1;
      pthread_mutex_unlock(&S.lock);
      return 1;
    }
    if (st != TAGC_OK && st != TAGC_ETIMEDOUT)
      tagc_sleep(left < 1 ? left : 1);
  }
  return 0;
}

/* Trains the generations of a job until it is done or the worker leaves. */
static tagc_status supervise(tagc_run *run, tagc_etcd *etcd, tagc_member *m, json_t *info) {
  int64_t gen = 0;
  outage out = {0};
  /* The wait before asking back in after an exclusion: none after a generation in which this
     worker trained (a hang or a stop it has woken from: only its own pause grows while it
     waits), then 1 s, doubling with every exclusion in a row (a lasting partition costs few
     generations). */
  double rejoin_wait = 0;
  for (;;) {
    if (stop_requested())
      return TAGC_OK;
    tagc_plan plan = {0};
    tagc_status st = tagc_member_wait_plan(m, gen, out.since > 0 ? 1.0 : 5.0, &plan);
    int lost = st != TAGC_OK && ((st != TAGC_ETIMEDOUT && st != TAGC_EABORTED) ||
                                 tagc_member_etcd_silent(m));
    tagc_status gave_up;
    if (!plan.job_done && etcd_given_up(&out, gen, lost, m, run, &gave_up))
      return gave_up;
    if (st == TAGC_ETIMEDOUT || (st == TAGC_EABORTED && stop_requested()))
      continue;
    if (plan.job_done) {
      pthread_mutex_lock(&S.lock);
      S.job_done = 1;
      pthread_mutex_unlock(&S.lock);
      LOG_DEBUG("elastic", "the job is done"); /* rank 0 logs the final step, tagctl run the rest */
      return TAGC_OK;
    }
    if (st != TAGC_OK) { /* etcd unreachable or a bad plan: the member re-registers; retry */
      LOG_WARN("elastic", "waiting for a plan: %s", tagc_last_error());
      tagc_sleep(1.0);
      continue;
    }
    gen = plan.gen;
    if (plan.rank < 0) {
      LOG_INFO("elastic", "generation %lld: not a member (%s)", (long long)gen, plan.reason);
      if (plan.excluded) { /* excluded as suspect: this process is alive again, ask back in */
        double wait = tagc_run_named_straggler(run) ? S.cfg->straggler_rejoin : rejoin_wait;
        LOG_INFO("elastic", "excluded; asking to rejoin in %.0f s", wait);
        if (stay_out(m, gen, wait))
          return TAGC_OK; /* the job is done */
        rejoin_wait = rejoin_wait == 0 ? 1 : rejoin_wait * 2 > 120 ? 120 : rejoin_wait * 2;
        if (!stop_requested() && tagc_member_rejoin(m, info) != TAGC_OK)
          LOG_WARN("elastic", "rejoin failed: %s", tagc_last_error());
      }
      tagc_plan_free(&plan);
      continue;
    }
    if (!mark_generation(&plan)) {
      tagc_plan_free(&plan);
      return TAGC_OK;
    }
    LOG_INFO("elastic", "generation %lld: rank %d of %d, micro-batch %d, resume %s (%s)",
             (long long)gen, plan.rank, plan.world, plan.micro_batch,
             plan.resume_path ? plan.resume_path
             : S.cfg->resume  ? "from the in-memory copies or the newest valid checkpoint, if any"
                              : "from the in-memory copies, if any, else at step 0 (--no-resume)",
             plan.reason);
    if (plan.rank == 0) /* one line per generation: OUT/history.jsonl (worker/history.h) */
      record_generation(&plan);
    tagc_store *store = NULL;
    tagc_gen_result res;
    failure_report report = {etcd, m, info, &plan};
    st = tagc_member_store(m, gen, &store);
    if (st == TAGC_OK) {
      tagc_gen_spec g = {.gen = gen, .rank = plan.rank, .world = plan.world, .store = store,
                         .micro_batch = plan.micro_batch, .resume_path = plan.resume_path,
                         .resume_step = plan.resume_step,
                         .resume_manifest_crc = plan.resume_manifest_crc,
                         .on_failure = report_failure, .failure_arg = &report,
                         .members = plan.members};
      st = tagc_run_generation(run, &g, &res);
    }
    tagc_store_free(store);
    mark_generation(NULL);
    int rank = plan.rank;
    tagc_plan_free(&plan);
    if (st != TAGC_OK)
      return st;
    switch (res.end) {
    case TAGC_GEN_FINISHED:
      if (rank == 0 && tagc_member_finish(m, gen, res.step) != TAGC_OK) {
        LOG_WARN("elastic", "finish not recorded: %s", tagc_last_error());
        out.finish_pending = 1;
      }
      break;
    case TAGC_GEN_STOPPED:
      if (res.suspended)
        LOG_INFO("elastic", "suspended at step %lld: every member left the job; it goes on "
                 "from that step's checkpoint when its workers start again",
                 (long long)res.step);
      return TAGC_OK;
    case TAGC_GEN_FAILED: /* reported by report_failure */
    case TAGC_GEN_SUPERSEDED:
      break;
    }
    out.step = res.step;
    out.finished = res.end == TAGC_GEN_FINISHED;
    if (res.step > res.start_step) /* it trained: a later exclusion is no lasting partition */
      rejoin_wait = 0;
  }
}

/* ---- leaving on SIGTERM / SIGINT (signal thread) ---- */

/* --leave-ckpt-wait: keeps training until a checkpoint newer than the committed one at the
 * signal is committed, the wait passes, or the run ends. */
static void wait_for_checkpoint(tagc_member *m, double wait_s) {
  int64_t base, step = 0;
  if (tagc_member_committed_step(m, &base) != TAGC_OK) {
    LOG_WARN("elastic", "leaving without waiting for a checkpoint: %s", tagc_last_error());
    return;
  }
  LOG_INFO("elastic", "leaving after the next checkpoint (committed: step %lld), at most %.1f s",
           (long long)base, wait_s);
  double until = tagc_now() + wait_s;
  pthread_mutex_lock(&S.lock);
  while (!S.finishing && S.run_gen > 0 && step <= base && tagc_now() < until) {
    wait_until(tagc_now() + CKPT_POLL_S);
    pthread_mutex_unlock(&S.lock);
    if (tagc_member_committed_step(m, &step) != TAGC_OK)
      step = base;
    pthread_mutex_lock(&S.lock);
  }
  pthread_mutex_unlock(&S.lock);
  if (step > base)
    LOG_INFO("elastic", "checkpoint of step %lld committed; leaving", (long long)step);
  else
    LOG_WARN("elastic", "no new checkpoint within %.1f s; leaving without one", wait_s);
}

/* Whether every member of generation gen, still the one trained, has announced its leave.
 * Caller holds S.lock; it is released during the etcd reads. */
static int everyone_leaving(tagc_member *m, int64_t gen) {
  int n = S.run_world, all = 0;
  char **ids = copy_ids(S.run_members, n);
  pthread_mutex_unlock(&S.lock);
  if (ids && tagc_member_all_leaving(m, ids, n, &all) != TAGC_OK) {
    LOG_DEBUG("elastic", "reading the members' leaves: %s", tagc_last_error());
    all = 0;
  }
  free_ids(ids, n);
  pthread_mutex_lock(&S.lock);
  return all && S.run_gen == gen;
}

/* Announces the leave, keeps training until the coordinator's generation without this worker
 * exists (its peers are superseded by it) or --leave-timeout passes, then ends this worker's
 * part at its next step. When every member of the generation leaves (a whole-job stop, e.g.
 * a suspended Kubernetes Job), no such generation comes: the job suspends instead, all ranks
 * stopping after one agreed step that is saved (tagc_run_suspend). */
static void leave(tagc_member *m, const char *why) {
  const tagc_train_config *cfg = S.cfg;
  pthread_mutex_lock(&S.lock);
  int training = S.run_gen > 0;
  pthread_mutex_unlock(&S.lock);
  if (training && cfg->leave_ckpt_wait > 0)
    wait_for_checkpoint(m, cfg->leave_ckpt_wait);
  if (tagc_member_announce_leave(m, why) != TAGC_OK)
    LOG_WARN("elastic", "leave not recorded (%s): the coordinator notices when the lease ends",
             tagc_last_error());
  pthread_mutex_lock(&S.lock);
  if (S.run) /* its peers hold its state: stop at the next step boundary, costing no step */
    tagc_run_hold(S.run);
  pthread_mutex_unlock(&S.lock);
  double until = tagc_now() + cfg->leave_timeout;
  pthread_mutex_lock(&S.lock);
  int64_t gen = S.run_gen;
  int suspending = 0;
  while (!S.finishing && gen > 0 && S.run_gen == gen && S.seen_gen <= gen && tagc_now() < until) {
    if (!suspending && everyone_leaving(m, gen)) {
      suspending = 1;
      until = tagc_now() + cfg->leave_timeout + SUSPEND_SAVE_S;
      LOG_INFO("elastic", "every member of generation %lld is leaving: the job suspends after "
               "its next step, saved", (long long)gen);
      tagc_run_suspend(S.run);
      continue;
    }
    if (!suspending && S.run_world <= 1)
      break;
    double next = tagc_now() + LEAVE_POLL_S;
    wait_until(suspending || next > until ? until : next);
  }
  int replanned = S.seen_gen > gen;
  pthread_mutex_unlock(&S.lock);
  if (gen > 0 && !replanned && !suspending)
    LOG_INFO("elastic", "stopping generation %lld at its next step", (long long)gen);
  tagc_member_withdraw(m);
  pthread_mutex_lock(&S.lock);
  until = tagc_now() + WITHDRAW_GRACE_S;
  while (!S.finishing && gen > 0 && S.run_gen == gen && tagc_now() < until)
    wait_until(until);
  tagc_run *stuck = !S.finishing && gen > 0 && S.run_gen == gen ? S.run : NULL;
  pthread_mutex_unlock(&S.lock);
  if (stuck) {
    LOG_WARN("elastic", "generation %lld did not end within %.1f s; aborting it", (long long)gen,
             WITHDRAW_GRACE_S);
    tagc_run_abort(stuck);
  }
}

int tagc_elastic_terminate(int sig) {
  pthread_once(&session_once, init_session);
  pthread_mutex_lock(&S.lock);
  int first = S.active && !S.stop;
  tagc_member *m = first ? S.member : NULL;
  if (first) {
    S.stop = 1;
    S.leaving = m != NULL;
  }
  pthread_cond_broadcast(&S.changed);
  pthread_mutex_unlock(&S.lock);
  if (!first)
    return 0;
  const char *name = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "signal";
  LOG_INFO("elastic", "%s: leaving the job", name);
  if (m)
    leave(m, name);
  pthread_mutex_lock(&S.lock);
  S.leaving = 0;
  pthread_cond_broadcast(&S.changed);
  pthread_mutex_unlock(&S.lock);
  return 1;
}

/* ---- the run ---- */

static tagc_status connect_etcd(const tagc_train_config *cfg, tagc_etcd **out) {
  tagc_etcd_credentials cred = TAGC_ETCD_CREDENTIALS_OF(cfg);
  return tagc_etcd_connect(cfg->etcd, &cred, TAGC_ETCD_DEADLINE_S, out);
}

/* Reads the job's `done` record into *done (new reference, NULL when the job is not done).
 * The first etcd call of the run: an etcd that cannot be used (unreachable, TLS or auth
 * refused) is TAGC_EPEER with one line saying so. */
static tagc_status read_done(tagc_etcd *etcd, const tagc_train_config *cfg, json_t **done) {
  *done = NULL;
  char key[TAGC_KEY_MAX], *text = NULL;
  size_t len = 0;
  TAGC_CHECK(tagc_key_done(cfg->job, key, sizeof key));
  tagc_status st = tagc_etcd_get(etcd, key, &text, &len, NULL);
  if (st == TAGC_ENOTFOUND) {
    tagc_clear_error();
    return TAGC_OK;
  }
  if (st != TAGC_OK) {
    char detail[512];
    snprintf(detail, sizeof detail, "%s", tagc_last_error());
    return tagc_errorf(TAGC_EPEER, "cannot use etcd at %s (%s); check --etcd-ca, --etcd-cert, "
                       "--etcd-key, --etcd-user and %s", cfg->etcd, detail, TAGC_ETCD_PASSWORD_ENV);
  }
  if (tagc_json_parse(text, len, done) != TAGC_OK)
    *done = json_object(); /* done all the same: its value is for humans */
  free(text);
  return TAGC_OK;
}

/* The one line a worker of a finished job prints before it exits 0. */
static void say_done(const tagc_train_config *cfg, const json_t *done) {
  json_int_t step = json_integer_value(json_object_get(done, "step"));
  printf("tagc-worker: job %s is already done (finished at step %lld); nothing to train. "
         "`tagctl job reset --job %s` trains it again.\n",
         cfg->job, (long long)step, cfg->job);
  fflush(stdout);
}

/* Publishes (or, with NULL, withdraws) the run and member to the signal thread; on
 * withdrawal waits until a leave in progress has stopped using them. Returns 1 when a signal
 * came before (the signal thread had no member to leave through). */
static int publish(tagc_run *run, tagc_member *m) {
  pthread_mutex_lock(&S.lock);
  S.run = run;
  S.member = m;
  int stopped = S.stop;
  if (!m) {
    S.finishing = 1;
    pthread_cond_broadcast(&S.changed);
    while (S.leaving)
      pthread_cond_wait(&S.changed, &S.lock);
  }
  pthread_mutex_unlock(&S.lock);
  return stopped;
}

/* The worker id: --worker-id, else HOSTNAME-PID. */
static void worker_id(const tagc_train_config *cfg, char *id, size_t cap) {
  if (cfg->worker_id && *cfg->worker_id) {
    snprintf(id, cap, "%s", cfg->worker_id);
  } else {
    char host[64] = "worker";
    gethostname(host, sizeof host - 1);
    snprintf(id, cap, "%s-%d", host, (int)getpid());
  }
}

tagc_status tagc_elastic_run(const tagc_train_config *cfg) {
  pthread_once(&session_once, init_session);
  pthread_mutex_lock(&S.lock);
  S.cfg = cfg;
  S.active = 1;
  pthread_mutex_unlock(&S.lock);
  tagc_etcd *etcd = NULL;
  tagc_run *run = NULL;
  tagc_member *m = NULL;
  json_t *info = worker_info(cfg), *done = NULL;
  char id[128];
  worker_id(cfg, id, sizeof id);
  tagc_status st;
  TAGC_CHECK_GOTO(tagc_key_check_id(cfg->job, "--job"), st, out);
  TAGC_CHECK_GOTO(connect_etcd(cfg, &etcd), st, out);
  TAGC_CHECK_GOTO(read_done(etcd, cfg, &done), st, out);
  if (done) {
    pthread_mutex_lock(&S.lock);
    S.job_done = 1;
    pthread_mutex_unlock(&S.lock);
    say_done(cfg, done);
    goto out;
  }
  TAGC_CHECK_GOTO(tagc_run_new(cfg, &run), st, out);
  if (stop_requested()) /* signalled while starting */
    goto out;
  TAGC_CHECK_GOTO(tagc_member_join(etcd, cfg->job, id, info, cfg->lease_ttl, &m), st, out);
  LOG_INFO("elastic", "joined job %s as %s", cfg->job, id);
  set_hooks(run, m);
  int signalled = publish(run, m);
  tagc_member_on_change(m, on_change, NULL);
  if (signalled && tagc_member_announce_leave(m, "signalled while joining") != TAGC_OK)
    LOG_WARN("elastic", "leave not recorded: %s", tagc_last_error());
  st = supervise(run, etcd, m, info);
  tagc_member_on_change(m, NULL, NULL);
out:;
  /* Leaving revokes the lease over etcd; its errors must not replace the reason we stop. */
  tagc_error_saved first;
  tagc_error_save(&first);
  publish(NULL, NULL);
  tagc_member_leave(m);
  tagc_etcd_destroy(etcd);
  tagc_run_free(run);
  json_decref(info);
  json_decref(done);
  tagc_error_restore(&first);
  return st;
}

int tagc_elastic_left(void) {
  pthread_mutex_lock(&S.lock);
  int left = S.stop && !S.job_done;
  pthread_mutex_unlock(&S.lock);
  return left;
}
