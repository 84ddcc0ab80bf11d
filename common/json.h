/* Small helpers on jansson that turn type mismatches into tagc_status errors.
 * Getters borrow from the object; nothing here takes ownership unless it says "new". */
#ifndef TAGC_COMMON_JSON_H
#define TAGC_COMMON_JSON_H

#include <stdint.h>

#include <jansson.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses a file into a new reference (caller decrefs). TAGC_ENOTFOUND/TAGC_EIO when it can't
 * be read, TAGC_EPROTO with "file:line:column: message" when the JSON is malformed. */
tagc_status tagc_json_load_file(const char *path, json_t **out);

/* Parses len bytes into a new reference. TAGC_EPROTO with the position when malformed. */
tagc_status tagc_json_parse(const char *text, size_t len, json_t **out);

/* Typed lookups in an object. A missing key gives TAGC_ENOTFOUND; a present key of the wrong
 * type gives TAGC_EPROTO. Strings are borrowed from obj. */
tagc_status tagc_json_get_str(const json_t *obj, const char *key, const char **out);
tagc_status tagc_json_get_int(const json_t *obj, const char *key, int64_t *out);
tagc_status tagc_json_get_num(const json_t *obj, const char *key, double *out);
tagc_status tagc_json_get_bool(const json_t *obj, const char *key, int *out);

/* An int64 that may arrive as a JSON string of digits (etcd's gateway encodes 64-bit
 * numbers that way) or as a JSON integer. A missing key yields `def` and TAGC_OK, because
 * etcd omits fields that hold their default value. */
tagc_status tagc_json_get_i64_str(const json_t *obj, const char *key, int64_t def, int64_t *out);

/* Dumps compactly into a new malloc'd string (caller frees); NULL when out of memory. */
char *tagc_json_dump(const json_t *value);

/* Writes value plus a newline to path atomically (temp file, fsync, rename). */
tagc_status tagc_json_write_file(const char *path, const json_t *value);

#ifdef __cplusplus
}
#endif

#endif
