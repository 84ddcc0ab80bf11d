/* The exit-code table (common/exit_codes.h) that tagc-worker exits by and `tagctl run` reads
 * back: every status has its code, and only code 1 (and codes outside the table, e.g. a
 * crash's 128 + signal) is restarted. */
#include "common/exit_codes.h"
#include "test.h"

int main(void) {
  CHECK_EQ_INT(tagc_exit_code_of(TAGC_OK), 0);
  const tagc_status config[] = {TAGC_EINVAL, TAGC_ENOTFOUND, TAGC_EPROTO, TAGC_EUNSUPPORTED};
  for (size_t i = 0; i < sizeof config / sizeof config[0]; i++)
    CHECK_EQ_INT(tagc_exit_code_of(config[i]), TAGC_EXIT_CONFIG);
  CHECK_EQ_INT(tagc_exit_code_of(TAGC_ENUMERIC), TAGC_EXIT_CANNOT_GO_ON);
  CHECK_EQ_INT(tagc_exit_code_of(TAGC_EIO), TAGC_EXIT_IO);
  const tagc_status restart[] = {TAGC_ENOMEM,  TAGC_ECORRUPT,  TAGC_ETIMEDOUT, TAGC_EPEER,
                                 TAGC_EABORTED, TAGC_ECONFLICT, TAGC_EINTERNAL};
  for (size_t i = 0; i < sizeof restart / sizeof restart[0]; i++)
    CHECK_EQ_INT(tagc_exit_code_of(restart[i]), TAGC_EXIT_FAILURE);
  CHECK_EQ_INT(TAGC_EINTERNAL, -13); /* every status of common/status.h is listed above */
  /* what a supervisor does with each code */
  for (int code = 0; code <= 4; code++)
    CHECK_EQ_INT(tagc_exit_code_restarts(code), code == TAGC_EXIT_FAILURE);
  CHECK(tagc_exit_code_restarts(128 + 9));
  CHECK_EQ_STR(tagc_exit_code_meaning(TAGC_EXIT_CONFIG), "a usage or configuration error");
  CHECK_EQ_STR(tagc_exit_code_meaning(TAGC_EXIT_IO), "an I/O failure while running");
  CHECK_EQ_STR(tagc_exit_code_meaning(137), "a failure");
  return TEST_END();
}
