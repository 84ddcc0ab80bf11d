/* NCCL backend placeholder for builds without CUDA/NCCL. */
#include "comm/comm_backend.h"

tagc_status comm_nccl_create(const tagc_comm_config *cfg, const comm_backend_ops **ops,
                             void **impl) {
  (void)cfg;
  (void)ops;
  (void)impl;
  return tagc_errorf(TAGC_EUNSUPPORTED, "comm: this build has no NCCL backend");
}

tagc_status comm_nccl_shrink(void *parent, const int *excluded, int n_excluded,
                             const tagc_comm_config *cfg, const comm_backend_ops **ops,
                             void **impl) {
  (void)parent;
  (void)excluded;
  (void)n_excluded;
  (void)cfg;
  (void)ops;
  (void)impl;
  return tagc_errorf(TAGC_EUNSUPPORTED, "comm: this build has no NCCL backend");
}
