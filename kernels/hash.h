/* Hash and counter-based random functions shared by the CPU and CUDA kernels.
 *
 * Everything here is a pure function of its arguments, header-only and usable from host
 * and device code (TAGC_HD), so the CPU oracle and the CUDA port compute identical block
 * rows, signs and stochastic-rounding draws. Changing any constant changes the sketch
 * format: bump TAGC_WIRE_VERSION (kernels/wire.h) when you do. */
#ifndef TAGC_KERNELS_HASH_H
#define TAGC_KERNELS_HASH_H

#include <stdint.h>

#if defined(__CUDACC__)
#define TAGC_HD __host__ __device__ __forceinline__
#else
#define TAGC_HD static inline
#endif

/* MurmurHash3's 32-bit finaliser: a bijection of uint32 with full avalanche. */
TAGC_HD uint32_t tagc_fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

/* MurmurHash3's 64-bit finaliser. */
TAGC_HD uint64_t tagc_fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  k ^= k >> 33;
  k *= 0xC4CEB9FE1A85EC53ull;
  k ^= k >> 33;
  return k;
}

/* Uniform integer in [0, range) from a 32-bit hash (multiply-shift, no division). */
TAGC_HD uint32_t tagc_hash_range(uint32_t h, uint32_t range) {
  return (uint32_t)(((uint64_t)h * range) >> 32);
}

/* The raw hash behind row j (0..2) of block `block` at retry `attempt` (see
 * tagc_layout_init for how attempts remove duplicate row triples):
 *   key = (seed << 32 | block) ^ (attempt * 0x9E3779B97F4A7C15)
 *   k0 = fmix64(key), k1 = fmix64(key ^ 0xD6E8FEB86659FD93)
 *   h0 = low 32 bits of k0, h1 = high 32 bits of k0, h2 = low 32 bits of k1
 * Bit 0 of h is the sign (1 = negative); the high bits choose the row. */
TAGC_HD uint32_t tagc_block_hash(uint32_t seed, uint32_t block, uint32_t attempt, uint32_t j) {
  uint64_t key = (((uint64_t)seed << 32) | block) ^ ((uint64_t)attempt * 0x9E3779B97F4A7C15ull);
  uint64_t k = tagc_fmix64(j < 2 ? key : key ^ 0xD6E8FEB86659FD93ull);
  return (uint32_t)(j == 1 ? k >> 32 : k);
}

/* Lane rotation of block `block` in a sketch of `lanes` lanes (a power of two, 32..1024):
 * element t of the block (its t-th of `lanes` elements) lands in sketch lane
 * (t + rotation) mod lanes, and lane L holds element (L - rotation) mod lanes. Without it
 * lanes are element index mod lanes, i.e. matrix columns, and real gradients have hot
 * columns; rotating every block by its own hash spreads a hot column over all lanes, so a
 * lane's density tracks the shard's mean density. Within one lane a block still
 * contributes at most one element, so peeling is unchanged. (For 1024 lanes this is the
 * rotation of wire version 2.) */
TAGC_HD uint32_t tagc_block_rotation(uint32_t seed, uint32_t block, uint32_t lanes) {
  return tagc_fmix32(tagc_fmix32(block ^ 0xA511E9B3u) ^ seed) & (lanes - 1u);
}

/* Which lanes of block `block` hold an item, from a shard bitmap (bit q of word w = element
 * 64w + q) of blocks of `lanes` elements rotated by `rot` (tagc_block_rotation): bit q of the
 * result is lane lane0 + q, for q < min(lanes, 64). lane0 is a multiple of 64 below lanes
 * (0 when lanes < 64, then the result holds all `lanes` lanes of the block). Lanes
 * 64w..64w+63 of a block of >= 64 lanes are its elements (64w - rot) mod lanes onward, read
 * circularly within the block's lanes / 64 words. */
TAGC_HD uint64_t tagc_lane_bits(const uint64_t *bitmap, uint32_t lanes, uint64_t block,
                                uint32_t rot, uint32_t lane0) {
  if (lanes < 64) { /* the block is a `lanes`-bit field of one word: rotate it left by rot */
    uint64_t mask = (1ull << lanes) - 1u, first = block * lanes;
    uint64_t e = (bitmap[first >> 6] >> (first & 63u)) & mask;
    return ((e << rot) | (e >> (lanes - rot))) & mask;
  }
  const uint64_t *words = bitmap + block * (lanes >> 6);
  uint32_t start = (lane0 - rot) & (lanes - 1u), w = start >> 6, s = start & 63u;
  uint64_t lo = words[w];
  if (s == 0)
    return lo;
  return (lo >> s) | (words[(w + 1u) & ((lanes >> 6) - 1u)] << (64u - s));
}

/* Counter-based random 32 bits for (seed, step, index): the same triple always gives the
 * same value, on any device and thread count. Used by bf16 stochastic rounding with
 * index = the element's position in the caller's flat tensor. */
TAGC_HD uint32_t tagc_rng_u32(uint64_t seed, uint64_t step, uint64_t index) {
  uint64_t k = tagc_fmix64(seed ^ 0x9E3779B97F4A7C15ull);
  k = tagc_fmix64(k ^ (step * 0xD1B54A32D192ED03ull));
  k = tagc_fmix64(k ^ (index * 0x8CB92BA72F3D8DD7ull + 0x632BE59BD9B4E019ull));
  return (uint32_t)(k >> 32);
}

#endif
