/* Elastic mode of tagc-worker: membership, generations and recovery through etcd. */
#include "elastic.h"

#include <stdio.h>
#include <unistd.h>

#include <jansson.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "cluster/member.h"
#include "worker/run.h"

typedef struct watcher {
  tagc_run *run;
  tagc_member *member;
} watcher;

/* From the member's threads: a newer generation supersedes the running one; a lost lease
 * stops training at once (the member registers again and a new generation follows). */
static void on_change(void *arg, int64_t gen) {
  watcher *w = arg;
  if (tagc_member_lease_lost(w->member))
    tagc_run_abort(w->run);
  else
    tagc_run_supersede(w->run, gen);
}

static json_t *worker_info(const tagc_train_config *cfg) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return json_pack("{s:s, s:s, s:i, s:s, s:I}", "host", host, "address", cfg->host, "pid",
                   (int)getpid(), "device", "cpu", "threads", (json_int_t)cfg->threads);
}

/* Trains the generations of a job until it is done. */
static tagc_status supervise(tagc_run *run, tagc_member *m, json_t *info) {
  int64_t gen = 0;
  double rejoin_wait = 1.0; /* doubles after each exclusion: a lasting partition costs few generations */
  for (;;) {
    tagc_plan plan = {0};
    tagc_status st = tagc_member_wait_plan(m, gen, 5.0, &plan);
    if (st == TAGC_ETIMEDOUT)
      continue;
    if (plan.job_done) {
      LOG_INFO("elastic", "the job is done");
      return TAGC_OK;
    }
    if (st != TAGC_OK) { /* etcd unreachable or a bad plan: the member re-registers; retry */
      LOG_WARN("elastic", "waiting for a plan: %s", tagc_last_error());
      tagc_sleep(1.0);
      continue;
    }
    gen = plan.gen;
    if (plan.rank < 0) {
      LOG_INFO("elastic", "generation %lld: not a member (%s)", (long long)gen, plan.reason);
      if (plan.excluded) { /* excluded as suspect: this process is alive again, ask back in */
        LOG_INFO("elastic", "excluded; asking to rejoin in %.0f s", rejoin_wait);
        tagc_sleep(rejoin_wait);
        rejoin_wait = rejoin_wait * 2 > 120 ? 120 : rejoin_wait * 2;
        if (tagc_member_rejoin(m, info) != TAGC_OK)
          LOG_WARN("elastic", "rejoin failed: %s", tagc_last_error());
      }
      tagc_plan_free(&plan);
      continue;
    }
    LOG_INFO("elastic", "generation %lld: rank %d of %d, micro-batch %d, resume %s (%s)",
             (long long)gen, plan.rank, plan.world, plan.micro_batch,
             plan.resume_path ? plan.resume_path : "from scratch", plan.reason);
    tagc_store *store = NULL;
    tagc_gen_result res;
    st = tagc_member_store(m, gen, &store);
    if (st == TAGC_OK) {
      tagc_gen_spec g = {gen, plan.rank, plan.world, store, plan.micro_batch, plan.resume_path};
      st = tagc_run_generation(run, &g, &res);
    }
    tagc_store_free(store);
    int rank = plan.rank;
    tagc_plan_free(&plan);
    if (st != TAGC_OK)
      return st;
    switch (res.end) {
    case TAGC_GEN_FINISHED:
      if (rank == 0 && tagc_member_finish(m, gen, res.step) != TAGC_OK)
        LOG_WARN("elastic", "finish not recorded: %s", tagc_last_error());
      break;
    case TAGC_GEN_STOPPED:
      return TAGC_OK;
    case TAGC_GEN_FAILED:
      if (tagc_member_report_failure(m, gen, res.kind, res.step, res.suspected_rank, res.detail) != TAGC_OK)
        LOG_WARN("elastic", "failure report not recorded: %s", tagc_last_error());
      break;
    case TAGC_GEN_SUPERSEDED:
      break;
    }
  }
}

tagc_status tagc_elastic_run(const tagc_train_config *cfg) {
  tagc_etcd_config ec;
  tagc_etcd_config_init(&ec);
  ec.endpoints = cfg->etcd;
  tagc_etcd *etcd = NULL;
  tagc_run *run = NULL;
  tagc_member *m = NULL;
  json_t *info = worker_info(cfg);
  char id[128];
  if (cfg->worker_id && *cfg->worker_id) {
    snprintf(id, sizeof id, "%s", cfg->worker_id);
  } else {
    char host[64] = "worker";
    gethostname(host, sizeof host - 1);
    snprintf(id, sizeof id, "%s-%d", host, (int)getpid());
  }
  tagc_status st;
  TAGC_CHECK_GOTO(tagc_run_new(cfg, &run), st, done);
  TAGC_CHECK_GOTO(tagc_etcd_create(&ec, &etcd), st, done);
  TAGC_CHECK_GOTO(tagc_member_join(etcd, cfg->job, id, info, cfg->lease_ttl, &m), st, done);
  LOG_INFO("elastic", "joined job %s as %s", cfg->job, id);
  tagc_run_set_member(run, m);
  watcher w = {run, m};
  tagc_member_on_change(m, on_change, &w);
  st = supervise(run, m, info);
  tagc_member_on_change(m, NULL, NULL);
done:
  tagc_member_leave(m);
  tagc_etcd_destroy(etcd);
  tagc_run_free(run);
  json_decref(info);
  return st;
}
