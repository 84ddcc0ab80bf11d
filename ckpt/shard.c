/* The shard file format and tagc_ckpt_write_shard(). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "common/crc32c.h"
#include "common/fsutil.h"

int64_t tagc_ckpt_range_count(tagc_ckpt_range r, int64_t numel) {
  int64_t lo = r.lo < numel ? r.lo : numel;
  int64_t hi = r.hi < numel ? r.hi : numel;
  return hi > lo ? hi - lo : 0;
}

uint64_t ckpt_shard_header_bytes(int n_units) {
  uint64_t raw = CKPT_SHARD_FIXED_BYTES + 16 * (uint64_t)n_units;
  return (raw + 63) / 64 * 64;
}

uint64_t ckpt_shard_data_bytes(const tagc_ckpt_range *ranges, const tagc_ckpt_layout *layout) {
  uint64_t total = 0;
  for (int u = 0; u < layout->n_units; u++)
    total += (uint64_t)tagc_ckpt_range_count(ranges[u], layout->unit_numel[u]) *
             (uint64_t)layout->n_streams * sizeof(float);
  return total;
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

void ckpt_shard_header_encode(const ckpt_shard_header *h, const tagc_ckpt_range *ranges, unsigned char *buf) {
  memset(buf, 0, h->header_bytes);
  memcpy(buf, CKPT_SHARD_MAGIC, 8);
  put32(buf + 8, h->version);
  put32(buf + 12, h->header_bytes);
  put32(buf + 16, h->rank);
  put32(buf + 20, h->world_size);
  put64(buf + 24, (uint64_t)h->step);
  put32(buf + 32, h->n_units);
  put32(buf + 36, h->n_streams);
  put64(buf + 40, h->data_bytes);
  for (uint32_t u = 0; u < h->n_units; u++) {
    put64(buf + CKPT_SHARD_FIXED_BYTES + 16 * u, (uint64_t)ranges[u].lo);
    put64(buf + CKPT_SHARD_FIXED_BYTES + 16 * u + 8, (uint64_t)ranges[u].hi);
  }
  put32(buf + 48, tagc_crc32c(0, buf, h->header_bytes));
}

/* Checks the decoded identity and shape fields against the expectation. */
static tagc_status check_fields(const unsigned char *buf, const char *name, const ckpt_shard_header *want) {
  uint32_t rank = get32(buf + 16), world = get32(buf + 20);
  int64_t step = (int64_t)get64(buf + 24);
  if (rank != want->rank || world != want->world_size || step != want->step)
    return tagc_errorf(TAGC_ECORRUPT, "%s: header says rank %u of %u at step %lld, expected rank %u of %u at step %lld",
                       name, rank, world, (long long)step, want->rank, want->world_size, (long long)want->step);
  if (get32(buf + 32) != want->n_units || get32(buf + 36) != want->n_streams)
    return tagc_errorf(TAGC_ECORRUPT, "%s: header has %u units x %u streams, expected %u x %u", name,
                       get32(buf + 32), get32(buf + 36), want->n_units, want->n_streams);
  return TAGC_OK;
}

/* Decodes the range table and checks it against the unit sizes and the payload size. */
static tagc_status check_ranges(const unsigned char *buf, const char *name, const tagc_ckpt_layout *layout,
                                uint64_t file_bytes, uint64_t header_bytes, tagc_ckpt_range *ranges) {
  for (int u = 0; u < layout->n_units; u++) {
    ranges[u].lo = (int64_t)get64(buf + CKPT_SHARD_FIXED_BYTES + 16 * u);
    ranges[u].hi = (int64_t)get64(buf + CKPT_SHARD_FIXED_BYTES + 16 * u + 8);
    if (ranges[u].lo < 0 || ranges[u].hi < ranges[u].lo || ranges[u].hi > layout->unit_numel[u])
      return tagc_errorf(TAGC_ECORRUPT, "%s: unit '%s' range [%lld, %lld) is outside [0, %lld)", name,
                         layout->unit_names[u], (long long)ranges[u].lo, (long long)ranges[u].hi,
                         (long long)layout->unit_numel[u]);
  }
  uint64_t data = get64(buf + 40), want = ckpt_shard_data_bytes(ranges, layout);
  if (data != want || file_bytes != header_bytes + data + CKPT_TRAILER_BYTES)
    return tagc_errorf(TAGC_ECORRUPT, "%s: %llu bytes with %llu payload bytes, expected %llu payload bytes",
                       name, (unsigned long long)file_bytes, (unsigned long long)data, (unsigned long long)want);
  return TAGC_OK;
}

tagc_status ckpt_shard_header_read(int fd, const char *name, const ckpt_shard_header *want,
                              const tagc_ckpt_layout *layout, uint64_t file_bytes,
                              tagc_ckpt_range *ranges_out) {
  if (file_bytes < want->header_bytes + CKPT_TRAILER_BYTES)
    return tagc_errorf(TAGC_ECORRUPT, "%s: truncated (%llu bytes)", name, (unsigned long long)file_bytes);
  unsigned char *buf = malloc(want->header_bytes);
  if (!buf)
    return tagc_errorf(TAGC_ENOMEM, "%s: header buffer", name);
  tagc_status st;
  TAGC_CHECK_GOTO(ckpt_pread_full(fd, buf, want->header_bytes, 0, name), st, done);
  if (memcmp(buf, CKPT_SHARD_MAGIC, 8) != 0) {
    st = tagc_errorf(TAGC_ECORRUPT, "%s: not a tagc shard (bad magic)", name);
    goto done;
  }
  if (get32(buf + 8) != TAGC_CKPT_FORMAT_VERSION) {
    st = tagc_errorf(TAGC_ECORRUPT, "%s: format version %u, this build reads version %d", name,
                     get32(buf + 8), TAGC_CKPT_FORMAT_VERSION);
    goto done;
  }
  if (get32(buf + 12) != want->header_bytes) {
    st = tagc_errorf(TAGC_ECORRUPT, "%s: header of %u bytes, expected %u", name, get32(buf + 12),
                     want->header_bytes);
    goto done;
  }
  uint32_t crc = get32(buf + 48);
  put32(buf + 48, 0);
  if (tagc_crc32c(0, buf, want->header_bytes) != crc) {
    st = tagc_errorf(TAGC_ECORRUPT, "%s: header checksum mismatch", name);
    goto done;
  }
  TAGC_CHECK_GOTO(check_fields(buf, name, want), st, done);
  st = check_ranges(buf, name, layout, file_bytes, want->header_bytes, ranges_out);
done:
  free(buf);
  return st;
}

tagc_status ckpt_shard_trailer_file_crc(int fd, const char *name, uint64_t file_bytes, uint32_t *crc) {
  unsigned char tr[CKPT_TRAILER_BYTES];
  if (file_bytes < CKPT_TRAILER_BYTES)
    return tagc_errorf(TAGC_ECORRUPT, "%s: truncated (%llu bytes)", name, (unsigned long long)file_bytes);
  TAGC_CHECK(ckpt_pread_full(fd, tr, sizeof tr, file_bytes - CKPT_TRAILER_BYTES, name));
  if (memcmp(tr, CKPT_TRAILER_MAGIC, 8) != 0)
    return tagc_errorf(TAGC_ECORRUPT, "%s: trailer missing (file incomplete)", name);
  *crc = tagc_crc32c(get32(tr + 8), tr, sizeof tr);
  return TAGC_OK;
}

typedef struct span {
  int64_t lo, hi;
} span;

static int cmp_span(const void *a, const void *b) {
  int64_t x = ((const span *)a)->lo, y = ((const span *)b)->lo;
  return (x > y) - (x < y);
}

tagc_status ckpt_ranges_check_tiling(const tagc_ckpt_range *ranges, int world_size,
                                const tagc_ckpt_layout *layout) {
  span *s = malloc((size_t)world_size * sizeof *s);
  if (!s)
    return tagc_errorf(TAGC_ENOMEM, "range check");
  tagc_status st = TAGC_OK;
  for (int u = 0; u < layout->n_units && st == TAGC_OK; u++) {
    int n = 0;
    for (int r = 0; r < world_size; r++) {
      tagc_ckpt_range g = ranges[(size_t)r * layout->n_units + u];
      if (g.hi > g.lo)
        s[n++] = (span){g.lo, g.hi};
    }
    qsort(s, (size_t)n, sizeof *s, cmp_span);
    int64_t next = 0;
    for (int i = 0; i < n && next >= 0; i++)
      next = s[i].lo == next ? s[i].hi : -1;
    if (next != layout->unit_numel[u])
      st = tagc_errorf(TAGC_ECORRUPT, "unit '%s': the ranks' ranges do not tile [0, %lld) exactly",
                       layout->unit_names[u], (long long)layout->unit_numel[u]);
  }
  free(s);
  return st;
}

tagc_status ckpt_layout_check(const tagc_ckpt_layout *layout) {
  if (!layout || layout->n_units < 0 || layout->n_streams < 1 ||
      layout->n_streams > TAGC_CKPT_MAX_STREAMS || (layout->n_units > 0 && (!layout->unit_names || !layout->unit_numel)) ||
      !layout->stream_names)
    return tagc_errorf(TAGC_EINVAL, "checkpoint layout: need units and 1..%d streams", TAGC_CKPT_MAX_STREAMS);
  for (int u = 0; u < layout->n_units; u++)
    if (!layout->unit_names[u] || layout->unit_numel[u] < 0)
      return tagc_errorf(TAGC_EINVAL, "checkpoint layout: unit %d has no name or a negative size", u);
  for (int s = 0; s < layout->n_streams; s++)
    if (!layout->stream_names[s])
      return tagc_errorf(TAGC_EINVAL, "checkpoint layout: stream %d has no name", s);
  return TAGC_OK;
}

/* Writes every stream of every unit, firing the mid-write fault point at half the payload. */
static tagc_status write_payload(int fd, const char *name, const tagc_ckpt_layout *layout,
                                 const tagc_ckpt_range *ranges, const float *const *data,
                                 uint64_t data_bytes, int rank, uint32_t *crc) {
  uint64_t written = 0, half = data_bytes / 2;
  int fired = 0;
  if (ckpt_fault_full(rank)) {
    errno = ENOSPC;
    return tagc_errnof(TAGC_EIO, "write %s (fault ckpt:full)", name);
  }
  for (int u = 0; u < layout->n_units; u++) {
    size_t bytes = (size_t)tagc_ckpt_range_count(ranges[u], layout->unit_numel[u]) * sizeof(float);
    for (int s = 0; s < layout->n_streams && bytes > 0; s++) {
      const char *p = (const char *)data[(size_t)u * layout->n_streams + s];
      *crc = tagc_crc32c(*crc, p, bytes);
      size_t first = bytes;
      if (!fired && written + bytes > half)
        first = (size_t)(half - written);
      TAGC_CHECK(ckpt_write_full(fd, p, first, name));
      if (first < bytes) {
        ckpt_fault_point(CKPT_FAULT_MID_WRITE, rank);
        fired = 1;
        TAGC_CHECK(ckpt_write_full(fd, p + first, bytes - first, name));
      }
      written += bytes;
    }
  }
  if (!fired)
    ckpt_fault_point(CKPT_FAULT_MID_WRITE, rank);
  return TAGC_OK;
}

static tagc_status check_shard_args(int64_t step, int rank, int world_size, const tagc_ckpt_layout *layout,
                                    const tagc_ckpt_range *ranges, const float *const *data) {
  if (step < 0 || world_size < 1 || rank < 0 || rank >= world_size)
    return tagc_errorf(TAGC_EINVAL, "checkpoint shard: step %lld, rank %d of %d is invalid", (long long)step,
                       rank, world_size);
  TAGC_CHECK(ckpt_layout_check(layout));
  if (layout->n_units > 0 && (!ranges || !data))
    return tagc_errorf(TAGC_EINVAL, "checkpoint shard: ranges and data are required");
  for (int u = 0; u < layout->n_units; u++) {
    if (ranges[u].lo < 0 || ranges[u].hi < ranges[u].lo)
      return tagc_errorf(TAGC_EINVAL, "checkpoint shard: unit '%s' has range [%lld, %lld)", layout->unit_names[u],
                         (long long)ranges[u].lo, (long long)ranges[u].hi);
    for (int s = 0; s < layout->n_streams; s++)
      if (tagc_ckpt_range_count(ranges[u], layout->unit_numel[u]) > 0 && !data[(size_t)u * layout->n_streams + s])
        return tagc_errorf(TAGC_EINVAL, "checkpoint shard: no data for unit '%s' stream '%s'",
                           layout->unit_names[u], layout->stream_names[s]);
  }
  return TAGC_OK;
}

tagc_status tagc_ckpt_write_shard(const char *dir, int64_t step, int rank, int world_size,
                                  const tagc_ckpt_layout *layout, const tagc_ckpt_range *ranges,
                                  const float *const *data) {
  TAGC_CHECK(check_shard_args(step, rank, world_size, layout, ranges, data));
  char tmpdir[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX], final[CKPT_PATH_MAX];
  TAGC_CHECK(tagc_ckpt_step_path(dir, step, 1, tmpdir, sizeof tmpdir));
  TAGC_CHECK(tagc_ckpt_shard_path(dir, step, rank, 1, final, sizeof final));
  TAGC_CHECK(ckpt_path_fmt(tmp, "%s.tmp", final));
  TAGC_CHECK(tagc_mkdir_p(tmpdir));

  tagc_ckpt_range *stored = malloc(((size_t)layout->n_units + 1) * sizeof *stored);
  ckpt_shard_header h = {.version = TAGC_CKPT_FORMAT_VERSION,
                    .header_bytes = (uint32_t)ckpt_shard_header_bytes(layout->n_units),
                    .rank = (uint32_t)rank,
                    .world_size = (uint32_t)world_size,
                    .step = step,
                    .n_units = (uint32_t)layout->n_units,
                    .n_streams = (uint32_t)layout->n_streams};
  unsigned char *hdr = malloc(h.header_bytes);
  if (!stored || !hdr) {
    free(stored);
    free(hdr);
    return tagc_errorf(TAGC_ENOMEM, "checkpoint shard header");
  }
  for (int u = 0; u < layout->n_units; u++) {
    int64_t numel = layout->unit_numel[u];
    stored[u].lo = ranges[u].lo < numel ? ranges[u].lo : numel;
    stored[u].hi = ranges[u].hi < numel ? ranges[u].hi : numel;
  }
  h.data_bytes = ckpt_shard_data_bytes(stored, layout);
  ckpt_shard_header_encode(&h, stored, hdr);

  tagc_status st = TAGC_OK;
  int dfd = -1;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    st = tagc_errorf(TAGC_EIO, "create %s: %s", tmp, strerror(errno));
    goto done;
  }
  ckpt_fault_point(CKPT_FAULT_AFTER_OPEN, rank);
  uint32_t crc = tagc_crc32c(0, hdr, h.header_bytes);
  TAGC_CHECK_GOTO(ckpt_write_full(fd, hdr, h.header_bytes, tmp), st, done);
  TAGC_CHECK_GOTO(write_payload(fd, tmp, layout, stored, data, h.data_bytes, rank, &crc), st, done);
  unsigned char tr[CKPT_TRAILER_BYTES] = {0};
  memcpy(tr, CKPT_TRAILER_MAGIC, 8);
  put32(tr + 8, crc);
  TAGC_CHECK_GOTO(ckpt_write_full(fd, tr, sizeof tr, tmp), st, done);
  ckpt_fault_point(CKPT_FAULT_BEFORE_FSYNC, rank);
  if (fsync(fd) != 0) {
    st = tagc_errorf(TAGC_EIO, "fsync %s: %s", tmp, strerror(errno));
    goto done;
  }
  close(fd);
  /* Once the shard has its final name, rank 0 may commit: rename step-<s>.tmp away. So the
   * directory is opened before the rename and fsynced through that descriptor, never by
   * name afterwards (it may be step-<s> by then, which is just as durable). */
  fd = -1;
  dfd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    st = tagc_errorf(TAGC_EIO, "open %s: %s", tmpdir, strerror(errno));
    goto done;
  }
  if (rename(tmp, final) != 0) {
    st = tagc_errorf(TAGC_EIO, "rename %s: %s", tmp, strerror(errno));
    goto done;
  }
  ckpt_shard_named(step, rank);
  if (fsync(dfd) != 0) {
    st = tagc_errorf(TAGC_EIO, "fsync %s: %s", tmpdir, strerror(errno));
    goto done;
  }
  ckpt_fault_point(CKPT_FAULT_AFTER_SHARD, rank);
done:
  if (fd >= 0)
    close(fd);
  if (dfd >= 0)
    close(dfd);
  if (st != TAGC_OK) { /* e.g. a full disk: leave no partial file, nor an empty directory */
    unlink(tmp);
    rmdir(tmpdir);
  }
  free(stored);
  free(hdr);
  return st;
}
