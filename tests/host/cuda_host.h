// What a .cu file of the kernels needs to compile as C++ on the host (tests/host/*_host.cpp): float2 and
// make_float2, a dim3 for the thread indices (the including file declares blockIdx, threadIdx, blockDim and
// gridDim, thread-local where threads run concurrently), CUDA's qualifiers as nothing, the few device functions
// the kernels call, and a reusable barrier for __syncthreads() where a block's threads run as std::threads.
#ifndef MRI_RECON_CUDA_HOST_H
#define MRI_RECON_CUDA_HOST_H

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>

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
using std::min;
static inline void sincospif(float x, float* s, float* c)
{
    *s = (float)std::sin(M_PI * (double)x);
    *c = (float)std::cos(M_PI * (double)x);
}

struct HostBarrier {  // reusable: a generation count tells the waiters of one round from the next
    std::mutex mutex;
    std::condition_variable ready;
    unsigned count = 1, waiting = 0;
    unsigned long generation = 0;
    void wait()
    {
        std::unique_lock<std::mutex> lock(mutex);
        const unsigned long mine = generation;
        if (++waiting == count) {
            waiting = 0;
            ++generation;
            ready.notify_all();
        } else {
            ready.wait(lock, [&] { return generation != mine; });
        }
    }
};

#endif  // MRI_RECON_CUDA_HOST_H
