/* Failure kinds of worker reports (worker/failure_kind.h) with real processes: a child that
 * runs is alive, a SIGKILLed one is gone whether reaped or still a zombie, a peer on another
 * host cannot be checked, a gone registration is a crash; then the kind rule itself and the
 * kinds' names as etcd holds them (cluster/keys.h). Also the
 * Prometheus text of the worker's /metrics sample (histogram buckets, job label). */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "worker/failure_kind.h"
#include "worker/metrics_http.h"

static json_t *registration(const char *host, pid_t pid) {
  return json_pack("{s:s, s:i}", "host", host, "pid", (int)pid);
}

static void test_peer_check(void) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  CHECK(child > 0);
  json_t *here = registration("hostA", child), *there = registration("hostB", child);
  CHECK_EQ_INT(tagc_peer_check(here, "hostA", 0.05), TAGC_PEER_ALIVE);
  CHECK_EQ_INT(tagc_peer_check(there, "hostA", 0.05), TAGC_PEER_UNKNOWN);
  CHECK_EQ_INT(tagc_peer_check(NULL, "hostA", 0.05), TAGC_PEER_GONE);
  kill(child, SIGKILL);
  /* not reaped yet: a zombie counts as gone (within the settle time the exit takes) */
  CHECK_EQ_INT(tagc_peer_check(here, "hostA", 5.0), TAGC_PEER_GONE);
  waitpid(child, NULL, 0);
  CHECK_EQ_INT(tagc_peer_check(here, "hostA", 0.05), TAGC_PEER_GONE);
  CHECK_EQ_INT(tagc_peer_check(there, "hostA", 0.05), TAGC_PEER_UNKNOWN);
  json_decref(here);
  json_decref(there);
  json_t *self = registration("hostA", getpid());
  CHECK_EQ_INT(tagc_peer_check(self, "hostA", 0), TAGC_PEER_ALIVE);
  json_decref(self);
}

static void test_kinds(void) {
  CHECK_EQ_INT(tagc_failure_kind_for(TAGC_CAUSE_COMM, TAGC_PEER_GONE), TAGC_FAIL_CRASH);
  CHECK_EQ_INT(tagc_failure_kind_for(TAGC_CAUSE_TIMEOUT, TAGC_PEER_GONE), TAGC_FAIL_CRASH);
  CHECK_EQ_INT(tagc_failure_kind_for(TAGC_CAUSE_TIMEOUT, TAGC_PEER_ALIVE), TAGC_FAIL_HANG);
  CHECK_EQ_INT(tagc_failure_kind_for(TAGC_CAUSE_TIMEOUT, TAGC_PEER_UNKNOWN), TAGC_FAIL_HANG);
  CHECK_EQ_INT(tagc_failure_kind_for(TAGC_CAUSE_COMM, TAGC_PEER_ALIVE), TAGC_FAIL_PARTITION);
  CHECK_EQ_INT(tagc_failure_kind_for(TAGC_CAUSE_COMM, TAGC_PEER_UNKNOWN), TAGC_FAIL_COMM);
  CHECK_EQ_INT(tagc_failure_kind_for(TAGC_CAUSE_OOM, TAGC_PEER_GONE), TAGC_FAIL_OOM);
  CHECK_EQ_INT(tagc_failure_kind_for(TAGC_CAUSE_HANG, TAGC_PEER_UNKNOWN), TAGC_FAIL_HANG);
  CHECK_EQ_INT(tagc_failure_kind_for(TAGC_CAUSE_INJECTED, TAGC_PEER_ALIVE), TAGC_FAIL_INJECTED);
}

/* The names are what etcd holds (failures/<g>/<id> "kind", failures_total): exactly these. */
static void test_kind_names(void) {
  static const char *const names[TAGC_FAIL_KINDS] = {"crash", "hang",    "partition", "comm",
                                                     "oom",   "injected", "timeout",  "lease",
                                                     "straggler"};
  for (int k = 0; k < TAGC_FAIL_KINDS; k++) {
    CHECK_EQ_STR(tagc_failure_kind_name((tagc_failure_kind)k), names[k]);
    CHECK_EQ_INT(tagc_failure_kind_parse(names[k]), k);
  }
  CHECK_EQ_INT(tagc_failure_kind_parse("bogus"), TAGC_FAIL_UNKNOWN);
  CHECK_EQ_INT(tagc_failure_kind_parse("OOM"), TAGC_FAIL_UNKNOWN);
  CHECK_EQ_INT(tagc_failure_kind_parse(NULL), TAGC_FAIL_UNKNOWN);
  CHECK_EQ_STR(tagc_failure_kind_name(TAGC_FAIL_UNKNOWN), "unknown");
  CHECK_EQ_STR(tagc_failure_kind_name(TAGC_FAIL_KINDS), "unknown");
  /* the causes as the run logs them */
  CHECK_EQ_STR(tagc_gen_cause_name(TAGC_CAUSE_COMM), "comm");
  CHECK_EQ_STR(tagc_gen_cause_name(TAGC_CAUSE_TIMEOUT), "timeout");
  CHECK_EQ_STR(tagc_gen_cause_name(TAGC_CAUSE_OOM), "oom");
  CHECK_EQ_STR(tagc_gen_cause_name(TAGC_CAUSE_HANG), "hang");
  CHECK_EQ_STR(tagc_gen_cause_name(TAGC_CAUSE_INJECTED), "injected");
}

static void test_metrics_text(void) {
  tagc_worker_sample s = tagc_worker_sample_empty();
  s.job = "j\"1";
  s.step_count = 3;
  s.step_sum = 0.6;
  for (int i = 0; i < TAGC_STEP_BUCKETS; i++) /* 0.05, 0.25, 0.3 s */
    s.step_le[i] = (tagc_step_bounds[i] >= 0.05) + 2 * (tagc_step_bounds[i] >= 0.5);
  char *text = tagc_metrics_text(&s, 10, 100);
  CHECK(text != NULL);
  if (!text)
    return;
  CHECK(strstr(text, "# TYPE tagc_worker_step_duration_seconds histogram\n") != NULL);
  CHECK(strstr(text, "\ntagc_worker_step_duration_seconds_bucket{tagc_job=\"j\\\"1\",le=\"0.05\"} 1\n") != NULL);
  CHECK(strstr(text, "\ntagc_worker_step_duration_seconds_bucket{tagc_job=\"j\\\"1\",le=\"+Inf\"} 3\n") != NULL);
  CHECK(strstr(text, "\ntagc_worker_step_duration_seconds_count{tagc_job=\"j\\\"1\"} 3\n") != NULL);
  CHECK(strstr(text, "\ntagc_worker_val_loss{tagc_job=\"j\\\"1\"} NaN\n") != NULL);
  CHECK(strstr(text, "\ntagc_worker_checkpoint_last_step{tagc_job=\"j\\\"1\"} -1\n") != NULL);
  CHECK(strstr(text, "\ntagc_worker_checkpoint_age_seconds{tagc_job=\"j\\\"1\"} 10\n") != NULL);
  CHECK(strstr(text, "\nprocess_resident_memory_bytes{tagc_job=") != NULL);
  CHECK(strstr(text, "\ntagc_build_info{tagc_job=\"j\\\"1\",version=\"" TAGC_VERSION "\",program=\"tagc-worker\"} 1\n") != NULL);
  CHECK(strstr(text, "\ntagc_etcd_request_duration_seconds_bucket{tagc_job=") != NULL);
  CHECK(strstr(text, "{job=") == NULL); /* Prometheus's own label is left to the scrape */
  CHECK(strstr(text, "# TYPE tagc_worker_steps_total counter\n") != NULL);
  CHECK(strstr(text, "\ntagc_worker_steps_total{tagc_job=\"j\\\"1\"} 0\n") != NULL);
  CHECK(strstr(text, "# TYPE tagc_worker_tokens_total counter\n") != NULL);
  CHECK(strstr(text, "\ntagc_worker_goodput_ratio{tagc_job=\"j\\\"1\"} NaN\n") != NULL);
  free(text);
  s.steps_total = 7; /* counters as they grow */
  s.tokens_total = 7 * 512;
  s.goodput = 0.875;
  text = tagc_metrics_text(&s, 10, 100);
  CHECK(text != NULL);
  if (!text)
    return;
  CHECK(strstr(text, "\ntagc_worker_steps_total{tagc_job=\"j\\\"1\"} 7\n") != NULL);
  CHECK(strstr(text, "\ntagc_worker_tokens_total{tagc_job=\"j\\\"1\"} 3584\n") != NULL);
  CHECK(strstr(text, "\ntagc_worker_goodput_ratio{tagc_job=\"j\\\"1\"} 0.875\n") != NULL);
  free(text);
}

int main(void) {
  test_peer_check();
  test_kinds();
  test_kind_names();
  test_metrics_text();
  return TEST_END();
}
