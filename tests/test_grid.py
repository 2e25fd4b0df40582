"""The one voxel grid (centre at N // 2, like BART, SigPy, FINUFFT and fftshift) and the operators on it."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.checks import grid
from mri_recon.operators import fhd, forward
from mri_recon.sim.phantom import voxel_positions as phantom_positions

MATRICES = [(33, 30), (31, 31), (16, 16), (17, 16, 15), (16, 16, 16)]
IDS = ["33x30", "31x31", "16x16", "17x16x15", "16x16x16"]


def rel(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 31, 32])
def test_axis_is_centred_at_floor_half(n):
    r = grid.axis_positions(n)
    assert grid.centre(n) == n // 2 and r[n // 2] == 0.0
    np.testing.assert_allclose(np.diff(r), 1 / n)
    # the frequencies of numpy.fft.fftshift are the voxels of the grid, in the same order
    np.testing.assert_allclose(r * n, np.fft.fftshift(np.fft.fftfreq(n, 1 / n)))


@pytest.mark.parametrize("n", [1, 2, 5, 6])
def test_integer_forms(n):
    j = np.arange(n)
    np.testing.assert_array_equal(grid.doubled_offset(j, n) / (2 * n), grid.axis_positions(n))
    mirror = grid.mirror_index(j, n)
    inside = (mirror >= 0) & (mirror < n)
    np.testing.assert_allclose(grid.axis_positions(n)[mirror[inside]], -grid.axis_positions(n)[inside])
    # odd: every voxel has its mirror (N - 1 - j); even: all but voxel 0 (N - j)
    assert inside.sum() == (n if n % 2 else n - 1)


def test_voxel_positions_are_c_order():
    r = grid.voxel_positions((3, 2, 5))
    assert r.shape == (30, 3)
    np.testing.assert_array_equal(r[7], [grid.axis_positions(3)[0], grid.axis_positions(2)[1],
                                         grid.axis_positions(5)[2]])
    assert phantom_positions is grid.voxel_positions


@pytest.mark.parametrize("n", [4, 5, 8, 9])
def test_centre_phase_relates_the_dft(rng, n):
    x = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    q = np.arange(n) - n // 2
    direct = np.exp(-2j * np.pi * np.outer(q, grid.axis_positions(n))) @ x
    np.testing.assert_allclose(direct, grid.centre_phase(q, n) * np.fft.fft(x)[q % n], atol=1e-12)
    if n % 2 == 0:
        np.testing.assert_array_equal(grid.centre_phase(q, n), (-1.0) ** q)


def finufft_direct(matrix, k, d=None, x=None):
    """FINUFFT called directly (type 1 for F^H d, type 2 for F x; modes j - N // 2) at eps 1e-12."""
    import finufft

    coords = [2 * np.pi * k[:, a].astype(np.float64) / n for a, n in enumerate(matrix)]
    if d is not None:
        fn = {2: finufft.nufft2d1, 3: finufft.nufft3d1}[len(matrix)]
        return fn(*coords, d.astype(np.complex128), n_modes=matrix, eps=1e-12, isign=+1)
    fn = {2: finufft.nufft2d2, 3: finufft.nufft3d2}[len(matrix)]
    return fn(*coords, x.astype(np.complex128), eps=1e-12, isign=-1)


@pytest.mark.parametrize("matrix", MATRICES, ids=IDS)
@pytest.mark.parametrize("method", ["exact", "nufft"])
def test_operators_agree_with_finufft(rng, matrix, method):
    m = 400
    k = ((rng.random((m, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    d = (rng.standard_normal((2, m)) + 1j * rng.standard_normal((2, m))).astype(np.complex64)
    x = (rng.standard_normal((2, *matrix)) + 1j * rng.standard_normal((2, *matrix))).astype(np.complex64)
    assert rel(fhd(d, k, matrix, device="cpu", method=method), finufft_direct(matrix, k, d=d)) <= 1e-5
    assert rel(forward(x, k, device="cpu", method=method), finufft_direct(matrix, k, x=x)) <= 1e-5


@pytest.mark.parametrize("matrix", [(9, 7), (5, 7, 3)], ids=str)
def test_odd_image_is_symmetric_about_its_centre(matrix):
    """A real, even k-space (d(k) = d(-k) at +-k) gives a real image symmetric under r -> -r."""
    k = np.array([[1.0, 2.0, 0.5][:len(matrix)], [-1.0, -2.0, -0.5][:len(matrix)]], np.float32)
    image = fhd(np.ones(2, np.complex64), k, matrix, device="cpu", method="exact")
    np.testing.assert_allclose(image.imag, 0, atol=1e-6)
    np.testing.assert_allclose(image, image[tuple(slice(None, None, -1) for _ in matrix)], atol=1e-6)


@pytest.mark.parametrize("matrix, size", [((9, 7), (5, 3)), ((8, 6), (4, 4)), ((5, 6, 7), (3, 4, 5))], ids=str)
def test_calibration_region_is_the_forward_transform(rng, matrix, size):
    """Coil-map calibration: y(kappa) on the integer grid equals F x at k = kappa (odd sizes included)."""
    from mri_recon.prep.coilmaps import calibration_region, fourier_resize

    x = (rng.standard_normal((2, *matrix)) + 1j * rng.standard_normal((2, *matrix))).astype(np.complex64)
    kappa = np.stack(np.meshgrid(*[np.arange(s) - s // 2 for s in size], indexing="ij"), axis=-1)
    expected = forward(x, kappa.reshape(-1, len(matrix)).astype(np.float32), device="cpu", method="exact")
    assert rel(calibration_region(x, size).reshape(2, -1), expected) < 1e-5
    # the interpolant of coarse images, evaluated on a finer grid, keeps their coefficients (times the voxel ratio)
    images = x[(slice(None), *(slice(0, s) for s in size))]
    fine = fourier_resize(images, matrix)
    ratio = np.prod(matrix) / np.prod(size)
    assert rel(calibration_region(fine, size), ratio * calibration_region(images, size)) < 1e-5
