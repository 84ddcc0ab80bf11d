/* Commit (rank 0), synchronous save and retention. */
#include <dirent.h>
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
#include "common/timeutil.h"

/* Checks rank r's durable shard file and appends its manifest entry to `files`. */
static tagc_status check_shard(const char *tmpdir, int64_t step, int r, int world_size,
                               const tagc_ckpt_layout *layout, tagc_ckpt_range *ranges,
                               json_t *files, int64_t *total) {
  char name[CKPT_NAME_MAX], path[CKPT_PATH_MAX];
  ckpt_shard_name(r, name);
  TAGC_CHECK(ckpt_path_fmt(path, "%s/%s", tmpdir, name));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return tagc_errorf(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "shard %s: %s", path, strerror(errno));
  struct stat sb;
  tagc_status st = TAGC_OK;
  if (fstat(fd, &sb) != 0) {
    st = tagc_errorf(TAGC_EIO, "stat %s: %s", path, strerror(errno));
    goto done;
  }
  ckpt_shard_header want = {.header_bytes = (uint32_t)ckpt_shard_header_bytes(layout->n_units), .rank = (uint32_t)r,
                       .world_size = (uint32_t)world_size, .step = step,
                       .n_units = (uint32_t)layout->n_units, .n_streams = (uint32_t)layout->n_streams};
  TAGC_CHECK_GOTO(ckpt_shard_header_read(fd, path, &want, layout, (uint64_t)sb.st_size, ranges), st, done);
  uint32_t crc;
  TAGC_CHECK_GOTO(ckpt_shard_trailer_file_crc(fd, path, (uint64_t)sb.st_size, &crc), st, done);
  json_t *rj = json_array();
  for (int u = 0; u < layout->n_units; u++)
    json_array_append_new(rj, json_pack("[II]", (json_int_t)ranges[u].lo, (json_int_t)ranges[u].hi));
  json_array_append_new(files, json_pack("{s:i, s:s, s:I, s:I, s:o}", "rank", r, "file", name, "bytes",
                                         (json_int_t)sb.st_size, "crc32c", (json_int_t)crc, "ranges", rj));
  *total += sb.st_size;
done:
  close(fd);
  return st;
}

/* Removes what an earlier, abandoned attempt at this step may have left in tmpdir: temporary
 * shard files and shards of ranks >= world_size. */
static tagc_status remove_strays(const char *tmpdir, int world_size) {
  DIR *d = opendir(tmpdir);
  if (!d)
    return tagc_errorf(TAGC_EIO, "opendir %s: %s", tmpdir, strerror(errno));
  tagc_status st = TAGC_OK;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && st == TAGC_OK) {
    int r;
    if (e->d_name[0] == '.' || (ckpt_parse_shard_name(e->d_name, &r) && r < world_size))
      continue;
    char path[CKPT_PATH_MAX];
    st = ckpt_path_fmt(path, "%s/%s", tmpdir, e->d_name);
    if (st == TAGC_OK && unlink(path) != 0)
      st = tagc_errorf(TAGC_EIO, "remove stray %s: %s", path, strerror(errno));
  }
  closedir(d);
  return st;
}

static json_t *meta_value(const json_t *v) { return v ? json_deep_copy(v) : json_null(); }

static json_t *build_manifest(int64_t step, int world_size, const tagc_ckpt_layout *layout,
                              const tagc_ckpt_meta *meta, json_t *files) {
  json_t *units = json_array(), *streams = json_array();
  for (int u = 0; u < layout->n_units; u++)
    json_array_append_new(units, json_pack("{s:s, s:I}", "name", layout->unit_names[u], "numel",
                                           (json_int_t)layout->unit_numel[u]));
  for (int s = 0; s < layout->n_streams; s++)
    json_array_append_new(streams, json_string(layout->stream_names[s]));
  tagc_ckpt_meta none = {0};
  if (!meta)
    meta = &none;
  return json_pack("{s:s, s:i, s:s, s:I, s:i, s:f, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                   "format", "tagc-ckpt", "version", TAGC_CKPT_FORMAT_VERSION, "software_version",
                   TAGC_VERSION, "step", (json_int_t)step, "world_size", world_size, "created",
                   tagc_wall_time(), "dtype", "float32", "byte_order", "little", "streams", streams,
                   "units", units, "files", files, "model", meta_value(meta->model), "tensors", meta_value(meta->tensors), "sampler",
                   meta_value(meta->sampler), "rng", meta_value(meta->rng), "compression",
                   meta_value(meta->compression));
}

static tagc_status write_latest(const char *dir, int64_t step) {
  char tmp[CKPT_PATH_MAX], path[CKPT_PATH_MAX], name[CKPT_NAME_MAX], text[64];
  TAGC_CHECK(ckpt_path_fmt(tmp, "%s/LATEST.tmp", dir));
  TAGC_CHECK(ckpt_path_fmt(path, "%s/LATEST", dir));
  ckpt_step_name(step, 0, name);
  int len = snprintf(text, sizeof text, "%s\n", name);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return tagc_errorf(TAGC_EIO, "create %s: %s", tmp, strerror(errno));
  tagc_status st = ckpt_write_full(fd, text, (size_t)len, tmp);
  if (st == TAGC_OK && fsync(fd) != 0)
    st = tagc_errorf(TAGC_EIO, "fsync %s: %s", tmp, strerror(errno));
  close(fd);
  if (st == TAGC_OK && rename(tmp, path) != 0)
    st = tagc_errorf(TAGC_EIO, "rename %s: %s", tmp, strerror(errno));
  if (st == TAGC_OK)
    st = ckpt_fsync_path(dir);
  return st;
}

/* Moves tmpdir to stepdir; a committed directory of the same step (an invalid leftover, or
 * the loader would have resumed from it) is moved aside first and removed afterwards. */
static tagc_status publish_dir(const char *dir, const char *tmpdir, const char *stepdir) {
  char aside[CKPT_PATH_MAX];
  TAGC_CHECK(ckpt_path_fmt(aside, "%s.replaced", stepdir));
  struct stat sb;
  int replacing = stat(stepdir, &sb) == 0;
  if (replacing) {
    LOG_WARN("ckpt", "replacing existing %s", stepdir);
    TAGC_CHECK(ckpt_remove_dir(aside));
    if (rename(stepdir, aside) != 0)
      return tagc_errorf(TAGC_EIO, "rename %s: %s", stepdir, strerror(errno));
  }
  if (rename(tmpdir, stepdir) != 0)
    return tagc_errorf(TAGC_EIO, "rename %s -> %s: %s", tmpdir, stepdir, strerror(errno));
  TAGC_CHECK(ckpt_fsync_path(dir));
  return replacing ? ckpt_remove_dir(aside) : TAGC_OK;
}

static tagc_status file_crc(const char *path, uint32_t *crc) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return tagc_errorf(TAGC_EIO, "%s: %s", path, strerror(errno));
  unsigned char buf[65536];
  size_t n;
  *crc = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    *crc = tagc_crc32c(*crc, buf, n);
  int err = ferror(f);
  fclose(f);
  return err ? tagc_errorf(TAGC_EIO, "read %s", path) : TAGC_OK;
}

tagc_status tagc_ckpt_commit(const char *dir, int64_t step, int world_size,
                             const tagc_ckpt_layout *layout, const tagc_ckpt_meta *meta,
                             tagc_ckpt_committed *out) {
  TAGC_CHECK(ckpt_layout_check(layout));
  if (!dir || step < 0 || world_size < 1)
    return tagc_errorf(TAGC_EINVAL, "checkpoint commit: step %lld, world size %d", (long long)step, world_size);
  double t0 = tagc_now();
  char tmpdir[CKPT_PATH_MAX], stepdir[CKPT_PATH_MAX], manifest[CKPT_PATH_MAX];
  TAGC_CHECK(tagc_ckpt_step_path(dir, step, 1, tmpdir, sizeof tmpdir));
  TAGC_CHECK(tagc_ckpt_step_path(dir, step, 0, stepdir, sizeof stepdir));
  TAGC_CHECK(ckpt_path_fmt(manifest, "%s/manifest.json", tmpdir));

  tagc_ckpt_range *ranges = malloc(((size_t)world_size * layout->n_units + 1) * sizeof *ranges);
  json_t *files = json_array(), *man = NULL;
  if (!ranges || !files) {
    free(ranges);
    json_decref(files);
    return tagc_errorf(TAGC_ENOMEM, "checkpoint commit");
  }
  tagc_status st = TAGC_OK;
  int64_t total = 0;
  for (int r = 0; r < world_size; r++)
    TAGC_CHECK_GOTO(check_shard(tmpdir, step, r, world_size, layout, ranges + (size_t)r * layout->n_units,
                                files, &total), st, done);
  TAGC_CHECK_GOTO(ckpt_ranges_check_tiling(ranges, world_size, layout), st, done);
  TAGC_CHECK_GOTO(remove_strays(tmpdir, world_size), st, done);

  ckpt_fault_point(CKPT_FAULT_BEFORE_MANIFEST, 0);
  man = build_manifest(step, world_size, layout, meta, files);
  files = NULL; /* stolen by the manifest */
  if (!man) {
    st = tagc_errorf(TAGC_ENOMEM, "checkpoint manifest");
    goto done;
  }
  TAGC_CHECK_GOTO(tagc_json_write_file(manifest, man), st, done);
  TAGC_CHECK_GOTO(ckpt_fsync_path(tmpdir), st, done);
  ckpt_fault_point(CKPT_FAULT_BEFORE_RENAME, 0);
  TAGC_CHECK_GOTO(publish_dir(dir, tmpdir, stepdir), st, done);
  ckpt_fault_point(CKPT_FAULT_BEFORE_LATEST, 0);
  TAGC_CHECK_GOTO(write_latest(dir, step), st, done);
  LOG_INFO("ckpt", "committed %s: %d shards, %lld bytes, commit %.3f s", stepdir, world_size, (long long)total,
           tagc_now() - t0);
  if (out) {
    out->step = step;
    out->world_size = world_size;
    out->total_bytes = total;
    snprintf(out->path, sizeof out->path, "%s", stepdir);
    TAGC_CHECK_GOTO(ckpt_path_fmt(manifest, "%s/manifest.json", stepdir), st, done);
    st = file_crc(manifest, &out->manifest_crc32c);
  }
done:
  json_decref(files);
  json_decref(man);
  free(ranges);
  return st;
}

tagc_status tagc_ckpt_save(const tagc_ckpt_writer_config *cfg, int64_t step,
                           const float *const *data, const tagc_ckpt_meta *meta,
                           tagc_ckpt_committed *out) {
  if (!cfg || !cfg->dir || (cfg->world_size > 1 && !cfg->barrier))
    return tagc_errorf(TAGC_EINVAL, "checkpoint save: a directory and (for more than one rank) a barrier are required");
  TAGC_CHECK(tagc_ckpt_write_shard(cfg->dir, step, cfg->rank, cfg->world_size, &cfg->layout, cfg->ranges, data));
  if (cfg->barrier)
    TAGC_CHECK(cfg->barrier(cfg->barrier_arg, step));
  if (cfg->rank != 0)
    return TAGC_OK;
  tagc_ckpt_committed local;
  if (!out)
    out = &local;
  TAGC_CHECK(tagc_ckpt_commit(cfg->dir, step, cfg->world_size, &cfg->layout, meta, out));
  if (tagc_ckpt_retain(cfg->dir, cfg->keep_last, cfg->keep_every, NULL) != TAGC_OK)
    LOG_WARN("ckpt", "retention after step %lld failed: %s", (long long)step, tagc_last_error());
  return cfg->on_commit ? cfg->on_commit(cfg->on_commit_arg, out) : TAGC_OK;
}

/* Removes step-<s> (or step-<s>.tmp when tmp) under dir, logging it. */
static tagc_status remove_step(const char *dir, int64_t s, int tmp, int *n_removed) {
  char path[CKPT_PATH_MAX];
  TAGC_CHECK(tagc_ckpt_step_path(dir, s, tmp, path, sizeof path));
  LOG_INFO("ckpt", "retention: removing %s", path);
  TAGC_CHECK(ckpt_remove_dir(path));
  (*n_removed)++;
  return TAGC_OK;
}

static int64_t newest_valid_step(const char *dir, const int64_t *steps, int n) {
  for (int i = 0; i < n; i++) {
    char path[CKPT_PATH_MAX];
    tagc_ckpt_reader *rd;
    if (tagc_ckpt_step_path(dir, steps[i], 0, path, sizeof path) == TAGC_OK &&
        tagc_ckpt_open(path, TAGC_CKPT_VERIFY_QUICK, &rd) == TAGC_OK) {
      tagc_ckpt_close(rd);
      return steps[i];
    }
  }
  return -1;
}

tagc_status tagc_ckpt_retain(const char *dir, int keep_last, int keep_every, int *n_removed) {
  int removed = 0;
  int64_t *steps = NULL, *tmps = NULL;
  int n = 0, n_tmp = 0;
  tagc_status st;
  TAGC_CHECK_GOTO(ckpt_list_steps(dir, 0, &steps, &n), st, done);
  TAGC_CHECK_GOTO(ckpt_list_steps(dir, 1, &tmps, &n_tmp), st, done);
  int64_t newest = newest_valid_step(dir, steps, n);
  if (newest < 0)
    goto done; /* nothing valid: keep everything for inspection */
  for (int i = 0; i < n && keep_last > 0; i++) {
    int keep = i < keep_last || steps[i] >= newest || (keep_every > 0 && steps[i] % keep_every == 0);
    if (!keep)
      TAGC_CHECK_GOTO(remove_step(dir, steps[i], 0, &removed), st, done);
  }
  for (int i = 0; i < n_tmp; i++)
    if (tmps[i] < newest)
      TAGC_CHECK_GOTO(remove_step(dir, tmps[i], 1, &removed), st, done);
done:
  free(steps);
  free(tmps);
  if (n_removed)
    *n_removed = removed;
  return st;
}

tagc_status tagc_ckpt_remove_partial(const char *dir, int *n_removed) {
  int removed = 0;
  int64_t *tmps;
  int n_tmp;
  tagc_status st = ckpt_list_steps(dir, 1, &tmps, &n_tmp);
  for (int i = 0; i < n_tmp && st == TAGC_OK; i++)
    st = remove_step(dir, tmps[i], 1, &removed);
  free(tmps);
  if (n_removed)
    *n_removed = removed;
  return st;
}
