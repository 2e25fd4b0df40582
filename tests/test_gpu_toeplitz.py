"""The fused GPU CG-SENSE operator equals the NumPy normal operator, for every coil batching."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.backend import cupy_module
from mri_recon.operators.toeplitz import kernel_spectrum, normal_operator


def _crandn(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(16, 16), (13, 7), (6, 5, 4)], ids=["2d-even", "2d-odd", "3d"])
@pytest.mark.parametrize("coil_batch", [None, 1, 2], ids=["all", "one", "two"])
def test_fused_sense_operator_matches_numpy(rng, matrix, coil_batch):
    cupy = cupy_module()
    psf = _crandn(rng, *(2 * n for n in matrix))
    maps = _crandn(rng, 3, *matrix)
    x = _crandn(rng, *matrix)
    ref = normal_operator(kernel_spectrum(psf), coil_maps=maps, lam=0.3)(x)
    op = normal_operator(kernel_spectrum(cupy.asarray(psf)), coil_maps=cupy.asarray(maps), lam=0.3,
                         coil_batch=coil_batch)
    first = cupy.asnumpy(op(cupy.asarray(x)))
    second = cupy.asnumpy(op(cupy.asarray(x)))  # the reused work buffer must not leak between calls
    for got in (first, second):
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-5
