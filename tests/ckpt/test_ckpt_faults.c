/* SIGKILL of a rank at every stage of the commit protocol (fault points, forked ranks):
 * the previous checkpoint stays valid and loadable, the partial one is never reported valid,
 * and a retried save of the same step succeeds over the leftovers. A commit that replaces an
 * existing step-<s> and dies doing so leaves the new checkpoint in place, and its leftovers
 * are removed at the next start. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "fixture.h"
#include "test.h"

typedef struct fault_case {
  const char *stage;
  int rank;      /* the rank that dies */
  int via_env;   /* arm through TAGC_FAULT instead of the API */
  int commits;   /* the kill comes after the directory rename: the new checkpoint is complete */
} fault_case;

static const fault_case cases[] = {
    {"after-open", 1, 0, 0},      {"mid-write", 1, 0, 0},       {"mid-write", 0, 1, 0},
    {"before-fsync", 1, 0, 0},    {"after-shard", 1, 0, 0},     {"after-shard", 0, 0, 0},
    {"before-manifest", 0, 0, 0}, {"before-rename", 0, 1, 0},   {"before-latest", 0, 0, 1},
};

static void child_rank(const char *dir, fx_barrier *b, int rank, const fault_case *fc) {
  char spec[64];
  /* Both ranks arm the same spec: the @rank suffix selects the victim. */
  snprintf(spec, sizeof spec, "crash:step=99,ckpt:%s@%d", fc->stage, fc->rank);
  if (fc->via_env) {
    setenv("TAGC_FAULT", spec, 1);
    tagc_ckpt_fault_configure(NULL);
  } else {
    tagc_ckpt_fault_configure(spec);
  }
  tagc_ckpt_range ranges[FX_UNITS];
  float *data[FX_UNITS * FX_STREAMS];
  fx_ranges(2, rank, ranges);
  fx_shard_alloc(2, rank, 2, data);
  tagc_ckpt_writer_config cfg = {.dir = dir, .rank = rank, .world_size = 2, .layout = fx_layout,
                                 .ranges = ranges, .barrier = fx_barrier_wait, .barrier_arg = b,
                                 .keep_last = 3};
  tagc_status st = tagc_ckpt_save(&cfg, 20, (const float *const *)data, NULL, NULL);
  fx_shard_free(data);
  _exit(st == TAGC_OK ? 0 : 1);
}

/* Runs the two ranks; returns 1 when the victim died of SIGKILL. Survivors stuck in the
 * barrier are killed, as the coordinator would after the failure. */
static int run_ranks(const char *dir, const fault_case *fc) {
  fx_barrier *b = fx_barrier_new(2);
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    if (pids[r] == 0)
      child_rank(dir, b, r, fc);
  }
  int status;
  waitpid(pids[fc->rank], &status, 0);
  int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  pid_t other = pids[1 - fc->rank];
  tagc_sleep(0.05);
  kill(other, SIGKILL);
  waitpid(other, &status, 0);
  fx_barrier_free(b);
  return killed;
}

static void check_latest_file(const char *dir, const char *want) {
  char path[4096], text[64] = {0};
  snprintf(path, sizeof path, "%s/LATEST", dir);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  if (!f)
    return;
  CHECK(fgets(text, sizeof text, f) != NULL);
  fclose(f);
  CHECK_EQ_STR(text, want);
}

static void run_case(const fault_case *fc) {
  char *dir = fx_tempdir("faults");
  char prev[4096], next[4096];
  snprintf(prev, sizeof prev, "%s/step-10", dir);
  snprintf(next, sizeof next, "%s/step-20", dir);
  CHECK_OK(fx_save_inproc(dir, 10, 2, 1, NULL));

  CHECK_MSG(run_ranks(dir, fc), "ckpt:%s@%d: the rank did not die of SIGKILL", fc->stage, fc->rank);

  /* The previous checkpoint is intact and loads at another world size. */
  tagc_ckpt_reader *rd;
  CHECK_OK(tagc_ckpt_open(prev, TAGC_CKPT_VERIFY_FULL, &rd));
  if (rd)
    CHECK_MSG(fx_check_load(rd, 3, 1) == 0, "ckpt:%s: previous checkpoint data changed", fc->stage);
  tagc_ckpt_close(rd);

  /* Even the weakest check never reports the partial one. */
  for (int level = TAGC_CKPT_VERIFY_MANIFEST; level <= TAGC_CKPT_VERIFY_FULL; level++) {
    CHECK_OK(tagc_ckpt_find_latest_valid(dir, (tagc_ckpt_verify)level, &rd));
    if (rd)
      CHECK_MSG(tagc_ckpt_reader_step(rd) == (fc->commits ? 20 : 10), "ckpt:%s@%d: newest valid is step %lld",
                fc->stage, fc->rank, (long long)tagc_ckpt_reader_step(rd));
    tagc_ckpt_close(rd);
  }
  if (!fc->commits) {
    CHECK(tagc_ckpt_open(next, TAGC_CKPT_VERIFY_MANIFEST, &rd) != TAGC_OK);
    CHECK(rd == NULL);
  }
  check_latest_file(dir, "step-10\n");

  /* A retried save of the same step succeeds over the leftovers and commits. */
  CHECK_OK(fx_save_inproc(dir, 20, 2, 3, NULL));
  CHECK_OK(tagc_ckpt_find_latest_valid(dir, TAGC_CKPT_VERIFY_FULL, &rd));
  if (rd) {
    CHECK_EQ_INT(tagc_ckpt_reader_step(rd), 20);
    CHECK_MSG(fx_check_load(rd, 1, 3) == 0, "ckpt:%s: retried checkpoint data differs", fc->stage);
  }
  tagc_ckpt_close(rd);
  check_latest_file(dir, "step-20\n");
  fx_rmtree(dir);
  free(dir);
}

/* Entries of dir whose names end with suffix. */
static int count_suffix(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name), sl = strlen(suffix);
    n += len > sl && strcmp(e->d_name + len - sl, suffix) == 0;
  }
  if (d)
    closedir(d);
  return n;
}

/* An invalid step-20 (no manifest) is replaced by a new save, which dies right after the
 * replacement: step-20 is the new, valid checkpoint at once, and remove_partial (run at
 * every start) removes the old one's leftover. The older code renamed step-20 away before
 * moving the new one in, and never removed a step-20.replaced left by a crash between. */
static void test_replace_crash(void) {
  char *dir = fx_tempdir("replace");
  char path[4200];
  CHECK_OK(fx_save_inproc(dir, 10, 2, 1, NULL));
  CHECK_OK(fx_save_inproc(dir, 20, 2, 2, NULL));
  snprintf(path, sizeof path, "%s/step-20/manifest.json", dir);
  CHECK_EQ_INT(unlink(path), 0);
  pid_t pid = fork();
  if (pid == 0) {
    tagc_ckpt_fault_configure("ckpt:replacing");
    tagc_status st = fx_save_inproc(dir, 20, 2, 3, NULL);
    _exit(st == TAGC_OK ? 0 : 1);
  }
  int status;
  waitpid(pid, &status, 0);
  CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "ckpt:replacing: the save did not die there");
  tagc_ckpt_reader *rd;
  snprintf(path, sizeof path, "%s/step-20", dir);
  CHECK_OK(tagc_ckpt_open(path, TAGC_CKPT_VERIFY_FULL, &rd));
  if (rd)
    CHECK_MSG(fx_check_load(rd, 2, 3) == 0, "step-20 is not the new checkpoint");
  tagc_ckpt_close(rd);
  int n;
  CHECK_OK(tagc_ckpt_remove_partial(dir, &n));
  CHECK_EQ_INT(count_suffix(dir, ".tmp") + count_suffix(dir, ".replaced"), 0);

  /* what a crash between the two renames of the older code left: only step-30.replaced */
  snprintf(path, sizeof path, "%s/step-30.replaced", dir);
  CHECK_EQ_INT(mkdir(path, 0755), 0);
  snprintf(path, sizeof path, "%s/step-30.replaced/rank-00000.bin", dir);
  CHECK_EQ_INT(fx_write_text(path, "partial"), 0);
  CHECK_OK(tagc_ckpt_remove_partial(dir, &n));
  CHECK_EQ_INT(n, 1);
  CHECK_EQ_INT(count_suffix(dir, ".replaced"), 0);
  fx_rmtree(dir);
  free(dir);
}

int main(void) {
  tagc_log_configure("error", TAGC_LOG_TEXT);
  test_replace_crash();
  CHECK_EQ_INT(tagc_ckpt_fault_configure("ckpt:no-such-stage"), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_ckpt_fault_configure("ckpt:mid-write@x"), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_ckpt_fault_configure("ckpt:after-open@"), TAGC_EINVAL);
  CHECK_OK(tagc_ckpt_fault_configure("net:drop")); /* other subsystems' specs are ignored */
  CHECK_OK(tagc_ckpt_fault_configure(""));
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i]);
  return TEST_END();
}
