/* CRC32C (Castagnoli), as used by checkpoint files and wire headers.
 * Uses the SSE4.2 instruction when the CPU has it, a table otherwise; both give the same
 * value. Thread-safe, never fails. */
#ifndef TAGC_COMMON_CRC32C_H
#define TAGC_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Extends a running CRC: start with crc = 0; crc32c(crc32c(0, a), b) == crc32c(0, a||b). */
uint32_t tagc_crc32c(uint32_t crc, const void *data, size_t len);

/* The table-only path, for tests that compare it with the hardware path. */
uint32_t tagc_crc32c_portable(uint32_t crc, const void *data, size_t len);

#ifdef __cplusplus
}
#endif

#endif
