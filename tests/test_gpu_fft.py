"""cuFFT plans: small grids' plans are kept, large ones made per use (their work areas are freed)."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.backend import cupy_module


@pytest.mark.gpu
def test_small_plans_are_kept_and_large_ones_are_not(monkeypatch):
    from mri_recon.operators.gpu import fft as gpu_fft

    cupy = cupy_module()
    monkeypatch.setattr(gpu_fft, "CACHE_LIMIT", 8 * 2 * 32 * 32)
    small, large = (2, 32, 32), (2, 64, 64)
    assert gpu_fft.fft_plan(small, 0) is gpu_fft.fft_plan(small, 0)
    first, second = gpu_fft.fft_plan(large, 0), gpu_fft.fft_plan(large, 0)
    assert first is not second
    x = (cupy.random.standard_normal(large) + 1j * cupy.random.standard_normal(large)).astype(cupy.complex64)
    y = x.copy()
    from cupy.cuda import cufft

    second.fft(y, y, cufft.CUFFT_FORWARD)  # batched over axis 0, in place, unnormalized
    ref = np.fft.fftn(cupy.asnumpy(x).astype(np.complex128), axes=(1, 2))
    assert np.linalg.norm(cupy.asnumpy(y) - ref) / np.linalg.norm(ref) < 1e-5
