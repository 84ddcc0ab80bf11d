/* tagc-coordinator processes and member processes on a real etcd:
 *   initial plan of 3 members, HTTP endpoints of the leader and of a standby,
 *   SIGKILL of a member -> its lease expires -> a plan without it,
 *   a join -> a scale-up plan,
 *   SIGKILL of the leader -> the standby takes over within about the lease TTL and plans,
 *   a paused leader whose lease is gone wakes up and its write is fenced,
 *   progress at the final step -> `done` -> every coordinator and member exits 0,
 *   and the generation sequence has no gap and no repeat throughout;
 * then the failure rules with in-process members (failure_rules). With the argument
 * "outage": an etcd outage longer than every lease (etcd_outage).
 * Members are this executable run as "member URL JOB ID" (coordinator/member.h). */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/json.h"
#include "common/status.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "cluster/member.h"
#include "etcd_server.h"
#include "plan_text.h"
#include "test.h"

#define JOB "tj"

static char self_exe[PATH_MAX];
static char coord_exe[PATH_MAX];
static char log_dir[64];

/* ---- member process ---- */

static int member_main(const char *url, const char *job, const char *id) {
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = url;
  tagc_etcd *c;
  if (tagc_etcd_create(&cfg, &c) != TAGC_OK)
    return 3;
  json_t *info = json_pack("{s:i}", "pid", (int)getpid());
  tagc_member *m;
  if (tagc_member_join(c, job, id, info, 1, &m) != TAGC_OK) {
    fprintf(stderr, "%s: join: %s\n", id, tagc_last_error());
    return 4;
  }
  json_decref(info);
  int64_t last = 0;
  for (;;) {
    tagc_plan p;
    tagc_status st = tagc_member_wait_plan(m, last, 60, &p);
    if (st == TAGC_ENOTFOUND)
      break;
    if (st != TAGC_OK) {
      fprintf(stderr, "%s: wait_plan: %s\n", id, tagc_last_error());
      continue;
    }
    if (p.rank >= 0 && tagc_member_ready(m, p.gen, p.rank) != TAGC_OK)
      fprintf(stderr, "%s: ready: %s\n", id, tagc_last_error());
    last = p.gen;
    tagc_plan_free(&p);
  }
  tagc_member_leave(m);
  tagc_etcd_destroy(c);
  return 0;
}

/* ---- processes ---- */

/* Runs argv with stdout and stderr to log_dir/<name>.log; the child dies with the test. */
static pid_t spawn(char *const argv[], const char *name) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s.log", log_dir, name);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

static pid_t start_member(const char *url, const char *id) {
  char *argv[] = {self_exe, "member", (char *)url, JOB, (char *)id, NULL};
  return spawn(argv, id);
}

typedef struct coord_proc {
  pid_t pid;
  int port;
  char url[64];
  char name[16];
} coord_proc;

/* Starts tagc-coordinator for job with HTTP on a free port, --min-workers 2,
 * --suspect-window 1, lease TTL and settle window as given, plus extra flags (NULL-ended). */
static void start_coord(coord_proc *cp, const char *name, const char *etcd_url, const char *job,
                        const char *ttl, const char *settle, char *const extra[]) {
  cp->port = tagc_test_free_port();
  snprintf(cp->url, sizeof cp->url, "http://127.0.0.1:%d", cp->port);
  snprintf(cp->name, sizeof cp->name, "%s", name);
  char http[32];
  snprintf(http, sizeof http, "127.0.0.1:%d", cp->port);
  char *argv[24] = {coord_exe, "--etcd", (char *)etcd_url, "--job", (char *)job,
                    "--min-workers", "2", "--lease-ttl", (char *)ttl, "--settle", (char *)settle,
                    "--suspect-window", "1", "--http", http};
  for (int i = 0; extra && extra[i] && i < 8; i++)
    argv[15 + i] = extra[i];
  cp->pid = spawn(argv, name);
}

/* Exit status of pid within limit_s seconds, or -1 (then it is killed). */
static int wait_exit(pid_t pid, double limit_s) {
  double t0 = tagc_now();
  int status;
  while (tagc_now() - t0 < limit_s) {
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    tagc_sleep(0.05);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

static void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* ---- HTTP ---- */

static size_t collect(char *data, size_t size, size_t n, void *arg) {
  char **buf = arg;
  size_t old = *buf ? strlen(*buf) : 0;
  char *bigger = realloc(*buf, old + size * n + 1);
  if (!bigger)
    return 0;
  memcpy(bigger + old, data, size * n);
  bigger[old + size * n] = '\0';
  *buf = bigger;
  return size * n;
}

/* GETs (or POSTs) url+path; returns the status code (0 when unreachable), body in *body. */
static long http(const coord_proc *cp, const char *path, int post, char **body) {
  *body = NULL;
  char url[128];
  snprintf(url, sizeof url, "%s%s", cp->url, path);
  CURL *h = curl_easy_init();
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, 3L);
  if (post)
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, "x");
  long code = 0;
  if (curl_easy_perform(h) == CURLE_OK)
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(h);
  if (!*body)
    *body = strdup("");
  return code;
}

/* The /status document (NULL when unreachable). */
static json_t *status_of(const coord_proc *cp) {
  char *body;
  json_t *j = NULL;
  if (http(cp, "/status", 0, &body) == 200)
    tagc_json_parse(body, strlen(body), &j);
  free(body);
  return j;
}

static int role_is(const coord_proc *cp, const char *role) {
  json_t *s = status_of(cp);
  const char *r = json_string_value(json_object_get(s, "role"));
  int yes = r && strcmp(r, role) == 0;
  json_decref(s);
  return yes;
}

/* Waits until cp reports role; returns the seconds it took, or -1. */
static double wait_role(const coord_proc *cp, const char *role, double limit_s) {
  double t0 = tagc_now();
  while (tagc_now() - t0 < limit_s) {
    if (role_is(cp, role))
      return tagc_now() - t0;
    tagc_sleep(0.1);
  }
  return -1;
}

/* Removes the tagc_job label every sample carries ({tagc_job="J"} or {tagc_job="J",...}) in
 * place. */
static void drop_job_label(char *body) {
  char *at;
  while (body && (at = strstr(body, "{tagc_job=\"")) != NULL) {
    char *end = strchr(at + 11, '"');
    if (!end)
      return;
    end++;
    if (*end == ',')
      memmove(at + 1, end + 1, strlen(end + 1) + 1); /* {tagc_job="J",kind=...} -> {kind=...} */
    else
      memmove(at, end + 1, strlen(end + 1) + 1);     /* {tagc_job="J"} -> nothing */
  }
}

/* Waits until /metrics of cp holds line (a full line; samples without their tagc_job label). */
static int wait_metric(const coord_proc *cp, const char *line, double limit_s) {
  double t0 = tagc_now();
  char want[128];
  snprintf(want, sizeof want, "\n%s\n", line);
  while (tagc_now() - t0 < limit_s) {
    char *body;
    http(cp, "/metrics", 0, &body);
    drop_job_label(body);
    int found = strstr(body, want) != NULL;
    free(body);
    if (found)
      return 1;
    tagc_sleep(0.2);
  }
  return 0;
}

/* ---- etcd observers ---- */

/* The current plan of job (NULL when none). */
static json_t *current_plan(tagc_etcd *c, const char *job) {
  char *gen = NULL, gen_key[TAGC_KEY_MAX], key[TAGC_KEY_MAX], *text = NULL;
  size_t len;
  json_t *plan = NULL;
  if (tagc_key_gen(job, gen_key, sizeof gen_key) == TAGC_OK &&
      tagc_etcd_get(c, gen_key, &gen, &len, NULL) == TAGC_OK &&
      tagc_key_gen_plan(job, atoll(gen), key, sizeof key) == TAGC_OK &&
      tagc_etcd_get(c, key, &text, &len, NULL) == TAGC_OK)
    tagc_json_parse(text, len, &plan);
  free(gen);
  free(text);
  return plan;
}

/* Waits for a plan of job with exactly these members (comma-separated); returns it or NULL. */
static json_t *wait_plan_members(tagc_etcd *c, const char *job, const char *members,
                                 double limit_s) {
  double t0 = tagc_now();
  char seen[256] = "";
  while (tagc_now() - t0 < limit_s) {
    json_t *plan = current_plan(c, job);
    plan_members_text(plan, seen, sizeof seen);
    if (plan && strcmp(seen, members) == 0)
      return plan;
    json_decref(plan);
    tagc_sleep(0.1);
  }
  fprintf(stderr, "no plan with members %s within %.0f s (last: %s)\n", members, limit_s, seen);
  return NULL;
}

static int64_t count_prefix(tagc_etcd *c, const char *prefix) {
  tagc_etcd_range_opts o = {.prefix = 1, .count_only = 1};
  tagc_etcd_range_result r;
  int64_t n = tagc_etcd_range(c, prefix, &o, &r) == TAGC_OK ? r.count : -1;
  tagc_etcd_range_result_free(&r);
  return n;
}

/* Every value `gen` took, from a watch. */
typedef struct gen_log {
  pthread_mutex_t lock;
  int64_t values[256];
  int n;
} gen_log;

static int on_gen(void *arg, const tagc_etcd_watch_msg *msg) {
  gen_log *g = arg;
  pthread_mutex_lock(&g->lock);
  for (size_t i = 0; i < msg->n_events; i++) {
    if (msg->events[i].type == TAGC_ETCD_PUT && g->n < 256)
      g->values[g->n++] = atoll((const char *)msg->events[i].kv.value);
  }
  pthread_mutex_unlock(&g->lock);
  return 0;
}

static int log_contains(const char *name, const char *needle) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s.log", log_dir, name);
  FILE *f = fopen(path, "r");
  char line[4096];
  int found = 0;
  while (f && !found && fgets(line, sizeof line, f))
    found = strstr(line, needle) != NULL;
  if (f)
    fclose(f);
  return found;
}

/* ---- the scenario ---- */

static void check_http(const coord_proc *leader, const coord_proc *standby, int64_t gen) {
  char *body;
  CHECK_EQ_INT(http(leader, "/healthz", 0, &body), 200);
  CHECK_EQ_STR(body, "ok\n");
  free(body);
  CHECK_EQ_INT(http(leader, "/nope", 0, &body), 404);
  free(body);
  CHECK_EQ_INT(http(leader, "/status", 1, &body), 405);
  free(body);

  json_t *s = NULL;
  for (double t0 = tagc_now(); tagc_now() - t0 < 3; tagc_sleep(0.1)) {
    json_decref(s);
    s = status_of(leader);
    if (json_integer_value(json_object_get(s, "generation")) == gen)
      break;
  }
  CHECK_EQ_STR(json_string_value(json_object_get(s, "role")), "leader");
  CHECK_EQ_STR(json_string_value(json_object_get(s, "leader")), leader->url);
  CHECK_EQ_INT(json_integer_value(json_object_get(s, "generation")), gen);
  CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(s, "plan"), "world")), 3);
  CHECK_EQ_INT(json_object_size(json_object_get(s, "workers")), 3);
  json_decref(s);

  char line[64];
  snprintf(line, sizeof line, "tagc_coordinator_generation %lld", (long long)gen);
  CHECK(wait_metric(leader, line, 3));
  CHECK(wait_metric(leader, "tagc_coordinator_leader 1", 1));
  CHECK(wait_metric(leader, "tagc_coordinator_world_size 3", 1));
  CHECK(wait_metric(leader, "tagc_coordinator_members 3", 1));
  CHECK(wait_metric(leader, "tagc_coordinator_failures_total{kind=\"lease\"} 0", 1));
  CHECK(wait_metric(leader, "# TYPE tagc_coordinator_failures_total counter", 1));

  s = status_of(standby);
  CHECK_EQ_STR(json_string_value(json_object_get(s, "role")), "standby");
  CHECK_EQ_STR(json_string_value(json_object_get(s, "leader")), leader->url);
  json_decref(s);
  CHECK(wait_metric(standby, "tagc_coordinator_leader 0", 3));
  CHECK(wait_metric(standby, line, 3));
}

/* The lease of coordinator cp's election key. */
static int64_t coord_lease(tagc_etcd *c, const coord_proc *cp) {
  tagc_etcd_range_opts o = {.prefix = 1};
  tagc_etcd_range_result r;
  int64_t lease = 0;
  if (tagc_etcd_range(c, "/tagc/" JOB "/coord/", &o, &r) != TAGC_OK)
    return 0;
  for (size_t i = 0; i < r.n; i++) {
    if (strcmp((const char *)r.kvs[i].value, cp->url) == 0)
      lease = r.kvs[i].lease;
  }
  tagc_etcd_range_result_free(&r);
  return lease;
}

static void scenario(const char *url, tagc_etcd *c) {
  gen_log gens = {.n = 0};
  pthread_mutex_init(&gens.lock, NULL);
  tagc_etcd_watch *gw = NULL;
  tagc_etcd_watch_opts wo = {0};
  CHECK_OK(tagc_etcd_watch_start(c, "/tagc/" JOB "/gen", &wo, on_gen, &gens, &gw));

  coord_proc a, b, cc, d;
  start_coord(&a, "coord-a", url, JOB, "2", "0.5", NULL);
  CHECK(wait_role(&a, "leader", 10) >= 0);
  start_coord(&b, "coord-b", url, JOB, "2", "0.5", NULL);
  CHECK(wait_role(&b, "standby", 10) >= 0);

  pid_t m[6] = {0};
  char id[8];
  for (int i = 0; i < 3; i++) {
    snprintf(id, sizeof id, "m%d", i);
    m[i] = start_member(url, id);
  }
  json_t *plan = wait_plan_members(c, JOB, "m0,m1,m2", 15);
  CHECK(plan != NULL);
  int64_t g = json_integer_value(json_object_get(plan, "gen"));
  CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(plan, "resume"), "step")), 0);
  json_decref(plan);
  char ready[TAGC_KEY_MAX];
  tagc_key_gen_ready_prefix(JOB, g, ready, sizeof ready);
  double t0 = tagc_now();
  while (count_prefix(c, ready) < 3 && tagc_now() - t0 < 5)
    tagc_sleep(0.1);
  CHECK_EQ_INT(count_prefix(c, ready), 3);
  check_http(&a, &b, g);

  /* A member dies: its lease expires and the survivors keep their order. */
  kill_and_reap(m[1]);
  plan = wait_plan_members(c, JOB, "m0,m2", 10);
  CHECK(plan && strstr(json_string_value(json_object_get(plan, "reason")), "lost m1"));
  json_decref(plan);
  CHECK(wait_metric(&a, "tagc_coordinator_failures_total{kind=\"lease\"} 1", 3));

  m[3] = start_member(url, "m3");
  plan = wait_plan_members(c, JOB, "m0,m2,m3", 10);
  CHECK(plan != NULL);
  /* Writing generation g deleted generation g-2's keys (plan, ready, boot). */
  char old[TAGC_KEY_MAX];
  tagc_key_gen_prefix(JOB, json_integer_value(json_object_get(plan, "gen")) - 2, old, sizeof old);
  CHECK_EQ_INT(count_prefix(c, old), 0);
  json_decref(plan);

  /* The leader dies: the standby takes over within about its lease TTL and keeps planning. */
  kill_and_reap(a.pid);
  double took = wait_role(&b, "leader", 10);
  CHECK_MSG(took >= 0 && took < 5, "standby took over after %.1f s", took);
  m[4] = start_member(url, "m4");
  plan = wait_plan_members(c, JOB, "m0,m2,m3,m4", 10);
  CHECK(plan && strcmp(json_string_value(json_object_get(plan, "leader")), b.url) == 0);
  json_decref(plan);

  /* Fencing: leader C (long lease) is paused and its lease revoked; D takes over; C wakes up
   * to a join before D's settle window ends, tries to write the generation, and is fenced. */
  kill(b.pid, SIGTERM);
  CHECK_EQ_INT(wait_exit(b.pid, 5), 0);
  start_coord(&cc, "coord-c", url, JOB, "60", "0.3", NULL);
  CHECK(wait_role(&cc, "leader", 10) >= 0);
  start_coord(&d, "coord-d", url, JOB, "2", "3", NULL);
  CHECK(wait_role(&d, "standby", 10) >= 0);
  kill(cc.pid, SIGSTOP);
  CHECK_OK(tagc_etcd_lease_revoke(c, coord_lease(c, &cc)));
  CHECK(wait_role(&d, "leader", 10) >= 0);
  m[5] = start_member(url, "m5");
  kill(cc.pid, SIGCONT);
  plan = wait_plan_members(c, JOB, "m0,m2,m3,m4,m5", 10);
  CHECK(plan && strcmp(json_string_value(json_object_get(plan, "leader")), d.url) == 0);
  json_decref(plan);
  CHECK_MSG(log_contains("coord-c", "fenced"), "coord-c's log has no fenced write");
  CHECK(wait_role(&cc, "standby", 5) >= 0);

  /* Progress reaches the final step: the leader writes done and everyone exits 0. */
  CHECK_OK(tagc_etcd_put(c, "/tagc/" JOB "/config", "{\"steps\":10}", 12, 0, NULL));
  CHECK_OK(tagc_etcd_put(c, "/tagc/" JOB "/progress", "{\"step\":10}", 11, 0, NULL));
  CHECK_EQ_INT(wait_exit(d.pid, 10), 0);
  CHECK_EQ_INT(wait_exit(cc.pid, 10), 0);
  json_t *done = NULL;
  char *text = NULL;
  size_t len;
  if (tagc_etcd_get(c, "/tagc/" JOB "/done", &text, &len, NULL) == TAGC_OK)
    tagc_json_parse(text, len, &done);
  free(text);
  CHECK_EQ_STR(json_string_value(json_object_get(done, "by")), d.url);
  json_decref(done);
  for (int i = 0; i < 6; i++) {
    if (i != 1)
      CHECK_EQ_INT(wait_exit(m[i], 10), 0);
  }

  tagc_etcd_watch_stop(gw);
  CHECK(gens.n >= 5);
  for (int i = 1; i < gens.n; i++)
    CHECK_MSG(gens.values[i] == gens.values[i - 1] + 1, "gen went %lld -> %lld",
              (long long)gens.values[i - 1], (long long)gens.values[i]);
  pthread_mutex_destroy(&gens.lock);
}

/* The failure rules end to end, with in-process members of job "tf": a silent suspect is
 * excluded and rejoins, an oom halves the micro-batch, a partition is resolved within two
 * generations, and the failure counters follow. */
static void failure_rules(const char *url, tagc_etcd *c) {
  coord_proc k;
  start_coord(&k, "coord-f", url, "tf", "2", "0.3", (char *[]){"--micro-batch", "8", NULL});
  CHECK(wait_role(&k, "leader", 10) >= 0);
  json_t *info = json_object();
  tagc_member *a = NULL, *b = NULL, *x = NULL;
  CHECK_OK(tagc_member_join(c, "tf", "a", info, 2, &a));
  CHECK_OK(tagc_member_join(c, "tf", "b", info, 2, &b));
  CHECK_OK(tagc_member_join(c, "tf", "x", info, 2, &x));
  json_decref(info);
  if (!a || !b || !x)
    return;
  json_t *plan = wait_plan_members(c, "tf", "a,b,x", 10);
  int64_t g = json_integer_value(json_object_get(plan, "gen"));
  json_decref(plan);

  /* a blames rank 2 (x), which stays silent: x is excluded after the suspect window. */
  CHECK_OK(tagc_member_report_failure(a, g, "timeout", 5, 2, NULL, 0, "recv from rank 2 timed out"));
  plan = wait_plan_members(c, "tf", "a,b", 10);
  CHECK(plan && strstr(json_string_value(json_object_get(plan, "reason")), "excluded x"));
  json_decref(plan);
  tagc_plan p;
  CHECK_OK(tagc_member_wait_plan(x, g, 5, &p));
  CHECK(p.rank == -1 && p.excluded == 1);
  g = p.gen;
  tagc_plan_free(&p);
  /* Alive and still excluded: no new generation for it... */
  CHECK_EQ_INT(tagc_member_wait_plan(x, g, 1.5, &p), TAGC_ETIMEDOUT);
  /* ...until it registers again. */
  CHECK_OK(tagc_member_rejoin(x, NULL));
  plan = wait_plan_members(c, "tf", "a,b,x", 10);
  g = json_integer_value(json_object_get(plan, "gen"));
  json_decref(plan);

  /* b runs out of memory: its micro-batch halves from the job's 8. */
  CHECK_OK(tagc_member_report_failure(b, g, "oom", 7, -1, NULL, 0, "allocation of 2 GiB failed"));
  CHECK_OK(tagc_member_wait_plan(b, g, 10, &p));
  CHECK(p.rank == 1 && p.world == 3);
  CHECK_EQ_INT(p.micro_batch, 4);
  g = p.gen;
  tagc_plan_free(&p);

  /* a (rank 0) and x (rank 2) keep blaming each other: x goes by the second generation. */
  int rounds = 0, world = 3;
  while (world == 3 && rounds < 4) {
    rounds++;
    CHECK_OK(tagc_member_report_failure(a, g, "timeout", 9, 2, NULL, 0, "partition"));
    CHECK_OK(tagc_member_report_failure(x, g, "timeout", 9, 0, NULL, 0, "partition"));
    if (tagc_member_wait_plan(a, g, 10, &p) != TAGC_OK)
      break;
    g = p.gen;
    world = p.world;
    tagc_plan_free(&p);
  }
  CHECK_MSG(world == 2 && rounds <= 2, "partition: world %d after %d generations", world, rounds);
  plan = current_plan(c, "tf");
  CHECK(json_object_get(json_object_get(plan, "excluded"), "x") != NULL);
  json_decref(plan);

  char line[96];
  snprintf(line, sizeof line, "tagc_coordinator_failures_total{kind=\"timeout\"} %d",
           1 + 2 * rounds);
  CHECK(wait_metric(&k, line, 3));
  CHECK(wait_metric(&k, "tagc_coordinator_failures_total{kind=\"oom\"} 1", 1));
  CHECK(wait_metric(&k, "tagc_coordinator_world_size 2", 1));

  /* Rank 0 finishes: the coordinator stops and every member learns it. */
  CHECK_OK(tagc_member_finish(a, g, 50));
  CHECK_EQ_INT(wait_exit(k.pid, 10), 0);
  CHECK_EQ_INT(tagc_member_wait_plan(b, g, 5, &p), TAGC_ENOTFOUND);
  tagc_member_leave(a);
  tagc_member_leave(b);
  tagc_member_leave(x);
}

/* Waits until GET path of cp answers code. */
static int wait_http(const coord_proc *cp, const char *path, long code, double limit_s) {
  for (double t0 = tagc_now(); tagc_now() - t0 < limit_s; tagc_sleep(0.2)) {
    char *body;
    long got = http(cp, path, 0, &body);
    free(body);
    if (got == code)
      return 1;
  }
  return 0;
}

/* etcd is down for longer than every lease: the coordinator reports unhealthy, then leads
 * again; the members keep their leases (a restarted etcd extends them and the keep-alive
 * never gave up) or register again as their continuation, and keep their generation. */
static void etcd_outage(tagc_test_etcd *e, tagc_etcd *c) {
  coord_proc k;
  start_coord(&k, "coord-o", e->url, "to", "2", "0.3",
              (char *[]){"--etcd-timeout", "2", "--linger", NULL});
  CHECK(wait_role(&k, "leader", 10) >= 0);
  json_t *info = json_object();
  tagc_member *a = NULL, *b = NULL;
  CHECK_OK(tagc_member_join(c, "to", "a", info, 2, &a));
  CHECK_OK(tagc_member_join(c, "to", "b", info, 2, &b));
  json_decref(info);
  if (!a || !b)
    return;
  json_t *plan = wait_plan_members(c, "to", "a,b", 10);
  int64_t g = json_integer_value(json_object_get(plan, "gen"));
  json_decref(plan);

  CHECK_OK(tagc_test_etcd_kill(e));
  CHECK(wait_http(&k, "/healthz", 503, 10));
  CHECK_OK(tagc_test_etcd_restart(e));
  CHECK(wait_http(&k, "/healthz", 200, 15));
  CHECK(wait_role(&k, "leader", 15) >= 0);

  /* no new generation through the leader's lease-loss grace (its TTL, 2 s) and settle */
  tagc_plan p;
  CHECK_EQ_INT(tagc_member_wait_plan(a, g, 2 + 0.3 + 3, &p), TAGC_ETIMEDOUT);
  int64_t now = 0;
  CHECK_OK(tagc_member_read_gen(a, &now));
  CHECK_EQ_INT(now, g);
  CHECK(!tagc_member_lease_lost(a) && !tagc_member_lease_lost(b));
  CHECK_OK(tagc_member_finish(a, g, 1));
  /* --linger: the done job stays visible until SIGTERM. */
  CHECK(wait_metric(&k, "tagc_coordinator_job_done 1", 5));
  CHECK_EQ_INT(waitpid(k.pid, NULL, WNOHANG), 0);
  kill(k.pid, SIGTERM);
  CHECK_EQ_INT(wait_exit(k.pid, 5), 0);
  tagc_member_leave(a);
  tagc_member_leave(b);
}

static void locate_executables(void) {
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  self_exe[n > 0 ? n : 0] = '\0';
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", self_exe);
  snprintf(coord_exe, sizeof coord_exe, "%s/tagc-coordinator", dirname(dir));
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "member") == 0)
    return member_main(argv[2], argv[3], argv[4]);
  locate_executables();
  if (access(coord_exe, X_OK) != 0)
    TEST_SKIP("tagc-coordinator is not built next to this test");
  snprintf(log_dir, sizeof log_dir, "/tmp/tagc-coord-test.XXXXXX");
  if (!mkdtemp(log_dir))
    TEST_SKIP("no temporary directory");
  tagc_test_etcd e;
  tagc_status st = tagc_test_etcd_start(&e);
  if (st == TAGC_EUNSUPPORTED)
    TEST_SKIP("no etcd binary");
  CHECK_OK(st);
  if (st == TAGC_OK) {
    tagc_etcd_config cfg;
    tagc_etcd_config_init(&cfg);
    cfg.endpoints = e.url;
    tagc_etcd *c = NULL;
    CHECK_OK(tagc_etcd_create(&cfg, &c));
    if (c && argc == 2 && strcmp(argv[1], "outage") == 0) {
      etcd_outage(&e, c);
    } else if (c) {
      scenario(e.url, c);
      failure_rules(e.url, c);
    }
    tagc_etcd_destroy(c);
    tagc_test_etcd_stop(&e);
  }
  if (test_failed_) {
    fprintf(stderr, "process logs kept in %s\n", log_dir);
  } else {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", log_dir);
    CHECK(system(cmd) == 0);
  }
  return TEST_END();
}
