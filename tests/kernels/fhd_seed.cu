// F^H d, the first four rungs of the optimization ladder of Programming Massively Parallel Processors,
// chapter 17 (the FHD kernel), kept as the book builds them so that the benchmark can reproduce the ladder:
//
//   rung "naive"     (FHD_RUNG 0): one thread per voxel, everything in global memory (Fig. 17.10 style).
//                    Global accesses per inner iteration: kx ky [kz], x y [z], rMu iMu (x2 each),
//                    rFhD iFhD (read + write): 14 in 3D, 12 in 2D.
//   rung "registers" (FHD_RUNG 1): x[n] y[n] [z[n]] and the accumulators promoted to registers:
//                    kx ky [kz] and rMu iMu (x2) remain: 7 in 3D, 6 in 2D.
//   rung "constant"  (FHD_RUNG 2): kx ky [kz] moved to __constant__ arrays, filled chunk by chunk by a host
//                    loop (64 KB bank, last chunk shorter): rMu iMu remain, 4 (2 loads once merged).
//   rung "aos"       (FHD_RUNG 3): the trajectory as an array of structures kdata {x, y[, z]} so that one
//                    iteration touches one constant-cache line instead of D: still rMu iMu, 4 (2 loads).
//
// Conventions (schema v1): voxel n sits at r_n (arrays x, y, z, in units of the field of view, from
// mri_recon/grid.py: centre at N / 2), the
// trajectory is in cycles per field of view, and F^H d_n = sum_m d_m exp(+i 2 pi k_m . r_n). The phase is
// formed in turns (t = k . r), reduced to [-1/2, 1/2] and only then handed to the fast sine and cosine,
// whose error bound holds on [-pi, pi] only. One coil per launch (the host loops over coils).
//
// Compile-time sizes (-D): FHD_DIM (2 or 3), FHD_RUNG (0..3), FHD_CHUNK (samples per constant chunk,
// rungs 2 and 3).

#include "mri_recon_phase.cuh"

#ifndef FHD_DIM
#error "FHD_DIM (2 or 3) must be defined"
#endif
#ifndef FHD_RUNG
#error "FHD_RUNG (0 naive, 1 registers, 2 constant, 3 aos) must be defined"
#endif
#if FHD_DIM != 2 && FHD_DIM != 3
#error "FHD_DIM must be 2 or 3"
#endif

// the phase in turns reduced to [-1/2, 1/2] (reduce_turns, mri_recon_phase.cuh), then the fast sine and cosine
__device__ __forceinline__ void turn_sincos(float t, float* s, float* c) {
    __sincosf(6.28318530717958647692f * reduce_turns(t), s, c);
}

#if FHD_RUNG == 0

extern "C" __global__ void mri_recon_fhd_naive(
    const float* kx, const float* ky, const float* kz, const float* x, const float* y, const float* z,
    const float* rMu, const float* iMu, float* rFhD, float* iFhD, int M, int N) {
    const long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    rFhD[n] = 0.0f;
    iFhD[n] = 0.0f;
    for (int m = 0; m < M; ++m) {
#if FHD_DIM == 3
        const float t = kx[m] * x[n] + ky[m] * y[n] + kz[m] * z[n];
#else
        const float t = kx[m] * x[n] + ky[m] * y[n];
#endif
        float s, c;
        turn_sincos(t, &s, &c);
        rFhD[n] += rMu[m] * c - iMu[m] * s;
        iFhD[n] += iMu[m] * c + rMu[m] * s;
    }
}

#elif FHD_RUNG == 1

extern "C" __global__ void mri_recon_fhd_registers(
    const float* kx, const float* ky, const float* kz, const float* x, const float* y, const float* z,
    const float* rMu, const float* iMu, float* rFhD, float* iFhD, int M, int N) {
    const long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float xn = x[n];
    const float yn = y[n];
#if FHD_DIM == 3
    const float zn = z[n];
#endif
    float rAcc = 0.0f;
    float iAcc = 0.0f;
    for (int m = 0; m < M; ++m) {
#if FHD_DIM == 3
        const float t = kx[m] * xn + ky[m] * yn + kz[m] * zn;
#else
        const float t = kx[m] * xn + ky[m] * yn;
#endif
        float s, c;
        turn_sincos(t, &s, &c);
        rAcc += rMu[m] * c - iMu[m] * s;
        iAcc += iMu[m] * c + rMu[m] * s;
    }
    rFhD[n] = rAcc;
    iFhD[n] = iAcc;
}

#elif FHD_RUNG == 2

#ifndef FHD_CHUNK
#error "FHD_CHUNK must be defined"
#endif
static_assert(FHD_DIM * FHD_CHUNK * sizeof(float) <= 65536, "the k-space chunk exceeds the constant bank");

__constant__ float c_kx[FHD_CHUNK];
__constant__ float c_ky[FHD_CHUNK];
#if FHD_DIM == 3
__constant__ float c_kz[FHD_CHUNK];
#endif

// One chunk of ``count`` samples: rMu and iMu point at the chunk's first sample; ``first`` != 0 starts the
// accumulators at zero, otherwise they continue from rFhD and iFhD.
extern "C" __global__ void mri_recon_fhd_constant(
    const float* x, const float* y, const float* z, const float* rMu, const float* iMu,
    float* rFhD, float* iFhD, int count, int N, int first) {
    const long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float xn = x[n];
    const float yn = y[n];
#if FHD_DIM == 3
    const float zn = z[n];
#endif
    float rAcc = first ? 0.0f : rFhD[n];
    float iAcc = first ? 0.0f : iFhD[n];
    for (int m = 0; m < count; ++m) {
#if FHD_DIM == 3
        const float t = c_kx[m] * xn + c_ky[m] * yn + c_kz[m] * zn;
#else
        const float t = c_kx[m] * xn + c_ky[m] * yn;
#endif
        float s, c;
        turn_sincos(t, &s, &c);
        rAcc += rMu[m] * c - iMu[m] * s;
        iAcc += iMu[m] * c + rMu[m] * s;
    }
    rFhD[n] = rAcc;
    iFhD[n] = iAcc;
}

#elif FHD_RUNG == 3

#ifndef FHD_CHUNK
#error "FHD_CHUNK must be defined"
#endif

struct kdata {
    float x;
    float y;
#if FHD_DIM == 3
    float z;
#endif
};
static_assert(sizeof(kdata) == FHD_DIM * sizeof(float), "kdata must be packed");
static_assert(FHD_CHUNK * sizeof(kdata) <= 65536, "the k-space chunk exceeds the constant bank");

__constant__ kdata c_k[FHD_CHUNK];

extern "C" __global__ void mri_recon_fhd_aos(
    const float* x, const float* y, const float* z, const float* rMu, const float* iMu,
    float* rFhD, float* iFhD, int count, int N, int first) {
    const long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float xn = x[n];
    const float yn = y[n];
#if FHD_DIM == 3
    const float zn = z[n];
#endif
    float rAcc = first ? 0.0f : rFhD[n];
    float iAcc = first ? 0.0f : iFhD[n];
    for (int m = 0; m < count; ++m) {
#if FHD_DIM == 3
        const float t = c_k[m].x * xn + c_k[m].y * yn + c_k[m].z * zn;
#else
        const float t = c_k[m].x * xn + c_k[m].y * yn;
#endif
        float s, c;
        turn_sincos(t, &s, &c);
        rAcc += rMu[m] * c - iMu[m] * s;
        iAcc += iMu[m] * c + rMu[m] * s;
    }
    rFhD[n] = rAcc;
    iFhD[n] = iAcc;
}

#else
#error "FHD_RUNG must be 0, 1, 2 or 3"
#endif
