/* Host-side helpers shared by the CPU backend: fp32 <-> bf16 conversion and the fixed-order
 * reduction of equal rows. Internal to comm/. */
#ifndef TAGC_COMM_REDUCE_HOST_H
#define TAGC_COMM_REDUCE_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rounds n floats to bf16, round to nearest even; NaNs stay (quiet) NaNs. */
void comm_f32_to_bf16(uint16_t *dst, const float *src, size_t n);

/* out = row 0 (op) row 1 (op) ... (op) row nrows-1, elementwise, in that order. rows hold
 * nrows * count elements of the wire type (bf16 when wire is TAGC_WIRE_BF16, else dtype);
 * out holds count elements of dtype and must not overlap rows. The caller has validated the
 * (dtype, op, wire) combination. */
void comm_reduce_rows(void *out, const void *rows, int nrows, size_t count, tagc_dtype dtype,
                      tagc_redop op, tagc_wire wire);

#ifdef __cplusplus
}
#endif

#endif
