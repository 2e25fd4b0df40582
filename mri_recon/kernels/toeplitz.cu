// Fused element-wise stages of the CG-SENSE normal operator A x = sum_c conj(S_c) T(S_c x) + lam x on the GPU,
// where T is the Toeplitz convolution on the 2x grid (cuFFT does the transforms between these two kernels).
//
//   mri_recon_sense_expand: padded[c] = zero-padded S_c x on the 2x grid (every element written, so the
//                           buffer can be transformed in place and reused without clearing);
//   mri_recon_sense_filter: padded[c] *= spectrum (the kernel's spectrum, pre-scaled by the inverse FFT's 1/N);
//   mri_recon_sense_reduce: out = (first ? lam x : out) + sum_c conj(S_c) y_c, y_c the top corner of the
//                           inverse transform of coil c.
//
// The same three steps for a time series (mri_recon_series_*): F frames at a time, each frame t with its own
// image x_t and kernel spectrum h_t, every coil of every frame in one launch. padded holds F x C grids (frame
// major), x and out F images, spectra F grids.
//
// Layout: complex64 as float2, C order. Image (nx, ny, nz) with nz = 1 in 2D; the padded grid is
// (px, py, pz) = (2 nx, 2 ny, 2 nz or 1). maps and padded hold this launch's coils only.

#include "mri_recon_grid.cuh"

extern "C" __global__ void mri_recon_sense_expand(const float2* __restrict__ maps, const float2* __restrict__ x,
                                                  float2* __restrict__ padded, int coils, int nx, int ny, int nz,
                                                  int py, int pz, long long grid_size)
{
    const long long nvox = (long long)nx * ny * nz;
    const long long total = grid_size * coils;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long c = t / grid_size;
        const long long p = t - c * grid_size;
        const long long v = mri_recon_image_voxel(p, nx, ny, nz, py, pz);
        float2 value = make_float2(0.0f, 0.0f);
        if (v >= 0) {
            const float2 s = maps[c * nvox + v];
            const float2 xv = x[v];
            value = make_float2(s.x * xv.x - s.y * xv.y, s.x * xv.y + s.y * xv.x);
        }
        padded[t] = value;
    }
}

extern "C" __global__ void mri_recon_sense_filter(float2* __restrict__ padded, const float2* __restrict__ spectrum,
                                                  int coils, long long grid_size)
{
    const long long total = grid_size * coils;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const float2 h = spectrum[t % grid_size];
        const float2 v = padded[t];
        padded[t] = make_float2(v.x * h.x - v.y * h.y, v.x * h.y + v.y * h.x);
    }
}

extern "C" __global__ void mri_recon_sense_reduce(const float2* __restrict__ maps, const float2* __restrict__ padded,
                                                  const float2* __restrict__ x, float2* __restrict__ out, int coils,
                                                  int nx, int ny, int nz, int py, int pz, long long grid_size,
                                                  float lam, int first)
{
    const long long nvox = (long long)nx * ny * nz;
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < nvox;
         v += (long long)gridDim.x * blockDim.x) {
        const long long p = mri_recon_grid_index(v, ny, nz, py, pz);
        float2 acc = mri_recon_reduce_start(x, out, v, lam, first);
        for (int c = 0; c < coils; ++c) {
            const float2 s = maps[c * nvox + v];
            const float2 y = padded[c * grid_size + p];
            acc.x += s.x * y.x + s.y * y.y;  // conj(s) * y
            acc.y += s.x * y.y - s.y * y.x;
        }
        out[v] = acc;
    }
}

extern "C" __global__ void mri_recon_series_expand(const float2* __restrict__ maps, const float2* __restrict__ x,
                                                   float2* __restrict__ padded, int coils, int frames, int nx,
                                                   int ny, int nz, int py, int pz, long long grid_size)
{
    const long long nvox = (long long)nx * ny * nz;
    const long long total = grid_size * coils * frames;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long g = t / grid_size;  // frame * coils + coil
        const long long p = t - g * grid_size;
        const long long f = g / coils;
        const long long c = g - f * coils;
        const long long v = mri_recon_image_voxel(p, nx, ny, nz, py, pz);
        float2 value = make_float2(0.0f, 0.0f);
        if (v >= 0) {
            const float2 s = maps[c * nvox + v];
            const float2 xv = x[f * nvox + v];
            value = make_float2(s.x * xv.x - s.y * xv.y, s.x * xv.y + s.y * xv.x);
        }
        padded[t] = value;
    }
}

extern "C" __global__ void mri_recon_series_filter(float2* __restrict__ padded, const float2* __restrict__ spectra,
                                                   int coils, int frames, long long grid_size)
{
    const long long per_frame = grid_size * coils;
    const long long total = per_frame * frames;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long f = t / per_frame;
        const float2 h = spectra[f * grid_size + t % grid_size];
        const float2 v = padded[t];
        padded[t] = make_float2(v.x * h.x - v.y * h.y, v.x * h.y + v.y * h.x);
    }
}

extern "C" __global__ void mri_recon_series_reduce(const float2* __restrict__ maps, const float2* __restrict__ padded,
                                                   const float2* __restrict__ x, float2* __restrict__ out, int coils,
                                                   int frames, int nx, int ny, int nz, int py, int pz,
                                                   long long grid_size, float lam)
{
    const long long nvox = (long long)nx * ny * nz;
    const long long total = nvox * frames;
    for (long long u = blockIdx.x * (long long)blockDim.x + threadIdx.x; u < total;
         u += (long long)gridDim.x * blockDim.x) {
        const long long f = u / nvox;
        const long long v = u - f * nvox;
        const long long p = mri_recon_grid_index(v, ny, nz, py, pz);
        const float2* frame = padded + f * coils * grid_size;
        float2 acc = make_float2(lam * x[u].x, lam * x[u].y);
        for (int c = 0; c < coils; ++c) {
            const float2 s = maps[c * nvox + v];
            const float2 y = frame[c * grid_size + p];
            acc.x += s.x * y.x + s.y * y.y;  // conj(s) * y
            acc.y += s.x * y.y - s.y * y.x;
        }
        out[u] = acc;
    }
}
