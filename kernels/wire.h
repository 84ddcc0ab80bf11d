/* Wire format of a compressed unit sent outside a raw collective buffer (point-to-point
 * transfer, spill to disk, debugging dumps).
 *
 * Little-endian, fixed 84-byte header followed by the payload:
 *   off size field
 *     0    4 magic          "TAGC" = 0x43474154
 *     4    2 version        TAGC_WIRE_VERSION
 *     6    2 dtype          tagc_wire_dtype of the sketch payload
 *     8    8 unit_id
 *    16    8 step
 *    24    4 world          W >= 1
 *    28    4 shard          destination shard, < world
 *    32    8 shard_numel    n >= 1
 *    40    8 rows           R, must equal the layout's rows for (n, lanes, rho)
 *    48    8 rho            IEEE binary64
 *    56    4 seed           sketch hash seed
 *    60    4 sections       bit 0: sketch present, bit 1: bitmap present (others zero)
 *    64    8 payload_bytes  = sketch bytes (R*lanes*dtype size) + bitmap bytes (words*8)
 *    72    4 payload_crc    CRC32C of the payload
 *    76    4 lanes          K, lanes per sketch row: a power of two in [32, 1024]
 *    80    4 header_crc     CRC32C of bytes 0..79
 * Payload: the sketch (R*lanes values, fp32 or bf16) if present, then the bitmap
 * (shard_padded/64 uint64 words) if present, both little-endian (tagc hosts are
 * little-endian, so the payload is the in-memory arrays byte for byte). */
#ifndef TAGC_KERNELS_WIRE_H
#define TAGC_KERNELS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TAGC_WIRE_MAGIC 0x43474154u
#define TAGC_WIRE_VERSION 3 /* 2: per-block lane rotation (kernels/hash.h); 3: lane count */
#define TAGC_WIRE_HEADER_BYTES 84
#define TAGC_WIRE_HEADER_CRC_AT 80 /* offset of header_crc = bytes it covers */
#define TAGC_WIRE_SKETCH 1u
#define TAGC_WIRE_BITMAP 2u
#define TAGC_WIRE_MAX_PAYLOAD ((uint64_t)1 << 36) /* 64 GiB: larger is rejected */

typedef enum tagc_wire_dtype { TAGC_WIRE_DTYPE_FP32 = 0, TAGC_WIRE_DTYPE_BF16 = 1 } tagc_wire_dtype;

/* Host-order view of the header (the encoder fills payload_bytes and the CRCs). */
typedef struct tagc_wire_header {
  uint16_t version;
  uint16_t dtype;
  uint64_t unit_id;
  uint64_t step;
  uint32_t world;
  uint32_t shard;
  uint64_t shard_numel;
  uint64_t rows;
  double rho;
  uint32_t seed;
  uint32_t sections;
  uint64_t payload_bytes;
  uint32_t payload_crc;
  uint32_t lanes;
  uint32_t header_crc;
} tagc_wire_header;

/* Borrowed pointers into a decoded buffer (NULL when the section is absent). Unaligned:
 * copy out with memcpy before use as float / uint16_t / uint64_t arrays. */
typedef struct tagc_wire_view {
  const uint8_t *sketch;
  size_t sketch_bytes;
  const uint8_t *bitmap;
  size_t bitmap_bytes;
} tagc_wire_view;

/* Payload bytes implied by h's dtype, shard_numel, rows and sections. Errors: TAGC_EINVAL
 * for an unknown dtype, bad geometry (rows inconsistent with shard_numel and rho, shard >=
 * world, ...), unknown section bits or a payload above TAGC_WIRE_MAX_PAYLOAD. */
tagc_status tagc_wire_payload_bytes(const tagc_wire_header *h, uint64_t *bytes);

/* Serialises h (version forced to TAGC_WIRE_VERSION, payload_bytes and CRCs computed) and
 * the sections it names: sketch (R*lanes values of h->dtype) and bitmap (shard_padded/64
 * words), borrowed, into buf[cap]; *len = bytes written. Errors: TAGC_EINVAL (bad header,
 * missing section pointer, cap too small). Pure, thread-safe, non-blocking. */
tagc_status tagc_wire_encode(const tagc_wire_header *h, const void *sketch,
                             const uint64_t *bitmap, uint8_t *buf, size_t cap, size_t *len);

/* Validates and parses buf[len]: magic, version, geometry, exact length (truncated and
 * oversized input are errors), both CRCs. Fills *h and *view (pointers into buf).
 * Errors: TAGC_ECORRUPT (with a one-line detail) for any invalid input, TAGC_EINVAL for
 * NULL arguments. Never reads outside buf[0..len). Thread-safe, non-blocking. */
tagc_status tagc_wire_decode(const uint8_t *buf, size_t len, tagc_wire_header *h,
                             tagc_wire_view *view);

#ifdef __cplusplus
}
#endif

#endif
