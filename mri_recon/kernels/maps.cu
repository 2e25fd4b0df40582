// Walsh's adaptive-combine coil maps on the GPU (mri_recon/prep/walsh_gpu.py): the coil covariance of coil
// images, its box sums one axis at a time, and per voxel the dominant eigenvector of the covariance, phase
// referenced to one coil. Three kernels instead of the dozens of CuPy's element-wise ones the array code
// launches.
//
// The covariance of C coils is stored packed: pair p = maps_pair(i, j) = j (j + 1) / 2 + i holds
// R[i][j] = sum over the box of x_i conj(x_j) for i <= j (the pairs of coils 0..j before those of j + 1, so a
// pair's index does not depend on C), as a (pairs, n) array: the voxels of one pair are contiguous.
//
// MAPS_COILS: the most coils of a configuration; the eigen solver's two vectors live in registers, unrolled to
// MAPS_COILS entries, and the launch passes its own count coils <= MAPS_COILS.

#ifndef MAPS_COILS
#error "MAPS_COILS must be defined"
#endif

__device__ __forceinline__ int maps_pair(int i, int j) { return j * (j + 1) / 2 + i; }

// products[maps_pair(i, j)][v] = images[i][v] * conj(images[j][v]) for i <= j < coils; images (coils, n).
extern "C" __global__ void mri_recon_maps_products(const float2* __restrict__ images, float2* __restrict__ products,
                                                   int coils, long long n)
{
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < n; v += step) {
        for (int j = 0; j < coils; ++j) {
            const float2 b = images[j * n + v];
            for (int i = 0; i < j; ++i) {
                const float2 a = images[i * n + v];
                products[maps_pair(i, j) * n + v] = make_float2(a.x * b.x + a.y * b.y, a.y * b.x - a.x * b.y);
            }
            products[maps_pair(j, j) * n + v] = make_float2(b.x * b.x + b.y * b.y, 0.0f);  // real by construction
        }
    }
}

// out[o][l][i] = sum of in[o][t][i] over the `size` positions t = l - size / 2 .. l - size / 2 + size - 1 that
// lie in 0 .. length - 1 (zero beyond the ends): the centred box sum along the middle axis of an
// (outer, length, inner) array of `total` elements. in and out must not overlap.
extern "C" __global__ void mri_recon_maps_box(const float2* __restrict__ in, float2* __restrict__ out,
                                              long long total, int length, long long inner, int size)
{
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        const long long l = (e / inner) % length;
        const long long base = e - l * inner;
        const long long first = l - size / 2;
        const long long lo = first < 0 ? 0 : first;
        const long long hi = first + size - 1 < length - 1 ? first + size - 1 : length - 1;
        float2 s = make_float2(0.0f, 0.0f);
        for (long long t = lo; t <= hi; ++t) {
            const float2 a = in[base + t * inner];
            s.x += a.x;
            s.y += a.y;
        }
        out[e] = s;
    }
}

// x = R x / |R x| for `steps` products, R(p) the voxel's packed matrix scaled by 1 / its trace; returns x^H R x
// after the last step (0 where a product vanished: x is then 0).
template <class Entry>
__device__ __forceinline__ float maps_power(Entry R, int coils, int steps, float2 (&x)[MAPS_COILS])
{
    float rayleigh = 0.0f;
    for (int s = 0; s <= steps; ++s) {  // the last pass only measures x^H R x
        float2 y[MAPS_COILS];
#pragma unroll
        for (int c = 0; c < MAPS_COILS; ++c) y[c] = make_float2(0.0f, 0.0f);
#pragma unroll
        for (int j = 0; j < MAPS_COILS; ++j) {
            if (j < coils) {
                const float d = R(maps_pair(j, j)).x;
                y[j].x += d * x[j].x;
                y[j].y += d * x[j].y;
#pragma unroll
                for (int i = 0; i < j; ++i) {
                    const float2 r = R(maps_pair(i, j));
                    y[i].x += r.x * x[j].x - r.y * x[j].y;  // R[i][j] x[j]
                    y[i].y += r.x * x[j].y + r.y * x[j].x;
                    y[j].x += r.x * x[i].x + r.y * x[i].y;  // conj(R[i][j]) x[i]
                    y[j].y += r.x * x[i].y - r.y * x[i].x;
                }
            }
        }
        if (s == steps) {
#pragma unroll
            for (int c = 0; c < MAPS_COILS; ++c) rayleigh += x[c].x * y[c].x + x[c].y * y[c].y;
            break;
        }
        float norm = 0.0f;
#pragma unroll
        for (int c = 0; c < MAPS_COILS; ++c) norm += y[c].x * y[c].x + y[c].y * y[c].y;
        const float scale = norm > 0.0f ? rsqrtf(norm) : 0.0f;
#pragma unroll
        for (int c = 0; c < MAPS_COILS; ++c) x[c] = make_float2(y[c].x * scale, y[c].y * scale);
        if (!(norm > 0.0f)) break;
    }
    return rayleigh;
}

// MAPS_HELD: the configurations whose packed matrix a thread holds in registers (read once); larger ones read
// it again at every product (from the caches).
#define MAPS_HELD (MAPS_COILS <= 8)
#define MAPS_PAIRS (MAPS_COILS * (MAPS_COILS + 1) / 2)

// maps[c][v] for c < coils: a unit dominant eigenvector of the Hermitian matrix R_v packed in cov (pairs, n),
// multiplied by the conjugate phase of its entry `ref` (left as it is where that entry is 0). Two power
// iterations (maps_power) from two starts, the unit vector of R_v's largest diagonal entry and a vector of unit
// entries of golden-ratio phases, each a way to the dominant eigenvector unless it starts orthogonal to it; the
// one of larger Rayleigh quotient is kept (a start orthogonal to the dominant eigenvector ends on another). A
// voxel whose trace is not positive (all zero, or flushed to zero) gets zeros.
extern "C" __global__ void mri_recon_maps_eigen(const float2* __restrict__ cov, float2* __restrict__ maps, int coils,
                                                long long n, int ref, int steps)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < n; v += stride) {
        float trace = 0.0f, best = -1.0f;
        int largest = 0;
#pragma unroll
        for (int c = 0; c < MAPS_COILS; ++c) {
            if (c < coils) {
                const float d = cov[maps_pair(c, c) * n + v].x;
                trace += d;
                if (d > best) {
                    best = d;
                    largest = c;
                }
            }
        }
        const float inverse = trace > 0.0f ? 1.0f / trace : 0.0f;
#if MAPS_HELD
        float2 held[MAPS_PAIRS];
#pragma unroll
        for (int j = 0; j < MAPS_COILS; ++j) {
#pragma unroll
            for (int i = 0; i <= j; ++i) {
                const float2 r = j < coils ? cov[maps_pair(i, j) * n + v] : make_float2(0.0f, 0.0f);
                held[maps_pair(i, j)] = make_float2(r.x * inverse, r.y * inverse);
            }
        }
        const auto entry = [&](int p) { return held[p]; };
#else
        const auto entry = [&](int p) {
            const float2 r = cov[p * n + v];
            return make_float2(r.x * inverse, r.y * inverse);
        };
#endif
        float kept = -1.0f;
        for (int start = 0; start < 2; ++start) {
            float2 x[MAPS_COILS];
            const float unit = rsqrtf((float)coils);
#pragma unroll
            for (int c = 0; c < MAPS_COILS; ++c) {
                float sine, cosine;
                sincospif(2.0f * (0.6180339887f * c - floorf(0.6180339887f * c)), &sine, &cosine);
                x[c] = start == 0 ? make_float2(c == largest ? 1.0f : 0.0f, 0.0f)
                                  : make_float2(c < coils ? unit * cosine : 0.0f, c < coils ? unit * sine : 0.0f);
            }
            const float rayleigh = trace > 0.0f ? maps_power(entry, coils, steps, x) : 0.0f;
            if (!(rayleigh > kept)) continue;
            kept = rayleigh;
            float2 phase = make_float2(1.0f, 0.0f);
#pragma unroll
            for (int c = 0; c < MAPS_COILS; ++c) {
                if (c == ref) {
                    const float mag = sqrtf(x[c].x * x[c].x + x[c].y * x[c].y);
                    if (mag > 0.0f) phase = make_float2(x[c].x / mag, -x[c].y / mag);
                }
            }
#pragma unroll
            for (int c = 0; c < MAPS_COILS; ++c) {
                if (c < coils) {
                    const float2 a = rayleigh > 0.0f ? x[c] : make_float2(0.0f, 0.0f);
                    maps[c * n + v] = make_float2(a.x * phase.x - a.y * phase.y, a.x * phase.y + a.y * phase.x);
                }
            }
        }
    }
}
