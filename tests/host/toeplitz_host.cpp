// mri_recon/kernels/toeplitz.cu compiled for the host. The element-wise kernels: every CUDA thread of a launch
// run one after the other, which is exact for them (no shared memory, no barriers, each thread writes its own
// elements). mri_recon_toeplitz_rows transforms rows in shared memory between barriers: the blocks run one after
// the other, each block's threads as std::threads meeting at a host barrier for __syncthreads(). Built by
// tests/test_gpu_toeplitz.py with the host's C++ compiler (-I the kernel folder) and called through ctypes:
// emu_<kernel>(gridDim.x, gridDim.y, blockDim.x, the kernel's arguments).
#include "cuda_host.h"
static thread_local host_dim3 blockIdx, threadIdx;
static host_dim3 blockDim, gridDim;
static HostBarrier block_barrier;
#define __shared__
#define __syncthreads() block_barrier.wait()
#include "toeplitz.cu"
float2 rows_shared[2 * (ROWS_MAX_P + 2 * ROWS_POINTS) + ROWS_MAX_ROWS];  // the bound of rows_shared_bytes
#include "host_launch.h"

template <class Kernel> static void launch(unsigned blocks_x, unsigned blocks_y, unsigned threads, Kernel kernel)
{
    run_in_turn(host_shape(blocks_x, blocks_y), host_shape(threads), kernel);
}

extern "C" {
void emu_expand(unsigned blocks_x, unsigned blocks_y, unsigned threads, const float2* maps, const float2* x,
                float2* padded, int coils, int nx, int ny, int nz, int py, int pz, int grid_size)
{
    launch(blocks_x, blocks_y, threads,
           [&] { mri_recon_toeplitz_expand(maps, x, padded, coils, nx, ny, nz, py, pz, grid_size); });
}

void emu_filter(unsigned blocks_x, unsigned blocks_y, unsigned threads, float2* padded, const float2* spectra,
                int coils, int grid_size)
{
    launch(blocks_x, blocks_y, threads, [&] { mri_recon_toeplitz_filter(padded, spectra, coils, grid_size); });
}

void emu_reduce(unsigned blocks_x, unsigned blocks_y, unsigned threads, const float2* maps, const float2* padded,
                const float2* x, float2* out, int coils, int nx, int ny, int nz, int py, int pz, int grid_size,
                float lam, int first)
{
    launch(blocks_x, blocks_y, threads, [&] {
        mri_recon_toeplitz_reduce(maps, padded, x, out, coils, nx, ny, nz, py, pz, grid_size, lam, first);
    });
}

void emu_rows_expand(unsigned blocks_x, unsigned blocks_y, unsigned threads, const float2* maps, const float2* x,
                     float2* work, int coils, int grids, int n0, int n1, int p1, int n, int planes)
{
    launch(blocks_x, blocks_y, threads,
           [&] { mri_recon_toeplitz_rows_expand(maps, x, work, coils, grids, n0, n1, p1, n, planes); });
}

void emu_rows(unsigned blocks_x, unsigned blocks_y, unsigned threads, float2* work, const float2* spectra, int coils,
              int grids, int planes, int n, int log2p, int rows_per_block)
{
    run_blocks(host_shape(blocks_x, blocks_y), host_shape(threads),
               [&] { mri_recon_toeplitz_rows(work, spectra, coils, grids, planes, n, log2p, rows_per_block); });
}

void emu_rows_reduce(unsigned blocks_x, unsigned blocks_y, unsigned threads, const float2* maps, const float2* work,
                     const float2* x, float2* out, int coils, int grids, int n0, int n1, int p1, int n, float lam,
                     int first)
{
    launch(blocks_x, blocks_y, threads, [&] {
        mri_recon_toeplitz_rows_reduce(maps, work, x, out, coils, grids, n0, n1, p1, n, lam, first);
    });
}
}
