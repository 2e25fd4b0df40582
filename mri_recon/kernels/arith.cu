// The element-wise operations and reductions a reconstruction needs around its operators (scaling, weighting,
// noise whitening, checks of finite values, sums, maxima, inner products, the coil combination), so that a GPU
// reconstruction runs none of CuPy's generated kernels: those are compiled by NVRTC on the first use in an
// installation (seconds), these come precompiled with the package (docs/kernels.md).
//
// float2 is complex64. Reductions are deterministic: each block reduces its grid-stride share in a fixed order
// (warp shuffles, then the warps in order) and stores its partial; the last block to finish (a counter in device
// memory, zero on entry and reset by that block) combines the partials in block order and writes the result.
// Sums are float64 whatever the input.

#define ARITH_THREADS 256
#define ARITH_WARPS (ARITH_THREADS / 32)

#define GRID_STRIDE(k, n) \
    for (long long k = blockIdx.x * (long long)ARITH_THREADS + threadIdx.x; k < (n); k += (long long)gridDim.x * ARITH_THREADS)

struct Sum {
    __device__ static double identity() { return 0.0; }
    __device__ static double apply(double a, double b) { return a + b; }
};

struct Max {
    __device__ static double identity() { return 0.0; }  // the reductions here take the maximum of values >= 0
    __device__ static double apply(double a, double b) { return fmax(a, b); }
};

struct Min {
    __device__ static double identity() { return __longlong_as_double(0x7ff0000000000000LL); }  // +infinity
    __device__ static double apply(double a, double b) { return fmin(a, b); }
};

// Op-reduction of v over the block, valid in thread 0; fixed order.
template <class Op>
__device__ __forceinline__ double block_reduce(double v)
{
    __shared__ double warp_values[ARITH_WARPS];
    for (int offset = 16; offset > 0; offset >>= 1) v = Op::apply(v, __shfl_down_sync(0xffffffffu, v, offset));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // warp_values may still be read by a previous call
    if (lane == 0) warp_values[warp] = v;
    __syncthreads();
    double total = Op::identity();
    if (threadIdx.x == 0) {
        for (int w = 0; w < ARITH_WARPS; ++w) total = Op::apply(total, warp_values[w]);
    }
    return total;
}

// Store this block's partial (slot `part` of `parts` per block); the last block to arrive writes the reduction
// of all partials to result[part] and resets the counter. Every thread of every block must call it once per
// part, with parts called in the same order.
template <class Op>
__device__ __forceinline__ bool grid_reduce(double value, int part, int parts, double* partial, unsigned* counter,
                                            double* result)
{
    __shared__ bool last;
    const double block_value = block_reduce<Op>(value);
    if (threadIdx.x == 0) {
        partial[(long long)part * gridDim.x + blockIdx.x] = block_value;
        __threadfence();
        last = part == parts - 1 && atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    return last;
}

template <class Op>
__device__ __forceinline__ void finish_reduce(int parts, double* partial, unsigned* counter, double* result)
{
    __threadfence();
    for (int part = 0; part < parts; ++part) {
        double v = Op::identity();
        for (int b = threadIdx.x; b < (int)gridDim.x; b += ARITH_THREADS)
            v = Op::apply(v, __ldcg(partial + (long long)part * gridDim.x + b));
        const double total = block_reduce<Op>(v);
        if (threadIdx.x == 0) result[part] = total;
    }
    if (threadIdx.x == 0) *counter = 0u;
}

// out = x * s over n floats (float32 arrays, or complex64 as 2n floats); out may be x.
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_scale(const float* x, float s, float* out, long long n)
{
    GRID_STRIDE(k, n) out[k] = x[k] * s;
}

// out[c, m] = d[c, m] * (w[m] * s) for complex d (C, M) and real w (M): the density-weighted k-space.
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_weighted(const float2* __restrict__ d, const float* __restrict__ w, float s, float2* __restrict__ out,
                         long long m, long long total)
{
    GRID_STRIDE(k, total) {
        const float ws = w[k % m] * s;
        const float2 v = d[k];
        out[k] = make_float2(v.x * ws, v.y * ws);
    }
}

// x[:, j] = W x[:, j] for every column j of complex x (C, M) in place, W complex (C, C) row-major: the noise
// whitening. Each thread keeps its column in dynamic shared memory (blockDim.x * C float2).
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_whiten(float2* __restrict__ x, const float2* __restrict__ w, int c, long long m)
{
    extern __shared__ float2 column[];
    const int t = threadIdx.x, width = blockDim.x;
    for (long long j = blockIdx.x * (long long)width + t; j < m; j += (long long)gridDim.x * width) {
        for (int r = 0; r < c; ++r) column[r * width + t] = x[r * m + j];
        for (int i = 0; i < c; ++i) {
            float2 acc = make_float2(0.f, 0.f);
            for (int r = 0; r < c; ++r) {
                const float2 a = __ldg(w + i * c + r), b = column[r * width + t];
                acc.x = fmaf(a.x, b.x, fmaf(-a.y, b.y, acc.x));
                acc.y = fmaf(a.x, b.y, fmaf(a.y, b.x, acc.y));
            }
            x[i * m + j] = acc;
        }
    }
}

// flags[0] |= 1 if some x[k] is not finite, 2 if some x[k] < 0, 4 if some x[k] > 0 (n floats).
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_flags(const float* __restrict__ x, long long n, int* __restrict__ flags)
{
    unsigned bits = 0u;
    GRID_STRIDE(k, n) {
        const float v = x[k];
        bits |= (isfinite(v) ? 0u : 1u) | (v < 0.f ? 2u : 0u) | (v > 0.f ? 4u : 0u);
    }
    for (int offset = 16; offset > 0; offset >>= 1) bits |= __shfl_xor_sync(0xffffffffu, bits, offset);
    if ((threadIdx.x & 31) == 0 && bits) atomicOr(flags, (int)bits);
}

// flags[0] |= 8 if the n 32-bit words of a and b differ anywhere: equality bit for bit (0.0 and -0.0 differ, a
// NaN equals the same NaN).
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_differ(const unsigned* __restrict__ a, const unsigned* __restrict__ b, long long n,
                       int* __restrict__ flags)
{
    unsigned words = 0u;
    GRID_STRIDE(k, n) words |= a[k] ^ b[k];
    if (__any_sync(0xffffffffu, words != 0u) && (threadIdx.x & 31) == 0) atomicOr(flags, 8);
}

// result[0] = sum of x[k] (n floats), in float64.
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_sum(const float* __restrict__ x, long long n, double* partial, unsigned* counter, double* result)
{
    double acc = 0.0;
    GRID_STRIDE(k, n) acc += (double)x[k];
    if (grid_reduce<Sum>(acc, 0, 1, partial, counter, result)) finish_reduce<Sum>(1, partial, counter, result);
}

// result[0] = max |x[k]| (n floats: a real array, or the components of a complex one).
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_max_abs(const float* __restrict__ x, long long n, double* partial, unsigned* counter, double* result)
{
    float acc = 0.f;
    GRID_STRIDE(k, n) acc = fmaxf(acc, fabsf(x[k]));
    if (grid_reduce<Max>((double)acc, 0, 1, partial, counter, result)) finish_reduce<Max>(1, partial, counter, result);
}

// result[0] = max over voxels v of sum_c |S[c, v]|^2 for complex coil maps S (C, N), in float64.
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_rss_max(const float2* __restrict__ s, int c, long long n, double* partial, unsigned* counter,
                        double* result)
{
    double acc = 0.0;
    GRID_STRIDE(v, n) {
        double power = 0.0;
        for (int k = 0; k < c; ++k) {
            const float2 z = s[k * n + v];
            power += (double)z.x * z.x + (double)z.y * z.y;
        }
        acc = fmax(acc, power);
    }
    if (grid_reduce<Max>(acc, 0, 1, partial, counter, result)) finish_reduce<Max>(1, partial, counter, result);
}

// result[0] + i result[1] = sum_k conj(a[k]) b[k] over n complex values, in float64.
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_dot(const float2* __restrict__ a, const float2* __restrict__ b, long long n, double* partial,
                    unsigned* counter, double* result)
{
    double re = 0.0, im = 0.0;
    GRID_STRIDE(k, n) {
        const float2 u = a[k], v = b[k];
        re += (double)u.x * v.x + (double)u.y * v.y;
        im += (double)u.x * v.y - (double)u.y * v.x;
    }
    grid_reduce<Sum>(re, 0, 2, partial, counter, result);
    if (grid_reduce<Sum>(im, 1, 2, partial, counter, result)) finish_reduce<Sum>(2, partial, counter, result);
}

// out[v] = (accumulate ? out[v] : 0) + sum_c conj(S[c, v]) y[c, v]: the SENSE coil combination of coil images
// y (C, N) with maps S (C, N).
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_combine(const float2* __restrict__ s, const float2* __restrict__ y, float2* __restrict__ out, int c,
                        long long n, int accumulate)
{
    GRID_STRIDE(v, n) {
        float2 acc = accumulate ? out[v] : make_float2(0.f, 0.f);
        for (int k = 0; k < c; ++k) {
            const float2 a = s[k * n + v], b = y[k * n + v];
            acc.x += a.x * b.x + a.y * b.y;
            acc.y += a.x * b.y - a.y * b.x;
        }
        out[v] = acc;
    }
}

// x[b, i0, i1, i2] *= s (-1)^(i0 + i1 + i2) in place over total complex values of a (B, n0, n1, n2) array:
// the spectrum of the ifftshift of a grid of even sizes, from the spectrum of the grid itself.
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_alternate(float2* __restrict__ x, float s, long long total, int n0, int n1, int n2)
{
    GRID_STRIDE(k, total) {
        const long long i2 = k % n2, i1 = (k / n2) % n1, i0 = (k / ((long long)n1 * n2)) % n0;
        const float sign = ((i0 + i1 + i2) & 1) ? -s : s;
        const float2 v = x[k];
        x[k] = make_float2(v.x * sign, v.y * sign);
    }
}

// out[m, d] = round(2^32 frac(mult k[m, d] / scale_d)) mod 2^32 for float32 k (M, D), D <= 3, computed in float64
// as the exact sums' fixed-point trajectory (operators/engines/gpu_layout.fixed_point_turns) defines it.
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_turns(const float* __restrict__ k, long long total, int dim, double mult, double scale0,
                      double scale1, double scale2, unsigned* __restrict__ out)
{
    GRID_STRIDE(i, total) {
        const int d = (int)(i % dim);
        const double scale = d == 0 ? scale0 : (d == 1 ? scale1 : scale2);
        double u = ((double)k[i] * mult) / scale;
        u -= floor(u);
        out[i] = (unsigned)((unsigned long long)rint(u * 4294967296.0) & 0xFFFFFFFFull);
    }
}

// The exact sums' constant-memory records (M, words) of uint32: the fixed-point trajectory kfix (M, D), zero
// padding, then the samples of every coil, per floats each (2: complex data (C, M); 1: real data (1, M)).
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_records(const unsigned* __restrict__ kfix, const float* __restrict__ data, long long m, int dim,
                        int coils, int per, int words, unsigned* __restrict__ out)
{
    const int values = coils * per, first = words - values;
    GRID_STRIDE(i, m * words) {
        const long long s = i / words;
        const int w = (int)(i % words);
        unsigned v = 0u;
        if (w < dim) {
            v = kfix[s * dim + w];
        } else if (w >= first) {
            const int c = (w - first) / per, part = (w - first) % per;
            v = __float_as_uint(data[((long long)c * m + s) * per + part]);
        }
        out[i] = v;
    }
}

// The ramp density weights of prep/device_dcf.py (the mathematics of prep/dcf.py's ramp and normalize), in
// float64 on a float32 trajectory k (M, D), three launches with no host read between them.
// 1. radius[m] = |k_m s| (axis d scaled by s_d = max N / N_d); result[0] = the smallest radius above `still`
//    (the readout spacing delta; +infinity when no sample moves).
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_ramp_radius(const float* __restrict__ k, long long m, int dims, double s0, double s1, double s2,
                            double still, double* __restrict__ radius, double* partial, unsigned* counter,
                            double* result)
{
    const double s[3] = {s0, s1, s2};
    double acc = Min::identity();
    GRID_STRIDE(i, m) {
        double r2 = 0.0;
        for (int d = 0; d < dims; ++d) {
            const double v = (double)k[i * dims + d] * s[d];
            r2 += v * v;
        }
        const double r = sqrt(r2);
        radius[i] = r;
        if (r > still) acc = fmin(acc, r);
    }
    if (grid_reduce<Min>(acc, 0, 1, partial, counter, result)) finish_reduce<Min>(1, partial, counter, result);
}

// 2. weights[m] = radius^(D - 1) for a moving sample, else the centre's share (2 / D) (delta / 2)^D / delta;
//    result[0] = sum_m weights[m] Re prod_d B_d(k_md), the blob's gain: B_d(k) = sum_j g_d[j] exp(-2 pi i k r_j)
//    at r_j = (j - floor(N_d / 2)) / N_d, for the samples within `reach` on every axis (zero elsewhere).
//    gauss: the blob's samples g_0, g_1, g_2 one after the other (N_0 + N_1 + N_2 doubles).
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_ramp_gain(const float* __restrict__ k, const double* __restrict__ radius, long long m, int dims,
                          double still, const double* __restrict__ delta, const double* __restrict__ gauss,
                          int n0, int n1, int n2, double reach0, double reach1, double reach2,
                          double* __restrict__ weights, double* partial, unsigned* counter, double* result)
{
    const int n[3] = {n0, n1, n2};
    const double reach[3] = {reach0, reach1, reach2};
    const double step = delta[0] < Min::identity() ? delta[0] : 1.0;
    const double half = step / 2, centre = (2.0 / dims) * (dims == 3 ? half * half * half : half * half) / step;
    double acc = 0.0;
    GRID_STRIDE(i, m) {
        const double r = radius[i];
        const double w = r > still ? (dims == 3 ? r * r : r) : centre;
        weights[i] = w;
        bool near = true;
        for (int d = 0; d < dims; ++d) near = near && fabs((double)k[i * dims + d]) <= reach[d];
        if (!near) continue;
        double re = 1.0, im = 0.0;
        const double* g = gauss;
        for (int d = 0; d < dims; ++d) {
            const double kd = (double)k[i * dims + d];
            double sr = 0.0, si = 0.0;
            for (int j = 0; j < n[d]; ++j) {
                double sn, cs;
                sincospi(-2.0 * (kd * ((double)(j - n[d] / 2) / n[d])), &sn, &cs);
                sr = fma(g[j], cs, sr);
                si = fma(g[j], sn, si);
            }
            const double t = re * sr - im * si;
            im = re * si + im * sr;
            re = t;
            g += n[d];
        }
        acc += w * re;
    }
    if (grid_reduce<Sum>(acc, 0, 1, partial, counter, result)) finish_reduce<Sum>(1, partial, counter, result);
}

// 3. out[m] = float32(weights[m] / gain) (gain 1 unless positive); verdict[0]: some sample moves, verdict[1]:
//    it does and the gain is positive (the checks the host path raises on).
extern "C" __global__ void __launch_bounds__(ARITH_THREADS)
mri_recon_arith_ramp_finish(const double* __restrict__ weights, long long m, const double* __restrict__ delta,
                            const double* __restrict__ gain, float* __restrict__ out, bool* __restrict__ verdict)
{
    const double g = gain[0];
    const double scale = g > 0.0 ? g : 1.0;
    GRID_STRIDE(i, m) out[i] = (float)(weights[i] / scale);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const bool moving = delta[0] < Min::identity();
        verdict[0] = moving;
        verdict[1] = moving && g > 0.0;
    }
}
