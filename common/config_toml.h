/* TOML config files (--config FILE.toml, common/options.h): a TOML document read into the
 * JSON object that a --config JSON file gives, so both go through one key check.
 *
 * The document is flat option values; tables only group them, as TorchTitan's files do:
 *   steps = 300            top-level key
 *   [model]
 *   dim = 64               the key "dim"; the table name is dropped
 * A '-' in a key becomes '_' (warmup-steps and warmup_steps are one key). Integers, floats,
 * booleans and strings become JSON integers, reals, booleans and strings. */
#ifndef TAGC_COMMON_CONFIG_TOML_H
#define TAGC_COMMON_CONFIG_TOML_H

#include <jansson.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads the TOML file at path into *out, a new JSON object (the caller decrefs).
 * Errors, each with a one-line detail: TAGC_ENOTFOUND / TAGC_EIO for an unreadable file;
 * TAGC_EPROTO for malformed TOML ("FILE:LINE:COLUMN: what"); TAGC_EINVAL naming the key
 * (FILE:LINE:COLUMN: key 'K' ...) for a key given twice (in two tables, or as a-b and a_b),
 * a table inside a table, an array, a date or time, a float that is not finite or a string
 * holding a NUL character; TAGC_ENOMEM. Blocks on the file read; thread-safe (no shared
 * state). */
tagc_status tagc_toml_to_json(const char *path, json_t **out);

#ifdef __cplusplus
}
#endif

#endif
