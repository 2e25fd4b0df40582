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
        float2 acc;
        if (first) {
            const float2 xv = image[v];
            acc = make_float2(lam * xv.x, lam * xv.y);
        } else {
            acc = result[v];
        }
        for (int c = 0; c < coils; ++c) {
            const float2 s = maps[(long long)c * nvox + v];
            const float2 y = frame[(long long)c * grid_size + p];
            acc.x += s.x * y.x + s.y * y.y;  // conj(s) * y
            acc.y += s.x * y.y - s.y * y.x;
        }
        result[v] = acc;
    }
}
