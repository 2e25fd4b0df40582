// Fused element-wise stages of the time-segmented CG-SENSE normal operator on the GPU,
//
//   A x = sum_c conj(S_c) sum_l conj(c_l) sum_l' T_{l l'} (c_l' S_c x) + lam x,
//
// where c_l = exp(-i 2 pi f tau_l) are the segment phases and T_{l l'} the Toeplitz convolutions on the 2x grid
// whose spectra K_{l l'} are the Fourier transforms of the segment PSFs (K_{l' l} = conj(K_{l l'}): T_{l' l}
// is the adjoint of T_{l l'}). cuFFT does the batched transforms between these kernels:
//
//   mri_recon_segments_expand: work[c, l] = zero-padded c_l S_c x on the 2x grid (every element written, so the
//                              buffer is transformed in place and reused without clearing);
//   mri_recon_segments_mix:    at every frequency p and for every coil, work[c, :, p] = K(p) work[c, :, p] with
//                              the L x L Hermitian K(p) (spectra pre-scaled by the inverse FFT's
//                              1 / grid_size);
//   mri_recon_segments_reduce: out = (first ? lam x : out) + sum_c conj(S_c) sum_l conj(c_l) y_{c l}, y_{c l} the
//                              top corner of the inverse transform of work[c, l].
//
// Layout: complex64 as float2, C order. Image (nx, ny, nz) with nz = 1 in 2D; the 2x grid is
// (px, py, pz) = (2 nx, 2 ny, 2 nz or 1) of grid_size points. maps (coils, nvox) and work (coils, segments,
// grid_size) hold this launch's coils only; phases (segments, nvox). The spectra are stored once per unordered
// pair, (pairs, grid_size) with pairs = L (L + 1) / 2 and the pair (l, l'), l <= l', at row
// l L - l (l - 1) / 2 + l' - l, so the threads of a warp (consecutive p) load one row coalesced.
//
// -D contract: SEG_MAX, the most segments a launch handles (1..64; the runtime `segments` must not exceed it):
// the mixing kernel's per-thread arrays of one frequency are SEG_MAX long, their loops unrolled with a guard,
// so they stay in registers. The other two kernels loop over the runtime `segments`. mri_recon_segments_mix
// runs with blockDim (32, SEG_COIL_LANES): the warps of a block hold the same 32 frequencies of different
// coils. Up to SEG_MAX = SEG_SHARED_MAX the block stages those frequencies' spectrum values in shared memory
// (dynamic size L (L + 1) / 2 x 32 float2, given at launch) and reads each pair once per coil; above, every
// warp reads the L^2 values it needs itself, served from L1 after the first warp's load.

#include "mri_recon_grid.cuh"

#ifndef SEG_MAX
#error "SEG_MAX (the most segments per launch) must be defined"
#endif
#if SEG_MAX < 1 || SEG_MAX > 64
#error "SEG_MAX must lie in 1..64"
#endif

#define SEG_COIL_LANES 8
#define SEG_SHARED_MAX 16  // tiers up to this SEG_MAX mix from shared memory (see mri_recon_segments_mix)

__device__ __forceinline__ float2 seg_mul(float2 a, float2 b)
{
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

__device__ __forceinline__ float2 seg_mul_conj(float2 a, float2 b)  // conj(a) * b
{
    return make_float2(a.x * b.x + a.y * b.y, a.x * b.y - a.y * b.x);
}

extern "C" __global__ void mri_recon_segments_expand(const float2* __restrict__ maps, const float2* __restrict__ phases,
                                                     const float2* __restrict__ x, float2* __restrict__ work,
                                                     int coils, int segments, int nx, int ny, int nz, int py,
                                                     int pz, long long grid_size)
{
    const long long nvox = (long long)nx * ny * nz;
    const long long total = grid_size * coils;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long c = t / grid_size;
        const long long p = t - c * grid_size;
        const long long v = mri_recon_image_voxel(p, nx, ny, nz, py, pz);
        float2* out = work + c * segments * grid_size + p;
        if (v >= 0) {
            const float2 sx = seg_mul(maps[c * nvox + v], x[v]);
            for (int l = 0; l < segments; ++l) out[l * grid_size] = seg_mul(phases[l * nvox + v], sx);
        } else {
            for (int l = 0; l < segments; ++l) out[l * grid_size] = make_float2(0.0f, 0.0f);
        }
    }
}

#if SEG_MAX <= SEG_SHARED_MAX
// The block's 32 frequencies' L (L + 1) / 2 spectrum values are staged in shared memory once (pairs x 32 float2,
// at most 34.8 KB at SEG_MAX 16: launched with that dynamic shared size), then every coil lane reads them from
// there; each pair (l, m >= l) is read once per coil and serves both K_{l m} v_m and K_{m l} v_l = conj(K_{l m})
// v_l; faster than the version below, which reads the L^2 values per coil through L1 (docs/changelog.md).
extern "C" __global__ void __launch_bounds__(32 * SEG_COIL_LANES)
mri_recon_segments_mix(float2* __restrict__ work, const float2* __restrict__ spectra, int coils, int segments,
                       long long grid_size)
{
    extern __shared__ float2 seg_shared[];  // [pair][32]
    const int pairs = segments * (segments + 1) / 2;
    const int lane = threadIdx.y * 32 + threadIdx.x;
    for (long long tile = blockIdx.x; tile * 32 < grid_size; tile += gridDim.x) {
        const long long first = tile * 32;
        __syncthreads();  // the previous tile's readers are done with seg_shared
        for (int i = lane; i < pairs * 32; i += 32 * blockDim.y) {
            const long long p = first + (i & 31);
            seg_shared[i] = p < grid_size ? spectra[(long long)(i >> 5) * grid_size + p] : make_float2(0.0f, 0.0f);
        }
        __syncthreads();
        const long long p = first + threadIdx.x;
        if (p >= grid_size) continue;
        for (int c = threadIdx.y; c < coils; c += blockDim.y) {
            float2* column = work + (long long)c * segments * grid_size + p;
            float2 v[SEG_MAX], acc[SEG_MAX];
#pragma unroll
            for (int l = 0; l < SEG_MAX; ++l) {
                if (l < segments) {
                    v[l] = column[l * grid_size];
                    acc[l] = make_float2(0.0f, 0.0f);
                }
            }
            int pair = 0;  // pairs in storage order: (0,0), (0,1), ..., (0,L-1), (1,1), ...
#pragma unroll
            for (int l = 0; l < SEG_MAX; ++l) {
#pragma unroll
                for (int m = l; m < SEG_MAX; ++m) {
                    if (l < segments && m < segments) {
                        const float2 h = seg_shared[pair * 32 + threadIdx.x];
                        ++pair;
                        const float2 a = seg_mul(h, v[m]);
                        acc[l].x += a.x;
                        acc[l].y += a.y;
                        if (m != l) {
                            const float2 b = seg_mul_conj(h, v[l]);
                            acc[m].x += b.x;
                            acc[m].y += b.y;
                        }
                    }
                }
            }
#pragma unroll
            for (int l = 0; l < SEG_MAX; ++l) {
                if (l < segments) column[l * grid_size] = acc[l];
            }
        }
    }
}
#else
extern "C" __global__ void __launch_bounds__(32 * SEG_COIL_LANES)
mri_recon_segments_mix(float2* __restrict__ work, const float2* __restrict__ spectra, int coils, int segments,
                       long long grid_size)
{
    for (long long tile = blockIdx.x; tile * blockDim.x < grid_size; tile += gridDim.x) {
        const long long p = tile * blockDim.x + threadIdx.x;
        if (p >= grid_size) continue;
        for (int c = threadIdx.y; c < coils; c += blockDim.y) {
            float2* column = work + (long long)c * segments * grid_size + p;
            float2 v[SEG_MAX];
#pragma unroll
            for (int l = 0; l < SEG_MAX; ++l) {
                if (l < segments) v[l] = column[l * grid_size];
            }
            for (int l = 0; l < segments; ++l) {  // row l of K(p) times v; v is read in full before any write
                float2 acc = make_float2(0.0f, 0.0f);
                const int row = l * segments - l * (l - 1) / 2;  // the pair (l, l)
#pragma unroll
                for (int m = 0; m < SEG_MAX; ++m) {
                    if (m < segments) {
                        if (m >= l) {
                            const float2 h = spectra[(long long)(row + m - l) * grid_size + p];
                            const float2 term = seg_mul(h, v[m]);
                            acc.x += term.x;
                            acc.y += term.y;
                        } else {  // K_{l m} = conj(K_{m l}), stored at the pair (m, l)
                            const int pair = m * segments - m * (m - 1) / 2 + l - m;
                            const float2 h = spectra[(long long)pair * grid_size + p];
                            const float2 term = seg_mul_conj(h, v[m]);
                            acc.x += term.x;
                            acc.y += term.y;
                        }
                    }
                }
                column[l * grid_size] = acc;
            }
        }
    }
}
#endif  // SEG_MAX <= SEG_SHARED_MAX

extern "C" __global__ void mri_recon_segments_reduce(const float2* __restrict__ maps, const float2* __restrict__ phases,
                                                     const float2* __restrict__ work, const float2* __restrict__ x,
                                                     float2* __restrict__ out, int coils, int segments, int nx,
                                                     int ny, int nz, int py, int pz, long long grid_size, float lam,
                                                     int first)
{
    const long long nvox = (long long)nx * ny * nz;
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < nvox;
         v += (long long)gridDim.x * blockDim.x) {
        const long long p = mri_recon_grid_index(v, ny, nz, py, pz);
        float2 acc = mri_recon_reduce_start(x, out, v, lam, first);
        for (int c = 0; c < coils; ++c) {
            const float2* column = work + (long long)c * segments * grid_size + p;
            float2 sum = make_float2(0.0f, 0.0f);
            for (int l = 0; l < segments; ++l) {  // the phases are re-read per coil from L1
                const float2 term = seg_mul_conj(phases[l * nvox + v], column[l * grid_size]);
                sum.x += term.x;
                sum.y += term.y;
            }
            const float2 term = seg_mul_conj(maps[c * nvox + v], sum);
            acc.x += term.x;
            acc.y += term.y;
        }
        out[v] = acc;
    }
}
