#include "train.h"

#include "comm/store.h"
#include "worker/elastic.h"
#include "worker/run.h"

/* Static mode: a fixed rank and world size, rendezvous through a shared directory. */
static tagc_status static_run(const tagc_train_config *cfg) {
  if (cfg->rank >= cfg->world)
    return tagc_errorf(TAGC_EINVAL, "--rank %lld is not below --world %lld", (long long)cfg->rank,
                       (long long)cfg->world);
  if (cfg->world > 1 && (!cfg->rendezvous || !*cfg->rendezvous))
    return tagc_errorf(TAGC_EINVAL, "--world %lld needs --rendezvous DIR or --etcd URL",
                       (long long)cfg->world);
  tagc_run *run;
  TAGC_CHECK(tagc_run_new(cfg, &run));
  tagc_store *store = NULL;
  tagc_status st = cfg->world > 1 ? tagc_store_file_new(cfg->rendezvous, &store) : TAGC_OK;
  tagc_gen_result res;
  if (st == TAGC_OK) {
    tagc_gen_spec g = {.gen = 0, .rank = (int)cfg->rank, .world = (int)cfg->world, .store = store};
    st = tagc_run_generation(run, &g, &res);
  }
  if (st == TAGC_OK && (res.end == TAGC_GEN_FAILED || res.end == TAGC_GEN_SUPERSEDED))
    st = tagc_errorf(res.status, "training failed at step %lld (%s): %s", (long long)res.step,
                     tagc_gen_cause_name(res.cause), res.detail);
  tagc_store_free(store);
  tagc_run_free(run);
  return st;
}

tagc_status tagc_train_run(const tagc_train_config *cfg) {
  return cfg->etcd && *cfg->etcd ? tagc_elastic_run(cfg) : static_run(cfg);
}
