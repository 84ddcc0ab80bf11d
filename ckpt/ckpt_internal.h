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

#define CKPT_SHARD_MAGIC "TAGCSHRD"
#define CKPT_TRAILER_MAGIC "TAGCEND1"
#define CKPT_SHARD_FIXED_BYTES 64
#define CKPT_TRAILER_BYTES 16
#define CKPT_PATH_MAX 4096

/* The fixed part of a shard header, as decoded (layout in docs/checkpoint-format.md). */
typedef struct ckpt_shard_header {
  uint32_t version;
  uint32_t header_bytes;
  uint32_t rank, world_size;
  int64_t step;
  uint32_t n_units, n_streams;
  uint64_t data_bytes;
} ckpt_shard_header;

/* Bytes of the header (fixed part + range table), padded to 64. */
uint64_t ckpt_shard_header_bytes(int n_units);

/* Encodes a complete header (fixed part, range table, header CRC) into buf[ckpt_shard_header_bytes]. */
void ckpt_shard_header_encode(const ckpt_shard_header *h, const tagc_ckpt_range *ranges, unsigned char *buf);

/* Reads and checks the header of an open shard file: magic, version, header CRC, the
 * identity in `want` (rank, world size, step, header_bytes, unit and stream counts), ranges
 * inside the layout's unit sizes, payload and file size consistent. ranges_out gets the
 * n_units stored ranges. `name` is used in error messages. TAGC_ECORRUPT on mismatch. */
tagc_status ckpt_shard_header_read(int fd, const char *name, const ckpt_shard_header *want,
                              const tagc_ckpt_layout *layout, uint64_t file_bytes,
                              tagc_ckpt_range *ranges_out);

/* Reads the trailer and returns the CRC32C of the whole file (body CRC extended by the
 * trailer bytes). TAGC_ECORRUPT when the trailer magic is wrong. */
tagc_status ckpt_shard_trailer_file_crc(int fd, const char *name, uint64_t file_bytes, uint32_t *crc);

/* Checks that the non-empty ranges of W ranks (ranges[r * n_units + u]) tile [0, numel) of
 * every unit exactly. TAGC_ECORRUPT naming the unit otherwise. */
tagc_status ckpt_ranges_check_tiling(const tagc_ckpt_range *ranges, int world_size,
                                const tagc_ckpt_layout *layout);

/* Checks a caller's layout: names present, sizes >= 0, 1..TAGC_CKPT_MAX_STREAMS streams. */
tagc_status ckpt_layout_check(const tagc_ckpt_layout *layout);

/* Payload bytes of one rank: sum over units of count * n_streams * 4. */
uint64_t ckpt_shard_data_bytes(const tagc_ckpt_range *ranges, const tagc_ckpt_layout *layout);

/* snprintf into a CKPT_PATH_MAX buffer; TAGC_EINVAL when the path is too long. */
tagc_status ckpt_path_fmt(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

tagc_status ckpt_write_full(int fd, const void *buf, size_t len, const char *name);
/* Writes len bytes to path atomically: path.tmp, fsync, rename (the caller fsyncs the
 * directory). The temporary file is removed on failure. */
tagc_status ckpt_write_file_atomic(const char *path, const void *buf, size_t len);
tagc_status ckpt_pread_full(int fd, void *buf, size_t len, uint64_t off, const char *name);
tagc_status ckpt_fsync_path(const char *path);
/* Removes a directory and the plain files in it (checkpoint directories are one level). */
tagc_status ckpt_remove_dir(const char *path);

/* Steps of the checkpoint directories under dir named step-<s><suffix>: "" committed,
 * CKPT_SUFFIX_TMP a save in progress, CKPT_SUFFIX_REPLACED a directory moved aside while a
 * commit replaced it. Sorted descending; *steps is malloc'd (caller frees). A missing dir
 * gives 0 entries. */
#define CKPT_SUFFIX_TMP ".tmp"
#define CKPT_SUFFIX_REPLACED ".replaced"
tagc_status ckpt_list_steps(const char *dir, const char *suffix, int64_t **steps, int *n);

/* manifest.json's own checksum (docs/checkpoint-format.md): the file begins with
 * CKPT_MANIFEST_SEAL then 8 lowercase hex digits, the CRC32C of the whole file with those
 * digits written as "00000000". */
#define CKPT_MANIFEST_SEAL "{\n  \"manifest_crc32c\": \""
#define CKPT_MANIFEST_VERSION 2 /* sealed; version 1 manifests have no checksum */

/* The text of a sealed manifest: `man` (which must not hold "manifest_crc32c") dumped with
 * sorted keys and the checksum in front, plus a newline. *text is malloc'd (caller frees). */
tagc_status ckpt_manifest_seal(const json_t *man, char **text, size_t *len);

/* Checks the seal of manifest text: *sealed = 1 and TAGC_OK when it matches, *sealed = 0
 * and TAGC_OK when there is none (a version 1 manifest), TAGC_ECORRUPT when it differs. */
tagc_status ckpt_manifest_check(const char *text, size_t len, int *sealed);

/* Names inside a checkpoint root (docs/checkpoint-format.md), formatted and parsed here only:
 * "step-<step>" (committed) or "step-<step>.tmp" (a save in progress) directories holding
 * "rank-<rank, 5 digits>.bin" shard files. */
#define CKPT_NAME_MAX 48
void ckpt_step_name(int64_t step, int tmp, char name[CKPT_NAME_MAX]);
void ckpt_shard_name(int rank, char name[CKPT_NAME_MAX]);

/* Parses "step-<digits>" (exactly) into *step. */
int ckpt_parse_step_name(const char *name, int64_t *step);

/* 1 when name is a shard file name, with its rank in *rank; else 0. */
int ckpt_parse_shard_name(const char *name, int *rank);

/* Fault points. */
typedef enum ckpt_fault_stage {
  CKPT_FAULT_NONE = 0,
  CKPT_FAULT_AFTER_OPEN,
  CKPT_FAULT_MID_WRITE,
  CKPT_FAULT_BEFORE_FSYNC,
  CKPT_FAULT_AFTER_SHARD,
  CKPT_FAULT_BEFORE_MANIFEST,
  CKPT_FAULT_BEFORE_RENAME,
  CKPT_FAULT_BEFORE_LATEST,
  CKPT_FAULT_REPLACING,      /* a commit replaced step-<s>; the old one is not removed yet */
  CKPT_FAULT_ABORT_SNAPSHOT, /* not a kill: the caller fails its snapshot (tagc_ckpt_fault_take) */
  CKPT_FAULT_FULL            /* not a kill: every shard write fails as on a full disk */
} ckpt_fault_stage;

/* SIGKILLs this process if `stage` is armed (for this rank). One load and compare when off. */
void ckpt_fault_point(ckpt_fault_stage stage, int rank);
/* 1 while "ckpt:full[@rank]" is armed for this rank: the shard's payload write then fails
 * with ENOSPC (the caller sets errno). One compare when off. */
int ckpt_fault_full(int rank);
/* Runs the tagc_ckpt_fault_on_shard_named hook, if any. */
void ckpt_shard_named(int64_t step, int rank);

#endif
