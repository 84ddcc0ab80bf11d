/* tagctl metrics OUT [--csv]: a run's metrics.jsonl as a table or as CSV. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tagctl/metrics_file.h"
#include "tagctl/tagctl.h"

typedef struct metrics_args {
  int csv;
} metrics_args;

static const tagc_opt metrics_opts[] = {
    {"csv", TAGC_OPT_BOOL, offsetof(metrics_args, csv), "false", 0, -1, NULL,
     "every field as CSV: a header row, the known columns in a fixed order, then any others "
     "sorted by name (nested objects flattened as a.b)"},
};

/* The columns of worker/report.c's rows (and the wall-clock `time`), in the order CSV uses
 * whether or not a run wrote them; other fields follow, sorted. */
static const char *const known_columns[] = {
    "step", "time", "elapsed_s", "generation", "world_size", "loss", "val_loss", "grad_norm",
    "lr", "step_s", "tokens_per_s", "bytes_sent", "comm_s", "exposed_comm_s", "global_density",
    "rho", "unpeeled", "sketch_coverage", "paths.sketch", "paths.bf16", "paths.fp32",
    "paths.int8", "feedback_error", "batch_crc32c"};
#define N_KNOWN (sizeof known_columns / sizeof known_columns[0])

typedef struct columns {
  char **names;
  size_t n, cap;
} columns;

static int has_column(const columns *c, const char *name) {
  for (size_t i = 0; i < c->n; i++)
    if (strcmp(c->names[i], name) == 0)
      return 1;
  return 0;
}

static int add_column(columns *c, const char *name) {
  if (has_column(c, name))
    return 1;
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 64;
    char **names = realloc(c->names, cap * sizeof *names);
    if (!names)
      return 0;
    c->names = names;
    c->cap = cap;
  }
  return (c->names[c->n++] = strdup(name)) != NULL;
}

/* Adds the flattened keys of obj (prefix "a." for nested objects) that are not known. */
static int collect(columns *extra, const columns *known, const json_t *obj, const char *prefix) {
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    char name[256];
    snprintf(name, sizeof name, "%s%s", prefix, key);
    if (json_is_object(v)) {
      char nested[260];
      snprintf(nested, sizeof nested, "%s.", name);
      if (!collect(extra, known, v, nested))
        return 0;
    } else if (!has_column(known, name) && !add_column(extra, name)) {
      return 0;
    }
  }
  return 1;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The value at a flattened name ("paths.bf16"); NULL when absent. */
static const json_t *lookup(const json_t *row, const char *name) {
  const json_t *v = json_object_get(row, name);
  const char *dot = strchr(name, '.');
  if (v || !dot)
    return v;
  char head[256];
  snprintf(head, sizeof head, "%.*s", (int)(dot - name), name);
  const json_t *child = json_object_get(row, head);
  return json_is_object(child) ? lookup(child, dot + 1) : NULL;
}

static void csv_field(const json_t *v) {
  if (!v || json_is_null(v))
    return;
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    if (!strpbrk(s, ",\"\r\n")) {
      fputs(s, stdout);
      return;
    }
    putchar('"');
    for (; *s; s++) {
      if (*s == '"')
        putchar('"');
      putchar(*s);
    }
    putchar('"');
    return;
  }
  char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!text)
    return;
  if (json_is_array(v)) {
    json_t *s = json_string(text);
    csv_field(s);
    json_decref(s);
  } else {
    fputs(text, stdout);
  }
  free(text);
}

static int print_csv(const tagctl_metrics_rows *m) {
  columns known = {0}, extra = {0};
  int ok = 1;
  for (size_t i = 0; i < N_KNOWN && ok; i++)
    ok = add_column(&known, known_columns[i]);
  for (size_t r = 0; r < m->n && ok; r++)
    ok = collect(&extra, &known, m->rows[r], "");
  if (ok) {
    if (extra.n)
      qsort(extra.names, extra.n, sizeof *extra.names, by_name);
    for (size_t i = 0; i < extra.n && ok; i++)
      ok = add_column(&known, extra.names[i]);
  }
  if (ok) {
    for (size_t i = 0; i < known.n; i++)
      printf(i ? ",%s" : "%s", known.names[i]);
    putchar('\n');
    for (size_t r = 0; r < m->n; r++) {
      for (size_t i = 0; i < known.n; i++) {
        if (i)
          putchar(',');
        csv_field(lookup(m->rows[r], known.names[i]));
      }
      putchar('\n');
    }
  }
  for (size_t i = 0; i < known.n; i++)
    free(known.names[i]);
  for (size_t i = 0; i < extra.n; i++)
    free(extra.names[i]);
  free(known.names);
  free(extra.names);
  return ok;
}

static void print_table(const tagctl_metrics_rows *m) {
  printf("%8s %5s %5s %10s %10s %12s %10s\n", "STEP", "GEN", "WORLD", "LOSS", "VAL_LOSS",
         "TOKENS/S", "STEP_S");
  for (size_t r = 0; r < m->n; r++) {
    double val = tagctl_metrics_num(m, r, "val_loss");
    char vtext[32] = "-";
    if (!isnan(val))
      snprintf(vtext, sizeof vtext, "%.4f", val);
    printf("%8.0f %5.0f %5.0f %10.4f %10s %12.0f %10.4f\n", tagctl_metrics_num(m, r, "step"),
           tagctl_metrics_num(m, r, "generation"), tagctl_metrics_num(m, r, "world_size"),
           tagctl_metrics_num(m, r, "loss"), vtext, tagctl_metrics_num(m, r, "tokens_per_s"),
           tagctl_metrics_num(m, r, "step_s"));
  }
}

int tagctl_metrics(int argc, char **argv) {
  tagc_opt_program prog = {"tagctl metrics", "OUT [--csv]",
                           "Prints a run's metrics.jsonl (OUT is the run's folder or the file): "
                           "a table of the main columns, or every field as CSV.",
                           metrics_opts, sizeof metrics_opts / sizeof metrics_opts[0]};
  metrics_args args = {0};
  char *out = NULL;
  int rc = tagctl_parse_file_args(&prog, &args, argc, argv, &out, 1);
  if (rc >= 0)
    return rc;
  tagctl_metrics_rows m;
  tagc_status st = tagctl_metrics_read(out, &m);
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl metrics: %s\n", tagc_last_error());
    return st == TAGC_ENOTFOUND ? 2 : 1;
  }
  rc = 0;
  if (args.csv) {
    if (!print_csv(&m)) {
      fprintf(stderr, "tagctl metrics: out of memory\n");
      rc = 1;
    }
  } else {
    print_table(&m);
  }
  if (m.skipped)
    fprintf(stderr, "tagctl metrics: %s: %zu line%s not a JSON object (skipped)\n", m.path, m.skipped,
            m.skipped == 1 ? " is" : "s are");
  tagctl_metrics_free(&m);
  return rc;
}
