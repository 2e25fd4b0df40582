// One level of the orthogonal Daubechies wavelet transform along one axis, periodic extension
// (operators/wavelet.py is the launcher and, in NumPy, the oracle).
//
//   analysis:  a[i] = sum_k lo[k] x[(2 i + L/2 - k) mod m],  d[i] = sum_k hi[k] x[(2 i + L/2 - k) mod m]
//              written as [a | d] along the axis (a at i, d at m/2 + i);
//   synthesis: the adjoint, which is the inverse: x[j] = sum over (i, k) with (2 i + L/2 - k) mod m = j of
//              lo[k] a[i] + hi[k] d[i].
//
// Layout: complex64 as float2, C order. `box` is a contiguous copy (batch, m0, m1, m2) of the region being
// transformed (the approximation box of this level); the result goes into the same region of `out`, the
// whole array (batch, n0, n1, n2). 2-D images have m2 = n2 = 1. `taps` holds lo (L floats) then hi (L
// floats); m along `axis` is even (the launcher checks it). Grid-stride loops: any grid size works.

extern "C" __global__ void mri_recon_wavelet_analysis(const float2* __restrict__ box, float2* __restrict__ out,
                                                      const float* __restrict__ taps, int length, int batch,
                                                      int m0, int m1, int m2, int n0, int n1, int n2, int axis)
{
    const int m[3] = {m0, m1, m2};
    int half[3] = {m0, m1, m2};
    half[axis] /= 2;
    const long long pairs = (long long)batch * half[0] * half[1] * half[2];
    const int ma = m[axis];
    const long long stride = axis == 0 ? (long long)m1 * m2 : (axis == 1 ? (long long)m2 : 1LL);
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < pairs;
         t += (long long)gridDim.x * blockDim.x) {
        int c[3];
        long long rest = t;
        c[2] = (int)(rest % half[2]); rest /= half[2];
        c[1] = (int)(rest % half[1]); rest /= half[1];
        c[0] = (int)(rest % half[0]); rest /= half[0];
        const long long b = rest;
        const int i = c[axis];
        c[axis] = 0;
        const long long line = (((b * m0 + c[0]) * m1 + c[1]) * m2 + c[2]);  // element 0 of the line in box
        float2 a = make_float2(0.0f, 0.0f), d = make_float2(0.0f, 0.0f);
        for (int k = 0; k < length; ++k) {
            int j = (2 * i + length / 2 - k) % ma;
            if (j < 0) j += ma;
            const float2 v = box[line + j * stride];
            const float lo = taps[k], hi = taps[length + k];
            a.x += lo * v.x; a.y += lo * v.y;
            d.x += hi * v.x; d.y += hi * v.y;
        }
        c[axis] = i;
        const long long base = ((b * n0 + c[0]) * n1 + c[1]) * n2 + c[2];
        const long long nstride = axis == 0 ? (long long)n1 * n2 : (axis == 1 ? (long long)n2 : 1LL);
        out[base] = a;
        out[base + (long long)(ma / 2) * nstride] = d;
    }
}

extern "C" __global__ void mri_recon_wavelet_synthesis(const float2* __restrict__ box, float2* __restrict__ out,
                                                       const float* __restrict__ taps, int length, int batch,
                                                       int m0, int m1, int m2, int n0, int n1, int n2, int axis)
{
    const int m[3] = {m0, m1, m2};
    const long long total = (long long)batch * m0 * m1 * m2;
    const int ma = m[axis], h = ma / 2;
    const long long stride = axis == 0 ? (long long)m1 * m2 : (axis == 1 ? (long long)m2 : 1LL);
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        int c[3];
        long long rest = t;
        c[2] = (int)(rest % m2); rest /= m2;
        c[1] = (int)(rest % m1); rest /= m1;
        c[0] = (int)(rest % m0); rest /= m0;
        const long long b = rest;
        const int j = c[axis];
        c[axis] = 0;
        const long long line = (((b * m0 + c[0]) * m1 + c[1]) * m2 + c[2]);
        float2 acc = make_float2(0.0f, 0.0f);
        for (int k = 0; k < length; ++k) {
            int s = (j - length / 2 + k) % ma;  // 2 i = j - L/2 + k (mod m)
            if (s < 0) s += ma;
            if (s & 1) continue;
            const int i = s / 2;
            const float2 a = box[line + i * stride], d = box[line + (i + h) * stride];
            const float lo = taps[k], hi = taps[length + k];
            acc.x += lo * a.x + hi * d.x;
            acc.y += lo * a.y + hi * d.y;
        }
        c[axis] = j;
        out[((b * n0 + c[0]) * n1 + c[1]) * n2 + c[2]] = acc;
    }
}
