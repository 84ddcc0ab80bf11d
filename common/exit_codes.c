#include "common/exit_codes.h"

tagc_exit_code tagc_exit_code_of(tagc_status st) {
  switch (st) {
  case TAGC_OK:
    return TAGC_EXIT_DONE;
  case TAGC_EINVAL:
  case TAGC_ENOTFOUND:
  case TAGC_EPROTO:
  case TAGC_EUNSUPPORTED:
    return TAGC_EXIT_CONFIG;
  case TAGC_ENUMERIC:
    return TAGC_EXIT_CANNOT_GO_ON;
  case TAGC_EIO:
    return TAGC_EXIT_IO;
  case TAGC_ENOMEM:
  case TAGC_ECORRUPT:
  case TAGC_ETIMEDOUT:
  case TAGC_EPEER:
  case TAGC_EABORTED:
  case TAGC_ECONFLICT:
  case TAGC_EINTERNAL:
    break;
  }
  return TAGC_EXIT_FAILURE;
}

int tagc_exit_code_restarts(int code) {
  return code != TAGC_EXIT_DONE && code != TAGC_EXIT_CONFIG && code != TAGC_EXIT_CANNOT_GO_ON &&
         code != TAGC_EXIT_IO;
}

const char *tagc_exit_code_meaning(int code) {
  switch (code) {
  case TAGC_EXIT_DONE: return "done";
  case TAGC_EXIT_CONFIG: return "a usage or configuration error";
  case TAGC_EXIT_CANNOT_GO_ON: return "the training cannot go on";
  case TAGC_EXIT_IO: return "an I/O failure while running";
  }
  return "a failure";
}
