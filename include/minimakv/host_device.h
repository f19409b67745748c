// Marks small inline helpers that are shared, bit for bit, by the CPU and CUDA code paths.
#pragma once

#if defined(__CUDACC__)
#define MINIMAKV_HOST_DEVICE __host__ __device__
#else
#define MINIMAKV_HOST_DEVICE
#endif
