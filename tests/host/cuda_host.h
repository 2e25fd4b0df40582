// What a .cu file of the kernels needs to compile as C++ on the host (tests/host/*_host.cpp): float2 and
// make_float2, a dim3 for the thread indices (the including file declares blockIdx, threadIdx, blockDim and
// gridDim, thread-local where threads run concurrently), and CUDA's qualifiers as nothing.
#ifndef MRI_RECON_CUDA_HOST_H
#define MRI_RECON_CUDA_HOST_H

struct float2 {
    float x, y;
};
static inline float2 make_float2(float a, float b)
{
    float2 r;
    r.x = a;
    r.y = b;
    return r;
}
struct host_dim3 {
    unsigned x = 0, y = 0, z = 0;
};
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__

#endif  // MRI_RECON_CUDA_HOST_H
