/* Calling a model's unit hooks (tagc_unit_hooks, model/model.h) from inside a pass: shared
 * by the CPU model (model.c) and the CUDA model (model_cuda.cu). Threading: the pass's
 * thread. */
#ifndef TAGC_WORKER_MODEL_HOOKS_H
#define TAGC_WORKER_MODEL_HOOKS_H

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C headers without their own C++ guards. */
#include "model/model.h"

/* *out = unit_params(ctx, unit): the unit's parameters (borrowed until the release). On a
 * NULL return, the status the hook stored, or TAGC_EINTERNAL if it stored none. */
tagc_status tagc_unit_hooks_params(tagc_unit_hooks *h, int unit, const float **out);

/* *out = unit_grads(ctx, unit): the unit's gradient buffer (borrowed). Errors as
 * tagc_unit_hooks_params. */
tagc_status tagc_unit_hooks_grads(tagc_unit_hooks *h, int unit, float **out);

/* unit_release(ctx, unit) when the hooks have one. */
void tagc_unit_hooks_release(tagc_unit_hooks *h, int unit);

#ifdef __cplusplus
}
#endif

#endif
