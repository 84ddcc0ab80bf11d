/* Non-zero bitmaps: packed uint64 words, bit q of word w = element 64*w + q of a shard
 * (little-endian bit order, so on a little-endian host byte i holds elements 8i..8i+7).
 * A unit's local bitmap is dest-major [W][bitmap_words] (kernels/layout.h).
 *
 * Index exchange (ARCHITECTURE §7 step 2): the owner of shard j needs the OR over ranks of
 * every rank's part j. Either
 *   (a) a reduce-scatter with bitwise OR over uint64 words (Gloo custom reduction), whose
 *       element-wise combine is tagc_bitmap_or_into_cpu; or
 *   (b) an all-to-all of the dest-major parts (NCCL has no OR reduction): rank j receives W
 *       bitmaps of its shard, contiguous, and folds them with tagc_bitmap_or_many_cpu.
 * Both move (W-1)/W of the bitmap bytes per rank. Never SUM packed bits.
 * Global density = tagc_bitmap_popcount over the owner's ORed shard / shard_numel (summed
 * over owners with an all-reduce when the whole unit's density is wanted); the density that
 * decides rho is the densest (rotated) lane's, tagc_bitmap_lane_max_cpu / blocks. */
#ifndef TAGC_KERNELS_BITMAP_H
#define TAGC_KERNELS_BITMAP_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] |= src[i] for i < words. dst and src borrowed; they may be equal, not partially
 * overlap. Errors: TAGC_EINVAL (NULL with words > 0, words < 0). Blocking. */
tagc_status tagc_bitmap_or_into_cpu(uint64_t *dst, const uint64_t *src, int64_t words);

/* dst[i] = OR over k < count of src[k*words + i]: folds `count` contiguous bitmaps (the
 * receive buffer of an all-to-all). dst may equal src (then part 0 is overwritten in place)
 * but must not otherwise overlap it. Errors: TAGC_EINVAL (NULL, count < 1, words < 0).
 * Blocking, OpenMP. */
tagc_status tagc_bitmap_or_many_cpu(uint64_t *dst, const uint64_t *src, int32_t count,
                                    int64_t words);

/* *bits = number of set bits in words[0..nwords). Errors: TAGC_EINVAL. Blocking, OpenMP. */
tagc_status tagc_bitmap_popcount_cpu(const uint64_t *words, int64_t nwords, int64_t *bits);

/* *max_items = the largest number of set bits in one sketch lane over a shard bitmap of
 * `blocks` blocks of `lanes` elements (a power of two, 32..1024; lane t = bits
 * lanes*b + ((t - rot(b)) mod lanes) for all b, rot the lane rotation of sketch hash seed
 * `seed`, kernels/hash.h): the load that decides whether the sketch peels (kernels/rho.h;
 * pass max_items / blocks to tagc_rho_advise). Errors: TAGC_EINVAL (also for a lane count
 * that is not such a power of two). Blocking, OpenMP over lanes. */
tagc_status tagc_bitmap_lane_max_cpu(const uint64_t *bitmap, int64_t blocks, int32_t lanes,
                                     uint32_t seed, int64_t *max_items);

/* CUDA versions: same contracts, device pointers (bits too: one int64 in device memory,
 * overwritten), enqueued on `stream`, no host synchronisation. */
tagc_status tagc_bitmap_or_into_cuda(uint64_t *dst, const uint64_t *src, int64_t words,
                                     tagc_stream stream);
tagc_status tagc_bitmap_or_many_cuda(uint64_t *dst, const uint64_t *src, int32_t count,
                                     int64_t words, tagc_stream stream);
tagc_status tagc_bitmap_popcount_cuda(const uint64_t *words, int64_t nwords, int64_t *bits,
                                      tagc_stream stream);
tagc_status tagc_bitmap_lane_max_cuda(const uint64_t *bitmap, int64_t blocks, int32_t lanes,
                                      uint32_t seed, int64_t *max_items, tagc_stream stream);

#ifdef __cplusplus
}
#endif

#endif
