# The GPT model on CUDA (tagc_model_cuda): included from model/CMakeLists.txt when
# TAGC_HAVE_CUDA (and by tests/model_gpu if that has not happened yet). Paths are absolute
# so that it can be included from any directory.
if(NOT TARGET tagc_model_cuda)
  add_library(tagc_model_cuda STATIC
    ${CMAKE_SOURCE_DIR}/model/model_cuda.cu
    ${CMAKE_SOURCE_DIR}/model/model_kernels_cuda.cu
    ${CMAKE_SOURCE_DIR}/model/adamw_cuda.cu
    ${CMAKE_SOURCE_DIR}/model/gemm_lt_cuda.cu
    ${CMAKE_SOURCE_DIR}/model/attention_flash_cuda.cu
  )
  target_include_directories(tagc_model_cuda PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(tagc_model_cuda PUBLIC tagc_model CUDA::cudart CUDA::cublas
                        CUDA::cublasLt tagc_common)
  # IEEE fp32 like the CPU oracle: denormals kept, correctly rounded division and sqrt.
  target_compile_options(tagc_model_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-ftz=false -prec-div=true -prec-sqrt=true>)
  set_target_properties(tagc_model_cuda PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)

  # Training-step benchmark (bench/model_gpu).
  if(EXISTS ${CMAKE_SOURCE_DIR}/bench/model_gpu/bench_model_gpu.c)
    add_executable(bench_model_gpu ${CMAKE_SOURCE_DIR}/bench/model_gpu/bench_model_gpu.c)
    target_link_libraries(bench_model_gpu PRIVATE tagc_model_cuda tagc_model CUDA::cudart
                                                  tagc_common)
  endif()
endif()
