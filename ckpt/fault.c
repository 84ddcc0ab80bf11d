/* Checkpoint fault points: TAGC_FAULT=ckpt:<stage>[@<rank>] kills the process at that stage;
 * ckpt:abort-snapshot is the one the caller acts on (tagc_ckpt_fault_abort_snapshot), and
 * ckpt:full makes every shard write fail as on a full disk (ckpt_fault_full). */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "common/log.h"

static const char *const stage_names[] = {
    [CKPT_FAULT_AFTER_OPEN] = "after-open",         [CKPT_FAULT_MID_WRITE] = "mid-write",
    [CKPT_FAULT_BEFORE_FSYNC] = "before-fsync",     [CKPT_FAULT_AFTER_SHARD] = "after-shard",
    [CKPT_FAULT_BEFORE_MANIFEST] = "before-manifest", [CKPT_FAULT_BEFORE_RENAME] = "before-rename",
    [CKPT_FAULT_BEFORE_LATEST] = "before-latest",   [CKPT_FAULT_REPLACING] = "replacing",
    [CKPT_FAULT_ABORT_SNAPSHOT] = "abort-snapshot", [CKPT_FAULT_FULL] = "full",
};

static ckpt_fault_stage armed_stage;
static int armed_rank = -1; /* -1: any rank */
static int configured;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* Parses one "ckpt:<stage>[@<rank>]" item of len bytes. */
static tagc_status parse_item(const char *item, size_t len) {
  const char *name = item + 5, *end = item + len;
  const char *at = memchr(name, '@', (size_t)(end - name));
  size_t name_len = (size_t)((at ? at : end) - name);
  int rank = -1;
  if (at) {
    char digits[16] = {0}, *stop;
    size_t n = (size_t)(end - at - 1);
    memcpy(digits, at + 1, n < sizeof digits - 1 ? n : sizeof digits - 1);
    long r = strtol(digits, &stop, 10);
    if (n == 0 || n >= sizeof digits || *stop || r < 0 || r > 1 << 20)
      return tagc_errorf(TAGC_EINVAL, "fault spec '%.*s': rank after '@' must be a number", (int)len, item);
    rank = (int)r;
  }
  for (int s = CKPT_FAULT_AFTER_OPEN; s <= CKPT_FAULT_FULL; s++) {
    if (strlen(stage_names[s]) == name_len && strncmp(name, stage_names[s], name_len) == 0) {
      armed_stage = (ckpt_fault_stage)s;
      armed_rank = rank;
      return TAGC_OK;
    }
  }
  return tagc_errorf(TAGC_EINVAL, "fault spec '%.*s': unknown checkpoint stage", (int)len, item);
}

/* A spec is a comma-separated list of faults; the first "ckpt:" item arms the checkpoint. */
static tagc_status parse_spec(const char *spec) {
  armed_stage = CKPT_FAULT_NONE;
  armed_rank = -1;
  for (const char *p = spec; p && *p;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len > 5 && strncmp(p, "ckpt:", 5) == 0)
      return parse_item(p, len);
    p += len + (comma != NULL);
  }
  return TAGC_OK;
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

void ckpt_fault_point(ckpt_fault_stage stage, int rank) {
  pthread_once(&env_once, read_env_once);
  if (armed_stage != stage || (armed_rank >= 0 && armed_rank != rank))
    return;
  LOG_WARN("ckpt", "fault point ckpt:%s reached on rank %d: killing this process",
           stage_names[stage], rank);
  raise(SIGKILL);
  _exit(137);
}

int tagc_ckpt_fault_abort_snapshot(int rank) {
  pthread_once(&env_once, read_env_once);
  if (armed_stage != CKPT_FAULT_ABORT_SNAPSHOT || (armed_rank >= 0 && armed_rank != rank))
    return 0;
  LOG_WARN("ckpt", "fault point ckpt:abort-snapshot reached on rank %d: failing the snapshot", rank);
  armed_stage = CKPT_FAULT_NONE;
  return 1;
}

int ckpt_fault_full(int rank) {
  pthread_once(&env_once, read_env_once);
  return armed_stage == CKPT_FAULT_FULL && (armed_rank < 0 || armed_rank == rank);
}

static tagc_ckpt_shard_named_fn shard_named_fn;
static void *shard_named_arg;

void tagc_ckpt_fault_on_shard_named(tagc_ckpt_shard_named_fn fn, void *arg) {
  shard_named_fn = fn;
  shard_named_arg = arg;
}

void ckpt_shard_named(int64_t step, int rank) {
  if (shard_named_fn)
    shard_named_fn(shard_named_arg, step, rank);
}
