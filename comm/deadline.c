/* Link-rate estimate and byte-scaled deadlines (see deadline.h). */
#include "comm/deadline.h"

#include <math.h>
#include <string.h>

void tagc_deadline_config_init(tagc_deadline_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->slack = 3.0;
  cfg->initial_rate = 12.5e6;
  cfg->min_rate = 1e6;
  cfg->min_sample_bytes = 256 * 1024;
  cfg->max_extra_s = 3600.0;
}

tagc_status tagc_link_init(tagc_link_estimator *est, const tagc_deadline_config *cfg) {
  memset(est, 0, sizeof *est);
  if (!cfg)
    return tagc_errorf(TAGC_EINVAL, "deadline config: NULL");
  if (!(cfg->slack >= 1.0) || !isfinite(cfg->slack))
    return tagc_errorf(TAGC_EINVAL, "deadline config: slack %g must be >= 1", cfg->slack);
  if (!(cfg->min_rate > 0) || !isfinite(cfg->initial_rate) || !(cfg->initial_rate >= cfg->min_rate))
    return tagc_errorf(TAGC_EINVAL, "deadline config: rates must satisfy 0 < min_rate (%g) <= "
                       "initial_rate (%g)", cfg->min_rate, cfg->initial_rate);
  if (!(cfg->max_extra_s >= 0) || !isfinite(cfg->max_extra_s))
    return tagc_errorf(TAGC_EINVAL, "deadline config: max_extra_s %g must be >= 0",
                       cfg->max_extra_s);
  est->cfg = *cfg;
  return TAGC_OK;
}

void tagc_link_record(tagc_link_estimator *est, uint64_t bytes, double seconds) {
  if (bytes < est->cfg.min_sample_bytes || !(seconds > 0) || !isfinite(seconds))
    return;
  est->rate[est->next] = (double)bytes / seconds;
  est->next = (est->next + 1) % TAGC_LINK_WINDOW;
  if (est->n < TAGC_LINK_WINDOW)
    est->n++;
  est->samples++;
}

/* The sorted sample at rank floor(num * (n - 1) / den), or 0 without samples. */
static double sample_at(const tagc_link_estimator *est, int num, int den) {
  if (est->n == 0)
    return 0;
  /* Insertion sort of a copy: the window is small. */
  double v[TAGC_LINK_WINDOW];
  for (int i = 0; i < est->n; i++) {
    double x = est->rate[i];
    int j = i;
    for (; j > 0 && v[j - 1] > x; j--)
      v[j] = v[j - 1];
    v[j] = x;
  }
  return v[num * (est->n - 1) / den];
}

double tagc_link_measured_rate(const tagc_link_estimator *est) { return sample_at(est, 1, 2); }

double tagc_link_peak_rate(const tagc_link_estimator *est) { return sample_at(est, 3, 4); }

double tagc_link_rate(const tagc_link_estimator *est) {
  double r = est->n ? tagc_link_measured_rate(est) : est->cfg.initial_rate;
  return r > est->cfg.min_rate ? r : est->cfg.min_rate;
}

double tagc_link_timeout(const tagc_link_estimator *est, double base_s, uint64_t bytes) {
  double extra = est->cfg.slack * (double)bytes / tagc_link_rate(est);
  return base_s + (extra < est->cfg.max_extra_s ? extra : est->cfg.max_extra_s);
}
