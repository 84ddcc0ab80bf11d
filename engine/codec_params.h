/* The constants the gradient codec (grad_codec.c), the engine's schedule and `--compress auto`
 * (auto_policy.h, engine_auto.c) must agree on, in one place. */
#ifndef TAGC_ENGINE_CODEC_PARAMS_H
#define TAGC_ENGINE_CODEC_PARAMS_H

/* Shard padding: the compression kernels' block (kernels/layout.h). */
#define TAGC_SHARD_BLOCK 1024

/* Below this rho a sketch costs about as much as a dense bf16 shard: the codec sends dense,
 * and `auto` does not count the sketch as a candidate. */
#define TAGC_SKETCH_MIN_RHO 1.25

/* Steps between density probes of a sketching segment sent dense (a lossless sketch at the
 * advised rho measures the densest lane). `auto` decides its wires right after each probe,
 * so this is also its decision period. */
#define TAGC_PROBE_EVERY 16

/* The next step's densest lane may exceed the last one's: the sketch is sized for 30 % more
 * (tests/train/tagc_train.py: 0 unpeeled; 10 % left 6-7 elements with the longer lanes of
 * kernels/layout.h, 20 % 9 at one step of the C=256 model after the 60-step compression
 * warm-up). */
#define TAGC_DENSITY_HEADROOM 1.3

#endif
