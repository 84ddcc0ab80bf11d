/* Reading checkpoints: manifest parsing, verification, resharded range reads. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "common/crc32c.h"
#include "common/json.h"
#include "common/log.h"

typedef struct shard_file {
  char name[CKPT_NAME_MAX];
  int64_t bytes;
  uint32_t crc;
  int fd; /* -1 until the header has been checked */
} shard_file;

struct tagc_ckpt_reader {
  char path[CKPT_PATH_MAX];
  json_t *manifest;
  uint32_t manifest_crc;     /* CRC32C of manifest.json's bytes (what the etcd record holds) */
  int64_t step;
  int world_size;
  tagc_ckpt_layout layout;   /* names borrowed from the manifest */
  const char **unit_names;   /* [n_units] */
  int64_t *numel;            /* [n_units] */
  const char **stream_names; /* [n_streams] */
  tagc_ckpt_range *ranges;   /* [world_size * n_units] */
  uint64_t *unit_off;        /* [world_size * n_units] byte offset of the unit's data in the file */
  shard_file *files;         /* [world_size] */
};

/* Re-tags the current error detail as a problem of `what` with status st. */
static tagc_status blame(tagc_status st, const char *what) {
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", tagc_last_error());
  return tagc_errorf(st, "%s: %s", what, detail);
}

static tagc_status get_int_in(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out) {
  if (tagc_json_get_int(obj, key, out) != TAGC_OK)
    return TAGC_ECORRUPT;
  if (*out < min || *out > max)
    return tagc_errorf(TAGC_ECORRUPT, "'%s' = %lld is out of range", key, (long long)*out);
  return TAGC_OK;
}

static tagc_status parse_streams_units(tagc_ckpt_reader *rd) {
  json_t *streams = json_object_get(rd->manifest, "streams"), *units = json_object_get(rd->manifest, "units");
  if (!json_is_array(streams) || json_array_size(streams) < 1 || json_array_size(streams) > TAGC_CKPT_MAX_STREAMS)
    return tagc_errorf(TAGC_ECORRUPT, "'streams' must be an array of 1..%d names", TAGC_CKPT_MAX_STREAMS);
  if (!json_is_array(units))
    return tagc_errorf(TAGC_ECORRUPT, "'units' must be an array");
  int n_streams = (int)json_array_size(streams), n_units = (int)json_array_size(units);
  rd->stream_names = calloc((size_t)n_streams, sizeof *rd->stream_names);
  rd->unit_names = calloc((size_t)n_units + 1, sizeof *rd->unit_names);
  rd->numel = calloc((size_t)n_units + 1, sizeof *rd->numel);
  if (!rd->stream_names || !rd->unit_names || !rd->numel)
    return tagc_errorf(TAGC_ENOMEM, "manifest tables");
  for (int s = 0; s < n_streams; s++)
    if (!(rd->stream_names[s] = json_string_value(json_array_get(streams, (size_t)s))))
      return tagc_errorf(TAGC_ECORRUPT, "stream %d has no name", s);
  for (int u = 0; u < n_units; u++) {
    json_t *unit = json_array_get(units, (size_t)u);
    if (tagc_json_get_str(unit, "name", &rd->unit_names[u]) != TAGC_OK ||
        get_int_in(unit, "numel", 0, INT64_MAX / 64, &rd->numel[u]) != TAGC_OK)
      return blame(TAGC_ECORRUPT, "unit entry");
  }
  rd->layout = (tagc_ckpt_layout){n_units, rd->unit_names, rd->numel, n_streams, rd->stream_names};
  return TAGC_OK;
}

static tagc_status parse_ranges(const json_t *arr, const tagc_ckpt_layout *layout, tagc_ckpt_range *out) {
  if (!json_is_array(arr) || (int)json_array_size(arr) != layout->n_units)
    return tagc_errorf(TAGC_ECORRUPT, "'ranges' must hold one [lo, hi] per unit");
  for (int u = 0; u < layout->n_units; u++) {
    json_t *p = json_array_get(arr, (size_t)u);
    json_t *lo = json_array_get(p, 0), *hi = json_array_get(p, 1);
    if (!json_is_integer(lo) || !json_is_integer(hi) || json_array_size(p) != 2)
      return tagc_errorf(TAGC_ECORRUPT, "range of unit %d is not [lo, hi]", u);
    out[u] = (tagc_ckpt_range){json_integer_value(lo), json_integer_value(hi)};
    if (out[u].lo < 0 || out[u].hi < out[u].lo || out[u].hi > layout->unit_numel[u])
      return tagc_errorf(TAGC_ECORRUPT, "range [%lld, %lld) of unit '%s' is outside [0, %lld)",
                         (long long)out[u].lo, (long long)out[u].hi, layout->unit_names[u],
                         (long long)layout->unit_numel[u]);
  }
  return TAGC_OK;
}

static tagc_status parse_file(tagc_ckpt_reader *rd, int r, const json_t *f) {
  shard_file *sf = &rd->files[r];
  tagc_ckpt_range *ranges = rd->ranges + (size_t)r * rd->layout.n_units;
  int64_t rank, crc;
  const char *name;
  ckpt_shard_name(r, sf->name);
  if (get_int_in(f, "rank", r, r, &rank) != TAGC_OK || tagc_json_get_str(f, "file", &name) != TAGC_OK ||
      get_int_in(f, "bytes", 0, INT64_MAX, &sf->bytes) != TAGC_OK ||
      get_int_in(f, "crc32c", 0, UINT32_MAX, &crc) != TAGC_OK)
    return blame(TAGC_ECORRUPT, "file entry");
  if (strcmp(name, sf->name) != 0)
    return tagc_errorf(TAGC_ECORRUPT, "file entry %d names '%.64s', expected '%s'", r, name, sf->name);
  sf->crc = (uint32_t)crc;
  TAGC_CHECK(parse_ranges(json_object_get(f, "ranges"), &rd->layout, ranges));
  uint64_t off = ckpt_shard_header_bytes(rd->layout.n_units);
  for (int u = 0; u < rd->layout.n_units; u++) {
    rd->unit_off[(size_t)r * rd->layout.n_units + u] = off;
    off += (uint64_t)(ranges[u].hi - ranges[u].lo) * (uint64_t)rd->layout.n_streams * sizeof(float);
  }
  if (off + CKPT_TRAILER_BYTES != (uint64_t)sf->bytes)
    return tagc_errorf(TAGC_ECORRUPT, "%s: manifest size %lld does not match its ranges (%llu)", sf->name,
                       (long long)sf->bytes, (unsigned long long)(off + CKPT_TRAILER_BYTES));
  return TAGC_OK;
}

static tagc_status parse_manifest(tagc_ckpt_reader *rd, int sealed) {
  const char *format;
  int64_t version, step, world;
  if (tagc_json_get_str(rd->manifest, "format", &format) != TAGC_OK || strcmp(format, "tagc-ckpt") != 0)
    return tagc_errorf(TAGC_ECORRUPT, "not a tagc checkpoint manifest");
  TAGC_CHECK(get_int_in(rd->manifest, "version", 0, INT32_MAX, &version));
  if (version < 1 || version > CKPT_MANIFEST_VERSION)
    return tagc_errorf(TAGC_ECORRUPT, "format version %lld, this build reads versions 1 to %d", (long long)version,
                       CKPT_MANIFEST_VERSION);
  if (version > 1 && !sealed)
    return tagc_errorf(TAGC_ECORRUPT, "version %lld without its checksum (\"manifest_crc32c\" must come first)",
                       (long long)version);
  TAGC_CHECK(get_int_in(rd->manifest, "step", 0, INT64_MAX, &step));
  TAGC_CHECK(get_int_in(rd->manifest, "world_size", 1, 1 << 20, &world));
  rd->step = step;
  rd->world_size = (int)world;
  TAGC_CHECK(parse_streams_units(rd));
  json_t *files = json_object_get(rd->manifest, "files");
  if (!json_is_array(files) || json_array_size(files) != (size_t)world)
    return tagc_errorf(TAGC_ECORRUPT, "'files' must list %lld shard files", (long long)world);
  size_t cells = (size_t)world * rd->layout.n_units + 1;
  rd->files = calloc((size_t)world, sizeof *rd->files);
  rd->ranges = calloc(cells, sizeof *rd->ranges);
  rd->unit_off = calloc(cells, sizeof *rd->unit_off);
  if (!rd->files || !rd->ranges || !rd->unit_off)
    return tagc_errorf(TAGC_ENOMEM, "manifest tables");
  for (int r = 0; r < rd->world_size; r++)
    rd->files[r].fd = -1;
  for (int r = 0; r < rd->world_size; r++)
    TAGC_CHECK(parse_file(rd, r, json_array_get(files, (size_t)r)));
  return ckpt_ranges_check_tiling(rd->ranges, rd->world_size, &rd->layout);
}

/* Opens shard r and checks its size and header against the manifest (once). */
static tagc_status open_file(tagc_ckpt_reader *rd, int r) {
  shard_file *sf = &rd->files[r];
  if (sf->fd >= 0)
    return TAGC_OK;
  char path[CKPT_PATH_MAX];
  TAGC_CHECK(ckpt_path_fmt(path, "%s/%s", rd->path, sf->name));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return tagc_errorf(errno == ENOENT ? TAGC_ECORRUPT : TAGC_EIO, "%s: %s", sf->name, strerror(errno));
  struct stat sb;
  tagc_status st = TAGC_OK;
  if (fstat(fd, &sb) != 0) {
    st = tagc_errorf(TAGC_EIO, "stat %s: %s", path, strerror(errno));
    goto fail;
  }
  if (sb.st_size != sf->bytes) {
    st = tagc_errorf(TAGC_ECORRUPT, "%s: %lld bytes, manifest says %lld (truncated or overwritten)", sf->name,
                     (long long)sb.st_size, (long long)sf->bytes);
    goto fail;
  }
  int n = rd->layout.n_units;
  tagc_ckpt_range *stored = malloc(((size_t)n + 1) * sizeof *stored);
  if (!stored) {
    st = tagc_errorf(TAGC_ENOMEM, "%s header", sf->name);
    goto fail;
  }
  ckpt_shard_header want = {.header_bytes = (uint32_t)ckpt_shard_header_bytes(n), .rank = (uint32_t)r,
                       .world_size = (uint32_t)rd->world_size, .step = rd->step,
                       .n_units = (uint32_t)n, .n_streams = (uint32_t)rd->layout.n_streams};
  st = ckpt_shard_header_read(fd, sf->name, &want, &rd->layout, (uint64_t)sb.st_size, stored);
  if (st == TAGC_OK && memcmp(stored, rd->ranges + (size_t)r * n, (size_t)n * sizeof *stored) != 0)
    st = tagc_errorf(TAGC_ECORRUPT, "%s: header ranges differ from the manifest", sf->name);
  free(stored);
  if (st != TAGC_OK)
    goto fail;
  sf->fd = fd;
  return TAGC_OK;
fail:
  close(fd);
  return st;
}

static tagc_status verify_quick(tagc_ckpt_reader *rd, int r) {
  TAGC_CHECK(open_file(rd, r));
  uint32_t crc;
  TAGC_CHECK(ckpt_shard_trailer_file_crc(rd->files[r].fd, rd->files[r].name, (uint64_t)rd->files[r].bytes, &crc));
  if (crc != rd->files[r].crc)
    return tagc_errorf(TAGC_ECORRUPT, "%s: trailer CRC32C %08x differs from the manifest's %08x",
                       rd->files[r].name, crc, rd->files[r].crc);
  return TAGC_OK;
}

static tagc_status verify_full(tagc_ckpt_reader *rd, int r) {
  TAGC_CHECK(verify_quick(rd, r));
  enum { CHUNK = 1 << 20 };
  unsigned char *buf = malloc(CHUNK);
  if (!buf)
    return tagc_errorf(TAGC_ENOMEM, "verify buffer");
  shard_file *sf = &rd->files[r];
  uint32_t crc = 0;
  tagc_status st = TAGC_OK;
  for (int64_t off = 0; off < sf->bytes && st == TAGC_OK; off += CHUNK) {
    size_t n = (size_t)(sf->bytes - off < CHUNK ? sf->bytes - off : CHUNK);
    st = ckpt_pread_full(sf->fd, buf, n, (uint64_t)off, sf->name);
    crc = tagc_crc32c(crc, buf, n);
  }
  free(buf);
  if (st == TAGC_OK && crc != sf->crc)
    st = tagc_errorf(TAGC_ECORRUPT, "%s: CRC32C of the contents is %08x, manifest says %08x", sf->name, crc,
                     sf->crc);
  return st;
}

tagc_status tagc_ckpt_verify_files(tagc_ckpt_reader *rd, int first, int stride) {
  if (!rd || first < 0 || stride < 1)
    return tagc_errorf(TAGC_EINVAL, "verify files: first %d, stride %d", first, stride);
  for (int r = first; r < rd->world_size; r += stride)
    TAGC_CHECK(verify_full(rd, r));
  return TAGC_OK;
}

/* The manifest's step must match the directory name when it is step-<n>. */
static tagc_status check_dir_step(const tagc_ckpt_reader *rd) {
  const char *base = strrchr(rd->path, '/');
  base = base ? base + 1 : rd->path;
  int64_t s;
  if (ckpt_parse_step_name(base, &s) && s != rd->step)
    return tagc_errorf(TAGC_ECORRUPT, "manifest is for step %lld, directory is %s", (long long)rd->step, base);
  return TAGC_OK;
}

/* Reads manifest.json whole, checks its seal and parses it into rd->manifest. */
static tagc_status load_manifest(tagc_ckpt_reader *rd, int *sealed) {
  char path[CKPT_PATH_MAX];
  TAGC_CHECK(ckpt_path_fmt(path, "%s/manifest.json", rd->path));
  FILE *f = fopen(path, "rb");
  if (!f)
    return tagc_errorf(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s: %s", path, strerror(errno));
  char *text = NULL;
  size_t len = 0, cap = 0;
  tagc_status st = TAGC_OK;
  for (;;) {
    if (len == cap) {
      char *grown = cap < (1u << 30) ? realloc(text, cap = cap ? 2 * cap : 65536) : NULL;
      if (!grown) {
        st = tagc_errorf(TAGC_ENOMEM, "%s: %zu bytes", path, len);
        break;
      }
      text = grown;
    }
    size_t n = fread(text + len, 1, cap - len, f);
    len += n;
    if (n == 0)
      break;
  }
  if (st == TAGC_OK && ferror(f))
    st = tagc_errorf(TAGC_EIO, "read %s", path);
  fclose(f);
  if (st == TAGC_OK)
    st = ckpt_manifest_check(text, len, sealed);
  if (st == TAGC_OK) {
    rd->manifest_crc = tagc_crc32c(0, text, len);
    st = tagc_json_parse(text, len, &rd->manifest);
  }
  free(text);
  return st == TAGC_OK || st == TAGC_ENOTFOUND ? st : blame(st, "manifest.json");
}

static tagc_status open_verified(tagc_ckpt_reader *rd, tagc_ckpt_verify level) {
  int sealed;
  TAGC_CHECK(load_manifest(rd, &sealed));
  tagc_status st = parse_manifest(rd, sealed);
  if (st != TAGC_OK)
    return blame(st, "manifest.json");
  TAGC_CHECK(check_dir_step(rd));
  for (int r = 0; r < rd->world_size && level != TAGC_CKPT_VERIFY_MANIFEST; r++)
    TAGC_CHECK(level == TAGC_CKPT_VERIFY_FULL ? verify_full(rd, r) : verify_quick(rd, r));
  return TAGC_OK;
}

tagc_status tagc_ckpt_open(const char *step_dir, tagc_ckpt_verify level, tagc_ckpt_reader **out) {
  *out = NULL;
  tagc_ckpt_reader *rd = calloc(1, sizeof *rd);
  if (!rd)
    return tagc_errorf(TAGC_ENOMEM, "checkpoint reader");
  tagc_status st = ckpt_path_fmt(rd->path, "%s", step_dir);
  size_t len = strlen(rd->path);
  while (len > 1 && rd->path[len - 1] == '/')
    rd->path[--len] = '\0';
  if (st == TAGC_OK)
    st = open_verified(rd, level);
  if (st != TAGC_OK) {
    st = blame(st, rd->path);
    tagc_ckpt_close(rd);
    return st;
  }
  *out = rd;
  return TAGC_OK;
}

tagc_status tagc_ckpt_find_latest_valid(const char *dir, tagc_ckpt_verify level, tagc_ckpt_reader **out) {
  *out = NULL;
  int64_t *steps;
  int n;
  TAGC_CHECK(ckpt_list_steps(dir, "", &steps, &n));
  tagc_status st = tagc_errorf(TAGC_ENOTFOUND, "no checkpoint under %s", dir);
  for (int i = 0; i < n; i++) {
    char path[CKPT_PATH_MAX];
    st = tagc_ckpt_step_path(dir, steps[i], 0, path, sizeof path);
    if (st == TAGC_OK)
      st = tagc_ckpt_open(path, level, out);
    if (st == TAGC_OK)
      break;
    LOG_WARN("ckpt", "skipping invalid checkpoint: %s", tagc_last_error());
  }
  if (st != TAGC_OK && n > 0)
    st = tagc_errorf(TAGC_ECORRUPT, "no valid checkpoint under %s: all %d are invalid", dir, n);
  free(steps);
  return st;
}

tagc_status tagc_ckpt_read(tagc_ckpt_reader *rd, int unit, int stream, int64_t lo, int64_t hi, float *dst) {
  if (!rd || unit < 0 || unit >= rd->layout.n_units || stream < 0 || stream >= rd->layout.n_streams || lo < 0 ||
      hi < lo || (hi > lo && !dst))
    return tagc_errorf(TAGC_EINVAL, "checkpoint read: unit %d, stream %d, range [%lld, %lld)", unit, stream,
                       (long long)lo, (long long)hi);
  int64_t numel = rd->numel[unit];
  for (int64_t i = lo > numel ? lo : numel; i < hi; i++)
    dst[i - lo] = 0.0f;
  int n = rd->layout.n_units;
  for (int r = 0; r < rd->world_size; r++) {
    tagc_ckpt_range have = rd->ranges[(size_t)r * n + unit];
    int64_t a = lo > have.lo ? lo : have.lo, b = hi < have.hi ? hi : have.hi;
    if (a >= b)
      continue;
    TAGC_CHECK(open_file(rd, r));
    uint64_t count = (uint64_t)(have.hi - have.lo);
    uint64_t off = rd->unit_off[(size_t)r * n + unit] +
                   ((uint64_t)stream * count + (uint64_t)(a - have.lo)) * sizeof(float);
    TAGC_CHECK(ckpt_pread_full(rd->files[r].fd, dst + (a - lo), (size_t)(b - a) * sizeof(float), off,
                          rd->files[r].name));
  }
  return TAGC_OK;
}

int64_t tagc_ckpt_reader_step(const tagc_ckpt_reader *rd) { return rd->step; }
int tagc_ckpt_reader_world_size(const tagc_ckpt_reader *rd) { return rd->world_size; }
const char *tagc_ckpt_reader_path(const tagc_ckpt_reader *rd) { return rd->path; }
const json_t *tagc_ckpt_reader_manifest(const tagc_ckpt_reader *rd) { return rd->manifest; }
uint32_t tagc_ckpt_reader_manifest_crc32c(const tagc_ckpt_reader *rd) { return rd->manifest_crc; }
int tagc_ckpt_reader_n_units(const tagc_ckpt_reader *rd) { return rd->layout.n_units; }
int tagc_ckpt_reader_n_streams(const tagc_ckpt_reader *rd) { return rd->layout.n_streams; }

int64_t tagc_ckpt_reader_unit_numel(const tagc_ckpt_reader *rd, int unit) {
  return unit >= 0 && unit < rd->layout.n_units ? rd->numel[unit] : -1;
}

static int find_name(const char *const *names, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0)
      return i;
  return -1;
}

int tagc_ckpt_reader_unit_index(const tagc_ckpt_reader *rd, const char *name) {
  return find_name(rd->unit_names, rd->layout.n_units, name);
}

int tagc_ckpt_reader_stream_index(const tagc_ckpt_reader *rd, const char *name) {
  return find_name(rd->stream_names, rd->layout.n_streams, name);
}

const json_t *tagc_ckpt_reader_meta(const tagc_ckpt_reader *rd, const char *key) {
  const json_t *v = json_object_get(rd->manifest, key);
  return v ? v : json_null();
}

void tagc_ckpt_close(tagc_ckpt_reader *rd) {
  if (!rd)
    return;
  for (int r = 0; rd->files && r < rd->world_size; r++)
    if (rd->files[r].fd >= 0)
      close(rd->files[r].fd);
  json_decref(rd->manifest);
  free(rd->unit_names);
  free(rd->numel);
  free(rd->stream_names);
  free(rd->ranges);
  free(rd->unit_off);
  free(rd->files);
  free(rd);
}
