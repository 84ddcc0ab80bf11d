/* Shared inside ckpt/: the shard file format, file helpers and fault points. */
#ifndef TAGC_CKPT_INTERNAL_H
#define TAGC_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt/ckpt.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the checkpoint format is little-endian; add byte swapping for this host"
#endif

#define SHARD_MAGIC "TAGCSHRD"
#define TRAILER_MAGIC "TAGCEND1"
#define SHARD_FIXED_BYTES 64
#define TRAILER_BYTES 16
#define CKPT_PATH_MAX 4096

/* The fixed part of a shard header, as decoded (layout in docs/checkpoint-format.md). */
typedef struct shard_header {
  uint32_t version;
  uint32_t header_bytes;
  uint32_t rank, world_size;
  int64_t step;
  uint32_t n_units, n_streams;
  uint64_t data_bytes;
} shard_header;

/* Bytes of the header (fixed part + range table), padded to 64. */
uint64_t shard_header_bytes(int n_units);

/* Encodes a complete header (fixed part, range table, header CRC) into buf[shard_header_bytes]. */
void shard_header_encode(const shard_header *h, const tagc_ckpt_range *ranges, unsigned char *buf);

/* Reads and checks the header of an open shard file: magic, version, header CRC, the
 * identity in `want` (rank, world size, step, header_bytes, unit and stream counts), ranges
 * inside the layout's unit sizes, payload and file size consistent. ranges_out gets the
 * n_units stored ranges. `name` is used in error messages. TAGC_ECORRUPT on mismatch. */
tagc_status shard_header_read(int fd, const char *name, const shard_header *want,
                              const tagc_ckpt_layout *layout, uint64_t file_bytes,
                              tagc_ckpt_range *ranges_out);

/* Reads the trailer and returns the CRC32C of the whole file (body CRC extended by the
 * trailer bytes). TAGC_ECORRUPT when the trailer magic is wrong. */
tagc_status shard_trailer_file_crc(int fd, const char *name, uint64_t file_bytes, uint32_t *crc);

/* Checks that the non-empty ranges of W ranks (ranges[r * n_units + u]) tile [0, numel) of
 * every unit exactly. TAGC_ECORRUPT naming the unit otherwise. */
tagc_status ranges_check_tiling(const tagc_ckpt_range *ranges, int world_size,
                                const tagc_ckpt_layout *layout);

/* Checks a caller's layout: names present, sizes >= 0, 1..TAGC_CKPT_MAX_STREAMS streams. */
tagc_status layout_check(const tagc_ckpt_layout *layout);

/* Payload bytes of one rank: sum over units of count * n_streams * 4. */
uint64_t shard_data_bytes(const tagc_ckpt_range *ranges, const tagc_ckpt_layout *layout);

/* snprintf into a CKPT_PATH_MAX buffer; TAGC_EINVAL when the path is too long. */
tagc_status path_fmt(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

tagc_status write_full(int fd, const void *buf, size_t len, const char *name);
tagc_status pread_full(int fd, void *buf, size_t len, uint64_t off, const char *name);
tagc_status fsync_path(const char *path);
/* Removes a directory and the plain files in it (checkpoint directories are one level). */
tagc_status remove_dir(const char *path);

/* Steps of the committed (kind 0) or temporary (kind 1) checkpoint directories under dir,
 * sorted descending; *steps is malloc'd (caller frees). A missing dir gives 0 entries. */
tagc_status list_steps(const char *dir, int tmp, int64_t **steps, int *n);

/* Parses "step-<digits>" (exactly) into *step. */
int parse_step_name(const char *name, int64_t *step);

/* Fault points. */
typedef enum fault_stage {
  FAULT_NONE = 0,
  FAULT_AFTER_OPEN,
  FAULT_MID_WRITE,
  FAULT_BEFORE_FSYNC,
  FAULT_AFTER_SHARD,
  FAULT_BEFORE_MANIFEST,
  FAULT_BEFORE_RENAME,
  FAULT_BEFORE_LATEST
} fault_stage;

/* SIGKILLs this process if `stage` is armed (for this rank). One load and compare when off. */
void fault_point(fault_stage stage, int rank);

#endif
