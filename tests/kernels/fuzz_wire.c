/* libFuzzer target for the wire decoder. Each input is decoded as is, then again with its
 * header and payload CRCs recomputed (so the fuzzer reaches the geometry checks behind
 * them). Neither may crash; whatever decodes must re-encode to the same bytes. */
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "kernels/wire.h"

static void roundtrip(const uint8_t *buf, size_t len) {
  tagc_wire_header h;
  tagc_wire_view v;
  if (tagc_wire_decode(buf, len, &h, &v) != TAGC_OK)
    return;
  uint8_t *out = malloc(len ? len : 1);
  uint64_t *bitmap = malloc(v.bitmap_bytes ? v.bitmap_bytes : 1);
  size_t n = 0;
  memcpy(bitmap, v.bitmap ? v.bitmap : buf, v.bitmap_bytes);
  if (!out || tagc_wire_encode(&h, v.sketch, bitmap, out, len, &n) != TAGC_OK || n != len ||
      memcmp(out, buf, len) != 0)
    abort();
  free(out);
  free(bitmap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  roundtrip(data, size);
  if (size < TAGC_WIRE_HEADER_BYTES)
    return 0;
  uint8_t *copy = malloc(size);
  memcpy(copy, data, size);
  uint32_t pcrc = tagc_crc32c(0, copy + TAGC_WIRE_HEADER_BYTES, size - TAGC_WIRE_HEADER_BYTES);
  memcpy(copy + 72, &pcrc, 4);
  uint32_t hcrc = tagc_crc32c(0, copy, 76);
  memcpy(copy + 76, &hcrc, 4);
  roundtrip(copy, size);
  free(copy);
  return 0;
}
