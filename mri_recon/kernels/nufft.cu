// Non-uniform FFT (type 1: F^H d and the Toeplitz PSF; type 2: F) by the method of FINUFFT / cufinufft:
// spread onto an oversampled grid with the exponential-of-semicircle kernel, FFT (cuFFT, from the host),
// divide by the kernel's Fourier coefficients. Samples are sorted into bins once per plan; spreading
// works per subproblem (one bin, at most a fixed number of its samples) in shared memory.
//
// Mathematics. Per axis d: N_d voxels, fine grid of n_d points (even, >= 2 N_d, host's choice), kernel
// width W points, psi(t) = exp(beta (sqrt(1 - (2t/W)^2) - 1)) on |t| <= W/2. A sample at k (cycles per FOV)
// sits at g = k n / N (mod n), computed in float64 (the wrap must not cost float32 bits). It touches the
// W grid points i1 .. i1 + W - 1, i1 = ceil(g - W/2); the plan stores per axis the integer i1 (in
// [-W/2, n)) and the float z0 = i1 - g in [-W/2, -W/2 + 1], so the kernel arguments z0 + t are small and
// exact to float32 rounding. Type 1: b_i = sum_m d_m prod_d psi(i_d - g_md), then the unnormalized inverse
// FFT B_l = sum_i b_i exp(+2 pi i l.i / n), then out_j = B_{l mod n} / prod_d Psi_d(l_d) with
// l = j - floor(N/2) (the Psi_d are the host's quadrature, uploaded as 1/Psi per voxel index). Type 2:
// the reverse (pre-deconvolve into a zeroed fine grid, forward FFT, interpolate with the same weights).
//
// Sorting (once per plan): mri_recon_nufft_bin_count gives every sample its bin and its rank in the bin
// (atomicAdd), mri_recon_nufft_bin_scan scans the counts (one block), mri_recon_nufft_bin_scatter writes the
// permutation and the sorted per-axis (i1, z0), and mri_recon_nufft_subproblems lists the subproblems
// (bin, first sorted sample, count: at most the subproblem size each), bin by bin in order.
//
// Spreading: one block per subproblem; a tile of BIN_d + W points per axis (origin s - floor(W/2)) in
// dynamic shared memory, one plane of floats per coil and part (real, imaginary). The tile is then added
// to the fine grid with global atomics, two neighbouring cells of a row per float4 atomic (periodic wrap;
// pairs nobody touched are skipped).
//   mri_recon_nufft_spread_warp ("warp", the default): every warp owns a private tile. It loads 32 of its
//     samples at once (lane j: the j-th sample's position, tile origin and data of every coil, so their
//     global loads overlap), then spreads them one at a time: lanes 0 .. D W - 1 compute the sample's D W
//     weights (into shared memory), the sample's origin and data come by shuffles, and lane l updates
//     stencil cells l, l + 32, ... of all coils with plain loads and stores: the cells of one sample are
//     distinct and __syncwarp orders successive samples, so no atomics are needed. The flush sums the
//     warps' tiles. Faster than issuing a sample's loads one at a time with a global atomic per cell
//     (docs/benchmarks.md, "Figures behind choices in the code").
//   mri_recon_nufft_spread ("atomic", the cufinufft scheme): one tile per block, one thread per sample
//     with its W weights per axis in registers, shared-memory atomicAdd for all NUFFT_COILS coils.
// Interpolation (mri_recon_nufft_interp): one thread per sorted sample, W^D grid reads per coil.
//
// Compile-time sizes (-D):
//   NUFFT_DIM        2 or 3
//   NUFFT_W          kernel width W, 2..16
//   NUFFT_COILS      coils per launch of spread / interp (1..8); fewer may be active (runtime `coils`)
//   NUFFT_BIN0..2    bin size per axis in fine-grid points (NUFFT_BIN2 must be 1 in 2D)
//   NUFFT_REAL       1: spread real data (the PSF weights, float), 0: complex64 data
//   NUFFT_THREADS    threads per block of every kernel here (the launch bounds)
// Runtime arguments: grid and matrix sizes (n_d, N_d; in 2D the third of each is 1), bins per axis, beta.

#if !defined(NUFFT_DIM) || !defined(NUFFT_W) || !defined(NUFFT_COILS) || !defined(NUFFT_REAL)
#error "NUFFT_DIM, NUFFT_W, NUFFT_COILS and NUFFT_REAL must be defined"
#endif
#if !defined(NUFFT_BIN0) || !defined(NUFFT_BIN1) || !defined(NUFFT_BIN2) || !defined(NUFFT_THREADS)
#error "NUFFT_BIN0, NUFFT_BIN1, NUFFT_BIN2 and NUFFT_THREADS must be defined"
#endif
#if NUFFT_DIM != 2 && NUFFT_DIM != 3
#error "NUFFT_DIM must be 2 or 3"
#endif
#if NUFFT_W < 2 || NUFFT_W > 16
#error "NUFFT_W must lie in 2..16"
#endif
#if NUFFT_COILS < 1 || NUFFT_COILS > 8
#error "NUFFT_COILS must lie in 1..8"
#endif
#if NUFFT_DIM == 2 && NUFFT_BIN2 != 1
#error "NUFFT_BIN2 must be 1 in 2D"
#endif
#if NUFFT_BIN0 < 1 || NUFFT_BIN1 < 1 || NUFFT_BIN2 < 1
#error "bin sizes must be positive"
#endif

// A sample of bin [s, s + B) touches the points s - floor(W/2) .. s + B - 1 + ceil(W/2): B + W of them.
#define HALO (NUFFT_W / 2)
#define P0 (NUFFT_BIN0 + NUFFT_W)
#define P1 (NUFFT_BIN1 + NUFFT_W)
#if NUFFT_DIM == 3
#define P2 (NUFFT_BIN2 + NUFFT_W)
#define STENCIL (NUFFT_W * NUFFT_W * NUFFT_W)
#else
#define P2 1
#define STENCIL (NUFFT_W * NUFFT_W)
#endif
#define TILE (P0 * P1 * P2)
#define ROUNDS ((STENCIL + 31) / 32)  // stencil cells per lane in the warp method
// rounds per batch of loads in the warp method: about 16 values in flight per lane
#define RCHUNK_RAW (16 / (NUFFT_COILS * (2 - NUFFT_REAL)) > 0 ? 16 / (NUFFT_COILS * (2 - NUFFT_REAL)) : 1)
#define RCHUNK (RCHUNK_RAW < ROUNDS ? RCHUNK_RAW : ROUNDS)
#if NUFFT_REAL
#define PARTS 1
typedef float sample_t;
#else
#define PARTS 2
typedef float2 sample_t;
#endif

// ---------------------------------------------------------------------------------------------------
// Sorting

struct located {
    int bin;
    int first[3];
    float z0[3];
};

// g = k scale (mod n) in float64; bin index (C order over bins) and per-axis (i1, z0).
__device__ __forceinline__ located locate(const float* __restrict__ k, long long m, double s0, double s1,
                                          double s2, int n0, int n1, int n2, int nb1, int nb2) {
    const double scale[3] = {s0, s1, s2};
    const int n[3] = {n0, n1, n2};
    const int bins[3] = {NUFFT_BIN0, NUFFT_BIN1, NUFFT_BIN2};
    const int nb[3] = {1, nb1, nb2};
    located out;
    out.bin = 0;
#pragma unroll
    for (int d = 0; d < 3; ++d) {
        if (d < NUFFT_DIM) {
            double g = (double)k[m * NUFFT_DIM + d] * scale[d];
            g -= (double)n[d] * floor(g / (double)n[d]);
            if (g >= (double)n[d]) g -= (double)n[d];
            if (g < 0.0) g = 0.0;
            int b = (int)(g / (double)bins[d]);
            const double f = ceil(g - 0.5 * NUFFT_W);
            out.first[d] = (int)f;
            out.z0[d] = (float)(f - g);
            out.bin = d == 0 ? b : out.bin * nb[d] + b;
        } else {
            out.first[d] = 0;
            out.z0[d] = 0.0f;
        }
    }
    return out;
}

// bin[m], rank[m] (position within its bin, from atomicAdd) and counts[bin] += 1.
extern "C" __global__ void __launch_bounds__(NUFFT_THREADS)
mri_recon_nufft_bin_count(const float* __restrict__ k, long long M, double s0, double s1, double s2,
                          int n0, int n1, int n2, int nb1, int nb2,
                          int* __restrict__ bin, int* __restrict__ rank, int* __restrict__ counts) {
    const long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    const located p = locate(k, m, s0, s1, s2, n0, n1, n2, nb1, nb2);
    bin[m] = p.bin;
    rank[m] = atomicAdd(&counts[p.bin], 1);
}

// perm[dest] = m and the sorted (i1, z0) per axis, dest = start[bin[m]] + rank[m]. first, z0: (D, M).
extern "C" __global__ void __launch_bounds__(NUFFT_THREADS)
mri_recon_nufft_bin_scatter(const float* __restrict__ k, long long M, double s0, double s1, double s2,
                            int n0, int n1, int n2, int nb1, int nb2,
                            const int* __restrict__ bin, const int* __restrict__ rank,
                            const int* __restrict__ start, int* __restrict__ perm, int* __restrict__ first,
                            float* __restrict__ z0) {
    const long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    const located p = locate(k, m, s0, s1, s2, n0, n1, n2, nb1, nb2);
    const long long dest = (long long)start[bin[m]] + rank[m];
    perm[dest] = (int)m;
#pragma unroll
    for (int d = 0; d < NUFFT_DIM; ++d) {
        first[d * M + dest] = p.first[d];
        z0[d * M + dest] = p.z0[d];
    }
}

#define NUFFT_SCAN_THREADS 1024

// Exclusive scans of the bin counts in one block: start[b] = sum_{j<b} counts[j] (first sorted sample of bin
// b), sub_start[b] = sum_{j<b} ceil(counts[j] / size) (its first subproblem); *total = number of subproblems.
// Each thread scans a contiguous run of bins; the run totals are scanned across the block.
extern "C" __global__ void __launch_bounds__(NUFFT_SCAN_THREADS)
mri_recon_nufft_bin_scan(const int* __restrict__ counts, int n_bins, int size, int* __restrict__ start,
                         int* __restrict__ sub_start, int* __restrict__ total) {
    __shared__ long long samples[NUFFT_SCAN_THREADS], subs[NUFFT_SCAN_THREADS];
    const int t = threadIdx.x;
    const int per = (n_bins + NUFFT_SCAN_THREADS - 1) / NUFFT_SCAN_THREADS;
    const int lo = min(n_bins, t * per), hi = min(n_bins, lo + per);
    long long a = 0, b = 0;
    for (int i = lo; i < hi; ++i) {
        a += counts[i];
        b += (counts[i] + size - 1) / size;
    }
    samples[t] = a;
    subs[t] = b;
    __syncthreads();
    for (int offset = 1; offset < NUFFT_SCAN_THREADS; offset <<= 1) {  // inclusive scan of the run totals
        const long long va = t >= offset ? samples[t - offset] : 0, vb = t >= offset ? subs[t - offset] : 0;
        __syncthreads();
        samples[t] += va;
        subs[t] += vb;
        __syncthreads();
    }
    a = t ? samples[t - 1] : 0;
    b = t ? subs[t - 1] : 0;
    for (int i = lo; i < hi; ++i) {
        start[i] = (int)a;
        sub_start[i] = (int)b;
        a += counts[i];
        b += (counts[i] + size - 1) / size;
    }
    if (t == NUFFT_SCAN_THREADS - 1) *total = (int)subs[t];
}

// The subproblems of bin b: sub_start[b] + j for j = 0 .. ceil(counts[b] / size) - 1, each (b, first sorted
// sample start[b] + j size, count min(size, counts[b] - j size)).
extern "C" __global__ void __launch_bounds__(NUFFT_THREADS)
mri_recon_nufft_subproblems(const int* __restrict__ counts, const int* __restrict__ start,
                            const int* __restrict__ sub_start, int n_bins, int size, int* __restrict__ sub_bin,
                            int* __restrict__ sub_first, int* __restrict__ sub_count) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_bins) return;
    const int count = counts[b], first = start[b], at = sub_start[b];
    for (int j = 0; j * size < count; ++j) {
        sub_bin[at + j] = b;
        sub_first[at + j] = first + j * size;
        sub_count[at + j] = min(size, count - j * size);
    }
}

// ---------------------------------------------------------------------------------------------------
// Kernel weights: psi(z0 + t), t = 0 .. W-1, once per sample and axis.

__device__ __forceinline__ float psi(float offset, float beta) {
    const float z = offset * (2.0f / NUFFT_W);
    return expf(beta * (sqrtf(fmaxf(0.0f, 1.0f - z * z)) - 1.0f));
}

__device__ __forceinline__ void weights(float z0, float beta, float* __restrict__ out) {
#pragma unroll
    for (int t = 0; t < NUFFT_W; ++t) out[t] = psi(z0 + (float)t, beta);
}

// Zero n floats of shared memory (16-byte aligned: the dynamic shared memory's start) with the whole block.
__device__ __forceinline__ void zero_shared(float* __restrict__ s, int n) {
    float4* __restrict__ s4 = reinterpret_cast<float4*>(s);
    for (int q = threadIdx.x; q < n / 4; q += blockDim.x) s4[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int q = 4 * (n / 4) + threadIdx.x; q < n; q += blockDim.x) s[q] = 0.0f;
}

// The tile's rows run along its last axis (axis 2 in 3D, axis 1 in 2D), ROW points each.
#if NUFFT_DIM == 3
#define ROW P2
#else
#define ROW P1
#endif
#define PAIRS (ROW / 2 + 1)  // aligned grid-cell pairs a row can touch

// Add the cells 2p and 2p + 1 of one grid row: (a_re, a_im) and (b_re, b_im). Fine sizes are even, so a pair
// never straddles the periodic wrap and starts 16 bytes aligned: one float4 atomic on sm_90.
__device__ __forceinline__ void pair_add(float2* __restrict__ cell, float a_re, float a_im, float b_re, float b_im) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4*>(cell), make_float4(a_re, a_im, b_re, b_im));
#else
    if (a_re != 0.0f || a_im != 0.0f) {
        atomicAdd(&cell[0].x, a_re);
        atomicAdd(&cell[0].y, a_im);
    }
    if (b_re != 0.0f || b_im != 0.0f) {
        atomicAdd(&cell[1].x, b_re);
        atomicAdd(&cell[1].y, b_im);
    }
#endif
}

// Tile flush shared by both spreading kernels: tiles (count of them, stride apart) summed into the grid,
// an aligned pair of row neighbours per thread and atomic (half the global atomics of one per cell); pairs
// nobody touched are skipped. Tile position t of a row sits at grid coordinate (o + t) mod n; the pair j
// of a row holds the positions 2j - (o & 1) and the one after it (a position outside the row adds zero).
__device__ __forceinline__ void flush(const float* __restrict__ tiles, int count, int stride, int coils,
                                      float2* __restrict__ grid, int o0, int o1, int o2, int n0, int n1,
                                      int n2) {
    const long long plane = (long long)n0 * n1 * n2;
    const int o_row = NUFFT_DIM == 3 ? o2 : o1;
    const int n_row = NUFFT_DIM == 3 ? n2 : n1;
    const int odd = o_row & 1;
    for (int q = threadIdx.x; q < (TILE / ROW) * PAIRS; q += blockDim.x) {
        const int r = q / PAIRS;
        const int t0 = 2 * (q % PAIRS) - odd;
        if (t0 >= ROW) continue;
#if NUFFT_DIM == 3
        int x0 = (o0 + r / P1) % n0;
        int x1 = (o1 + r % P1) % n1;
        x0 += x0 < 0 ? n0 : 0;
        x1 += x1 < 0 ? n1 : 0;
        const long long row = ((long long)x0 * n1 + x1) * n2;
#else
        int x0 = (o0 + r) % n0;
        x0 += x0 < 0 ? n0 : 0;
        const long long row = (long long)x0 * n1;
#endif
        int xr = (o_row + t0) % n_row;
        xr += xr < 0 ? n_row : 0;
        const long long cell = row + xr;
        const int at = r * ROW + t0;
        const bool has0 = t0 >= 0, has1 = t0 + 1 < ROW;
#pragma unroll
        for (int c = 0; c < NUFFT_COILS; ++c) {
            if (c < coils) {
                float a_re = 0.0f, a_im = 0.0f, b_re = 0.0f, b_im = 0.0f;
                for (int t = 0; t < count; ++t) {
                    const float* __restrict__ part = tiles + t * stride + (PARTS * c) * TILE;
                    if (has0) a_re += part[at];
                    if (has1) b_re += part[at + 1];
#if !NUFFT_REAL
                    if (has0) a_im += part[TILE + at];
                    if (has1) b_im += part[TILE + at + 1];
#endif
                }
                if (a_re != 0.0f || a_im != 0.0f || b_re != 0.0f || b_im != 0.0f)
                    pair_add(&grid[c * plane + cell], a_re, a_im, b_re, b_im);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Type 1 spreading. data: (coils, M) of the launch's coils; grid: (coils, n0, n1, n2) complex64, zeroed
// by the host before the first launch of a transform.

extern "C" __global__ void __launch_bounds__(NUFFT_THREADS)
mri_recon_nufft_spread(const int* __restrict__ sub_first, const int* __restrict__ sub_count,
                       const int* __restrict__ sub_bin, const int* __restrict__ perm,
                       const int* __restrict__ first, const float* __restrict__ z0,
                       const sample_t* __restrict__ data, long long M, int coils, float beta,
                       float2* __restrict__ grid, int n0, int n1, int n2, int nb1, int nb2) {
    extern __shared__ float tile[];  // [coil][part][TILE]
    const int s = blockIdx.x;
    const int begin = sub_first[s];
    const int count = sub_count[s];
    const int bin = sub_bin[s];
#if NUFFT_DIM == 3
    const int o2 = (bin % nb2) * NUFFT_BIN2 - HALO;
    const int o1 = ((bin / nb2) % nb1) * NUFFT_BIN1 - HALO;
    const int o0 = (bin / (nb2 * nb1)) * NUFFT_BIN0 - HALO;
#else
    const int o2 = 0;
    const int o1 = (bin % nb1) * NUFFT_BIN1 - HALO;
    const int o0 = (bin / nb1) * NUFFT_BIN0 - HALO;
#endif
    zero_shared(tile, NUFFT_COILS * PARTS * TILE);
    __syncthreads();

    for (int p = threadIdx.x; p < count; p += blockDim.x) {
        const long long idx = (long long)begin + p;
        const int m = perm[idx];
        float w1[NUFFT_W];
        const float z00 = z0[idx];
        weights(z0[M + idx], beta, w1);
        const int u0 = first[idx] - o0;
        const int u1 = first[M + idx] - o1;
#if NUFFT_DIM == 3
        float w2[NUFFT_W];
        weights(z0[2 * M + idx], beta, w2);
        const int u2 = first[2 * M + idx] - o2;
#endif
        sample_t v[NUFFT_COILS];
#pragma unroll
        for (int c = 0; c < NUFFT_COILS; ++c) {
            if (c < coils) {
                v[c] = data[c * M + m];
            } else {
#if NUFFT_REAL
                v[c] = 0.0f;
#else
                v[c] = make_float2(0.0f, 0.0f);
#endif
            }
        }
        for (int a = 0; a < NUFFT_W; ++a) {  // rolled: axis-0 weight computed here, no indexed array
            const float wa = psi(z00 + (float)a, beta);
#pragma unroll
            for (int b = 0; b < NUFFT_W; ++b) {
                const float wab = wa * w1[b];
#if NUFFT_DIM == 3
#pragma unroll
                for (int e = 0; e < NUFFT_W; ++e) {
                    const float wt = wab * w2[e];
                    const int cell = ((u0 + a) * P1 + (u1 + b)) * P2 + (u2 + e);
#else
                {
                    const float wt = wab;
                    const int cell = (u0 + a) * P1 + (u1 + b);
#endif
#pragma unroll
                    for (int c = 0; c < NUFFT_COILS; ++c) {
                        if (c < coils) {
#if NUFFT_REAL
                            atomicAdd(&tile[c * TILE + cell], wt * v[c]);
#else
                            atomicAdd(&tile[(2 * c) * TILE + cell], wt * v[c].x);
                            atomicAdd(&tile[(2 * c + 1) * TILE + cell], wt * v[c].y);
#endif
                        }
                    }
                }
            }
        }
    }
    __syncthreads();

    flush(tile, 1, 0, coils, grid, o0, o1, o2, n0, n1, n2);
}

// Warp-private tiles (see the header). Shared memory: nwarps tiles of NUFFT_COILS * PARTS * TILE floats,
// then nwarps * 3 * NUFFT_W floats of weights. Block: nwarps * 32 threads.
extern "C" __global__ void __launch_bounds__(NUFFT_THREADS)
mri_recon_nufft_spread_warp(const int* __restrict__ sub_first, const int* __restrict__ sub_count,
                            const int* __restrict__ sub_bin, const int* __restrict__ perm,
                            const int* __restrict__ first, const float* __restrict__ z0,
                            const sample_t* __restrict__ data, long long M, int coils, float beta,
                            float2* __restrict__ grid, int n0, int n1, int n2, int nb1, int nb2) {
    extern __shared__ float smem[];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    const int stride = NUFFT_COILS * PARTS * TILE;
    float* __restrict__ tile = smem + warp * stride;
    float* __restrict__ wts = smem + nwarps * stride + warp * (3 * NUFFT_W);
    const int sub = blockIdx.x;
    const int begin = sub_first[sub];
    const int count = sub_count[sub];
    const int bin = sub_bin[sub];
#if NUFFT_DIM == 3
    const int o2 = (bin % nb2) * NUFFT_BIN2 - HALO;
    const int o1 = ((bin / nb2) % nb1) * NUFFT_BIN1 - HALO;
    const int o0 = (bin / (nb2 * nb1)) * NUFFT_BIN0 - HALO;
#else
    const int o2 = 0;
    const int o1 = (bin % nb1) * NUFFT_BIN1 - HALO;
    const int o0 = (bin / nb1) * NUFFT_BIN0 - HALO;
#endif
    zero_shared(smem, nwarps * stride);
    __syncthreads();

    // Warp w takes samples w, w + nwarps, w + 2 nwarps, ... of the subproblem, 32 at a time: lane j loads
    // the j-th of a batch (its position, its origin in the tile and its data of every coil) into registers,
    // so the batch's global loads are in flight together; the warp then spreads the batch's samples one by
    // one, each broadcast from its lane by shuffles.
    for (int j0 = warp; j0 < count; j0 += 32 * nwarps) {
        const int mine = j0 + lane * nwarps;
        float zm[NUFFT_DIM];
        int bm = 0;
        sample_t vm[NUFFT_COILS];
#pragma unroll
        for (int c = 0; c < NUFFT_COILS; ++c) vm[c] = sample_t();
#pragma unroll
        for (int d = 0; d < NUFFT_DIM; ++d) zm[d] = 0.0f;
        if (mine < count) {
            const long long idx = (long long)begin + mine;
            const int m = perm[idx];
#pragma unroll
            for (int d = 0; d < NUFFT_DIM; ++d) zm[d] = z0[d * M + idx];
            bm = (first[idx] - o0) * (P1 * P2) + (first[M + idx] - o1) * P2;
#if NUFFT_DIM == 3
            bm += first[2 * M + idx] - o2;
#endif
#pragma unroll
            for (int c = 0; c < NUFFT_COILS; ++c) {
                if (c < coils) vm[c] = data[c * M + m];
            }
        }
        const int batch = min(32, (count - j0 + nwarps - 1) / nwarps);
        for (int s = 0; s < batch; ++s) {
            float zs[NUFFT_DIM];
#pragma unroll
            for (int d = 0; d < NUFFT_DIM; ++d) zs[d] = __shfl_sync(0xffffffffu, zm[d], s);
            if (lane < NUFFT_DIM * NUFFT_W) {
                const int d = lane / NUFFT_W;
                float zd = zs[0];
#pragma unroll
                for (int e = 1; e < NUFFT_DIM; ++e) zd = d == e ? zs[e] : zd;
                wts[lane] = psi(zd + (float)(lane - d * NUFFT_W), beta);
            }
            const int base = __shfl_sync(0xffffffffu, bm, s);
            sample_t v[NUFFT_COILS];
#pragma unroll
            for (int c = 0; c < NUFFT_COILS; ++c) {
                v[c] = sample_t();
                if (c < coils) {
#if NUFFT_REAL
                    v[c] = __shfl_sync(0xffffffffu, vm[c], s);
#else
                    v[c].x = __shfl_sync(0xffffffffu, vm[c].x, s);
                    v[c].y = __shfl_sync(0xffffffffu, vm[c].y, s);
#endif
                }
            }
            __syncwarp();
            // Rounds of RCHUNK stencil cells per lane: all loads of a round, then all stores. The cells of one
            // sample are distinct, so this is exact; the compiler cannot prove it, and would otherwise wait
            // for each load-add-store before the next load.
#pragma unroll
            for (int r0 = 0; r0 < ROUNDS; r0 += RCHUNK) {
                int cell[RCHUNK];
                float wt[RCHUNK];
                float old[RCHUNK][NUFFT_COILS * PARTS];
#pragma unroll
                for (int i = 0; i < RCHUNK; ++i) {
                    const int st = lane + 32 * (r0 + i);
                    cell[i] = -1;
                    wt[i] = 0.0f;
                    if (r0 + i < ROUNDS && st < STENCIL) {
#if NUFFT_DIM == 3
                        const int a = st / (NUFFT_W * NUFFT_W);
                        const int b = (st / NUFFT_W) % NUFFT_W;
                        const int e = st % NUFFT_W;
                        wt[i] = wts[a] * wts[NUFFT_W + b] * wts[2 * NUFFT_W + e];
                        cell[i] = base + a * (P1 * P2) + b * P2 + e;
#else
                        const int a = st / NUFFT_W;
                        const int b = st % NUFFT_W;
                        wt[i] = wts[a] * wts[NUFFT_W + b];
                        cell[i] = base + a * P1 + b;
#endif
                    }
                }
#pragma unroll
                for (int i = 0; i < RCHUNK; ++i) {
#pragma unroll
                    for (int c = 0; c < NUFFT_COILS * PARTS; ++c) {
                        if (cell[i] >= 0 && c < coils * PARTS) old[i][c] = tile[c * TILE + cell[i]];
                    }
                }
#pragma unroll
                for (int i = 0; i < RCHUNK; ++i) {
#pragma unroll
                    for (int c = 0; c < NUFFT_COILS; ++c) {
                        if (cell[i] >= 0 && c < coils) {
#if NUFFT_REAL
                            tile[c * TILE + cell[i]] = fmaf(wt[i], v[c], old[i][c]);
#else
                            tile[(2 * c) * TILE + cell[i]] = fmaf(wt[i], v[c].x, old[i][2 * c]);
                            tile[(2 * c + 1) * TILE + cell[i]] = fmaf(wt[i], v[c].y, old[i][2 * c + 1]);
#endif
                        }
                    }
                }
            }
            __syncwarp();
        }
    }
    __syncthreads();
    flush(smem, nwarps, stride, coils, grid, o0, o1, o2, n0, n1, n2);
}

// ---------------------------------------------------------------------------------------------------
// Type 2 interpolation: out[c, perm[idx]] = sum_i grid[c, i] psi(i - g). out: (coils, M) of the launch.

extern "C" __global__ void __launch_bounds__(NUFFT_THREADS)
mri_recon_nufft_interp(const int* __restrict__ perm, const int* __restrict__ first,
                       const float* __restrict__ z0, const float2* __restrict__ grid, long long M, int coils,
                       float beta, float2* __restrict__ out, int n0, int n1, int n2) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= M) return;
    float w1[NUFFT_W];
    int i1[NUFFT_W];
    const float z00 = z0[idx];
    weights(z0[M + idx], beta, w1);
    const int f0 = first[idx], f1 = first[M + idx];
#pragma unroll
    for (int t = 0; t < NUFFT_W; ++t) {
        int x = f1 + t;
        x += x < 0 ? n1 : 0;
        x -= x >= n1 ? n1 : 0;
        i1[t] = x;
    }
#if NUFFT_DIM == 3
    float w2[NUFFT_W];
    int i2[NUFFT_W];
    weights(z0[2 * M + idx], beta, w2);
    const int f2 = first[2 * M + idx];
#pragma unroll
    for (int t = 0; t < NUFFT_W; ++t) {
        int x = f2 + t;
        x += x < 0 ? n2 : 0;
        x -= x >= n2 ? n2 : 0;
        i2[t] = x;
    }
#endif
    float2 acc[NUFFT_COILS];
#pragma unroll
    for (int c = 0; c < NUFFT_COILS; ++c) acc[c] = make_float2(0.0f, 0.0f);
    const long long plane = (long long)n0 * n1 * n2;
    for (int a = 0; a < NUFFT_W; ++a) {  // rolled: axis-0 weight and index computed here
        const float wa = psi(z00 + (float)a, beta);
        int x0 = f0 + a;
        x0 += x0 < 0 ? n0 : 0;
        x0 -= x0 >= n0 ? n0 : 0;
#pragma unroll
        for (int b = 0; b < NUFFT_W; ++b) {
            const float wab = wa * w1[b];
            const long long row = ((long long)x0 * n1 + i1[b]) * n2;
#if NUFFT_DIM == 3
#pragma unroll
            for (int e = 0; e < NUFFT_W; ++e) {
                const float wt = wab * w2[e];
                const long long cell = row + i2[e];
#else
            {
                const float wt = wab;
                const long long cell = row;
#endif
#pragma unroll
                for (int c = 0; c < NUFFT_COILS; ++c) {
                    if (c < coils) {
                        const float2 g = __ldg(&grid[c * plane + cell]);
                        acc[c].x = fmaf(wt, g.x, acc[c].x);
                        acc[c].y = fmaf(wt, g.y, acc[c].y);
                    }
                }
            }
        }
    }
    const int m = perm[idx];
#pragma unroll
    for (int c = 0; c < NUFFT_COILS; ++c) {
        if (c < coils) out[c * M + m] = acc[c];
    }
}

// ---------------------------------------------------------------------------------------------------
// Deconvolution and mode shift. ker: 1/Psi per voxel index, the three axes concatenated (N0 + N1 + N2
// floats; in 2D N2 = 1 and its factor 1). Voxel rows (j0, j1) run over blockIdx.x, the last axis over
// blockIdx.y * blockDim.x + threadIdx.x; every coil of the launch in the same thread.

extern "C" __global__ void __launch_bounds__(NUFFT_THREADS)
mri_recon_nufft_deconv_adjoint(const float2* __restrict__ grid, float2* __restrict__ out,
                               const float* __restrict__ ker, int coils, int N0, int N1, int N2,
                               int n0, int n1, int n2) {
    const int jl = blockIdx.y * blockDim.x + threadIdx.x;
    const int last = NUFFT_DIM == 3 ? N2 : N1;
    if (jl >= last) return;
    int j0, j1;
    if (NUFFT_DIM == 3) {
        j0 = blockIdx.x / N1;
        j1 = blockIdx.x % N1;
    } else {
        j0 = blockIdx.x;
        j1 = jl;
    }
    int x0 = j0 - N0 / 2;
    x0 += x0 < 0 ? n0 : 0;
    int x1 = j1 - N1 / 2;
    x1 += x1 < 0 ? n1 : 0;
    float factor = ker[j0] * ker[N0 + j1];
    long long src, dst;
    if (NUFFT_DIM == 3) {
        int x2 = jl - N2 / 2;
        x2 += x2 < 0 ? n2 : 0;
        factor *= ker[N0 + N1 + jl];
        src = ((long long)x0 * n1 + x1) * n2 + x2;
        dst = ((long long)j0 * N1 + j1) * N2 + jl;
    } else {
        src = (long long)x0 * n1 + x1;
        dst = (long long)j0 * N1 + j1;
    }
    const long long plane = (long long)n0 * n1 * (NUFFT_DIM == 3 ? n2 : 1);
    const long long voxels = (long long)N0 * N1 * (NUFFT_DIM == 3 ? N2 : 1);
    for (int c = 0; c < coils; ++c) {
        const float2 g = grid[c * plane + src];
        out[c * voxels + dst] = make_float2(g.x * factor, g.y * factor);
    }
}

// The fine grid of type 2: image / Psi at slot l mod n, zero elsewhere; every cell written. Fine-grid
// rows over blockIdx.x, the last fine axis over blockIdx.y * blockDim.x + threadIdx.x.
extern "C" __global__ void __launch_bounds__(NUFFT_THREADS)
mri_recon_nufft_deconv_forward(const float2* __restrict__ image, float2* __restrict__ grid,
                               const float* __restrict__ ker, int coils, int N0, int N1, int N2,
                               int n0, int n1, int n2) {
    const int xl = blockIdx.y * blockDim.x + threadIdx.x;
    const int last = NUFFT_DIM == 3 ? n2 : n1;
    if (xl >= last) return;
    int x0, x1;
    if (NUFFT_DIM == 3) {
        x0 = blockIdx.x / n1;
        x1 = blockIdx.x % n1;
    } else {
        x0 = blockIdx.x;
        x1 = xl;
    }
    // fine index x -> voxel j = l + floor(N/2) with l = x (x < N - N/2) or x - n (x >= n - N/2), else none
    int j0 = x0 < N0 - N0 / 2 ? x0 + N0 / 2 : (x0 >= n0 - N0 / 2 ? x0 - n0 + N0 / 2 : -1);
    int j1 = x1 < N1 - N1 / 2 ? x1 + N1 / 2 : (x1 >= n1 - N1 / 2 ? x1 - n1 + N1 / 2 : -1);
    int j2 = 0;
    long long dst = (long long)x0 * n1 + x1;
    if (NUFFT_DIM == 3) {
        j2 = xl < N2 - N2 / 2 ? xl + N2 / 2 : (xl >= n2 - N2 / 2 ? xl - n2 + N2 / 2 : -1);
        dst = dst * n2 + xl;
    }
    const bool inside = j0 >= 0 && j1 >= 0 && j2 >= 0;
    const long long plane = (long long)n0 * n1 * (NUFFT_DIM == 3 ? n2 : 1);
    const long long voxels = (long long)N0 * N1 * (NUFFT_DIM == 3 ? N2 : 1);
    float factor = 0.0f;
    long long src = 0;
    if (inside) {
        factor = ker[j0] * ker[N0 + j1];
        src = (long long)j0 * N1 + j1;
        if (NUFFT_DIM == 3) {
            factor *= ker[N0 + N1 + j2];
            src = src * N2 + j2;
        }
    }
    for (int c = 0; c < coils; ++c) {
        float2 v = make_float2(0.0f, 0.0f);
        if (inside) {
            const float2 x = image[c * voxels + src];
            v = make_float2(x.x * factor, x.y * factor);
        }
        grid[c * plane + dst] = v;
    }
}
