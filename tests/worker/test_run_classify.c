/* How a status ends a generation (worker/run.h, tagc_run_classify): every status code, the
 * failures a new generation may fix with their cause, and everything else fatal. */
#include "test.h"
#include "worker/run.h"

static void check(tagc_status st, tagc_gen_verdict verdict, tagc_gen_cause cause) {
  tagc_gen_outcome o = tagc_run_classify(st);
  CHECK_MSG(o.verdict == verdict, "%s: verdict %d, want %d", tagc_strerror(st), (int)o.verdict,
            (int)verdict);
  if (verdict == TAGC_VERDICT_FAILED)
    CHECK_MSG(o.cause == cause, "%s: cause %s, want %s", tagc_strerror(st),
              tagc_gen_cause_name(o.cause), tagc_gen_cause_name(cause));
}

int main(void) {
  check(TAGC_OK, TAGC_VERDICT_GOES_ON, TAGC_CAUSE_COMM);
  /* the data path, memory and the ranks' disagreement: the next generation may do better */
  check(TAGC_ETIMEDOUT, TAGC_VERDICT_FAILED, TAGC_CAUSE_TIMEOUT);
  check(TAGC_ENOMEM, TAGC_VERDICT_FAILED, TAGC_CAUSE_OOM);
  check(TAGC_EPEER, TAGC_VERDICT_FAILED, TAGC_CAUSE_COMM);
  check(TAGC_EABORTED, TAGC_VERDICT_FAILED, TAGC_CAUSE_COMM);
  check(TAGC_ECONFLICT, TAGC_VERDICT_FAILED, TAGC_CAUSE_COMM);
  /* configuration, input, the math, damaged checkpoints, output: no generation can fix them */
  const tagc_status fatal[] = {TAGC_EINVAL,       TAGC_EIO,    TAGC_ECORRUPT, TAGC_ENOTFOUND,
                               TAGC_EUNSUPPORTED, TAGC_EPROTO, TAGC_ENUMERIC, TAGC_EINTERNAL};
  for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
    check(fatal[i], TAGC_VERDICT_FATAL, TAGC_CAUSE_COMM);
  /* every code of common/status.h is one of the above */
  CHECK_EQ_INT(TAGC_EINTERNAL, -13);
  return TEST_END();
}
