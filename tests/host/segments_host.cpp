// mri_recon/kernels/segments.cu compiled for the host: every CUDA thread run one after the other, which is
// exact for these kernels (no shared memory, no barriers, each thread writes its own elements). Built by
// tests/test_gpu_segments.py with the host's C++ compiler (-DSEG_MAX=..., -I the kernel folder) and called
// through ctypes: emu_<kernel>(gridDim.x, blockDim.x, blockDim.y, the kernel's arguments).
#include <cstdint>

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
static host_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(threads)
#include "segments.cu"

template <class Kernel> static void launch(unsigned blocks, unsigned bx, unsigned by, Kernel kernel)
{
    gridDim.x = blocks;
    gridDim.y = gridDim.z = blockDim.z = 1;
    blockDim.x = bx;
    blockDim.y = by;
    for (unsigned b = 0; b < blocks; ++b)
        for (unsigned ty = 0; ty < by; ++ty)
            for (unsigned tx = 0; tx < bx; ++tx) {
                blockIdx.x = b;
                threadIdx.x = tx;
                threadIdx.y = ty;
                kernel();
            }
}

extern "C" {
void emu_expand(unsigned blocks, unsigned bx, unsigned by, const float2* maps, const float2* phases,
                const float2* x, float2* work, int coils, int segments, int nx, int ny, int nz, int py, int pz,
                long long grid_size)
{
    launch(blocks, bx, by, [&] {
        mri_recon_segments_expand(maps, phases, x, work, coils, segments, nx, ny, nz, py, pz, grid_size);
    });
}

void emu_mix(unsigned blocks, unsigned bx, unsigned by, float2* work, const float2* spectra, int coils,
             int segments, long long grid_size)
{
    launch(blocks, bx, by, [&] { mri_recon_segments_mix(work, spectra, coils, segments, grid_size); });
}

void emu_reduce(unsigned blocks, unsigned bx, unsigned by, const float2* maps, const float2* phases,
                const float2* work, const float2* x, float2* out, int coils, int segments, int nx, int ny, int nz,
                int py, int pz, long long grid_size, float lam, int first)
{
    launch(blocks, bx, by, [&] {
        mri_recon_segments_reduce(maps, phases, work, x, out, coils, segments, nx, ny, nz, py, pz, grid_size, lam,
                                  first);
    });
}
}
