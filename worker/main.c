/* tagc-worker: one training process. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "worker/run_config.h"
#include "worker/train.h"

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN); /* a peer that dies must not kill us through a socket write */
  tagc_train_config cfg;
  memset(&cfg, 0, sizeof cfg);
  int help = 0;
  tagc_status st = tagc_opts_parse(&tagc_train_program, &cfg, argc, argv, NULL, 0, NULL, &help);
  if (st != TAGC_OK || help) {
    if (st != TAGC_OK)
      fprintf(stderr, "tagc-worker: %s\n", tagc_last_error());
    tagc_opts_free(&tagc_train_program, &cfg);
    return st != TAGC_OK ? 2 : 0;
  }
  st = tagc_log_configure(cfg.log, TAGC_LOG_AUTO);
  if (st == TAGC_OK)
    st = tagc_train_run(&cfg);
  if (st != TAGC_OK)
    fprintf(stderr, "tagc-worker: %s\n", tagc_last_error());
  tagc_opts_free(&tagc_train_program, &cfg);
  /* Bad options, corpus or output directory: 2; failures while training: 1. */
  if (st == TAGC_EINVAL || st == TAGC_ENOTFOUND || st == TAGC_EIO || st == TAGC_EPROTO)
    return 2;
  return st == TAGC_OK ? 0 : 1;
}
