"""The Toeplitz product against F^H W F applied directly with the NumPy oracle, and the CG-SENSE operator."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import adjoint_gap

from mri_recon.arrays.backend import cupy_module
from mri_recon.operators import psf
from mri_recon.operators.engines.nudft import nudft_adjoint, nudft_forward
from mri_recon.operators.normal.toeplitz import kernel_spectrum, normal_operator, toeplitz_apply

CASES = [((16, 16), 1.0), ((9, 11), 1.0), ((6, 8, 4), 1.0), ((5, 7, 3), 1.0), ((10, 9), 2.0)]
IDS = ["2d-even", "2d-odd", "3d-even", "3d-odd", "2d-2x-nyquist"]


def rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def crandn(rng, *shape) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def problem(rng, matrix, reach, m=400):
    k = ((rng.random((m, len(matrix))) - 0.5) * reach * np.asarray(matrix)).astype(np.float32)
    w = rng.random(m).astype(np.float32)
    return k, w


def direct(x, k, w, matrix):
    """F^H W F x with the float64 oracle."""
    return nudft_adjoint(w * nudft_forward(x, k), k, matrix)


@pytest.mark.parametrize(("matrix", "reach"), CASES, ids=IDS)
def test_toeplitz_equals_direct_normal_operator(rng, matrix, reach):
    k, w = problem(rng, matrix, reach)
    spectrum = kernel_spectrum(psf(k, matrix, w, method="exact"))
    assert spectrum.shape == tuple(2 * n for n in matrix) and spectrum.dtype == np.complex64
    x = crandn(rng, 3, *matrix)
    y = toeplitz_apply(x, spectrum)
    assert y.shape == x.shape and y.dtype == np.complex64
    assert rel(y, direct(x, k, w, matrix)) < 1e-5
    assert rel(toeplitz_apply(x[1], spectrum), y[1]) < 1e-6  # no batch axis


def test_sense_operator_equals_direct(rng):
    matrix, coils, lam = (10, 12), 3, 0.7
    k, w = problem(rng, matrix, 1.0)
    maps = crandn(rng, coils, *matrix)
    x = crandn(rng, *matrix)
    spectrum = kernel_spectrum(psf(k, matrix, w))
    expected = (np.conj(maps) * direct(maps * x, k, w, matrix)).sum(axis=0) + lam * x
    for batch in (None, 1, 2):
        op = normal_operator(spectrum, coil_maps=maps, lam=lam, coil_batch=batch)
        got = op(x)
        assert got.shape == matrix
        assert rel(got, expected) < 1e-5
    without_lam = normal_operator(spectrum, coil_maps=maps)(x)
    assert rel(without_lam, expected - lam * x) < 1e-5


def test_per_coil_operator_and_batches(rng):
    matrix, lam = (9, 8), 0.25
    k, w = problem(rng, matrix, 1.0)
    spectrum = kernel_spectrum(psf(k, matrix, w))
    x = crandn(rng, 5, *matrix)
    expected = direct(x, k, w, matrix) + lam * x
    for batch in (None, 1, 2, 5):
        assert rel(normal_operator(spectrum, lam=lam, coil_batch=batch)(x), expected) < 1e-5


def test_operator_is_hermitian_positive(rng):
    matrix = (8, 7)
    k, w = problem(rng, matrix, 1.0)
    maps = crandn(rng, 2, *matrix)
    op = normal_operator(kernel_spectrum(psf(k, matrix, w)), coil_maps=maps, lam=1e-3)
    x, y = crandn(rng, *matrix).astype(np.complex128), crandn(rng, *matrix).astype(np.complex128)
    ax, ay = op(x.astype(np.complex64)), op(y.astype(np.complex64))
    assert adjoint_gap(x, ay, y, ax) < 1e-5
    assert np.vdot(x, ax).real > 0


@pytest.mark.gpu
@pytest.mark.parametrize(("matrix", "reach"), CASES, ids=IDS)
def test_gpu_twin(rng, matrix, reach):
    cupy = cupy_module()
    k, w = problem(rng, matrix, reach)
    p = psf(k, matrix, w)
    x = crandn(rng, 2, *matrix)
    maps = crandn(rng, 2, *matrix)
    spectrum = kernel_spectrum(cupy.asarray(p))
    assert isinstance(spectrum, cupy.ndarray)
    got = toeplitz_apply(cupy.asarray(x), spectrum)
    assert rel(cupy.asnumpy(got), toeplitz_apply(x, kernel_spectrum(p))) < 1e-5
    op = normal_operator(spectrum, coil_maps=cupy.asarray(maps), lam=0.1, coil_batch=1)
    ref = normal_operator(kernel_spectrum(p), coil_maps=maps, lam=0.1)
    assert rel(cupy.asnumpy(op(cupy.asarray(x[0]))), ref(x[0])) < 1e-5
