/* The CUDA stream type, spelled without including CUDA headers.
 *
 * The CUDA runtime defines cudaStream_t as `struct CUstream_st *`; tagc_stream is the same
 * type, so kernel headers can declare their CUDA launchers next to the CPU functions and
 * stay includable from plain C builds without CUDA. Every CUDA launcher takes one, enqueues
 * its work on it and returns without synchronising the host. */
#ifndef TAGC_KERNELS_STREAM_H
#define TAGC_KERNELS_STREAM_H

typedef struct CUstream_st *tagc_stream;

#endif
