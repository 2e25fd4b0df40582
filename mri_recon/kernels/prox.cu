// Proximal steps of ADMM's z- and u-updates (solvers/proximal.py launches them; its NumPy code is the
// oracle). With v = K x + u (K x: the wavelet coefficients or the finite differences of the image):
//
//   mri_recon_prox_soft:  z = soft(v, t) element-wise, soft(v, t) = max(1 - t / |v|, 0) v  (complex modulus);
//   mri_recon_prox_group: z = max(1 - t / ||v_i||, 0) v_i per voxel i, ||v_i||^2 = sum_a |v_a[i]|^2 over the
//                         `groups` components (isotropic total variation);
//
// and both then set u = v - z. Layout: complex64 as float2; `kx`, `u`, `z` of `groups * n` elements,
// component a at a * n. Grid-stride loops.

__device__ __forceinline__ float prox_shrink(float magnitude, float t)
{
    return magnitude > t ? 1.0f - t / magnitude : 0.0f;
}

extern "C" __global__ void mri_recon_prox_soft(const float2* __restrict__ kx, float2* __restrict__ u,
                                               float2* __restrict__ z, long long n, float t)
{
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
         k += (long long)gridDim.x * blockDim.x) {
        const float2 a = kx[k], b = u[k];
        const float2 v = make_float2(a.x + b.x, a.y + b.y);
        const float scale = prox_shrink(hypotf(v.x, v.y), t);
        const float2 zk = make_float2(scale * v.x, scale * v.y);
        z[k] = zk;
        u[k] = make_float2(v.x - zk.x, v.y - zk.y);
    }
}

extern "C" __global__ void mri_recon_prox_group(const float2* __restrict__ kx, float2* __restrict__ u,
                                                float2* __restrict__ z, long long n, int groups, float t)
{
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n;
         k += (long long)gridDim.x * blockDim.x) {
        float norm2 = 0.0f;
        for (int a = 0; a < groups; ++a) {
            const float2 p = kx[a * n + k], q = u[a * n + k];
            const float vx = p.x + q.x, vy = p.y + q.y;
            norm2 += vx * vx + vy * vy;
        }
        const float scale = prox_shrink(sqrtf(norm2), t);
        for (int a = 0; a < groups; ++a) {
            const float2 p = kx[a * n + k], q = u[a * n + k];
            const float2 v = make_float2(p.x + q.x, p.y + q.y);
            const float2 zk = make_float2(scale * v.x, scale * v.y);
            z[a * n + k] = zk;
            u[a * n + k] = make_float2(v.x - zk.x, v.y - zk.y);
        }
    }
}
