/* Compressed-unit wire format: explicit little-endian (de)serialisation (see wire.h). */
#include "kernels/wire.h"

#include <stdio.h>
#include <string.h>

#include "common/crc32c.h"
#include "kernels/layout.h"

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static uint64_t dtype_bytes(uint16_t dtype) {
  return dtype == TAGC_WIRE_DTYPE_FP32 ? 4 : (dtype == TAGC_WIRE_DTYPE_BF16 ? 2 : 0);
}

/* Section sizes of h; TAGC_EINVAL with a detail when the header is inconsistent. */
static tagc_status section_bytes(const tagc_wire_header *h, uint64_t *sketch, uint64_t *bitmap) {
  uint64_t esize = dtype_bytes(h->dtype);
  if (!esize)
    return tagc_errorf(TAGC_EINVAL, "wire: unknown dtype %u", h->dtype);
  if (h->world < 1 || h->shard >= h->world)
    return tagc_errorf(TAGC_EINVAL, "wire: shard %u of world %u", h->shard, h->world);
  if (h->sections & ~(TAGC_WIRE_SKETCH | TAGC_WIRE_BITMAP))
    return tagc_errorf(TAGC_EINVAL, "wire: unknown section bits 0x%x", h->sections);
  if (h->shard_numel < 1 || h->shard_numel >= ((uint64_t)1 << 32))
    return tagc_errorf(TAGC_EINVAL, "wire: shard_numel %llu out of range",
                       (unsigned long long)h->shard_numel);
  if (h->lanes > TAGC_LANES_MAX)
    return tagc_errorf(TAGC_EINVAL, "wire: %u lanes", h->lanes);
  int64_t rows;
  TAGC_CHECK(tagc_layout_rows((int64_t)h->shard_numel, (int32_t)h->lanes, h->rho, &rows));
  if ((uint64_t)rows != h->rows)
    return tagc_errorf(TAGC_EINVAL,
                       "wire: rows %llu, layout of %llu elements in %u lanes at rho %g has %lld",
                       (unsigned long long)h->rows, (unsigned long long)h->shard_numel, h->lanes,
                       h->rho, (long long)rows);
  uint64_t padded = (h->shard_numel + TAGC_PAD - 1) / TAGC_PAD * TAGC_PAD;
  *sketch = (h->sections & TAGC_WIRE_SKETCH) ? h->rows * h->lanes * esize : 0;
  *bitmap = (h->sections & TAGC_WIRE_BITMAP) ? padded / 8 : 0;
  if (*sketch + *bitmap > TAGC_WIRE_MAX_PAYLOAD)
    return tagc_errorf(TAGC_EINVAL, "wire: payload %llu bytes over the limit",
                       (unsigned long long)(*sketch + *bitmap));
  return TAGC_OK;
}

tagc_status tagc_wire_payload_bytes(const tagc_wire_header *h, uint64_t *bytes) {
  if (!h || !bytes)
    return tagc_errorf(TAGC_EINVAL, "wire: NULL argument");
  uint64_t s = 0, b = 0;
  TAGC_CHECK(section_bytes(h, &s, &b));
  *bytes = s + b;
  return TAGC_OK;
}

static void write_header(const tagc_wire_header *h, uint8_t *p) {
  uint64_t rho_bits;
  memcpy(&rho_bits, &h->rho, sizeof rho_bits);
  put32(p + 0, TAGC_WIRE_MAGIC);
  put16(p + 4, h->version);
  put16(p + 6, h->dtype);
  put64(p + 8, h->unit_id);
  put64(p + 16, h->step);
  put32(p + 24, h->world);
  put32(p + 28, h->shard);
  put64(p + 32, h->shard_numel);
  put64(p + 40, h->rows);
  put64(p + 48, rho_bits);
  put32(p + 56, h->seed);
  put32(p + 60, h->sections);
  put64(p + 64, h->payload_bytes);
  put32(p + 72, h->payload_crc);
  put32(p + 76, h->lanes);
  put32(p + TAGC_WIRE_HEADER_CRC_AT, tagc_crc32c(0, p, TAGC_WIRE_HEADER_CRC_AT));
}

static void read_header(const uint8_t *p, tagc_wire_header *h) {
  uint64_t rho_bits = get64(p + 48);
  h->version = get16(p + 4);
  h->dtype = get16(p + 6);
  h->unit_id = get64(p + 8);
  h->step = get64(p + 16);
  h->world = get32(p + 24);
  h->shard = get32(p + 28);
  h->shard_numel = get64(p + 32);
  h->rows = get64(p + 40);
  memcpy(&h->rho, &rho_bits, sizeof h->rho);
  h->seed = get32(p + 56);
  h->sections = get32(p + 60);
  h->payload_bytes = get64(p + 64);
  h->payload_crc = get32(p + 72);
  h->lanes = get32(p + 76);
  h->header_crc = get32(p + TAGC_WIRE_HEADER_CRC_AT);
}

tagc_status tagc_wire_encode(const tagc_wire_header *h, const void *sketch,
                             const uint64_t *bitmap, uint8_t *buf, size_t cap, size_t *len) {
  if (!h || !buf || !len)
    return tagc_errorf(TAGC_EINVAL, "wire: NULL argument");
  tagc_wire_header out = *h;
  out.version = TAGC_WIRE_VERSION;
  uint64_t sk = 0, bm = 0;
  TAGC_CHECK(section_bytes(&out, &sk, &bm));
  if ((sk && !sketch) || (bm && !bitmap))
    return tagc_errorf(TAGC_EINVAL, "wire: a section named in the header has no data");
  uint64_t total = TAGC_WIRE_HEADER_BYTES + sk + bm;
  if (total > cap)
    return tagc_errorf(TAGC_EINVAL, "wire: need %llu bytes, buffer has %zu",
                       (unsigned long long)total, cap);
  uint8_t *payload = buf + TAGC_WIRE_HEADER_BYTES;
  if (sk)
    memcpy(payload, sketch, sk);
  if (bm)
    memcpy(payload + sk, bitmap, bm);
  out.payload_bytes = sk + bm;
  out.payload_crc = tagc_crc32c(0, payload, sk + bm);
  write_header(&out, buf);
  *len = (size_t)total;
  return TAGC_OK;
}

tagc_status tagc_wire_decode(const uint8_t *buf, size_t len, tagc_wire_header *h,
                             tagc_wire_view *view) {
  if (!h || !view || (!buf && len))
    return tagc_errorf(TAGC_EINVAL, "wire: NULL argument");
  if (len < TAGC_WIRE_HEADER_BYTES)
    return tagc_errorf(TAGC_ECORRUPT, "wire: %zu bytes, shorter than the %d-byte header", len,
                       TAGC_WIRE_HEADER_BYTES);
  if (get32(buf) != TAGC_WIRE_MAGIC)
    return tagc_errorf(TAGC_ECORRUPT, "wire: bad magic 0x%08x", get32(buf));
  if (get16(buf + 4) != TAGC_WIRE_VERSION)
    return tagc_errorf(TAGC_ECORRUPT, "wire: version %u, expected %d", get16(buf + 4),
                       TAGC_WIRE_VERSION);
  read_header(buf, h);
  if (tagc_crc32c(0, buf, TAGC_WIRE_HEADER_CRC_AT) != h->header_crc)
    return tagc_errorf(TAGC_ECORRUPT, "wire: header CRC mismatch");
  uint64_t sk = 0, bm = 0;
  if (section_bytes(h, &sk, &bm) != TAGC_OK) {
    char detail[256];
    snprintf(detail, sizeof detail, "%s", tagc_last_error());
    return tagc_errorf(TAGC_ECORRUPT, "%s", detail);
  }
  if (h->payload_bytes != sk + bm)
    return tagc_errorf(TAGC_ECORRUPT, "wire: payload_bytes %llu, geometry needs %llu",
                       (unsigned long long)h->payload_bytes, (unsigned long long)(sk + bm));
  if ((uint64_t)len - TAGC_WIRE_HEADER_BYTES != sk + bm)
    return tagc_errorf(TAGC_ECORRUPT, "wire: %s input: %zu bytes, expected %llu",
                       (uint64_t)len - TAGC_WIRE_HEADER_BYTES < sk + bm ? "truncated" : "oversized",
                       len, (unsigned long long)(TAGC_WIRE_HEADER_BYTES + sk + bm));
  const uint8_t *payload = buf + TAGC_WIRE_HEADER_BYTES;
  if (tagc_crc32c(0, payload, sk + bm) != h->payload_crc)
    return tagc_errorf(TAGC_ECORRUPT, "wire: payload CRC mismatch");
  view->sketch = sk ? payload : NULL;
  view->sketch_bytes = (size_t)sk;
  view->bitmap = bm ? payload + sk : NULL;
  view->bitmap_bytes = (size_t)bm;
  return TAGC_OK;
}
