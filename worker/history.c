/* OUT/history.jsonl (worker/history.h). */
#include "worker/history.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/timeutil.h"

static const char *const kind_names[TAGC_HIST_KINDS] = {"failure", "join",   "leave",
                                                        "interrupt", "resume", "restart"};

/* The most specific first: the kind a generation's failure is counted as. */
static const char *const failure_order[] = {"oom",  "injected",  "straggler", "crash", "hang",
                                            "timeout", "partition", "comm",    "lease"};

const char *tagc_history_kind_name(tagc_history_kind k) {
  return k < TAGC_HIST_KINDS ? kind_names[k] : "?";
}

void tagc_history_append(const char *out, json_t *event) {
  static int warned;
  if (!event)
    return;
  char path[4200];
  snprintf(path, sizeof path, "%s/history.jsonl", out);
  char *row = json_dumps(event, JSON_COMPACT);
  json_decref(event);
  if (!row)
    return;
  /* "time" first, in milliseconds exactly, then the event's fields */
  char line[8192];
  int n = snprintf(line, sizeof line, "{\"time\":%.3f%s%s\n", tagc_wall_time(),
                   strlen(row) > 2 ? "," : "", row + 1);
  free(row);
  if (n <= 0 || (size_t)n >= sizeof line)
    return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  /* the whole line or nothing (a full disk): readers never find a line cut short */
  tagc_status st = fd >= 0 ? tagc_append_whole(fd, line, (size_t)n, path)
                           : tagc_errnof(TAGC_EIO, "%s", path);
  if (fd >= 0 && close(fd) != 0 && st == TAGC_OK)
    st = tagc_errnof(TAGC_EIO, "%s", path);
  if (st != TAGC_OK && !warned) {
    warned = 1;
    LOG_WARN("train", "the event was not recorded: %s", tagc_last_error());
  }
}

static tagc_status add(tagc_history *h, size_t *cap, tagc_history_kind kind, double time,
                       int64_t gen, const char *what) {
  if (h->n == *cap) {
    size_t c = *cap ? 2 * *cap : 64;
    tagc_history_event *p = realloc(h->ev, c * sizeof *p);
    if (!p)
      return tagc_errorf(TAGC_ENOMEM, "history of %zu events", c);
    h->ev = p;
    *cap = c;
  }
  tagc_history_event *e = &h->ev[h->n++];
  e->kind = kind;
  e->time = time;
  e->gen = gen;
  snprintf(e->what, sizeof e->what, "%s", what);
  h->counts[kind]++;
  return TAGC_OK;
}

static int has_member(const json_t *members, const char *id) {
  size_t i;
  json_t *m;
  json_array_foreach(members, i, m) if (json_is_string(m) && !strcmp(json_string_value(m), id)) return 1;
  return 0;
}

/* ids of `a` not in `b`, as "w1, w2" into buf; the count. */
static int missing(const json_t *a, const json_t *b, char *buf, size_t cap) {
  int n = 0;
  size_t used = 0, i;
  json_t *m;
  buf[0] = '\0';
  json_array_foreach(a, i, m) {
    if (!json_is_string(m) || has_member(b, json_string_value(m)))
      continue;
    if (used < cap)
      used += (size_t)snprintf(buf + used, cap - used, "%s%s", n ? ", " : "", json_string_value(m));
    n++;
  }
  return n;
}

typedef struct baseline {
  json_t *failures; /* the previous generation's failures_total (borrowed from its line) */
  json_t *members;
  int64_t gen;
} baseline;

static tagc_status generation(tagc_history *h, size_t *cap, baseline *b, json_t *line, double t) {
  json_int_t gen = json_integer_value(json_object_get(line, "gen"));
  json_t *members = json_object_get(line, "members"), *totals = json_object_get(line, "failures_total");
  if (!json_is_array(members) || !json_is_object(totals) || gen < 1) {
    h->skipped++;
    return TAGC_OK;
  }
  if (gen <= b->gen) /* a new job (a new etcd, a reset): counts start again */
    *b = (baseline){NULL, NULL, 0};
  int first = b->gen == 0;
  const char *kind = NULL;
  char grew[128] = "";
  size_t used = 0;
  for (size_t k = 0; k < sizeof failure_order / sizeof failure_order[0]; k++) {
    json_int_t now = json_integer_value(json_object_get(totals, failure_order[k]));
    json_int_t before = json_integer_value(json_object_get(b->failures, failure_order[k]));
    if (now > before) {
      if (!kind)
        kind = failure_order[k];
      if (used < sizeof grew)
        used += (size_t)snprintf(grew + used, sizeof grew - used, "%s%s %lld", used ? ", " : "",
                                 failure_order[k], (long long)(now - before));
    }
  }
  char joined[96], left[96], what[160];
  int n_joined = first ? 0 : missing(members, b->members, joined, sizeof joined);
  int n_left = first ? 0 : missing(b->members, members, left, sizeof left);
  tagc_status st = TAGC_OK;
  if (kind) {
    int n = snprintf(what, sizeof what, "%s%s%s%s (reports: %s), gen %lld on %zu", kind,
                     n_left ? ", " : "", n_left ? left : "", n_left ? " lost" : "", grew,
                     (long long)gen, json_array_size(members));
    if (n >= (int)sizeof what) /* a long report list: the line says it was cut */
      memcpy(what + sizeof what - 4, "...", 4);
    json_object_set_new(h->failures, kind,
                        json_integer(json_integer_value(json_object_get(h->failures, kind)) + 1));
    st = add(h, cap, TAGC_HIST_FAILURE, t, gen, what);
  } else if (n_joined && !n_left) {
    snprintf(what, sizeof what, "%s joined, gen %lld on %zu", joined, (long long)gen, json_array_size(members));
    st = add(h, cap, TAGC_HIST_JOIN, t, gen, what);
  } else if (n_left) {
    snprintf(what, sizeof what, "%s left, gen %lld on %zu", left, (long long)gen, json_array_size(members));
    st = add(h, cap, TAGC_HIST_LEAVE, t, gen, what);
  }
  b->failures = totals;
  b->members = members;
  b->gen = gen;
  return st;
}

tagc_status tagc_history_read(const char *out, tagc_history *h) {
  memset(h, 0, sizeof *h);
  h->failures = json_object();
  if (!h->failures)
    return tagc_errorf(TAGC_ENOMEM, "history");
  char path[4200];
  snprintf(path, sizeof path, "%s/history.jsonl", out);
  FILE *f = fopen(path, "r");
  if (!f)
    return errno == ENOENT ? TAGC_OK : tagc_errnof(TAGC_EIO, "%s", path);
  json_t *lines = json_array(); /* keeps each line alive while the baseline borrows from it */
  baseline b = {NULL, NULL, 0};
  size_t cap = 0;
  char *buf = NULL;
  size_t bufcap = 0;
  tagc_status st = lines ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "history");
  while (st == TAGC_OK && getline(&buf, &bufcap, f) > 0) {
    json_t *line = json_loads(buf, 0, NULL);
    const char *ev = json_string_value(json_object_get(line, "event"));
    json_t *tv = json_object_get(line, "time");
    if (!json_is_object(line) || !ev || !json_is_number(tv)) {
      h->skipped++;
      json_decref(line);
      continue;
    }
    json_array_append_new(lines, line);
    double t = json_number_value(tv);
    char what[160];
    if (!strcmp(ev, "start")) {
      if (h->runs++ > 0) {
        snprintf(what, sizeof what, "run %lld resumes", (long long)h->runs);
        st = add(h, &cap, TAGC_HIST_RESUME, t, 0, what);
      }
      b = (baseline){NULL, NULL, 0};
      h->ended = 0;
    } else if (!strcmp(ev, "interrupt")) {
      st = add(h, &cap, TAGC_HIST_INTERRUPT, t, 0, "interrupted");
    } else if (!strcmp(ev, "restart")) {
      const char *who = json_string_value(json_object_get(line, "who"));
      const char *why = json_string_value(json_object_get(line, "why"));
      snprintf(what, sizeof what, "%s restarted (%s)", who ? who : "?", why ? why : "?");
      st = add(h, &cap, TAGC_HIST_RESTART, t, 0, what);
    } else if (!strcmp(ev, "generation")) {
      st = generation(h, &cap, &b, line, t);
    } else if (!strcmp(ev, "end")) {
      h->ended = 1;
      h->end_status = json_integer_value(json_object_get(line, "status"));
    } else {
      h->skipped++;
    }
  }
  free(buf);
  if (ferror(f) && st == TAGC_OK)
    st = tagc_errnof(TAGC_EIO, "%s", path);
  fclose(f);
  json_decref(lines);
  if (st != TAGC_OK)
    tagc_history_free(h);
  return st;
}

json_t *tagc_history_counts(const tagc_history *h) {
  json_t *kinds = h->failures ? json_deep_copy(h->failures) : json_object();
  json_t *o = json_pack("{s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I}", "runs", (json_int_t)h->runs,
                        "failures", (json_int_t)h->counts[TAGC_HIST_FAILURE], "failures_by_kind",
                        kinds, "recoveries",
                        (json_int_t)h->counts[TAGC_HIST_FAILURE], "joins",
                        (json_int_t)h->counts[TAGC_HIST_JOIN], "leaves",
                        (json_int_t)h->counts[TAGC_HIST_LEAVE], "interrupts",
                        (json_int_t)h->counts[TAGC_HIST_INTERRUPT], "restarts",
                        (json_int_t)h->counts[TAGC_HIST_RESTART]);
  return o;
}

void tagc_history_free(tagc_history *h) {
  free(h->ev);
  json_decref(h->failures);
  memset(h, 0, sizeof *h);
}
