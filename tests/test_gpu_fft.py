"""cuFFT plans: small grids' plans are kept; large ones are kept within a share of the GPU's memory (least
recently used first out) and made per use beyond it (their work areas are freed)."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.backend import cupy_module


@pytest.mark.gpu
def test_plans_are_kept_within_the_budget(monkeypatch):
    from mri_recon.operators.gpu import fft as gpu_fft

    cupy = cupy_module()
    gpu_fft.release()
    monkeypatch.setattr(gpu_fft, "CACHE_LIMIT", 8 * 2 * 32 * 32)
    small, large, other, huge = (2, 32, 32), (2, 64, 64), (2, 64, 48), (2, 128, 128)
    monkeypatch.setattr(gpu_fft, "_large_budget", lambda index: 8 * (2 * 64 * 64 + 2 * 64 * 48))
    assert gpu_fft.fft_plan(small, 0) is gpu_fft.fft_plan(small, 0)
    kept = gpu_fft.fft_plan(large, 0)
    assert gpu_fft.fft_plan(large, 0) is kept and gpu_fft.fft_plan(other, 0) is gpu_fft.fft_plan(other, 0)
    assert gpu_fft.fft_plan(huge, 0) is not gpu_fft.fft_plan(huge, 0)  # above the budget: per use
    monkeypatch.setattr(gpu_fft, "_large_budget", lambda index: 8 * 2 * 64 * 64)
    gpu_fft.fft_plan((2, 40, 40), 0)  # a new one evicts the least recently used until the rest fits
    assert gpu_fft.fft_plan(large, 0) is not kept
    x = (cupy.random.standard_normal(large) + 1j * cupy.random.standard_normal(large)).astype(cupy.complex64)
    y = x.copy()
    from cupy.cuda import cufft

    gpu_fft.fft_plan(large, 0).fft(y, y, cufft.CUFFT_FORWARD)  # batched over axis 0, in place, unnormalized
    ref = np.fft.fftn(cupy.asnumpy(x).astype(np.complex128), axes=(1, 2))
    assert np.linalg.norm(cupy.asnumpy(y) - ref) / np.linalg.norm(ref) < 1e-5
    gpu_fft.release()
