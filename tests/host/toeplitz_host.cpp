// mri_recon/kernels/toeplitz.cu compiled for the host: every CUDA thread of a launch run one after the other,
// which is exact for these kernels (no shared memory, no barriers, each thread writes its own elements).
// Built by tests/test_gpu_toeplitz.py with the host's C++ compiler (-I the kernel folder) and called through
// ctypes: emu_<kernel>(gridDim.x, blockDim.x, the kernel's arguments); emu_series_* for mri_recon_series_*.
#include "cuda_host.h"
static host_dim3 blockIdx, threadIdx, blockDim, gridDim;
#include "toeplitz.cu"

template <class Kernel> static void launch(unsigned blocks, unsigned threads, Kernel kernel)
{
    gridDim.x = blocks;
    blockDim.x = threads;
    gridDim.y = gridDim.z = blockDim.y = blockDim.z = 1;
    for (unsigned b = 0; b < blocks; ++b)
        for (unsigned t = 0; t < threads; ++t) {
            blockIdx.x = b;
            threadIdx.x = t;
            kernel();
        }
}

extern "C" {
void emu_expand(unsigned blocks, unsigned threads, const float2* maps, const float2* x, float2* padded, int coils,
                int nx, int ny, int nz, int py, int pz, long long grid_size)
{
    launch(blocks, threads, [&] { mri_recon_sense_expand(maps, x, padded, coils, nx, ny, nz, py, pz, grid_size); });
}

void emu_filter(unsigned blocks, unsigned threads, float2* padded, const float2* spectrum, int coils,
                long long grid_size)
{
    launch(blocks, threads, [&] { mri_recon_sense_filter(padded, spectrum, coils, grid_size); });
}

void emu_reduce(unsigned blocks, unsigned threads, const float2* maps, const float2* padded, const float2* x,
                float2* out, int coils, int nx, int ny, int nz, int py, int pz, long long grid_size, float lam,
                int first)
{
    launch(blocks, threads, [&] {
        mri_recon_sense_reduce(maps, padded, x, out, coils, nx, ny, nz, py, pz, grid_size, lam, first);
    });
}

void emu_series_expand(unsigned blocks, unsigned threads, const float2* maps, const float2* x, float2* padded,
                       int coils, int frames, int nx, int ny, int nz, int py, int pz, long long grid_size)
{
    launch(blocks, threads,
           [&] { mri_recon_series_expand(maps, x, padded, coils, frames, nx, ny, nz, py, pz, grid_size); });
}

void emu_series_filter(unsigned blocks, unsigned threads, float2* padded, const float2* spectra, int coils,
                       int frames, long long grid_size)
{
    launch(blocks, threads, [&] { mri_recon_series_filter(padded, spectra, coils, frames, grid_size); });
}

void emu_series_reduce(unsigned blocks, unsigned threads, const float2* maps, const float2* padded,
                       const float2* x, float2* out, int coils, int frames, int nx, int ny, int nz, int py, int pz,
                       long long grid_size, float lam)
{
    launch(blocks, threads, [&] {
        mri_recon_series_reduce(maps, padded, x, out, coils, frames, nx, ny, nz, py, pz, grid_size, lam);
    });
}
}
