/* CUDA count-sketch encode (see sketch.h), deterministic and bit-identical to the CPU.
 *
 * No atomics: each thread block owns a tile of cells, ENC_ROWS rows x T lanes of one
 * destination shard (T = min(K, ENC_LANES) threads, K = l->lanes), accumulated in shared
 * memory; each thread owns one lane (one column of the tile), so no two threads ever add to
 * the same cell, and the threads of a warp read 32 neighbouring elements of one block
 * (coalesced, with one wrap). The block walks the blocks of the shard in increasing order,
 * T at a time (lane L of block b reads element (L - rot(b)) mod K, the lane rotation of
 * kernels/hash.h): the threads first test those
 * blocks' three rows against the tile's row range and compact the hits, in (block, i)
 * order, into a shared list; then every thread adds sign * kept for its lane of each hit
 * whose bitmap bit is set. Per cell this is the CPU's order (blocks increasing, then
 * i = 0, 1, 2; a block has three distinct rows, so at most one i per cell), with the same
 * round-to-nearest fp32 adds starting from +0, hence the same bits. */
#include "kernels/cuda_common.cuh"
#include "kernels/hash.h"
#include "kernels/sketch.h"

#define ENC_LANES 256 /* most lanes per tile = threads per block */
#define ENC_ROWS 32   /* rows per tile: up to 32 KB of shared accumulators */

/* A hit packs the block's offset in the scan window (8 bits), the row's offset in the tile
 * (5 bits) and the sign (bit 0, 1 = negative). */
__device__ __forceinline__ uint32_t pack_hit(int boff, uint32_t roff, uint32_t neg) {
  return ((uint32_t)boff << 6) | (roff << 1) | neg;
}

/* Exclusive prefix sum of `v` over the block (a multiple of 32 threads, at most ENC_LANES);
 * *total gets the sum. */
__device__ __forceinline__ uint32_t block_exclusive_scan(uint32_t v, uint32_t *total) {
  __shared__ uint32_t warp_tot[ENC_LANES / 32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t incl = v;
  for (int off = 1; off < 32; off <<= 1) {
    uint32_t up = __shfl_up_sync(0xFFFFFFFFu, incl, off);
    if (lane >= off)
      incl += up;
  }
  if (lane == 31)
    warp_tot[warp] = incl;
  __syncthreads();
  uint32_t before = 0, sum = 0;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
    if (w < warp)
      before += warp_tot[w];
    sum += warp_tot[w];
  }
  *total = sum;
  return before + incl - v;
}

__global__ void __launch_bounds__(ENC_LANES)
    encode_kernel(const uint32_t *block_rows, const float *kept, const uint64_t *bitmap,
                  float *sketch, int64_t blocks, int64_t rows, uint32_t lanes, int64_t padded,
                  int64_t words, int64_t cells, int64_t parts, uint32_t seed) {
  __shared__ float acc[ENC_ROWS][ENC_LANES];
  __shared__ uint32_t hits[3 * ENC_LANES];
  __shared__ uint16_t rot[ENC_LANES]; /* lane rotation of each block of the scan window */
  int64_t bid = blockIdx.x, tile = blockDim.x, chunks = lanes / tile;
  int chunk = (int)(bid % chunks);
  int64_t part = (bid / chunks) % parts;
  int64_t j = bid / (chunks * parts);
  uint32_t r0 = (uint32_t)(part * ENC_ROWS);
  int t = threadIdx.x;
  uint32_t lane = (uint32_t)(chunk * tile + t);
  for (int r = 0; r < ENC_ROWS; r++)
    acc[r][t] = 0.0f;
  const float *kj = kept + j * padded;
  const uint64_t *bj = bitmap + j * words;
  for (int64_t base = 0; base < blocks; base += tile) {
    int64_t b = base + t;
    uint32_t mine[3];
    uint32_t cnt = 0;
    if (b < blocks)
      rot[t] = (uint16_t)tagc_block_rotation(seed, (uint32_t)b, lanes);
    if (b < blocks)
      for (int i = 0; i < 3; i++) {
        uint32_t entry = block_rows[3 * b + i];
        uint32_t roff = (entry & TAGC_ROW_MASK) - r0;
        if (roff < ENC_ROWS)
          mine[cnt++] = pack_hit(t, roff, entry >> 31);
      }
    uint32_t nhits;
    uint32_t pos = block_exclusive_scan(cnt, &nhits);
    for (uint32_t i = 0; i < cnt; i++)
      hits[pos + i] = mine[i];
    __syncthreads();
    for (uint32_t h = 0; h < nhits; h++) {
      uint32_t hit = hits[h];
      uint32_t elem = (lane - rot[hit >> 6]) & (lanes - 1);
      int64_t e = (base + (hit >> 6)) * lanes + elem;
      if ((bj[e >> 6] >> (e & 63)) & 1u) {
        float v = kj[e];
        uint32_t roff = (hit >> 1) & (ENC_ROWS - 1);
        acc[roff][t] = __fadd_rn(acc[roff][t], (hit & 1u) ? -v : v);
      }
    }
    __syncthreads();
  }
  float *sj = sketch + j * cells + lane;
  for (int r = 0; r < ENC_ROWS && (int64_t)r0 + r < rows; r++)
    sj[((int64_t)r0 + r) * lanes] = acc[r][t];
}

extern "C" tagc_status tagc_sketch_encode_cuda(const tagc_layout *l, const uint32_t *block_rows_dev,
                                               const float *kept, const uint64_t *bitmap,
                                               float *sketch, tagc_stream stream) {
  if (!l || l->world < 1 || !block_rows_dev || !kept || !bitmap || !sketch)
    return tagc_errorf(TAGC_EINVAL, "sketch_encode_cuda: NULL argument");
  int64_t parts = (l->rows + ENC_ROWS - 1) / ENC_ROWS;
  int tile = l->lanes < ENC_LANES ? l->lanes : ENC_LANES;
  int64_t grid = (int64_t)l->world * parts * (l->lanes / tile);
  if (grid > 0x7FFFFFFF)
    return tagc_errorf(TAGC_EINVAL, "sketch_encode_cuda: %lld tiles exceed the grid limit",
                       (long long)grid);
  TAGC_LAUNCH(encode_kernel, (unsigned)grid, tile, stream)(
      block_rows_dev, kept, bitmap, sketch, l->blocks, l->rows, (uint32_t)l->lanes,
      l->shard_padded, l->bitmap_words, l->sketch_cells, parts, l->seed);
  return cuda_launched("sketch_encode_cuda");
}
