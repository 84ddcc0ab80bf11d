/* manifest.json's own checksum: sealing the text rank 0 writes, checking the text a loader
 * reads. The seal covers the exact bytes, so no re-serialisation is involved in checking. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "common/crc32c.h"

#define SEAL_LEN (sizeof CKPT_MANIFEST_SEAL - 1)
#define ZERO_DIGITS "00000000"

/* CRC32C of text with its 8 seal digits (at SEAL_LEN) counted as "00000000". */
static uint32_t sealed_crc(const char *text, size_t len) {
  uint32_t crc = tagc_crc32c(0, text, SEAL_LEN);
  crc = tagc_crc32c(crc, ZERO_DIGITS, 8);
  return tagc_crc32c(crc, text + SEAL_LEN + 8, len - SEAL_LEN - 8);
}

tagc_status ckpt_manifest_seal(const json_t *man, char **text, size_t *len) {
  *text = NULL;
  char *body = json_dumps(man, JSON_INDENT(2) | JSON_SORT_KEYS);
  if (!body)
    return tagc_errorf(TAGC_ENOMEM, "manifest text");
  /* body is "{\n  \"byte_order\": ...}": the seal goes in as the first member */
  size_t body_len = strlen(body), cap = SEAL_LEN + 8 + 2 + body_len + 2;
  char *out = body[0] == '{' && body[1] == '\n' ? malloc(cap) : NULL;
  if (!out) {
    free(body);
    return tagc_errorf(TAGC_ENOMEM, "manifest text");
  }
  int n = snprintf(out, cap, "%s%s\",%s\n", CKPT_MANIFEST_SEAL, ZERO_DIGITS, body + 1);
  free(body);
  char digits[9];
  snprintf(digits, sizeof digits, "%08x", sealed_crc(out, (size_t)n));
  memcpy(out + SEAL_LEN, digits, 8);
  *text = out;
  *len = (size_t)n;
  return TAGC_OK;
}

tagc_status ckpt_manifest_check(const char *text, size_t len, int *sealed) {
  *sealed = 0;
  if (len < SEAL_LEN + 10 || memcmp(text, CKPT_MANIFEST_SEAL, SEAL_LEN) != 0)
    return TAGC_OK;
  uint32_t want = 0;
  for (size_t i = 0; i < 8; i++) {
    char c = text[SEAL_LEN + i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0)
      return tagc_errorf(TAGC_ECORRUPT, "its checksum is not 8 hex digits");
    want = want << 4 | (uint32_t)v;
  }
  uint32_t got = sealed_crc(text, len);
  if (got != want)
    return tagc_errorf(TAGC_ECORRUPT, "its contents give CRC32C %08x, its checksum says %08x "
                       "(edited or damaged)", got, want);
  *sealed = 1;
  return TAGC_OK;
}
