/* Retention: keep the newest K and every M-th, remove stale temporary directories of older
 * steps, keep a newer one in progress, and never delete the newest valid checkpoint even when
 * newer ones are defective. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "common/log.h"
#include "fixture.h"
#include "test.h"

static int exists(const char *dir, const char *name) {
  char path[4200];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return stat(path, &sb) == 0;
}

/* Saves steps 1..10 through tagc_ckpt_save with keep_last 2, keep_every 4. */
static void test_policy(void) {
  char *dir = fx_tempdir("retain");
  tagc_ckpt_range ranges[FX_UNITS];
  float *data[FX_UNITS * FX_STREAMS];
  fx_ranges(1, 0, ranges);
  fx_shard_alloc(1, 0, 9, data);
  tagc_ckpt_writer_config cfg = {.dir = dir, .rank = 0, .world_size = 1, .layout = fx_layout, .ranges = ranges,
                                 .keep_last = 2, .keep_every = 4};
  for (int step = 1; step <= 10; step++) {
    if (step == 3) {
      /* A crashed save of step 2 left its temporary directory behind. */
      char tmp[4200];
      snprintf(tmp, sizeof tmp, "%s/step-2.tmp", dir);
      CHECK_EQ_INT(mkdir(tmp, 0755), 0);
    }
    CHECK_OK(tagc_ckpt_save(&cfg, step, (const float *const *)data, NULL, NULL));
  }
  static const char *const kept[] = {"step-4", "step-8", "step-9", "step-10"};
  static const char *const gone[] = {"step-1", "step-2", "step-3", "step-5", "step-6", "step-7", "step-2.tmp"};
  for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
    CHECK_MSG(exists(dir, kept[i]), "%s was removed", kept[i]);
  for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
    CHECK_MSG(!exists(dir, gone[i]), "%s was kept", gone[i]);

  /* A save of step 11 in progress is not touched. */
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s/step-11.tmp", dir);
  CHECK_EQ_INT(mkdir(tmp, 0755), 0);
  int removed = -1;
  CHECK_OK(tagc_ckpt_retain(dir, 2, 4, &removed));
  CHECK_EQ_INT(removed, 0);
  CHECK(exists(dir, "step-11.tmp"));

  /* Steps 9 and 10 become defective: step 8 is the newest valid and survives keep_last 1;
   * the defective newer ones are left for inspection. */
  char path[4200];
  snprintf(path, sizeof path, "%s/step-10/rank-00000.bin", dir);
  CHECK_EQ_INT(unlink(path), 0);
  snprintf(path, sizeof path, "%s/step-9/manifest.json", dir);
  CHECK_EQ_INT(unlink(path), 0);
  CHECK_OK(tagc_ckpt_retain(dir, 1, 0, &removed));
  CHECK_EQ_INT(removed, 1); /* step 4 */
  CHECK(exists(dir, "step-8"));
  CHECK(exists(dir, "step-9"));
  CHECK(exists(dir, "step-10"));
  CHECK(!exists(dir, "step-4"));
  tagc_ckpt_reader *rd;
  CHECK_OK(tagc_ckpt_find_latest_valid(dir, TAGC_CKPT_VERIFY_FULL, &rd));
  if (rd)
    CHECK_EQ_INT(tagc_ckpt_reader_step(rd), 8);
  tagc_ckpt_close(rd);

  /* keep_last <= 0 keeps everything committed. */
  CHECK_OK(tagc_ckpt_retain(dir, 0, 0, &removed));
  CHECK(exists(dir, "step-8"));

  /* At resume, every partial save goes, committed ones stay. */
  CHECK_OK(tagc_ckpt_remove_partial(dir, &removed));
  CHECK_EQ_INT(removed, 1);
  CHECK(!exists(dir, "step-11.tmp"));
  CHECK(exists(dir, "step-8"));
  fx_shard_free(data);
  fx_rmtree(dir);
  free(dir);
}

int main(void) {
  tagc_log_configure("error", TAGC_LOG_TEXT);
  test_policy();
  return TEST_END();
}
