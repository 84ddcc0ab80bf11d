/* member_sim: M simulated members of a tagc job against a real etcd and a real
 * tagc-coordinator, to measure what grows with M (docs/scaling-membership.md).
 *
 * Each member does in etcd what a worker's cluster/member.c does, with the same keys
 * (cluster/keys.h) and values: a lease of the worker TTL, workers/<id> created only if absent
 * under it, renewals every TTL/3, a read of chaos/<id> about once a second, ready/<rank> under
 * its lease once it is in a generation, and rank 0's progress record once a second. No
 * training, and far fewer threads than M workers would run: a pool of --threads threads
 * shares the members (member i on thread i % threads) for the renewals, chaos reads and ready
 * writes, and one watch of `gen` serves every member (a follower thread reads the plan of each
 * new generation once).
 *
 * Schedule (seeded): after a generation holds 99 % of the M members and a steady-state window
 * has been measured, one member dies (its renewals stop, so its lease expires a TTL after the
 * last one), then 1 % of the members die within one second, then one member leaves
 * (leaving/<id>, as on SIGTERM, then its lease is revoked once the generation without it
 * exists). Dead members stay dead.
 *
 * Prints one JSON object on stdout: registration time, steady-state requests and body bytes
 * per second per member (this process's etcd client, cluster/etcd_stats.h; the one gen watch
 * stream is not counted), lease losses, from each death's lease expiry (last renewal sent +
 * granted TTL) to the generation without it as seen by the watch, the generations published
 * for the batch, and the coordinator's CPU seconds and memory from /proc/<pid>. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cluster/etcd.h"
#include "cluster/etcd_stats.h"
#include "cluster/keys.h"
#include "common/json.h"
#include "common/log.h"
#include "common/options.h"
#include "common/timeutil.h"

typedef struct sim_options {
  char *etcd;
  char *job;
  int64_t members;
  int64_t threads;
  double ttl;
  double chaos_poll;
  double steady;
  int64_t seed;
  int64_t coord_pid;
  double event_timeout;
  int reports;
  char *log;
} sim_options;

#define OFF(f) offsetof(sim_options, f)

static const tagc_opt sim_opts[] = {
    {"etcd", TAGC_OPT_STRING, OFF(etcd), "http://127.0.0.1:2379", 0, -1, NULL, "etcd client URL"},
    {"job", TAGC_OPT_STRING, OFF(job), "sim", 0, -1, NULL, "job id"},
    {"members", TAGC_OPT_INT, OFF(members), "100", 2, 100000, NULL, "simulated members M"},
    {"threads", TAGC_OPT_INT, OFF(threads), "8", 1, 64, NULL,
     "threads sharing the members' renewals, chaos reads and ready writes"},
    {"ttl", TAGC_OPT_DOUBLE, OFF(ttl), "3", 1, 600, NULL, "lease TTL (the worker's --lease-ttl)"},
    {"chaos-poll", TAGC_OPT_DOUBLE, OFF(chaos_poll), "1", 0, 600, NULL,
     "seconds between a member's reads of chaos/<id> (a worker: 1; 0: none)"},
    {"steady", TAGC_OPT_DOUBLE, OFF(steady), "15", 1, 600, NULL,
     "seconds of the steady-state window"},
    {"seed", TAGC_OPT_INT, OFF(seed), "1", 0, 1e9, NULL, "seed of the schedule"},
    {"coord-pid", TAGC_OPT_INT, OFF(coord_pid), "0", 0, 1e9, NULL,
     "the coordinator's pid, for its CPU time and memory (0: not measured)"},
    {"event-timeout", TAGC_OPT_DOUBLE, OFF(event_timeout), "60", 1, 600, NULL,
     "longest wait for a generation after an event"},
    {"reports", TAGC_OPT_BOOL, OFF(reports), "0", 0, -1, NULL,
     "at each death every other member of the generation reports \"comm\" naming the dead "
     "rank, as peers that see the connection break do"},
    {"log", TAGC_OPT_STRING, OFF(log), "warn", 0, -1, NULL, "log filter"},
};

static const tagc_opt_program sim_program = {
    "member_sim", "[options]",
    "Simulates M members of a tagc job (leases, registrations, renewals, chaos reads, ready "
    "keys, progress, one shared gen watch) against etcd and a running tagc-coordinator; kills "
    "and removes members on a seeded schedule and prints the measured figures as JSON.",
    sim_opts, sizeof sim_opts / sizeof sim_opts[0]};

/* One simulated member. The pool thread that owns it is the only writer of its fields but
 * `dead`, `leaving` and `planned_*`. */
typedef struct member {
  char id[24];
  char worker_key[TAGC_KEY_MAX];
  char chaos_key[TAGC_KEY_MAX];
  int64_t lease;
  int64_t registration;
  int64_t ttl;                      /* granted */
  double next_renew, next_chaos;
  atomic_int dead;                  /* renewals stopped */
  _Atomic double last_renew;        /* when the last successful renewal was sent */
  atomic_int_least64_t planned_gen; /* newest generation that lists it, with its rank */
  atomic_int planned_rank;
  int64_t ready_gen;                /* newest generation it wrote ready for */
  atomic_int_least64_t report_gen;  /* --reports: report a failure of this generation ... */
  atomic_int report_peer;           /* ... naming this rank */
  int64_t reported_gen;             /* newest generation it reported a failure of */
} member;

/* A generation as the follower saw it. */
typedef struct seen_gen {
  int64_t gen;
  double at;                        /* tagc_now() when the watch reported it */
  int world;
  unsigned char *in;                /* in[i]: member i is in the plan */
} seen_gen;

typedef struct sim {
  sim_options o;
  tagc_etcd *pool_etcd, *main_etcd; /* the pool threads' client; the others' */
  member *m;
  size_t n;
  atomic_int stop;
  atomic_int registered;
  atomic_int_least64_t lease_losses, renew_errors, ready_writes;

  pthread_mutex_t lock;             /* guards gens and latest, signals `changed` */
  pthread_cond_t changed;
  seen_gen *gens;
  size_t n_gens, cap_gens;
  int64_t latest;                   /* newest gen reported by the watch */
  double latest_at;
} sim;

/* ---- registration, as cluster/member.c does it ---- */

static tagc_status member_value(const sim *s, const member *mb, int64_t previous, char **out) {
  json_t *v = json_pack("{s:s, s:i, s:s, s:s, s:i, s:s, s:s, s:f}", "host", "sim", "pid",
                        (int)getpid(), "device", "cpu", "comm", "127.0.0.1:0", "capacity", 1,
                        "state", "simulated", "id", mb->id, "registered_at", tagc_wall_time());
  if (v && previous > 0)
    json_object_set_new(v, "previous", json_pack("[I]", (json_int_t)previous));
  *out = v ? tagc_json_dump(v) : NULL;
  json_decref(v);
  (void)s;
  return *out ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "member value");
}

/* Grants a lease and creates workers/<id> under it if absent; previous > 0 names the
 * registration a re-registration continues after a lost lease. */
static tagc_status register_member(sim *s, member *mb, int64_t previous) {
  TAGC_CHECK(tagc_etcd_lease_grant(s->pool_etcd, (int64_t)(s->o.ttl + 0.5), &mb->lease, &mb->ttl));
  char *value;
  TAGC_CHECK(member_value(s, mb, previous, &value));
  tagc_etcd_compare absent = {.key = mb->worker_key, .target = TAGC_ETCD_CREATE,
                              .result = TAGC_ETCD_EQUAL};
  tagc_etcd_op put = {.type = TAGC_ETCD_OP_PUT, .key = mb->worker_key, .value = value,
                      .value_len = strlen(value), .lease = mb->lease};
  tagc_etcd_txn_result t;
  double sent = tagc_now();
  tagc_status st = tagc_etcd_txn(s->pool_etcd, &absent, 1, &put, 1, NULL, 0, &t);
  free(value);
  TAGC_CHECK(st);
  int ok = t.succeeded;
  mb->registration = t.revision;
  tagc_etcd_txn_result_free(&t);
  if (!ok)
    return tagc_errorf(TAGC_ECONFLICT, "%s is registered already (another run of the job?)",
                       mb->worker_key);
  atomic_store(&mb->last_renew, sent);
  mb->next_renew = sent + (double)mb->ttl / 3;
  return TAGC_OK;
}

/* ---- the pool threads ---- */

typedef struct pool_arg {
  sim *s;
  size_t first;
} pool_arg;

static void renew(sim *s, member *mb, double now) {
  tagc_status st = tagc_etcd_lease_keepalive(s->pool_etcd, mb->lease, NULL);
  if (st == TAGC_OK) {
    atomic_store(&mb->last_renew, now);
    mb->next_renew = now + (double)mb->ttl / 3;
    return;
  }
  if (st != TAGC_ENOTFOUND) { /* the patient keeper retries every min(TTL/10, 1 s) */
    atomic_fetch_add(&s->renew_errors, 1);
    mb->next_renew = now + ((double)mb->ttl / 10 < 1 ? (double)mb->ttl / 10 : 1);
    return;
  }
  atomic_fetch_add(&s->lease_losses, 1);
  if (register_member(s, mb, mb->registration) != TAGC_OK) {
    atomic_fetch_add(&s->renew_errors, 1);
    mb->next_renew = now + (double)mb->ttl / 4;
  }
}

static void write_ready(sim *s, member *mb) {
  int64_t g = atomic_load(&mb->planned_gen);
  int rank = atomic_load(&mb->planned_rank);
  char key[TAGC_KEY_MAX];
  if (tagc_key_gen_ready(s->o.job, g, rank, key, sizeof key) != TAGC_OK)
    return;
  json_t *rec = json_pack("{s:s, s:f}", "id", mb->id, "time", tagc_wall_time());
  char *text = rec ? tagc_json_dump(rec) : NULL;
  json_decref(rec);
  if (text && tagc_etcd_put(s->pool_etcd, key, text, strlen(text), mb->lease, NULL) == TAGC_OK)
    atomic_fetch_add(&s->ready_writes, 1);
  free(text);
  mb->ready_gen = g;
}

/* failures/<g>/<id> as tagc_member_report_failure writes it. */
static void write_report(sim *s, member *mb) {
  int64_t g = atomic_load(&mb->report_gen);
  char key[TAGC_KEY_MAX];
  mb->reported_gen = g;
  if (tagc_key_failure(s->o.job, g, mb->id, key, sizeof key) != TAGC_OK)
    return;
  json_t *rec = json_pack("{s:s, s:I, s:i, s:s, s:f}", "kind", "comm", "step", (json_int_t)1000,
                          "peer", atomic_load(&mb->report_peer), "detail", "simulated",
                          "time", tagc_wall_time());
  char *text = rec ? tagc_json_dump(rec) : NULL;
  json_decref(rec);
  if (text)
    tagc_etcd_put(s->pool_etcd, key, text, strlen(text), 0, NULL);
  free(text);
}

/* One pass over the thread's members: renewals first, then ready writes and chaos reads.
 * Returns the earliest time something is due next. */
static double pass(sim *s, size_t first) {
  size_t step = (size_t)s->o.threads;
  double now = tagc_now(), next = now + 0.05;
  for (size_t i = first; i < s->n; i += step) {
    member *mb = &s->m[i];
    if (!mb->lease || atomic_load(&mb->dead))
      continue;
    if (now >= mb->next_renew)
      renew(s, mb, now = tagc_now());
    if (mb->next_renew < next)
      next = mb->next_renew;
  }
  for (size_t i = first; i < s->n; i += step) {
    member *mb = &s->m[i];
    if (!mb->lease || atomic_load(&mb->dead))
      continue;
    if (atomic_load(&mb->report_gen) > mb->reported_gen)
      write_report(s, mb);
    if (atomic_load(&mb->planned_gen) > mb->ready_gen)
      write_ready(s, mb);
    if (s->o.chaos_poll > 0 && tagc_now() >= mb->next_chaos) {
      char *spec = NULL;
      size_t len;
      if (tagc_etcd_get_within(s->pool_etcd, mb->chaos_key, 0.5, &spec, &len) == TAGC_OK)
        free(spec);
      mb->next_chaos = tagc_now() + s->o.chaos_poll;
    }
  }
  return next;
}

static void *pool_main(void *arg) {
  pool_arg *pa = arg;
  sim *s = pa->s;
  size_t step = (size_t)s->o.threads;
  size_t mine = 0;
  for (size_t i = pa->first; i < s->n && !atomic_load(&s->stop); i += step) {
    tagc_status st = register_member(s, &s->m[i], 0);
    if (st != TAGC_OK) {
      fprintf(stderr, "member_sim: registering %s: %s\n", s->m[i].id, tagc_last_error());
      atomic_store(&s->stop, 2);
    }
    atomic_fetch_add(&s->registered, 1);
    if (++mine % 16 == 0) /* the first leases must not expire while the rest register */
      pass(s, pa->first);
  }
  while (!atomic_load(&s->stop)) {
    double next = pass(s, pa->first), now = tagc_now();
    if (next > now)
      tagc_sleep(next - now < 0.05 ? next - now : 0.05);
  }
  return NULL;
}

/* ---- following the generations: one watch of `gen`, one plan read per generation ---- */

static int64_t parse_gen(const unsigned char *v, size_t len) {
  char buf[32];
  if (len == 0 || len >= sizeof buf)
    return -1;
  memcpy(buf, v, len);
  buf[len] = '\0';
  return strtoll(buf, NULL, 10);
}

static int on_gen(void *arg, const tagc_etcd_watch_msg *msg) {
  sim *s = arg;
  int64_t g = -1;
  if (msg->kind == TAGC_ETCD_WATCH_RESYNC && msg->snapshot->n == 1)
    g = parse_gen(msg->snapshot->kvs[0].value, msg->snapshot->kvs[0].value_len);
  for (size_t i = 0; i < msg->n_events; i++)
    if (msg->events[i].type == TAGC_ETCD_PUT)
      g = parse_gen(msg->events[i].kv.value, msg->events[i].kv.value_len);
  pthread_mutex_lock(&s->lock);
  if (g > s->latest) {
    s->latest = g;
    s->latest_at = tagc_now();
    pthread_cond_broadcast(&s->changed);
  }
  pthread_mutex_unlock(&s->lock);
  return 0;
}

/* Member index of an id "m<index>", or -1. */
static long member_index(const sim *s, const char *id) {
  if (!id || id[0] != 'm')
    return -1;
  char *end;
  long i = strtol(id + 1, &end, 10);
  return *end || i < 0 || (size_t)i >= s->n ? -1 : i;
}

/* Reads the plan of generation g (seen at `at`) and records it; tells its members. */
static void follow(sim *s, int64_t g, double at) {
  char key[TAGC_KEY_MAX], *text = NULL;
  size_t len;
  json_t *plan = NULL;
  if (tagc_key_gen_plan(s->o.job, g, key, sizeof key) != TAGC_OK ||
      tagc_etcd_get(s->main_etcd, key, &text, &len, NULL) != TAGC_OK ||
      tagc_json_parse(text, len, &plan) != TAGC_OK) {
    fprintf(stderr, "member_sim: reading the plan of generation %" PRId64 ": %s\n", g,
            tagc_last_error());
    free(text);
    return;
  }
  free(text);
  seen_gen sg = {.gen = g, .at = at, .in = calloc(s->n, 1)};
  size_t i;
  json_t *id;
  json_array_foreach(json_object_get(plan, "members"), i, id) {
    long k = member_index(s, json_string_value(id));
    if (k < 0 || !sg.in)
      continue;
    sg.in[k] = 1;
    sg.world++;
    atomic_store(&s->m[k].planned_rank, (int)i);
    atomic_store(&s->m[k].planned_gen, g);
  }
  json_decref(plan);
  pthread_mutex_lock(&s->lock);
  if (s->n_gens == s->cap_gens) {
    s->cap_gens = s->cap_gens ? 2 * s->cap_gens : 16;
    s->gens = realloc(s->gens, s->cap_gens * sizeof *s->gens);
  }
  s->gens[s->n_gens++] = sg;
  pthread_cond_broadcast(&s->changed);
  pthread_mutex_unlock(&s->lock);
}

static void *follower_main(void *arg) {
  sim *s = arg;
  int64_t done = 0;
  pthread_mutex_lock(&s->lock);
  while (!atomic_load(&s->stop)) {
    if (s->latest <= done) {
      struct timespec ts = tagc_deadline_in(0.1);
      pthread_cond_timedwait(&s->changed, &s->lock, &ts);
      continue;
    }
    int64_t g = s->latest;
    double at = s->latest_at;
    pthread_mutex_unlock(&s->lock);
    follow(s, g, at);
    done = g;
    pthread_mutex_lock(&s->lock);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* Waits until a recorded generation after index `from` satisfies fn (the first one), up to
 * timeout_s; returns its index or -1. */
static long wait_gen(sim *s, size_t from, int (*fn)(const sim *, const seen_gen *, void *),
                     void *arg, double timeout_s) {
  double until = tagc_now() + timeout_s;
  long found = -1;
  pthread_mutex_lock(&s->lock);
  while (found < 0 && tagc_now() < until && atomic_load(&s->stop) != 2) {
    for (size_t i = from; i < s->n_gens && found < 0; i++)
      if (fn(s, &s->gens[i], arg))
        found = (long)i;
    if (found < 0) {
      struct timespec ts = tagc_deadline_in(0.1);
      pthread_cond_timedwait(&s->changed, &s->lock, &ts);
    }
  }
  pthread_mutex_unlock(&s->lock);
  return found;
}

static size_t n_gens(sim *s) {
  pthread_mutex_lock(&s->lock);
  size_t n = s->n_gens;
  pthread_mutex_unlock(&s->lock);
  return n;
}

/* A generation of (nearly) every member: all but 1 % (members whose lease flapped while
 * the rest registered join the next one). */
static int holds_most(const sim *s, const seen_gen *g, void *arg) {
  (void)arg;
  return (size_t)g->world >= s->n - s->n / 100;
}

/* arg: an array of member indexes ending with -1; true when none is in g. */
static int lacks(const sim *s, const seen_gen *g, void *arg) {
  (void)s;
  for (const long *k = arg; *k >= 0; k++)
    if (g->in && g->in[*k])
      return 0;
  return 1;
}

/* ---- measurements ---- */

/* The coordinator's CPU seconds (user + system), resident and peak resident memory (MiB). */
static void proc_usage(long pid, double *cpu_s, double *rss_mib, double *hwm_mib) {
  char path[64], line[512];
  *cpu_s = *rss_mib = *hwm_mib = 0;
  if (pid <= 0)
    return;
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (f && fgets(line, sizeof line, f)) {
    const char *p = strrchr(line, ')'); /* the command may hold spaces */
    unsigned long ut = 0, st = 0;
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
      *cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
  }
  if (f)
    fclose(f);
  snprintf(path, sizeof path, "/proc/%ld/status", pid);
  f = fopen(path, "r");
  while (f && fgets(line, sizeof line, f)) {
    long kb;
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
      *rss_mib = kb / 1024.0;
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
      *hwm_mib = kb / 1024.0;
  }
  if (f)
    fclose(f);
}

/* Picks k distinct live members, none of them rank 0 of the current plan (it writes the
 * progress record), into out (k + 1 entries, the last -1). */
static void pick(sim *s, unsigned *rng, size_t k, long *out) {
  size_t got = 0;
  while (got < k) {
    long i = (long)(rand_r(rng) % s->n);
    int taken = atomic_load(&s->m[i].dead) || atomic_load(&s->m[i].planned_rank) == 0;
    for (size_t j = 0; j < got && !taken; j++)
      taken = out[j] == i;
    if (!taken)
      out[got++] = i;
  }
  out[got] = -1;
}

/* Rank 0's progress record, written once a second by the main thread while it waits. */
typedef struct progress {
  double next;
  int64_t step;
} progress;

static void progress_tick(sim *s, progress *p) {
  double now = tagc_now();
  if (now < p->next)
    return;
  p->next = now + 1;
  long rank0 = -1;
  for (size_t i = 0; i < s->n && rank0 < 0; i++)
    if (atomic_load(&s->m[i].planned_rank) == 0 && !atomic_load(&s->m[i].dead))
      rank0 = (long)i;
  char key[TAGC_KEY_MAX];
  if (rank0 < 0 || tagc_key_progress(s->o.job, key, sizeof key) != TAGC_OK)
    return;
  json_t *rec = json_pack("{s:I, s:I, s:f, s:f, s:s, s:f}", "step", (json_int_t)++p->step,
                          "steps", (json_int_t)0, "loss", 2.5, "tokens_per_s", 1e5, "worker",
                          s->m[rank0].id, "time", tagc_wall_time());
  char *text = rec ? tagc_json_dump(rec) : NULL;
  json_decref(rec);
  if (text)
    tagc_etcd_put_within(s->main_etcd, key, text, strlen(text), 0, 0.5);
  free(text);
}

/* Sleeps s seconds, writing progress meanwhile. */
static void idle(sim *s, progress *p, double seconds) {
  double until = tagc_now() + seconds;
  while (tagc_now() < until && atomic_load(&s->stop) != 2) {
    progress_tick(s, p);
    tagc_sleep(0.05);
  }
}

/* Lease expiry of member k: its last renewal sent + its granted TTL. */
static double expiry_of(const sim *s, long k) {
  return atomic_load(&s->m[k].last_renew) + (double)s->m[k].ttl;
}

/* --reports: every live member of victim's generation that has not reported in it yet
 * reports the victim's rank. */
static void report_death(sim *s, long victim) {
  int64_t g = atomic_load(&s->m[victim].planned_gen);
  int rank = atomic_load(&s->m[victim].planned_rank);
  for (size_t i = 0; i < s->n; i++) {
    member *mb = &s->m[i];
    if (atomic_load(&mb->dead) || atomic_load(&mb->planned_gen) != g ||
        atomic_load(&mb->report_gen) >= g)
      continue;
    atomic_store(&mb->report_peer, rank);
    atomic_store(&mb->report_gen, g);
  }
}

/* The death of the members in ks (-1 ended), spread over spread_s seconds; then the first
 * generation without any of them. Fills the expiries' span and what the generations did. */
static json_t *deaths(sim *s, progress *p, unsigned *rng, long *ks, double spread_s) {
  size_t k = 0;
  while (ks[k] >= 0)
    k++;
  size_t from = n_gens(s);
  double *offsets = calloc(k, sizeof *offsets);
  for (size_t i = 0; i < k; i++)
    offsets[i] = k > 1 ? spread_s * (double)(rand_r(rng) % 1000) / 1000.0 : 0;
  double start = tagc_now(), last_death = start;
  for (size_t done = 0; done < k;) {
    for (size_t i = 0; i < k; i++)
      if (offsets[i] >= 0 && tagc_now() - start >= offsets[i]) {
        atomic_store(&s->m[ks[i]].dead, 1);
        last_death = tagc_now();
        if (s->o.reports)
          report_death(s, ks[i]);
        offsets[i] = -1;
        done++;
      }
    progress_tick(s, p);
    tagc_sleep(0.005);
  }
  free(offsets);
  long g = -1;
  double until = tagc_now() + s->o.event_timeout;
  while (g < 0 && tagc_now() < until && atomic_load(&s->stop) != 2) {
    g = wait_gen(s, from, lacks, ks, 0.2);
    progress_tick(s, p);
  }
  idle(s, p, 3); /* generations that follow late */
  double first_expiry = 1e300, last_expiry = 0; /* read now: no renewal is in flight */
  for (size_t i = 0; i < k; i++) {
    double e = expiry_of(s, ks[i]);
    first_expiry = e < first_expiry ? e : first_expiry;
    last_expiry = e > last_expiry ? e : last_expiry;
  }
  json_t *out = json_pack("{s:i}", "members", (int)k);
  pthread_mutex_lock(&s->lock);
  if (g >= 0) {
    int gens = 0;
    for (size_t i = from; i < s->n_gens; i++)
      gens += s->gens[i].at >= start;
    json_object_set_new(out, "first_expiry_to_gen_s", json_real(s->gens[g].at - first_expiry));
    json_object_set_new(out, "last_expiry_to_gen_s", json_real(s->gens[g].at - last_expiry));
    json_object_set_new(out, "last_death_to_gen_s", json_real(s->gens[g].at - last_death));
    json_object_set_new(out, "generations", json_integer(gens));
    json_object_set_new(out, "world", json_integer(s->gens[g].world));
  } else {
    json_object_set_new(out, "timeout", json_true());
  }
  pthread_mutex_unlock(&s->lock);
  return out;
}

/* One member leaves as on SIGTERM: leaving/<id>, then, once a generation without it exists,
 * its lease is revoked. */
static json_t *leave(sim *s, progress *p, long k) {
  char key[TAGC_KEY_MAX];
  long ks[2] = {k, -1};
  size_t from = n_gens(s);
  member *mb = &s->m[k];
  json_t *rec = json_pack("{s:I, s:s, s:f}", "registration", (json_int_t)mb->registration,
                          "reason", "SIGTERM", "time", tagc_wall_time());
  char *text = rec ? tagc_json_dump(rec) : NULL;
  json_decref(rec);
  double start = tagc_now();
  if (!text || tagc_key_leaving(s->o.job, mb->id, key, sizeof key) != TAGC_OK ||
      tagc_etcd_put(s->main_etcd, key, text, strlen(text), 0, NULL) != TAGC_OK) {
    free(text);
    return json_pack("{s:s}", "error", tagc_last_error());
  }
  free(text);
  long g = -1;
  double until = start + s->o.event_timeout;
  while (g < 0 && tagc_now() < until && atomic_load(&s->stop) != 2) {
    g = wait_gen(s, from, lacks, ks, 0.2);
    progress_tick(s, p);
  }
  atomic_store(&mb->dead, 1);
  tagc_etcd_lease_revoke(s->main_etcd, mb->lease);
  if (g < 0)
    return json_pack("{s:b}", "timeout", 1);
  pthread_mutex_lock(&s->lock);
  double at = s->gens[g].at;
  pthread_mutex_unlock(&s->lock);
  return json_pack("{s:f}", "leave_to_gen_s", at - start);
}

/* The steady-state window: this client's requests and bytes per member and second, and the
 * coordinator's CPU share. */
static json_t *steady(sim *s, progress *p) {
  tagc_etcd_stats a, b;
  double cpu_a, cpu_b, rss, hwm;
  int64_t lost_a = atomic_load(&s->lease_losses);
  proc_usage((long)s->o.coord_pid, &cpu_a, &rss, &hwm);
  tagc_etcd_stats_get(&a);
  double t0 = tagc_now();
  idle(s, p, s->o.steady);
  double dt = tagc_now() - t0;
  tagc_etcd_stats_get(&b);
  proc_usage((long)s->o.coord_pid, &cpu_b, &rss, &hwm);
  double per = dt * (double)s->n;
  return json_pack("{s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:f}", "seconds", dt,
                   "requests_per_s_per_member", (double)(b.requests - a.requests) / per,
                   "bytes_per_s_per_member",
                   (double)(b.bytes_sent + b.bytes_received - a.bytes_sent - a.bytes_received) / per,
                   "mean_request_ms",
                   b.requests > a.requests
                       ? 1e3 * (b.seconds - a.seconds) / (double)(b.requests - a.requests) : 0.0,
                   "coord_cpu_share", (cpu_b - cpu_a) / dt, "errors",
                   (json_int_t)(b.errors - a.errors), "lease_losses",
                   (json_int_t)(atomic_load(&s->lease_losses) - lost_a), "coord_rss_mib", rss);
}

/* ---- main ---- */

static tagc_status run(sim *s) {
  tagc_etcd_watch *w = NULL;
  pthread_t *pool = calloc((size_t)s->o.threads, sizeof *pool);
  pool_arg *args = calloc((size_t)s->o.threads, sizeof *args);
  pthread_t follower;
  progress p = {0};
  unsigned rng = (unsigned)s->o.seed;
  json_t *out = json_object();
  if (!pool || !args || !out)
    return tagc_errorf(TAGC_ENOMEM, "member_sim");
  char gen_key[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_gen(s->o.job, gen_key, sizeof gen_key));
  tagc_etcd_watch_opts wo = {.initial_read = 1};
  TAGC_CHECK(tagc_etcd_watch_start(s->main_etcd, gen_key, &wo, on_gen, s, &w));
  pthread_create(&follower, NULL, follower_main, s);
  double t0 = tagc_now();
  for (int64_t t = 0; t < s->o.threads; t++) {
    args[t] = (pool_arg){.s = s, .first = (size_t)t};
    pthread_create(&pool[t], NULL, pool_main, &args[t]);
  }
  while ((size_t)atomic_load(&s->registered) < s->n && atomic_load(&s->stop) != 2)
    tagc_sleep(0.01);
  json_object_set_new(out, "register_s", json_real(tagc_now() - t0));
  long first = wait_gen(s, 0, holds_most, NULL, s->o.event_timeout);
  json_object_set_new(out, "first_gen_s", json_real(tagc_now() - t0));
  if (first >= 0) {
    while (atomic_load(&s->ready_writes) < (int64_t)s->n && tagc_now() - t0 < 2 * s->o.event_timeout)
      idle(s, &p, 0.1);
    json_object_set_new(out, "ready_s", json_real(tagc_now() - t0));
    idle(s, &p, 2);
    json_object_set_new(out, "steady", steady(s, &p));
    long one[2];
    pick(s, &rng, 1, one);
    json_object_set_new(out, "death", deaths(s, &p, &rng, one, 0));
    size_t k = s->n / 100 ? s->n / 100 : 1;
    long *batch = calloc(k + 1, sizeof *batch);
    pick(s, &rng, k, batch);
    json_object_set_new(out, "batch", deaths(s, &p, &rng, batch, 1.0));
    free(batch);
    pick(s, &rng, 1, one);
    json_object_set_new(out, "leave", leave(s, &p, one[0]));
  } else {
    json_object_set_new(out, "error", json_string("no generation held 99 % of the members"));
  }
  double cpu, rss, hwm;
  proc_usage((long)s->o.coord_pid, &cpu, &rss, &hwm);
  json_object_set_new(out, "members", json_integer((json_int_t)s->n));
  json_object_set_new(out, "ttl", json_integer(s->m[0].ttl));
  json_object_set_new(out, "generations", json_integer((json_int_t)n_gens(s)));
  json_object_set_new(out, "lease_losses", json_integer(atomic_load(&s->lease_losses)));
  json_object_set_new(out, "renew_errors", json_integer(atomic_load(&s->renew_errors)));
  json_object_set_new(out, "coord_cpu_s", json_real(cpu));
  json_object_set_new(out, "coord_rss_mib", json_real(rss));
  json_object_set_new(out, "coord_hwm_mib", json_real(hwm));
  json_object_set_new(out, "run_s", json_real(tagc_now() - t0));
  if (atomic_load(&s->stop) != 2)
    atomic_store(&s->stop, 1);
  for (int64_t t = 0; t < s->o.threads; t++)
    pthread_join(pool[t], NULL);
  pthread_join(follower, NULL);
  tagc_etcd_watch_stop(w);
  for (size_t i = 0; i < s->n; i++) /* as tagc_member_leave: the keys go at once */
    if (!atomic_load(&s->m[i].dead))
      tagc_etcd_lease_revoke(s->main_etcd, s->m[i].lease);
  char *text = json_dumps(out, JSON_COMPACT);
  printf("%s\n", text ? text : "{}");
  free(text);
  json_decref(out);
  free(pool);
  free(args);
  return TAGC_OK;
}

static tagc_status setup(sim *s) {
  TAGC_CHECK(tagc_key_check_id(s->o.job, "--job"));
  s->n = (size_t)s->o.members;
  s->m = calloc(s->n, sizeof *s->m);
  if (!s->m)
    return tagc_errorf(TAGC_ENOMEM, "member_sim: members");
  for (size_t i = 0; i < s->n; i++) {
    member *mb = &s->m[i];
    snprintf(mb->id, sizeof mb->id, "m%05zu", i);
    TAGC_CHECK(tagc_key_worker(s->o.job, mb->id, mb->worker_key, sizeof mb->worker_key));
    TAGC_CHECK(tagc_key_chaos(s->o.job, mb->id, mb->chaos_key, sizeof mb->chaos_key));
    atomic_store(&mb->planned_rank, -1);
    mb->next_chaos = tagc_now() + s->o.chaos_poll * (double)i / (double)s->n;
  }
  pthread_mutex_init(&s->lock, NULL);
  tagc_cond_init_monotonic(&s->changed);
  /* the deadline of a worker's calls (the keeper's renewals and the chaos reads alike) */
  TAGC_CHECK(tagc_etcd_connect(s->o.etcd, &(tagc_etcd_credentials){0}, 5, &s->pool_etcd));
  return tagc_etcd_connect(s->o.etcd, &(tagc_etcd_credentials){0}, 5, &s->main_etcd);
}

int main(int argc, char **argv) {
  static sim s;
  int help = 0;
  tagc_status st = tagc_opts_parse(&sim_program, &s.o, argc, argv, NULL, 0, NULL, &help);
  if (st == TAGC_OK && !help)
    st = tagc_log_configure(s.o.log, TAGC_LOG_TEXT);
  if (st == TAGC_OK && !help)
    st = setup(&s);
  if (st == TAGC_OK && !help)
    st = run(&s);
  if (st != TAGC_OK)
    fprintf(stderr, "member_sim: %s\n", tagc_last_error());
  tagc_etcd_destroy(s.pool_etcd);
  tagc_etcd_destroy(s.main_etcd);
  free(s.m);
  tagc_opts_free(&sim_program, &s.o);
  return st == TAGC_OK ? 0 : 1;
}
