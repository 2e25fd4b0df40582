// Fused element-wise stages of the CG-SENSE normal operator A x = sum_c conj(S_c) T(S_c x) + lam x on the GPU,
// where T is the Toeplitz convolution on the 2x grid (cuFFT does the transforms between these kernels), for one
// image or for F frames of a time series at once (frame t with its own image x_t and kernel spectrum h_t):
//
//   mri_recon_toeplitz_expand: padded[t, c] = zero-padded S_c x_t on the 2x grid (every element written, so the
//                              buffer can be transformed in place and reused without clearing);
//   mri_recon_toeplitz_filter: padded[t, c] *= h_t (the kernel's spectrum, pre-scaled by the inverse FFT's 1/N);
//   mri_recon_toeplitz_reduce: out_t = (first ? lam x_t : out_t) + sum_c conj(S_c) y_tc, y_tc the top corner of
//                              the inverse transform of grid (t, c).
//
// Launch shape: blockIdx.y is the grid (t * coils + c) in expand and filter and the frame t in reduce, so a
// thread's position inside its grid or image is a 32-bit index (the grid and the image hold fewer than 2^31
// points: the launcher checks) and no thread divides 64-bit integers; blockIdx.x and threadIdx.x stride over
// the points. maps, x, out and padded are this launch's coils and frames only.
//
// Layout: complex64 as float2, C order. Image (nx, ny, nz) with nz = 1 in 2D; the padded grid is
// (px, py, pz) = (2 nx, 2 ny, 2 nz or 1).

// The image voxel at point p of the 2x grid, or -1 where p lies outside the image (the zero padding).
__device__ __forceinline__ int toeplitz_image_voxel(int p, int nx, int ny, int nz, int py, int pz)
{
    int i, j, k = 0;
    if (pz == 1) {
        j = p % py;
        i = p / py;
    } else {
        k = p % pz;
        const int rest = p / pz;
        j = rest % py;
        i = rest / py;
    }
    return (i < nx && j < ny && k < nz) ? (i * ny + j) * nz + k : -1;
}

// The 2x grid's point of image voxel v.
__device__ __forceinline__ int toeplitz_grid_point(int v, int ny, int nz, int py, int pz)
{
    if (nz == 1 && pz == 1) return (v / ny) * py + v % ny;
    const int k = v % nz;
    const int rest = v / nz;
    return ((rest / ny) * py + rest % ny) * pz + k;
}

// The reduction's start at voxel v: lam x on the first coil pass, the running sum after.
__device__ __forceinline__ float2 toeplitz_initial(int first, float lam, const float2* image, const float2* result,
                                                   int v)
{
    if (!first) return result[v];
    const float2 xv = image[v];
    return make_float2(lam * xv.x, lam * xv.y);
}

// acc += conj(s) * y
__device__ __forceinline__ void toeplitz_add_conj_product(float2& acc, float2 s, float2 y)
{
    acc.x += s.x * y.x + s.y * y.y;
    acc.y += s.x * y.y - s.y * y.x;
}

extern "C" __global__ void mri_recon_toeplitz_expand(const float2* __restrict__ maps, const float2* __restrict__ x,
                                                     float2* __restrict__ padded, int coils, int nx, int ny, int nz,
                                                     int py, int pz, int grid_size)
{
    const int g = blockIdx.y;
    const int t = g / coils;
    const float2* map = maps + (long long)(g - t * coils) * nx * ny * nz;
    const float2* image = x + (long long)t * nx * ny * nz;
    float2* out = padded + (long long)g * grid_size;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < grid_size; p += gridDim.x * blockDim.x) {
        const int v = toeplitz_image_voxel(p, nx, ny, nz, py, pz);
        float2 value = make_float2(0.0f, 0.0f);
        if (v >= 0) {
            const float2 s = map[v];
            const float2 xv = image[v];
            value = make_float2(s.x * xv.x - s.y * xv.y, s.x * xv.y + s.y * xv.x);
        }
        out[p] = value;
    }
}

extern "C" __global__ void mri_recon_toeplitz_filter(float2* __restrict__ padded, const float2* __restrict__ spectra,
                                                     int coils, int grid_size)
{
    const int g = blockIdx.y;
    const float2* h = spectra + (long long)(g / coils) * grid_size;
    float2* grid = padded + (long long)g * grid_size;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < grid_size; p += gridDim.x * blockDim.x) {
        const float2 k = h[p];
        const float2 v = grid[p];
        grid[p] = make_float2(v.x * k.x - v.y * k.y, v.x * k.y + v.y * k.x);
    }
}

extern "C" __global__ void mri_recon_toeplitz_reduce(const float2* __restrict__ maps, const float2* __restrict__ padded,
                                                     const float2* __restrict__ x, float2* __restrict__ out, int coils,
                                                     int nx, int ny, int nz, int py, int pz, int grid_size,
                                                     float lam, int first)
{
    const int t = blockIdx.y;
    const int nvox = nx * ny * nz;
    const float2* frame = padded + (long long)t * coils * grid_size;
    const float2* image = x + (long long)t * nvox;
    float2* result = out + (long long)t * nvox;
    for (int v = blockIdx.x * blockDim.x + threadIdx.x; v < nvox; v += gridDim.x * blockDim.x) {
        const int p = toeplitz_grid_point(v, ny, nz, py, pz);
        float2 acc = toeplitz_initial(first, lam, image, result, v);
        for (int c = 0; c < coils; ++c)
            toeplitz_add_conj_product(acc, maps[(long long)c * nvox + v], frame[(long long)c * grid_size + p]);
        result[v] = acc;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The same operator with the last axis transformed inside one kernel ("rows"): the grids of a pass are laid out
// as work[l, g, k], l a point of the padded leading axes (p0 in 2D, p0 x p1 in 3D), g the grid (t * coils + c),
// k < n the image's last axis, unpadded. cuFFT transforms the leading axes (strided, one plan for every grid);
// mri_recon_toeplitz_rows then pads each row (l, g) to the last axis' 2x length p in shared memory, transforms
// it, multiplies by the spectrum's row (t, l), transforms back and keeps the first n points. The last axis'
// zero half is never stored, and the filter costs no pass over memory of its own.
//
//   mri_recon_toeplitz_rows_expand: work[l, g, k] = S_c x_t at (l, k) inside the image, 0 in the leading padding;
//   mri_recon_toeplitz_rows:        work[l, g, :] = first n of IFFT_p(h_t[l, :] * FFT_p(pad_p(work[l, g, :])));
//   mri_recon_toeplitz_rows_reduce: out_t = (first ? lam x_t : out_t) + sum_c conj(S_c) work[l, t * coils + c, k].
//
// Leading axes: image (n0, n1), padded (p0, p1); n1 = p1 = 1 in 2D. Every index of a pass is below 2^31 (the
// launcher checks planes * grids * n). p is a power of two, 2 <= p <= ROWS_MAX_P; a block of the rows kernel
// transforms rows_per_block <= ROWS_MAX_ROWS rows of p points at a time (rows_per_block * p <= ROWS_POINTS).

#define ROWS_MAX_P 2048   // rows of 2048 points take 55 KB of shared memory: the launcher opts in beyond 48 KB
#define ROWS_POINTS 2048   // points of one block's rows (rows_per_block * p, at least p)
#define ROWS_MAX_ROWS 64   // rows of one block at most (rows_per_block <= ROWS_POINTS / 32 for p >= 32)

// Image voxel base (i * n1 + j) * n of leading point l, or -1 in the padding.
__device__ __forceinline__ int rows_voxel_base(int l, int n0, int n1, int p1, int n)
{
    const int i = l / p1;
    const int j = l - i * p1;
    return (i < n0 && j < n1) ? (i * n1 + j) * n : -1;
}

extern "C" __global__ void mri_recon_toeplitz_rows_expand(const float2* __restrict__ maps,
                                                          const float2* __restrict__ x, float2* __restrict__ work,
                                                          int coils, int grids, int n0, int n1, int p1, int n,
                                                          int planes)
{
    const int nvox = n0 * n1 * n;
    const int row_points = grids * n;
    for (int l = blockIdx.y; l < planes; l += gridDim.y) {
        const int base = rows_voxel_base(l, n0, n1, p1, n);
        float2* out = work + l * row_points;
        for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < row_points; q += gridDim.x * blockDim.x) {
            float2 value = make_float2(0.0f, 0.0f);
            if (base >= 0) {
                const int g = q / n;
                const int k = q - g * n;
                const int t = g / coils;
                const float2 s = maps[(g - t * coils) * nvox + base + k];
                const float2 xv = x[t * nvox + base + k];
                value = make_float2(s.x * xv.x - s.y * xv.y, s.x * xv.y + s.y * xv.x);
            }
            out[q] = value;
        }
    }
}

__device__ __forceinline__ float2 rows_mul(float2 a, float2 b)
{
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
__device__ __forceinline__ float2 rows_add(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 rows_sub(float2 a, float2 b) { return make_float2(a.x - b.x, a.y - b.y); }
// a * (-i) forward, a * i inverse
__device__ __forceinline__ float2 rows_quarter(float2 a, bool inverse)
{
    return inverse ? make_float2(-a.y, a.x) : make_float2(a.y, -a.x);
}

// In-register DFT of length R (2, 4 or 8) of v[0..R), unnormalized; e^{-2 pi i / R} forward, conjugate inverse.
template <int R> __device__ __forceinline__ void rows_dft(float2* v, bool inverse);
template <> __device__ __forceinline__ void rows_dft<2>(float2* v, bool)
{
    const float2 a = v[0];
    v[0] = rows_add(a, v[1]);
    v[1] = rows_sub(a, v[1]);
}
template <> __device__ __forceinline__ void rows_dft<4>(float2* v, bool inverse)
{
    const float2 a = rows_add(v[0], v[2]), b = rows_sub(v[0], v[2]);
    const float2 c = rows_add(v[1], v[3]), d = rows_quarter(rows_sub(v[1], v[3]), inverse);
    v[0] = rows_add(a, c);
    v[1] = rows_add(b, d);
    v[2] = rows_sub(a, c);
    v[3] = rows_sub(b, d);
}
template <> __device__ __forceinline__ void rows_dft<8>(float2* v, bool inverse)
{
    float2 even[4] = {v[0], v[2], v[4], v[6]}, odd[4] = {v[1], v[3], v[5], v[7]};
    rows_dft<4>(even, inverse);
    rows_dft<4>(odd, inverse);
    const float h = 0.70710678118654752f;
    const float2 w1 = make_float2(h, inverse ? h : -h);
    odd[1] = rows_mul(odd[1], w1);
    odd[2] = rows_quarter(odd[2], inverse);
    odd[3] = rows_quarter(rows_mul(odd[3], w1), inverse);
    for (int r = 0; r < 4; ++r) {
        v[r] = rows_add(even[r], odd[r]);
        v[r + 4] = rows_sub(even[r], odd[r]);
    }
}

// Shared-memory position of element i of a block's rows: one float2 of padding after every 8, so that the
// stages' strided stores (stride R) and the twiddles' strided loads fall on different banks.
__device__ __forceinline__ int rows_pad(int i) { return i + (i >> 3); }

// One radix-R Stockham stage (sub-transforms of length ns become ns * R) over the block's rows of length
// p = 2^log2p: element (row, j + r p / R) of src, twiddled, to (row, (j - j % ns) R + j % ns + r ns) of dst,
// j < p / R. load(row, index) gives src's elements, store(row, index, value) takes dst's (shared memory or
// global); twiddle[rows_pad(e)] = exp(-2 pi i e / p).
template <int R, class Load, class Store>
__device__ __forceinline__ void rows_stage(int rows, int log2p, int ns, const float2* twiddle, bool inverse,
                                           Load load, Store store)
{
    const int log2part = log2p - (R == 8 ? 3 : R == 4 ? 2 : 1);
    const int part = 1 << log2part;
    const int scale = part / ns;  // p / (ns R)
    for (int item = threadIdx.x; item < (rows << log2part); item += blockDim.x) {
        const int row = item >> log2part;
        const int j = item & (part - 1);
        const int k = j & (ns - 1);
        const int step = k * scale;
        float2 v[R];
        for (int r = 0; r < R; ++r) {
            v[r] = load(row, j + r * part);
            if (r > 0 && step > 0) {
                const float2 w = twiddle[rows_pad(r * step)];
                v[r] = rows_mul(v[r], inverse ? make_float2(w.x, -w.y) : w);
            }
        }
        rows_dft<R>(v, inverse);
        const int out = (j - k) * R + k;
        for (int r = 0; r < R; ++r) store(row, out + r * ns, v[r]);
    }
}

template <class Load, class Store>
__device__ __forceinline__ void rows_any_stage(int radix, int rows, int log2p, int ns, const float2* twiddle,
                                               bool inverse, Load load, Store store)
{
    if (radix == 8) rows_stage<8>(rows, log2p, ns, twiddle, inverse, load, store);
    else if (radix == 4) rows_stage<4>(rows, log2p, ns, twiddle, inverse, load, store);
    else rows_stage<2>(rows, log2p, ns, twiddle, inverse, load, store);
}

// Radix of the stage after sub-transforms of length ns: 8 while p / ns allows, then what remains (4 or 2).
__device__ __forceinline__ int rows_radix(int p, int ns) { return p / ns >= 8 ? 8 : p / ns; }

extern "C" __global__ void mri_recon_toeplitz_rows(float2* __restrict__ work, const float2* __restrict__ spectra,
                                                   int coils, int grids, int planes, int n, int log2p,
                                                   int rows_per_block)
{
    // [rows_pad(p)] twiddles, two buffers of rows_pad(rows_per_block * p), the rows' spectrum offsets
    extern __shared__ float2 rows_shared[];
    const int p = 1 << log2p;
    const int span = rows_pad(rows_per_block * p);
    float2* twiddle = rows_shared;
    float2* a = rows_shared + rows_pad(p);
    float2* b = a + span;
    int* spectrum_row = (int*)(b + span);
    const int total = planes * grids;
    for (int i = threadIdx.x; i < p; i += blockDim.x) {
        float s, c;
        sincospif(-2.0f * (float)i / (float)p, &s, &c);
        twiddle[rows_pad(i)] = make_float2(c, s);
    }
    for (int first_row = blockIdx.x * rows_per_block; first_row < total; first_row += gridDim.x * rows_per_block) {
        const int rows = min(rows_per_block, total - first_row);
        float2* block_work = work + first_row * n;
        for (int row = threadIdx.x; row < rows; row += blockDim.x) {
            const int r = first_row + row;
            const int l = r / grids;
            spectrum_row[row] = ((r - l * grids) / coils * planes + l) * p;  // frame t = g / coils, plane l
        }
        __syncthreads();  // the twiddles and offsets written; the last tile's readers of a and b done
        // forward: the first stage reads the rows from work (zero beyond n), the others ping-pong in a and b
        float2* src = a;
        float2* dst = a;
        for (int ns = 1; ns < p;) {
            const int radix = rows_radix(p, ns);
            auto to_shared = [&](int row, int i, float2 v) { dst[rows_pad(row * p + i)] = v; };
            if (ns == 1) {
                auto from_work = [&](int row, int i) {
                    return i < n ? block_work[row * n + i] : make_float2(0.0f, 0.0f);
                };
                rows_any_stage(radix, rows, log2p, ns, twiddle, false, from_work, to_shared);
            } else {
                auto from_shared = [&](int row, int i) { return src[rows_pad(row * p + i)]; };
                rows_any_stage(radix, rows, log2p, ns, twiddle, false, from_shared, to_shared);
            }
            __syncthreads();
            ns *= radix;
            src = dst;
            dst = (dst == a) ? b : a;
        }
        // inverse: the first stage multiplies by the spectra's rows, the last writes the first n points to work
        for (int ns = 1; ns < p;) {
            const int radix = rows_radix(p, ns);
            const bool last = ns * radix == p;
            auto from_shared = [&](int row, int i) { return src[rows_pad(row * p + i)]; };
            auto filtered = [&](int row, int i) {
                return rows_mul(src[rows_pad(row * p + i)], spectra[spectrum_row[row] + i]);
            };
            auto to_shared = [&](int row, int i, float2 v) { dst[rows_pad(row * p + i)] = v; };
            auto to_work = [&](int row, int i, float2 v) {
                if (i < n) block_work[row * n + i] = v;
            };
            if (ns == 1 && last) rows_any_stage(radix, rows, log2p, ns, twiddle, true, filtered, to_work);
            else if (ns == 1) rows_any_stage(radix, rows, log2p, ns, twiddle, true, filtered, to_shared);
            else if (last) rows_any_stage(radix, rows, log2p, ns, twiddle, true, from_shared, to_work);
            else rows_any_stage(radix, rows, log2p, ns, twiddle, true, from_shared, to_shared);
            __syncthreads();
            ns *= radix;
            src = dst;
            dst = (dst == a) ? b : a;
        }
    }
}

extern "C" __global__ void mri_recon_toeplitz_rows_reduce(const float2* __restrict__ maps,
                                                          const float2* __restrict__ work,
                                                          const float2* __restrict__ x, float2* __restrict__ out,
                                                          int coils, int grids, int n0, int n1, int p1, int n,
                                                          float lam, int first)
{
    const int t = blockIdx.y;
    const int nvox = n0 * n1 * n;
    const float2* image = x + t * nvox;
    float2* result = out + t * nvox;
    for (int v = blockIdx.x * blockDim.x + threadIdx.x; v < nvox; v += gridDim.x * blockDim.x) {
        const int ij = v / n;
        const int k = v - ij * n;
        const int i = ij / n1;
        const int l = i * p1 + (ij - i * n1);
        const float2* y = work + (l * grids + t * coils) * n + k;
        float2 acc = toeplitz_initial(first, lam, image, result, v);
        for (int c = 0; c < coils; ++c) toeplitz_add_conj_product(acc, maps[c * nvox + v], y[c * n]);
        result[v] = acc;
    }
}
