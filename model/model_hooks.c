/* Calling a model's unit hooks (model_hooks.h). */
#include "model/model_hooks.h"

static tagc_status hook_failed(tagc_unit_hooks *h, const char *what, int unit) {
  if (h->status != TAGC_OK)
    return h->status;
  return tagc_errorf(TAGC_EINTERNAL, "model: %s hook for unit %d returned NULL without a status",
                     what, unit);
}

tagc_status tagc_unit_hooks_params(tagc_unit_hooks *h, int unit, const float **out) {
  h->status = TAGC_OK;
  *out = h->unit_params(h->ctx, unit);
  return *out ? TAGC_OK : hook_failed(h, "unit_params", unit);
}

tagc_status tagc_unit_hooks_grads(tagc_unit_hooks *h, int unit, float **out) {
  h->status = TAGC_OK;
  *out = h->unit_grads(h->ctx, unit);
  return *out ? TAGC_OK : hook_failed(h, "unit_grads", unit);
}

void tagc_unit_hooks_release(tagc_unit_hooks *h, int unit) {
  if (h->unit_release)
    h->unit_release(h->ctx, unit);
}
