/* tagctl run, after its workers have stopped: the closing block (tagctl.h,
 * tagctl_closing_block). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "common/json.h"
#include "common/status.h"
#include "common/timeutil.h"
#include "tagctl/tagctl.h"

/* The newest valid checkpoint under root ("step-N" into buf), or "none". */
static void newest_ckpt(const char *root, char *buf, size_t cap) {
  tagc_ckpt_reader *rd;
  if (tagc_ckpt_find_latest_valid(root, TAGC_CKPT_VERIFY_QUICK, &rd) != TAGC_OK) {
    tagc_clear_error();
    snprintf(buf, cap, "none valid");
    return;
  }
  snprintf(buf, cap, "newest %s", tagc_ckpt_reader_path(rd));
  tagc_ckpt_close(rd);
}

static double num_or_nan(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_number(v) ? json_number_value(v) : (double)NAN;
}

/* True when path was written at or after `since` (wall-clock seconds). */
static int written_since(const char *path, double since) {
  struct stat st;
  return stat(path, &st) == 0 &&
         (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec >= since;
}

int tagctl_suspended_at(const tagc_train_config *cfg, double started, long long *step) {
  char path[4200];
  snprintf(path, sizeof path, "%s/summary.json", cfg->out);
  json_t *s = NULL;
  if (!written_since(path, started) || tagc_json_load_file(path, &s) != TAGC_OK) {
    tagc_clear_error();
    return 0;
  }
  const char *end = json_string_value(json_object_get(s, "end"));
  int suspended = end && strcmp(end, "suspended") == 0;
  *step = (long long)json_integer_value(json_object_get(s, "steps"));
  json_decref(s);
  return suspended;
}

void tagctl_closing_block(const tagc_train_config *cfg, int code, int interrupted, double started,
                          FILE *f) {
  char path[4200], root[4200], ckpt[4400];
  if (*cfg->ckpt_dir)
    snprintf(root, sizeof root, "%s", cfg->ckpt_dir);
  else
    snprintf(root, sizeof root, "%s/ckpt", cfg->out);
  newest_ckpt(root, ckpt, sizeof ckpt);
  snprintf(path, sizeof path, "%s/summary.json", cfg->out);
  json_t *s = NULL;
  int fresh = written_since(path, started); /* else a previous run's: nothing trained now */
  if (!interrupted && fresh && tagc_json_load_file(path, &s) != TAGC_OK) {
    tagc_clear_error();
    s = NULL;
  }
  double steps = s ? num_or_nan(s, "steps") : NAN;
  const char *end = s ? json_string_value(json_object_get(s, "end")) : NULL;
  int suspended = end && strcmp(end, "suspended") == 0;
  if (s && steps == steps && suspended) {
    fprintf(f, "\ntagctl run: suspended at step %.0f of %lld (every worker left the job; "
            "that step is saved); the run goes on from there when started again with the same "
            "--out\n", steps, (long long)cfg->steps);
  } else if (s && steps == steps && code == 0) {
    char wall[32], val[48] = "";
    tagc_format_duration(num_or_nan(s, "wall_s"), wall, sizeof wall);
    double v = num_or_nan(s, "final_val_loss");
    if (v == v)
      snprintf(val, sizeof val, ", val loss %.4f", v);
    fprintf(f, "\ntagctl run: done: step %.0f of %lld in %s (%.0f steps this run, %.0f lost to "
            "failures); train loss %.4f%s; %.0f tokens/s on %.0f workers\n", steps,
            (long long)cfg->steps, wall, num_or_nan(s, "steps_this_run"),
            num_or_nan(s, "steps_lost"), num_or_nan(s, "final_train_loss"), val,
            num_or_nan(s, "tokens_per_s"), num_or_nan(s, "world_size"));
  } else if (code == 0 && !interrupted && !fresh) {
    fprintf(f, "\ntagctl run: done: nothing trained (the checkpoint is at or past --steps %lld or "
            "--stop-at)\n", (long long)cfg->steps);
  } else if (interrupted) {
    fprintf(f, "\ntagctl run: interrupted; the run goes on from its newest checkpoint when "
            "started again with the same --out\n");
  } else if (s && steps == steps) {
    fprintf(f, "\ntagctl run: the job did not finish: it %s at step %.0f of %lld (exit status "
            "%d: the lines above say why)\n", end ? end : "ended", steps, (long long)cfg->steps,
            code);
  } else {
    fprintf(f, "\ntagctl run: the job did not finish (exit status %d: the lines above say why)\n",
            code);
  }
  fprintf(f, "  metrics      %s/metrics.jsonl (tagctl plot %s)\n", cfg->out, cfg->out);
  if (s)
    fprintf(f, "  summary      %s\n", path);
  fprintf(f, "  checkpoints  %s (%s)\n", root, ckpt);
  fprintf(f, "  config       %s/job.json (replay: tagctl run --config %s/job.json --out NEW)\n",
          cfg->out, cfg->out);
  if (s && steps == steps && !suspended && code == 0)
    fprintf(f, "  continue     tagctl run --config %s/job.json --out %s --steps N (N > %.0f; the "
            "learning-rate decay then ends at step N)\n", cfg->out, cfg->out, steps);
  else
    fprintf(f, "  continue     tagctl run --config %s/job.json --out %s\n", cfg->out, cfg->out);
  fflush(f);
  json_decref(s);
}
