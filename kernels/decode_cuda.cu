/* CUDA owner decode (see decode.h): the CPU algorithm lane by lane, in four launches on the
 * caller's stream and without any host round trip.
 *
 *   init_kernel   cell state [R][K] (value, count, XOR of block ids) <- sketch, zeros
 *   count_kernel  one thread per element: a set bit adds 1 and its block id to the count
 *                 and XOR of its three cells (in lane (t + rot(b)) mod K, kernels/hash.h;
 *                 integer atomics: order-independent, exact)
 *   peel_kernel   one thread per lane (K = l->lanes threads), each peeling its own lane to the end:
 *                 FIFO queue seeded with the pure cells in row order, exactly the CPU's
 *                 sequence of pops and fp32 subtractions; a lane only reads and writes its
 *                 own cells, queue slots and elements, so there is no race and no rounds
 *   finish_kernel one thread per element: clear bit -> +0, unpeeled -> tagc_median3 of the
 *                 residual cells (the CPU's helper), peeled -> left as written by peel_kernel
 * Peel flags are a byte per element in the workspace (out of band, never in the values).
 * Every cell is pushed at most once (seeded when its count is 1, else pushed when its count
 * drops from 2 to 1), so a lane's queue needs R slots. */
#include "kernels/cuda_common.cuh"
#include "kernels/decode.h"

#define PEEL_THREADS 32 /* lanes per block of the peel kernel: spread over many SMs */

/* One sketch cell of one lane: 16 bytes so a peel step reads it in one transaction. */
typedef struct __align__(16) cell_state {
  float value;      /* sketch sum minus the items peeled out of it so far */
  uint32_t count;   /* items still in the cell */
  uint32_t ids;     /* XOR of the block ids of the items still in the cell */
  uint32_t unused;
} cell_state;

/* Workspace layout: cells [R*K], queue [R*K] (slot k of lane t at k*K+t), peeled flags
 * [shard_padded] bytes. */
typedef struct decode_ws {
  cell_state *cells;
  uint32_t *queue;
  uint8_t *peeled;
  size_t bytes;
} decode_ws;

static decode_ws ws_layout(const tagc_layout *l, void *base) {
  size_t cells = (size_t)l->sketch_cells, off = 0;
  char *p = (char *)base;
  decode_ws ws;
  ws.cells = (cell_state *)(p + off);
  off += ws_align(cells * sizeof(cell_state));
  ws.queue = (uint32_t *)(p + off);
  off += ws_align(cells * sizeof(uint32_t));
  ws.peeled = (uint8_t *)(p + off);
  off += ws_align((size_t)l->shard_padded);
  ws.bytes = off;
  return ws;
}

__device__ __forceinline__ bool bit_set(const uint64_t *bitmap, int64_t e) {
  return (bitmap[e >> 6] >> (e & 63)) & 1u;
}

__device__ __forceinline__ float signed_value(uint32_t entry, float x) {
  return (entry & TAGC_ROW_SIGN) ? -x : x;
}

__global__ void init_kernel(const float *sketch, cell_state *cells, int64_t ncells) {
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < ncells;
       c += (int64_t)gridDim.x * blockDim.x) {
    cell_state s = {sketch[c], 0, 0, 0};
    cells[c] = s;
  }
}

/* Counts and XORs the set bits of elements [0, n) into their cells; clears the peel flags
 * of the whole padded shard and adds the set bits to stats->nonzero. Bits in the padding
 * (elements >= n) are ignored. */
__global__ void count_kernel(const uint32_t *block_rows, const uint64_t *bitmap,
                             cell_state *cells, uint8_t *peeled, int64_t n, int64_t padded,
                             uint32_t lanes, uint32_t seed, tagc_decode_stats *stats) {
  unsigned long long nonzero = 0;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < padded;
       e += (int64_t)gridDim.x * blockDim.x) {
    peeled[e] = 0;
    if (e >= n || !bit_set(bitmap, e))
      continue;
    nonzero++;
    uint32_t b = (uint32_t)(e / lanes);
    uint32_t lane = ((uint32_t)(e % lanes) + tagc_block_rotation(seed, b, lanes)) & (lanes - 1);
    for (int i = 0; i < 3; i++) {
      uint32_t row = block_rows[3 * (int64_t)b + i] & TAGC_ROW_MASK;
      cell_state *c = &cells[(int64_t)row * lanes + lane];
      atomicAdd(&c->count, 1u);
      atomicXor(&c->ids, b);
    }
  }
  unsigned long long total = block_sum_u64(nonzero);
  if (threadIdx.x == 0 && total)
    atomicAdd((unsigned long long *)&stats->nonzero, total);
}

/* Peels lane blockIdx.x * blockDim.x + threadIdx.x completely (see the file comment). */
__global__ void __launch_bounds__(PEEL_THREADS)
    peel_kernel(const uint32_t *block_rows, cell_state *cells, uint32_t *queue, uint8_t *peeled,
                float *out, int64_t rows, uint32_t lanes, uint32_t seed,
                tagc_decode_stats *stats) {
  int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  cell_state *lane_cells = cells + t;
  uint32_t *lane_queue = queue + t;
  int64_t head = 0, tail = 0;
  for (int64_t r = 0; r < rows; r++)
    if (lane_cells[r * lanes].count == 1)
      lane_queue[(tail++) * lanes] = (uint32_t)r;
  unsigned long long done = 0;
  while (head < tail) {
    uint32_t r = lane_queue[(head++) * lanes];
    cell_state pure = lane_cells[(int64_t)r * lanes];
    if (pure.count != 1)
      continue;
    uint32_t b = pure.ids;
    uint32_t entry[3];
    int at = -1;
    for (int i = 0; i < 3; i++) {
      entry[i] = block_rows[3 * (int64_t)b + i];
      if ((entry[i] & TAGC_ROW_MASK) == r)
        at = i;
    }
    if (at < 0)
      continue;
    float v = signed_value(entry[at], pure.value);
    int64_t e = (int64_t)b * lanes + (((uint32_t)t - tagc_block_rotation(seed, b, lanes)) & (lanes - 1));
    out[e] = v;
    peeled[e] = 1;
    done++;
    for (int i = 0; i < 3; i++) {
      uint32_t row = entry[i] & TAGC_ROW_MASK;
      cell_state *c = &lane_cells[(int64_t)row * lanes];
      cell_state s = *c;
      s.count--;
      s.ids ^= b;
      if (i != at) {
        s.value = __fsub_rn(s.value, signed_value(entry[i], v));
        if (s.count == 1)
          lane_queue[(tail++) * lanes] = row;
      }
      *c = s;
    }
  }
  atomicAdd((unsigned long long *)&stats->peeled, done);
}

__global__ void finish_kernel(const uint32_t *block_rows, const uint64_t *bitmap,
                              const cell_state *cells, const uint8_t *peeled, float *out,
                              int64_t n, uint32_t lanes, uint32_t seed,
                              tagc_decode_stats *stats) {
  unsigned long long estimated = 0;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    if (!bit_set(bitmap, e)) {
      out[e] = 0.0f;
      continue;
    }
    if (peeled[e])
      continue;
    int64_t b = e / lanes;
    uint32_t t = ((uint32_t)(e % lanes) + tagc_block_rotation(seed, (uint32_t)b, lanes)) & (lanes - 1);
    float est[3];
    for (int i = 0; i < 3; i++) {
      uint32_t entry = block_rows[3 * b + i];
      est[i] = signed_value(entry, cells[(int64_t)(entry & TAGC_ROW_MASK) * lanes + t].value);
    }
    out[e] = tagc_median3(est[0], est[1], est[2]);
    estimated++;
  }
  unsigned long long total = block_sum_u64(estimated);
  if (threadIdx.x == 0 && total)
    atomicAdd((unsigned long long *)&stats->estimated, total);
}

extern "C" size_t tagc_decode_cuda_workspace_bytes(const tagc_layout *l) {
  if (!l || l->rows < 1)
    return 0;
  return ws_layout(l, NULL).bytes;
}

extern "C" tagc_status tagc_decode_cuda(const tagc_layout *l, const uint32_t *block_rows_dev,
                                        const float *sketch, const uint64_t *bitmap, float *out,
                                        tagc_decode_stats *stats, void *ws, size_t ws_bytes,
                                        tagc_stream stream) {
  if (!l || l->rows < 1 || !block_rows_dev || !sketch || !bitmap || !out || !stats || !ws)
    return tagc_errorf(TAGC_EINVAL, "decode_cuda: NULL argument");
  if ((uintptr_t)ws % 16 != 0)
    return tagc_errorf(TAGC_EINVAL, "decode_cuda: workspace not 16-byte aligned");
  decode_ws w = ws_layout(l, ws);
  if (ws_bytes < w.bytes)
    return tagc_errorf(TAGC_EINVAL, "decode_cuda: workspace %zu bytes < %zu", ws_bytes, w.bytes);
  TAGC_CHECK(tagc_cuda_status(cudaMemsetAsync(stats, 0, sizeof *stats, stream),
                              "decode_cuda: CUDA error"));
  TAGC_LAUNCH(init_kernel, grid_for(l->sketch_cells, 4 * CUDA_THREADS), CUDA_THREADS, stream)(
      sketch, w.cells, l->sketch_cells);
  TAGC_LAUNCH(count_kernel, grid_for(l->shard_padded, 4 * CUDA_THREADS), CUDA_THREADS, stream)(
      block_rows_dev, bitmap, w.cells, w.peeled, l->shard_numel, l->shard_padded,
      (uint32_t)l->lanes, l->seed, stats);
  TAGC_LAUNCH(peel_kernel, (unsigned)(l->lanes / PEEL_THREADS), PEEL_THREADS, stream)(
      block_rows_dev, w.cells, w.queue, w.peeled, out, l->rows, (uint32_t)l->lanes, l->seed, stats);
  TAGC_LAUNCH(finish_kernel, grid_for(l->shard_numel, 4 * CUDA_THREADS), CUDA_THREADS, stream)(
      block_rows_dev, bitmap, w.cells, w.peeled, out, l->shard_numel, (uint32_t)l->lanes,
      l->seed, stats);
  return cuda_launched("decode_cuda");
}
