/* tagctl plot OUT: train and validation loss and tokens/s against step from OUT/metrics.jsonl,
 * with the run's failures, recoveries and world-size changes marked. SVG written here (no
 * dependency); PNG through gnuplot when it is installed. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tagctl/metrics_file.h"
#include "tagctl/tagctl.h"
#include "worker/history.h"

typedef struct plot_args {
  char *svg;
  char *png;
  char *x;
} plot_args;

#define OFF(f) offsetof(plot_args, f)
static const tagc_opt plot_opts[] = {
    {"svg", TAGC_OPT_STRING, OFF(svg), "", 0, -1, NULL, "the SVG file to write (default OUT/plot.svg)"},
    {"png", TAGC_OPT_STRING, OFF(png), "", 0, -1, NULL,
     "the PNG file to write with gnuplot (default OUT/plot.png when gnuplot is installed; "
     "naming one without gnuplot is an error)"},
    {"x", TAGC_OPT_CHOICE, OFF(x), "step", 0, -1, "step|time",
     "the horizontal axis: the step, or the wall-clock time since the first step (seconds, "
     "minutes or hours by the span; the time a failure, an interrupt or a pause took shows "
     "as a gap)"},
};

typedef struct point {
  double step, loss, val, tps, time;
  double x;      /* the horizontal position: step, or the time since the first row (--x time) */
  double smooth; /* tokens/s smoothed (an exponential average within a segment) */
  int gen, world;
} point;

/* Markers: inferred from metrics.jsonl alone (a step that comes again: a failure and a
 * recovery; a new world size), or read from OUT/history.jsonl, which says what each was. */
typedef enum event_kind {
  EV_FAILURE, EV_RECOVERY, EV_WORLD, EV_JOIN, EV_LEAVE, EV_INTERRUPT, EV_RESUME, EV_KINDS
} event_kind;
static const char *const event_class[] = {"failure", "recovery", "world-change", "join",
                                          "leave",   "interrupt", "resume"};
static const char *const event_color[] = {"#d62728", "#2ca02c", "#7f7f7f", "#2ca02c",
                                          "#8c564b", "#ff7f0e", "#1f77b4"};
static const char *const event_legend[] = {"failure", "recovery", "world size change", "join",
                                           "leave", "interrupt", "resume"};

typedef struct event {
  event_kind kind;
  double x;
  int row;       /* label row (0 = top), chosen so that no two labels overlap; -1: no room */
  char label[200];
} event;

typedef struct series {
  point *p;
  size_t n;
  size_t *seg_start; /* a line breaks where a generation begins or steps are recomputed */
  size_t n_seg;
  event *ev;
  size_t n_ev;
  int failures, recoveries;
  int from_history;  /* events from OUT/history.jsonl */
  int by_time;       /* --x time */
  double time_unit;  /* --x time: seconds per unit of x */
  const char *x_unit;
  char counts[256];  /* the title's tally */
  char x_label[48];  /* --x time: "minutes since the first step" */
  double xmin, xmax, lmin, lmax, tmax;
} series;

/* The wall-clock time of row i: `time` (unix seconds) when the run wrote it, else the
 * worker's elapsed_s (which restarts with a new rank 0 process: only differences of rows of
 * one process mean something). */
static double row_time(const tagctl_metrics_rows *m, size_t i) {
  double t = tagctl_metrics_num(m, i, "time");
  return isnan(t) ? tagctl_metrics_num(m, i, "elapsed_s") : t;
}

static void add_event(series *s, event_kind kind, double x, const char *label) {
  event *e = &s->ev[s->n_ev++];
  e->kind = kind;
  e->x = x;
  e->row = 0;
  snprintf(e->label, sizeof e->label, "%s", label);
}

/* Between rows i-1 and i (no OUT/history.jsonl): a step that comes again means a failure and
 * a recovery from a checkpoint (the steps since it are recomputed); a new world size is
 * marked where it starts (before the recovery's marker, which is drawn over it). */
static void find_events(series *s, size_t i) {
  const point *a = &s->p[i - 1], *b = &s->p[i];
  double xa = s->by_time ? a->x : a->step, xb = s->by_time ? b->x : b->step - 1;
  char label[200];
  if (b->world != a->world) {
    snprintf(label, sizeof label, "world %d -> %d", a->world, b->world);
    add_event(s, EV_WORLD, xb, label);
  }
  if (b->step <= a->step) {
    snprintf(label, sizeof label, "failure after step %.0f", a->step);
    add_event(s, EV_FAILURE, xa, label);
    int n = snprintf(label, sizeof label, "recovery: resumed at step %.0f (gen %d", b->step - 1, b->gen);
    double gap = b->time - a->time;
    if (gap > 0 && isfinite(gap))
      snprintf(label + n, sizeof label - (size_t)n, ", next step %.1f s after the last)", gap);
    else
      snprintf(label + n, sizeof label - (size_t)n, ")");
    add_event(s, EV_RECOVERY, xb, label);
    s->failures++;
    s->recoveries++;
  }
}

/* The rows around wall-clock time t: *before, the last row at or before it (-1: none), and
 * *after, the first row after it (-1: none). */
static void rows_around(const series *s, double t, long *before, long *after) {
  *before = *after = -1;
  for (size_t i = 0; i < s->n; i++) {
    if (s->p[i].time <= t)
      *before = (long)i;
    else if (*after < 0)
      *after = (long)i;
  }
}

static const char *plural(int64_t n, const char *one, const char *many) { return n == 1 ? one : many; }

/* The markers of OUT/history.jsonl (worker/history.h), each where it happened: a failure,
 * join, leave or resume where training went on (the step resumed from), an interrupt after
 * the last step before it. Restarts are counted in the title only (each follows a failure). */
static void history_events(series *s, const tagc_history *h) {
  static const event_kind of[TAGC_HIST_KINDS] = {
      [TAGC_HIST_FAILURE] = EV_FAILURE, [TAGC_HIST_JOIN] = EV_JOIN,   [TAGC_HIST_LEAVE] = EV_LEAVE,
      [TAGC_HIST_INTERRUPT] = EV_INTERRUPT, [TAGC_HIST_RESUME] = EV_RESUME, [TAGC_HIST_RESTART] = EV_KINDS};
  for (size_t k = 0; k < h->n; k++) {
    const tagc_history_event *e = &h->ev[k];
    event_kind kind = of[e->kind];
    if (kind == EV_KINDS)
      continue;
    long before, after;
    rows_around(s, e->time, &before, &after);
    if (before < 0 && after < 0)
      continue;
    const point *a = before >= 0 ? &s->p[before] : NULL, *b = after >= 0 ? &s->p[after] : NULL;
    char label[200];
    double x;
    if (kind == EV_INTERRUPT || !b) {
      snprintf(label, sizeof label, "%s after step %.0f", e->what, a ? a->step : b->step - 1);
      x = s->by_time ? (a ? a->x : b->x) : (a ? a->step : b->step - 1);
    } else if (kind == EV_FAILURE && a) {
      snprintf(label, sizeof label, "%s: after step %.0f, resumed at step %.0f", e->what, a->step,
               b->step - 1);
      x = s->by_time ? b->x : b->step - 1;
    } else {
      snprintf(label, sizeof label, "%s: at step %.0f", e->what, b->step - 1);
      x = s->by_time ? b->x : b->step - 1;
    }
    add_event(s, kind, x, label);
  }
  s->failures = (int)h->counts[TAGC_HIST_FAILURE];
  s->recoveries = (int)h->counts[TAGC_HIST_FAILURE];
  size_t used = (size_t)snprintf(s->counts, sizeof s->counts, "%lld %s",
                                 (long long)h->counts[TAGC_HIST_FAILURE],
                                 plural(h->counts[TAGC_HIST_FAILURE], "failure", "failures"));
  const char *kind;
  json_t *v;
  int any = 0;
  json_object_foreach(h->failures, kind, v) {
    if (used < sizeof s->counts)
      used += (size_t)snprintf(s->counts + used, sizeof s->counts - used, "%s%s %lld",
                               any ? ", " : " (", kind, (long long)json_integer_value(v));
    any = 1;
  }
  if (used < sizeof s->counts)
    snprintf(s->counts + used, sizeof s->counts - used,
             "%s, %lld %s, %lld %s, %lld %s, %lld %s, %lld %s, %lld %s", any ? ")" : "",
             (long long)h->counts[TAGC_HIST_FAILURE],
             plural(h->counts[TAGC_HIST_FAILURE], "recovery", "recoveries"),
             (long long)h->counts[TAGC_HIST_JOIN], plural(h->counts[TAGC_HIST_JOIN], "join", "joins"),
             (long long)h->counts[TAGC_HIST_LEAVE], plural(h->counts[TAGC_HIST_LEAVE], "leave", "leaves"),
             (long long)h->counts[TAGC_HIST_INTERRUPT],
             plural(h->counts[TAGC_HIST_INTERRUPT], "interrupt", "interrupts"),
             (long long)h->counts[TAGC_HIST_RESTART],
             plural(h->counts[TAGC_HIST_RESTART], "restart", "restarts"), (long long)h->runs,
             plural(h->runs, "run", "runs"));
}

/* tokens/s smoothed within each segment: an exponential average over about a fortieth of
 * the rows (at least 5), so that the trend reads through the per-step noise. */
static void smooth_tps(series *s) {
  double w = fmax(5.0, (double)s->n / 40.0), alpha = 2.0 / (w + 1.0);
  for (size_t g = 0; g < s->n_seg; g++) {
    double avg = NAN;
    for (size_t i = s->seg_start[g]; i < s->seg_start[g + 1]; i++) {
      double y = s->p[i].tps;
      if (isfinite(y))
        avg = isnan(avg) ? y : avg + alpha * (y - avg);
      s->p[i].smooth = avg;
    }
  }
}

static int series_build(const tagctl_metrics_rows *m, const tagc_history *h, int by_time, series *s) {
  memset(s, 0, sizeof *s);
  s->by_time = by_time;
  s->from_history = h && (h->runs > 0 || h->n > 0);
  s->p = calloc(m->n, sizeof *s->p);
  s->seg_start = calloc(m->n + 1, sizeof *s->seg_start);
  s->ev = calloc(3 * m->n + (h ? h->n : 0) + 1, sizeof *s->ev);
  if (!s->p || !s->seg_start || !s->ev)
    return 0;
  s->lmin = INFINITY, s->lmax = -INFINITY, s->xmin = INFINITY, s->xmax = -INFINITY;
  double t0 = NAN;
  for (size_t i = 0; i < m->n; i++) {
    double step = tagctl_metrics_num(m, i, "step");
    if (isnan(step))
      continue;
    point *p = &s->p[s->n];
    *p = (point){step, tagctl_metrics_num(m, i, "loss"), tagctl_metrics_num(m, i, "val_loss"),
                 tagctl_metrics_num(m, i, "tokens_per_s"), row_time(m, i), 0, NAN,
                 (int)tagctl_metrics_num(m, i, "generation"), (int)tagctl_metrics_num(m, i, "world_size")};
    if (isnan(t0))
      t0 = p->time;
    p->x = by_time ? p->time - t0 : step; /* seconds; scaled to the unit below */
    if (s->n == 0 || p->step <= p[-1].step || p->gen != p[-1].gen)
      s->seg_start[s->n_seg++] = s->n;
    s->n++;
    s->xmin = fmin(s->xmin, by_time ? 0 : step - 1);
    s->xmax = fmax(s->xmax, p->x);
    double losses[2] = {p->loss, p->val};
    for (int k = 0; k < 2; k++)
      if (isfinite(losses[k]))
        s->lmin = fmin(s->lmin, losses[k]), s->lmax = fmax(s->lmax, losses[k]);
    if (isfinite(p->tps))
      s->tmax = fmax(s->tmax, p->tps);
  }
  s->seg_start[s->n_seg] = s->n;
  if (by_time) { /* seconds for a short run, minutes up to 3 hours, else hours */
    double span = s->n ? s->xmax : 0, unit = span < 180 ? 1 : span < 3 * 3600 ? 60 : 3600;
    s->x_unit = unit == 1 ? "seconds" : unit == 60 ? "minutes" : "hours";
    for (size_t i = 0; i < s->n; i++)
      s->p[i].x /= unit;
    s->xmax /= unit;
    s->time_unit = unit;
    snprintf(s->x_label, sizeof s->x_label, "%s since the first step", s->x_unit);
  }
  smooth_tps(s);
  for (size_t i = 1; i < s->n && !s->from_history; i++)
    find_events(s, i);
  if (s->from_history)
    history_events(s, h);
  else
    snprintf(s->counts, sizeof s->counts, "%d failure%s, %d recover%s", s->failures,
             s->failures == 1 ? "" : "s", s->recoveries, s->recoveries == 1 ? "y" : "ies");
  if (!isfinite(s->lmin))
    s->lmin = 0, s->lmax = 1;
  if (s->lmax - s->lmin < 1e-9)
    s->lmin -= 0.5, s->lmax += 0.5;
  double pad = 0.05 * (s->lmax - s->lmin);
  s->lmin -= pad, s->lmax += pad;
  s->tmax = s->tmax > 0 ? s->tmax * 1.08 : 1;
  if (s->xmax <= s->xmin)
    s->xmax = s->xmin + 1;
  return 1;
}

static void series_free(series *s) {
  free(s->p);
  free(s->seg_start);
  free(s->ev);
}

/* ---------------------------------------------------------------------------------------- */
/* SVG                                                                                      */

enum { SVG_W = 960, SVG_H = 660, LEFT = 80, RIGHT = SVG_W - 30 };
typedef struct panel {
  double top, bottom, ymin, ymax;
} panel;

static double px(const series *s, double x) {
  return LEFT + (x - s->xmin) / (s->xmax - s->xmin) * (RIGHT - LEFT);
}

static double py(const panel *p, double y) {
  return p->bottom - (y - p->ymin) / (p->ymax - p->ymin) * (p->bottom - p->top);
}

/* A round tick spacing: 1, 2 or 5 times a power of ten, about n ticks over the range. */
static double tick_step(double range, int n) {
  double raw = range / n, mag = pow(10, floor(log10(raw)));
  double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

enum { LABEL_ROWS = 8 };
#define LABEL_CHAR_PX 6.2 /* font-size 11 sans: the width of one character, about */

/* Whether the label of e is drawn to the left of its marker (markers in the right half). */
static int label_left(const series *s, const event *e) { return px(s, e->x) > (LEFT + RIGHT) / 2.0; }

/* Gives each label the first row (from the top) where it overlaps no other label, markers in
 * the order of x; a label for which no row has room gets -1 and is shown only as the
 * marker's tooltip. The SVG and the PNG use the same rows. */
static void layout_labels(series *s) {
  double lo[LABEL_ROWS][64], hi[LABEL_ROWS][64];
  int used[LABEL_ROWS] = {0};
  size_t *order = malloc((s->n_ev + 1) * sizeof *order);
  if (!order) {
    for (size_t i = 0; i < s->n_ev; i++)
      s->ev[i].row = (int)(i % LABEL_ROWS);
    return;
  }
  for (size_t i = 0; i < s->n_ev; i++)
    order[i] = i;
  for (size_t i = 1; i < s->n_ev; i++) /* insertion sort by x: few markers */
    for (size_t j = i; j > 0 && s->ev[order[j]].x < s->ev[order[j - 1]].x; j--) {
      size_t t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  for (size_t k = 0; k < s->n_ev; k++) {
    event *e = &s->ev[order[k]];
    double x = px(s, e->x), w = LABEL_CHAR_PX * (double)strlen(e->label) + 8;
    double a = label_left(s, e) ? x - w : x, b = label_left(s, e) ? x : x + w;
    e->row = -1;
    for (int r = 0; r < LABEL_ROWS && e->row < 0; r++) {
      int free_here = used[r] < 64;
      for (int j = 0; j < used[r] && free_here; j++)
        free_here = b < lo[r][j] || a > hi[r][j];
      if (free_here) {
        lo[r][used[r]] = a, hi[r][used[r]] = b, used[r]++;
        e->row = r;
      }
    }
  }
  free(order);
}

/* A control character (which XML 1.0 cannot hold, nor a gnuplot line) as shown in a label. */
static int is_control(char c) {
  return (unsigned char)c < 0x20 || c == 0x7f;
}

static void svg_text_escaped(FILE *f, const char *t) {
  for (; *t; t++) {
    if (*t == '<')
      fputs("&lt;", f);
    else if (*t == '>')
      fputs("&gt;", f);
    else if (*t == '&')
      fputs("&amp;", f);
    else
      fputc(is_control(*t) ? '?' : *t, f);
  }
}

static void svg_axes(FILE *f, const series *s, const panel *p, const char *ylabel, int xlabels) {
  fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n",
          LEFT, p->top, RIGHT - LEFT, p->bottom - p->top);
  double dy = tick_step(p->ymax - p->ymin, 5);
  for (double y = ceil(p->ymin / dy) * dy; y <= p->ymax; y += dy)
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>"
               "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%g</text>\n",
            LEFT, py(p, y), RIGHT, py(p, y), LEFT - 6, py(p, y) + 4, y);
  double dx = tick_step(s->xmax - s->xmin, 8);
  for (double x = ceil(s->xmin / dx) * dx; x <= s->xmax; x += dx) {
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>", px(s, x),
            p->bottom, px(s, x), p->bottom + 4);
    if (xlabels)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%g</text>", px(s, x),
              p->bottom + 17, x);
    fputc('\n', f);
  }
  fprintf(f, "<text transform=\"translate(20,%.1f) rotate(-90)\" text-anchor=\"middle\" "
             "font-size=\"13\">%s</text>\n", (p->top + p->bottom) / 2, ylabel);
}

/* One polyline per segment of the field at offset `field` (NAN values skipped). */
static void svg_lines(FILE *f, const series *s, const panel *p, size_t field, const char *cls,
                      const char *color, int dots, double opacity) {
  for (size_t g = 0; g < s->n_seg; g++) {
    int open = 0;
    for (size_t i = s->seg_start[g]; i < s->seg_start[g + 1]; i++) {
      double y = *(const double *)((const char *)&s->p[i] + field);
      if (!isfinite(y))
        continue;
      if (!open)
        fprintf(f, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-opacity=\"%.2f\" "
                   "stroke-width=\"1.5\" points=\"", cls, color, opacity);
      fprintf(f, "%s%.1f,%.1f", open ? " " : "", px(s, s->p[i].x), py(p, y));
      open = 1;
    }
    if (open)
      fputs("\"/>\n", f);
    for (size_t i = s->seg_start[g]; dots && i < s->seg_start[g + 1]; i++) {
      double y = *(const double *)((const char *)&s->p[i] + field);
      if (isfinite(y))
        fprintf(f, "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", cls,
                px(s, s->p[i].x), py(p, y), color);
    }
  }
}

/* The markers: a vertical line through both panels and a label, in a group whose class
 * names the kind (failure, recovery, world-change). Labels of nearby markers are staggered. */
static void svg_events(FILE *f, const series *s, const panel *top, const panel *bottom) {
  for (size_t i = 0; i < s->n_ev; i++) {
    const event *e = &s->ev[i];
    double x = px(s, e->x), label_y = top->top + 14 + 14 * (double)e->row;
    fprintf(f, "<g class=\"%s\"><title>", event_class[e->kind]);
    svg_text_escaped(f, e->label);
    fprintf(f, "</title><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
               "stroke-width=\"1.5\" stroke-dasharray=\"%s\"/>",
            x, top->top, x, bottom->bottom, event_color[e->kind],
            e->kind == EV_FAILURE ? "6,3" : e->kind == EV_RECOVERY || e->kind == EV_JOIN ? "2,2" : "1,4");
    if (e->kind == EV_RECOVERY || e->kind == EV_JOIN || e->kind == EV_RESUME)
      fprintf(f, "<path d=\"M%.1f,%.1f l-5,-9 h10 z\" fill=\"%s\"/>", x, top->top, event_color[e->kind]);
    int right = label_left(s, e);
    if (e->row >= 0) {
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"%s\" text-anchor=\"%s\">",
              x + (right ? -4 : 4), label_y, event_color[e->kind], right ? "end" : "start");
      svg_text_escaped(f, e->label);
      fputs("</text>", f);
    }
    fputs("</g>\n", f);
  }
}

static void svg_legend(FILE *f, const series *s) {
  const struct {
    const char *name, *color;
  } lines[] = {{"train loss", "#1f77b4"}, {"validation loss", "#ff7f0e"}, {"tokens/s (smoothed)", "#9467bd"}};
  double x = LEFT;
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    fprintf(f, "<rect x=\"%.0f\" y=\"%d\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%.0f\" y=\"%d\" "
               "font-size=\"12\">%s</text>\n", x, SVG_H - 22, lines[i].color, x + 18, SVG_H - 16, lines[i].name);
    x += 30 + 7.0 * (double)strlen(lines[i].name);
  }
  for (int k = 0; k < EV_KINDS; k++) { /* the kinds of marker this plot has */
    int present = 0;
    for (size_t i = 0; i < s->n_ev && !present; i++)
      present = s->ev[i].kind == (event_kind)k;
    if (!present)
      continue;
    fprintf(f, "<rect x=\"%.0f\" y=\"%d\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%.0f\" y=\"%d\" "
               "font-size=\"12\">%s</text>\n", x, SVG_H - 22, event_color[k], x + 18, SVG_H - 16, event_legend[k]);
    x += 30 + 7.0 * (double)strlen(event_legend[k]);
  }
}

static tagc_status write_svg(const series *s, const char *title, const char *path) {
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f)
    return tagc_errnof(TAGC_EIO, "%s", tmp);
  panel top = {50, 360, s->lmin, s->lmax}, bottom = {400, 590, 0, s->tmax};
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
             "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%d\" y=\"28\" font-size=\"15\">",
          SVG_W, SVG_H, SVG_W, SVG_H, LEFT);
  svg_text_escaped(f, title);
  fputs("</text>\n", f);
  svg_axes(f, s, &top, "loss", 0);
  svg_axes(f, s, &bottom, "tokens/s", 1);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">%s</text>\n",
          (LEFT + RIGHT) / 2, 627, s->by_time ? s->x_label : "step");
  svg_lines(f, s, &top, offsetof(point, loss), "train-loss", "#1f77b4", 0, 1.0);
  svg_lines(f, s, &top, offsetof(point, val), "val-loss", "#ff7f0e", 1, 1.0);
  svg_lines(f, s, &bottom, offsetof(point, tps), "tokens-per-s", "#9467bd", 0, 0.25);
  svg_lines(f, s, &bottom, offsetof(point, smooth), "tokens-per-s-smoothed", "#9467bd", 0, 1.0);
  svg_events(f, s, &top, &bottom);
  svg_legend(f, s);
  fputs("</svg>\n", f);
  int ok = !ferror(f);
  ok = fclose(f) == 0 && ok && rename(tmp, path) == 0;
  if (ok)
    return TAGC_OK;
  tagc_status st = tagc_errnof(TAGC_EIO, "%s was not written", path);
  unlink(tmp);
  return st;
}

/* ---------------------------------------------------------------------------------------- */
/* PNG through gnuplot                                                                      */

static int have_gnuplot(void) {
  const char *path = getenv("PATH");
  char dir[4096];
  for (const char *p = path ? path : ""; *p;) {
    size_t n = strcspn(p, ":");
    snprintf(dir, sizeof dir, "%.*s/gnuplot", (int)n, p);
    if (n && access(dir, X_OK) == 0)
      return 1;
    p += n + (p[n] == ':');
  }
  return 0;
}

/* A gnuplot string in single quotes: a quote doubled, a control character (a newline would end
 * the command and start another) shown as '?'. Inside single quotes gnuplot expands neither
 * backquotes nor @ macros nor backslashes. */
static void gp_string(FILE *g, const char *t) {
  fputc('\'', g);
  for (; *t; t++) {
    if (*t == '\'')
      fputc('\'', g);
    fputc(is_control(*t) ? '?' : *t, g);
  }
  fputc('\'', g);
}

static int gp_block(FILE *g, const series *s, const char *name, size_t field) {
  int points = 0;
  fprintf(g, "$%s << EOD\n", name);
  for (size_t k = 0; k < s->n_seg; k++) {
    for (size_t i = s->seg_start[k]; i < s->seg_start[k + 1]; i++) {
      double y = *(const double *)((const char *)&s->p[i] + field);
      if (isfinite(y))
        fprintf(g, "%.9g %.9g\n", s->p[i].x, y), points++;
    }
    fputs("\n", g); /* a blank line breaks the line between segments */
  }
  fputs("EOD\n", g);
  return points;
}

/* The script: the data inline, no file name in it (the image goes to gnuplot's stdout). */
static void gp_script(FILE *g, const series *s, const char *title) {
  fputs("set terminal pngcairo noenhanced size 1000,700 font 'sans,10'\nset output\n", g);
  gp_block(g, s, "loss", offsetof(point, loss));
  int vals = gp_block(g, s, "val", offsetof(point, val));
  gp_block(g, s, "tps", offsetof(point, tps));
  gp_block(g, s, "tpsavg", offsetof(point, smooth));
  fprintf(g, "set xrange [%g:%g]\nset grid ytics\nset key inside right bottom opaque\nset lmargin 10\nset rmargin 4\n", s->xmin, s->xmax);
  for (size_t i = 0; i < s->n_ev; i++) {
    const event *e = &s->ev[i];
    fprintf(g, "set arrow from %g, graph 0 to %g, graph 1 nohead lc rgb '%s' dt %d lw 1.5\n", e->x,
            e->x, event_color[e->kind], e->kind == EV_FAILURE ? 2 : 3);
    if (e->row < 0)
      continue;
    int left = label_left(s, e);
    fprintf(g, "set label %zu ", i + 1);
    gp_string(g, e->label);
    fprintf(g, " at %g, graph %.3f %s tc rgb '%s' font 'sans,8' offset %s0.5,0\n", e->x,
            0.96 - 0.075 * (double)e->row, left ? "right" : "left", event_color[e->kind],
            left ? "-" : "");
  }
  fputs("set multiplot layout 2,1 title ", g);
  gp_string(g, title);
  fputs("\nset ylabel 'loss'\nplot $loss with lines lw 1.5 lc rgb '#1f77b4' title 'train'", g);
  if (vals)
    fputs(", $val with linespoints pt 7 ps 0.6 lc rgb '#ff7f0e' title 'validation'", g);
  fprintf(g, "\nunset label\nset ylabel 'tokens/s'\nset xlabel '%s'\nset yrange [0:*]\n"
          "plot $tps with lines lw 1 lc rgb '#d8cce6' title 'tokens/s', $tpsavg with lines lw 1.5 "
          "lc rgb '#9467bd' title 'smoothed'\nunset multiplot\n",
          s->by_time ? s->x_label : "step");
}

/* Runs gnuplot with the script on its stdin and its stdout on `out_fd`; returns its exit status
 * (-1 when it could not be started). SIGPIPE is ignored meanwhile, so a gnuplot that dies
 * early fails the write instead of killing tagctl. */
static int run_gnuplot(const series *s, const char *title, int out_fd) {
  int script[2];
  if (pipe(script) != 0)
    return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, script[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, script[1]);
  char *argv[] = {"gnuplot", NULL};
  pid_t pid;
  int spawned = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ) == 0;
  posix_spawn_file_actions_destroy(&fa);
  close(script[0]);
  if (!spawned) {
    close(script[1]);
    return -1;
  }
  void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
  FILE *g = fdopen(script[1], "w");
  if (g) {
    gp_script(g, s, title);
    fclose(g);
  } else {
    close(script[1]);
  }
  signal(SIGPIPE, old_pipe);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The PNG goes to PATH.tmp through gnuplot's stdout and is renamed to PATH once whole: the
 * path never enters the script, whatever characters it holds. */
static tagc_status write_png(const series *s, const char *title, const char *path) {
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return tagc_errnof(TAGC_EIO, "%s", tmp);
  int status = run_gnuplot(s, title, fd);
  struct stat sb;
  int whole = status == 0 && fstat(fd, &sb) == 0 && sb.st_size > 0;
  whole = close(fd) == 0 && whole;
  if (whole && rename(tmp, path) == 0)
    return TAGC_OK;
  tagc_status st = whole ? tagc_errnof(TAGC_EIO, "%s was not written", path)
                         : tagc_errorf(TAGC_EIO, "%s was not written (gnuplot failed)", path);
  unlink(tmp);
  return st;
}

/* ---------------------------------------------------------------------------------------- */

static void default_path(char *buf, size_t cap, const char *out, const char *name) {
  struct stat sb;
  if (stat(out, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    snprintf(buf, cap, "%s/%s", out, name);
  } else { /* OUT was the metrics file: write beside it */
    const char *slash = strrchr(out, '/');
    snprintf(buf, cap, "%.*s%s", slash ? (int)(slash - out + 1) : 0, out, name);
  }
}

typedef tagc_status (*image_writer)(const series *s, const char *title, const char *path);

/* Writes one image to `chosen`, or to `name` beside the metrics when that is empty, and
 * prints its path. Returns the exit status. */
static int emit(image_writer write, const series *s, const char *title, const char *chosen,
                const char *out, const char *name) {
  char path[4200];
  if (*chosen)
    snprintf(path, sizeof path, "%s", chosen);
  else
    default_path(path, sizeof path, out, name);
  if (write(s, title, path) != TAGC_OK) {
    fprintf(stderr, "tagctl plot: %s\n", tagc_last_error());
    return 1;
  }
  printf("%s\n", path);
  return 0;
}

static int plot(const plot_args *a, const char *out) {
  int png_asked = *a->png != 0, gnuplot = have_gnuplot();
  if (png_asked && !gnuplot) {
    fprintf(stderr, "tagctl plot: --png needs gnuplot, which is not in PATH (install gnuplot-nox)\n");
    return 1;
  }
  tagctl_metrics_rows m;
  tagc_status st = tagctl_metrics_read(out, &m);
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl plot: %s\n", tagc_last_error());
    return st == TAGC_ENOTFOUND ? 2 : 1;
  }
  series s;
  int rc = 0;
  tagc_history h; /* OUT/history.jsonl: what each event was (none beside a bare metrics file) */
  char hist_dir[4200];
  struct stat sb;
  snprintf(hist_dir, sizeof hist_dir, "%s", out);
  if (!(stat(out, &sb) == 0 && S_ISDIR(sb.st_mode))) {
    char *slash = strrchr(hist_dir, '/');
    snprintf(hist_dir, sizeof hist_dir, "%.*s", slash ? (int)(slash - out) : 1, slash ? out : ".");
  }
  int have_hist = tagc_history_read(hist_dir, &h) == TAGC_OK;
  if (!have_hist)
    tagc_clear_error();
  if (!series_build(&m, have_hist ? &h : NULL, !strcmp(a->x, "time"), &s)) {
    fprintf(stderr, "tagctl plot: out of memory\n");
    rc = 1;
  } else if (s.n == 0) {
    fprintf(stderr, "tagctl plot: %s holds no steps\n", m.path);
    rc = 1;
  }
  char title[512];
  if (rc == 0) {
    double first = s.p[0].step, last = s.p[0].step;
    for (size_t i = 0; i < s.n; i++)
      first = fmin(first, s.p[i].step), last = fmax(last, s.p[i].step);
    snprintf(title, sizeof title, "%s: steps %.0f-%.0f, %s", out, first, last, s.counts);
    layout_labels(&s);
    rc = emit(write_svg, &s, title, a->svg, out, "plot.svg");
  }
  if (rc == 0 && gnuplot)
    rc = emit(write_png, &s, title, a->png, out, "plot.png");
  if (m.skipped)
    fprintf(stderr, "tagctl plot: %s: %zu line%s not a JSON object (skipped)\n", m.path, m.skipped,
            m.skipped == 1 ? " is" : "s are");
  series_free(&s);
  if (have_hist)
    tagc_history_free(&h);
  tagctl_metrics_free(&m);
  return rc;
}

int tagctl_plot(int argc, char **argv) {
  tagc_opt_program prog = {"tagctl plot", "OUT [--svg FILE] [--png FILE] [--x step|time]",
                           "Draws train and validation loss and tokens/s against step from "
                           "OUT/metrics.jsonl, marking each failure (by kind), join, leave, interrupt and "
                           "resume that OUT/history.jsonl records (without it, failures, "
                           "recoveries and world-size changes seen in the metrics): "
                           "an SVG, and a PNG when gnuplot is installed.",
                           plot_opts, sizeof plot_opts / sizeof plot_opts[0]};
  plot_args args = {0};
  char *out = NULL;
  int rc = tagctl_parse_file_args(&prog, &args, argc, argv, &out, 1);
  if (rc < 0)
    rc = plot(&args, out);
  tagc_opts_free(&prog, &args);
  return rc;
}
