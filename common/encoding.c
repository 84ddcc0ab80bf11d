/* The wire vocabulary (encoding.h). */
#include "common/encoding.h"

#include <stdio.h>
#include <string.h>

const char *tagc_encoding_name(tagc_encoding e) {
  switch (e) {
  case TAGC_ENC_SKETCH: return "sketch";
  case TAGC_ENC_BF16: return "bf16";
  case TAGC_ENC_FP32: return "fp32";
  case TAGC_ENC_INT8: return "int8";
  default: return "?";
  }
}

tagc_status tagc_encoding_parse(const char *name, unsigned allowed, const char *what,
                                tagc_encoding *out) {
  char names[64] = "";
  for (int e = 0; e < TAGC_ENC_COUNT; e++) {
    if (!(allowed & TAGC_ENC_BIT(e)))
      continue;
    if (name && strcmp(name, tagc_encoding_name((tagc_encoding)e)) == 0) {
      *out = (tagc_encoding)e;
      return TAGC_OK;
    }
    size_t n = strlen(names);
    snprintf(names + n, sizeof names - n, "%s%s", n ? "|" : "", tagc_encoding_name((tagc_encoding)e));
  }
  return tagc_errorf(TAGC_EINVAL, "%s '%s' is not %s", what, name ? name : "", names);
}
