/* OUT/history.jsonl: one record of a job's history, one JSON object per line, appended by
 * the processes that see each event and read back by summary.json, `tagctl status OUT` and
 * `tagctl plot`, so that all three count the same (docs/formats.md, "history.jsonl"):
 *   {"time":T,"event":"start"}                         tagctl run began (a second one resumes)
 *   {"time":T,"event":"interrupt"}                     tagctl run was interrupted (Ctrl-C, SIGTERM)
 *   {"time":T,"event":"restart","who":id,"why":text}   tagctl run restarted a process
 *   {"time":T,"event":"end","status":n}                tagctl run ended with status n
 *   {"time":T,"event":"generation","gen":g,"world":n,"members":[ids],"failures_total":{...}}
 *                                                      rank 0 of generation g began it
 * A generation is classified against the one before it (reset by "start" or a lower gen: a
 * new job): a failure when failures_total grew (one failure per generation, its kind the most
 * specific kind that grew: oom, injected, crash, hang, timeout, partition, comm, lease; the
 * plan counts every report, and one dead peer is reported by each survivor), else a join or a
 * leave by the members, else a regroup. Appends are single write()s with O_APPEND, so lines
 * of concurrent writers never interleave. Any thread. */
#ifndef TAGC_WORKER_HISTORY_H
#define TAGC_WORKER_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends event (stolen; "time" is added) to OUT/history.jsonl. Best effort: a failure is
 * logged once as a warning and the run goes on. */
void tagc_history_append(const char *out, json_t *event);

typedef enum tagc_history_kind {
  TAGC_HIST_FAILURE,   /* a generation made because of failures */
  TAGC_HIST_JOIN,      /* a generation with new members and no failure */
  TAGC_HIST_LEAVE,     /* a generation without some members and no failure */
  TAGC_HIST_INTERRUPT, /* tagctl run interrupted */
  TAGC_HIST_RESUME,    /* a second or later tagctl run over OUT */
  TAGC_HIST_RESTART,   /* tagctl run restarted a process */
  TAGC_HIST_KINDS
} tagc_history_kind;

typedef struct tagc_history_event {
  tagc_history_kind kind;
  double time;       /* unix seconds */
  int64_t gen;       /* generation events; else 0 */
  char what[160];    /* e.g. "crash (w2 lost)", "w2 joined", "w1 restarted: ..." */
} tagc_history_event;

typedef struct tagc_history {
  tagc_history_event *ev;
  size_t n;
  int64_t runs;                 /* "start" lines */
  int64_t counts[TAGC_HIST_KINDS];
  json_t *failures;             /* {"crash": n, ...}: failures by kind */
  size_t skipped;               /* lines that are not history records */
  int ended;                    /* the newest run's "end" was recorded ... */
  int64_t end_status;           /* ... with this tagctl run exit status */
} tagc_history;

/* Reads OUT/history.jsonl into *h (caller frees with tagc_history_free). A missing file is an
 * empty history (TAGC_OK); TAGC_EIO for one that cannot be read, TAGC_ENOMEM. */
tagc_status tagc_history_read(const char *out, tagc_history *h);

/* {"runs":n,"failures":n,"failures_by_kind":{...},"recoveries":n,"joins":n,"leaves":n,
 *  "interrupts":n,"restarts":n} (recoveries: failures the job went on from). NULL: no memory. */
json_t *tagc_history_counts(const tagc_history *h);

/* "failure", "join", ... */
const char *tagc_history_kind_name(tagc_history_kind k);

void tagc_history_free(tagc_history *h);

#ifdef __cplusplus
}
#endif

#endif
