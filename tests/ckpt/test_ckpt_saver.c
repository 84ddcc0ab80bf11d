/* Asynchronous saver: submit returns after the copy, a second submit waits for the running
 * save (backpressure), the saved data is the data at submit time, two ranks commit through
 * their background threads, a failing barrier is reported (with its detail, on the caller's
 * thread) without a commit, an abandoned save writes nothing, and a rank whose shard is
 * committed (its directory renamed) right after it got its final name still succeeds. */
#include <dirent.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_saver.h"
#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "fixture.h"
#include "test.h"

static tagc_status slow_barrier(void *arg, int64_t step) {
  (void)step;
  tagc_sleep(*(double *)arg);
  return TAGC_OK;
}

static tagc_status failing_barrier(void *arg, int64_t step) {
  (void)arg;
  return tagc_errorf(TAGC_ETIMEDOUT, "barrier of step %lld: peer lost", (long long)step);
}

static tagc_status thread_barrier(void *arg, int64_t step) {
  (void)step;
  pthread_barrier_wait(arg);
  return TAGC_OK;
}

static void overwrite(float *data[FX_UNITS * FX_STREAMS], int world, int rank, uint32_t seed) {
  tagc_ckpt_range r[FX_UNITS];
  fx_ranges(world, rank, r);
  for (int u = 0; u < FX_UNITS; u++)
    for (int s = 0; s < FX_STREAMS; s++)
      for (int64_t i = 0; i < tagc_ckpt_range_count(r[u], fx_layout.unit_numel[u]); i++)
        data[u * FX_STREAMS + s][i] = fx_value(u, s, r[u].lo + i, seed);
}

static void check_step(const char *dir, int64_t step, uint32_t seed) {
  char path[4200];
  snprintf(path, sizeof path, "%s/step-%lld", dir, (long long)step);
  tagc_ckpt_reader *rd;
  CHECK_OK(tagc_ckpt_open(path, TAGC_CKPT_VERIFY_FULL, &rd));
  if (rd)
    CHECK_MSG(fx_check_load(rd, 3, seed) == 0, "step %lld does not hold the submitted data", (long long)step);
  tagc_ckpt_close(rd);
}

static void test_backpressure(void) {
  char *dir = fx_tempdir("saver");
  double delay = 0.3;
  tagc_ckpt_range ranges[FX_UNITS];
  fx_ranges(1, 0, ranges);
  tagc_ckpt_writer_config cfg = {.dir = dir, .rank = 0, .world_size = 1, .layout = fx_layout, .ranges = ranges,
                                 .barrier = slow_barrier, .barrier_arg = &delay};
  tagc_ckpt_saver *sv;
  CHECK_OK(tagc_ckpt_saver_create(&cfg, &sv));
  if (!sv)
    return;
  float *data[FX_UNITS * FX_STREAMS];
  fx_shard_alloc(1, 0, 100, data);
  json_t *sampler = json_pack("{s:I}", "position", (json_int_t)12345);
  tagc_ckpt_meta meta = {.sampler = sampler};

  double t0 = tagc_now();
  CHECK_OK(tagc_ckpt_saver_submit(sv, 1, (const float *const *)data, &meta));
  double first = tagc_now() - t0;
  CHECK_MSG(first < delay / 2, "first submit blocked %.3f s", first);
  overwrite(data, 1, 0, 200); /* the training step moves on while step 1 is written */
  json_object_set_new(sampler, "position", json_integer(999));

  t0 = tagc_now();
  CHECK_OK(tagc_ckpt_saver_submit(sv, 2, (const float *const *)data, &meta));
  double second = tagc_now() - t0;
  CHECK_MSG(second > delay / 2, "second submit did not wait for the first save (%.3f s)", second);
  CHECK_OK(tagc_ckpt_saver_wait(sv));

  tagc_ckpt_saver_stats stats;
  tagc_ckpt_saver_stats_get(sv, &stats);
  CHECK_EQ_INT(stats.saves_done, 2);
  CHECK_EQ_INT(stats.saves_failed, 0);
  CHECK_EQ_INT(stats.backpressure_waits, 1);
  CHECK_EQ_INT(stats.last_step, 2);
  CHECK_EQ_INT(stats.last_committed.step, 2);
  CHECK(stats.last_committed.total_bytes > 0);
  tagc_ckpt_saver_destroy(sv);

  check_step(dir, 1, 100);
  check_step(dir, 2, 200);
  tagc_ckpt_reader *rd;
  char path[4200];
  snprintf(path, sizeof path, "%s/step-1", dir);
  CHECK_OK(tagc_ckpt_open(path, TAGC_CKPT_VERIFY_MANIFEST, &rd));
  if (rd) {
    int64_t pos = -1;
    CHECK_OK(tagc_json_get_int(tagc_ckpt_reader_meta(rd, "sampler"), "position", &pos));
    CHECK_EQ_INT(pos, 12345);
  }
  tagc_ckpt_close(rd);
  json_decref(sampler);
  fx_shard_free(data);
  fx_rmtree(dir);
  free(dir);
}

static void test_failed_barrier(void) {
  char *dir = fx_tempdir("saver-fail");
  tagc_ckpt_range ranges[FX_UNITS];
  fx_ranges(2, 0, ranges);
  tagc_ckpt_writer_config cfg = {.dir = dir, .rank = 0, .world_size = 2, .layout = fx_layout, .ranges = ranges,
                                 .barrier = failing_barrier};
  tagc_ckpt_saver *sv;
  CHECK_OK(tagc_ckpt_saver_create(&cfg, &sv));
  float *data[FX_UNITS * FX_STREAMS];
  fx_shard_alloc(2, 0, 1, data);
  CHECK_OK(tagc_ckpt_saver_submit(sv, 5, (const float *const *)data, NULL));
  CHECK_EQ_INT(tagc_ckpt_saver_wait(sv), TAGC_ETIMEDOUT);
  CHECK_MSG(strstr(tagc_last_error(), "peer lost") != NULL, "wait's detail: '%s'", tagc_last_error());
  tagc_ckpt_saver_stats stats;
  tagc_ckpt_saver_stats_get(sv, &stats);
  CHECK_EQ_INT(stats.saves_failed, 1);
  tagc_ckpt_saver_destroy(sv);
  tagc_ckpt_reader *rd;
  CHECK_EQ_INT(tagc_ckpt_find_latest_valid(dir, TAGC_CKPT_VERIFY_MANIFEST, &rd), TAGC_ENOTFOUND);
  tagc_ckpt_writer_config no_barrier = cfg;
  no_barrier.barrier = NULL;
  CHECK_EQ_INT(tagc_ckpt_saver_create(&no_barrier, &sv), TAGC_EINVAL);
  CHECK_OK(tagc_ckpt_saver_create(&cfg, &sv));
  CHECK_EQ_INT(tagc_ckpt_saver_finish(sv, NULL), TAGC_EINVAL);
  float *const *views;
  CHECK_OK(tagc_ckpt_saver_begin(sv, 6, &views));
  CHECK_EQ_INT(tagc_ckpt_saver_begin(sv, 7, &views), TAGC_EINVAL);
  tagc_ckpt_saver_destroy(sv); /* drops the staged, unfinished save without hanging */
  fx_shard_free(data);
  fx_rmtree(dir);
  free(dir);
}

typedef struct rank_job {
  const char *dir;
  int rank;
  pthread_barrier_t *barrier;
  tagc_status st;
  int64_t committed[4]; /* steps reported to on_commit (rank 0) */
  int n_committed;
} rank_job;

static tagc_status record_commit(void *arg, const tagc_ckpt_committed *c) {
  rank_job *job = arg;
  if (job->n_committed < 4)
    job->committed[job->n_committed++] = c->step;
  return c->world_size == 2 && c->manifest_crc32c != 0 ? TAGC_OK : TAGC_EINTERNAL;
}

/* Rank 1 stages through begin/finish (as a device copy would), rank 0 through submit. */
static tagc_status stage(tagc_ckpt_saver *sv, int rank, int64_t step, float *data[FX_UNITS * FX_STREAMS]) {
  if (rank == 0)
    return tagc_ckpt_saver_submit(sv, step, (const float *const *)data, NULL);
  tagc_ckpt_range r[FX_UNITS];
  fx_ranges(2, rank, r);
  float *const *views;
  TAGC_CHECK(tagc_ckpt_saver_begin(sv, step, &views));
  for (int u = 0; u < FX_UNITS; u++)
    for (int s = 0; s < FX_STREAMS; s++)
      memcpy(views[u * FX_STREAMS + s], data[u * FX_STREAMS + s],
             (size_t)tagc_ckpt_range_count(r[u], fx_layout.unit_numel[u]) * sizeof(float));
  return tagc_ckpt_saver_finish(sv, NULL);
}

/* One rank of a two-rank job in a thread: three asynchronous saves. */
static void *rank_main(void *arg) {
  rank_job *job = arg;
  tagc_ckpt_range ranges[FX_UNITS];
  fx_ranges(2, job->rank, ranges);
  tagc_ckpt_writer_config cfg = {.dir = job->dir, .rank = job->rank, .world_size = 2, .layout = fx_layout,
                                 .ranges = ranges, .barrier = thread_barrier, .barrier_arg = job->barrier,
                                 .keep_last = 2, .on_commit = record_commit, .on_commit_arg = job};
  tagc_ckpt_saver *sv;
  job->st = tagc_ckpt_saver_create(&cfg, &sv);
  if (job->st != TAGC_OK)
    return NULL;
  float *data[FX_UNITS * FX_STREAMS];
  fx_shard_alloc(2, job->rank, 0, data);
  for (int step = 1; step <= 3 && job->st == TAGC_OK; step++) {
    overwrite(data, 2, job->rank, (uint32_t)step);
    job->st = stage(sv, job->rank, step * 10, data);
  }
  if (job->st == TAGC_OK)
    job->st = tagc_ckpt_saver_wait(sv);
  tagc_ckpt_saver_destroy(sv);
  fx_shard_free(data);
  return NULL;
}

static void test_two_ranks(void) {
  char *dir = fx_tempdir("saver-2");
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, 2);
  rank_job jobs[2] = {{.dir = dir, .rank = 0, .barrier = &barrier}, {.dir = dir, .rank = 1, .barrier = &barrier}};
  pthread_t th[2];
  for (int r = 0; r < 2; r++)
    pthread_create(&th[r], NULL, rank_main, &jobs[r]);
  for (int r = 0; r < 2; r++) {
    pthread_join(th[r], NULL);
    CHECK_OK(jobs[r].st);
  }
  pthread_barrier_destroy(&barrier);
  CHECK_EQ_INT(jobs[0].n_committed, 3);
  CHECK_EQ_INT(jobs[0].committed[2], 30);
  CHECK_EQ_INT(jobs[1].n_committed, 0);
  check_step(dir, 20, 2);
  check_step(dir, 30, 3);
  char path[4200];
  snprintf(path, sizeof path, "%s/step-10", dir);
  tagc_ckpt_reader *rd;
  CHECK_MSG(tagc_ckpt_open(path, TAGC_CKPT_VERIFY_MANIFEST, &rd) == TAGC_ENOTFOUND, "keep_last 2 kept step 10");
  fx_rmtree(dir);
  free(dir);
}

/* A begun save whose state turned out stale (a failed snapshot) is abandoned: nothing of
 * that step is written, and the next save works. */
static void test_abandon(void) {
  char *dir = fx_tempdir("saver-abandon");
  tagc_ckpt_range ranges[FX_UNITS];
  fx_ranges(1, 0, ranges);
  tagc_ckpt_writer_config cfg = {.dir = dir, .rank = 0, .world_size = 1, .layout = fx_layout, .ranges = ranges};
  tagc_ckpt_saver *sv;
  CHECK_OK(tagc_ckpt_saver_create(&cfg, &sv));
  CHECK_EQ_INT(tagc_ckpt_saver_abandon(sv), TAGC_EINVAL);
  float *const *views;
  CHECK_OK(tagc_ckpt_saver_begin(sv, 3, &views));
  overwrite((float **)views, 1, 0, 7);
  CHECK_OK(tagc_ckpt_saver_abandon(sv));
  CHECK_OK(tagc_ckpt_saver_wait(sv));
  char path[4200];
  struct stat sb;
  snprintf(path, sizeof path, "%s/step-3", dir);
  CHECK_MSG(stat(path, &sb) != 0, "the abandoned step 3 was committed");
  snprintf(path, sizeof path, "%s/step-3.tmp", dir);
  CHECK_MSG(stat(path, &sb) != 0, "the abandoned step 3 was written");
  CHECK_OK(tagc_ckpt_saver_begin(sv, 4, &views));
  overwrite((float **)views, 1, 0, 8);
  CHECK_OK(tagc_ckpt_saver_finish(sv, NULL));
  CHECK_OK(tagc_ckpt_saver_wait(sv));
  tagc_ckpt_saver_stats stats;
  tagc_ckpt_saver_stats_get(sv, &stats);
  CHECK_EQ_INT(stats.saves_abandoned, 1);
  CHECK_EQ_INT(stats.saves_done, 1);
  tagc_ckpt_saver_destroy(sv);
  check_step(dir, 4, 8);
  fx_rmtree(dir);
  free(dir);
}

/* Rank 0 of the worker waits only for the shard files, then commits: the directory may be
 * renamed the instant rank 1's shard has its final name. The hook does exactly that, inside
 * rank 1's write: rank 0 writes its shard and commits there. */
typedef struct race_job {
  const char *dir;
  int commits;
  tagc_status st;
} race_job;

static void commit_now(void *arg, int64_t step, int rank) {
  race_job *job = arg;
  if (rank != 1)
    return;
  tagc_ckpt_range r0[FX_UNITS];
  float *d0[FX_UNITS * FX_STREAMS];
  fx_ranges(2, 0, r0);
  fx_shard_alloc(2, 0, 5, d0);
  job->st = tagc_ckpt_write_shard(job->dir, step, 0, 2, &fx_layout, r0, (const float *const *)d0);
  if (job->st == TAGC_OK)
    job->st = tagc_ckpt_commit(job->dir, step, 2, &fx_layout, NULL, NULL);
  job->commits += job->st == TAGC_OK;
  fx_shard_free(d0);
}

static void test_commit_while_naming(void) {
  char *dir = fx_tempdir("saver-race");
  race_job job = {.dir = dir};
  tagc_ckpt_fault_on_shard_named(commit_now, &job);
  tagc_ckpt_range r1[FX_UNITS];
  float *d1[FX_UNITS * FX_STREAMS];
  fx_ranges(2, 1, r1);
  fx_shard_alloc(2, 1, 5, d1);
  tagc_status st = tagc_ckpt_write_shard(dir, 40, 1, 2, &fx_layout, r1, (const float *const *)d1);
  tagc_ckpt_fault_on_shard_named(NULL, NULL);
  fx_shard_free(d1);
  CHECK_OK(job.st);
  CHECK_EQ_INT(job.commits, 1);
  CHECK_MSG(st == TAGC_OK, "rank 1's write failed after rank 0 committed its shard: %s", tagc_last_error());
  tagc_ckpt_reader *rd;
  char path[4200];
  snprintf(path, sizeof path, "%s/step-40", dir);
  CHECK_OK(tagc_ckpt_open(path, TAGC_CKPT_VERIFY_FULL, &rd));
  if (rd)
    CHECK_MSG(fx_check_load(rd, 2, 5) == 0, "step 40 does not hold both shards");
  tagc_ckpt_close(rd);
  fx_rmtree(dir);
  free(dir);
}

/* Entries of dir whose name ends in suffix. */
static int count_ending(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name), k = strlen(suffix);
    n += l > k && strcmp(e->d_name + l - k, suffix) == 0;
  }
  if (d)
    closedir(d);
  return n;
}

/* A full disk (fault ckpt:full): every save fails with ENOSPC and leaves no step-N.tmp, the
 * newest valid checkpoint stays (LATEST and retention keep it), and once there is room again
 * the next save commits and retention goes on. */
static void test_full_disk(void) {
  char *dir = fx_tempdir("saver-full");
  tagc_ckpt_range ranges[FX_UNITS];
  fx_ranges(1, 0, ranges);
  tagc_ckpt_writer_config cfg = {.dir = dir, .rank = 0, .world_size = 1, .layout = fx_layout,
                                 .ranges = ranges, .keep_last = 1};
  tagc_ckpt_saver *sv;
  CHECK_OK(tagc_ckpt_saver_create(&cfg, &sv));
  if (!sv)
    return;
  float *data[FX_UNITS * FX_STREAMS];
  fx_shard_alloc(1, 0, 7, data);
  CHECK_OK(tagc_ckpt_saver_submit(sv, 1, (const float *const *)data, NULL));
  CHECK_OK(tagc_ckpt_saver_wait(sv));
  CHECK_OK(tagc_ckpt_fault_configure("ckpt:full"));
  for (int64_t step = 2; step <= 4; step++) {
    CHECK_OK(tagc_ckpt_saver_submit(sv, step, (const float *const *)data, NULL));
    CHECK_EQ_INT(tagc_ckpt_saver_wait(sv), TAGC_EIO);
    CHECK_MSG(strstr(tagc_last_error(), "No space left on device") != NULL, "detail: '%s'",
              tagc_last_error());
    CHECK_EQ_INT(count_ending(dir, ".tmp"), 0);
  }
  tagc_ckpt_saver_stats stats;
  tagc_ckpt_saver_stats_get(sv, &stats);
  CHECK_EQ_INT(stats.saves_failed, 3);
  CHECK_EQ_INT(stats.last_committed.step, 1);
  tagc_ckpt_reader *rd = NULL;
  CHECK_OK(tagc_ckpt_find_latest_valid(dir, TAGC_CKPT_VERIFY_FULL, &rd));
  CHECK_EQ_INT(rd ? tagc_ckpt_reader_step(rd) : -1, 1);
  tagc_ckpt_close(rd);
  CHECK_OK(tagc_ckpt_retain(dir, 1, 0, NULL)); /* retention while saves fail keeps it */
  check_step(dir, 1, 7);

  /* two ranks, only rank 0's disk full: rank 1's shard is written, rank 0's write fails,
     and the save's directory goes, with an earlier one a slow rank left */
  CHECK_OK(tagc_ckpt_fault_configure("ckpt:full@0"));
  char old[4200];
  snprintf(old, sizeof old, "%s/step-8.tmp", dir);
  CHECK(mkdir(old, 0755) == 0);
  fx_shard_free(data);
  tagc_ckpt_range r2[FX_UNITS];
  fx_ranges(2, 1, r2);
  fx_shard_alloc(2, 1, 7, data);
  CHECK_OK(tagc_ckpt_write_shard(dir, 9, 1, 2, &fx_layout, r2, (const float *const *)data));
  CHECK_EQ_INT(count_ending(dir, ".tmp"), 2);
  fx_shard_free(data);
  fx_ranges(2, 0, r2);
  fx_shard_alloc(2, 0, 7, data);
  tagc_ckpt_writer_config c2 = {.dir = dir, .rank = 0, .world_size = 2, .layout = fx_layout,
                                .ranges = r2, .barrier = failing_barrier, .keep_last = 1};
  CHECK_EQ_INT(tagc_ckpt_save(&c2, 9, (const float *const *)data, NULL, NULL), TAGC_EIO);
  CHECK_EQ_INT(count_ending(dir, ".tmp"), 0);
  fx_shard_free(data);

  CHECK_OK(tagc_ckpt_fault_configure(""));
  fx_shard_alloc(1, 0, 8, data);
  CHECK_OK(tagc_ckpt_saver_submit(sv, 5, (const float *const *)data, NULL));
  CHECK_OK(tagc_ckpt_saver_wait(sv));
  tagc_ckpt_saver_destroy(sv);
  check_step(dir, 5, 8);
  char path[4200];
  snprintf(path, sizeof path, "%s/step-1", dir);
  struct stat sb;
  CHECK_MSG(stat(path, &sb) != 0, "retention kept step-1 after step-5 committed");
  fx_shard_free(data);
  fx_rmtree(dir);
  free(dir);
}

int main(void) {
  tagc_log_configure("error", TAGC_LOG_TEXT);
  test_abandon();
  test_backpressure();
  test_failed_barrier();
  test_two_ranks();
  test_commit_while_naming();
  test_full_disk();
  return TEST_END();
}
