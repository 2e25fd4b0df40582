"""Conjugate gradients against numpy.linalg.solve on random Hermitian positive definite systems."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import InvalidDataError, SchemaError
from mri_recon.solvers.cg import cg


def hpd(rng, n: int, condition: float = 50.0) -> np.ndarray:
    """A random Hermitian positive definite matrix with eigenvalues in [1, condition]."""
    q, _ = np.linalg.qr(rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)))
    return (q * np.linspace(1.0, condition, n)) @ q.conj().T


def crandn(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_matches_solve(rng):
    a = hpd(rng, 24)
    b = crandn(rng, 24)
    x, residuals = cg(lambda v: a @ v, b, max_iterations=200, tolerance=1e-12)
    assert x.shape == b.shape
    assert rel(x, np.linalg.solve(a, b)) < 1e-10
    assert residuals[0] == 1.0
    assert residuals[-1] <= 1e-12 < residuals[-2]
    assert rel(a @ x, b) == pytest.approx(residuals[-1], rel=1e-3, abs=1e-14)


def test_any_shape_and_real_systems(rng):
    a = hpd(rng, 12).real + 12 * np.eye(12)  # real symmetric positive definite
    b = rng.standard_normal((3, 4))
    x, _ = cg(lambda v: (a @ v.ravel()).reshape(v.shape), b, max_iterations=100, tolerance=1e-12)
    assert x.shape == (3, 4) and x.dtype == b.dtype
    assert rel(x.ravel(), np.linalg.solve(a, b.ravel())) < 1e-10


def test_initial_guess_and_iteration_limit(rng):
    a = hpd(rng, 30, condition=1e3)
    b = crandn(rng, 30)
    exact = np.linalg.solve(a, b)
    x0 = exact + 1e-3 * crandn(rng, 30)
    _, residuals = cg(lambda v: a @ v, b, x0=x0, max_iterations=0, tolerance=0.0)
    assert residuals == pytest.approx((rel(a @ x0, b),))
    x, residuals = cg(lambda v: a @ v, b, x0=x0, max_iterations=5, tolerance=0.0)
    assert len(residuals) == 6
    assert rel(x, exact) < rel(x0, exact)


def test_callback_and_stopping(rng):
    a = hpd(rng, 40)
    b = crandn(rng, 40)
    seen = []
    _, residuals = cg(lambda v: a @ v, b, max_iterations=100, tolerance=1e-4,
                      callback=lambda i, x, r: seen.append((i, r)))
    assert [i for i, _ in seen] == list(range(1, len(residuals)))
    assert [r for _, r in seen] == list(residuals[1:])
    assert residuals[-1] <= 1e-4 < min(residuals[:-1])


def test_zero_rhs(rng):
    calls = []
    x, residuals = cg(lambda v: calls.append(v) or v, np.zeros((3, 2), dtype=np.complex64),
                      max_iterations=10, tolerance=1e-6)
    assert residuals == (0.0,) and not calls
    assert x.shape == (3, 2) and x.dtype == np.complex64 and not np.any(x)


def test_errors(rng):
    a = hpd(rng, 6)
    b = crandn(rng, 6)
    with pytest.raises(InvalidDataError, match="max_iterations must be >= 0, found -1"):
        cg(lambda v: a @ v, b, max_iterations=-1, tolerance=1e-6)
    with pytest.raises(SchemaError, match=r"x0 must have the shape of rhs \(6,\), found \(5,\)"):
        cg(lambda v: a @ v, b, x0=np.zeros(5), max_iterations=3, tolerance=1e-6)
    with pytest.raises(InvalidDataError, match="positive definite operator, found <p, A p> = .* at iteration 1"):
        cg(lambda v: -(a @ v), b, max_iterations=3, tolerance=1e-6)


@pytest.mark.gpu
def test_gpu_twin(rng):
    cupy = cupy_module()
    a = hpd(rng, 20)
    b = crandn(rng, 20)
    ad, bd = cupy.asarray(a), cupy.asarray(b)
    x, residuals = cg(lambda v: ad @ v, bd, max_iterations=100, tolerance=1e-12)
    assert isinstance(x, cupy.ndarray)
    assert rel(cupy.asnumpy(x), np.linalg.solve(a, b)) < 1e-10
    assert all(isinstance(r, float) for r in residuals)


@pytest.mark.gpu
def test_gpu_checks_every_few_iterations_and_with_a_callback(rng):
    cupy = cupy_module()
    a = hpd(rng, 30).astype(np.complex64)
    b = crandn(rng, 30).astype(np.complex64)
    ad, bd = cupy.asarray(a), cupy.asarray(b)
    seen = []
    x1, res1 = cg(lambda v: ad @ v, bd, max_iterations=12, tolerance=0.0,
                  callback=lambda i, x, r: seen.append((i, r)))
    x2, res2 = cg(lambda v: ad @ v, bd, max_iterations=12, tolerance=0.0, check_every=5)
    assert [i for i, _ in seen] == list(range(1, 13)) and len(res1) == len(res2) == 13
    np.testing.assert_allclose(res1, res2, rtol=1e-6)
    np.testing.assert_allclose([r for _, r in seen], res1[1:], rtol=0)
    assert x2.dtype == cupy.complex64
    # Stops at the first check at or after the iteration where the tolerance is met.
    _, res3 = cg(lambda v: ad @ v, bd, max_iterations=200, tolerance=1e-3, check_every=5)
    first = next(i for i, r in enumerate(res1) if r <= 1e-3) if min(res1) <= 1e-3 else None
    assert res3[-1] <= 1e-3 and (len(res3) - 1) % 5 == 0
    if first is not None:
        assert len(res3) - 1 < first + 5
    with pytest.raises(InvalidDataError, match="positive definite operator"):
        cg(lambda v: -(ad @ v), bd, max_iterations=3, tolerance=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("coil_batch", [None, 2], ids=["all-coils", "batches"])
def test_gpu_sense_cg_graph_replay_equals_eager_launches(rng, coil_batch):
    # The SENSE operator can write into a given array, so the fused CG captures one iteration as a CUDA
    # graph and replays it; wrapping it in a plain callable forces one launch at a time. Same kernels,
    # same order: bit-equal.
    from mri_recon.operators import psf
    from mri_recon.operators.normal.toeplitz import kernel_spectrum, normal_operator
    from mri_recon.sim.trajectories import radial

    cupy = cupy_module()
    matrix = (24, 20)
    traj = radial(matrix, 16, 48, golden=True)
    spectrum = kernel_spectrum(psf(traj, matrix, rng.uniform(0.5, 1.5, traj.shape[0]), device="cpu"))
    maps = (crandn(rng, 3, *matrix) / 3).astype(np.complex64)
    b = crandn(rng, *matrix).astype(np.complex64)
    lam = 0.05 * float(np.abs(spectrum).max())
    op = normal_operator(cupy.asarray(spectrum), coil_maps=cupy.asarray(maps), lam=lam, coil_batch=coil_batch)
    assert op.writes_into
    runs = [cg(op, cupy.asarray(b), max_iterations=12, tolerance=0.0) for _ in range(2)]
    eager = cg(lambda v: op(v), cupy.asarray(b), max_iterations=12, tolerance=0.0)
    for x, residuals in runs[1:] + [eager]:
        np.testing.assert_array_equal(cupy.asnumpy(x), cupy.asnumpy(runs[0][0]))
        assert residuals == runs[0][1]
    cpu_x, cpu_res = cg(normal_operator(spectrum, coil_maps=maps, lam=lam), b.astype(np.complex128),
                        max_iterations=12, tolerance=0.0)
    assert rel(cupy.asnumpy(runs[0][0]), cpu_x) < 1e-4
    np.testing.assert_allclose(runs[0][1], cpu_res, rtol=1e-3)
    assert runs[0][1][-1] < 0.5 * runs[0][1][0]
    # the graph also stops at a tolerance check: met by iteration 8, first checked at 10
    tol = max(runs[0][1][8:11])
    assert min(runs[0][1][:6]) > tol
    _, short = cg(op, cupy.asarray(b), max_iterations=40, tolerance=tol, check_every=5)
    assert short == runs[0][1][:11]
