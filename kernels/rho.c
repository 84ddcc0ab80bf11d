/* rho advisor (see rho.h). */
#include "kernels/rho.h"

#include <math.h>

#include "kernels/layout.h"

static double clamp_rho(double rho) {
  return rho < TAGC_RHO_MIN ? TAGC_RHO_MIN : (rho > TAGC_RHO_MAX ? TAGC_RHO_MAX : rho);
}

tagc_status tagc_rho_advise(double global_density, int64_t shard_numel, int32_t lanes,
                            double *rho) {
  if (!rho)
    return tagc_errorf(TAGC_EINVAL, "rho_advise: NULL rho");
  if (!(global_density >= 0.0 && global_density <= 1.0))
    return tagc_errorf(TAGC_EINVAL, "rho_advise: density %g outside [0, 1]", global_density);
  if (shard_numel < 1)
    return tagc_errorf(TAGC_EINVAL, "rho_advise: shard_numel %lld < 1", (long long)shard_numel);
  if (lanes < TAGC_LANES_MIN || lanes > TAGC_LANES_MAX || (lanes & (lanes - 1)))
    return tagc_errorf(TAGC_EINVAL, "rho_advise: %d lanes", (int)lanes);
  if (global_density == 0.0) {
    *rho = TAGC_RHO_MAX;
    return TAGC_OK;
  }
  double blocks = ceil((double)shard_numel / TAGC_PAD) * (TAGC_PAD / lanes);
  double items = global_density * blocks;
  /* smallest R with LIMIT*R - SLOPE*sqrt(R) >= items, then the LOAD_MAX cap */
  double s = (TAGC_PEEL_LOAD_SLOPE +
              sqrt(TAGC_PEEL_LOAD_SLOPE * TAGC_PEEL_LOAD_SLOPE + 4.0 * TAGC_PEEL_LOAD_LIMIT * items)) /
             (2.0 * TAGC_PEEL_LOAD_LIMIT);
  double rows = fmax(ceil(s * s), ceil(items / TAGC_PEEL_LOAD_MAX));
  double r = clamp_rho(blocks / fmax(rows, 3.0));
  *rho = r;
  return TAGC_OK;
}
