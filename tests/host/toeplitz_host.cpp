// mri_recon/kernels/toeplitz.cu compiled for the host: every CUDA thread of a launch run one after the other,
// which is exact for these kernels (no shared memory, no barriers, each thread writes its own elements).
// Built by tests/test_gpu_toeplitz.py with the host's C++ compiler (-I the kernel folder) and called through
// ctypes: emu_<kernel>(gridDim.x, gridDim.y, blockDim.x, the kernel's arguments).
#include "cuda_host.h"
static host_dim3 blockIdx, threadIdx, blockDim, gridDim;
#include "toeplitz.cu"

template <class Kernel> static void launch(unsigned blocks_x, unsigned blocks_y, unsigned threads, Kernel kernel)
{
    gridDim.x = blocks_x;
    gridDim.y = blocks_y;
    blockDim.x = threads;
    gridDim.z = blockDim.y = blockDim.z = 1;
    for (unsigned y = 0; y < blocks_y; ++y)
        for (unsigned b = 0; b < blocks_x; ++b)
            for (unsigned t = 0; t < threads; ++t) {
                blockIdx.x = b;
                blockIdx.y = y;
                threadIdx.x = t;
                kernel();
            }
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
}
