"""Power iteration (FISTA's and the primal-dual method's step sizes) against numpy.linalg.eigvalsh."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import InvalidDataError
from mri_recon.solvers.power import POWER_ITERATIONS, RAISE, operator_norm


def hermitian_psd(rng, n: int) -> np.ndarray:
    """A random Hermitian positive semi-definite matrix whose largest eigenvalue is twice the next one."""
    q, _ = np.linalg.qr(rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)))
    return (q * np.r_[np.linspace(0.0, 1.5, n - 1), 3.0]) @ q.conj().T


@pytest.mark.parametrize("dtype, rtol", [(np.complex128, 1e-7), (np.complex64, 1e-5)])
def test_largest_eigenvalue_raised(rng, dtype, rtol):
    a = hermitian_psd(rng, 16)
    largest = np.linalg.eigvalsh(a)[-1]
    estimate = operator_norm(lambda v: (a @ v).astype(dtype), np.zeros(16, dtype))
    assert isinstance(estimate, float)
    assert estimate == pytest.approx(RAISE * largest, rel=rtol)  # 0.5 ** 30 of the other eigenvector is left


def test_any_shape_and_a_fixed_start(rng):
    scale = rng.uniform(0.0, 1.0, (3, 4, 5))
    scale[1, 2, 3] = 2.0
    first = operator_norm(lambda v: scale * v, np.zeros((3, 4, 5), np.complex128), steps=POWER_ITERATIONS)
    assert first == pytest.approx(RAISE * 2.0, rel=1e-4)
    assert operator_norm(lambda v: scale * v, np.zeros((3, 4, 5), np.complex128)) == first


def test_steps_must_be_positive():
    with pytest.raises(InvalidDataError, match="power iteration needs at least 1 step, found 0"):
        operator_norm(lambda v: v, np.zeros(3, np.complex64), steps=0)


@pytest.mark.gpu
def test_gpu_twin(rng):
    cupy = cupy_module()
    a = hermitian_psd(rng, 16).astype(np.complex64)
    ad = cupy.asarray(a)
    gpu = operator_norm(lambda v: ad @ v, cupy.zeros(16, np.complex64))
    cpu = operator_norm(lambda v: a @ v, np.zeros(16, np.complex64))
    assert isinstance(gpu, float) and gpu == pytest.approx(cpu, rel=1e-5)
