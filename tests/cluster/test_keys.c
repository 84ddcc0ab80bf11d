/* The etcd key schema (ARCHITECTURE.md §3): every key's exact text and the id checks. */
#include <string.h>

#include "common/status.h"
#include "cluster/keys.h"
#include "test.h"

static void test_schema(void) {
  char k[TAGC_KEY_MAX];
  CHECK_OK(tagc_key_job_prefix("job1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/");
  CHECK_OK(tagc_key_config("job1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/config");
  CHECK_OK(tagc_key_coord("job1", 0x694d7a1b2c3dLL, k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/coord/694d7a1b2c3d");
  CHECK_OK(tagc_key_coord("job1", -1, k, sizeof k)); /* lease IDs are unsigned in hex */
  CHECK_EQ_STR(k, "/tagc/job1/coord/ffffffffffffffff");
  CHECK_OK(tagc_key_coord_prefix("job1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/coord/");
  CHECK_OK(tagc_key_worker("job1", "w-0.host_a", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/workers/w-0.host_a");
  CHECK_OK(tagc_key_workers_prefix("job1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/workers/");
  CHECK_OK(tagc_key_gen("job1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/gen");
  CHECK_OK(tagc_key_gen_prefix("job1", 12, k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/gen/12/");
  CHECK_OK(tagc_key_gen_plan("job1", 12, k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/gen/12/plan");
  CHECK_OK(tagc_key_gen_boot("job1", 12, "nccl_id", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/gen/12/boot/nccl_id");
  CHECK_OK(tagc_key_gen_boot("job1", 12, "gloo/rank:3", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/gen/12/boot/gloo/rank:3");
  CHECK_OK(tagc_key_gen_boot_prefix("job1", 12, k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/gen/12/boot/");
  CHECK_OK(tagc_key_gen_ready("job1", 12, 3, k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/gen/12/ready/3");
  CHECK_OK(tagc_key_gen_ready_prefix("job1", 12, k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/gen/12/ready/");
  CHECK_OK(tagc_key_failure("job1", 12, "w1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/failures/12/w1");
  CHECK_OK(tagc_key_failures_prefix("job1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/failures/");
  CHECK_OK(tagc_key_failures_gen_prefix("job1", 12, k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/failures/12/");
  CHECK_OK(tagc_key_ckpt_committed("job1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/ckpt/committed");
  CHECK_OK(tagc_key_progress("job1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/progress");
  CHECK_OK(tagc_key_chaos("job1", "w1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/chaos/w1");
  CHECK_OK(tagc_key_chaos_prefix("job1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/chaos/");
  CHECK_OK(tagc_key_done("job1", k, sizeof k));
  CHECK_EQ_STR(k, "/tagc/job1/done");

  /* Generation prefixes do not overlap: gen/1/ is not a prefix of gen/10/... */
  char k1[TAGC_KEY_MAX], k10[TAGC_KEY_MAX];
  CHECK_OK(tagc_key_gen_prefix("j", 1, k1, sizeof k1));
  CHECK_OK(tagc_key_gen_plan("j", 10, k10, sizeof k10));
  CHECK(strncmp(k10, k1, strlen(k1)) != 0);
}

static void test_rejects(void) {
  char k[TAGC_KEY_MAX];
  static const char *const bad_ids[] = {"", ".", "..", "a/b", "a b", "a\nb", "x*", "é",
                                        "0123456789012345678901234567890123456789012345678901234567890123456789"};
  for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
    CHECK_MSG(tagc_key_worker("job", bad_ids[i], k, sizeof k) == TAGC_EINVAL, "worker id '%s' accepted",
              bad_ids[i]);
    CHECK_MSG(tagc_key_config(bad_ids[i], k, sizeof k) == TAGC_EINVAL, "job id '%s' accepted", bad_ids[i]);
  }
  CHECK_EQ_INT(tagc_key_worker("job", NULL, k, sizeof k), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_key_config(NULL, k, sizeof k), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "job id") != NULL);
  CHECK_OK(tagc_key_check_id("a.b-c_D9", "worker id"));
  CHECK_EQ_INT(tagc_key_gen_plan("job", -1, k, sizeof k), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_key_gen_ready("job", 1, -2, k, sizeof k), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_key_gen_boot("job", 1, "/abs", k, sizeof k), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_key_gen_boot("job", 1, "a b", k, sizeof k), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_key_gen_boot("job", 1, "", k, sizeof k), TAGC_EINVAL);
  /* A buffer that is too small is an error, never a cut key. */
  char small[16];
  CHECK_EQ_INT(tagc_key_worker("job", "worker-long-name", small, sizeof small), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_key_job_prefix("abcdefghij", small, 16), TAGC_EINVAL); /* 17 chars + NUL */
  CHECK_OK(tagc_key_job_prefix("abcdefgh", small, 16));                   /* 15 chars + NUL */
}

static void test_suffix(void) {
  char pfx[TAGC_KEY_MAX], key[TAGC_KEY_MAX];
  const char *id = NULL;
  CHECK_OK(tagc_key_workers_prefix("job", pfx, sizeof pfx));
  CHECK_OK(tagc_key_worker("job", "w7", key, sizeof key));
  CHECK_OK(tagc_key_suffix(key, pfx, &id));
  CHECK_EQ_STR(id, "w7");
  CHECK_EQ_INT(tagc_key_suffix("/tagc/job/gen", pfx, &id), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_key_suffix(pfx, pfx, &id), TAGC_EINVAL);
}

int main(void) {
  test_schema();
  test_rejects();
  test_suffix();
  return TEST_END();
}
