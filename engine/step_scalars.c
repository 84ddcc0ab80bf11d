/* The per-step scalar exchange (step_scalars.h): its table of fields and their reductions. */
#include "engine/step_scalars.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* OP_EACH: the maximum, and each rank's value in compute_ranks */
typedef enum { OP_SUM, OP_MAX, OP_MIN, OP_EACH } scalar_op;

/* The fields in wire order: a double of the struct, or (per_segment) an array of n_segs. */
static const struct field {
  size_t at;
  int per_segment;
  scalar_op op;
} fields[] = {
    {offsetof(tagc_step_scalars, loss), 0, OP_SUM},
    {offsetof(tagc_step_scalars, sumsq), 0, OP_SUM},
    {offsetof(tagc_step_scalars, estimated), 0, OP_SUM},
    {offsetof(tagc_step_scalars, fb_in), 0, OP_SUM},
    {offsetof(tagc_step_scalars, fb_out), 0, OP_SUM},
    {offsetof(tagc_step_scalars, fb_abs), 0, OP_SUM},
    {offsetof(tagc_step_scalars, nonfinite), 0, OP_SUM},
    {offsetof(tagc_step_scalars, cannot_hold), 0, OP_SUM},
    {offsetof(tagc_step_scalars, global_bits), 1, OP_SUM},
    {offsetof(tagc_step_scalars, lane_density), 1, OP_MAX},
    {offsetof(tagc_step_scalars, link_rate), 0, OP_MIN},
    {offsetof(tagc_step_scalars, codec_s), 1, OP_MAX},
    {offsetof(tagc_step_scalars, save_due), 0, OP_SUM},
    {offsetof(tagc_step_scalars, copy_due), 0, OP_SUM},
    {offsetof(tagc_step_scalars, stop_due), 0, OP_SUM},
    {offsetof(tagc_step_scalars, compute_s), 0, OP_EACH},
    {offsetof(tagc_step_scalars, clock_s), 0, OP_MAX},
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

/* The doubles of field f in x, and how many. */
static double *field_values(tagc_step_scalars *x, const struct field *f, size_t *n) {
  char *base = (char *)x + f->at;
  *n = f->per_segment ? (size_t)x->n_segs : 1;
  return f->per_segment ? *(double **)base : (double *)base;
}

tagc_status tagc_step_scalars_init(tagc_step_scalars *x, int n_segs, int world) {
  memset(x, 0, sizeof *x);
  x->n_segs = n_segs;
  x->world = world;
  size_t n = n_segs > 0 ? (size_t)n_segs : 1;
  x->global_bits = calloc(n, sizeof(double));
  x->lane_density = calloc(n, sizeof(double));
  x->codec_s = calloc(n, sizeof(double));
  x->compute_ranks = calloc(world > 0 ? (size_t)world : 1, sizeof(double));
  if (!x->global_bits || !x->lane_density || !x->codec_s || !x->compute_ranks) {
    tagc_step_scalars_free(x);
    return tagc_errorf(TAGC_ENOMEM, "per-step scalars of %d segments", n_segs);
  }
  return TAGC_OK;
}

void tagc_step_scalars_free(tagc_step_scalars *x) {
  free(x->global_bits);
  free(x->lane_density);
  free(x->codec_s);
  free(x->compute_ranks);
  x->global_bits = x->lane_density = x->codec_s = x->compute_ranks = NULL;
}

void tagc_step_scalars_clear(tagc_step_scalars *x) {
  for (size_t f = 0; f < N_FIELDS; f++) {
    size_t n;
    double *v = field_values(x, &fields[f], &n);
    memset(v, 0, n * sizeof(double));
  }
  memset(x->compute_ranks, 0, (size_t)(x->world > 0 ? x->world : 1) * sizeof(double));
}

size_t tagc_step_scalars_count(const tagc_step_scalars *x) {
  size_t count = 0;
  for (size_t f = 0; f < N_FIELDS; f++)
    count += fields[f].per_segment ? (size_t)x->n_segs : 1;
  return count;
}

void tagc_step_scalars_pack(const tagc_step_scalars *x, double *out) {
  for (size_t f = 0; f < N_FIELDS; f++) {
    size_t n;
    const double *v = field_values((tagc_step_scalars *)x, &fields[f], &n);
    memcpy(out, v, n * sizeof(double));
    out += n;
  }
}

void tagc_step_scalars_reduce(tagc_step_scalars *x, const double *all, int world) {
  size_t count = tagc_step_scalars_count(x), k = 0;
  for (size_t f = 0; f < N_FIELDS; f++) {
    size_t n;
    double *v = field_values(x, &fields[f], &n);
    for (size_t i = 0; i < n; i++, k++) {
      scalar_op op = fields[f].op;
      double acc = op == OP_SUM ? 0 : all[k];
      for (int r = 0; r < world; r++) {
        double y = all[(size_t)r * count + k];
        if (op == OP_EACH && r < x->world)
          x->compute_ranks[r] = y;
        acc = op == OP_SUM ? acc + y : op == OP_MIN ? fmin(acc, y) : fmax(acc, y);
      }
      v[i] = acc;
    }
  }
}
