/* Host stand-in for CUDA's <mma.h> in the fiber emulation (this directory comes first on
 * the include path): the bf16 16x16x16 nvcuda::wmma subset with fp32 accumulators. Every
 * thread of a warp holds the whole 16 x 16 tile (num_elements = 256, element (r, c) at
 * x[r * 16 + c]) and computes the whole product, so kernels must use fragments only through
 * load / store / fill / mma and element-wise operations that are the same for every element
 * (the real per-thread layout is unspecified). A store writes the same values from every
 * lane, so the usual barrier before reading the destination is all a kernel needs. Products
 * are exact (bf16 x bf16 fits fp32) and summed in k order in fp32; real tensor cores may
 * sum in another order. Never part of a product build. */
#ifndef TAGC_TESTS_KERNELS_GPU_EMU_MMA_H
#define TAGC_TESTS_KERNELS_GPU_EMU_MMA_H

#include <cstdint>
#include <cstring>
#include <type_traits>

/* bf16 as its 16 bits (the upper half of an fp32); only pointers to it are used. */
struct __nv_bfloat16 {
  uint16_t bits;
};

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "only the 16x16x16 shape is emulated");
  static constexpr int num_elements = 256;
  float x[num_elements]; /* bf16 operands held exactly as fp32 */
};

inline float emu_bf16_value(__nv_bfloat16 h) {
  uint32_t u = (uint32_t)h.bits << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float v) {
  for (float &e : f.x)
    e = v;
}

/* Offset of element (r, c) of a row-major (or, with col, column-major) matrix. */
inline size_t emu_index(unsigned ldm, bool col, int r, int c) {
  return col ? (size_t)c * ldm + r : (size_t)r * ldm + c;
}

template <typename Use, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout> &f,
                             const __nv_bfloat16 *p, unsigned ldm) {
  constexpr bool col = std::is_same<Layout, col_major>::value;
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++)
      f.x[r * 16 + c] = emu_bf16_value(p[emu_index(ldm, col, r, c)]);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t layout) {
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++)
      f.x[r * 16 + c] = p[emu_index(ldm, layout == mem_col_major, r, c)];
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++)
      p[emu_index(ldm, layout == mem_col_major, r, c)] = f.x[r * 16 + c];
}

/* d = a b + c (d may be c). */
template <typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
  float out[256];
  for (int r = 0; r < 16; r++)
    for (int col = 0; col < 16; col++) {
      float s = c.x[r * 16 + col];
      for (int k = 0; k < 16; k++)
        s += a.x[r * 16 + k] * b.x[k * 16 + col];
      out[r * 16 + col] = s;
    }
  std::memcpy(d.x, out, sizeof out);
}

}  // namespace wmma
}  // namespace nvcuda

#endif
