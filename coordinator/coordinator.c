#include "coordinator/coordinator.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/election.h"
#include "cluster/http.h"
#include "cluster/keys.h"
#include "coordinator/planner.h"
#include "coordinator/status_http.h"
#include "coordinator/view.h"

/* Seconds between two reads of the job's state for /status, /healthz and the final step. */
#define REFRESH_S 1.0
/* ... and at least this many times the last read's duration: a large job's whole-prefix
 * read (every worker's key, the last plans, the ready keys) keeps to a tenth of the
 * leader's time and of etcd's, whatever the number of workers. */
#define REFRESH_DUTY 10
/* Longest sleep of the loops, so that tagc_coord_stop is seen promptly. */
#define POLL_S 0.2

/* What ended a leadership (or the whole run). */
typedef enum outcome { GO_ON, JOB_DONE, DEPOSED, STOPPED } outcome;

struct tagc_coord {
  tagc_etcd *etcd;
  tagc_coord_config cfg;              /* strings point at the copies below */
  coord_keys keys;                    /* keys.job is the job id cfg.job points at */
  char *advertise;
  tagc_http *http;

  atomic_int stop;
  atomic_int lease_lost;
  int64_t lease;
  int64_t stale_lease;                /* an old lease whose revoke failed, or 0 */
  tagc_etcd_keeper *keeper;
  tagc_election *election;
  int leading;                        /* the loop thread is in lead() */

  pthread_mutex_t lock;               /* dirty flag shared with the watch thread */
  pthread_cond_t wake;
  int dirty;
  double dirty_since;
  uint64_t events;                    /* relevant watch events so far (early decisions) */
  double started;     /* tagc_now() at creation: the first generation's wait counts from it */

  coord_seen seen;                    /* failure reports of the last read */
  int etcd_failed;                    /* the leader's last read of the job failed */
  double lost_grace_until;            /* lease-loss grace (planner.h) ends then (tagc_now) */
  double wake_at;                     /* the last decision's wake_at: a probation ends */
  char last_reason[512];
  double read_ms, planner_ms;         /* the last decision's read of the job and planner run */

  coord_status served;                /* what HTTP serves */
};

void tagc_coord_config_init(tagc_coord_config *cfg) {
  *cfg = (tagc_coord_config){.min_workers = 1, .max_workers = 1024, .settle_s = 1,
                             .lease_ttl_s = 5, .suspect_window_s = 2, .start_wait_s = 30};
}

/* ---- the leader's decisions ---- */

/* The configured number, else an integer field of the job's config key, else 0. */
static int64_t setting(int64_t configured, const coord_view *v, const char *field) {
  return configured > 0 ? configured : coord_int_field(v->config, field);
}

/* `done` = the final record, fenced. */
static outcome write_done(tagc_coord *c, const coord_view *v, int64_t step) {
  json_t *rec = json_pack("{s:s, s:I, s:I, s:s, s:f}", "status", "finished", "gen",
                          (json_int_t)v->gen, "step", (json_int_t)step, "by", c->advertise, "time",
                          tagc_wall_time());
  char *text = rec ? tagc_json_dump(rec) : NULL;
  json_decref(rec);
  if (!text)
    return GO_ON;
  tagc_etcd_compare absent = {.key = c->keys.done_key, .target = TAGC_ETCD_CREATE,
                              .result = TAGC_ETCD_EQUAL};
  tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = c->keys.done_key, .value = text,
                      .value_len = strlen(text)};
  tagc_status st = tagc_election_txn(c->election, &absent, 1, &put, 1, NULL);
  free(text);
  if (st == TAGC_ECONFLICT)
    return DEPOSED;
  if (st != TAGC_OK) {
    coord_status_etcd_failed(&c->served, "writing done");
    return GO_ON;
  }
  LOG_INFO("coord", "job %s done: progress reached the final step %" PRId64, c->keys.job, step);
  return JOB_DONE;
}

/* Delete ops (into ops, with their keys in keys) for the leave records whose registration is
 * no longer registered: the worker is gone, and the plan being written no longer needs them.
 * Returns how many. */
static size_t stale_leaves(const tagc_coord *c, const coord_view *v, char (*keys)[TAGC_KEY_MAX],
                           tagc_etcd_op *ops) {
  size_t n = 0;
  for (size_t i = 0; i < v->n_leaving; i++) {
    int registered = 0;
    for (size_t j = 0; j < v->n_workers; j++)
      registered |= v->workers[j].registration == v->leaving[i].registration &&
                    !strcmp(v->workers[j].id, v->leaving[i].id);
    if (!registered &&
        tagc_key_leaving(c->keys.job, v->leaving[i].id, keys[n], TAGC_KEY_MAX) == TAGC_OK) {
      ops[n] = (tagc_etcd_op){.type = TAGC_ETCD_OP_DELETE, .key = keys[n]};
      n++;
    }
  }
  return n;
}

/* Writes plan as generation g = v->gen + 1, fenced by the election and by `gen`'s mod
 * revision, and deletes generation g-2's keys and failure reports and the leave records
 * that served their purpose. */
static outcome write_generation(tagc_coord *c, const coord_view *v, json_t *plan) {
  int64_t g = v->gen + 1;
  char plan_key[TAGC_KEY_MAX], old_gen[TAGC_KEY_MAX], old_failures[TAGC_KEY_MAX], gen_text[32];
  if (tagc_key_gen_plan(c->keys.job, g, plan_key, sizeof plan_key) != TAGC_OK ||
      tagc_key_gen_prefix(c->keys.job, g - 2 > 0 ? g - 2 : 0, old_gen, sizeof old_gen) != TAGC_OK ||
      tagc_key_failures_gen_prefix(c->keys.job, g - 2 > 0 ? g - 2 : 0, old_failures,
                                   sizeof old_failures) != TAGC_OK)
    return GO_ON;
  snprintf(gen_text, sizeof gen_text, "%" PRId64, g);
  json_object_set_new(plan, "time", json_real(tagc_wall_time()));
  json_object_set_new(plan, "leader", json_string(c->advertise));
  char *text = tagc_json_dump(plan);
  tagc_etcd_op *ops = calloc(4 + v->n_leaving, sizeof *ops);
  char (*leave_keys)[TAGC_KEY_MAX] = calloc(v->n_leaving + 1, sizeof *leave_keys);
  if (!text || !ops || !leave_keys) {
    free(text);
    free(ops);
    free(leave_keys);
    return GO_ON;
  }
  tagc_etcd_compare same = {.key = c->keys.gen_key, .result = TAGC_ETCD_EQUAL,
                            .target = v->gen_mod ? TAGC_ETCD_MOD : TAGC_ETCD_CREATE,
                            .number = v->gen_mod};
  size_t n = 0;
  ops[n++] = (tagc_etcd_op){.type = TAGC_ETCD_OP_PUT, .key = plan_key, .value = text,
                            .value_len = strlen(text)};
  ops[n++] = (tagc_etcd_op){.type = TAGC_ETCD_OP_PUT, .key = c->keys.gen_key, .value = gen_text,
                            .value_len = strlen(gen_text)};
  if (g - 2 > 0) {
    ops[n++] = (tagc_etcd_op){.type = TAGC_ETCD_OP_DELETE, .key = old_gen, .prefix = 1};
    ops[n++] = (tagc_etcd_op){.type = TAGC_ETCD_OP_DELETE, .key = old_failures, .prefix = 1};
  }
  n += stale_leaves(c, v, leave_keys, ops + n);
  tagc_etcd_txn_result t;
  tagc_status st = tagc_election_txn(c->election, &same, 1, ops, n, &t);
  free(text);
  free(ops);
  free(leave_keys);
  if (st == TAGC_ECONFLICT) {
    LOG_WARN("coord", "write of generation %" PRId64 " fenced: %s", g, tagc_last_error());
    return DEPOSED;
  }
  if (st != TAGC_OK) {
    coord_status_etcd_failed(&c->served, "writing a generation");
    return GO_ON;
  }
  int ok = t.succeeded;
  tagc_etcd_txn_result_free(&t);
  if (!ok) {
    LOG_WARN("coord", "gen changed while planning generation %" PRId64 "; reading again", g);
    return GO_ON;
  }
  char *members = tagc_json_dump(json_object_get(plan, "members"));
  /* the member list last: a long one is cut at the log's line length */
  LOG_INFO("coord", "generation %" PRId64 ": %lld workers (%s) [read %.1f ms, planner %.2f ms] %s",
           g, (long long)coord_int_field(plan, "world"), c->last_reason, c->read_ms,
           c->planner_ms, members ? members : "");
  free(members);
  return GO_ON;
}

/* Marks the leader's state dirty (evaluated after the settle window; a settled decision may
 * come earlier, see lead()). */
static void mark_dirty(tagc_coord *c) {
  pthread_mutex_lock(&c->lock);
  c->events++;
  if (!c->dirty) {
    c->dirty = 1;
    c->dirty_since = tagc_now();
  }
  pthread_cond_signal(&c->wake);
  pthread_mutex_unlock(&c->lock);
}

/* The final-step and done checks, run on every read. */
static outcome check_done(tagc_coord *c, const coord_view *v) {
  if (v->done)
    return JOB_DONE;
  int64_t final = setting(c->cfg.final_step, v, "steps");
  int64_t step = coord_int_field(v->progress, "step");
  if (c->leading && final > 0 && step >= final)
    return write_done(c, v, step);
  return GO_ON;
}

/* When lead_step decides: after the settle window (any decision), or early, inside it (only a
 * new generation that the planner calls settled is carried out; nothing else changes). */
typedef enum decide_mode { READ_ONLY, DECIDE, DECIDE_EARLY } decide_mode;

/* Runs the planner on a view and carries out its decision. *wait_until gets a time to decide
 * again (0 = none); DECIDE_EARLY leaves it alone. *acted: the decision was carried out. */
static outcome evaluate(tagc_coord *c, const coord_view *v, decide_mode mode, double *wait_until,
                        int *acted) {
  if (mode == DECIDE)
    *wait_until = 0;
  tagc_planner_config pc = {.min_workers = c->cfg.min_workers, .max_workers = c->cfg.max_workers,
                            .suspect_window_s = c->cfg.suspect_window_s,
                            .default_micro_batch = (int)setting(c->cfg.micro_batch, v, "micro_batch"),
                            .start_workers = c->cfg.start_workers,
                            .start_deadline = c->started + c->cfg.start_wait_s,
                            .lost_grace_until = c->lost_grace_until};
  /* a malformed current plan (not a JSON object) counts as no plan: plan the next generation */
  const json_t *plan = json_is_object(v->plan) ? v->plan : NULL;
  tagc_planner_input in = {.gen = v->gen, .plan = plan, .workers = v->workers,
                           .n_workers = v->n_workers, .seen_at = v->seen_at,
                           .worker_info = v->worker_info,
                           .reports = v->reports,
                           .n_reports = v->n_reports, .failures = v->failures, .leaving = v->leaving,
                           .n_leaving = v->n_leaving, .deaths = v->deaths, .ckpt = v->ckpt,
                           .now = tagc_now()};
  tagc_planner_decision d;
  double started = tagc_now();
  tagc_status st = tagc_planner_decide(&pc, &in, &d);
  c->planner_ms = 1e3 * (tagc_now() - started);
  if (st != TAGC_OK) {
    LOG_ERROR("coord", "planner: %s", tagc_last_error());
    return GO_ON;
  }
  if (mode == DECIDE_EARLY && !(d.action == TAGC_PLANNER_NEW && d.settled)) {
    tagc_planner_decision_free(&d);
    return GO_ON;
  }
  *acted = 1;
  c->wake_at = d.wake_at;
  int news = strcmp(c->last_reason, d.reason) != 0;
  snprintf(c->last_reason, sizeof c->last_reason, "%s", d.reason);
  outcome out = GO_ON;
  if (d.action == TAGC_PLANNER_NEW)
    out = write_generation(c, v, d.plan);
  else if (d.action == TAGC_PLANNER_WAIT)
    *wait_until = d.wait_until;
  int held = d.action == TAGC_PLANNER_KEEP && d.wake_at > 0; /* a joiner on probation */
  if (news && (d.action == TAGC_PLANNER_STALLED || d.action == TAGC_PLANNER_WAIT || held))
    LOG_INFO("coord", "no new generation: %s", d.reason);
  tagc_planner_decision_free(&d);
  return out;
}

/* ---- the leader's loop ---- */

static int relevant(const tagc_coord *c, const tagc_etcd_event *e) {
  const char *key = (const char *)e->kv.key, *rest;
  if (tagc_key_suffix(key, c->keys.workers_prefix, &rest) == TAGC_OK)
    return 1;
  if (e->type != TAGC_ETCD_PUT)
    return 0;
  return tagc_key_suffix(key, c->keys.failures_prefix, &rest) == TAGC_OK ||
         tagc_key_suffix(key, c->keys.leaving_prefix, &rest) == TAGC_OK ||
         !strcmp(key, c->keys.done_key) || !strcmp(key, c->keys.config_key);
}

static int on_job_event(void *arg, const tagc_etcd_watch_msg *msg) {
  tagc_coord *c = arg;
  int any = msg->kind == TAGC_ETCD_WATCH_RESYNC;
  for (size_t i = 0; i < msg->n_events; i++)
    any |= relevant(c, &msg->events[i]);
  if (any)
    mark_dirty(c);
  return 0;
}

/* Sleeps until `until` (monotonic), a dirty mark or POLL_S, whichever is first. */
static void nap(tagc_coord *c, double until) {
  double s = until - tagc_now();
  if (s > POLL_S)
    s = POLL_S;
  if (s <= 0)
    return;
  struct timespec ts = tagc_deadline_in(s);
  pthread_mutex_lock(&c->lock);
  pthread_cond_timedwait(&c->wake, &c->lock, &ts);
  pthread_mutex_unlock(&c->lock);
}

/* One pass of the leader's loop: a read, the done check and, unless READ_ONLY, a decision
 * (*acted: one was carried out). */
static outcome lead_step(tagc_coord *c, decide_mode mode, double *wait_until, int *acted) {
  coord_view v;
  *acted = 0;
  double started = tagc_now();
  tagc_status st = coord_view_read(c->etcd, &c->keys, &c->seen, &v);
  c->read_ms = 1e3 * (tagc_now() - started);
  if (st != TAGC_OK) {
    coord_status_etcd_failed(&c->served, "reading the job's state");
    c->etcd_failed = 1;
    if (mode == DECIDE)
      mark_dirty(c);
    return GO_ON;
  }
  if (c->etcd_failed) { /* etcd is back: leases may have expired while it was away */
    c->etcd_failed = 0;
    c->lost_grace_until = tagc_now() + c->cfg.lease_ttl_s;
  }
  outcome out = check_done(c, &v);
  if (out == GO_ON && mode != READ_ONLY)
    out = evaluate(c, &v, mode, wait_until, acted);
  coord_status_publish(&c->served, &v, out != DEPOSED, c->keys.job, c->advertise,
                       c->last_reason);
  coord_view_free(&v);
  return out;
}

static outcome lead(tagc_coord *c) {
  LOG_INFO("coord", "%s leads job %s", c->advertise, c->keys.job);
  pthread_mutex_lock(&c->lock);
  c->dirty = 1; /* decide once after the settle window, whatever happened before */
  c->dirty_since = tagc_now();
  pthread_mutex_unlock(&c->lock);
  /* a new leader may follow an etcd outage that expired the workers' leases */
  c->lost_grace_until = tagc_now() + c->cfg.lease_ttl_s;
  c->leading = 1;
  tagc_etcd_watch_opts o = {.prefix = 1};
  tagc_etcd_watch *w = NULL;
  if (tagc_etcd_watch_start(c->etcd, c->keys.prefix, &o, on_job_event, c, &w) != TAGC_OK) {
    coord_status_etcd_failed(&c->served, "watching the job");
    c->leading = 0;
    return DEPOSED;
  }
  outcome out = GO_ON;
  double wait_until = 0, next_refresh = 0;
  uint64_t probed = 0; /* events seen by the last early decision */
  int acted;
  while (out == GO_ON) {
    if (atomic_load(&c->stop))
      out = STOPPED;
    else if (atomic_load(&c->lease_lost))
      out = DEPOSED;
    if (out != GO_ON)
      break;
    pthread_mutex_lock(&c->lock);
    double due = c->dirty ? c->dirty_since + c->cfg.settle_s : 1e300;
    uint64_t events = c->events;
    int fresh = c->dirty && events != probed;
    pthread_mutex_unlock(&c->lock);
    if (wait_until > 0 && wait_until < due)
      due = wait_until;
    if (c->wake_at > 0 && c->wake_at < due) /* a probation ends (planner.h) */
      due = c->wake_at;
    double now = tagc_now();
    if (now >= due) {
      pthread_mutex_lock(&c->lock);
      c->dirty = 0;
      pthread_mutex_unlock(&c->lock);
      c->wake_at = 0; /* this decision sets it again; a failed read marks the state dirty */
      out = lead_step(c, DECIDE, &wait_until, &acted);
      next_refresh = 0; /* publish what the decision wrote */
    } else if (fresh) {
      /* Inside the settle window, a decision that accounts for every member (the last
         awaited report came) is carried out at once: the window has nothing left to batch.
         Events that came meanwhile keep the state dirty. */
      probed = events;
      out = lead_step(c, DECIDE_EARLY, &wait_until, &acted);
      pthread_mutex_lock(&c->lock);
      if (acted && c->events == events)
        c->dirty = 0;
      pthread_mutex_unlock(&c->lock);
      if (acted) { /* a wait of the old generation is moot */
        wait_until = 0;
        next_refresh = 0;
      }
    } else if (now >= next_refresh) {
      out = lead_step(c, READ_ONLY, &wait_until, &acted);
      double pause = REFRESH_DUTY * c->read_ms / 1e3;
      next_refresh = tagc_now() + (pause > REFRESH_S ? pause : REFRESH_S);
    } else {
      nap(c, due < next_refresh ? due : next_refresh);
    }
  }
  tagc_etcd_watch_stop(w);
  c->leading = 0;
  coord_status_set_leader(&c->served, 0);
  if (out == DEPOSED)
    LOG_WARN("coord", "%s is no longer the leader of job %s", c->advertise, c->keys.job);
  return out;
}

/* ---- candidacy ---- */

static void on_lease_lost(void *arg, int64_t lease, tagc_status why) {
  (void)lease;
  (void)why;
  atomic_store(&((tagc_coord *)arg)->lease_lost, 1);
}

/* Leaves the election: stops renewing and revokes the lease, which deletes the candidate
 * key, so that a standby takes over at once. Returns the revoke's status (TAGC_OK also when
 * there was no lease or etcd had dropped it); a failed revoke is retried by the next
 * candidacy. */
static tagc_status drop_candidacy(tagc_coord *c) {
  tagc_election_destroy(c->election);
  c->election = NULL;
  tagc_etcd_keeper_stop(c->keeper);
  c->keeper = NULL;
  tagc_status st = c->lease ? tagc_etcd_lease_revoke(c->etcd, c->lease) : TAGC_OK;
  if (st == TAGC_ENOTFOUND)
    st = TAGC_OK;
  if (st != TAGC_OK)
    c->stale_lease = c->lease; /* etcd unreachable: revoke it once etcd answers again */
  c->lease = 0;
  return st;
}

static tagc_status become_candidate(tagc_coord *c) {
  int64_t granted;
  atomic_store(&c->lease_lost, 0);
  /* Our own key from before an outage would otherwise rank ahead of us for up to a TTL. */
  tagc_status st = c->stale_lease ? tagc_etcd_lease_revoke(c->etcd, c->stale_lease) : TAGC_OK;
  if (st != TAGC_OK && st != TAGC_ENOTFOUND)
    return st;
  c->stale_lease = 0;
  TAGC_CHECK(tagc_etcd_lease_grant(c->etcd, (int64_t)(c->cfg.lease_ttl_s + 0.5), &c->lease, &granted));
  st = tagc_etcd_keeper_start(c->etcd, c->lease, granted, on_lease_lost, c, &c->keeper);
  if (st == TAGC_OK)
    st = tagc_election_create(c->etcd, c->keys.job, c->lease, c->advertise, &c->election);
  if (st != TAGC_OK)
    TAGC_CHECK_IGNORE(drop_candidacy(c), st); /* the caller reports why registering failed */
  return st;
}

/* A standby's pass: mirrors the state for HTTP; tells whether the job is done. */
static outcome stand_by(tagc_coord *c) {
  coord_view v;
  if (coord_view_read(c->etcd, &c->keys, &c->seen, &v) != TAGC_OK) {
    coord_status_etcd_failed(&c->served, "reading the job's state");
    return GO_ON;
  }
  outcome out = check_done(c, &v);
  coord_status_publish(&c->served, &v, 0, c->keys.job, c->advertise, c->last_reason);
  coord_view_free(&v);
  return out;
}

/* After the job is done (--linger): serves the final state until stopped (returns 0) or
 * until `done` disappears because the job was reset (tagctl job reset; returns 1). */
static int linger(tagc_coord *c) {
  while (!atomic_load(&c->stop)) {
    coord_view v;
    if (coord_view_read(c->etcd, &c->keys, &c->seen, &v) != TAGC_OK) {
      coord_status_etcd_failed(&c->served, "reading the job's state");
    } else {
      int done = v.done != NULL;
      coord_status_publish(&c->served, &v, 0, c->keys.job, c->advertise, c->last_reason);
      coord_view_free(&v);
      if (!done)
        return 1;
    }
    tagc_sleep(REFRESH_S);
  }
  return 0;
}

/* Campaigns and leads until the job is done or the coordinator is stopped; then leaves the
 * election (a stopped leader's standby takes over at once). */
static outcome campaign(tagc_coord *c) {
  outcome out = GO_ON;
  while (out != JOB_DONE && out != STOPPED) {
    if (atomic_load(&c->stop)) {
      out = STOPPED;
    } else if (!c->election || atomic_load(&c->lease_lost)) {
      drop_candidacy(c);
      if (become_candidate(c) != TAGC_OK) {
        coord_status_etcd_failed(&c->served, "registering as a candidate");
        tagc_sleep(POLL_S);
      }
    } else {
      tagc_status st = tagc_election_campaign(c->election, REFRESH_S);
      if (st == TAGC_OK) {
        out = lead(c);
        if (out == DEPOSED)
          drop_candidacy(c);
      } else if (st == TAGC_ETIMEDOUT) {
        out = stand_by(c);
      } else if (st == TAGC_ENOTFOUND) {
        atomic_store(&c->lease_lost, 1);
      } else {
        coord_status_etcd_failed(&c->served, "campaigning");
        tagc_sleep(POLL_S);
      }
    }
  }
  drop_candidacy(c);
  return out;
}

tagc_status tagc_coord_run(tagc_coord *c) {
  while (campaign(c) == JOB_DONE) {
    if (!c->cfg.linger) {
      LOG_INFO("coord", "job %s is done; %s stops", c->keys.job, c->advertise);
      return TAGC_OK;
    }
    LOG_INFO("coord", "job %s is done; %s keeps serving its state", c->keys.job, c->advertise);
    if (!linger(c))
      return TAGC_OK;
    LOG_INFO("coord", "job %s was reset; %s campaigns again", c->keys.job, c->advertise);
    c->last_reason[0] = '\0';
    c->started = tagc_now(); /* the first generation waits for its workers again */
  }
  return tagc_errorf(TAGC_EABORTED, "coordinator stopped");
}

void tagc_coord_stop(tagc_coord *c) { atomic_store(&c->stop, 1); }

/* ---- creation ---- */

static tagc_status check_config(const tagc_coord_config *cfg) {
  if (cfg->min_workers < 1 || cfg->max_workers < cfg->min_workers)
    return tagc_errorf(TAGC_EINVAL, "need 1 <= min-workers (%d) <= max-workers (%d)",
                       cfg->min_workers, cfg->max_workers);
  if (!(cfg->settle_s >= 0 && cfg->settle_s <= 600) || !(cfg->lease_ttl_s >= 1 && cfg->lease_ttl_s <= 600) ||
      !(cfg->suspect_window_s >= 0 && cfg->suspect_window_s <= 600))
    return tagc_errorf(TAGC_EINVAL, "settle (%g s) and suspect window (%g s) must be in [0, 600], "
                       "lease TTL (%g s) in [1, 600]", cfg->settle_s, cfg->suspect_window_s,
                       cfg->lease_ttl_s);
  if (cfg->micro_batch < 0 || cfg->final_step < 0)
    return tagc_errorf(TAGC_EINVAL, "micro-batch and final step must not be negative");
  if (cfg->start_workers < 0 || cfg->start_workers > cfg->max_workers ||
      !(cfg->start_wait_s >= 0 && cfg->start_wait_s <= 3600))
    return tagc_errorf(TAGC_EINVAL, "start workers (%d) must be in [0, max-workers %d] and the "
                       "start wait (%g s) in [0, 3600]", cfg->start_workers, cfg->max_workers,
                       cfg->start_wait_s);
  return TAGC_OK;
}

/* The election value: cfg->advertise, else the HTTP URL (with this host's name when
 * listening on every address), else host:pid. */
static tagc_status make_advertise(tagc_coord *c, const tagc_coord_config *cfg) {
  char buf[300], name[256] = "localhost";
  gethostname(name, sizeof name - 1);
  if (cfg->advertise && cfg->advertise[0]) {
    snprintf(buf, sizeof buf, "%s", cfg->advertise);
  } else if (c->http) {
    char *host;
    int port;
    TAGC_CHECK(tagc_http_parse_addr(cfg->http_addr, &host, &port));
    int any = strcmp(host, "0.0.0.0") == 0;
    snprintf(buf, sizeof buf, "http://%s:%d", any ? name : host, tagc_http_port(c->http));
    free(host);
  } else {
    snprintf(buf, sizeof buf, "%s:%ld", name, (long)getpid());
  }
  c->advertise = strdup(buf);
  return c->advertise ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "coordinator");
}

tagc_status tagc_coord_create(tagc_etcd *etcd, const tagc_coord_config *cfg, tagc_coord **out) {
  *out = NULL;
  if (!etcd || !cfg)
    return tagc_errorf(TAGC_EINVAL, "coordinator: NULL client or config");
  TAGC_CHECK(tagc_key_check_id(cfg->job, "job id"));
  TAGC_CHECK(check_config(cfg));
  tagc_coord *c = calloc(1, sizeof *c);
  if (!c)
    return tagc_errorf(TAGC_ENOMEM, "coordinator");
  c->etcd = etcd;
  c->cfg = *cfg;
  c->started = tagc_now();
  c->cfg.job = c->keys.job;
  c->cfg.http_addr = c->cfg.advertise = NULL;
  pthread_mutex_init(&c->lock, NULL);
  tagc_cond_init_monotonic(&c->wake);
  coord_status_init(&c->served);
  tagc_status st;
  TAGC_CHECK_GOTO(coord_keys_init(&c->keys, cfg->job), st, fail);
  if (cfg->http_addr && cfg->http_addr[0])
    TAGC_CHECK_GOTO(tagc_http_start(cfg->http_addr, coord_status_serve, &c->served, &c->http), st,
                    fail);
  TAGC_CHECK_GOTO(make_advertise(c, cfg), st, fail);
  *out = c;
  return TAGC_OK;
fail:
  tagc_coord_destroy(c);
  return st;
}

int tagc_coord_http_port(const tagc_coord *c) { return c->http ? tagc_http_port(c->http) : 0; }

void tagc_coord_destroy(tagc_coord *c) {
  if (!c)
    return;
  tagc_http_stop(c->http);
  drop_candidacy(c);
  coord_seen_free(&c->seen);
  coord_status_free(&c->served);
  pthread_cond_destroy(&c->wake);
  pthread_mutex_destroy(&c->lock);
  free(c->advertise);
  free(c);
}
