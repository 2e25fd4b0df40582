// The forward transform F x by exact direct summation: d_m = sum_n x_n exp(-i 2 pi k_m . r_n), one thread
// per sample m (schema v1, mri_recon_phase.cuh: voxel j of an axis of size N at r = (j - c)/N = Q/(2N) with the
// centre c = N / 2 (floor) and Q = 2j - 2c).
//
// FWD_NAIVE 1: mri_recon_forward_naive, the reference rung: every voxel's position and value read from
// global memory, the phase formed in float turns and reduced to [-1/2, 1/2] before __sincosf; one coil.
//
// FWD_NAIVE 0: mri_recon_forward, the fast kernel. The host turns the image into "runs": FWD_RUN consecutive
// positions of one line of the last axis, each position carrying, for every coil of the launch,
//     P = x_j + x_mirror,   D = x_j - x_mirror      (x_mirror = 0 when the mirror voxel does not exist)
// because the mirror voxel 2c - j sits at -r_j and has the conjugate phase:
//     x_j e^{-i theta} + x_mirror e^{+i theta} = P cos(theta) - i D sin(theta)
// (the same line list and position rule as fhd.cu). Blocks stream the runs through shared memory, tile by
// tile. The phase at a run's first position is exact fixed-point turns T = sum_d K_d Q_d (mod 2^32, K_d =
// round(2^32 frac(k_d / (2 N_d))) from the host); with FWD_RUN > 1 the following positions of the run use
// the angle-addition recurrence with the step exp(i 2 pi 2 K_last / 2^32), evaluated once per thread in
// double precision, so at most FWD_RUN - 1 steps accumulate rounding. Sums are kept per tile and then added
// to the total (two-level summation). blockIdx.y splits the runs into slices whose partial results the host
// adds.
//
// FWD_OFFRES 1 (with FWD_NAIVE 0): mri_recon_forward_offres, F with off-resonance,
//     d_m = sum_n x_n exp(-i 2 pi (k_m . r_n + f_n t_m))   (f_n in Hz, t_m in s),
// one thread per sample. A field map breaks the mirror symmetry and the recurrence along a line, so every
// voxel is its own record and gets its own phase, all of it in fixed-point turns: k . r as above plus f_n t_m
// from F_n = round(2^16 f_n) and tau_m = round(2^32 t_m) (offres_turns, mri_recon_phase.cuh; see fhd.cu for
// the error). Voxel records stream through shared
// memory tile by tile, as the runs do; blockIdx.y splits the voxels into slices whose partial results the
// host adds.
//
// Compile-time sizes (-D): FWD_NAIVE (0 or 1), FWD_DIM (2 or 3); for FWD_NAIVE 0 also FWD_COILS (1..8),
// FWD_RUN (positions per run, 1..16) and FWD_TILE_RUNS (runs per shared-memory tile); FWD_OFFRES (0 or 1,
// default 0): with 1, FWD_COILS and FWD_TILE_RUNS (voxel records per tile) only.
//
// Run record (32-bit words, 16-byte aligned): Q_0, Q_1, Q_2 (int; 2D: Q_x, Q_y of the first position, 0),
// one zero word, then FWD_RUN x FWD_COILS float4 (P.re, P.im, D.re, D.im), position-major.
//
// Voxel record of FWD_OFFRES 1 (32-bit words, 16-byte aligned): Q_0, Q_1, Q_2 (int; 2D: Q_x, Q_y, 0), F_n
// (int, round(2^16 f_n), f in Hz), then FWD_COILS float2 x_n (re, im), zero-padded to a multiple of four words.

#include "mri_recon_phase.cuh"

#ifndef FWD_DIM
#error "FWD_DIM must be defined"
#endif
#if FWD_DIM != 2 && FWD_DIM != 3
#error "FWD_DIM must be 2 or 3"
#endif
#ifndef FWD_NAIVE
#error "FWD_NAIVE must be defined"
#endif
#ifndef FWD_OFFRES
#define FWD_OFFRES 0
#endif
#if FWD_OFFRES && FWD_NAIVE
#error "FWD_OFFRES 1 needs FWD_NAIVE 0"
#endif

#define FWD_THREADS 256

#if FWD_NAIVE

extern "C" __global__ void __launch_bounds__(FWD_THREADS) mri_recon_forward_naive(
    const float* kx, const float* ky, const float* kz, const float* x, const float* y, const float* z,
    const float2* image, float2* out, int M, int N) {
    const long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    const float kxm = kx[m];
    const float kym = ky[m];
#if FWD_DIM == 3
    const float kzm = kz[m];
#endif
    float re = 0.0f;
    float im = 0.0f;
    for (int n = 0; n < N; ++n) {
#if FWD_DIM == 3
        float t = kxm * x[n] + kym * y[n] + kzm * z[n];
#else
        float t = kxm * x[n] + kym * y[n];
#endif
        t = reduce_turns(t);
        float s, c;
        __sincosf(6.28318530717958647692f * t, &s, &c);
        const float2 v = image[n];
        re += v.x * c + v.y * s;  // x e^{-i theta}
        im += v.y * c - v.x * s;
    }
    out[m] = make_float2(re, im);
}

#elif FWD_OFFRES

#if !defined(FWD_COILS) || !defined(FWD_TILE_RUNS)
#error "FWD_COILS and FWD_TILE_RUNS must be defined"
#endif
#if FWD_COILS < 1 || FWD_COILS > 8 || FWD_TILE_RUNS < 1
#error "FWD_COILS must lie in 1..8, FWD_TILE_RUNS >= 1"
#endif

#define FWD_VOXEL4 (1 + (FWD_COILS + 1) / 2)  // voxel record size in 16-byte units
static_assert(FWD_TILE_RUNS * FWD_VOXEL4 * 16 <= 48 * 1024, "the tile exceeds 48 KB of shared memory");

// out     complex64 (slices, coils, M): slice blockIdx.y, coils coil0 .. coil0 + FWD_COILS - 1
// kfix    uint32 (M, FWD_DIM): fixed-point trajectory
// taus    int32 (M,): tau_m = round(2^32 t_m), t in s, |t| < 1/2
// voxels  (n_voxels, FWD_VOXEL4) 16-byte units
extern "C" __global__ void __launch_bounds__(FWD_THREADS) mri_recon_forward_offres(
    float2* __restrict__ out, const unsigned* __restrict__ kfix, const int* __restrict__ taus,
    const uint4* __restrict__ voxels, int n_voxels, int M, int voxels_per_slice, int coils, int coil0) {
    __shared__ uint4 tile[FWD_TILE_RUNS * FWD_VOXEL4];

    const long long m_ll = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = m_ll < M;
    const long long m = active ? m_ll : 0;
    const unsigned k0 = kfix[m * FWD_DIM];
    const unsigned k1 = kfix[m * FWD_DIM + 1];
#if FWD_DIM == 3
    const unsigned k2 = kfix[m * FWD_DIM + 2];
#endif
    const int tau = taus[m];

    float2 acc[FWD_COILS];
#pragma unroll
    for (int c = 0; c < FWD_COILS; ++c) acc[c] = make_float2(0.0f, 0.0f);

    const int v_begin = min(n_voxels, (int)blockIdx.y * voxels_per_slice);
    const int v_end = min(n_voxels, v_begin + voxels_per_slice);
    for (int v0 = v_begin; v0 < v_end; v0 += FWD_TILE_RUNS) {
        const int n = min(FWD_TILE_RUNS, v_end - v0);
        __syncthreads();
        const uint4* src = voxels + (long long)v0 * FWD_VOXEL4;
        for (int i = threadIdx.x; i < n * FWD_VOXEL4; i += blockDim.x) tile[i] = src[i];
        __syncthreads();

        float2 part[FWD_COILS];
#pragma unroll
        for (int c = 0; c < FWD_COILS; ++c) part[c] = make_float2(0.0f, 0.0f);
        for (int r = 0; r < n; ++r) {
            const uint4 h = tile[r * FWD_VOXEL4];
#if FWD_DIM == 3
            const unsigned T = k0 * h.x + k1 * h.y + k2 * h.z + offres_turns((int)h.w, tau) + 0x100u;
#else
            const unsigned T = k0 * h.x + k1 * h.y + offres_turns((int)h.w, tau) + 0x100u;
#endif
            float c, s;
            phasor(T, c, s);
            const float2* x = reinterpret_cast<const float2*>(tile + r * FWD_VOXEL4 + 1);
#pragma unroll
            for (int q = 0; q < FWD_COILS; ++q) {
                const float2 v = x[q];
                part[q].x += v.x * c + v.y * s;  // x e^{-i theta}
                part[q].y += v.y * c - v.x * s;
            }
        }
#pragma unroll
        for (int c = 0; c < FWD_COILS; ++c) {
            acc[c].x += part[c].x;
            acc[c].y += part[c].y;
        }
    }
    if (!active) return;
#pragma unroll
    for (int c = 0; c < FWD_COILS; ++c) {
        out[((long long)blockIdx.y * coils + coil0 + c) * M + m] = acc[c];
    }
}

#else

#if !defined(FWD_COILS) || !defined(FWD_RUN) || !defined(FWD_TILE_RUNS)
#error "FWD_COILS, FWD_RUN and FWD_TILE_RUNS must be defined"
#endif
#if FWD_COILS < 1 || FWD_COILS > 8 || FWD_RUN < 1 || FWD_RUN > 16 || FWD_TILE_RUNS < 1
#error "FWD_COILS must lie in 1..8, FWD_RUN in 1..16, FWD_TILE_RUNS >= 1"
#endif

#define FWD_RECORD4 (1 + FWD_RUN * FWD_COILS)  // record size in 16-byte units
static_assert(FWD_TILE_RUNS * FWD_RECORD4 * 16 <= 48 * 1024, "the tile exceeds 48 KB of shared memory");

// out     complex64 (slices, coils, M): slice blockIdx.y, coils coil0 .. coil0 + FWD_COILS - 1
// kfix    uint32 (M, FWD_DIM): fixed-point trajectory
// runs    (n_runs, FWD_RECORD4) 16-byte units
extern "C" __global__ void __launch_bounds__(FWD_THREADS) mri_recon_forward(
    float2* __restrict__ out, const unsigned* __restrict__ kfix, const uint4* __restrict__ runs, int n_runs,
    int M, int runs_per_slice, int coils, int coil0) {
    __shared__ uint4 tile[FWD_TILE_RUNS * FWD_RECORD4];

    const long long m_ll = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = m_ll < M;
    const long long m = active ? m_ll : 0;
    const unsigned k0 = kfix[m * FWD_DIM];
    const unsigned k1 = kfix[m * FWD_DIM + 1];
#if FWD_DIM == 3
    const unsigned k2 = kfix[m * FWD_DIM + 2];
#endif
#if FWD_RUN > 1
    // the step between consecutive positions of a line: Q_last grows by 2
    const unsigned step = 2u * kfix[m * FWD_DIM + FWD_DIM - 1];
    double cs_d, ss_d;
    sincospi(2.0 * (double)(int)step * 2.3283064365386962890625e-10, &ss_d, &cs_d);
    const float cs = (float)cs_d;
    const float ss = (float)ss_d;
#endif

    float2 acc[FWD_COILS];
#pragma unroll
    for (int c = 0; c < FWD_COILS; ++c) acc[c] = make_float2(0.0f, 0.0f);

    const int r_begin = min(n_runs, (int)blockIdx.y * runs_per_slice);
    const int r_end = min(n_runs, r_begin + runs_per_slice);
    for (int r0 = r_begin; r0 < r_end; r0 += FWD_TILE_RUNS) {
        const int n = min(FWD_TILE_RUNS, r_end - r0);
        __syncthreads();
        const uint4* src = runs + (long long)r0 * FWD_RECORD4;
        for (int i = threadIdx.x; i < n * FWD_RECORD4; i += blockDim.x) tile[i] = src[i];
        __syncthreads();

        float2 part[FWD_COILS];
#pragma unroll
        for (int c = 0; c < FWD_COILS; ++c) part[c] = make_float2(0.0f, 0.0f);
        for (int r = 0; r < n; ++r) {
            const uint4 h = tile[r * FWD_RECORD4];
#if FWD_DIM == 3
            const unsigned T = k0 * h.x + k1 * h.y + k2 * h.z + 0x100u;
#else
            const unsigned T = k0 * h.x + k1 * h.y + 0x100u;
#endif
            float c, s;
            phasor(T, c, s);
            const float4* items = reinterpret_cast<const float4*>(tile + r * FWD_RECORD4 + 1);
#pragma unroll
            for (int i = 0; i < FWD_RUN; ++i) {
#pragma unroll
                for (int q = 0; q < FWD_COILS; ++q) {
                    const float4 pd = items[i * FWD_COILS + q];  // P.re, P.im, D.re, D.im
                    part[q].x += pd.x * c + pd.w * s;
                    part[q].y += pd.y * c - pd.z * s;
                }
#if FWD_RUN > 1
                if (i + 1 < FWD_RUN) {
                    const float cn = c * cs - s * ss;
                    s = s * cs + c * ss;
                    c = cn;
                }
#endif
            }
        }
#pragma unroll
        for (int c = 0; c < FWD_COILS; ++c) {
            acc[c].x += part[c].x;
            acc[c].y += part[c].y;
        }
    }
    if (!active) return;
#pragma unroll
    for (int c = 0; c < FWD_COILS; ++c) {
        out[((long long)blockIdx.y * coils + coil0 + c) * M + m] = acc[c];
    }
}

#endif
