/* Wire format: round trips (fp32 and bf16 sketches, with and without bitmap), and the
 * decoder rejects truncated, oversized, wrong-magic, wrong-version, bad-CRC, inconsistent
 * and every single-bit-flipped input with TAGC_ECORRUPT. */
#include "common/crc32c.h"
#include "common/status.h"
#include "kernels/layout.h"
#include "kernels/wire.h"
#include "kgen.h"
#include "test.h"

static tagc_wire_header make_header(uint64_t numel, int32_t lanes, double rho, uint16_t dtype,
                                    uint32_t sections) {
  tagc_wire_header h = {0};
  int64_t rows = 0;
  CHECK_OK(tagc_layout_rows((int64_t)numel, lanes, rho, &rows));
  h.lanes = (uint32_t)lanes;
  h.dtype = dtype;
  h.unit_id = 0x1122334455667788ull;
  h.step = 42;
  h.world = 4;
  h.shard = 3;
  h.shard_numel = numel;
  h.rows = (uint64_t)rows;
  h.rho = rho;
  h.seed = 99;
  h.sections = sections;
  return h;
}

/* Encodes h with random sections into a fresh buffer; *len = its length. */
static uint8_t *encode_random(const tagc_wire_header *h, size_t *len, kgen *g) {
  uint64_t payload = 0;
  CHECK_OK(tagc_wire_payload_bytes(h, &payload));
  size_t cap = TAGC_WIRE_HEADER_BYTES + (size_t)payload;
  uint8_t *data = malloc((size_t)payload + 8), *buf = malloc(cap);
  for (uint64_t i = 0; i < payload + 8; i++)
    data[i] = (uint8_t)kgen_u64(g);
  uint64_t sk = (h->sections & TAGC_WIRE_SKETCH) ? h->rows * h->lanes * (h->dtype ? 2 : 4) : 0;
  uint64_t *bm = malloc((size_t)(payload - sk) + 8);
  memcpy(bm, data + sk, (size_t)(payload - sk));
  CHECK_OK(tagc_wire_encode(h, data, bm, buf, cap, len));
  CHECK_EQ_INT(*len, cap);
  tagc_wire_header d;
  tagc_wire_view v;
  CHECK_OK(tagc_wire_decode(buf, *len, &d, &v));
  CHECK_EQ_INT(d.unit_id, h->unit_id);
  CHECK_EQ_INT(d.step, h->step);
  CHECK_EQ_INT(d.shard, h->shard);
  CHECK_EQ_INT(d.rows, h->rows);
  CHECK_EQ_INT(d.lanes, h->lanes);
  CHECK(d.rho == h->rho);
  CHECK_EQ_INT(v.sketch_bytes + v.bitmap_bytes, payload);
  CHECK(!v.sketch || memcmp(v.sketch, data, v.sketch_bytes) == 0);
  CHECK(!v.bitmap || memcmp(v.bitmap, bm, v.bitmap_bytes) == 0);
  free(data);
  free(bm);
  return buf;
}

static tagc_status decode(const uint8_t *buf, size_t len) {
  tagc_wire_header h;
  tagc_wire_view v;
  return tagc_wire_decode(buf, len, &h, &v);
}

static void refresh_header_crc(uint8_t *buf) {
  uint32_t c = tagc_crc32c(0, buf, TAGC_WIRE_HEADER_CRC_AT);
  memcpy(buf + TAGC_WIRE_HEADER_CRC_AT, &c, 4);
}

static void test_rejections(void) {
  kgen g = {1};
  tagc_wire_header h = make_header(5000, 64, 2.0, TAGC_WIRE_DTYPE_FP32, TAGC_WIRE_SKETCH | TAGC_WIRE_BITMAP);
  size_t len;
  uint8_t *buf = encode_random(&h, &len, &g);
  uint8_t *big = malloc(len + 1);
  memcpy(big, buf, len);
  big[len] = 0;
  CHECK_EQ_INT(decode(big, len + 1), TAGC_ECORRUPT);
  int64_t accepted = 0;
  for (size_t cut = 0; cut < len; cut += 1 + cut / 7)
    accepted += decode(buf, cut) != TAGC_ECORRUPT;
  CHECK_EQ_INT(accepted, 0);
  uint8_t *m = malloc(len);
  /* wrong magic, wrong version (header CRC made consistent), bad CRCs, bad geometry */
  struct { size_t at; uint8_t xor_with; int fix_crc; } cases[] = {
      {0, 0x01, 1}, {4, 0x02, 1}, {10, 0x40, 0}, {TAGC_WIRE_HEADER_BYTES + 5, 0x80, 0},
      {40, 0x01, 1}, {6, 0x02, 1}, {28, 0x04, 1}, {64, 0x08, 1}, {60, 0x10, 1}, {55, 0x40, 1},
      {76, 0x40, 1} /* 64 -> 0 lanes */, {76, 0x20, 1} /* 96 lanes */, {77, 0x04, 1} /* 1088 */};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    memcpy(m, buf, len);
    m[cases[c].at] ^= cases[c].xor_with;
    if (cases[c].fix_crc)
      refresh_header_crc(m);
    CHECK_MSG(decode(m, len) == TAGC_ECORRUPT, "case %zu accepted (%s)", c, tagc_last_error());
  }
  /* every single-bit flip of a small message is caught */
  free(buf);
  h = make_header(100, 32, 2.0, TAGC_WIRE_DTYPE_BF16, TAGC_WIRE_BITMAP);
  buf = encode_random(&h, &len, &g);
  free(m);
  m = malloc(len);
  accepted = 0;
  for (size_t bitpos = 0; bitpos < len * 8; bitpos++) {
    memcpy(m, buf, len);
    m[bitpos / 8] ^= (uint8_t)(1u << (bitpos % 8));
    accepted += decode(m, len) != TAGC_ECORRUPT;
  }
  CHECK_EQ_INT(accepted, 0);
  CHECK_EQ_INT(decode(NULL, 0), TAGC_ECORRUPT);
  free(m);
  free(big);
  free(buf);
}

static void test_encode_errors(void) {
  uint8_t buf[256];
  size_t len;
  uint64_t bitmap[16] = {0};
  tagc_wire_header h = make_header(1000, 1024, 2.0, TAGC_WIRE_DTYPE_FP32, TAGC_WIRE_BITMAP);
  CHECK_EQ_INT(tagc_wire_encode(&h, NULL, bitmap, buf, 100, &len), TAGC_EINVAL);
  CHECK_OK(tagc_wire_encode(&h, NULL, bitmap, buf, sizeof buf, &len));
  h.shard = 4;
  CHECK_EQ_INT(tagc_wire_encode(&h, NULL, bitmap, buf, sizeof buf, &len), TAGC_EINVAL);
  h.shard = 0;
  h.rows++;
  CHECK_EQ_INT(tagc_wire_encode(&h, NULL, bitmap, buf, sizeof buf, &len), TAGC_EINVAL);
  h.rows--;
  h.dtype = 7;
  CHECK_EQ_INT(tagc_wire_encode(&h, NULL, bitmap, buf, sizeof buf, &len), TAGC_EINVAL);
  h.dtype = TAGC_WIRE_DTYPE_FP32;
  h.sections = TAGC_WIRE_SKETCH;
  CHECK_EQ_INT(tagc_wire_encode(&h, NULL, bitmap, buf, sizeof buf, &len), TAGC_EINVAL);
  h.sections = TAGC_WIRE_BITMAP;
  h.lanes = 512; /* rows no longer match the layout of 1000 elements in 512 lanes */
  CHECK_EQ_INT(tagc_wire_encode(&h, NULL, bitmap, buf, sizeof buf, &len), TAGC_EINVAL);
  h.lanes = 0;
  CHECK_EQ_INT(tagc_wire_encode(&h, NULL, bitmap, buf, sizeof buf, &len), TAGC_EINVAL);
}

int main(void) {
  kgen g = {2};
  size_t len;
  const uint16_t dtypes[] = {TAGC_WIRE_DTYPE_FP32, TAGC_WIRE_DTYPE_BF16};
  const int32_t lanes_list[] = {32, 64, 256, 1024};
  for (int d = 0; d < 2; d++)
    for (uint32_t sec = 0; sec < 4; sec++)
      for (int k = 0; k < 4; k++) {
        tagc_wire_header h = make_header(3000 + 17 * sec, lanes_list[k], 3.0, dtypes[d], sec);
        free(encode_random(&h, &len, &g));
      }
  test_rejections();
  test_encode_errors();
  return TEST_END();
}
