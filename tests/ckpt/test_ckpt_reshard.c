/* Save at W = 2 (in one process and as two forked ranks), load at W' = 1, 2, 3, 4: the
 * gathered params, moments and residual are bit-identical; arbitrary ranges, uneven saved
 * ranges and the manifest's caller state round-trip. */
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "common/log.h"
#include "fixture.h"
#include "test.h"

static void check_all_world_sizes(const char *dir, int64_t step, uint32_t seed) {
  char path[4096];
  snprintf(path, sizeof path, "%s/step-%lld", dir, (long long)step);
  tagc_ckpt_reader *rd;
  CHECK_OK(tagc_ckpt_open(path, TAGC_CKPT_VERIFY_FULL, &rd));
  if (!rd)
    return;
  CHECK_EQ_INT(tagc_ckpt_reader_step(rd), step);
  CHECK_EQ_INT(tagc_ckpt_reader_world_size(rd), 2);
  for (int w2 = 1; w2 <= 4; w2++)
    CHECK_MSG(fx_check_load(rd, w2, seed) == 0, "load at W' = %d differs from what was saved", w2);
  tagc_ckpt_close(rd);
}

static void test_inproc(void) {
  char *dir = fx_tempdir("reshard");
  json_t *model = json_pack("{s:i, s:i}", "layers", 2, "d_model", 64);
  json_t *rng = json_pack("{s:s}", "state", "0123456789abcdef");
  json_t *comp = json_pack("{s:[f,f]}", "rho", 0.25, 0.5);
  json_t *tensors = json_pack("{s:[{s:s, s:[i,i], s:i}]}", "embed", "name", "wte", "shape", 1031, 1, "offset", 0);
  tagc_ckpt_meta meta = {.model = model, .tensors = tensors, .rng = rng, .compression = comp};
  CHECK_OK(fx_save_inproc(dir, 7, 2, 11, &meta));
  check_all_world_sizes(dir, 7, 11);

  tagc_ckpt_reader *rd;
  CHECK_OK(tagc_ckpt_find_latest_valid(dir, TAGC_CKPT_VERIFY_QUICK, &rd));
  if (rd) {
    CHECK(json_equal((json_t *)tagc_ckpt_reader_meta(rd, "model"), model));
    CHECK(json_equal((json_t *)tagc_ckpt_reader_meta(rd, "compression"), comp));
    CHECK(json_equal((json_t *)tagc_ckpt_reader_meta(rd, "tensors"), tensors));
    CHECK(json_equal((json_t *)tagc_ckpt_reader_meta(rd, "rng"), rng));
    CHECK(json_is_null(tagc_ckpt_reader_meta(rd, "sampler")));
    CHECK_EQ_INT(tagc_ckpt_reader_unit_index(rd, "tiny"), 2);
    CHECK_EQ_INT(tagc_ckpt_reader_stream_index(rd, "residual"), 3);
    CHECK_EQ_INT(tagc_ckpt_reader_stream_index(rd, "nope"), -1);
    CHECK_EQ_INT(tagc_ckpt_reader_unit_numel(rd, 1), 4096);
    /* A range straddling the two saved shards and running into padding. */
    float buf[700];
    int64_t lo = 500, hi = 1200; /* embed has 1031 elements, saved as [0,516) + [516,1031) */
    CHECK_OK(tagc_ckpt_read(rd, 0, 1, lo, hi, buf));
    long bad = 0;
    for (int64_t i = lo; i < hi; i++) {
      float want = i < 1031 ? fx_value(0, 1, i, 11) : 0.0f;
      bad += memcmp(&buf[i - lo], &want, 4) != 0;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(tagc_ckpt_read(rd, 0, 4, 0, 1, buf), TAGC_EINVAL);
    CHECK_EQ_INT(tagc_ckpt_read(rd, 5, 0, 0, 1, buf), TAGC_EINVAL);
    CHECK_EQ_INT(tagc_ckpt_read(rd, 0, 0, 5, 4, buf), TAGC_EINVAL);
    CHECK_OK(tagc_ckpt_verify_files(rd, 1, 2));
    tagc_ckpt_close(rd);
  }
  json_decref(model);
  json_decref(rng);
  json_decref(comp);
  json_decref(tensors);
  fx_rmtree(dir);
  free(dir);
}

/* Two forked ranks run the real protocol: write, barrier, rank 0 commits. */
static void test_forked(void) {
  char *dir = fx_tempdir("reshard-fork");
  fx_barrier *b = fx_barrier_new(2);
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      tagc_ckpt_range ranges[FX_UNITS];
      float *data[FX_UNITS * FX_STREAMS];
      fx_ranges(2, r, ranges);
      fx_shard_alloc(2, r, 23, data);
      tagc_ckpt_writer_config cfg = {.dir = dir, .rank = r, .world_size = 2, .layout = fx_layout,
                                     .ranges = ranges, .barrier = fx_barrier_wait, .barrier_arg = b};
      tagc_status st = tagc_ckpt_save(&cfg, 30, (const float *const *)data, NULL, NULL);
      fx_shard_free(data);
      _exit(st == TAGC_OK ? 0 : 1);
    }
  }
  for (int r = 0; r < 2; r++) {
    int status;
    waitpid(pids[r], &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d failed", r);
  }
  check_all_world_sizes(dir, 30, 23);
  fx_barrier_free(b);
  fx_rmtree(dir);
  free(dir);
}

/* Uneven saved ranges (rank 1 holds most of each unit, rank 2 nothing of some). */
static void test_uneven_ranges(void) {
  char *dir = fx_tempdir("reshard-uneven");
  static const int64_t numel[FX_UNITS] = {1031, 4096, 3, 0, 1};
  tagc_ckpt_range ranges[3][FX_UNITS];
  for (int u = 0; u < FX_UNITS; u++) {
    int64_t a = numel[u] / 7, b = numel[u];
    ranges[0][u] = (tagc_ckpt_range){0, a};
    ranges[1][u] = (tagc_ckpt_range){a, b};
    ranges[2][u] = (tagc_ckpt_range){b, b + 5}; /* padding only */
  }
  for (int r = 0; r < 3; r++) {
    float *data[FX_UNITS * FX_STREAMS];
    for (int u = 0; u < FX_UNITS; u++)
      for (int s = 0; s < FX_STREAMS; s++) {
        int64_t count = tagc_ckpt_range_count(ranges[r][u], numel[u]);
        data[u * FX_STREAMS + s] = malloc((size_t)count * 4 + 1);
        for (int64_t i = 0; i < count; i++)
          data[u * FX_STREAMS + s][i] = fx_value(u, s, ranges[r][u].lo + i, 5);
      }
    CHECK_OK(tagc_ckpt_write_shard(dir, 3, r, 3, &fx_layout, ranges[r], (const float *const *)data));
    fx_shard_free(data);
  }
  CHECK_OK(tagc_ckpt_commit(dir, 3, 3, &fx_layout, NULL, NULL));
  char path[4096];
  snprintf(path, sizeof path, "%s/step-3", dir);
  tagc_ckpt_reader *rd;
  CHECK_OK(tagc_ckpt_open(path, TAGC_CKPT_VERIFY_FULL, &rd));
  for (int w2 = 1; rd && w2 <= 4; w2++)
    CHECK_MSG(fx_check_load(rd, w2, 5) == 0, "uneven save, load at W' = %d differs", w2);
  tagc_ckpt_close(rd);
  fx_rmtree(dir);
  free(dir);
}

/* An abandoned attempt at W = 3 left shards in step-4.tmp; the retry at W = 2 commits only
 * its own two files. */
static void test_abandoned_attempt(void) {
  char *dir = fx_tempdir("reshard-retry");
  for (int r = 0; r < 3; r++) {
    tagc_ckpt_range ranges[FX_UNITS];
    float *data[FX_UNITS * FX_STREAMS];
    fx_ranges(3, r, ranges);
    fx_shard_alloc(3, r, 8, data);
    CHECK_OK(tagc_ckpt_write_shard(dir, 4, r, 3, &fx_layout, ranges, (const float *const *)data));
    fx_shard_free(data);
  }
  CHECK_OK(fx_save_inproc(dir, 4, 2, 9, NULL));
  char path[4200];
  snprintf(path, sizeof path, "%s/step-4/rank-00002.bin", dir);
  CHECK(access(path, F_OK) != 0);
  snprintf(path, sizeof path, "%s/step-4", dir);
  tagc_ckpt_reader *rd;
  CHECK_OK(tagc_ckpt_open(path, TAGC_CKPT_VERIFY_FULL, &rd));
  if (rd)
    CHECK_EQ_INT(fx_check_load(rd, 3, 9), 0);
  tagc_ckpt_close(rd);
  fx_rmtree(dir);
  free(dir);
}

int main(void) {
  tagc_log_configure("warn", TAGC_LOG_TEXT);
  test_inproc();
  test_forked();
  test_uneven_ranges();
  test_abandoned_attempt();
  return TEST_END();
}
