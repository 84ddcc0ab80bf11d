/* rho advisor (see rho.h). */
#include "kernels/rho.h"

#include <math.h>

#include "kernels/layout.h"

static double clamp_rho(double rho) {
  return rho < TAGC_RHO_MIN ? TAGC_RHO_MIN : (rho > TAGC_RHO_MAX ? TAGC_RHO_MAX : rho);
}

tagc_status tagc_rho_advise(double global_density, int64_t shard_numel, double *rho) {
  if (!rho)
    return tagc_errorf(TAGC_EINVAL, "rho_advise: NULL rho");
  if (!(global_density >= 0.0 && global_density <= 1.0))
    return tagc_errorf(TAGC_EINVAL, "rho_advise: density %g outside [0, 1]", global_density);
  if (shard_numel < 1)
    return tagc_errorf(TAGC_EINVAL, "rho_advise: shard_numel %lld < 1", (long long)shard_numel);
  if (global_density == 0.0) {
    *rho = TAGC_RHO_MAX;
    return TAGC_OK;
  }
  double blocks = ceil((double)shard_numel / TAGC_BLOCK);
  double r = clamp_rho(TAGC_PEEL_LOAD_TARGET / global_density);
  /* c_target grows with R and R shrinks as rho grows: iterate to the fixed point from
   * above-feasible rho downwards (monotone, converges in a few steps). */
  for (int it = 0; it < 32; it++) {
    double rows = fmax(3.0, ceil(blocks / r));
    double load = TAGC_PEEL_LOAD_TARGET - TAGC_PEEL_LOAD_SLOPE / sqrt(rows);
    double next = clamp_rho(fmax(load, 0.05) / global_density);
    if (fabs(next - r) < 1e-9 * r)
      break;
    r = next;
  }
  *rho = r;
  return TAGC_OK;
}
