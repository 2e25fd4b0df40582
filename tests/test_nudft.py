"""The NumPy oracle itself: numpy.fft on Cartesian grids, adjointness, chunking, shapes and errors."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.errors import SchemaError
from mri_recon.operators.engines.nudft import nudft_adjoint, nudft_forward, voxel_positions

MATRICES = [(8, 8), (7, 9), (6, 5, 4), (5, 4, 3)]
IDS = ["2d-even", "2d-odd", "3d-even", "3d-odd"]


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def crandn(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def random_trajectory(rng: np.random.Generator, matrix: tuple[int, ...], m: int) -> np.ndarray:
    return ((rng.random((m, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)


def cartesian(matrix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Integer grid q_d = j - N_d // 2 (fftshift order) as a trajectory, and the phase
    exp(i 2 pi sum_d q_d (N_d // 2) / N_d) (exp(i pi sum q) for even sizes)."""
    axes = [np.arange(n) - n // 2 for n in matrix]
    grids = np.meshgrid(*axes, indexing="ij")
    k = np.stack([g.reshape(-1) for g in grids], axis=1).astype(np.float64)
    phase = sum(2 * np.pi * k[:, d] * (n // 2) / n for d, n in enumerate(matrix))
    return k, np.exp(1j * phase).reshape(matrix)


def test_voxel_positions():
    r = voxel_positions((4, 3))
    assert r.shape == (12, 2)
    np.testing.assert_allclose(r[:3], [[-0.5, -1 / 3], [-0.5, 0], [-0.5, 1 / 3]])
    np.testing.assert_allclose(r[-1], [0.25, 1 / 3])


@pytest.mark.parametrize("matrix", MATRICES, ids=IDS)
def test_forward_on_cartesian_grid_is_fft(rng, matrix):
    # d(q) = sum_j x_j exp(-i 2 pi q (j - c) / N) = exp(i 2 pi q c / N) FFT(x)[q], c = N // 2
    x = crandn(rng, *matrix)
    k, phase = cartesian(matrix)
    expected = np.fft.fftshift(np.fft.fftn(x)) * phase
    got = nudft_forward(x, k)
    assert got.shape == (k.shape[0],)
    assert rel(got, expected.reshape(-1)) < 1e-12


@pytest.mark.parametrize("matrix", MATRICES, ids=IDS)
def test_adjoint_on_cartesian_grid_is_inverse_fft(rng, matrix):
    d = crandn(rng, *matrix)
    k, phase = cartesian(matrix)
    expected = np.fft.ifftn(np.fft.ifftshift(d * np.conj(phase))) * np.prod(matrix)
    got = nudft_adjoint(d.reshape(-1), k, matrix)
    assert got.shape == matrix
    assert rel(got, expected) < 1e-12


@pytest.mark.parametrize("matrix", MATRICES, ids=IDS)
def test_adjointness(rng, matrix):
    m, coils = 97, 2
    k = random_trajectory(rng, matrix, m)
    x = crandn(rng, coils, *matrix)
    y = crandn(rng, coils, m)
    fx = nudft_forward(x, k)
    fhy = nudft_adjoint(y, k, matrix)
    assert fx.shape == y.shape
    assert fhy.shape == x.shape
    assert abs(np.vdot(y, fx) - np.vdot(fhy, x)) / abs(np.vdot(y, fx)) < 1e-12


def test_chunks_do_not_change_the_result(rng):
    matrix, m = (9, 7), 131  # neither count a multiple of the blocks
    k = random_trajectory(rng, matrix, m)
    d = crandn(rng, 3, m)
    x = crandn(rng, 3, *matrix)
    whole_adj, whole_fwd = nudft_adjoint(d, k, matrix), nudft_forward(x, k)
    for chunk in (1, 24 * 5, 24 * 37):
        assert rel(nudft_adjoint(d, k, matrix, chunk_bytes=chunk), whole_adj) < 1e-13
        assert rel(nudft_forward(x, k, chunk_bytes=chunk), whole_fwd) < 1e-13


def test_complex64_option(rng):
    matrix, m = (16, 12), 200
    k = random_trajectory(rng, matrix, m)
    d = crandn(rng, 2, m)
    x = crandn(rng, *matrix)
    adj = nudft_adjoint(d, k, matrix, dtype=np.complex64)
    fwd = nudft_forward(x, k, dtype=np.complex64)
    assert adj.dtype == np.complex64 and fwd.dtype == np.complex64
    assert rel(adj, nudft_adjoint(d, k, matrix)) < 2e-6
    assert rel(fwd, nudft_forward(x, k)) < 2e-6


def test_shapes(rng):
    matrix, m = (6, 5), 40
    k = random_trajectory(rng, matrix, m)
    assert nudft_adjoint(crandn(rng, m), k, matrix).shape == matrix
    assert nudft_adjoint(crandn(rng, 3, m), k, matrix).shape == (3, *matrix)
    assert nudft_forward(crandn(rng, *matrix), k).shape == (m,)
    assert nudft_forward(crandn(rng, 3, *matrix), k).shape == (3, m)


def test_errors(rng):
    matrix = (6, 5)
    k = random_trajectory(rng, matrix, 10)
    with pytest.raises(SchemaError, match=r"trajectory must have shape \(M, 3\)"):
        nudft_adjoint(crandn(rng, 10), k, (6, 5, 4))
    with pytest.raises(SchemaError, match=r"kspace must have shape \(C, 10\) or \(10,\), found \(2, 9\)"):
        nudft_adjoint(crandn(rng, 2, 9), k, matrix)
    with pytest.raises(SchemaError, match="do not match"):
        nudft_forward(crandn(rng, 2, 3, *matrix), k)
    with pytest.raises(SchemaError, match="do not match"):
        nudft_forward(crandn(rng, *matrix), k[:, 0])
