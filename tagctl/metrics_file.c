/* Reading OUT/metrics.jsonl (metrics_file.h). */
#include "tagctl/metrics_file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static tagc_status append(tagctl_metrics_rows *m, json_t *row, size_t *cap) {
  if (m->n == *cap) {
    size_t c = *cap ? 2 * *cap : 256;
    json_t **rows = realloc(m->rows, c * sizeof *rows);
    if (!rows) {
      json_decref(row);
      return tagc_errorf(TAGC_ENOMEM, "%s: %zu rows", m->path, m->n);
    }
    m->rows = rows;
    *cap = c;
  }
  m->rows[m->n++] = row;
  return TAGC_OK;
}

tagc_status tagctl_metrics_read(const char *path, tagctl_metrics_rows *m) {
  memset(m, 0, sizeof *m);
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
    snprintf(m->path, sizeof m->path, "%s/metrics.jsonl", path);
  else
    snprintf(m->path, sizeof m->path, "%s", path);
  FILE *f = fopen(m->path, "r");
  if (!f)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s", m->path);
  char *line = NULL;
  size_t line_cap = 0, cap = 0;
  ssize_t len;
  tagc_status st = TAGC_OK;
  while (st == TAGC_OK && (len = getline(&line, &line_cap, f)) >= 0) {
    if (strspn(line, " \t\r\n") == (size_t)len)
      continue;
    json_t *row = json_loadb(line, (size_t)len, 0, NULL);
    if (!json_is_object(row)) {
      json_decref(row);
      m->skipped++;
      continue;
    }
    st = append(m, row, &cap);
  }
  if (st == TAGC_OK && ferror(f))
    st = tagc_errnof(TAGC_EIO, "%s", m->path);
  free(line);
  fclose(f);
  if (st != TAGC_OK)
    tagctl_metrics_free(m);
  return st;
}

double tagctl_metrics_num(const tagctl_metrics_rows *m, size_t i, const char *key) {
  const json_t *v = json_object_get(m->rows[i], key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

void tagctl_metrics_free(tagctl_metrics_rows *m) {
  for (size_t i = 0; i < m->n; i++)
    json_decref(m->rows[i]);
  free(m->rows);
  m->rows = NULL;
  m->n = 0;
}
