// mri_recon/kernels/segments.cu compiled for the host. expand and reduce: every CUDA thread run one after the
// other, which is exact for them (no shared memory, no barriers, each thread writes its own elements). mix
// stages values in shared memory between barriers: its threads run as std::threads of one block (gridDim.x =
// 1: the kernel strides over its tiles) meeting at a host barrier for __syncthreads(). Built by
// tests/test_gpu_segments.py with the host's C++ compiler (-DSEG_MAX=..., -I the kernel folder) and called
// through ctypes: emu_<kernel>(gridDim.x, blockDim.x, blockDim.y, the kernel's arguments).
#include <cstdint>

#include "cuda_host.h"
static thread_local host_dim3 blockIdx, threadIdx;
static host_dim3 blockDim, gridDim;

static HostBarrier block_barrier;
#define __launch_bounds__(threads)
#define __shared__
#define __syncthreads() block_barrier.wait()
#include "segments.cu"
#if SEG_MAX <= SEG_SHARED_MAX
float2 seg_shared[SEG_MAX * (SEG_MAX + 1) / 2 * 32];
#endif

#include "host_launch.h"

template <class Kernel> static void launch_block(unsigned bx, unsigned by, Kernel kernel)
{
    run_blocks(host_shape(1), host_shape(bx, by), kernel);
}

template <class Kernel> static void launch(unsigned blocks, unsigned bx, unsigned by, Kernel kernel)
{
    run_in_turn(host_shape(blocks), host_shape(bx, by), kernel);
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
    launch_block(bx, by, [&] { mri_recon_segments_mix(work, spectra, coils, segments, grid_size); });
    (void)blocks;  // one block striding over every tile
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
