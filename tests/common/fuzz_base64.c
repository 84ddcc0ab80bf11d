/* libFuzzer target over the base64 decoder. The first byte is the output capacity (255: just
 * enough for any text of that length), the rest is the text. Any input must give TAGC_OK or
 * TAGC_EPROTO, never write past the capacity (the buffer is a heap block of exactly that
 * size, so ASan sees an overrun), agree with tagc_base64_decode_new, and a decoded value
 * must encode and decode back to itself. A broken rule aborts.
 * Built with -DTAGC_FUZZ_REPLAY it is a plain program that runs the inputs named on its
 * command line (the seed corpus) through the same function. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_base64: %s\n", what);
    abort();
  }
}

/* The text again as a NUL-terminated string, decoded by tagc_base64_decode_new: same status,
 * same bytes. Skipped for texts holding a NUL (decode_new stops there). */
static void check_decode_new(const char *text, size_t len, tagc_status st, const unsigned char *out,
                             size_t n) {
  if (memchr(text, '\0', len))
    return;
  char *copy = malloc(len + 1);
  require(copy != NULL, "out of memory");
  memcpy(copy, text, len);
  copy[len] = '\0';
  unsigned char *dec = NULL;
  size_t dn = 0;
  tagc_status st2 = tagc_base64_decode_new(copy, &dec, &dn);
  /* decode_new always has room, so it fails only where the text is malformed */
  if (st2 == TAGC_OK) {
    require(dec[dn] == '\0', "decode_new: no NUL after the bytes");
    if (st == TAGC_OK)
      require(dn == n && memcmp(dec, out, n) == 0, "decode and decode_new disagree");
    free(dec);
  } else {
    require(st2 == TAGC_EPROTO && st == TAGC_EPROTO, "decode_new failed where decode did not");
  }
  free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  size_t cap = data[0] < 255 ? data[0] : len / 4 * 3 + 1;
  unsigned char *out = malloc(cap ? cap : 1);
  require(out != NULL, "out of memory");
  size_t n = 0;
  tagc_status st = tagc_base64_decode(text, len, out, cap, &n);
  require(st == TAGC_OK || st == TAGC_EPROTO, "status other than OK or EPROTO");
  if (st == TAGC_OK) {
    require(n < cap && out[n] == '\0', "decoded length or NUL outside the capacity");
    char *again = tagc_base64_encode_new(out, n);
    require(again != NULL, "out of memory");
    unsigned char *back = malloc(n + 1);
    size_t bn = 0;
    require(back != NULL, "out of memory");
    require(tagc_base64_decode(again, strlen(again), back, n + 1, &bn) == TAGC_OK &&
                bn == n && memcmp(back, out, n) == 0,
            "encode then decode does not give the bytes back");
    free(back);
    free(again);
  }
  check_decode_new(text, len, st, out, n);
  free(out);
  return 0;
}

#ifdef TAGC_FUZZ_REPLAY
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      perror(argv[i]);
      return 1;
    }
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
  }
  printf("%d inputs decoded\n", argc - 1);
  return argc > 1 ? 0 : 1;
}
#endif
