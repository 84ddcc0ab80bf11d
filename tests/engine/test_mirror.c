/* In-memory copies (engine/mirror.h): the rebuild's choice (tagc_mirror_choose) on hand-made
 * slot tables, the copies' period under a budget (tagc_mirror_period), and at world size 1 on
 * the CPU a copy of a trained engine rebuilt into a fresh engine, which then continues bit for
 * bit like the one copied (residuals across world sizes: tests/chaos/test_mirror.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "engine/engine.h"
#include "engine/mirror.h"
#include "test.h"

#define K TAGC_MIRROR_SLOTS

static tagc_mirror_entry ent(int64_t gen, int64_t step, int world, int rank) {
  return (tagc_mirror_entry){gen, step, world, rank, 10, 0};
}

static void test_choose(void) {
  tagc_mirror_choice c;
  /* 3 old ranks at step 7 (gen 1); new world of 2: rank 0 holds old 0 (own) and 2 (buddy of
     2 is 0), rank 1 holds old 1 and old 0 (a copy): complete, lowest new rank provides */
  tagc_mirror_entry e[2 * K] = {0};
  e[0] = ent(1, 7, 3, 0);
  e[2] = ent(1, 7, 3, 2);
  e[K + 0] = ent(1, 7, 3, 1);
  e[K + 2] = ent(1, 7, 3, 0);
  tagc_mirror_choose(e, 2, &c);
  CHECK(c.found && c.step == 7 && c.gen == 1 && c.world == 3);
  CHECK(c.provider[0] == 0 && c.slot[0] == 0 && c.provider[1] == 1 && c.provider[2] == 0 && c.slot[2] == 2);
  /* old rank 1's step 7 lost; step 6 of all three survives in the second slots: step 6 */
  e[K + 0] = ent(1, 6, 3, 1);
  e[1] = ent(1, 6, 3, 0);
  e[3] = ent(1, 6, 3, 2);
  tagc_mirror_choose(e, 2, &c);
  CHECK_MSG(c.found && c.step == 6, "found %d step %lld", c.found, (long long)c.step);
  CHECK_MSG(c.lost_rank == 1 && c.lost_step == 7 && c.lost_world == 3,
            "the loss named is rank %d step %lld", c.lost_rank, (long long)c.lost_step);
  /* nothing complete: not found, the newest group's missing rank named */
  e[1] = e[3] = (tagc_mirror_entry){0};
  tagc_mirror_choose(e, 2, &c);
  CHECK(!c.found && c.lost_rank == 1 && c.lost_step == 7);
  /* no images at all */
  tagc_mirror_entry none[3 * K] = {0};
  tagc_mirror_choose(none, 3, &c);
  CHECK(!c.found && c.lost_rank == -1);
  /* the same step from two generations (a rebuild at step 5, then copies of gen 2): the newer
     generation wins when both are complete */
  tagc_mirror_entry g[2 * K] = {0};
  g[0] = ent(1, 5, 2, 0);
  g[K] = ent(1, 5, 2, 1);
  g[1] = ent(2, 5, 1, 0);
  tagc_mirror_choose(g, 2, &c);
  CHECK(c.found && c.gen == 2 && c.world == 1 && c.provider[0] == 0 && c.slot[0] == 1);
  /* malformed entries are ignored: rank outside its world, world 0 */
  tagc_mirror_entry bad[K] = {0};
  bad[0] = ent(1, 9, 2, 5);
  bad[1] = ent(1, 9, 0, 0);
  bad[2] = ent(1, 3, 1, 0);
  tagc_mirror_choose(bad, 1, &c);
  CHECK(c.found && c.step == 3);
}

static void test_period(void) {
  CHECK_EQ_INT(tagc_mirror_period(0.001, 0.1, 0.05), 1);  /* 1 % of a step */
  CHECK_EQ_INT(tagc_mirror_period(0.005, 0.1, 0.05), 1);  /* exactly the budget */
  CHECK_EQ_INT(tagc_mirror_period(0.006, 0.1, 0.05), 2);
  CHECK_EQ_INT(tagc_mirror_period(2.6, 0.3, 0.05), 174); /* 33 MB at 100 Mbit/s */
  CHECK_EQ_INT(tagc_mirror_period(1.0, 0.0, 0.05), 1);
  CHECK_EQ_INT(tagc_mirror_period(1e9, 1e-3, 0.05), 100000);
}

static void test_shift(void) {
  const char *one[] = {"a", "a", "a"};
  CHECK_EQ_INT(tagc_mirror_shift(one, 3), 1); /* one host: the next rank */
  const char *pairs[] = {"a", "a", "b", "b"};
  CHECK_EQ_INT(tagc_mirror_shift(pairs, 4), 2); /* 0 -> 2, 1 -> 3, 2 -> 0, 3 -> 1 */
  const char *alt[] = {"a", "b", "a", "b"};
  CHECK_EQ_INT(tagc_mirror_shift(alt, 4), 1);
  const char *odd[] = {"a", "a", "b"}; /* no offset separates all: d = 1 separates 2 of 3 */
  CHECK_EQ_INT(tagc_mirror_shift(odd, 3), 1);
  const char *tri[] = {"a", "a", "a", "b", "b", "b"};
  CHECK_EQ_INT(tagc_mirror_shift(tri, 6), 3);
  CHECK_EQ_INT(tagc_mirror_shift(one, 1), 1);
  /* two copies: distinct offsets, the second the best of the rest */
  int d[TAGC_MIRROR_MAX_COPIES] = {0};
  CHECK_EQ_INT(tagc_mirror_shifts(one, 3, 2, d), 2);
  CHECK(d[0] == 1 && d[1] == 2);
  CHECK_EQ_INT(tagc_mirror_shifts(pairs, 4, 2, d), 2); /* rank + 2 apart, then rank + 1 (2 of 4) */
  CHECK(d[0] == 2 && d[1] == 1);
  CHECK_EQ_INT(tagc_mirror_shifts(tri, 6, 2, d), 2); /* + 3 separates all; + 2 separates 4 */
  CHECK_MSG(d[0] == 3 && d[1] == 2, "offsets %d %d", d[0], d[1]);
  const char *two[] = {"a", "b"}; /* W = 2: one other rank, one copy */
  CHECK_EQ_INT(tagc_mirror_shifts(two, 2, 2, d), 1);
  CHECK(d[0] == 1);
  CHECK_EQ_INT(tagc_mirror_shifts(one, 1, 2, d), 0);
}

static tagc_model_layout layout;
static tagc_corpus corpus;

static tagc_engine_config config(void) {
  tagc_engine_config cfg = {0};
  cfg.layout = &layout;
  CHECK_OK(tagc_policy_parse("tagc", &cfg.policy));
  cfg.adam = (tagc_adamw_config){.lr = 1e-3f, .min_lr_ratio = 0.1f, .warmup_steps = 0,
                                 .total_steps = 10, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                 .weight_decay = 0.1f, .grad_clip = 1.0f};
  cfg.batch = 4;
  cfg.micro_batch = 4;
  cfg.seed = 7;
  cfg.op_timeout_s = 30;
  cfg.reshard_after_forward = 1;
  cfg.gather = TAGC_ENC_FP32;
  return cfg;
}

static void test_round_trip(void) {
  char path[] = "/tmp/tagc-mirror-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE *f = fdopen(fd, "w");
  for (int i = 0; i < 4000; i++)
    fprintf(f, "copy %d of the state, step by step; ", i * 7919 % 1000);
  fclose(f);
  tagc_model_config mc = {256, 16, 1, 2, 32, 0};
  CHECK_OK(tagc_model_layout_init(&layout, &mc));
  CHECK_OK(tagc_corpus_load(path, 17, &corpus));
  tagc_engine_config cfg = config();
  tagc_engine *a = NULL, *b = NULL;
  tagc_mirror *m = NULL;
  CHECK_OK(tagc_engine_new(&cfg, &a));
  CHECK_OK(tagc_engine_new(&cfg, &b));
  CHECK_OK(tagc_mirror_new(&m));
  if (!a || !b || !m)
    return;
  tagc_step_stats st;
  for (int s = 0; s < 3; s++)
    CHECK_OK(tagc_engine_step(a, &corpus, s, &st));
  int shift = 1;
  CHECK_OK(tagc_engine_mirror_push(a, m, 1, 3, &shift, 1));
  tagc_mirror_entry e[K];
  tagc_mirror_entries(m, e);
  CHECK(e[0].step == 3 || e[1].step == 3);
  CHECK(tagc_mirror_image_bytes(m) > 3 * layout.n_params * sizeof(float));
  tagc_mirror_choice *ch = malloc(sizeof *ch);
  int64_t step = 0;
  /* the plan's checkpoint is newer than the copy: not rebuilt */
  CHECK_EQ_INT(tagc_engine_mirror_restore(b, m, 4, ch, &step), TAGC_ENOTFOUND);
  CHECK_OK(tagc_engine_mirror_restore(b, m, 3, ch, &step));
  CHECK_EQ_INT(step, 3);
  size_t bytes = layout.n_params * sizeof(float);
  float *pa = malloc(bytes), *pb = malloc(bytes);
  tagc_step_stats sa, sb;
  CHECK_OK(tagc_engine_step(a, &corpus, 3, &sa));
  CHECK_OK(tagc_engine_step(b, &corpus, 3, &sb));
  CHECK_OK(tagc_engine_gather_params(a, pa));
  CHECK_OK(tagc_engine_gather_params(b, pb));
  CHECK_MSG(sa.loss == sb.loss && memcmp(pa, pb, bytes) == 0,
            "the rebuilt engine does not continue bit for bit (loss %.17g vs %.17g)", sb.loss, sa.loss);
  /* a cleared mirror offers nothing */
  tagc_mirror_clear(m);
  CHECK_EQ_INT(tagc_engine_mirror_restore(b, m, 0, ch, &step), TAGC_ENOTFOUND);
  CHECK(ch->lost_rank == -1);
  free(ch);
  free(pa);
  free(pb);
  tagc_mirror_free(m); /* before a's device, whose host memory holds the slots */
  tagc_engine_free(a);
  tagc_engine_free(b);
  tagc_corpus_free(&corpus);
  unlink(path);
}

int main(void) {
  test_choose();
  test_period();
  test_shift();
  test_round_trip();
  return TEST_END();
}
