/* Failure kinds of worker reports (see failure_kind.h). */
#include "worker/failure_kind.h"

#include <stdio.h>
#include <string.h>

#include "common/timeutil.h"

/* 1 while pid exists and is not a zombie (or dead) in /proc. */
static int pid_running(long pid) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  int ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  const char *after = ok ? strrchr(line, ')') : NULL; /* the command name may hold spaces */
  return after && after[1] == ' ' && after[2] != 'Z' && after[2] != 'X' && after[2] != 'x';
}

tagc_peer_state tagc_peer_check(const json_t *info, const char *my_host, double settle_s) {
  if (!info)
    return TAGC_PEER_GONE; /* its lease ended (expired or revoked) */
  const char *host = json_string_value(json_object_get(info, "host"));
  json_int_t pid = json_integer_value(json_object_get(info, "pid"));
  if (!host || !my_host || strcmp(host, my_host) != 0 || pid <= 0)
    return TAGC_PEER_UNKNOWN;
  double until = tagc_now() + settle_s;
  while (pid_running((long)pid)) {
    if (tagc_now() >= until)
      return TAGC_PEER_ALIVE;
    tagc_sleep(0.02);
  }
  return TAGC_PEER_GONE;
}

tagc_failure_kind tagc_failure_kind_for(tagc_gen_cause cause, tagc_peer_state peer) {
  switch (cause) { /* the run knows these */
  case TAGC_CAUSE_OOM: return TAGC_FAIL_OOM;
  case TAGC_CAUSE_HANG: return TAGC_FAIL_HANG;
  case TAGC_CAUSE_INJECTED: return TAGC_FAIL_INJECTED;
  case TAGC_CAUSE_COMM:
  case TAGC_CAUSE_TIMEOUT: break;
  }
  if (peer == TAGC_PEER_GONE)
    return TAGC_FAIL_CRASH;
  if (cause == TAGC_CAUSE_TIMEOUT)
    return TAGC_FAIL_HANG;
  return peer == TAGC_PEER_ALIVE ? TAGC_FAIL_PARTITION : TAGC_FAIL_COMM;
}
