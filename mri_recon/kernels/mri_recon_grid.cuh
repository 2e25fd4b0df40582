// Device functions shared by the element-wise kernels of the Toeplitz normal operators (toeplitz.cu,
// segments.cu): where an image voxel sits on the 2x grid and back, and the start of the reduction. Included as
// "mri_recon_grid.cuh" (the loader passes -I of this folder to NVRTC).
//
// Layout: image (nx, ny, nz) C order, nz = 1 in 2D; the 2x grid (px, py, pz) = (2 nx, 2 ny, 2 nz or 1), C order;
// the image occupies its top corner.

#ifndef MRI_RECON_GRID_CUH
#define MRI_RECON_GRID_CUH

// The 2x grid's linear index of image voxel v.
__device__ __forceinline__ long long mri_recon_grid_index(long long v, int ny, int nz, int py, int pz) {
    const int k = (int)(v % nz);
    const long long rest = v / nz;
    const int j = (int)(rest % ny);
    const int i = (int)(rest / ny);
    return ((long long)i * py + j) * pz + k;
}

// The image voxel at point p of the 2x grid, or -1 where p lies outside the image (the zero padding).
__device__ __forceinline__ long long mri_recon_image_voxel(long long p, int nx, int ny, int nz, int py, int pz) {
    const int k = (int)(p % pz);
    const long long rest = p / pz;
    const int j = (int)(rest % py);
    const int i = (int)(rest / py);
    return (i < nx && j < ny && k < nz) ? ((long long)i * ny + j) * nz + k : -1;
}

// The value a reduction adds to at voxel v: lam x[v] in the first launch of an application (its first coil
// group), else what the earlier launches left in out[v].
__device__ __forceinline__ float2 mri_recon_reduce_start(const float2* __restrict__ x, const float2* out,
                                                         long long v, float lam, int first) {
    return first ? make_float2(lam * x[v].x, lam * x[v].y) : out[v];
}

#endif  // MRI_RECON_GRID_CUH
