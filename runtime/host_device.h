// SHARC_HD marks the runtime's small inline functions that generated CUDA
// kernels also call (bf16 conversions, the elementwise functions, Philox):
// __host__ __device__ under nvcc, nothing for a host compiler.
#pragma once

#if defined(__CUDACC__)
#define SHARC_HD __host__ __device__
#else
#define SHARC_HD
#endif
