/* Checkpoint fault points: TAGC_FAULT=ckpt:<stage>[@<rank>] kills the process at that stage. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "common/log.h"

static const char *const stage_names[] = {
    [FAULT_AFTER_OPEN] = "after-open",         [FAULT_MID_WRITE] = "mid-write",
    [FAULT_BEFORE_FSYNC] = "before-fsync",     [FAULT_AFTER_SHARD] = "after-shard",
    [FAULT_BEFORE_MANIFEST] = "before-manifest", [FAULT_BEFORE_RENAME] = "before-rename",
    [FAULT_BEFORE_LATEST] = "before-latest",
};

static fault_stage armed_stage;
static int armed_rank = -1; /* -1: any rank */
static int configured;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static tagc_status parse_spec(const char *spec) {
  armed_stage = FAULT_NONE;
  armed_rank = -1;
  if (!spec || strncmp(spec, "ckpt:", 5) != 0)
    return TAGC_OK;
  const char *name = spec + 5;
  const char *at = strchr(name, '@');
  size_t len = at ? (size_t)(at - name) : strlen(name);
  int rank = -1;
  if (at) {
    char *end;
    long r = strtol(at + 1, &end, 10);
    if (end == at + 1 || *end || r < 0 || r > 1 << 20)
      return tagc_errorf(TAGC_EINVAL, "TAGC_FAULT '%s': rank after '@' must be a number", spec);
    rank = (int)r;
  }
  for (int s = FAULT_AFTER_OPEN; s <= FAULT_BEFORE_LATEST; s++) {
    if (strlen(stage_names[s]) == len && strncmp(name, stage_names[s], len) == 0) {
      armed_stage = (fault_stage)s;
      armed_rank = rank;
      return TAGC_OK;
    }
  }
  return tagc_errorf(TAGC_EINVAL, "TAGC_FAULT '%s': unknown checkpoint stage", spec);
}

static void read_env_once(void) {
  if (configured)
    return;
  if (parse_spec(getenv("TAGC_FAULT")) != TAGC_OK)
    LOG_ERROR("ckpt", "ignoring fault spec: %s", tagc_last_error());
}

tagc_status tagc_ckpt_fault_configure(const char *spec) {
  configured = 1;
  return parse_spec(spec ? spec : getenv("TAGC_FAULT"));
}

void fault_point(fault_stage stage, int rank) {
  pthread_once(&env_once, read_env_once);
  if (armed_stage != stage || (armed_rank >= 0 && armed_rank != rank))
    return;
  LOG_WARN("ckpt", "fault point ckpt:%s reached on rank %d: killing this process",
           stage_names[stage], rank);
  raise(SIGKILL);
  _exit(137);
}
