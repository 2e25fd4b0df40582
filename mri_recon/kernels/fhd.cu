// F^H d by exact direct summation: the fast rungs of the ladder ("packed", "mirror", "multi", "recur"), the
// Toeplitz point-spread function (real weights, FHD_REAL 1) and F^H d with off-resonance (FHD_OFFRES 1). The
// seed rungs live in fhd_seed.cu.
//
// Mathematics (schema v1, mri_recon_phase.cuh). Voxel j of an axis of size N sits at r = (j - c)/N = Q/(2N)
// with the centre c = N / 2 (floor) and the integer Q = 2j - 2c, and F^H d_j = sum_m d_m exp(+i 2 pi k_m . r_j). The phase is kept in fixed-point turns:
// each sample carries K_d = round(2^32 frac(k_d / (2 N_d))) (host side, float64), so that
//     T = sum_d K_d Q_d  (mod 2^32, plain unsigned arithmetic)
// is the phase k . r in units of 2^-32 turns, exact up to the rounding of K (|error| <= 2^-33 sum_d N_d
// turns, 4.5e-8 turns for 3 x 128). Wrapping modulo 2^32 *is* the reduction to one turn, so there is no
// large argument and no cancellation. phasor() (mri_recon_phase.cuh) turns T into a sine and cosine on the
// special function unit, within its accurate range.
//
// Work assignment. Voxels are visited along lines of the last axis (y in 2D, z in 3D). Mirror pairing
// ("mirror", "multi", "recur"): r and -r have conjugate phases, so one phase evaluation serves the voxel
// j and its mirror 2c - j (per axis: N - j for even N, N - 1 - j for odd N). With U = sum d c and
// W = sum d s (c, s = cos, sin of the phase of j):
//     F^H d_j = U + i W,      F^H d_mirror = U - i W,
// four FMAs per coil for both voxels. The host lists one representative line per mirror pair (flag 1) and
// every line without a partner or that is its own mirror (flag 0). On a line of L voxels with centre c the
// positions run over [0, 2c] inclusive (L + 1 positions for even L, L for odd L): position p computes voxel p
// of the line (if p < L) and, on a paired line, voxel 2c - p of the mirror line (if 2c - p < L, i.e.
// p >= 1 for even L, every p for odd L). For even L position L reaches voxel 0 of the mirror line, whose
// own partner does not exist. "packed" lists every line unpaired.
//
// Each thread owns FHD_VOX positions p = t, t + P, ..., t + (FHD_VOX - 1) P of one line (P = threads per
// line). Their phases differ by the step D = K_last * 2P: "multi" (FHD_RECUR 0) evaluates each one with the
// special function unit; "recur" (FHD_RECUR 1) evaluates exp(i 2 pi D) once and walks the positions with
// the angle-addition recurrence e(p + P) = e(p) e(P) (complex multiply on the FMA pipe), re-seeded from the
// exact fixed-point phase at every sample, so at most FHD_VOX - 1 steps accumulate error.
//
// Samples stream through __constant__ memory as an array of structures kdata (trajectory + every coil of
// the launch), one chunk per launch (host loop, last chunk shorter; only upload_constant fills it). A block
// is blockDim.x voxel threads times blockDim.y (a power of two) sample slices: row y sums its share of
// the chunk, the rows are added by a pairwise tree in shared memory, and row 0 adds the result to the
// output (first chunk: overwrites it). When the grid alone would leave multiprocessors idle, blockIdx.y
// splits the chunk further into slices that write separate partial images, which the host adds at the end
// (deterministic, no atomics). Several coils share each phase: FHD_COILS coils per launch, the host loops
// over groups.
//
// Off-resonance (FHD_OFFRES 1): F^H d_n = sum_m d_m exp(+i 2 pi (k_m . r_n + f_n t_m)), with the field map
// F_n = round(2^16 f_n) (int, f in Hz, C order: the kernel argument field_map) and the sample time
// tau_m = round(2^32 t_m) (int, |t_m| < 1/2 s: the host centres the times) in the word after the trajectory.
// f t in fixed-point turns is bits 16..47 of F_n tau_m (offres_turns, mri_recon_phase.cuh), so the reduction
// to one turn stays the exact integer wrap-around. The quantization of F costs <= 2^-17 |t| turns (7.6e-7
// turns at |t| = 0.1 s), that of tau <= 2^-33 |f| turns. Two ways to evaluate it:
//   - FHD_RECUR 0 ("phasor", any times): the field map breaks the mirror symmetry, so the host passes the
//     unpaired line list (every flag 0) and each position evaluates its own phase k . r + f t with phasor();
//     its accumulator is the complex sum itself (2 floats per position and coil, not 4), so a thread holds
//     more positions for the same registers (configs.offres_positions).
//   - FHD_RECUR 1 ("recur", sample times in runs of one uniform step dtau): the phase splits as
//     exp(i 2 pi (k . r + f t)) = exp(i 2 pi k . r) E(t), E = exp(i 2 pi f t). exp(i 2 pi k . r) comes from
//     mirror pairs and the angle-addition recurrence exactly as in the plain "recur" kernel (one phasor()
//     for the voxel and its mirror, whose k . r phases are opposite), on the paired line list. E of the
//     voxel (E_o) and of its mirror (E_m, a different f) follows the samples: where the step from the
//     previous sample is dtau, E(m) = E(m - 1) R with R = exp(i 2 pi f dtau) = 1 + r per voxel (the kernel
//     argument steps holds r in complex64, computed by the host in float64; 1 + r keeps R's rounding error
//     relative to the small r). E is re-seeded from the exact fixed-point phase (offres_turns + phasor) at
//     the first sample of each row's share and wherever bit 0 of the record's flags word is set: the host
//     sets it where the step is not dtau (a new readout) and at every configs.OFFRES_RESEED-th sample, which
//     bounds the float32 drift. Where a run's times deviate from its uniform grid by more than
//     |f| |t_m - t_m0 - (m - m0) dtau| <= 2^-20 turns allows, the host flags every sample of it (each
//     re-seeded: exact, as in FHD_RECUR 0); with fewer than 8 samples per run on average it launches
//     FHD_RECUR 0 instead (gpu_offres.time_runs). Two accumulations (FHD_ROTATE):
//       0: the phasors walk: P_o = exp(+i theta) E_o, P_m = exp(-i theta) E_m (4 FMAs each, theta = 2 pi k . r),
//          U += d P_o and W += d P_m (8 FMAs per coil and position), U and W the sums of the voxel and of
//          its mirror. Per position and sample 20 + 8 FHD_COILS FMAs (recurrence 4, E_o and E_m 8,
//          P_o and P_m 8): for several coils.
//       1: the sums rotate (Horner): H holds sum_j d_j exp(i theta_j) E(j) / E(m) in the frame of the last
//          sample m, so H <- H conj(R) + d exp(+-i theta) (the voxel with +, its mirror with -, sharing
//          d cos and d sin: 6 + 8 FMAs per coil), and at a re-seed and at the end of the share
//          U += E(m) H exactly, H = 0. Per position and sample 4 + 14 FHD_COILS FMAs: for one coil.
//
// Compile-time sizes (-D):
//   FHD_DIM     2 or 3
//   FHD_COILS   coils per launch (1..8); sample data complex (float2), or real (float) when FHD_REAL = 1
//   FHD_VOX     positions per thread (1..8)
//   FHD_RECUR   0: every position's phase on the special function unit; 1: angle-addition recurrence
//   FHD_REAL    1: real sample data (the PSF weights), U and W real
//   FHD_OFFRES  1: exact off-resonance correction (needs FHD_REAL 0), above
//   FHD_ROTATE  0 or 1 (FHD_OFFRES 1, FHD_RECUR 1 only; default 0): the accumulation, above
//   FHD_WORDS   32-bit words per record (checked against the struct the host packs)
//   FHD_CHUNK   records in the constant array (FHD_CHUNK * 4 * FHD_WORDS <= 65536)
//   FHD_MAX_THREADS  threads per block the launch bounds allow (512, or 256 for many accumulators)
//   FHD_FRAMES  1: several frames (a time series) in one launch, the records read from global memory instead of
//               __constant__ (below); default 0
//
// Frames (FHD_FRAMES 1): blockIdx.z is frame z. Its records are records[frame_start[z] .. frame_start[z + 1])
// (global memory: every thread of a warp reads the same record, one broadcast load), all of them in the one
// launch (the count and first arguments are unused: the launch overwrites), and its blocks write
// out + z * gridDim.y * coils * voxels, so out is (frames, slices, coils, voxels).
//
// Record layout (32-bit words): K_0 .. K_{D-1} (unsigned fixed point), then with FHD_OFFRES = 1 the time word
// tau_m and, with FHD_RECUR = 1 too, the flags word (bit 0: re-seed E here), then zero padding to an even
// word count for complex data (float2 alignment), then the data: FHD_COILS float2 (re, im) or FHD_COILS float.

#include "mri_recon_phase.cuh"

#ifndef FHD_DIM
#error "FHD_DIM must be defined"
#endif
#if FHD_DIM != 2 && FHD_DIM != 3
#error "FHD_DIM must be 2 or 3"
#endif
#if !defined(FHD_COILS) || !defined(FHD_VOX) || !defined(FHD_RECUR) || !defined(FHD_REAL)
#error "FHD_COILS, FHD_VOX, FHD_RECUR and FHD_REAL must be defined"
#endif
#if !defined(FHD_WORDS) || !defined(FHD_CHUNK)
#error "FHD_WORDS and FHD_CHUNK must be defined"
#endif
#ifndef FHD_OFFRES
#define FHD_OFFRES 0
#endif
#if FHD_OFFRES != 0 && FHD_OFFRES != 1
#error "FHD_OFFRES must be 0 or 1"
#endif
#if FHD_OFFRES && FHD_REAL
#error "FHD_OFFRES 1 needs FHD_REAL 0 (complex samples)"
#endif
#ifndef FHD_ROTATE
#define FHD_ROTATE 0
#endif
#if FHD_ROTATE != 0 && FHD_ROTATE != 1
#error "FHD_ROTATE must be 0 or 1"
#endif
#if FHD_ROTATE && !(FHD_OFFRES && FHD_RECUR)
#error "FHD_ROTATE 1 needs FHD_OFFRES 1 and FHD_RECUR 1 (the time recurrence)"
#endif
#if FHD_COILS < 1 || FHD_COILS > 8 || FHD_VOX < 1 || FHD_VOX > 8
#error "FHD_COILS and FHD_VOX must lie in 1..8"
#endif

#ifndef FHD_FRAMES
#define FHD_FRAMES 0
#endif
#if FHD_FRAMES != 0 && FHD_FRAMES != 1
#error "FHD_FRAMES must be 0 or 1"
#endif
#if FHD_FRAMES && FHD_OFFRES
#error "FHD_FRAMES 1 takes no off-resonance (FHD_OFFRES 0)"
#endif

#ifndef FHD_MAX_THREADS
#error "FHD_MAX_THREADS (threads per block the launch bounds allow) must be defined"
#endif

#define FHD_SINGLE (FHD_OFFRES && !FHD_RECUR)     // off-resonance by phasor: one voxel per position
#define FHD_TIME_RECUR (FHD_OFFRES && FHD_RECUR)  // off-resonance by the time recurrence: mirror pairs

#if FHD_REAL
typedef float sample_t;
#define FHD_HEADER (FHD_DIM + FHD_OFFRES)
#else
typedef float2 sample_t;
#define FHD_HEADER ((FHD_DIM + FHD_OFFRES + FHD_TIME_RECUR + 1) / 2 * 2)
#endif

struct kdata {
    unsigned k[FHD_DIM];                   // K_d: k_d / (2 N_d) in turns, 2^32 = one turn
#if FHD_HEADER > FHD_DIM
    int reserved[FHD_HEADER - FHD_DIM];    // FHD_OFFRES 1: [0] tau_m = round(2^32 t_m), [1] (FHD_RECUR 1) flags;
#endif                                     // else zero padding
    sample_t d[FHD_COILS];                 // the samples of the launch's coils
};
static_assert(sizeof(kdata) == 4 * FHD_WORDS, "kdata does not match the host's record layout");
static_assert(FHD_CHUNK * sizeof(kdata) <= 65536, "the chunk exceeds the 64 KB constant bank");

__constant__ kdata c_k[FHD_CHUNK];

#if FHD_REAL || FHD_SINGLE
#define FHD_ACC (2 * FHD_VOX * FHD_COILS)  // U, W real; or (FHD_SINGLE) U complex, the sum itself
#else
#define FHD_ACC (4 * FHD_VOX * FHD_COILS)  // U, W complex (FHD_TIME_RECUR: the voxel's and its mirror's sums)
#endif

// acc + a b (complex)
__device__ __forceinline__ float2 mri_recon_cmac(float2 acc, float2 a, float2 b) {
    return make_float2(fmaf(a.x, b.x, fmaf(-a.y, b.y, acc.x)), fmaf(a.x, b.y, fmaf(a.y, b.x, acc.y)));
}

#if FHD_TIME_RECUR
// E (1 + r): one step of E = exp(i 2 pi f t) along the samples (r = exp(i 2 pi f dtau) - 1)
__device__ __forceinline__ float2 mri_recon_walk(float2 e, float2 r) {
    return make_float2(fmaf(e.x, r.x, fmaf(-e.y, r.y, e.x)), fmaf(e.y, r.x, fmaf(e.x, r.y, e.y)));
}

// exp(+i 2 pi f t) from F = round(2^16 f) and tau = round(2^32 t), exact fixed point then phasor()
__device__ __forceinline__ float2 mri_recon_time_phasor(int F, int tau) {
    float2 e;
    phasor(offres_turns(F, tau) + 0x100u, e.x, e.y);
    return e;
}
#endif

#if FHD_TIME_RECUR && FHD_ROTATE
// h conj(R) + a: the rotating sum moved one sample on (R = exp(i 2 pi f dtau)), plus the new term
__device__ __forceinline__ float2 mri_recon_rotate(float2 h, float2 R, float2 a) {
    return make_float2(fmaf(h.x, R.x, fmaf(h.y, R.y, a.x)), fmaf(h.y, R.x, fmaf(-h.x, R.y, a.y)));
}

// U += E_o(tau) HU, W += E_m(tau) HW, then HU = HW = 0: the rotating sums, in the frame of the sample time tau,
// leave it exactly (one phasor per voxel)
__device__ __forceinline__ void mri_recon_flush(int tau, const int (&fo)[FHD_VOX], const int (&fm)[FHD_VOX],
                                                float2 (&U)[FHD_VOX][FHD_COILS], float2 (&W)[FHD_VOX][FHD_COILS],
                                                float2 (&HU)[FHD_VOX][FHD_COILS],
                                                float2 (&HW)[FHD_VOX][FHD_COILS]) {
#pragma unroll
    for (int v = 0; v < FHD_VOX; ++v) {
        const float2 eo = mri_recon_time_phasor(fo[v], tau);
        const float2 em = mri_recon_time_phasor(fm[v], tau);
#pragma unroll
        for (int c = 0; c < FHD_COILS; ++c) {
            U[v][c] = mri_recon_cmac(U[v][c], eo, HU[v][c]);
            W[v][c] = mri_recon_cmac(W[v][c], em, HW[v][c]);
            HU[v][c] = make_float2(0.0f, 0.0f);
            HW[v][c] = make_float2(0.0f, 0.0f);
        }
    }
}
#endif

// out       complex64 (slices, coils, voxels), C order, interleaved (re, im); blocks of grid row
//           blockIdx.y write slice blockIdx.y, coils coil0 .. coil0 + FHD_COILS - 1
// lines     int32 (n_lines, 3): jx, jy (0 in 2D), paired flag
// coils     coils of out (the C of its shape)
// count     samples in this chunk (records c_k[0 .. count))
// first     != 0: this is the first chunk, the output is overwritten instead of accumulated
// field_map FHD_OFFRES 1: int32 (voxels,) F_n = round(2^16 f_n), f in Hz, C order; else unused (pass NULL)
// steps     FHD_OFFRES 1 and FHD_RECUR 1: complex64 (voxels,) r_n = exp(i 2 pi f_n dtau) - 1, C order; else
//           unused (pass NULL)
extern "C" __global__ void __launch_bounds__(FHD_MAX_THREADS) mri_recon_fhd(
    float2* __restrict__ out, const int* __restrict__ lines, int n_lines, int per_line, int nx, int ny,
    int nz, int count, int coils, int coil0, int first, const int* __restrict__ field_map,
    const float2* __restrict__ steps
#if FHD_FRAMES
    , const kdata* __restrict__ records, const int* __restrict__ frame_start
#endif
    ) {
    // (blockDim.y / 2) x blockDim.x slots of FHD_ACC + 1 floats (odd stride: no bank conflicts)
    extern __shared__ float red[];
#if !FHD_OFFRES
    (void)field_map;
#endif
#if !FHD_TIME_RECUR
    (void)steps;
#endif

#if FHD_FRAMES
    // frame blockIdx.z: its own records, all in this launch, and its own slices of out
    const kdata* __restrict__ frame_k = records + frame_start[blockIdx.z];
    count = frame_start[blockIdx.z + 1] - frame_start[blockIdx.z];
    first = 1;
#endif
    const long long flat = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long item_ll = flat / per_line;
    const bool active = item_ll < n_lines;
    const int item = active ? (int)item_ll : 0;
    const int t0 = (int)(flat - item_ll * per_line);
    const int jx = lines[3 * item];
    const int jy = lines[3 * item + 1];
    const bool paired = lines[3 * item + 2] != 0;
    const int cx2 = mri_recon_twice_centre(nx);
#if FHD_DIM == 3
    const int len = nz;
    const int cy2 = mri_recon_twice_centre(ny);
    const unsigned q0 = (unsigned)(2 * jx - cx2);
    const unsigned q1 = (unsigned)(2 * jy - cy2);
    const long long line_a = ((long long)jx * ny + jy) * nz;                  // this line's first voxel
    const long long line_b = ((long long)(cx2 - jx) * ny + (cy2 - jy)) * nz;  // the mirror line's (paired only)
#else
    const int len = ny;
    const unsigned q0 = (unsigned)(2 * jx - cx2);
    const long long line_a = (long long)jx * ny;
    const long long line_b = (long long)(cx2 - jx) * ny;
    (void)jy;
#endif
    const int c2 = mri_recon_twice_centre(len);      // position p's mirror voxel on the partner line: c2 - p
    const unsigned qlast = (unsigned)(2 * t0 - c2);  // position t0 of the line
    const unsigned qstep = (unsigned)(2 * per_line);  // between this thread's positions
#if FHD_SINGLE
    // this thread's positions' off-resonance (Hz); 0 past the end of the line (those sums are discarded)
    int fv[FHD_VOX];
#pragma unroll
    for (int v = 0; v < FHD_VOX; ++v) {
        const int p = t0 + v * per_line;
        fv[v] = (active && p < len) ? field_map[line_a + p] : 0;
    }
#elif FHD_TIME_RECUR
    // per position the field and the step r (or, rotating, R = 1 + r) of its voxel (o) and of its mirror
    // voxel (m); 0 where the voxel does not exist (those sums are discarded)
    int fo[FHD_VOX], fm[FHD_VOX];
    float2 ro[FHD_VOX], rm[FHD_VOX];
#pragma unroll
    for (int v = 0; v < FHD_VOX; ++v) {
        const int p = t0 + v * per_line;
        const bool own = active && p < len;
        const bool mirror = active && paired && p <= c2 && c2 - p < len;
        fo[v] = own ? field_map[line_a + p] : 0;
        ro[v] = own ? steps[line_a + p] : make_float2(0.0f, 0.0f);
        fm[v] = mirror ? field_map[line_b + (c2 - p)] : 0;
        rm[v] = mirror ? steps[line_b + (c2 - p)] : make_float2(0.0f, 0.0f);
#if FHD_ROTATE
        ro[v].x += 1.0f;
        rm[v].x += 1.0f;
#endif
    }
#endif

    // this row's share of the chunk: part blockIdx.y * blockDim.y + threadIdx.y of gridDim.y * blockDim.y
    const int parts = (int)(gridDim.y * blockDim.y);
    const int share = (count + parts - 1) / parts;
    const int m_begin = min(count, (int)(blockIdx.y * blockDim.y + threadIdx.y) * share);
    const int m_end = active ? min(count, m_begin + share) : m_begin;

#if FHD_REAL
    float U[FHD_VOX][FHD_COILS], W[FHD_VOX][FHD_COILS];
#elif FHD_SINGLE
    float2 U[FHD_VOX][FHD_COILS];  // sum_m d_m exp(+i theta): no mirror, so no separate cosine and sine sums
#else
    float2 U[FHD_VOX][FHD_COILS], W[FHD_VOX][FHD_COILS];
#endif
#if FHD_TIME_RECUR && FHD_ROTATE
    float2 HU[FHD_VOX][FHD_COILS], HW[FHD_VOX][FHD_COILS];  // the rotating sums of the voxel and of its mirror
    int prev_tau = 0;                                       // the sample time of their frame
#elif FHD_TIME_RECUR
    float2 eo[FHD_VOX], em[FHD_VOX];  // E = exp(i 2 pi f t_m) of the voxel and of its mirror
#endif
#pragma unroll
    for (int v = 0; v < FHD_VOX; ++v) {
#pragma unroll
        for (int c = 0; c < FHD_COILS; ++c) {
#if FHD_REAL
            U[v][c] = 0.0f;
            W[v][c] = 0.0f;
#else
            U[v][c] = make_float2(0.0f, 0.0f);
#if !FHD_SINGLE
            W[v][c] = make_float2(0.0f, 0.0f);
#endif
#endif
#if FHD_TIME_RECUR && FHD_ROTATE
            HU[v][c] = make_float2(0.0f, 0.0f);
            HW[v][c] = make_float2(0.0f, 0.0f);
#endif
        }
    }

    for (int m = m_begin; m < m_end; ++m) {
#if FHD_FRAMES
        const kdata& kd = frame_k[m];
#else
        const kdata& kd = c_k[m];
#endif
#if FHD_DIM == 3
        const unsigned base = kd.k[0] * q0 + kd.k[1] * q1 + kd.k[2] * qlast + 0x100u;
#else
        const unsigned base = kd.k[0] * q0 + kd.k[1] * qlast + 0x100u;
#endif
        float cv[FHD_VOX], sv[FHD_VOX];
#if FHD_SINGLE
        const int tau = kd.reserved[0];
        const unsigned step = kd.k[FHD_DIM - 1] * qstep;
#pragma unroll
        for (int v = 0; v < FHD_VOX; ++v) phasor(base + (unsigned)v * step + offres_turns(fv[v], tau), cv[v], sv[v]);
#else
        phasor(base, cv[0], sv[0]);
#if FHD_VOX > 1
        const unsigned step = kd.k[FHD_DIM - 1] * qstep;
#if FHD_RECUR
        float cs, ss;
        phasor(step + 0x100u, cs, ss);
#pragma unroll
        for (int v = 1; v < FHD_VOX; ++v) {
            cv[v] = cv[v - 1] * cs - sv[v - 1] * ss;
            sv[v] = sv[v - 1] * cs + cv[v - 1] * ss;
        }
#else
#pragma unroll
        for (int v = 1; v < FHD_VOX; ++v) phasor(base + (unsigned)v * step, cv[v], sv[v]);
#endif
#endif
#endif  // FHD_SINGLE

#if FHD_TIME_RECUR && FHD_ROTATE
        const int tau = kd.reserved[0];
        if (m != m_begin && kd.reserved[1] != 0) mri_recon_flush(prev_tau, fo, fm, U, W, HU, HW);
        prev_tau = tau;
#elif FHD_TIME_RECUR
        const int tau = kd.reserved[0];
        if (m == m_begin || kd.reserved[1] != 0) {
#pragma unroll
            for (int v = 0; v < FHD_VOX; ++v) {
                eo[v] = mri_recon_time_phasor(fo[v], tau);
                em[v] = mri_recon_time_phasor(fm[v], tau);
            }
        } else {
#pragma unroll
            for (int v = 0; v < FHD_VOX; ++v) {
                eo[v] = mri_recon_walk(eo[v], ro[v]);
                em[v] = mri_recon_walk(em[v], rm[v]);
            }
        }
        float2 po[FHD_VOX], pm[FHD_VOX];  // exp(+i theta) E_o and exp(-i theta) E_m
#pragma unroll
        for (int v = 0; v < FHD_VOX; ++v) {
            po[v] = make_float2(fmaf(cv[v], eo[v].x, -sv[v] * eo[v].y), fmaf(cv[v], eo[v].y, sv[v] * eo[v].x));
            pm[v] = make_float2(fmaf(cv[v], em[v].x, sv[v] * em[v].y), fmaf(cv[v], em[v].y, -sv[v] * em[v].x));
        }
#endif
#pragma unroll
        for (int c = 0; c < FHD_COILS; ++c) {
            const sample_t d = kd.d[c];
#pragma unroll
            for (int v = 0; v < FHD_VOX; ++v) {
#if FHD_REAL
                U[v][c] += d * cv[v];
                W[v][c] += d * sv[v];
#elif FHD_SINGLE
                U[v][c].x += d.x * cv[v] - d.y * sv[v];
                U[v][c].y += d.y * cv[v] + d.x * sv[v];
#elif FHD_TIME_RECUR && FHD_ROTATE
                const float ux = d.x * cv[v];
                const float uy = d.y * cv[v];
                const float2 a = make_float2(fmaf(-d.y, sv[v], ux), fmaf(d.x, sv[v], uy));  // d exp(+i theta)
                const float2 b = make_float2(fmaf(d.y, sv[v], ux), fmaf(-d.x, sv[v], uy));  // d exp(-i theta)
                HU[v][c] = mri_recon_rotate(HU[v][c], ro[v], a);
                HW[v][c] = mri_recon_rotate(HW[v][c], rm[v], b);
#elif FHD_TIME_RECUR
                U[v][c] = mri_recon_cmac(U[v][c], d, po[v]);
                W[v][c] = mri_recon_cmac(W[v][c], d, pm[v]);
#else
                U[v][c].x += d.x * cv[v];
                U[v][c].y += d.y * cv[v];
                W[v][c].x += d.x * sv[v];
                W[v][c].y += d.y * sv[v];
#endif
            }
        }
    }
#if FHD_TIME_RECUR && FHD_ROTATE
    if (m_end > m_begin) mri_recon_flush(prev_tau, fo, fm, U, W, HU, HW);
#endif

    // the rows' sums meet in row 0 by a pairwise tree in shared memory (fixed order: deterministic);
    // blockDim.y is a power of two
    if (blockDim.y > 1) {
        const int y = threadIdx.y;
        for (int half = blockDim.y >> 1; half >= 1; half >>= 1) {
            if (y >= half && y < 2 * half) {
                float* slot = red + ((y - half) * blockDim.x + threadIdx.x) * (FHD_ACC + 1);
                int a = 0;
#pragma unroll
                for (int v = 0; v < FHD_VOX; ++v) {
#pragma unroll
                    for (int c = 0; c < FHD_COILS; ++c) {
#if FHD_REAL
                        slot[a++] = U[v][c];
                        slot[a++] = W[v][c];
#else
                        slot[a++] = U[v][c].x;
                        slot[a++] = U[v][c].y;
#if !FHD_SINGLE
                        slot[a++] = W[v][c].x;
                        slot[a++] = W[v][c].y;
#endif
#endif
                    }
                }
            }
            __syncthreads();
            if (y < half) {
                const float* slot = red + (y * blockDim.x + threadIdx.x) * (FHD_ACC + 1);
                int a = 0;
#pragma unroll
                for (int v = 0; v < FHD_VOX; ++v) {
#pragma unroll
                    for (int c = 0; c < FHD_COILS; ++c) {
#if FHD_REAL
                        U[v][c] += slot[a++];
                        W[v][c] += slot[a++];
#else
                        U[v][c].x += slot[a++];
                        U[v][c].y += slot[a++];
#if !FHD_SINGLE
                        W[v][c].x += slot[a++];
                        W[v][c].y += slot[a++];
#endif
#endif
                    }
                }
            }
            __syncthreads();
        }
        if (threadIdx.y != 0) return;
    }
    if (!active) return;

    const long long voxels = (long long)nx * ny * (FHD_DIM == 3 ? nz : 1);
#pragma unroll
    for (int v = 0; v < FHD_VOX; ++v) {
        const int p = t0 + v * per_line;
        const bool own = p < len;
        const bool mirror = !FHD_SINGLE && paired && p <= c2 && c2 - p < len;
#pragma unroll
        for (int c = 0; c < FHD_COILS; ++c) {
#if FHD_FRAMES
            float2* o = out + (((long long)blockIdx.z * gridDim.y + blockIdx.y) * coils + coil0 + c) * voxels;
#else
            float2* o = out + ((long long)blockIdx.y * coils + coil0 + c) * voxels;
#endif
#if FHD_REAL
            const float2 a = make_float2(U[v][c], W[v][c]);
            const float2 b = make_float2(U[v][c], -W[v][c]);
#elif FHD_SINGLE
            const float2 a = U[v][c];
            const float2 b = a;  // never written: no mirror
#elif FHD_TIME_RECUR
            const float2 a = U[v][c];  // the sums of the voxel and of its mirror
            const float2 b = W[v][c];
#else
            const float2 a = make_float2(U[v][c].x - W[v][c].y, U[v][c].y + W[v][c].x);
            const float2 b = make_float2(U[v][c].x + W[v][c].y, U[v][c].y - W[v][c].x);
#endif
            if (own) {
                float2* dst = o + line_a + p;
                if (first) {
                    *dst = a;
                } else {
                    const float2 old = *dst;
                    *dst = make_float2(old.x + a.x, old.y + a.y);
                }
            }
            if (mirror) {
                float2* dst = o + line_b + (c2 - p);
                if (first) {
                    *dst = b;
                } else {
                    const float2 old = *dst;
                    *dst = make_float2(old.x + b.x, old.y + b.y);
                }
            }
        }
    }
}
