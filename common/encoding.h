/* The wire vocabulary: how a gradient segment or a parameter gather is encoded on the wire.
 * One enum for the gradient codec, the parameter gathers, the comm layer's reduce-scatter,
 * `--compress auto`, metrics and checkpoints; its names are what metrics.jsonl, summary.json,
 * logs and checkpoint manifests say ("sketch", "bf16", "fp32", "int8").
 *
 *   sketch  TAGC-2: sparsify with error feedback + OR index + count sketch (bf16 cells)
 *   bf16    dense, bf16 elements (fp32 accumulation at the owner)
 *   fp32    dense fp32
 *   int8    dense blockwise int8 (kernels/q8.h: one fp32 scale per 256 elements); gradients
 *           by all-to-all, summed by the owner, the rounding error kept by error feedback
 *
 * The order is that of metrics' `paths` and of the cost arrays of engine/auto_policy.h. */
#ifndef TAGC_COMMON_ENCODING_H
#define TAGC_COMMON_ENCODING_H

#include "common/status.h"

typedef enum tagc_encoding {
  TAGC_ENC_SKETCH = 0,
  TAGC_ENC_BF16,
  TAGC_ENC_FP32,
  TAGC_ENC_INT8,
  TAGC_ENC_COUNT
} tagc_encoding;

/* A set of encodings, as bits. */
#define TAGC_ENC_BIT(e) (1u << (unsigned)(e))
#define TAGC_ENC_DENSE (TAGC_ENC_BIT(TAGC_ENC_BF16) | TAGC_ENC_BIT(TAGC_ENC_FP32) | TAGC_ENC_BIT(TAGC_ENC_INT8))
#define TAGC_ENC_ALL (TAGC_ENC_DENSE | TAGC_ENC_BIT(TAGC_ENC_SKETCH))

/* "sketch", "bf16", "fp32" or "int8"; "?" for anything else. */
const char *tagc_encoding_name(tagc_encoding e);

/* The encoding named `name` among those in `allowed`. TAGC_EINVAL with a detail listing the
 * allowed names otherwise (what = what is being chosen, e.g. "--gather"). */
tagc_status tagc_encoding_parse(const char *name, unsigned allowed, const char *what,
                                tagc_encoding *out);

#endif
