#include "coordinator/planner.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/keys.h"
#include "common/json.h"

/* A sorted index of ids (then positions), so that a decision looks an id up in O(log n)
 * instead of scanning: each rule runs once per member or report, and a scan inside it made
 * decisions quadratic (or cubic) in the members. e[k].at is the position of e[k].id in the
 * array indexed; equal ids keep their order, so the first is the one a scan finds. */
typedef struct id_entry {
  const char *id;
  size_t at;
} id_entry;

typedef struct id_index {
  id_entry *e;
  size_t n;
} id_index;

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
  json_t *blame;            /* {"id":n}: accusations over the fruitless streak (next plan) */
  json_int_t fruitless;     /* fruitless generations in a row, this one included (next plan) */
  json_t *deaths;           /* {"id":{"count","registration"}}: quick deaths (next plan) */
  double wake;              /* earliest end of a probation; 0 = none */
  int excluded_now;         /* exclusions made by this decision */
  double pending;           /* earliest time a suspect's window ends; 0 = none */
  size_t set_aside;         /* reports that ask for no new generation (a straggler kept) */
  id_index workers;         /* in->workers by id */
  id_index leaving;         /* in->leaving by id */
  id_index reports;         /* in->reports by reporter */
  id_index ranks;           /* the current members by id (at = rank) */
  int *accused_rank;        /* [report]: the rank it accuses (accusation()), or -1 */
  int *accusers;            /* [rank]: reports that accuse that member */
  int alive_workers;        /* live workers (registered, not leaving) */
  int excluded_alive;       /* live workers in `excluded` */
} work;

/* Fruitless generations in a row (failed before completing a step, nobody excluded) after
 * which the fruitless rule excludes the most blamed member. */
#define FRUITLESS_LIMIT 3

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

static int by_entry(const void *a, const void *b) {
  const id_entry *x = a, *y = b;
  int c = strcmp(x->id, y->id);
  return c ? c : (x->at > y->at) - (x->at < y->at);
}

/* Sorts the n entries that the caller filled into ix->e (allocated by index_alloc). */
static void index_sort(id_index *ix, size_t n) {
  ix->n = n;
  qsort(ix->e, n, sizeof *ix->e, by_entry);
}

static tagc_status index_alloc(id_index *ix, size_t n) {
  ix->e = calloc(n + 1, sizeof *ix->e);
  return ix->e ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "planner: index");
}

/* The first entry (in index order) holding id, or -1. */
static long index_find(const id_index *ix, const char *id) {
  size_t lo = 0, hi = ix->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(ix->e[mid].id, id) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < ix->n && strcmp(ix->e[lo].id, id) == 0 ? (long)lo : -1;
}

/* The position of the first occurrence of id in the indexed array, or -1. */
static long index_at(const id_index *ix, const char *id) {
  long k = index_find(ix, id);
  return k < 0 ? -1 : (long)ix->e[k].at;
}

/* The registered worker of id (the first with that id), or NULL. */
static const tagc_planner_worker *worker_of(const work *w, const char *id) {
  long i = index_at(&w->workers, id);
  return i < 0 ? NULL : &w->in->workers[i];
}

/* Registration of a registered worker, or -1. */
static int64_t registered(const work *w, const char *id) {
  const tagc_planner_worker *wk = worker_of(w, id);
  return wk ? wk->registration : -1;
}

/* The leaving/<id> record of id's registration reg (the first in input order), or NULL. */
static const tagc_planner_worker *leave_record(const work *w, const char *id, int64_t reg) {
  const tagc_planner_worker *found = NULL;
  long k = reg > 0 ? index_find(&w->leaving, id) : -1;
  for (; k >= 0 && (size_t)k < w->leaving.n && !strcmp(w->leaving.e[k].id, id) && !found; k++) {
    const tagc_planner_worker *l = &w->in->leaving[w->leaving.e[k].at];
    if (l->registration == reg)
      found = l;
  }
  return found;
}

/* Whether id announced that its registration reg leaves the job (or its supervisor saw it
 * die). */
static int leaves(const work *w, const char *id, int64_t reg) {
  return leave_record(w, id, reg) != NULL;
}

/* Whether id's live registration is reg or continues it (lease loss: "previous"). */
static int continues(const work *w, const char *id, int64_t reg) {
  const tagc_planner_worker *wk = reg > 0 ? worker_of(w, id) : NULL;
  if (!wk)
    return 0;
  if (wk->registration == reg)
    return 1;
  size_t k;
  const json_t *r;
  const json_t *prev = json_object_get(json_object_get(w->in->worker_info, id), "previous");
  json_array_foreach(prev, k, r) {
    if (json_integer_value(r) == reg)
      return 1;
  }
  return 0;
}

/* Registration of a live worker that does not leave, or -1 when it is not alive. */
static int64_t alive(const work *w, const char *id) {
  int64_t reg = registered(w, id);
  return leaves(w, id, reg) ? -1 : reg;
}

/* Rank of id in the current plan, or -1. */
static int rank_of(const work *w, const char *id) {
  return (int)index_at(&w->ranks, id);
}

static const char *member_at(const work *w, int rank) {
  if (!w->members || rank < 0 || (size_t)rank >= json_array_size(w->members))
    return NULL;
  return json_string_value(json_array_get(w->members, (size_t)rank));
}

static const tagc_planner_report *report_of(const work *w, const char *id) {
  long i = index_at(&w->reports, id);
  return i < 0 ? NULL : &w->in->reports[i];
}

/* Whether member id left on purpose: with its registration of the current plan, or its live one. */
static int left(const work *w, const char *id) {
  const json_t *regs = json_object_get(w->in->plan, "registrations");
  json_int_t planned = json_integer_value(json_object_get(regs, id));
  return leaves(w, id, planned) || leaves(w, id, registered(w, id));
}

/* The death that leave record l (of in->leaving, or NULL) reports, or NULL. */
static const tagc_planner_death *death_of(const tagc_planner_input *in,
                                          const tagc_planner_worker *l) {
  const tagc_planner_death *d = l && in->deaths ? &in->deaths[l - in->leaving] : NULL;
  return d && d->died ? d : NULL;
}

/* Whether member id's process died (its supervisor's record): with its registration of the
 * current plan, or its live one. */
static int died(const work *w, const char *id) {
  const json_t *regs = json_object_get(w->in->plan, "registrations");
  json_int_t planned = json_integer_value(json_object_get(regs, id));
  return death_of(w->in, leave_record(w, id, planned)) ||
         death_of(w->in, leave_record(w, id, registered(w, id)));
}

/* Whether a member of the current plan died. */
static int a_member_died(const work *w) {
  for (size_t i = 0; w->members && i < json_array_size(w->members); i++)
    if (died(w, json_string_value(json_array_get(w->members, i))))
      return 1;
  return 0;
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
  json_t *e = json_pack("{s:I, s:s}", "registration", (json_int_t)alive(w, id), "why", why);
  if (!e || json_object_set_new(w->excluded, id, e) != 0)
    return tagc_errorf(TAGC_ENOMEM, "planner: exclusion");
  w->excluded_now++;
  w->excluded_alive += alive(w, id) >= 0;
  return bump(w->strikes, id);
}

/* Excludes a live member for a doubtful link (partition and fruitless rules), unless that
 * would leave fewer than min_workers eligible workers: then it stays and the next generation
 * tries again (the link may heal), rather than stalling the job. */
static tagc_status exclude_for_link(work *w, const char *id, const char *why) {
  int eligible = w->alive_workers - w->excluded_alive;
  if (eligible - 1 < w->cfg->min_workers) {
    note(w, "%s kept although %s: excluding it would leave fewer than %d workers", id, why,
         w->cfg->min_workers);
    return TAGC_OK;
  }
  return exclude(w, id, why);
}

/* Strikes of id before this decision. */
static json_int_t prior_strikes(const work *w, const char *id) {
  return json_integer_value(json_object_get(json_object_get(w->in->plan, "strikes"), id));
}

/* Which of two members goes when one side must: the one excluded more often before, else
 * the higher rank (the later joiner). */
static const char *loser_of(const work *w, const char *a, const char *b) {
  json_int_t sa = prior_strikes(w, a), sb = prior_strikes(w, b);
  if (sa != sb)
    return sa > sb ? a : b;
  return rank_of(w, a) > rank_of(w, b) ? a : b;
}

/* Checks the current plan's shape and copies what the next plan carries forward. */
static tagc_status load_plan(work *w) {
  const json_t *plan = w->in->plan;
  w->excluded = json_object();
  w->suspicion = json_array();
  const json_t *totals = plan ? json_object_get(plan, "failures_total") : NULL;
  const json_t *micro = plan ? json_object_get(plan, "micro_batch") : NULL;
  const json_t *strikes = plan ? json_object_get(plan, "strikes") : NULL;
  const json_t *deaths = plan ? json_object_get(plan, "quick_deaths") : NULL;
  w->deaths = json_is_object(deaths) ? json_deep_copy(deaths) : json_object();
  w->blame = json_object();
  w->totals = json_is_object(totals) ? json_deep_copy(totals) : json_object();
  w->micro = json_is_object(micro) ? json_deep_copy(micro) : json_object();
  w->strikes = json_is_object(strikes) ? json_deep_copy(strikes) : json_object();
  if (!w->excluded || !w->suspicion || !w->totals || !w->micro || !w->strikes || !w->blame ||
      !w->deaths)
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
    if (alive(w, id) < 0 || !continues(w, id, reg))
      continue;
    if (json_object_set(w->excluded, id, e) != 0)
      return tagc_errorf(TAGC_ENOMEM, "planner: exclusions");
    w->excluded_alive++;
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
  if (count >= 2 || prior_strikes(w, a) > 0 || prior_strikes(w, b) > 0) {
    char why[200];
    snprintf(why, sizeof why, "%s and %s accused each other in %lld generation(s) in a row", a,
             b, (long long)count);
    return exclude_for_link(w, loser_of(w, a, b), why);
  }
  note(w, "%s and %s suspect each other", a, b);
  const char *lo = strcmp(a, b) < 0 ? a : b, *hi = lo == a ? b : a;
  json_t *e = json_pack("{s:[s,s], s:I}", "pair", lo, hi, "count", count);
  if (!e || json_array_append_new(w->suspicion, e) != 0)
    return tagc_errorf(TAGC_ENOMEM, "planner: suspicion");
  return TAGC_OK;
}

/* The member at rank a report accuses (alive, not the reporter), or NULL. A suspect
 * registered again since the plan (a restarted process with the same id) is not accused: the
 * process the report is about is gone, and its successor joins. */
static const char *accused_at(const work *w, const tagc_planner_report *r, int rank) {
  const char *suspect = member_at(w, rank);
  if (rank_of(w, r->worker) < 0 || !suspect || !strcmp(suspect, r->worker) ||
      alive(w, suspect) < 0)
    return NULL;
  const json_t *reg = json_object_get(json_object_get(w->in->plan, "registrations"), suspect);
  if (json_is_integer(reg) && json_integer_value(reg) != alive(w, suspect))
    return NULL;
  return suspect;
}

/* The member a report accuses as its suspect (alive, not the reporter), or NULL. */
static const char *accusation(const work *w, const tagc_planner_report *r) {
  return accused_at(w, r, r->peer);
}

/* What accusation() says of report r (one of in->reports), as prepare() found it. */
static const char *accused(const work *w, const tagc_planner_report *r) {
  return member_at(w, w->accused_rank[r - w->in->reports]);
}

/* Builds the indexes of the input and what each report accuses (after load_plan). */
static tagc_status prepare(work *w) {
  const tagc_planner_input *in = w->in;
  size_t nm = w->members ? json_array_size(w->members) : 0;
  TAGC_CHECK(index_alloc(&w->workers, in->n_workers));
  TAGC_CHECK(index_alloc(&w->leaving, in->n_leaving));
  TAGC_CHECK(index_alloc(&w->reports, in->n_reports));
  TAGC_CHECK(index_alloc(&w->ranks, nm));
  for (size_t i = 0; i < in->n_workers; i++)
    w->workers.e[i] = (id_entry){in->workers[i].id, i};
  for (size_t i = 0; i < in->n_leaving; i++)
    w->leaving.e[i] = (id_entry){in->leaving[i].id, i};
  for (size_t i = 0; i < in->n_reports; i++)
    w->reports.e[i] = (id_entry){in->reports[i].worker, i};
  for (size_t i = 0; i < nm; i++)
    w->ranks.e[i] = (id_entry){member_at(w, (int)i), i};
  index_sort(&w->workers, in->n_workers);
  index_sort(&w->leaving, in->n_leaving);
  index_sort(&w->reports, in->n_reports);
  index_sort(&w->ranks, nm);
  w->accused_rank = calloc(in->n_reports + 1, sizeof *w->accused_rank);
  w->accusers = calloc(nm + 1, sizeof *w->accusers);
  if (!w->accused_rank || !w->accusers)
    return tagc_errorf(TAGC_ENOMEM, "planner: accusations");
  for (size_t i = 0; i < in->n_reports; i++) {
    const char *s = accusation(w, &in->reports[i]);
    w->accused_rank[i] = s ? rank_of(w, s) : -1;
    if (s)
      w->accusers[w->accused_rank[i]]++;
  }
  for (size_t i = 0; i < in->n_workers; i++)
    w->alive_workers += alive(w, in->workers[i].id) >= 0;
  return TAGC_OK;
}

/* A report's broken links: its "peers" (a JSON array; NULL when none). */
static const json_t *broken_of(const work *w, const tagc_planner_report *r) {
  const json_t *peers = json_object_get(json_object_get(w->in->failures, r->worker), "peers");
  return json_is_array(peers) ? peers : NULL;
}

/* The rank at index i of a report's broken links, or -1. */
static int broken_rank(const work *w, const tagc_planner_report *r, size_t i) {
  const json_t *v = json_array_get(broken_of(w, r), i);
  return json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < INT32_MAX
             ? (int)json_integer_value(v)
             : -1;
}

/* Whether report r names member id: as its suspect or among its broken links. */
static int names(const work *w, const tagc_planner_report *r, const char *id) {
  const char *s = accused(w, r);
  for (size_t i = 0; !(s && !strcmp(s, id)) && i < json_array_size(broken_of(w, r)); i++)
    s = accused_at(w, r, broken_rank(w, r, i));
  return s && !strcmp(s, id);
}

/* Reports of this generation that accuse member id (one report per worker: distinct). */
static int accusers(const work *w, const char *id) {
  int rank = rank_of(w, id);
  return rank < 0 ? 0 : w->accusers[rank];
}

/* Whether member id reported nothing and every other member still in the job that reported
 * (at least two; their number in *reporters) named it, as its suspect or a broken link. */
static int named_by_reporters(const work *w, const char *id, int *reporters) {
  int named = 0;
  if (report_of(w, id))
    return 0;
  for (size_t i = 0; i < json_array_size(w->members); i++) {
    const char *m = member_at(w, (int)i);
    if (!strcmp(m, id) || alive(w, m) < 0 || left(w, m))
      continue;
    const tagc_planner_report *r = report_of(w, m);
    if (r && !names(w, r, id))
      return 0;
    named += r != NULL;
  }
  *reporters = named;
  return named >= 2;
}

/* Whether member id went silent for all the others (hung, stopped or dead) rather than
 * sitting on one side of a doubtful link: id reported nothing, every other member still in the
 * job (at least two) reported naming it, or went silent the same way (every member that
 * reported named it too), and those that reported outnumber those that went silent; *silent
 * gets the number of those (id included). Workers killed together are each named by every
 * survivor: the dead peer a survivor's collective failed on is its suspect, the others are
 * among its report's broken links ("peers"), so all of them are excluded at once, without a
 * suspect window each or waiting for their leases. A member that is alive and blocked in a
 * collective passes its deadline no later than the peers that wait on it, so its own report
 * normally comes with theirs (then the mutual rule applies); should it come late, id is still
 * one end of each failing link, the member the link rules would exclude a generation later. So
 * the suspect window is not needed to tell it apart; with one accuser (two members) it is. */
static int silenced(const work *w, const char *id, int *reporters, int *silent) {
  *silent = 1;
  if (!named_by_reporters(w, id, reporters))
    return 0;
  for (size_t i = 0; i < json_array_size(w->members); i++) {
    const char *m = member_at(w, (int)i);
    int ignored;
    if (!strcmp(m, id) || alive(w, m) < 0 || left(w, m) || report_of(w, m))
      continue;
    if (!named_by_reporters(w, m, &ignored))
      return 0;
    ++*silent;
  }
  return *reporters > *silent;
}

/* The reason silenced() gives for excluding a member. */
static void silenced_why(char *why, size_t cap, int reporters, int silent) {
  if (silent == 1)
    snprintf(why, cap, "all %d other members reported it and it did not report", reporters);
  else
    snprintf(why, cap, "all %d members that reported named it and the %d other members that "
             "did not report", reporters, silent - 1);
}

/* The kind a report counts as: "crash" when it blames the link to a member whose process
 * died (its supervisor's record), whatever the reporter could tell of it (a restarted process
 * under the same id looks alive: "partition"); else its own. */
static const char *counted_kind(const work *w, const tagc_planner_report *r) {
  tagc_failure_kind k = tagc_failure_kind_parse(r->kind);
  const char *peer = member_at(w, r->peer);
  int link = k == TAGC_FAIL_PARTITION || k == TAGC_FAIL_COMM || k == TAGC_FAIL_TIMEOUT ||
             k == TAGC_FAIL_HANG;
  if (link && peer && died(w, peer))
    return tagc_failure_kind_name(TAGC_FAIL_CRASH);
  return r->kind;
}

/* A straggler report (--exclude-straggler) names a member persistently slower than the others,
 * alive and training: it is excluded at once, unless that would leave fewer than min_workers;
 * then the report is set aside and the job goes on at the straggler's pace, without a new
 * generation for it. */
static tagc_status straggler(work *w, const tagc_planner_report *r) {
  const char *slow = accused(w, r);
  if (!slow) {
    note(w, "%s reported a straggler that is no member", r->worker);
    w->set_aside++;
    return TAGC_OK;
  }
  char why[200];
  snprintf(why, sizeof why, "a straggler, reported by %s at step %" PRId64, r->worker, r->step);
  TAGC_CHECK(exclude_for_link(w, slow, why));
  if (!excluded(w, slow))
    w->set_aside++;
  return TAGC_OK;
}

/* One failure report: counts it, applies oom, straggler and suspicion rules. */
static tagc_status apply_report(work *w, const tagc_planner_report *r) {
  TAGC_CHECK(bump(w->totals, counted_kind(w, r)));
  if (rank_of(w, r->worker) < 0) {
    note(w, "%s (not a member) reported %s", r->worker, r->kind);
    return TAGC_OK;
  }
  note(w, "%s reported %s at step %" PRId64, r->worker, r->kind, r->step);
  if (tagc_failure_kind_parse(r->kind) == TAGC_FAIL_OOM)
    TAGC_CHECK(out_of_memory(w, r->worker));
  if (tagc_failure_kind_parse(r->kind) == TAGC_FAIL_STRAGGLER)
    return straggler(w, r);
  const char *suspect = accused(w, r);
  if (!suspect || excluded(w, suspect))
    return TAGC_OK;
  const tagc_planner_report *theirs = report_of(w, suspect);
  if (theirs) {
    /* A suspect that reported too is alive. Only when it accuses the reporter back is their
       link in doubt; when it accuses another member, this report is collateral (a peer that
       aborts on its own failure closes its connections, and the reporter names it for the
       reset), and the member the suspect names answers for both. */
    const char *back = accused(w, theirs);
    if (back && !strcmp(back, r->worker))
      return mutual(w, r->worker, suspect);
    note(w, "%s named %s, which reported %s naming %s", r->worker, suspect, theirs->kind,
         back ? back : "no member");
    return TAGC_OK;
  }
  int reporters, silent;
  if (silenced(w, suspect, &reporters, &silent)) {
    char why[200];
    silenced_why(why, sizeof why, reporters, silent);
    return exclude(w, suspect, why);
  }
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

/* The members among a report's broken links that went silent with its suspect (silenced)
 * are excluded at once too. */
static tagc_status apply_broken(work *w, const tagc_planner_report *r) {
  if (rank_of(w, r->worker) < 0 || tagc_failure_kind_parse(r->kind) == TAGC_FAIL_STRAGGLER)
    return TAGC_OK;
  for (size_t i = 0; i < json_array_size(broken_of(w, r)); i++) {
    const char *id = accused_at(w, r, broken_rank(w, r, i));
    int reporters, silent;
    if (id && !excluded(w, id) && silenced(w, id, &reporters, &silent)) {
      char why[200];
      silenced_why(why, sizeof why, reporters, silent);
      TAGC_CHECK(exclude(w, id, why));
    }
  }
  return TAGC_OK;
}

/* Whether the generation failed before completing a step: reports exist and none got past
 * the plan's resume step (a worker whose bootstrap failed reports step 0). */
static int failed_before_first_step(const work *w) {
  const json_t *resume = json_object_get(json_object_get(w->in->plan, "resume"), "step");
  for (size_t i = 0; i < w->in->n_reports; i++) {
    if (w->in->reports[i].step > json_integer_value(resume))
      return 0;
  }
  return w->in->n_reports > 0;
}

/* The accusation graph of a generation that failed before its first step — in practice in
 * the bootstrap, where every rank connects to each peer on its own and names a rank it could
 * not reach: a member that at least two others and a strict majority of the others could not
 * reach is cut off from them (a partition where the rest still reach each other) or dead; it
 * is excluded at once. At most one member per generation: the most accused, then loser_of(),
 * so of two halves of a split one side goes at a time. Once collectives run, ranks wait on
 * each other in chains (a rank blocked on the cut-off one stops feeding the next), so later
 * accusations are left to the pairwise rule. */
static tagc_status majority(work *w) {
  int others = (int)json_array_size(w->members) - 1, best_n = 0;
  const char *best = NULL;
  if (!failed_before_first_step(w))
    return TAGC_OK;
  for (int rank = 0; rank <= others; rank++) {
    const char *id = member_at(w, rank);
    int n = accusers(w, id);
    if (n < 2 || 2 * n <= others || alive(w, id) < 0 || excluded(w, id))
      continue;
    if (!best || n > best_n || (n == best_n && loser_of(w, best, id) == id)) {
      best = id;
      best_n = n;
    }
  }
  if (!best)
    return TAGC_OK;
  char why[200];
  snprintf(why, sizeof why, "%d of the other %d members could not reach it", best_n, others);
  return exclude_for_link(w, best, why);
}

/* Whether the current generation failed without completing a step: reports exist, none is an
 * oom (which the next plan answers), none got past the plan's resume step, and this decision
 * excluded nobody. */
static int fruitless_now(const work *w) {
  if (!failed_before_first_step(w) || w->excluded_now > 0)
    return 0;
  for (size_t i = 0; i < w->in->n_reports; i++) {
    if (tagc_failure_kind_parse(w->in->reports[i].kind) == TAGC_FAIL_OOM)
      return 0;
  }
  return 1;
}

/* The fruitless rule, a backstop for failures that name no peer (or name them so that no
 * other rule decides): blame (accusations of every kind) adds up over fruitless generations
 * in a row; at the FRUITLESS_LIMIT-th the most blamed member is excluded (ties: loser_of()),
 * so the planner never makes failing generations without end while it may still exclude. */
static tagc_status fruitless(work *w) {
  const json_t *prev = json_object_get(w->in->plan, "fruitless");
  if (!fruitless_now(w))
    return TAGC_OK;
  w->fruitless = json_integer_value(json_object_get(prev, "gens")) + 1;
  const json_t *old = json_object_get(prev, "blame");
  const char *id;
  json_t *v;
  json_object_foreach((json_t *)old, id, v) {
    if (rank_of(w, id) >= 0 && json_object_set(w->blame, id, v) != 0)
      return tagc_errorf(TAGC_ENOMEM, "planner: blame");
  }
  for (size_t i = 0; i < w->in->n_reports; i++) {
    const char *s = accused(w, &w->in->reports[i]);
    if (s)
      TAGC_CHECK(bump(w->blame, s));
  }
  if (w->fruitless < FRUITLESS_LIMIT)
    return TAGC_OK;
  const char *worst = NULL;
  for (size_t rank = 0; rank < json_array_size(w->members); rank++) {
    const char *m = member_at(w, (int)rank);
    if (alive(w, m) < 0)
      continue;
    json_int_t b = json_integer_value(json_object_get(w->blame, m));
    json_int_t wb = worst ? json_integer_value(json_object_get(w->blame, worst)) : -1;
    if (b > wb || (b == wb && loser_of(w, worst, m) == m))
      worst = m;
  }
  if (!worst)
    return TAGC_OK;
  char why[200];
  snprintf(why, sizeof why, "most blamed (%lld) after %lld failed generations without a step",
           (long long)json_integer_value(json_object_get(w->blame, worst)),
           (long long)w->fruitless);
  TAGC_CHECK(exclude_for_link(w, worst, why));
  if (w->excluded_now > 0) { /* a new streak starts */
    w->fruitless = 0;
    json_object_clear(w->blame);
  }
  return TAGC_OK;
}

/* Counts the deaths of the leave records not counted yet (a registration newer than the
 * last one counted): a quick one adds 1, a longer-lived one starts over. */
static tagc_status count_deaths(work *w) {
  for (size_t i = 0; i < w->in->n_leaving; i++) {
    const tagc_planner_worker *l = &w->in->leaving[i];
    const tagc_planner_death *death = death_of(w->in, l);
    json_t *d = json_object_get(w->deaths, l->id);
    if (!death || json_integer_value(json_object_get(d, "registration")) >= l->registration)
      continue;
    json_int_t n = death->uptime_s < TAGC_QUICK_DEATH_S
                       ? json_integer_value(json_object_get(d, "count")) + 1 : 0;
    json_t *e = json_pack("{s:I, s:I}", "count", n, "registration", (json_int_t)l->registration);
    if (!e || json_object_set_new(w->deaths, l->id, e) != 0)
      return tagc_errorf(TAGC_ENOMEM, "planner: quick deaths");
  }
  return TAGC_OK;
}

/* Whether joiner in->workers[worker] is on probation for its quick deaths (n >= 2: until
 * TAGC_PROBATION_FIRST_S * 2^(n-2), at most TAGC_PROBATION_MAX_S, after its registration was
 * first seen); notes it and keeps the earliest end in w->wake. */
static int on_probation(work *w, size_t worker) {
  const tagc_planner_worker *j = &w->in->workers[worker];
  json_int_t n = json_integer_value(json_object_get(json_object_get(w->deaths, j->id), "count"));
  if (n < 2)
    return 0;
  double p = TAGC_PROBATION_FIRST_S;
  for (json_int_t k = 2; k < n && p < TAGC_PROBATION_MAX_S; k++)
    p *= 2;
  if (p > TAGC_PROBATION_MAX_S)
    p = TAGC_PROBATION_MAX_S;
  double until = (w->in->seen_at ? w->in->seen_at[worker] : 0) + p;
  if (w->in->now >= until)
    return 0;
  note(w, "%s on probation for %.1f s more (%lld quick deaths: %.0f s)", j->id,
       until - w->in->now, (long long)n, p);
  if (w->wake == 0 || until < w->wake)
    w->wake = until;
  return 1;
}

/* Whether the decision accounts for every member of the current plan: each one reported in
 * this generation, is gone (lease, left) or is excluded by it. Then no report that a settle
 * window would batch is still to come. */
static int accounted(const work *w) {
  if (!w->members || w->in->n_reports == 0)
    return 0;
  for (size_t i = 0; i < json_array_size(w->members); i++) {
    const char *id = member_at(w, (int)i);
    if (!report_of(w, id) && alive(w, id) >= 0 && !left(w, id) && !excluded(w, id))
      return 0;
  }
  return 1;
}

static int by_id(const void *a, const void *b) {
  return strcmp((*(const tagc_planner_worker *const *)a)->id,
                (*(const tagc_planner_worker *const *)b)->id);
}

/* The next member list: survivors in order, then joiners by id, at most max_workers. Notes
 * members that left (not counted), lost members (counted as "lease" failures) and
 * re-registrations; *changed tells whether anything differs from the current plan. */
static tagc_status next_members(work *w, json_t *members, int *changed) {
  const json_t *regs = json_object_get(w->in->plan, "registrations");
  size_t nm = w->members ? json_array_size(w->members) : 0;
  unsigned char *kept = calloc(nm + 1, 1); /* [rank of an id's first place]: kept above */
  if (!kept)
    return tagc_errorf(TAGC_ENOMEM, "planner: members");
  for (size_t i = 0; i < nm; i++) {
    const char *id = json_string_value(json_array_get(w->members, i));
    int64_t reg = alive(w, id);
    if (died(w, id)) {
      note(w, "lost %s (crashed, seen by its supervisor)", id);
      TAGC_CHECK(bump(w->totals, tagc_failure_kind_name(TAGC_FAIL_CRASH)));
      *changed = 1;
    } else if (left(w, id)) {
      note(w, "%s left", id);
      *changed = 1;
    } else if (reg < 0) {
      note(w, "lost %s (lease expired)", id);
      TAGC_CHECK(bump(w->totals, tagc_failure_kind_name(TAGC_FAIL_LEASE)));
      *changed = 1;
    } else if (excluded(w, id)) {
      *changed = 1;
    } else {
      if (!continues(w, id, json_integer_value(json_object_get(regs, id)))) {
        note(w, "%s registered again", id);
        *changed = 1;
      }
      kept[rank_of(w, id)] = 1;
      if (json_array_append_new(members, json_string(id)) != 0) {
        free(kept);
        return tagc_errorf(TAGC_ENOMEM, "planner: members");
      }
    }
  }
  const tagc_planner_worker **joiners = calloc(w->in->n_workers + 1, sizeof *joiners);
  if (!joiners) {
    free(kept);
    return tagc_errorf(TAGC_ENOMEM, "planner: joiners");
  }
  size_t n = 0;
  for (size_t i = 0; i < w->in->n_workers; i++) {
    const char *id = w->in->workers[i].id;
    int rank = rank_of(w, id);
    /* not kept above: a new worker, or a member whose planned registration died or left
     * and that registered again (it joins after the survivors) */
    if (!(rank >= 0 && kept[rank]) && !excluded(w, id) && alive(w, id) >= 0 &&
        !on_probation(w, i))
      joiners[n++] = &w->in->workers[i];
  }
  free(kept);
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

/* The resume point from the committed checkpoint record (its manifest's CRC32C too, when
 * the record has one, so that the ranks can check they load that very checkpoint). */
static json_t *resume_of(const json_t *ckpt) {
  int64_t step = 0, crc = 0;
  const char *path = NULL;
  if (ckpt && tagc_json_get_int(ckpt, "step", &step) == TAGC_OK && step > 0)
    path = json_string_value(json_object_get(ckpt, "path"));
  if (!path)
    step = 0;
  json_t *resume = json_pack("{s:I, s:s?}", "step", (json_int_t)step, "path", path);
  if (resume && path && tagc_json_get_int(ckpt, "manifest_crc", &crc) == TAGC_OK && crc > 0 &&
      json_object_set_new(resume, "manifest_crc", json_integer(crc)) != 0) {
    json_decref(resume);
    return NULL;
  }
  return resume;
}

static tagc_status build_plan(work *w, json_t *members, json_t **out) {
  json_t *micro = json_object(), *regs = json_object();
  size_t i;
  json_t *m;
  json_array_foreach(members, i, m) {
    const char *id = json_string_value(m);
    json_int_t mb = json_integer_value(json_object_get(w->micro, id));
    if (!micro || !regs || json_object_set_new(micro, id, json_integer(mb)) != 0 ||
        json_object_set_new(regs, id, json_integer(alive(w, id))) != 0)
      break;
  }
  json_t *fruitless = json_pack("{s:I, s:O}", "gens", w->fruitless, "blame", w->blame);
  json_t *plan = json_pack("{s:I, s:i, s:O, s:o, s:o, s:o, s:O, s:O, s:O, s:O, s:o, s:O, s:s}",
                           "gen",
                           (json_int_t)(w->gen + 1), "world", (int)json_array_size(members),
                           "members", members, "resume", resume_of(w->in->ckpt), "micro_batch",
                           micro, "registrations", regs, "excluded", w->excluded, "suspicion",
                           w->suspicion, "failures_total", w->totals, "strikes", w->strikes,
                           "fruitless", fruitless, "quick_deaths", w->deaths, "reason",
                           w->out->reason);
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
  TAGC_CHECK(prepare(w));
  TAGC_CHECK(carry_exclusions(w));
  TAGC_CHECK(count_deaths(w));
  if (w->members)
    TAGC_CHECK(majority(w));
  for (size_t i = 0; w->members && i < w->in->n_reports; i++)
    TAGC_CHECK(apply_report(w, &w->in->reports[i]));
  for (size_t i = 0; w->members && i < w->in->n_reports; i++)
    TAGC_CHECK(apply_broken(w, &w->in->reports[i]));
  if (w->pending > 0) {
    w->out->action = TAGC_PLANNER_WAIT;
    w->out->wait_until = w->pending;
    note(w, "waiting for a suspect to report");
    return TAGC_OK;
  }
  if (w->members && w->in->n_reports == 0 && w->in->now < w->cfg->lost_grace_until) {
    int gone = 0; /* members whose lease is gone, who may register again in the grace */
    for (size_t i = 0; i < json_array_size(w->members); i++) {
      const char *id = json_string_value(json_array_get(w->members, i));
      gone += !left(w, id) && alive(w, id) < 0;
    }
    if (gone) {
      w->out->action = TAGC_PLANNER_WAIT;
      w->out->wait_until = w->cfg->lost_grace_until;
      note(w, "lease-loss grace: %d members without a lease may register again within %.1f s",
           gone, w->cfg->lost_grace_until - w->in->now);
      return TAGC_OK;
    }
  }
  if (w->members)
    TAGC_CHECK(fruitless(w));
  int changed = !w->members || w->in->n_reports > w->set_aside;
  json_t *members = json_array();
  if (!members)
    return tagc_errorf(TAGC_ENOMEM, "planner: members");
  tagc_status st = next_members(w, members, &changed);
  if (!json_equal(members, w->members)) { /* another world: a new streak */
    w->fruitless = 0;
    json_object_clear(w->blame);
  }
  if (st == TAGC_OK && !changed) {
    w->out->action = TAGC_PLANNER_KEEP;
    if (w->wake == 0) { /* else the reason says who is on probation */
      w->out->reason[0] = '\0';
      note(w, "no change");
    }
  } else if (st == TAGC_OK && json_array_size(members) < (size_t)w->cfg->min_workers) {
    w->out->action = TAGC_PLANNER_STALLED;
    note(w, "%zu eligible workers, need %d", json_array_size(members), w->cfg->min_workers);
  } else if (st == TAGC_OK && !w->members && json_array_size(members) < (size_t)w->cfg->start_workers &&
             w->in->now < w->cfg->start_deadline) { /* the expected workers are still starting */
    w->out->action = TAGC_PLANNER_WAIT;
    w->out->wait_until = w->cfg->start_deadline;
    note(w, "first generation: %zu of %d expected workers, waiting for the rest up to %.0f s",
         json_array_size(members), w->cfg->start_workers, w->cfg->start_deadline - w->in->now);
  } else if (st == TAGC_OK) {
    if (!w->members)
      note(w, "first generation");
    w->out->action = TAGC_PLANNER_NEW;
    w->out->settled = accounted(w) || a_member_died(w);
    st = build_plan(w, members, &w->out->plan);
  }
  if (w->out->action != TAGC_PLANNER_WAIT)
    w->out->wake_at = w->wake;
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
  json_decref(w.blame);
  json_decref(w.deaths);
  free(w.workers.e);
  free(w.leaving.e);
  free(w.reports.e);
  free(w.ranks.e);
  free(w.accused_rank);
  free(w.accusers);
  if (st != TAGC_OK)
    tagc_planner_decision_free(out);
  return st;
}

void tagc_planner_decision_free(tagc_planner_decision *d) {
  json_decref(d->plan);
  d->plan = NULL;
}
