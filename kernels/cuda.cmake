# CUDA twins of the compression kernels (included by the top-level CMakeLists.txt after
# add_subdirectory(kernels) when nvcc is found). Linked into tagc_kernels, whose dispatch.c
# routes device == TAGC_DEVICE_CUDA here when TAGC_KERNELS_CUDA is defined.
#
# Bit-exactness with the CPU oracle needs IEEE fp32: no --use_fast_math, denormals kept
# (-ftz=false), correctly rounded division/sqrt, and no FMA contraction.
add_library(tagc_kernels_cuda STATIC
  ${CMAKE_SOURCE_DIR}/kernels/sparsify_cuda.cu
  ${CMAKE_SOURCE_DIR}/kernels/bitmap_cuda.cu
  ${CMAKE_SOURCE_DIR}/kernels/sketch_cuda.cu
  ${CMAKE_SOURCE_DIR}/kernels/decode_cuda.cu
  ${CMAKE_SOURCE_DIR}/kernels/bf16_cuda.cu
  ${CMAKE_SOURCE_DIR}/kernels/q8_cuda.cu
)
target_include_directories(tagc_kernels_cuda PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(tagc_kernels_cuda PUBLIC CUDA::cudart tagc_common)
target_compile_options(tagc_kernels_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-ftz=false -prec-div=true -prec-sqrt=true -fmad=false>)
set_target_properties(tagc_kernels_cuda PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)

if(TARGET tagc_kernels)
  target_compile_definitions(tagc_kernels PRIVATE TAGC_KERNELS_CUDA)
  target_link_libraries(tagc_kernels PUBLIC tagc_kernels_cuda)
endif()

# GPU timing program (bench/kernels_gpu): needs the CPU oracle for its input generation.
if(TARGET tagc_kernels AND EXISTS ${CMAKE_SOURCE_DIR}/bench/kernels_gpu/bench_kernels_gpu.c)
  add_executable(bench_kernels_gpu ${CMAKE_SOURCE_DIR}/bench/kernels_gpu/bench_kernels_gpu.c)
  target_link_libraries(bench_kernels_gpu PRIVATE tagc_kernels tagc_kernels_cuda CUDA::cudart
                                                  tagc_common)
endif()
