/* A run's OUT/metrics.jsonl read into memory, for tagctl metrics and tagctl plot. */
#ifndef TAGC_TAGCTL_METRICS_FILE_H
#define TAGC_TAGCTL_METRICS_FILE_H

#include <stddef.h>

#include <jansson.h>

#include "common/status.h"

typedef struct tagctl_metrics_rows {
  json_t **rows;  /* [n] JSON objects in file order (a recomputed step appears again), owned */
  size_t n;
  size_t skipped; /* lines that are not a JSON object (e.g. cut short by a crash) */
  char path[4200];
} tagctl_metrics_rows;

/* Reads `path`: a run's output folder (its metrics.jsonl) or a metrics.jsonl file. Blank
 * lines are ignored; lines that are not a JSON object are counted in skipped. Errors:
 * TAGC_ENOTFOUND, TAGC_EIO, TAGC_ENOMEM. Free with tagctl_metrics_free. */
tagc_status tagctl_metrics_read(const char *path, tagctl_metrics_rows *m);

/* Number field `key` of row i; NAN when absent or not a number. */
double tagctl_metrics_num(const tagctl_metrics_rows *m, size_t i, const char *key);

/* Frees the rows. Idempotent. */
void tagctl_metrics_free(tagctl_metrics_rows *m);

#endif
