/* tagctl status: a job's generation, plan, progress, last checkpoint, end and workers, as
 * its etcd keys hold them (docs/etcd-schema.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "tagctl/tagctl.h"

/* TAGC_OK when etcd holds at least one key of the job, TAGC_ENOTFOUND ("no such job") when
 * it holds none, or the etcd error. */
static tagc_status job_exists(tagc_etcd *etcd, const char *job, const char *endpoints) {
  char prefix[512];
  TAGC_CHECK(tagc_key_job_prefix(job, prefix, sizeof prefix));
  tagc_etcd_range_result r = {0};
  tagc_etcd_range_opts ro = {.prefix = 1, .count_only = 1};
  TAGC_CHECK(tagc_etcd_range(etcd, prefix, &ro, &r));
  int64_t keys = r.count;
  tagc_etcd_range_result_free(&r);
  return keys > 0 ? TAGC_OK : tagc_errorf(TAGC_ENOTFOUND, "no such job '%s' in etcd %s", job, endpoints);
}

/* Prints one key's value (or "-") under a label. */
static void print_key(tagc_etcd *etcd, const char *label, const char *key) {
  char *v = NULL;
  tagc_status st = tagc_etcd_get(etcd, key, &v, NULL, NULL);
  printf("%-10s %s\n", label, st == TAGC_OK ? v : "-");
  free(v);
}

static void print_workers(tagc_etcd *etcd, const char *job) {
  char prefix[512];
  tagc_etcd_range_result r = {0};
  tagc_etcd_range_opts ro = {.prefix = 1};
  if (tagc_key_workers_prefix(job, prefix, sizeof prefix) == TAGC_OK &&
      tagc_etcd_range(etcd, prefix, &ro, &r) == TAGC_OK) {
    for (size_t i = 0; i < r.n; i++)
      printf("%-10s %s = %s\n", "worker", (char *)r.kvs[i].key + strlen(prefix),
             (char *)r.kvs[i].value);
  }
  tagc_etcd_range_result_free(&r);
}

int tagctl_status(int argc, char **argv) {
  tagctl_etcd_args a = {0};
  tagc_etcd *etcd = NULL;
  int code = tagctl_etcd_setup("tagctl status", "--etcd URL --job J",
                               "Shows a job's generation, plan, progress, last checkpoint and "
                               "workers.",
                               argc, argv, &a, NULL, 0, NULL, &etcd);
  if (code >= 0)
    goto done;
  char key[512], gen_key[512];
  char *g = NULL;
  tagc_status st = job_exists(etcd, a.job, a.etcd);
  if (st == TAGC_OK)
    st = tagc_key_gen(a.job, gen_key, sizeof gen_key);
  if (st == TAGC_OK && (st = tagc_etcd_get(etcd, gen_key, &g, NULL, NULL)) == TAGC_ENOTFOUND)
    st = TAGC_OK; /* no generation yet */
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl status: %s\n", tagc_last_error());
    code = 1;
    goto done;
  }
  printf("%-10s %s\n", "gen", g ? g : "-");
  if (g && tagc_key_gen_plan(a.job, strtoll(g, NULL, 10), key, sizeof key) == TAGC_OK)
    print_key(etcd, "plan", key);
  free(g);
  if (tagc_key_progress(a.job, key, sizeof key) == TAGC_OK)
    print_key(etcd, "progress", key);
  if (tagc_key_ckpt_committed(a.job, key, sizeof key) == TAGC_OK)
    print_key(etcd, "ckpt", key);
  if (tagc_key_done(a.job, key, sizeof key) == TAGC_OK)
    print_key(etcd, "done", key);
  print_workers(etcd, a.job);
  code = 0;
done:
  tagctl_etcd_args_free(&a);
  tagc_etcd_destroy(etcd);
  return code;
}
