/* tagctl run, before it starts the workers: what resuming OUT's checkpoint means for the
 * learning-rate schedule (tagctl.h, tagctl_resume_note). */
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "common/json.h"
#include "common/status.h"
#include "model/adamw.h"
#include "tagctl/tagctl.h"

static tagc_adamw_config schedule_of(const tagc_train_config *cfg) {
  return (tagc_adamw_config){.lr = (float)cfg->lr, .min_lr_ratio = (float)cfg->min_lr_ratio,
                             .warmup_steps = cfg->warmup, .total_steps = cfg->steps};
}

/* The schedule of the run that wrote OUT/job.json (the options of the previous tagctl run
 * there): TAGC_OK, or an error when there is no such file or it lacks a field. */
static tagc_status previous_schedule(const char *out, tagc_adamw_config *prev) {
  char path[4200];
  snprintf(path, sizeof path, "%s/job.json", out);
  json_t *job;
  TAGC_CHECK(tagc_json_load_file(path, &job));
  double lr, ratio;
  tagc_status st = tagc_json_get_num(job, "lr", &lr);
  if (st == TAGC_OK)
    st = tagc_json_get_num(job, "min_lr_ratio", &ratio);
  if (st == TAGC_OK)
    st = tagc_json_get_int(job, "warmup", &prev->warmup_steps);
  if (st == TAGC_OK)
    st = tagc_json_get_int(job, "steps", &prev->total_steps);
  json_decref(job);
  prev->lr = (float)lr;
  prev->min_lr_ratio = (float)ratio;
  return st;
}

/* ", --steps 320 instead of 300" and the like for each schedule option that differs. */
static void changes(const tagc_adamw_config *now, const tagc_adamw_config *prev, char *buf,
                    size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  if (now->total_steps != prev->total_steps)
    used += (size_t)snprintf(buf + used, cap - used, ", --steps %lld instead of %lld",
                             (long long)now->total_steps, (long long)prev->total_steps);
  if (now->warmup_steps != prev->warmup_steps && used < cap)
    used += (size_t)snprintf(buf + used, cap - used, ", --warmup %lld instead of %lld",
                             (long long)now->warmup_steps, (long long)prev->warmup_steps);
  if (now->lr != prev->lr && used < cap)
    used += (size_t)snprintf(buf + used, cap - used, ", --lr %g instead of %g", now->lr, prev->lr);
  if (now->min_lr_ratio != prev->min_lr_ratio && used < cap)
    snprintf(buf + used, cap - used, ", --min-lr-ratio %g instead of %g", now->min_lr_ratio,
             prev->min_lr_ratio);
}

void tagctl_resume_note(const tagc_train_config *cfg, FILE *f) {
  if (!cfg->resume)
    return;
  char root[4200];
  if (*cfg->ckpt_dir)
    snprintf(root, sizeof root, "%s", cfg->ckpt_dir);
  else
    snprintf(root, sizeof root, "%s/ckpt", cfg->out);
  tagc_ckpt_reader *rd;
  if (tagc_ckpt_find_latest_valid(root, TAGC_CKPT_VERIFY_QUICK, &rd) != TAGC_OK) {
    tagc_clear_error(); /* nothing to resume: the workers say why when it matters */
    return;
  }
  int64_t done = tagc_ckpt_reader_step(rd);
  char path[4200];
  snprintf(path, sizeof path, "%s", tagc_ckpt_reader_path(rd));
  tagc_ckpt_close(rd);
  if (cfg->stop_at > 0 && done >= cfg->stop_at)
    return; /* the workers say that --stop-at is reached */
  tagc_adamw_config now = schedule_of(cfg), prev, longer = now;
  if (done >= cfg->steps) {
    longer.total_steps = 2 * done;
    fprintf(f, "tagctl run: %s is at step %lld of --steps %lld: nothing to train. To train on, "
            "run again with a larger --steps N: the cosine decay of the learning rate is then "
            "recomputed to end at step N instead of %lld (e.g. --steps %lld: lr %g at step %lld; "
            "this run's final lr: %g)\n", path, (long long)done, (long long)cfg->steps,
            (long long)cfg->steps, (long long)longer.total_steps, tagc_lr_at(&longer, done),
            (long long)done + 1, tagc_lr_at(&now, done));
    return;
  }
  if (done == 0 || previous_schedule(cfg->out, &prev) != TAGC_OK) {
    tagc_clear_error();
    return;
  }
  char what[256];
  changes(&now, &prev, what, sizeof what);
  if (!what[0])
    return;
  fprintf(f, "tagctl run: resuming %s with another learning-rate schedule than the previous run "
          "in %s (%s): step %lld trains with lr %g (the previous schedule: %g)\n", path, cfg->out,
          what + 2, (long long)done + 1, tagc_lr_at(&now, done), tagc_lr_at(&prev, done));
}
