// CHECK_CUDA for the hand-built probes of bench/cuda (mma_probe.cu, subnormal_mma_probe.cu): a failed CUDA call
// prints where and why, and exits 1.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                                        \
  do {                                                                                          \
    const cudaError_t e = (call);                                                               \
    if (e != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)
