// Fused vector updates of conjugate gradients on complex64 vectors (float2), with the step sizes read from
// device memory so the host never waits for them:
//   mri_recon_cg_step:      alpha = rr / <p, A p>;  x += alpha p;  r -= alpha A p
//   mri_recon_cg_direction: beta = rr_new / rr;     p = r + beta p
// The inner products come from cuBLAS as complex64 scalars; their real parts are used.

extern "C" __global__ void mri_recon_cg_step(float2* __restrict__ x, float2* __restrict__ r,
                                             const float2* __restrict__ p, const float2* __restrict__ ap,
                                             const float2* __restrict__ pap, const float2* __restrict__ rr,
                                             long long n)
{
    const float alpha = (float)((double)rr[0].x / (double)pap[0].x);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float2 pi = p[i], api = ap[i];
        float2 xi = x[i], ri = r[i];
        xi.x += alpha * pi.x;
        xi.y += alpha * pi.y;
        ri.x -= alpha * api.x;
        ri.y -= alpha * api.y;
        x[i] = xi;
        r[i] = ri;
    }
}

extern "C" __global__ void mri_recon_cg_direction(float2* __restrict__ p, const float2* __restrict__ r,
                                                  const float2* __restrict__ rr_new, const float2* __restrict__ rr,
                                                  long long n)
{
    const float beta = (float)((double)rr_new[0].x / (double)rr[0].x);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float2 ri = r[i];
        float2 pi = p[i];
        pi.x = ri.x + beta * pi.x;
        pi.y = ri.y + beta * pi.y;
        p[i] = pi;
    }
}
