#include "comm/reduce_host.h"

#include <math.h>
#include <string.h>

static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

void comm_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = f32_to_bf16(src[i]);
}

/* NaN-propagating maximum: a NaN in either operand wins. */
static float max_f32(float a, float b) {
  return (b > a || isnan(b)) ? b : a;
}

static void combine_f32(float *out, const float *in, size_t n, tagc_redop op) {
  if (op == TAGC_REDOP_SUM) {
    for (size_t i = 0; i < n; i++)
      out[i] += in[i];
  } else {
    for (size_t i = 0; i < n; i++)
      out[i] = max_f32(out[i], in[i]);
  }
}

static void combine_bf16_sum(float *out, const uint16_t *in, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] += bf16_to_f32(in[i]);
}

static void combine_u64(uint64_t *out, const uint64_t *in, size_t n, tagc_redop op) {
  switch (op) {
  case TAGC_REDOP_SUM:
    for (size_t i = 0; i < n; i++)
      out[i] += in[i];
    break;
  case TAGC_REDOP_MAX:
    for (size_t i = 0; i < n; i++)
      out[i] = in[i] > out[i] ? in[i] : out[i];
    break;
  case TAGC_REDOP_BOR:
    for (size_t i = 0; i < n; i++)
      out[i] |= in[i];
    break;
  }
}

void comm_reduce_rows(void *out, const void *rows, int nrows, size_t count, tagc_dtype dtype,
                      tagc_redop op, tagc_wire wire) {
  if (wire == TAGC_WIRE_BF16) {
    const uint16_t *r = rows;
    float *o = out;
    for (size_t i = 0; i < count; i++)
      o[i] = bf16_to_f32(r[i]);
    for (int k = 1; k < nrows; k++)
      combine_bf16_sum(o, r + (size_t)k * count, count);
  } else if (dtype == TAGC_DTYPE_F32) {
    memcpy(out, rows, count * sizeof(float));
    for (int k = 1; k < nrows; k++)
      combine_f32(out, (const float *)rows + (size_t)k * count, count, op);
  } else {
    memcpy(out, rows, count * sizeof(uint64_t));
    for (int k = 1; k < nrows; k++)
      combine_u64(out, (const uint64_t *)rows + (size_t)k * count, count, op);
  }
}
