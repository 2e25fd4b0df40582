// Conjugate gradients on complex64 vectors (float2) with every scalar kept in device memory, so the host
// queues iterations without waiting for the device:
//   mri_recon_cg_dot:       results[i] = Re <a, b>                               (float64)
//   mri_recon_cg_step:      alpha = rr[i-1] / pap[i];  x += alpha p;  r -= alpha A p;  rr[i] = ||r||^2
//   mri_recon_cg_direction: beta = rr[i] / rr[i-1];    p = r + beta p;  then i advances
// rr and pap are the histories of ||r||^2 and <p, A p> (index = iteration), read by the host only when it
// tests convergence.
//
// Sums are deterministic: each block reduces its elements in a fixed order (grid-stride loop, warp
// shuffles, then the warps in order) and stores its partial; the last block to finish (a counter in device
// memory, reset by that block) adds the partials in block order. Equal inputs give bit-equal results on
// every run, which the PSF cache's "identical image" guarantee relies on. Partial sums are float64.

#define CG_THREADS 256

// Sum of v over the block, valid in thread 0; fixed order.
__device__ __forceinline__ double block_sum(double v)
{
    __shared__ double warp_sums[CG_THREADS / 32];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // warp_sums may still be read by a previous call
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    double total = 0.0;
    if (threadIdx.x == 0) {
        for (int w = 0; w < CG_THREADS / 32; ++w) total += warp_sums[w];
    }
    return total;
}

// Store this block's partial; the last block to arrive writes the sum of all partials to *result.
__device__ __forceinline__ void grid_sum(double partial_sum, double* partial, unsigned* counter, double* result)
{
    __shared__ bool last;
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = partial_sum;
        __threadfence();
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    double v = 0.0;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += CG_THREADS) v += __ldcg(partial + b);
    const double total = block_sum(v);
    if (threadIdx.x == 0) {
        *result = total;
        *counter = 0u;
    }
}

// Iteration i = *done + 1 throughout: the index lives in device memory, so one captured iteration (a CUDA
// graph) can be replayed for every i. The direction kernel, the last of an iteration, advances *done.

extern "C" __global__ void __launch_bounds__(CG_THREADS)
mri_recon_cg_dot(const float2* __restrict__ a, const float2* __restrict__ b, long long n, double* __restrict__ partial,
                 unsigned* __restrict__ counter, double* __restrict__ results, const int* __restrict__ done)
{
    double acc = 0.0;
    for (long long k = blockIdx.x * (long long)CG_THREADS + threadIdx.x; k < n; k += (long long)gridDim.x * CG_THREADS) {
        const float2 ak = a[k], bk = b[k];
        acc += (double)ak.x * bk.x + (double)ak.y * bk.y;
    }
    const int i = *done + 1;
    grid_sum(block_sum(acc), partial, counter, results + i);
}

extern "C" __global__ void __launch_bounds__(CG_THREADS)
mri_recon_cg_step(float2* __restrict__ x, float2* __restrict__ r, const float2* __restrict__ p,
                  const float2* __restrict__ ap, const double* __restrict__ pap, double* __restrict__ rr,
                  const int* __restrict__ done, long long n, double* __restrict__ partial,
                  unsigned* __restrict__ counter)
{
    const int i = *done + 1;
    const float alpha = (float)(rr[i - 1] / pap[i]);
    double acc = 0.0;
    for (long long k = blockIdx.x * (long long)CG_THREADS + threadIdx.x; k < n; k += (long long)gridDim.x * CG_THREADS) {
        const float2 pk = p[k], apk = ap[k];
        float2 xk = x[k], rk = r[k];
        xk.x += alpha * pk.x;
        xk.y += alpha * pk.y;
        rk.x -= alpha * apk.x;
        rk.y -= alpha * apk.y;
        x[k] = xk;
        r[k] = rk;
        acc += (double)rk.x * rk.x + (double)rk.y * rk.y;
    }
    grid_sum(block_sum(acc), partial, counter, rr + i);
}

extern "C" __global__ void __launch_bounds__(CG_THREADS)
mri_recon_cg_direction(float2* __restrict__ p, const float2* __restrict__ r, const double* __restrict__ rr,
                       int* __restrict__ done, long long n, unsigned* __restrict__ counter)
{
    const int i = *done + 1;
    const float beta = (float)(rr[i] / rr[i - 1]);
    for (long long k = blockIdx.x * (long long)CG_THREADS + threadIdx.x; k < n; k += (long long)gridDim.x * CG_THREADS) {
        const float2 rk = r[k];
        float2 pk = p[k];
        pk.x = rk.x + beta * pk.x;
        pk.y = rk.y + beta * pk.y;
        p[k] = pk;
    }
    // the last block to finish (every block has read *done by then) advances the iteration
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        *done = i;
        *counter = 0u;
    }
}
