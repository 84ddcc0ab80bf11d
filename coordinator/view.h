/* The job's state as the coordinator sees it (coordinator/; tagctl status reads it too): the
 * job's keys, and a view of every key under the job's prefix read at one etcd revision,
 * sorted into the current generation, its plan, the registered workers, the workers that
 * announced they leave, the failure reports of the current generation, the checkpoint,
 * progress, done and config records, and the leader's key.
 *
 * A failure report's age counts from the first read that saw it (key + mod revision), so a
 * report keeps its suspect window across reads; coord_seen carries that memory from one
 * read to the next. Not thread-safe: one view at a time per coord_seen. */
#ifndef TAGC_COORDINATOR_VIEW_H
#define TAGC_COORDINATOR_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/status.h"
#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "coordinator/planner.h"

/* The job's keys and prefixes (cluster/keys.h). */
typedef struct coord_keys {
  char job[TAGC_KEY_ID_MAX + 1];
  char prefix[TAGC_KEY_MAX], workers_prefix[TAGC_KEY_MAX], failures_prefix[TAGC_KEY_MAX];
  char coord_prefix[TAGC_KEY_MAX], gen_key[TAGC_KEY_MAX], done_key[TAGC_KEY_MAX];
  char leaving_prefix[TAGC_KEY_MAX];
  char config_key[TAGC_KEY_MAX], ckpt_key[TAGC_KEY_MAX], progress_key[TAGC_KEY_MAX];
} coord_keys;

/* Fills k for job (a checked job id). Errors of cluster/keys.h. */
tagc_status coord_keys_init(coord_keys *k, const char *job);

/* When the leader first saw a failure report (key + mod revision). */
typedef struct coord_seen_report {
  char *key;
  int64_t mod;
  double at;
} coord_seen_report;

/* The reports of the latest read, with when each was first seen, the registrations of its
 * workers (key: the worker id, mod: the registration) with when each was first seen, and the
 * bad keys (key + mod revision) the latest read warned about, so that each is logged once
 * per change. Each list is sorted by key, then mod, for the next read's lookups.
 * Zero-initialised = empty. */
typedef struct coord_seen {
  coord_seen_report *items;
  size_t n;
  coord_seen_report *registrations;
  size_t n_registrations;
  coord_seen_report *warned;
  size_t n_warned;
} coord_seen;

/* Frees the list and empties it; idempotent. */
void coord_seen_free(coord_seen *s);

/* The job's state read at one revision. Pointers into r and the JSON objects stay valid
 * until coord_view_free. */
typedef struct coord_view {
  tagc_etcd_range_result r;
  int64_t gen, gen_mod;               /* value and mod revision of `gen` (0, 0 when absent) */
  json_t *plan, *ckpt, *progress, *done, *config;
  tagc_planner_worker *workers;
  size_t n_workers;
  double *seen_at;                    /* seen_at[i]: when workers[i]'s registration was first
                                         seen (tagc_now clock) */
  json_t *worker_info;                /* {"id": registration JSON} */
  tagc_planner_report *reports;
  size_t n_reports;
  json_t *failures;                   /* {"id": report JSON} of generation gen */
  tagc_planner_worker *leaving;       /* leaving/<id> records: id and registration */
  size_t n_leaving;
  tagc_planner_death *deaths;         /* deaths[i]: whether leaving[i] reports a death */
  const char *leader;                 /* value of the lowest coord/ key, or NULL */
  int64_t ignored_keys;               /* keys left out: bad worker ids, bad leave records,
                                         failure reports of non-members */
} coord_view;

/* Reads the job's keys at one revision (three ranges that leave out gen/<g>/ but the current
 * plan: its bootstrap keys grow with W^2) and sorts them into *v (caller-owned; free with
 * coord_view_free after success). Malformed JSON values are kept as JSON strings; workers
 * with bad ids, bad leave records and the failure reports of workers that are not members of
 * the current plan are left out (counted in ignored_keys). A bad key is logged once per
 * change (key + mod revision), not at every read. Updates seen to this read's reports and
 * registrations and sets each report's and worker's seen_at from it. Errors: those of tagc_etcd_range, TAGC_EPROTO when `gen` is not
 * a generation number, TAGC_ENOMEM. Blocks on etcd. */
tagc_status coord_view_read(tagc_etcd *etcd, const coord_keys *k, coord_seen *seen, coord_view *v);

/* Frees what coord_view_read allocated and zeroes v. */
void coord_view_free(coord_view *v);

/* The integer field `key` of a JSON object; 0 when obj is not an object or the field is not
 * an integer. */
static inline int64_t coord_int_field(const json_t *obj, const char *key) {
  return json_integer_value(json_object_get(obj, key));
}

#endif
