/* tagctl status OUT: a run's state from its files, also after it ended (no etcd needed):
 * OUT/history.jsonl (worker/history.h: runs, failures by kind, recoveries, joins, leaves,
 * interrupts, restarts, how the last run ended), the last row of OUT/metrics.jsonl, the
 * target step of OUT/job.json and the newest valid checkpoint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "common/json.h"
#include "tagctl/metrics_file.h"
#include "tagctl/tagctl.h"
#include "worker/history.h"

typedef struct out_args {
  int json;
} out_args;

static const tagc_opt out_opts[] = {
    {"json", TAGC_OPT_BOOL, offsetof(out_args, json), "false", 0, -1, NULL,
     "print one JSON object instead of the text"},
};

/* How the newest tagctl run over OUT ended: "done", "interrupted", "failed (status n)", or
 * "running, or ended without a record" (no "end" after the last "start"). */
static void last_end(const tagc_history *h, char *buf, size_t cap) {
  if (h->runs == 0)
    snprintf(buf, cap, "no run recorded");
  else if (!h->ended)
    snprintf(buf, cap, "running, or ended without a record (tagctl run killed)");
  else if (h->end_status == 0)
    snprintf(buf, cap, "done");
  else if (h->end_status == 130)
    snprintf(buf, cap, "interrupted");
  else
    snprintf(buf, cap, "failed (tagctl run exit status %lld)", (long long)h->end_status);
}

static int status_out(const char *out, const out_args *a) {
  tagc_history h;
  if (tagc_history_read(out, &h) != TAGC_OK) {
    fprintf(stderr, "tagctl status: %s\n", tagc_last_error());
    return 1;
  }
  tagctl_metrics_rows m;
  int have_rows = tagctl_metrics_read(out, &m) == TAGC_OK;
  if (!have_rows)
    tagc_clear_error();
  if (!have_rows && h.n == 0 && h.runs == 0) {
    fprintf(stderr, "tagctl status: %s holds neither metrics.jsonl nor history.jsonl\n", out);
    tagc_history_free(&h);
    return 2;
  }
  double step = NAN, loss = NAN, world = NAN, slowest = NAN, cmax = NAN, cmed = NAN;
  double straggler = NAN, sratio = NAN;
  const json_t *compute = NULL; /* the last row's compute_s (borrowed from m) */
  for (size_t i = have_rows ? m.n : 0; i-- > 0;) {
    step = tagctl_metrics_num(&m, i, "step");
    if (!isnan(step)) {
      loss = tagctl_metrics_num(&m, i, "loss");
      world = tagctl_metrics_num(&m, i, "world_size");
      slowest = tagctl_metrics_num(&m, i, "slowest_rank");
      cmax = tagctl_metrics_num(&m, i, "compute_s_max");
      cmed = tagctl_metrics_num(&m, i, "compute_s_median");
      straggler = tagctl_metrics_num(&m, i, "straggler");
      sratio = tagctl_metrics_num(&m, i, "straggler_ratio");
      compute = json_object_get(m.rows[i], "compute_s");
      break;
    }
  }
  char path[4200], state[96], ckpt[4300] = "none valid";
  int64_t steps = 0;
  json_t *job;
  snprintf(path, sizeof path, "%s/job.json", out);
  if (tagc_json_load_file(path, &job) == TAGC_OK) {
    tagc_json_get_int(job, "steps", &steps);
    json_decref(job);
  }
  tagc_clear_error();
  last_end(&h, state, sizeof state);
  snprintf(path, sizeof path, "%s/ckpt", out);
  tagc_ckpt_reader *rd;
  if (tagc_ckpt_find_latest_valid(path, TAGC_CKPT_VERIFY_QUICK, &rd) == TAGC_OK) {
    snprintf(ckpt, sizeof ckpt, "%s", tagc_ckpt_reader_path(rd));
    tagc_ckpt_close(rd);
  }
  tagc_clear_error();
  json_t *counts = tagc_history_counts(&h);
  int rc = 0;
  if (a->json) {
    json_t *o = json_pack("{s:s, s:s, s:o, s:s}", "out", out, "state", state, "history",
                          counts ? counts : json_object(), "checkpoint", ckpt);
    counts = NULL;
    if (o && !isnan(step))
      json_object_update_new(o, json_pack("{s:I, s:f, s:i}", "step", (json_int_t)step, "loss",
                                          isnan(loss) ? 0.0 : loss, "world_size", (int)world));
    if (o && steps)
      json_object_set_new(o, "steps", json_integer(steps));
    if (o && !isnan(slowest) && cmed > 0)
      json_object_update_new(o, json_pack("{s:i, s:f, s:f, s:o}", "slowest_rank", (int)slowest,
                                          "compute_ratio", cmax / cmed, "compute_s_median", cmed,
                                          "straggler", isnan(straggler) ? json_null()
                                                                        : json_integer((int)straggler)));
    if (o && json_is_array(compute))
      json_object_set(o, "compute_s", (json_t *)compute);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (text)
      printf("%s\n", text);
    else
      rc = 1;
    free(text);
    json_decref(o);
  } else {
    printf("%-12s%s (from its files)\n", "run", out);
    printf("%-12s%s\n", "state", state);
    char of[32] = "";
    if (steps)
      snprintf(of, sizeof of, " of %lld", (long long)steps);
    if (!isnan(step))
      printf("%-12sstep %.0f%s, loss %.4f, %d workers\n", "progress", step, of, loss, (int)world);
    if (!isnan(straggler))
      printf("%-12srank %.0f at the last step, %.2fx the median compute time per step\n",
             "stragglers", straggler, sratio);
    else if (!isnan(slowest) && cmed > 0)
      printf("%-12snone at the last step; slowest rank %.0f, %.2fx the median compute time\n",
             "stragglers", slowest, cmax / cmed);
    tagctl_print_compute(compute);
    printf("%-12s%s\n", "checkpoint", ckpt);
    printf("%-12s%lld run%s; %lld failure%s", "history", (long long)h.runs, h.runs == 1 ? "" : "s",
           (long long)h.counts[TAGC_HIST_FAILURE], h.counts[TAGC_HIST_FAILURE] == 1 ? "" : "s");
    const char *kind;
    json_t *v;
    int any = 0;
    json_object_foreach(h.failures, kind, v) {
      printf("%s%s %lld", any ? ", " : " (", kind, (long long)json_integer_value(v));
      any = 1;
    }
    printf("%s, %lld recover%s, %lld join%s, %lld leave%s, %lld interrupt%s, %lld restart%s\n",
           any ? ")" : "", (long long)h.counts[TAGC_HIST_FAILURE],
           h.counts[TAGC_HIST_FAILURE] == 1 ? "y" : "ies", (long long)h.counts[TAGC_HIST_JOIN],
           h.counts[TAGC_HIST_JOIN] == 1 ? "" : "s", (long long)h.counts[TAGC_HIST_LEAVE],
           h.counts[TAGC_HIST_LEAVE] == 1 ? "" : "s", (long long)h.counts[TAGC_HIST_INTERRUPT],
           h.counts[TAGC_HIST_INTERRUPT] == 1 ? "" : "s", (long long)h.counts[TAGC_HIST_RESTART],
           h.counts[TAGC_HIST_RESTART] == 1 ? "" : "s");
  }
  json_decref(counts);
  if (have_rows)
    tagctl_metrics_free(&m);
  tagc_history_free(&h);
  return rc;
}

int tagctl_status_out(int argc, char **argv) {
  tagc_opt_program prog = {"tagctl status", "OUT [--json]",
                           "A run's state from its files (OUT/history.jsonl, OUT/metrics.jsonl, "
                           "OUT/job.json, its checkpoints), also after it ended: how the last "
                           "run ended, its step, the newest checkpoint, and the runs, failures "
                           "by kind, recoveries, joins, leaves, interrupts and restarts so far.",
                           out_opts, sizeof out_opts / sizeof out_opts[0]};
  out_args a = {0};
  char *out = NULL;
  int rc = tagctl_parse_file_args(&prog, &a, argc, argv, &out, 1);
  if (rc < 0)
    rc = status_out(out, &a);
  tagc_opts_free(&prog, &a);
  return rc;
}
