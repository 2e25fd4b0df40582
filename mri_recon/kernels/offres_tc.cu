// F^H d with off-resonance on the tensor cores: the exact phase of every voxel-sample pair on the special
// function unit, the sums over samples as a complex matrix product on the tensor cores (mma.sync with half
// precision operands in two parts each, float32 accumulation). Needs compute capability 8.0 or newer (the
// launcher checks).
//
// Mathematics (docs/offres.md, fhd.cu):
//     (F^H d)_{n,c} = sum_m E_{nm} d_{mc},      E_{nm} = exp(+i 2 pi (k_m . r_n + f_n (t_m - t_c)))
// is a product of the N x M matrix E (voxels by samples) and the M x C matrix of the samples (C coils). Its
// phase is the integer T = sum_d K_d Q_d + offres_turns(F_n, tau_m) in 2^-32 turns, exactly as in the
// "phasor" kernel of fhd.cu (the wrap-around is the reduction to one turn), and phasor() gives its cosine
// and sine. In real arithmetic, with the 2C accumulator columns interleaved as (Re, Im) of each coil,
//     Y = cos(theta) B_re + sin(theta) B_im,
//     B_re[m, 2c] = Re d_mc,  B_re[m, 2c + 1] = Im d_mc,  B_im[m, 2c] = -Im d_mc,  B_im[m, 2c + 1] = Re d_mc,
// so Y[n, 2c] + i Y[n, 2c + 1] = (F^H d)_{n,c}: two real products per block of 16 samples and 8-column tile.
//
// Precision. Every factor x is split into two IEEE half-precision numbers, x_hi = half(x) and
// x_lo = half(x - x_hi) (round to nearest: 11 significant bits each, 22 together), and
// a b ~ a_hi b_hi + a_hi b_lo + a_lo b_hi, the tensor cores multiplying halves exactly and adding in float32
// with an adder that truncates (the dropped a_lo b_lo is below 2^-22 |a b|). The cosines and sines lie in
// [-1, 1]; each coil's samples are scaled by a power of two of their own (scale, set on the GPU from the
// coil's largest |Re| or |Im|, so no host round trip) into [-1, 1], which keeps them inside the half range,
// and each coil's sums are scaled back exactly. Below 2^-14 the halves are subnormal with a fixed step of
// 2^-24, so the split of x carries x within 2^-22 |x| + 2^-25: near float32 for the cosines and sines and the
// large samples, an absolute error up to 2^-24 of the coil's largest sample for the small ones (k-space far
// from its centre), which the coil's sums do not notice. A scale per coil, not per launch: one shared scale
// would set that floor by the strongest coil, and a coil 30x weaker would miss 2e-5. The float32
// partial sums leave the tensor cores into float32 registers after every chunk (OTC_CHUNK blocks of 16
// samples), so the truncating adder never sums more than 128 samples.
// Half operands run the tensor cores at twice the rate of TF32 (16 samples per instruction instead of 8).
//
// Fragments (PTX, mma.m16n8k16 .f16, lane = 4 g + t, pairs in one register, the lower column first):
// A (16 x 16, rows = voxels, columns = samples) a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..2t+1),
// a2 = (g, 2t+8..2t+9), a3 = (g + 8, 2t+8..2t+9); B (16 x 8, rows = samples, columns = accumulator columns)
// b0 = (2t..2t+1, g), b1 = (2t+8..2t+9, g); C (16 x 8, float32) c0, c1 = (g, 2t), (g, 2t + 1), c2, c3 = the same
// columns of row g + 8. So lane (g, t) evaluates the phasors of voxels g and g + 8 of each tile at samples 2t,
// 2t + 1, 2t + 8 and 2t + 9 of each block, builds its B fragments from the same samples' values of coil
// 4 j + g / 2 (the real or imaginary part by g's parity), and ends holding (Re, Im) of coil 4 j + t (column
// tile j) for both voxels.
//
// Work assignment. A warp owns OTC_MTILES tiles of 16 consecutive voxels (C order) and one slice of the sample
// blocks (blockIdx.y; slices write separate partial images that the host adds: deterministic, no atomics).
// The block's warps share the slice: they stage OTC_CHUNK blocks of 16 sample records at a time in shared
// memory, so each staged byte serves 16 OTC_MTILES OTC_WARPS voxels.
//
// Sample record (32-bit words, OTC_RECORD per sample; mri_recon_offres_tc_pack writes them, M rounded up to
// whole blocks of 16): K_0, K_1, K_2 (0 in 2-D), tau (int32 bits), then the scaled complex64 samples (coil c
// times scale[c]) of
// 4 OTC_NTILES coils (zero past the launch's coils). Samples past the end have K = 0, tau = 0 and zero data:
// they add nothing.
//
// Compile-time sizes (-D):
//   OTC_DIM     2 or 3
//   OTC_NTILES  8-column tiles: 1 for 1..4 coils, 2 for 5..8
//   OTC_MTILES  16-voxel tiles per warp (1..4)
//   OTC_WARPS   warps per block
//   OTC_CHUNK   blocks of 16 samples staged in shared memory at a time

#include "mri_recon_phase.cuh"

#if !defined(OTC_DIM) || !defined(OTC_NTILES) || !defined(OTC_MTILES) || !defined(OTC_WARPS) || !defined(OTC_CHUNK)
#error "OTC_DIM, OTC_NTILES, OTC_MTILES, OTC_WARPS and OTC_CHUNK must be defined"
#endif
#if OTC_DIM != 2 && OTC_DIM != 3
#error "OTC_DIM must be 2 or 3"
#endif
#if OTC_NTILES < 1 || OTC_NTILES > 2 || OTC_MTILES < 1 || OTC_MTILES > 4
#error "OTC_NTILES must lie in 1..2 and OTC_MTILES in 1..4"
#endif
#if OTC_WARPS < 1 || OTC_WARPS > 16 || OTC_CHUNK < 1
#error "OTC_WARPS must lie in 1..16 and OTC_CHUNK be positive"
#endif

#define OTC_RECORD (4 + 8 * OTC_NTILES)  // words per sample record
#define OTC_BLOCK (16 * OTC_RECORD)       // words per block of 16 samples
static_assert(OTC_CHUNK * OTC_BLOCK * 4 <= 48 * 1024, "the staged chunk exceeds 48 KB of shared memory");

// half(x0) in the low 16 bits, half(x1) in the high 16 bits (round to nearest)
__device__ __forceinline__ unsigned mri_recon_half2(float x0, float x1) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
    return r;
}

// the half in bits 0..15 of h as a float (exact)
__device__ __forceinline__ float mri_recon_half_value(unsigned h) {
    float f;
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.f32.f16 %0, lo;\n\t}" : "=f"(f) : "r"(h));
    return f;
}

// (x0, x1) as half pairs hi = half(x) and lo = half(x - hi), rounded to nearest
__device__ __forceinline__ void mri_recon_split2(float x0, float x1, unsigned& hi, unsigned& lo) {
    hi = mri_recon_half2(x0, x1);
    lo = mri_recon_half2(x0 - mri_recon_half_value(hi), x1 - mri_recon_half_value(hi >> 16));
}

// Zero the float32 sums of a warp's tiles (OTC_MTILES x OTC_NTILES fragments of 4).
__device__ __forceinline__ void mri_recon_tc_zero(float (&sums)[OTC_MTILES][OTC_NTILES][4]) {
#pragma unroll
    for (int i = 0; i < OTC_MTILES; ++i)
#pragma unroll
        for (int j = 0; j < OTC_NTILES; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) sums[i][j][e] = 0.0f;
}

// acc += a b on the tensor cores (16 x 8 x 16, half in, float32 out)
__device__ __forceinline__ void mri_recon_mma(float (&acc)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// out        complex64 (slices, coils, voxels): slice blockIdx.y, coils 0 .. coils - 1 of this launch written
//            at coil0 + c of a (slices, out_coils, voxels) array
// records    uint32 (16 n_blocks, OTC_RECORD): the sample records (above)
// field_map  int32 (voxels,) F_n = round(2^16 f_n), C order
// scale      float32 (16,): [c] the scale s_c of coil c of the launch (the records hold s_c d), [8 + c] 1 / s_c
// per_slice  blocks of 16 samples per slice (the last slice may have fewer, or none)
extern "C" __global__ void __launch_bounds__(OTC_WARPS * 32) mri_recon_fhd_offres_tc(
    float2* __restrict__ out, const unsigned* __restrict__ records, const int* __restrict__ field_map,
    const float* __restrict__ scale, int nx, int ny, int nz, int coils, int out_coils, int coil0, int n_blocks,
    int per_slice) {
    __shared__ __align__(16) unsigned stage[OTC_CHUNK * OTC_BLOCK];

    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const bool odd = (g & 1) != 0;  // this lane's B columns are imaginary parts (B_re) / real parts (B_im)
    const long long voxels = (long long)nx * ny * (OTC_DIM == 3 ? nz : 1);
    const long long warp = (long long)blockIdx.x * OTC_WARPS + (threadIdx.x >> 5);
    const long long first_voxel = warp * 16 * OTC_MTILES;

    // per tile the coordinates Q and the field F of voxels g (row 0) and g + 8 (row 1); zero past the end
    unsigned q[OTC_MTILES][2][OTC_DIM];
    int fv[OTC_MTILES][2];
    const int cx2 = mri_recon_twice_centre(nx);
    const int cy2 = mri_recon_twice_centre(ny);
#if OTC_DIM == 3
    const int cz2 = mri_recon_twice_centre(nz);
#endif
#pragma unroll
    for (int i = 0; i < OTC_MTILES; ++i) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const long long v = first_voxel + 16 * i + 8 * r + g;
            const bool inside = v < voxels;
#if OTC_DIM == 3
            const int jz = (int)(v % nz);
            const long long rest = v / nz;
            const int jy = (int)(rest % ny);
            const int jx = (int)(rest / ny);
            q[i][r][2] = inside ? (unsigned)(2 * jz - cz2) : 0u;
#else
            const int jy = (int)(v % ny);
            const int jx = (int)(v / ny);
#endif
            q[i][r][0] = inside ? (unsigned)(2 * jx - cx2) : 0u;
            q[i][r][1] = inside ? (unsigned)(2 * jy - cy2) : 0u;
            fv[i][r] = inside ? field_map[v] : 0;
        }
    }

    float total[OTC_MTILES][OTC_NTILES][4];
    mri_recon_tc_zero(total);

    const int begin = min(n_blocks, (int)blockIdx.y * per_slice);
    const int end = min(n_blocks, begin + per_slice);
    for (int chunk = begin; chunk < end; chunk += OTC_CHUNK) {
        const int count = min(OTC_CHUNK, end - chunk);
        __syncthreads();  // the previous chunk is consumed
        {
            const uint4* src = reinterpret_cast<const uint4*>(records + (long long)chunk * OTC_BLOCK);
            uint4* dst = reinterpret_cast<uint4*>(stage);
            for (int w = threadIdx.x; w < count * (OTC_BLOCK / 4); w += OTC_WARPS * 32) dst[w] = src[w];
        }
        __syncthreads();

        float acc[OTC_MTILES][OTC_NTILES][4];  // the chunk's partial sums
        mri_recon_tc_zero(acc);

        for (int b = 0; b < count; ++b) {
            // this lane's samples: k = 2t, 2t + 1 (fragment registers 0, 1) and 2t + 8, 2t + 9 (registers 2, 3)
            const unsigned* rec[4];
            rec[0] = stage + b * OTC_BLOCK + 2 * t * OTC_RECORD;
            rec[1] = rec[0] + OTC_RECORD;
            rec[2] = rec[0] + 8 * OTC_RECORD;
            rec[3] = rec[2] + OTC_RECORD;
            uint4 head[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) head[k] = *reinterpret_cast<const uint4*>(rec[k]);
            // frag[j][m][h][p]: register p (rows 2t..2t+1, 2t+8..2t+9) of B_re (m = 0) or B_im (m = 1), hi (h = 0)
            // or lo (h = 1), column tile j
            unsigned frag[OTC_NTILES][2][2][2];
#pragma unroll
            for (int j = 0; j < OTC_NTILES; ++j) {
                float2 d[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) d[k] = *reinterpret_cast<const float2*>(rec[k] + 4 + 2 * (4 * j + (g >> 1)));
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    const float2 u = d[2 * p], w = d[2 * p + 1];
                    // B_re: (Re, Im) in columns (2c, 2c + 1); B_im: (-Im, Re)
                    mri_recon_split2(odd ? u.y : u.x, odd ? w.y : w.x, frag[j][0][0][p], frag[j][0][1][p]);
                    mri_recon_split2(odd ? u.x : -u.y, odd ? w.x : -w.y, frag[j][1][0][p], frag[j][1][1][p]);
                }
            }
            // tile by tile: the A fragments (a[0] cos hi, a[1] cos lo, a[2] sin hi, a[3] sin lo; register e holds
            // voxel row e & 1 (g, g + 8) at the sample pair e >> 1 (2t..2t+1, 2t+8..2t+9)), then the three terms of
            // cos B_re and of sin B_im, small terms first (within the block), column tiles innermost
#pragma unroll
            for (int i = 0; i < OTC_MTILES; ++i) {
                unsigned a[4][4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = e & 1;
                    float c[2], s[2];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const uint4 k = head[2 * (e >> 1) + h];
#if OTC_DIM == 3
                        const unsigned kr = k.x * q[i][r][0] + k.y * q[i][r][1] + k.z * q[i][r][2];
#else
                        const unsigned kr = k.x * q[i][r][0] + k.y * q[i][r][1];
#endif
                        phasor(kr + offres_turns(fv[i][r], (int)k.w) + 0x100u, c[h], s[h]);
                    }
                    mri_recon_split2(c[0], c[1], a[0][e], a[1][e]);
                    mri_recon_split2(s[0], s[1], a[2][e], a[3][e]);
                }
#pragma unroll
                for (int term = 0; term < 3; ++term) {
                    const int ha = term == 1 ? 1 : 0;  // a_hi b_lo, a_lo b_hi, a_hi b_hi
                    const int hb = term == 2 ? 0 : 1 - ha;
#pragma unroll
                    for (int part = 0; part < 2; ++part)
#pragma unroll
                        for (int j = 0; j < OTC_NTILES; ++j)
                            mri_recon_mma(acc[i][j], a[2 * part + ha], frag[j][part][hb][0], frag[j][part][hb][1]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < OTC_MTILES; ++i)
#pragma unroll
            for (int j = 0; j < OTC_NTILES; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) total[i][j][e] += acc[i][j][e];
    }

    // lane (g, t) holds, per tile i and column tile j, (Re, Im) of coil 4 j + t at voxels g and g + 8
#pragma unroll
    for (int i = 0; i < OTC_MTILES; ++i) {
#pragma unroll
        for (int j = 0; j < OTC_NTILES; ++j) {
            const int c = 4 * j + t;
            if (c >= coils) continue;
            float2* o = out + ((long long)blockIdx.y * out_coils + coil0 + c) * voxels;
            const float unscale = scale[8 + c];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const long long v = first_voxel + 16 * i + 8 * r + g;
                if (v < voxels) o[v] = make_float2(unscale * total[i][j][2 * r], unscale * total[i][j][2 * r + 1]);
            }
        }
    }
}

// The sample records (layout above) of one coil group: thread w of row n writes word w of record n.
// records  uint32 (16 n_blocks, OTC_RECORD), n_blocks = ceil(M / 16)
// kfix     uint32 (M, OTC_DIM) fixed-point trajectory (fhd.cu's K_d)
// taus     int32 (M,) tau_m = round(2^32 (t_m - t_c))
// data     complex64 (data_coils, M): coils coil0 .. coil0 + coils - 1 are this group's
// scale    float32 (16,): s_c at [c], 1 / s_c at [8 + c] (mri_recon_offres_tc_scale); the records hold s_c d
extern "C" __global__ void mri_recon_offres_tc_pack(unsigned* __restrict__ records, const unsigned* __restrict__ kfix,
                                                    const int* __restrict__ taus, const float2* __restrict__ data,
                                                    const float* __restrict__ scale, int n_samples, int n_blocks,
                                                    int coils, int coil0) {
    const long long index = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= 16LL * n_blocks * OTC_RECORD) return;
    const int m = (int)(index / OTC_RECORD);
    const int w = (int)(index - (long long)m * OTC_RECORD);
    unsigned value = 0u;
    if (m < n_samples) {
        if (w == 3) {
            value = (unsigned)taus[m];
        } else if (w < OTC_DIM) {
            value = kfix[(long long)m * OTC_DIM + w];
        } else if (w >= 4 && (w - 4) / 2 < coils) {
            const float2 d = data[(long long)(coil0 + (w - 4) / 2) * n_samples + m];
            value = __float_as_uint(scale[(w - 4) / 2] * ((w & 1) ? d.y : d.x));
        }
    }
    records[index] = value;
}

// scale[c] = s_c, scale[8 + c] = 1 / s_c for coil c < coils of a launch, from largest[c], the coil's largest |Re|
// or |Im| (>= 0): s_c = 2^-e with e the exponent of largest[c] (largest = m 2^e, m in [0.5, 1)), so s_c |d| < 1;
// s_c = 1 for largest[c] = 0 or not finite. One thread per coil (a block of at least `coils` threads).
extern "C" __global__ void mri_recon_offres_tc_scale(float* __restrict__ scale, const float* __restrict__ largest,
                                                     int coils) {
    const int c = threadIdx.x;
    if (blockIdx.x != 0 || c >= coils || c >= 8) return;
    const float x = largest[c];
    int e = 0;
    if (x > 0.0f && isfinite(x)) frexpf(x, &e);
    e = max(-125, min(126, e));  // s and 1 / s normal floats (a subnormal largest is scaled by 2^125 only)
    scale[c] = ldexpf(1.0f, -e);
    scale[8 + c] = ldexpf(1.0f, e);
}
