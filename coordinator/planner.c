#include "coordinator/planner.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

/* Working state of one decision. Objects are new references owned by the work. */
typedef struct work {
  const tagc_planner_config *cfg;
  const tagc_planner_input *in;
  tagc_planner_decision *out;
  int64_t gen;              /* current generation, 0 without a plan */
  const json_t *members;    /* current members (borrowed), NULL without a plan */
  json_t *excluded;         /* {"id":{"registration","why"}} of the next plan */
  json_t *micro;            /* {"id":n}: current values, updated by oom reports */
  json_t *suspicion;        /* [{"pair","count"}] of the next plan */
  json_t *totals;           /* {"kind":n} of the next plan */
  json_t *strikes;          /* {"id":n}: exclusions of each worker over the job */
  double pending;           /* earliest time a suspect's window ends; 0 = none */
} work;

static void note(work *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends one clause to the decision's reason ("; "-separated, truncated when full). */
static void note(work *w, const char *fmt, ...) {
  char *r = w->out->reason;
  size_t cap = sizeof w->out->reason, len = strlen(r);
  if (len && len + 2 < cap) {
    memcpy(r + len, "; ", 3);
    len += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r + len, cap - len, fmt, ap);
  va_end(ap);
}

/* Registration of a live worker, or -1 when it is not alive. */
static int64_t alive(const tagc_planner_input *in, const char *id) {
  for (size_t i = 0; i < in->n_workers; i++) {
    if (strcmp(in->workers[i].id, id) == 0)
      return in->workers[i].registration;
  }
  return -1;
}

/* Rank of id in the current plan, or -1. */
static int rank_of(const work *w, const char *id) {
  for (size_t i = 0; w->members && i < json_array_size(w->members); i++) {
    if (strcmp(json_string_value(json_array_get(w->members, i)), id) == 0)
      return (int)i;
  }
  return -1;
}

static const char *member_at(const work *w, int rank) {
  if (!w->members || rank < 0 || (size_t)rank >= json_array_size(w->members))
    return NULL;
  return json_string_value(json_array_get(w->members, (size_t)rank));
}

static const tagc_planner_report *report_of(const tagc_planner_input *in, const char *id) {
  for (size_t i = 0; i < in->n_reports; i++) {
    if (strcmp(in->reports[i].worker, id) == 0)
      return &in->reports[i];
  }
  return NULL;
}

static int excluded(const work *w, const char *id) {
  return json_object_get(w->excluded, id) != NULL;
}

/* Adds 1 to counter[key]. */
static tagc_status bump(json_t *counter, const char *key) {
  json_int_t n = json_integer_value(json_object_get(counter, key));
  if (json_object_set_new(counter, key, json_integer(n + 1)) != 0)
    return tagc_errorf(TAGC_ENOMEM, "planner: counter %s", key);
  return TAGC_OK;
}

static tagc_status exclude(work *w, const char *id, const char *why) {
  if (excluded(w, id))
    return TAGC_OK;
  note(w, "excluded %s: %s", id, why);
  json_t *e = json_pack("{s:I, s:s}", "registration", (json_int_t)alive(w->in, id), "why", why);
  if (!e || json_object_set_new(w->excluded, id, e) != 0)
    return tagc_errorf(TAGC_ENOMEM, "planner: exclusion");
  return bump(w->strikes, id);
}

/* Checks the current plan's shape and copies what the next plan carries forward. */
static tagc_status load_plan(work *w) {
  const json_t *plan = w->in->plan;
  w->excluded = json_object();
  w->suspicion = json_array();
  const json_t *totals = plan ? json_object_get(plan, "failures_total") : NULL;
  const json_t *micro = plan ? json_object_get(plan, "micro_batch") : NULL;
  const json_t *strikes = plan ? json_object_get(plan, "strikes") : NULL;
  w->totals = json_is_object(totals) ? json_deep_copy(totals) : json_object();
  w->micro = json_is_object(micro) ? json_deep_copy(micro) : json_object();
  w->strikes = json_is_object(strikes) ? json_deep_copy(strikes) : json_object();
  if (!w->excluded || !w->suspicion || !w->totals || !w->micro || !w->strikes)
    return tagc_errorf(TAGC_ENOMEM, "planner");
  w->gen = w->in->gen;
  if (w->gen < 0)
    return tagc_errorf(TAGC_EINVAL, "planner: generation %" PRId64 " is negative", w->gen);
  if (!plan)
    return TAGC_OK;
  if (!json_is_object(plan))
    return tagc_errorf(TAGC_EPROTO, "planner: current plan is not an object");
  w->members = json_object_get(plan, "members");
  if (!json_is_array(w->members))
    return tagc_errorf(TAGC_EPROTO, "planner: current plan has no \"members\" array");
  for (size_t i = 0; i < json_array_size(w->members); i++) {
    if (!json_is_string(json_array_get(w->members, i)))
      return tagc_errorf(TAGC_EPROTO, "planner: member %zu of the current plan is not a string", i);
  }
  return TAGC_OK;
}

/* Keeps the exclusions whose worker still holds the same registration. */
static tagc_status carry_exclusions(work *w) {
  const json_t *prev = json_object_get(w->in->plan, "excluded");
  const char *id;
  json_t *e;
  json_object_foreach((json_t *)prev, id, e) {
    json_int_t reg = json_integer_value(json_object_get(e, "registration"));
    if (alive(w->in, id) == reg && json_object_set(w->excluded, id, e) != 0)
      return tagc_errorf(TAGC_ENOMEM, "planner: exclusions");
  }
  return TAGC_OK;
}

/* Halves the reporter's micro-batch, or excludes it when it is already 1. */
static tagc_status out_of_memory(work *w, const char *id) {
  int cur = (int)json_integer_value(json_object_get(w->micro, id));
  if (cur <= 0)
    cur = w->cfg->default_micro_batch;
  if (cur <= 0) {
    note(w, "%s out of memory, but the job's micro-batch is unknown (set --micro-batch)", id);
    return TAGC_OK;
  }
  if (cur == 1)
    return exclude(w, id, "out of memory at micro-batch 1");
  note(w, "%s out of memory: micro-batch %d -> %d", id, cur, cur / 2);
  if (json_object_set_new(w->micro, id, json_integer(cur / 2)) != 0)
    return tagc_errorf(TAGC_ENOMEM, "planner: micro-batch");
  return TAGC_OK;
}

/* Count of the pair {a, b} in the current plan's suspicion list (0 when absent). */
static json_int_t pair_count(const json_t *list, const char *a, const char *b) {
  size_t i;
  json_t *e;
  json_array_foreach(list, i, e) {
    const json_t *p = json_object_get(e, "pair");
    const char *x = json_string_value(json_array_get(p, 0)), *y = json_string_value(json_array_get(p, 1));
    if (x && y && ((!strcmp(x, a) && !strcmp(y, b)) || (!strcmp(x, b) && !strcmp(y, a))))
      return json_integer_value(json_object_get(e, "count"));
  }
  return 0;
}

/* A member accused a member that reported too: both are alive, their link is in doubt.
 * The second generation in a row with the same pair excludes one side: the one excluded more
 * often before, else the higher rank. A side excluded before goes at the first time. */
static tagc_status mutual(work *w, const char *a, const char *b) {
  if (pair_count(w->suspicion, a, b) > 0 || excluded(w, a) || excluded(w, b))
    return TAGC_OK; /* this generation already counted the pair */
  json_int_t count = pair_count(json_object_get(w->in->plan, "suspicion"), a, b) + 1;
  const json_t *prior = json_object_get(w->in->plan, "strikes");
  json_int_t sa = json_integer_value(json_object_get(prior, a));
  json_int_t sb = json_integer_value(json_object_get(prior, b));
  if (count >= 2 || sa > 0 || sb > 0) {
    const char *loser = sa != sb ? (sa > sb ? a : b) : rank_of(w, a) > rank_of(w, b) ? a : b;
    char why[200];
    snprintf(why, sizeof why, "%s and %s accused each other in %lld generation(s) in a row", a,
             b, (long long)count);
    return exclude(w, loser, why);
  }
  note(w, "%s and %s suspect each other", a, b);
  const char *lo = strcmp(a, b) < 0 ? a : b, *hi = lo == a ? b : a;
  json_t *e = json_pack("{s:[s,s], s:I}", "pair", lo, hi, "count", count);
  if (!e || json_array_append_new(w->suspicion, e) != 0)
    return tagc_errorf(TAGC_ENOMEM, "planner: suspicion");
  return TAGC_OK;
}

/* One failure report: counts it, applies oom and suspicion rules. */
static tagc_status apply_report(work *w, const tagc_planner_report *r) {
  TAGC_CHECK(bump(w->totals, r->kind));
  if (rank_of(w, r->worker) < 0) {
    note(w, "%s (not a member) reported %s", r->worker, r->kind);
    return TAGC_OK;
  }
  note(w, "%s reported %s at step %" PRId64, r->worker, r->kind, r->step);
  if (strcmp(r->kind, "oom") == 0)
    TAGC_CHECK(out_of_memory(w, r->worker));
  const char *suspect = member_at(w, r->peer);
  if (!suspect || strcmp(suspect, r->worker) == 0 || alive(w->in, suspect) < 0)
    return TAGC_OK;
  if (report_of(w->in, suspect))
    return mutual(w, r->worker, suspect);
  double deadline = r->seen_at + w->cfg->suspect_window_s;
  if (w->in->now < deadline) {
    if (w->pending == 0 || deadline < w->pending)
      w->pending = deadline;
    return TAGC_OK;
  }
  char why[200];
  snprintf(why, sizeof why, "suspected by %s and did not report within %.1f s", r->worker,
           w->cfg->suspect_window_s);
  return exclude(w, suspect, why);
}

static int by_id(const void *a, const void *b) {
  return strcmp((*(const tagc_planner_worker *const *)a)->id,
                (*(const tagc_planner_worker *const *)b)->id);
}

/* The next member list: survivors in order, then joiners by id, at most max_workers. Notes
 * lost members (counted as "lease" failures) and re-registrations; *changed tells whether
 * anything differs from the current plan. */
static tagc_status next_members(work *w, json_t *members, int *changed) {
  const json_t *regs = json_object_get(w->in->plan, "registrations");
  for (size_t i = 0; w->members && i < json_array_size(w->members); i++) {
    const char *id = json_string_value(json_array_get(w->members, i));
    int64_t reg = alive(w->in, id);
    if (reg < 0) {
      note(w, "lost %s (lease expired)", id);
      TAGC_CHECK(bump(w->totals, "lease"));
      *changed = 1;
    } else if (excluded(w, id)) {
      *changed = 1;
    } else {
      if (reg != json_integer_value(json_object_get(regs, id))) {
        note(w, "%s registered again", id);
        *changed = 1;
      }
      if (json_array_append_new(members, json_string(id)) != 0)
        return tagc_errorf(TAGC_ENOMEM, "planner: members");
    }
  }
  const tagc_planner_worker **joiners = calloc(w->in->n_workers + 1, sizeof *joiners);
  if (!joiners)
    return tagc_errorf(TAGC_ENOMEM, "planner: joiners");
  size_t n = 0;
  for (size_t i = 0; i < w->in->n_workers; i++) {
    const char *id = w->in->workers[i].id;
    if (rank_of(w, id) < 0 && !excluded(w, id))
      joiners[n++] = &w->in->workers[i];
  }
  qsort(joiners, n, sizeof *joiners, by_id);
  tagc_status st = TAGC_OK;
  for (size_t i = 0; i < n && json_array_size(members) < (size_t)w->cfg->max_workers; i++) {
    note(w, "%s joined", joiners[i]->id);
    *changed = 1;
    if (json_array_append_new(members, json_string(joiners[i]->id)) != 0)
      st = tagc_errorf(TAGC_ENOMEM, "planner: members");
  }
  free(joiners);
  while (json_array_size(members) > (size_t)w->cfg->max_workers) {
    note(w, "%s left out: more than %d workers",
         json_string_value(json_array_get(members, json_array_size(members) - 1)),
         w->cfg->max_workers);
    json_array_remove(members, json_array_size(members) - 1);
    *changed = 1;
  }
  return st;
}

/* The resume point from the committed checkpoint record. */
static json_t *resume_of(const json_t *ckpt) {
  int64_t step = 0;
  const char *path = NULL;
  if (ckpt && tagc_json_get_int(ckpt, "step", &step) == TAGC_OK && step > 0)
    path = json_string_value(json_object_get(ckpt, "path"));
  if (!path)
    step = 0;
  return json_pack("{s:I, s:s?}", "step", (json_int_t)step, "path", path);
}

static tagc_status build_plan(work *w, json_t *members, json_t **out) {
  json_t *micro = json_object(), *regs = json_object();
  size_t i;
  json_t *m;
  json_array_foreach(members, i, m) {
    const char *id = json_string_value(m);
    json_int_t mb = json_integer_value(json_object_get(w->micro, id));
    if (!micro || !regs || json_object_set_new(micro, id, json_integer(mb)) != 0 ||
        json_object_set_new(regs, id, json_integer(alive(w->in, id))) != 0)
      break;
  }
  json_t *plan = json_pack("{s:I, s:i, s:O, s:o, s:o, s:o, s:O, s:O, s:O, s:O, s:s}", "gen",
                           (json_int_t)(w->gen + 1), "world", (int)json_array_size(members),
                           "members", members, "resume", resume_of(w->in->ckpt), "micro_batch",
                           micro, "registrations", regs, "excluded", w->excluded, "suspicion",
                           w->suspicion, "failures_total", w->totals, "strikes", w->strikes,
                           "reason", w->out->reason);
  if (!plan || i < json_array_size(members))
    return tagc_errorf(TAGC_ENOMEM, "planner: plan");
  *out = plan;
  return TAGC_OK;
}

static tagc_status check_config(const tagc_planner_config *c) {
  if (c->min_workers < 1 || c->max_workers < c->min_workers || !(c->suspect_window_s >= 0) ||
      c->default_micro_batch < 0)
    return tagc_errorf(TAGC_EINVAL,
                       "planner: need 1 <= min_workers (%d) <= max_workers (%d), a suspect "
                       "window >= 0 and a micro-batch >= 0",
                       c->min_workers, c->max_workers);
  return TAGC_OK;
}

static tagc_status decide(work *w) {
  TAGC_CHECK(check_config(w->cfg));
  TAGC_CHECK(load_plan(w));
  TAGC_CHECK(carry_exclusions(w));
  for (size_t i = 0; w->members && i < w->in->n_reports; i++)
    TAGC_CHECK(apply_report(w, &w->in->reports[i]));
  if (w->pending > 0) {
    w->out->action = TAGC_PLANNER_WAIT;
    w->out->wait_until = w->pending;
    note(w, "waiting for a suspect to report");
    return TAGC_OK;
  }
  int changed = !w->members || w->in->n_reports > 0;
  json_t *members = json_array();
  if (!members)
    return tagc_errorf(TAGC_ENOMEM, "planner: members");
  tagc_status st = next_members(w, members, &changed);
  if (st == TAGC_OK && !changed) {
    w->out->action = TAGC_PLANNER_KEEP;
    w->out->reason[0] = '\0';
    note(w, "no change");
  } else if (st == TAGC_OK && json_array_size(members) < (size_t)w->cfg->min_workers) {
    w->out->action = TAGC_PLANNER_STALLED;
    note(w, "%zu eligible workers, need %d", json_array_size(members), w->cfg->min_workers);
  } else if (st == TAGC_OK) {
    if (!w->members)
      note(w, "first generation");
    w->out->action = TAGC_PLANNER_NEW;
    st = build_plan(w, members, &w->out->plan);
  }
  json_decref(members);
  return st;
}

tagc_status tagc_planner_decide(const tagc_planner_config *cfg, const tagc_planner_input *in,
                                tagc_planner_decision *out) {
  memset(out, 0, sizeof *out);
  work w = {.cfg = cfg, .in = in, .out = out};
  tagc_status st = decide(&w);
  json_decref(w.excluded);
  json_decref(w.micro);
  json_decref(w.suspicion);
  json_decref(w.totals);
  json_decref(w.strikes);
  if (st != TAGC_OK)
    tagc_planner_decision_free(out);
  return st;
}

void tagc_planner_decision_free(tagc_planner_decision *d) {
  json_decref(d->plan);
  d->plan = NULL;
}
