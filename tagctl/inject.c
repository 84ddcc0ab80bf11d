/* tagctl inject: arms (or clears) a fault on a running worker through its etcd key
 * chaos/<worker>; the worker polls it about once a second (worker/run.c). */
#include <stdio.h>
#include <string.h>

#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "tagctl/tagctl.h"
#include "worker/fault.h"

/* The fault spec of KIND as the worker parses it: slow=SECONDS or KIND@STEP. */
static tagc_status fault_spec(const tagctl_etcd_args *a, const char *kind, char *spec, size_t cap) {
  if (!strcmp(kind, "slow"))
    snprintf(spec, cap, "slow=%g", a->seconds);
  else if (a->at_step >= 0)
    snprintf(spec, cap, "%s@%lld", kind, (long long)a->at_step);
  else
    snprintf(spec, cap, "%s@0", kind);
  tagc_faults check;
  TAGC_CHECK(tagc_faults_parse(spec, &check));
  if (a->at_step < 0 && strcmp(kind, "slow") != 0)
    return tagc_errorf(TAGC_EINVAL, "%s needs --at-step S", kind);
  return TAGC_OK;
}

int tagctl_inject(int argc, char **argv) {
  tagctl_etcd_args a = {0};
  char *pos[1];
  int n_pos = 0;
  tagc_etcd *etcd = NULL;
  int code = tagctl_etcd_setup("tagctl inject", "--job J --worker W KIND [--at-step S] | --clear",
                               "Arms a fault on a running worker through its etcd key "
                               "chaos/<worker>. KIND: crash, exit, oom, hang, drop, nan (at a step) or "
                               "slow (--seconds per collective); the worker polls the key about "
                               "once a second.",
                               argc, argv, &a, pos, 1, &n_pos, &etcd);
  if (code >= 0)
    goto done;
  char key[512], spec[64];
  tagc_status st = tagc_key_chaos(a.job, a.worker, key, sizeof key);
  if (st == TAGC_OK && a.clear) {
    st = tagc_etcd_delete(etcd, key, 0, NULL);
  } else if (st == TAGC_OK) {
    st = fault_spec(&a, n_pos ? pos[0] : "", spec, sizeof spec);
    if (st == TAGC_OK)
      st = tagc_etcd_put(etcd, key, spec, strlen(spec), 0, NULL);
    if (st == TAGC_OK)
      printf("%s = %s\n", key, spec);
  }
  code = st == TAGC_OK ? 0 : (st == TAGC_EINVAL ? 2 : 1);
  if (st != TAGC_OK)
    fprintf(stderr, "tagctl inject: %s\n", tagc_last_error());
done:
  tagc_etcd_destroy(etcd);
  tagctl_etcd_args_free(&a);
  return code;
}
