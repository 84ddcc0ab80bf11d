#define _XOPEN_SOURCE 700
#include "fixture.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/timeutil.h"

static const char *const unit_names[FX_UNITS] = {"embed", "block", "tiny", "empty", "one"};
static const int64_t unit_numel[FX_UNITS] = {1031, 4096, 3, 0, 1};
static const char *const stream_names[FX_STREAMS] = {"param", "adam_m", "adam_v", "residual"};

const tagc_ckpt_layout fx_layout = {FX_UNITS, unit_names, unit_numel, FX_STREAMS, stream_names};

float fx_value(int unit, int stream, int64_t i, uint32_t seed) {
  uint64_t x = ((uint64_t)seed << 40) ^ ((uint64_t)unit << 32) ^ ((uint64_t)stream << 28) ^ (uint64_t)i;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  uint32_t bits = (uint32_t)x;
  if (((bits >> 23) & 0xff) == 0xff) /* keep it finite */
    bits &= ~(1u << 30);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

void fx_ranges(int world, int rank, tagc_ckpt_range out[FX_UNITS]) {
  for (int u = 0; u < FX_UNITS; u++) {
    int64_t shard = (unit_numel[u] + world - 1) / world;
    out[u] = (tagc_ckpt_range){rank * shard, (rank + 1) * shard};
  }
}

void fx_shard_alloc(int world, int rank, uint32_t seed, float *data[FX_UNITS * FX_STREAMS]) {
  tagc_ckpt_range r[FX_UNITS];
  fx_ranges(world, rank, r);
  for (int u = 0; u < FX_UNITS; u++) {
    int64_t count = tagc_ckpt_range_count(r[u], unit_numel[u]);
    for (int s = 0; s < FX_STREAMS; s++) {
      float *p = malloc((size_t)count * sizeof *p + 1);
      for (int64_t i = 0; i < count; i++)
        p[i] = fx_value(u, s, r[u].lo + i, seed);
      data[u * FX_STREAMS + s] = p;
    }
  }
}

void fx_shard_free(float *data[FX_UNITS * FX_STREAMS]) {
  for (int i = 0; i < FX_UNITS * FX_STREAMS; i++)
    free(data[i]);
}

tagc_status fx_save_inproc(const char *dir, int64_t step, int world, uint32_t seed, const tagc_ckpt_meta *meta) {
  for (int r = 0; r < world; r++) {
    tagc_ckpt_range ranges[FX_UNITS];
    float *data[FX_UNITS * FX_STREAMS];
    fx_ranges(world, r, ranges);
    fx_shard_alloc(world, r, seed, data);
    tagc_status st = tagc_ckpt_write_shard(dir, step, r, world, &fx_layout, ranges, (const float *const *)data);
    fx_shard_free(data);
    if (st != TAGC_OK)
      return st;
  }
  return tagc_ckpt_commit(dir, step, world, &fx_layout, meta, NULL);
}

long fx_check_load(tagc_ckpt_reader *rd, int world2, uint32_t seed) {
  long bad = 0;
  for (int u = 0; u < FX_UNITS; u++) {
    int64_t numel = unit_numel[u];
    int64_t shard = (numel + world2 - 1) / world2;
    float *full = calloc((size_t)(shard * world2) + 1, sizeof *full);
    for (int s = 0; s < FX_STREAMS; s++) {
      for (int r = 0; r < world2; r++)
        if (tagc_ckpt_read(rd, u, s, r * shard, (r + 1) * shard, full + r * shard) != TAGC_OK) {
          free(full);
          return -1;
        }
      for (int64_t i = 0; i < shard * world2; i++) {
        float want = i < numel ? fx_value(u, s, i, seed) : 0.0f;
        bad += memcmp(&full[i], &want, sizeof want) != 0;
      }
    }
    free(full);
  }
  return bad;
}

char *fx_tempdir(const char *tag) {
  const char *base = getenv("TMPDIR");
  char *path = malloc(4096);
  snprintf(path, 4096, "%s/tagc-%s-XXXXXX", base && *base ? base : "/tmp", tag);
  if (!mkdtemp(path)) {
    perror("mkdtemp");
    exit(2);
  }
  return path;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void fx_rmtree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

int fx_flip_byte(const char *path, long offset) {
  int fd = open(path, O_RDWR);
  if (fd < 0)
    return -1;
  off_t at = offset >= 0 ? offset : lseek(fd, 0, SEEK_END) + offset;
  unsigned char c;
  int rc = pread(fd, &c, 1, at) == 1 ? 0 : -1;
  c ^= 0x40;
  if (rc == 0 && pwrite(fd, &c, 1, at) != 1)
    rc = -1;
  close(fd);
  return rc;
}

int fx_truncate(const char *path, long len) { return truncate(path, len); }

int fx_write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  fputs(text, f);
  return fclose(f);
}

struct fx_barrier {
  int world;
  int arrived;
};

fx_barrier *fx_barrier_new(int world) {
  fx_barrier *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED)
    return NULL;
  b->world = world;
  b->arrived = 0;
  return b;
}

void fx_barrier_free(fx_barrier *b) { munmap(b, sizeof *b); }

/* Each call of a process is its k-th; it passes once world * k arrivals happened. Processes
 * of one test call it the same number of times. */
tagc_status fx_barrier_wait(void *arg, int64_t step) {
  fx_barrier *b = arg;
  static int calls; /* per process (each forked rank has its own copy) */
  calls++;
  __atomic_add_fetch(&b->arrived, 1, __ATOMIC_SEQ_CST);
  double deadline = tagc_now() + 20.0;
  while (__atomic_load_n(&b->arrived, __ATOMIC_SEQ_CST) < b->world * calls) {
    if (tagc_now() > deadline)
      return tagc_errorf(TAGC_ETIMEDOUT, "test barrier of step %lld timed out", (long long)step);
    tagc_sleep(0.001);
  }
  return TAGC_OK;
}
