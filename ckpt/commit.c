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
                   "format", "tagc-ckpt", "version", CKPT_MANIFEST_VERSION, "software_version",
                   TAGC_VERSION, "step", (json_int_t)step, "world_size", world_size, "created",
                   tagc_wall_time(), "dtype", "float32", "byte_order", "little", "streams", streams,
                   "units", units, "files", files, "model", meta_value(meta->model), "tensors", meta_value(meta->tensors), "sampler",
                   meta_value(meta->sampler), "rng", meta_value(meta->rng), "compression",
                   meta_value(meta->compression));
}

static tagc_status write_latest(const char *dir, int64_t step) {
  char path[CKPT_PATH_MAX], name[CKPT_NAME_MAX], text[64];
  TAGC_CHECK(ckpt_path_fmt(path, "%s/LATEST", dir));
  ckpt_step_name(step, 0, name);
  int len = snprintf(text, sizeof text, "%s\n", name);
  TAGC_CHECK(ckpt_write_file_atomic(path, text, (size_t)len));
  return ckpt_fsync_path(dir);
}

/* Writes the sealed manifest into tmpdir; *crc gets the CRC32C of the file (the etcd record). */
static tagc_status write_manifest(const char *tmpdir, const json_t *man, uint32_t *crc) {
  char path[CKPT_PATH_MAX], *text;
  size_t len;
  TAGC_CHECK(ckpt_path_fmt(path, "%s/manifest.json", tmpdir));
  TAGC_CHECK(ckpt_manifest_seal(man, &text, &len));
  *crc = tagc_crc32c(0, text, len);
  tagc_status st = ckpt_write_file_atomic(path, text, len);
  free(text);
  if (st == TAGC_OK)
    st = ckpt_fsync_path(tmpdir);
  return st;
}

/* Moves tmpdir to stepdir. A committed directory of the same step (an invalid leftover, or
 * the loader would have resumed from it) is swapped out in one atomic exchange, so step-<s>
 * names the old or the new checkpoint at every instant; the old one, now named
 * step-<s>.tmp, is removed afterwards (a crash leaves it for tagc_ckpt_remove_partial).
 * Where the file system cannot exchange, it is renamed to step-<s>.replaced first. */
static tagc_status publish_dir(const char *dir, const char *tmpdir, const char *stepdir) {
  struct stat sb;
  if (stat(stepdir, &sb) != 0) {
    if (rename(tmpdir, stepdir) != 0)
      return tagc_errorf(TAGC_EIO, "rename %s -> %s: %s", tmpdir, stepdir, strerror(errno));
    return ckpt_fsync_path(dir);
  }
  LOG_WARN("ckpt", "replacing existing %s", stepdir);
  const char *old = tmpdir;
  char aside[CKPT_PATH_MAX];
  if (renameat2(AT_FDCWD, tmpdir, AT_FDCWD, stepdir, RENAME_EXCHANGE) != 0) {
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
      return tagc_errorf(TAGC_EIO, "exchange %s <-> %s: %s", tmpdir, stepdir, strerror(errno));
    TAGC_CHECK(ckpt_path_fmt(aside, "%s%s", stepdir, CKPT_SUFFIX_REPLACED));
    TAGC_CHECK(ckpt_remove_dir(aside));
    if (rename(stepdir, aside) != 0)
      return tagc_errorf(TAGC_EIO, "rename %s: %s", stepdir, strerror(errno));
    if (rename(tmpdir, stepdir) != 0)
      return tagc_errorf(TAGC_EIO, "rename %s -> %s: %s", tmpdir, stepdir, strerror(errno));
    old = aside;
  }
  TAGC_CHECK(ckpt_fsync_path(dir));
  ckpt_fault_point(CKPT_FAULT_REPLACING, 0);
  return ckpt_remove_dir(old);
}

tagc_status tagc_ckpt_commit(const char *dir, int64_t step, int world_size,
                             const tagc_ckpt_layout *layout, const tagc_ckpt_meta *meta,
                             tagc_ckpt_committed *out) {
  TAGC_CHECK(ckpt_layout_check(layout));
  if (!dir || step < 0 || world_size < 1)
    return tagc_errorf(TAGC_EINVAL, "checkpoint commit: step %lld, world size %d", (long long)step, world_size);
  double t0 = tagc_now();
  char tmpdir[CKPT_PATH_MAX], stepdir[CKPT_PATH_MAX];
  TAGC_CHECK(tagc_ckpt_step_path(dir, step, 1, tmpdir, sizeof tmpdir));
  TAGC_CHECK(tagc_ckpt_step_path(dir, step, 0, stepdir, sizeof stepdir));

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
  uint32_t manifest_crc;
  TAGC_CHECK_GOTO(write_manifest(tmpdir, man, &manifest_crc), st, done);
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
    out->manifest_crc32c = manifest_crc;
    snprintf(out->path, sizeof out->path, "%s", stepdir);
  }
done:
  json_decref(files);
  json_decref(man);
  free(ranges);
  return st;
}

/* Rank 0, after a failed write, barrier or commit: the save is abandoned, so its directory
 * goes (a slow rank still writing into it fails, which is what it should do then), and so do
 * those of earlier failed saves that a slower rank made again after their removal (while
 * saves keep failing, no commit's retention sweeps them). */
static void remove_failed_save(const char *dir, int64_t step) {
  tagc_error_saved saved;
  tagc_error_save(&saved);
  char tmpdir[CKPT_PATH_MAX];
  if (tagc_ckpt_step_path(dir, step, 1, tmpdir, sizeof tmpdir) == TAGC_OK && ckpt_remove_dir(tmpdir) != TAGC_OK)
    LOG_WARN("ckpt", "removing the failed save: %s", tagc_last_error());
  int64_t *tmps = NULL;
  int n = 0;
  if (ckpt_list_steps(dir, CKPT_SUFFIX_TMP, &tmps, &n) == TAGC_OK) {
    for (int i = 0; i < n; i++)
      if (tmps[i] < step && tagc_ckpt_step_path(dir, tmps[i], 1, tmpdir, sizeof tmpdir) == TAGC_OK &&
          ckpt_remove_dir(tmpdir) != TAGC_OK)
        LOG_WARN("ckpt", "removing an earlier failed save: %s", tagc_last_error());
  }
  free(tmps);
  tagc_error_restore(&saved);
}

tagc_status tagc_ckpt_save(const tagc_ckpt_writer_config *cfg, int64_t step,
                           const float *const *data, const tagc_ckpt_meta *meta,
                           tagc_ckpt_committed *out) {
  if (!cfg || !cfg->dir || (cfg->world_size > 1 && !cfg->barrier))
    return tagc_errorf(TAGC_EINVAL, "checkpoint save: a directory and (for more than one rank) a barrier are required");
  tagc_status st = tagc_ckpt_write_shard(cfg->dir, step, cfg->rank, cfg->world_size, &cfg->layout,
                                         cfg->ranges, data);
  if (st == TAGC_OK && cfg->barrier)
    st = cfg->barrier(cfg->barrier_arg, step);
  if (cfg->rank != 0)
    return st;
  tagc_ckpt_committed local;
  if (!out)
    out = &local;
  if (st == TAGC_OK)
    st = tagc_ckpt_commit(cfg->dir, step, cfg->world_size, &cfg->layout, meta, out);
  if (st != TAGC_OK) {
    remove_failed_save(cfg->dir, step);
    return st;
  }
  if (tagc_ckpt_retain(cfg->dir, cfg->keep_last, cfg->keep_every, NULL) != TAGC_OK)
    LOG_WARN("ckpt", "retention after step %lld failed: %s", (long long)step, tagc_last_error());
  return cfg->on_commit ? cfg->on_commit(cfg->on_commit_arg, out) : TAGC_OK;
}

/* Removes step-<s><suffix> under dir, logging it. */
static tagc_status remove_step(const char *dir, int64_t s, const char *suffix, int *n_removed) {
  char path[CKPT_PATH_MAX], name[CKPT_NAME_MAX];
  ckpt_step_name(s, 0, name);
  TAGC_CHECK(ckpt_path_fmt(path, "%s/%s%s", dir, name, suffix));
  LOG_INFO("ckpt", "removing %s", path);
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
  TAGC_CHECK_GOTO(ckpt_list_steps(dir, "", &steps, &n), st, done);
  TAGC_CHECK_GOTO(ckpt_list_steps(dir, CKPT_SUFFIX_TMP, &tmps, &n_tmp), st, done);
  int64_t newest = newest_valid_step(dir, steps, n);
  if (newest < 0)
    goto done; /* nothing valid: keep everything for inspection */
  for (int i = 0; i < n && keep_last > 0; i++) {
    int keep = i < keep_last || steps[i] >= newest || (keep_every > 0 && steps[i] % keep_every == 0);
    if (!keep)
      TAGC_CHECK_GOTO(remove_step(dir, steps[i], "", &removed), st, done);
  }
  for (int i = 0; i < n_tmp; i++)
    if (tmps[i] < newest)
      TAGC_CHECK_GOTO(remove_step(dir, tmps[i], CKPT_SUFFIX_TMP, &removed), st, done);
done:
  free(steps);
  free(tmps);
  if (n_removed)
    *n_removed = removed;
  return st;
}

tagc_status tagc_ckpt_remove_partial(const char *dir, int *n_removed) {
  static const char *const suffixes[] = {CKPT_SUFFIX_TMP, CKPT_SUFFIX_REPLACED};
  int removed = 0;
  tagc_status st = TAGC_OK;
  for (int k = 0; k < 2 && st == TAGC_OK; k++) {
    int64_t *steps;
    int n;
    st = ckpt_list_steps(dir, suffixes[k], &steps, &n);
    for (int i = 0; i < n && st == TAGC_OK; i++)
      st = remove_step(dir, steps[i], suffixes[k], &removed);
    free(steps);
  }
  if (n_removed)
    *n_removed = removed;
  return st;
}
