// mri_recon/kernels/maps.cu compiled for the host (MAPS_COILS given with -D by the test): every CUDA thread of a
// launch run one after the other, exact for these kernels (no shared memory, no barriers, each thread writes its
// own elements). Built by tests/test_walsh_kernels.py with the host's C++ compiler (-I the kernel folder) and
// called through ctypes: emu_<kernel>(gridDim.x, blockDim.x, the kernel's arguments).
#include "cuda_host.h"
static thread_local host_dim3 blockIdx, threadIdx;
static host_dim3 blockDim, gridDim;
static HostBarrier block_barrier;
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
#include "maps.cu"
#include "host_launch.h"

extern "C" {
void emu_products(unsigned blocks, unsigned threads, const float2* images, float2* products, int coils, long long n)
{
    run_in_turn(host_shape(blocks), host_shape(threads), [&] { mri_recon_maps_products(images, products, coils, n); });
}

void emu_box(unsigned blocks, unsigned threads, const float2* in, float2* out, long long total, int length,
             long long inner, int size)
{
    run_in_turn(host_shape(blocks), host_shape(threads),
                [&] { mri_recon_maps_box(in, out, total, length, inner, size); });
}

void emu_eigen(unsigned blocks, unsigned threads, const float2* cov, float2* maps, int coils, long long n, int ref,
               int steps)
{
    run_in_turn(host_shape(blocks), host_shape(threads),
                [&] { mri_recon_maps_eigen(cov, maps, coils, n, ref, steps); });
}
}
