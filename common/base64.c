#include "base64.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t tagc_base64_encoded_len(size_t n) { return (n + 2) / 3 * 4; }

void tagc_base64_encode(const void *data, size_t n, char *out) {
  const unsigned char *p = data;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)p[i] << 16;
    if (i + 1 < n)
      v |= (unsigned)p[i + 1] << 8;
    if (i + 2 < n)
      v |= p[i + 2];
    out[o++] = alphabet[(v >> 18) & 63];
    out[o++] = alphabet[(v >> 12) & 63];
    out[o++] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? alphabet[v & 63] : '=';
  }
  out[o] = '\0';
}

char *tagc_base64_encode_new(const void *data, size_t n) {
  char *out = malloc(tagc_base64_encoded_len(n) + 1);
  if (out)
    tagc_base64_encode(data, n, out);
  return out;
}

static int value_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Bytes that the len characters of text decode to, the padding counted as the decoder
 * accepts it (one '=' at the end, or two); SIZE_MAX when len is not a multiple of 4. */
static size_t decoded_len(const char *text, size_t len) {
  if (len % 4 != 0)
    return SIZE_MAX;
  size_t pad = len && text[len - 1] == '=' ? 1 + (text[len - 2] == '=') : 0;
  return len / 4 * 3 - pad;
}

tagc_status tagc_base64_decode(const char *text, size_t len, unsigned char *out, size_t cap,
                               size_t *out_len) {
  size_t need = decoded_len(text, len);
  if (need == SIZE_MAX)
    return tagc_errorf(TAGC_EPROTO, "base64 length %zu is not a multiple of 4", len);
  if (need >= cap)
    return tagc_errorf(TAGC_EPROTO, "base64 text of %zu characters decodes to %zu bytes; "
                       "room for %zu", len, need, cap ? cap - 1 : 0);
  size_t o = 0;
  for (size_t i = 0; i < len; i += 4) {
    int pad = 0;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
      char c = text[i + k];
      int d;
      if (c == '=' && i + 4 == len && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        pad++;
        d = 0;
      } else if ((d = value_of(c)) < 0 || pad) {
        return tagc_errorf(TAGC_EPROTO, "bad base64 character at offset %zu", i + (size_t)k);
      }
      v = v << 6 | (unsigned)d;
    }
    out[o++] = (unsigned char)(v >> 16);
    if (pad < 2)
      out[o++] = (unsigned char)(v >> 8);
    if (pad < 1)
      out[o++] = (unsigned char)v;
  }
  out[o] = '\0';
  *out_len = o;
  return TAGC_OK;
}

tagc_status tagc_base64_decode_new(const char *text, unsigned char **out, size_t *out_len) {
  size_t len = strlen(text);
  size_t cap = len / 4 * 3 + 1;
  unsigned char *buf = malloc(cap);
  if (!buf)
    return tagc_errorf(TAGC_ENOMEM, "base64 decode of %zu characters", len);
  tagc_status st = tagc_base64_decode(text, len, buf, cap, out_len);
  if (st != TAGC_OK) {
    free(buf);
    return st;
  }
  *out = buf;
  return TAGC_OK;
}
