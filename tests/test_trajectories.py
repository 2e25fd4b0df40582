"""Trajectories: shapes, units, extents, readout spacing, golden-angle and golden-means ordering."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

from mri_recon.checks.validation import check_trajectory_units
from mri_recon.errors import InvalidDataError
from mri_recon.sim import trajectories as tr

CASES = {
    "radial": (lambda: tr.radial((32, 32), 50), (32, 32), 50 * 64),
    "radial-golden": (lambda: tr.radial((32, 32), 21, golden=True), (32, 32), 21 * 64),
    "radial-anisotropic": (lambda: tr.radial((32, 16), 10, 40, oversampling=1.5), (32, 16), 400),
    "spiral": (lambda: tr.spiral((32, 32), 6, 300), (32, 32), 6 * 300),
    "kooshball": (lambda: tr.kooshball((16, 16, 16), 40), (16, 16, 16), 40 * 32),
    "stack-of-stars": (lambda: tr.stack_of_stars((16, 16, 5), 7, 30), (16, 16, 5), 5 * 7 * 30),
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_shape_dtype_and_schema_units(name):
    make, matrix, count = CASES[name]
    k = make()
    assert k.dtype == np.float32 and k.shape == (count, len(matrix))
    check_trajectory_units(k, matrix)  # within 2x Nyquist, not normalized
    assert np.all(np.max(np.abs(k), axis=0) <= np.asarray(matrix) / 2 + 1e-4)


def test_radial_readout_covers_nyquist_extent():
    n, os_ = 32, 2.0
    k = tr.radial((n, n), 8, golden=True).astype(np.float64).reshape(8, -1, 2)
    assert k.shape[1] == 64  # default samples = oversampling * N
    radius = np.einsum("psd,psd->ps", k, k) ** 0.5
    steps = np.diff(radius * np.sign(np.arange(64) - 32 + 0.5), axis=1)
    assert np.allclose(steps, 1 / os_, atol=1e-5)  # 1 / oversampling per sample along the spoke
    assert np.allclose(radius[:, 32], 0) and np.allclose(radius[:, 0], n / 2)  # centre; -N/2 reached
    assert np.allclose(radius[:, -1], n / 2 - 1 / os_, atol=1e-5)  # [-N/2, N/2)


def spoke_angles_of(k: np.ndarray, spokes: int) -> np.ndarray:
    end = k.reshape(spokes, -1, 2)[:, -1].astype(np.float64)
    return np.arctan2(end[:, 1], end[:, 0])


def test_golden_angle_increments():
    k = tr.radial((64, 64), 30, golden=True)
    steps = np.mod(np.diff(spoke_angles_of(k, 30)), 2 * np.pi)
    assert np.degrees(tr.GOLDEN_ANGLE) == pytest.approx(180 / ((1 + np.sqrt(5)) / 2))
    assert np.allclose(steps, tr.GOLDEN_ANGLE, atol=1e-5)


def test_uniform_angles_span_half_circle():
    k = tr.radial((64, 64), 12)
    assert np.allclose(np.mod(spoke_angles_of(k, 12), 2 * np.pi), np.pi * np.arange(12) / 12, atol=1e-6)


def test_anisotropic_matrix_scales_each_axis():
    k = tr.radial((64, 16), 40, 128)
    assert np.max(np.abs(k[:, 0])) == pytest.approx(32, abs=1e-3)
    assert np.max(np.abs(k[:, 1])) <= 8 + 1e-3


def test_golden_means_directions():
    phi1, phi2 = tr.GOLDEN_MEANS
    assert phi1 == pytest.approx(0.4656, abs=1e-4) and phi2 == pytest.approx(0.6823, abs=1e-4)
    lam = 1 / phi2
    assert lam**3 == pytest.approx(lam**2 + 1)
    d = tr.kooshball_directions(2000)
    assert np.allclose(np.linalg.norm(d, axis=1), 1)
    assert np.all(d[:, 2] >= 0)  # full-diameter spokes: the upper hemisphere covers the sphere
    # uniform on the hemisphere: a cap z > h holds a fraction 1 - h of the directions; so does a wedge
    for h in (0.25, 0.5, 0.8):
        assert np.mean(d[:, 2] > h) == pytest.approx(1 - h, abs=0.01)
    assert np.mean(np.arctan2(d[:, 1], d[:, 0]) > 0) == pytest.approx(0.5, abs=0.01)


def test_kooshball_spokes_pass_through_centre():
    k = tr.kooshball((16, 16, 16), 10).reshape(10, 32, 3)
    assert np.allclose(k[:, 16], 0)
    assert np.allclose(np.linalg.norm(k[:, 0], axis=1), 8)


def test_stack_of_stars_partitions_are_cartesian():
    k = tr.stack_of_stars((16, 16, 6), 5, 32).reshape(6, 5 * 32, 3)
    assert np.array_equal(k[:, 0, 2], np.arange(6) - 3)
    assert np.all(k[:, :, 2] == k[:, :1, 2])
    assert np.array_equal(k[0, :, :2], k[-1, :, :2])
    assert np.allclose(k[0, :, :2], tr.radial((16, 16), 5, 32, golden=True))


@pytest.mark.parametrize("density", [1.0, 1.5, 2.5], ids=["uniform", "vd-1.5", "vd-2.5"])
def test_spiral_geometry(density):
    n, leaves = 32, 8
    k = tr.spiral((n, n), leaves, density=density).astype(np.float64)
    arms = k.reshape(leaves, -1, 2)
    radius = np.linalg.norm(arms, axis=2)
    assert np.all(np.diff(radius, axis=1) >= 0) and np.allclose(radius[:, 0], 0)
    assert np.allclose(radius[:, -1], n / 2)
    # interleaf l is interleaf 0 rotated by 2 pi l / L
    c, s = np.cos(2 * np.pi / leaves), np.sin(2 * np.pi / leaves)
    assert np.allclose(arms[1], arms[0] @ np.array([[c, s], [-s, c]]), atol=1e-4)
    # default samples: at most 1/2 cycle per FOV apart along the readout
    assert np.max(np.linalg.norm(np.diff(arms, axis=1), axis=2)) <= 0.5 + 1e-6
    # Nyquist at the edge: every outer sample has a sample of another interleaf within about 1 cycle
    outer = arms[:, radius[0] > 0.8 * n / 2].reshape(leaves, -1, 2)
    others = cKDTree(arms[1:].reshape(-1, 2))
    assert np.max(others.query(outer[0])[0]) <= 1.05


@pytest.mark.parametrize("density", [1.0, 2.0, 3.0], ids=["uniform", "vd-2", "vd-3"])
def test_variable_density_spiral_is_denser_at_the_centre(density):
    """|k| = kmax t^density with t uniform: a fraction (R / kmax)^(1 / density) of samples lies within R."""
    k = tr.spiral((32, 32), 8, 2000, density=density)
    for radius in (2.0, 8.0, 12.0):
        fraction = float(np.mean(np.linalg.norm(k, axis=1) < radius))
        assert fraction == pytest.approx((radius / 16) ** (1 / density), abs=2e-3)


@pytest.mark.parametrize("call,match", [
    (lambda: tr.radial((32, 32, 32), 10), r"radial needs a 2-D matrix \[Nx, Ny\], found \[32, 32, 32\]"),
    (lambda: tr.radial((32, 32), 0), "spokes must be a positive integer, found 0"),
    (lambda: tr.radial((32, 32), True), "spokes must be a positive integer"),
    (lambda: tr.radial((32, 32), 4, 2.5), "samples must be a positive integer"),
    (lambda: tr.radial((32, 32), 4, 200), "beyond the schema limit 32"),
    (lambda: tr.radial((32, 32), 4, oversampling=-1), "oversampling must be a positive number"),
    (lambda: tr.spiral((32, 32), 4, density=0.5), r"density must be in \[1, 4\]"),
    (lambda: tr.spiral((32, 32), 0), "interleaves must be a positive integer"),
    (lambda: tr.spiral((32, 32), 4, 1), "at least 2 samples"),
    (lambda: tr.kooshball((32, 32), 10), r"kooshball needs a 3-D matrix \[Nx, Ny, Nz\]"),
    (lambda: tr.stack_of_stars((32, 32), 10), "stack-of-stars needs a 3-D matrix"),
], ids=["radial-3d", "spokes-zero", "spokes-bool", "samples-float", "samples-too-many", "oversampling",
        "density", "interleaves", "spiral-samples", "kooshball-2d", "stack-2d"])
def test_bad_arguments_raise(call, match):
    with pytest.raises(InvalidDataError, match=match):
        call()
