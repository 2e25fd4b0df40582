// Finite differences for total variation (operators/finite_difference.py launches them; its NumPy code is
// the oracle). D x holds x[i + e_a] - x[i] in component a, 0 on the last plane of axis a (Neumann).
//
//   mri_recon_tv_gradient:      out[a] = D_a x                                   (out: ndim x the image)
//   mri_recon_tv_adjoint_rhs:   out = rhs + rho D^H q,  (D^H q)[i] = sum_a q_a[i - e_a] [i_a > 0] - q_a[i] [i_a < n_a - 1]
//   mri_recon_tv_laplacian_add: out += rho D^H D x
//
// Layout: complex64 as float2, C order; images (batch, nx, ny, nz) with nz = 1 in 2-D (ndim = 2: axes x, y;
// ndim = 3: x, y, z). One thread per voxel, grid-stride loops.

struct TvIndex {
    long long total, stride[3];
    int n[3];
};

__device__ __forceinline__ TvIndex tv_index(int batch, int nx, int ny, int nz)
{
    TvIndex s;
    s.n[0] = nx; s.n[1] = ny; s.n[2] = nz;
    s.stride[2] = 1; s.stride[1] = nz; s.stride[0] = (long long)ny * nz;
    s.total = (long long)batch * nx * ny * nz;
    return s;
}

__device__ __forceinline__ int tv_coord(long long v, const TvIndex& s, int a)
{
    return (int)((v / s.stride[a]) % s.n[a]);
}

extern "C" __global__ void mri_recon_tv_gradient(const float2* __restrict__ x, float2* __restrict__ out,
                                                 int batch, int nx, int ny, int nz, int ndim)
{
    const TvIndex s = tv_index(batch, nx, ny, nz);
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < s.total;
         v += (long long)gridDim.x * blockDim.x) {
        const float2 xv = x[v];
        for (int a = 0; a < ndim; ++a) {
            float2 g = make_float2(0.0f, 0.0f);
            if (tv_coord(v, s, a) < s.n[a] - 1) {
                const float2 next = x[v + s.stride[a]];
                g = make_float2(next.x - xv.x, next.y - xv.y);
            }
            out[a * s.total + v] = g;
        }
    }
}

extern "C" __global__ void mri_recon_tv_adjoint_rhs(const float2* __restrict__ rhs, const float2* __restrict__ q,
                                                    float2* __restrict__ out, float rho, int batch, int nx, int ny,
                                                    int nz, int ndim)
{
    const TvIndex s = tv_index(batch, nx, ny, nz);
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < s.total;
         v += (long long)gridDim.x * blockDim.x) {
        float2 acc = make_float2(0.0f, 0.0f);
        for (int a = 0; a < ndim; ++a) {
            const int i = tv_coord(v, s, a);
            const float2* qa = q + a * s.total;
            if (i > 0) {
                const float2 prev = qa[v - s.stride[a]];
                acc.x += prev.x; acc.y += prev.y;
            }
            if (i < s.n[a] - 1) {
                const float2 here = qa[v];
                acc.x -= here.x; acc.y -= here.y;
            }
        }
        const float2 r = rhs[v];
        out[v] = make_float2(r.x + rho * acc.x, r.y + rho * acc.y);
    }
}

extern "C" __global__ void mri_recon_tv_laplacian_add(const float2* __restrict__ x, float2* __restrict__ out,
                                                      float rho, int batch, int nx, int ny, int nz, int ndim)
{
    const TvIndex s = tv_index(batch, nx, ny, nz);
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < s.total;
         v += (long long)gridDim.x * blockDim.x) {
        const float2 xv = x[v];
        float2 acc = make_float2(0.0f, 0.0f);
        for (int a = 0; a < ndim; ++a) {
            const int i = tv_coord(v, s, a);
            if (i > 0) {  // + (D_a x)[i - e_a] = x[i] - x[i - e_a]
                const float2 prev = x[v - s.stride[a]];
                acc.x += xv.x - prev.x; acc.y += xv.y - prev.y;
            }
            if (i < s.n[a] - 1) {  // - (D_a x)[i] = -(x[i + e_a] - x[i])
                const float2 next = x[v + s.stride[a]];
                acc.x -= next.x - xv.x; acc.y -= next.y - xv.y;
            }
        }
        float2 o = out[v];
        o.x += rho * acc.x;
        o.y += rho * acc.y;
        out[v] = o;
    }
}
