/* tagc-coordinator: one leader-elected coordinator of a tagc job (run two or more). */
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/options.h"
#include "coordinator/coordinator.h"
#include "cluster/etcd.h"
#include "cluster/http.h"
#include "cluster/keys.h"

typedef struct coord_options {
  char *etcd;
  char *job;
  int64_t min_workers;
  int64_t max_workers;
  double settle;
  double lease_ttl;
  double suspect_window;
  int64_t start_workers;
  double start_wait;
  int64_t micro_batch;
  int64_t steps;
  char *http;
  char *advertise;
  int linger;
  double etcd_timeout;
  char *etcd_ca;
  char *etcd_cert;
  char *etcd_key;
  char *etcd_user;
  char *etcd_password_file;
  char *log;
  char *log_format;
} coord_options;

#define OFF(f) offsetof(coord_options, f)

static const tagc_opt coord_opts[] = {
    {"etcd", TAGC_OPT_STRING, OFF(etcd), "http://127.0.0.1:2379", 0, -1, NULL,
     "etcd client URLs, comma-separated"},
    {"job", TAGC_OPT_STRING, OFF(job), "", 0, -1, NULL, "job id (required; [A-Za-z0-9_.-])"},
    {"min-workers", TAGC_OPT_INT, OFF(min_workers), "1", 1, 1 << 20, NULL,
     "fewest workers of a generation; fewer alive: wait"},
    {"max-workers", TAGC_OPT_INT, OFF(max_workers), "1024", 1, 1 << 20, NULL,
     "most workers of a generation; more alive: they wait as standbys"},
    {"settle", TAGC_OPT_DOUBLE, OFF(settle), "1", 0, 600, NULL,
     "seconds to wait after a change before deciding (batches simultaneous events)"},
    {"lease-ttl", TAGC_OPT_DOUBLE, OFF(lease_ttl), "5", 1, 600, NULL,
     "seconds of this coordinator's lease: a dead leader is replaced after it"},
    {"suspect-window", TAGC_OPT_DOUBLE, OFF(suspect_window), "2", 0, 600, NULL,
     "seconds a worker blamed by a peer has to report itself before it is excluded"},
    {"start-workers", TAGC_OPT_INT, OFF(start_workers), "0", 0, 1 << 20, NULL,
     "the first generation waits for this many workers (0: min-workers) ..."},
    {"start-wait", TAGC_OPT_DOUBLE, OFF(start_wait), "30", 0, 3600, NULL,
     "... at most this many seconds after start; then min-workers suffice"},
    {"micro-batch", TAGC_OPT_INT, OFF(micro_batch), "0", 0, 1 << 20, NULL,
     "the job's micro-batch, halved for a worker that reports oom (0: \"micro_batch\" of the "
     "job's config key)"},
    {"steps", TAGC_OPT_INT, OFF(steps), "0", 0, 9.2e18, NULL,
     "final step: the job is done when progress reaches it (0: \"steps\" of the config key)"},
    {"http", TAGC_OPT_STRING, OFF(http), "127.0.0.1:0", 0, -1, NULL,
     "HOST:PORT for /healthz, /status and /metrics (port 0: any free one; empty: no HTTP)"},
    {"advertise", TAGC_OPT_STRING, OFF(advertise), "", 0, -1, NULL,
     "address other processes read from the election key (default: the HTTP URL)"},
    {"linger", TAGC_OPT_BOOL, OFF(linger), "0", 0, -1, NULL,
     "after the job is done keep serving HTTP until SIGTERM (for Kubernetes Deployments) "
     "instead of exiting 0"},
    {"etcd-timeout", TAGC_OPT_DOUBLE, OFF(etcd_timeout), "5", 0.5, 600, NULL,
     "seconds one etcd call may take, retries included"},
    TAGC_ETCD_CREDENTIAL_OPTS(OFF),
    {"log", TAGC_OPT_STRING, OFF(log), "info", 0, -1, NULL,
     "log filter, e.g. info or warn,coord=debug"},
    {"log-format", TAGC_OPT_CHOICE, OFF(log_format), "auto", 0, -1, "auto|text|json",
     "log lines as text or one JSON object each (auto: text when stderr is a terminal)"},
};

static const tagc_opt_program coord_program = {
    "tagc-coordinator", "[options]",
    "Coordinates a tagc training job through etcd: elects one leader among the coordinators, "
    "turns worker membership and failure reports into generations, and serves /healthz, "
    "/status and /metrics.",
    coord_opts, sizeof coord_opts / sizeof coord_opts[0]};

static tagc_coord *running;

static void on_signal(int sig) {
  (void)sig;
  if (running)
    tagc_coord_stop(running);
}

/* Prefixes this thread's error detail with context (copied first: the detail lives in the
 * buffer tagc_errorf writes). */
static tagc_status with_context(tagc_status st, const char *context) {
  char detail[512];
  snprintf(detail, sizeof detail, "%s", tagc_last_error());
  return tagc_errorf(st, "%s: %s", context, detail);
}

static const char *or_null(const char *s) { return s && s[0] ? s : NULL; }

static tagc_status connect_etcd(const coord_options *o, tagc_etcd **out) {
  tagc_etcd_credentials cred = TAGC_ETCD_CREDENTIALS_OF(o);
  TAGC_CHECK(tagc_etcd_connect(o->etcd, &cred, o->etcd_timeout, out)); /* bad options: one line */
  /* One read up front, so a wrong URL or refused credentials are a clear error now rather
     than retries forever. */
  char key[TAGC_KEY_MAX];
  tagc_etcd_range_result r;
  tagc_status st = tagc_key_gen(o->job, key, sizeof key);
  if (st == TAGC_OK)
    st = tagc_etcd_range(*out, key, NULL, &r);
  if (st == TAGC_OK) {
    tagc_etcd_range_result_free(&r);
    return TAGC_OK;
  }
  tagc_etcd_destroy(*out);
  *out = NULL;
  char detail[512];
  snprintf(detail, sizeof detail, "%s", tagc_last_error());
  return tagc_errorf(TAGC_EPEER, "cannot use etcd at %s: %s", o->etcd, detail);
}

static tagc_status run(const coord_options *o) {
  TAGC_CHECK(tagc_key_check_id(o->job, "--job"));
  tagc_coord_config cfg;
  tagc_coord_config_init(&cfg);
  cfg.job = o->job;
  cfg.min_workers = (int)o->min_workers;
  cfg.max_workers = (int)o->max_workers;
  cfg.settle_s = o->settle;
  cfg.lease_ttl_s = o->lease_ttl;
  cfg.suspect_window_s = o->suspect_window;
  cfg.start_workers = (int)o->start_workers;
  cfg.start_wait_s = o->start_wait;
  cfg.micro_batch = (int)o->micro_batch;
  cfg.final_step = o->steps;
  cfg.http_addr = or_null(o->http);
  cfg.advertise = or_null(o->advertise);
  cfg.linger = o->linger;
  if (cfg.max_workers < cfg.min_workers)
    return tagc_errorf(TAGC_EINVAL, "--max-workers %d is below --min-workers %d", cfg.max_workers,
                       cfg.min_workers);
  if (cfg.http_addr) {
    char *host;
    int port;
    if (tagc_http_parse_addr(cfg.http_addr, &host, &port) != TAGC_OK)
      return with_context(TAGC_EINVAL, "--http");
    free(host);
  }
  tagc_etcd *etcd;
  tagc_status st = connect_etcd(o, &etcd);
  if (st != TAGC_OK)
    return st;
  tagc_coord *c;
  st = tagc_coord_create(etcd, &cfg, &c);
  if (st == TAGC_OK) {
    if (tagc_coord_http_port(c))
      LOG_INFO("coord", "serving /healthz, /status, /metrics on port %d", tagc_coord_http_port(c));
    running = c;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    st = tagc_coord_run(c);
    running = NULL;
    if (st == TAGC_EABORTED)
      st = TAGC_OK; /* stopped by a signal: a clean exit */
    tagc_coord_destroy(c);
  }
  tagc_etcd_destroy(etcd);
  return st;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  coord_options o;
  memset(&o, 0, sizeof o);
  int help = 0;
  tagc_status st = tagc_opts_parse(&coord_program, &o, argc, argv, NULL, 0, NULL, &help);
  tagc_log_format format = TAGC_LOG_AUTO;
  if (st == TAGC_OK && !help)
    st = tagc_log_format_parse(o.log_format, &format);
  if (st == TAGC_OK && !help)
    st = tagc_log_configure(o.log, format);
  tagc_log_set_tag("coord");
  if (st != TAGC_OK || help) {
    if (st != TAGC_OK)
      fprintf(stderr, "tagc-coordinator: %s\n", tagc_last_error());
    tagc_opts_free(&coord_program, &o);
    return st != TAGC_OK ? 2 : 0;
  }
  /* Not tagc_opts_log: it would print the etcd password. */
  LOG_INFO("config", "tagc-coordinator: etcd %s, job %s, workers %lld..%lld, settle %g s, "
           "lease TTL %g s, suspect window %g s, micro-batch %lld, final step %lld, http '%s'",
           o.etcd, o.job, (long long)o.min_workers, (long long)o.max_workers, o.settle,
           o.lease_ttl, o.suspect_window, (long long)o.micro_batch, (long long)o.steps, o.http);
  st = run(&o);
  if (st != TAGC_OK)
    fprintf(stderr, "tagc-coordinator: %s\n", tagc_last_error());
  tagc_opts_free(&coord_program, &o);
  /* Bad options: 2; etcd unreachable or other failures: 1. */
  return st == TAGC_OK ? 0 : st == TAGC_EINVAL ? 2 : 1;
}
