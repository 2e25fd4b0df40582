// Device functions shared by the exact-transform kernels (fhd.cu, forward.cu, fhd_seed.cu): the voxel grid in
// integers and the two ways a phase in turns becomes a sine and cosine. Included as "mri_recon_phase.cuh"
// (the loader passes -I of this folder to NVRTC).
//
// Voxel grid (mri_recon/grid.py): voxel j of an axis of size N sits at r = (j - c)/N with c = N / 2 (integer
// division: floor), the centre of BART, SigPy, FINUFFT and numpy.fft.fftshift. The kernels use
//     r = Q / (2N),   Q = 2j - 2c,
// and the voxel at -r (the mirror of j) is 2c - j: N - j for even N (voxel 0 has none), N - 1 - j for odd N
// (every voxel has one; the centre is its own).

#ifndef MRI_RECON_PHASE_CUH
#define MRI_RECON_PHASE_CUH

// 2c = 2 (n / 2): twice the index of the centre voxel of an axis of n voxels.
__device__ __forceinline__ int mri_recon_twice_centre(int n) { return 2 * (n / 2); }

// exp(+i 2 pi T / 2^32) for a phase T in fixed-point turns that already carries the rounding offset 2^8
// (half of the 9 bits dropped here). (T >> 9) ^ 0x3FC00000 is the float 1 + (t + 1/2) in [1, 2), whose
// mantissa is the top 23 bits of T + 2^31; subtracting 3/2 is exact and leaves t in [-1/2, 1/2), where
// __sincosf runs within its accurate range [-pi, pi] (abs. error <= 2^-21.4).
__device__ __forceinline__ void phasor(unsigned T, float& c, float& s) {
    const float t = __uint_as_float((T >> 9) ^ 0x3FC00000u) - 1.5f;
    __sincosf(6.28318530717958647692f * t, &s, &c);
}

// t - rint(t) for a phase t in float turns, with rint done by the 1.5 * 2^23 trick (two adds on the FMA
// pipe, exact for |t| < 2^22); the result lies in [-1/2, 1/2].
__device__ __forceinline__ float reduce_turns(float t) {
    const float magic = 12582912.0f;  // 1.5 * 2^23
    return t - ((t + magic) - magic);
}

// The off-resonance phase f t in fixed-point turns (units of 2^-32 turns, mod 2^32), from F = round(2^16 f)
// (f in Hz) and tau = round(2^32 t) (t in s, |t| < 1/2): F tau = 2^48 f t exactly in 64-bit integers, and
// its bits 16..47 are f t in 2^-32 turns (the wrap-around is the reduction to one turn). One IMAD.WIDE and
// one shift on the integer pipe, so the phase costs no floating-point work beyond phasor's.
__device__ __forceinline__ unsigned offres_turns(int F, int tau) {
    return (unsigned)(((long long)F * (long long)tau) >> 16);
}

#endif  // MRI_RECON_PHASE_CUH
