"""Density compensation: the radial ramp, Pipe-Menon weights, their normalization and their PSF."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy.special import j1

from mri_recon.errors import InvalidDataError
from mri_recon.operators.engines import finufft as nufft_cpu
from mri_recon.prep import dcf
from mri_recon.sim import phantom
from mri_recon.sim import trajectories as tr

N = 48


def rel(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


def disc_psf(n: int, radius: float) -> np.ndarray:
    """PSF of ideal uniform sampling of the disc |k| < radius: radius J1(2 pi radius |r|) / |r| / n^2."""
    r = np.linalg.norm(phantom.voxel_positions((n, n)), axis=1)
    safe = np.maximum(r, 1e-12)
    out = np.where(r > 0, radius * j1(2 * np.pi * radius * safe) / safe, np.pi * radius**2)
    return (out / n**2).reshape(n, n)


def psf(weights: np.ndarray, k: np.ndarray, n: int) -> np.ndarray:
    """F^H w: the image of a unit point at r = 0 after density-compensated gridding."""
    return nufft_cpu.adjoint(weights[None].astype(np.complex128), k, (n, n))[0]


TRAJECTORIES = {
    "radial": lambda: tr.radial((N, N), 76),
    "golden": lambda: tr.radial((N, N), 76, golden=True),
    "spiral": lambda: tr.spiral((N, N), 12),
}


@functools.cache
def pipe_menon_of(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Trajectory ``name`` of :data:`TRAJECTORIES` and its Pipe-Menon weights (computed once per run)."""
    k = TRAJECTORIES[name]()
    return k, dcf.pipe_menon(k, (N, N))


def test_ramp_is_radius_with_centre_share():
    k = tr.radial((N, N), 40)
    w = dcf.ramp(k, (N, N)).astype(np.float64)
    radius = np.linalg.norm(k, axis=1)
    moving = radius > 0
    ratio = w[moving] / radius[moving]
    assert np.allclose(ratio, ratio[0], rtol=1e-5)
    assert np.allclose(w[~moving], ratio[0] * 0.5 / 4, rtol=1e-5)  # delta / 4 with delta = 1/2


@pytest.mark.parametrize("make,matrix,axes,volume", [
    (lambda: tr.radial((N, N), 76), (N, N), None, np.pi / 4),
    (lambda: tr.kooshball((24, 24, 24), 900), (24, 24, 24), None, np.pi / 6),
    (lambda: tr.stack_of_stars((32, 32, 6), 50), (32, 32, 6), (0, 1), np.pi / 4),
], ids=["radial", "kooshball", "stack-of-stars"])
def test_ramp_normalization_is_covered_volume(make, matrix, axes, volume):
    """Weights ~ k-space area per sample / prod(matrix): they sum to the covered volume over prod(matrix)."""
    w = dcf.ramp(make(), matrix, axes=axes)
    assert w.dtype == np.float32
    assert float(np.sum(w, dtype=np.float64)) == pytest.approx(volume, rel=0.01)


def test_kooshball_ramp_is_radius_squared():
    k = tr.kooshball((16, 16, 16), 30)
    w = dcf.ramp(k, (16, 16, 16)).astype(np.float64)
    r2 = np.sum(k.astype(np.float64) ** 2, axis=1)
    moving = r2 > 0
    ratio = w[moving] / r2[moving]
    assert np.allclose(ratio, ratio[0], rtol=1e-4)
    assert np.allclose(w[~moving], ratio[0] * 0.5**2 / 12, rtol=1e-4)  # delta^2 / 12


@pytest.mark.parametrize("name", list(TRAJECTORIES), ids=list(TRAJECTORIES))
def test_pipe_menon_flattens_the_weighted_density(name):
    k, w = pipe_menon_of(name)
    assert w.dtype == np.float32 and w.shape == (len(k),) and np.all(w > 0)
    inner = np.linalg.norm(k, axis=1) < 0.8 * N / 2
    assert np.std(dcf.density(w, k)[inner]) < 0.01
    assert np.std(dcf.density(np.ones(len(k)), k)[inner]) > 1.0
    # same normalization as the ramp: the disc's area over prod(matrix), within the edge's share
    assert float(np.sum(w, dtype=np.float64)) == pytest.approx(np.pi / 4, rel=0.03)


@pytest.mark.parametrize("name", list(TRAJECTORIES), ids=list(TRAJECTORIES))
def test_pipe_menon_psf_is_the_disc_psf(name):
    """F^H w is close to the PSF of ideal disc sampling; uniform weights are far from it at any scale."""
    k, w = pipe_menon_of(name)
    ideal = disc_psf(N, N / 2 + 0.25)
    centre = (slice(N // 2 - 4, N // 2 + 5),) * 2
    compensated = psf(w, k, N)
    assert rel(compensated[centre], ideal[centre]) < 0.08  # measured 0.015 - 0.056
    assert rel(compensated, ideal) < 0.2  # measured 0.11 - 0.17
    uniform = psf(np.ones(len(k)), k, N)
    uniform *= np.vdot(uniform, ideal).real / np.vdot(uniform, uniform).real  # best scale
    assert rel(uniform[centre], ideal[centre]) > 0.6  # measured 0.74 - 0.94
    assert rel(uniform, ideal) > 0.7


def test_pipe_menon_matches_ramp_on_uniform_radial():
    k, w = pipe_menon_of("radial")
    radius = np.linalg.norm(k, axis=1)
    ring = (radius > 2) & (radius < N / 2 - 2)
    ratio = w[ring] / dcf.ramp(k, (N, N))[ring]
    assert np.median(ratio) == pytest.approx(1.0, abs=0.01)
    assert np.max(np.abs(ratio - 1)) < 0.1


def test_pipe_menon_on_a_cartesian_grid_is_uniform():
    n = 16
    grid = np.stack(np.meshgrid(*(np.arange(n) - n // 2,) * 2, indexing="ij"), axis=-1).reshape(-1, 2)
    w = dcf.pipe_menon(grid.astype(np.float32), (n, n)).reshape(n, n) * n * n
    assert np.allclose(w[4:12, 4:12], 1.0, atol=0.05)  # ripples of the kernel's edge response
    assert np.median(w) == pytest.approx(1.0, abs=0.02)


def test_pipe_menon_stack_of_stars_is_the_same_on_every_partition():
    k = tr.stack_of_stars((24, 24, 4), 20)
    w = dcf.pipe_menon(k, (24, 24, 4), axes=(0, 1)).reshape(4, -1)
    assert np.allclose(w, w[0], rtol=1e-6)
    plane = tr.radial((24, 24), 20, golden=True)
    assert np.allclose(w[0] * 4, dcf.pipe_menon(plane, (24, 24)), rtol=1e-3)


def test_pipe_menon_flat_trajectory_still_gives_weights():
    k = tr.radial((16, 16), 1)  # one spoke spans no area: no hull, plain Pipe-Menon
    w = dcf.pipe_menon(k, (16, 16), iterations=5)
    assert np.all(np.isfinite(w)) and np.all(w > 0)


@pytest.mark.parametrize("call,match", [
    (lambda: dcf.ramp(np.zeros((10, 3)), (8, 8)), r"trajectory must have shape \(M, 2\)"),
    (lambda: dcf.ramp(np.full((4, 2), np.nan), (8, 8)), "NaN or Inf"),
    (lambda: dcf.ramp(np.zeros((4, 2)), (8, 8)), "ramp weights need samples away from k = 0"),
    (lambda: dcf.ramp(np.ones((4, 2)), (8, 8), axes=(0, 0)), "axes must be distinct axes"),
    (lambda: dcf.pipe_menon(np.ones((4, 2)), (8, 8), axes=(2,)), "axes must be distinct axes"),
    (lambda: dcf.pipe_menon(np.ones((4, 2)), (8, 8), iterations=0), "iterations must be a positive integer"),
    (lambda: dcf.normalize(np.zeros(4), np.ones((4, 2)), (8, 8)), "weights are zero near the centre"),
], ids=["shape", "nan", "all-centre", "ramp-axes", "pipe-axes", "iterations", "zero-weights"])
def test_bad_arguments_raise(call, match):
    with pytest.raises(InvalidDataError, match=match):
        call()
