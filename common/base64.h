/* Standard base64 (RFC 4648, with padding), as etcd's JSON gateway uses for keys and values. */
#ifndef TAGC_COMMON_BASE64_H
#define TAGC_COMMON_BASE64_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Characters needed to encode n bytes, excluding the terminating NUL. */
size_t tagc_base64_encoded_len(size_t n);

/* Encodes n bytes into out (capacity >= tagc_base64_encoded_len(n) + 1), NUL-terminated. */
void tagc_base64_encode(const void *data, size_t n, char *out);

/* Encodes into a new malloc'd string (caller frees). NULL when out of memory. */
char *tagc_base64_encode_new(const void *data, size_t n);

/* Decodes len characters of text (not NUL-terminated) into out, which holds cap bytes, and
 * NUL-terminates the result for convenience: the decoded bytes plus that NUL must fit in
 * cap. The size is checked before anything is written, so nothing is ever written past cap.
 * Errors: TAGC_EPROTO on bad characters, bad padding, a length that is not a multiple of 4,
 * or a text that decodes to more than cap - 1 bytes (texts come from the network: too long
 * is a malformed message). */
tagc_status tagc_base64_decode(const char *text, size_t len, unsigned char *out, size_t cap,
                               size_t *out_len);

/* Decodes a NUL-terminated text into a new malloc'd NUL-terminated buffer (caller frees).
 * Errors as for tagc_base64_decode, and TAGC_ENOMEM. */
tagc_status tagc_base64_decode_new(const char *text, unsigned char **out, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif
