"""cuFFT plans: small grids' plans are kept; large ones are kept within a share of the GPU's memory (least
recently used first out) and made per use beyond it (their work areas are freed)."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module


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


@pytest.mark.gpu
@pytest.mark.parametrize("grid", [(16, 12, 10), (10, 8, 6), (16, 12)])
def test_corner_transform_is_the_full_transform_where_it_is_read(grid):
    from cupy.cuda import cufft

    from mri_recon.operators.gpu.fft import CornerFft

    cupy = cupy_module()
    rng = np.random.default_rng()
    corner, batch, axes = grid[0] // 2, 3, tuple(range(1, len(grid) + 1))
    transform = CornerFft(batch, grid, corner, 0)
    assert transform.pruned == (len(grid) == 3)
    x = (rng.standard_normal((batch, *grid)) + 1j * rng.standard_normal((batch, *grid))).astype(np.complex64)
    x[:, corner:] = 0  # the forward input: the image in the corner of the padded grid
    y = cupy.asarray(x)
    transform(y, cufft.CUFFT_FORWARD)
    ref = np.fft.fftn(x.astype(np.complex128), axes=axes)
    assert np.linalg.norm(cupy.asnumpy(y) - ref) / np.linalg.norm(ref) < 2e-6
    z = (rng.standard_normal((batch, *grid)) + 1j * rng.standard_normal((batch, *grid))).astype(np.complex64)
    w = cupy.asarray(z)
    transform(w, cufft.CUFFT_INVERSE)  # unnormalized; only the corner planes are wanted
    ref = np.fft.ifftn(z.astype(np.complex128), axes=axes)[:, :corner] * np.prod(grid)
    got = cupy.asnumpy(w)[:, :corner]
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 2e-6
