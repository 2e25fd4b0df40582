"""The analytic phantom: exact k-space against finely rasterized images, coil maps, noise."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.errors import InvalidDataError
from mri_recon.operators.engines import finufft as nufft_cpu
from mri_recon.sim import phantom


def rel(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


def discrete_kspace(image: np.ndarray, k: np.ndarray) -> np.ndarray:
    """sum_n x_n exp(-i 2 pi k.r_n) of a rasterized image (FINUFFT, verified against a direct sum)."""
    return nufft_cpu.forward(image[None], k)[0]


def test_image_values_at_known_points():
    image = phantom.shepp_logan_image((64, 64), oversample=1)
    assert image.dtype == np.complex64 and image.shape == (64, 64)
    assert image[32, 32] == pytest.approx(0.2)  # r = 0: outer ellipse 1.0 plus skull interior -0.8
    assert image[0, 0] == 0 and image[0, 32] == 0  # outside the phantom
    assert np.max(image.real) == pytest.approx(1.0)  # the skull
    assert np.all(np.abs(image.imag) == 0)
    volume = phantom.shepp_logan_image((24, 20, 16), oversample=1)
    assert volume.shape == (24, 20, 16) and volume[12, 10, 8] == pytest.approx(0.2)


def test_oversampled_image_averages_point_samples():
    coarse = phantom.shepp_logan_image((16, 12), oversample=3)
    fine = phantom.shepp_logan_image((48, 36), oversample=1).real
    # coarse voxel j holds the fine voxels 3j - 1, 3j, 3j + 1 (both grids centred as (j - N/2) / N)
    fine = np.roll(fine, (1, 1), axis=(0, 1))
    assert np.allclose(coarse.real, fine.reshape(16, 3, 12, 3).mean(axis=(1, 3)), atol=1e-6)


@pytest.mark.parametrize("ndim", [2, 3], ids=["ellipses", "ellipsoids"])
def test_kspace_at_origin_is_total_intensity(ndim):
    intensity, axes, _, _ = phantom._shapes(ndim)
    unit_volume = np.pi if ndim == 2 else 4 * np.pi / 3
    matrix = (32,) * ndim
    expected = np.prod(matrix) * unit_volume * np.sum(intensity * np.prod(axes, axis=1))
    value = phantom.shepp_logan_kspace(np.zeros((1, ndim)), matrix)[0]
    assert value.real == pytest.approx(expected, rel=1e-6) and abs(value.imag) < 1e-6 * expected


def test_kspace_2d_matches_fft_of_fine_raster(rng):
    """Tolerance 3e-3 at |k_d| <= 8 (measured 1.0e-3 at 512^2, 5e-3 at 128^2): the raster's edge error."""
    k = rng.uniform(-8, 8, size=(300, 2))
    errors = []
    for n in (128, 512):
        matrix = (n, n)
        errors.append(rel(discrete_kspace(phantom.shepp_logan_image(matrix), k),
                          phantom.shepp_logan_kspace(k, matrix)))
    assert errors[1] < 3e-3
    assert errors[1] < 0.5 * errors[0]


def test_kspace_3d_matches_fft_of_fine_raster(rng):
    """Tolerance 8e-3 at |k_d| <= 4 for a 96^3 raster with 2^3 sub-samples per voxel (measured 3e-3 - 4e-3)."""
    k = rng.uniform(-4, 4, size=(200, 3))
    matrix = (96, 96, 96)
    image = phantom.shepp_logan_image(matrix, oversample=2)
    assert rel(discrete_kspace(image, k), phantom.shepp_logan_kspace(k, matrix)) < 8e-3


def test_kspace_scales_with_matrix(rng):
    k = rng.uniform(-10, 10, size=(50, 2))
    a = phantom.shepp_logan_kspace(k, (64, 64))
    b = phantom.shepp_logan_kspace(k, (128, 32))
    assert rel(a, b) < 1e-6


@pytest.mark.parametrize("ndim,coils", [(2, 1), (2, 4), (3, 3)], ids=["2d-1coil", "2d-4coils", "3d-3coils"])
def test_coil_kspace_matches_fft_of_maps_times_raster(rng, ndim, coils):
    """Tolerance 5e-3 (2D, 512^2 raster) and 1.5e-2 (3D, 64^3) at low k: raster edge error only."""
    n, reach, tol = (512, 6, 5e-3) if ndim == 2 else (64, 3, 1.5e-2)
    matrix = (n,) * ndim
    k = rng.uniform(-reach, reach, size=(120, ndim))
    images = phantom.coil_maps(matrix, coils) * phantom.shepp_logan_image(matrix, oversample=4 if ndim == 2 else 2)
    expected = nufft_cpu.forward(images, k)
    got = phantom.coil_kspace(k, matrix, coils)
    assert got.shape == (coils, len(k)) and got.dtype == np.complex64
    assert rel(got, expected) < tol


def test_one_coil_is_the_phantom(rng):
    k = rng.uniform(-16, 16, size=(64, 2))
    assert np.allclose(phantom.coil_kspace(k, (32, 32), 1)[0], phantom.shepp_logan_kspace(k, (32, 32)))
    assert np.all(phantom.coil_maps((8, 8), 1) == 1)


@pytest.mark.parametrize("ndim,spread", [(2, 0.05), (3, 0.2)], ids=["2d", "3d"])
def test_coil_maps_sum_of_squares_near_one_over_phantom(ndim, spread):
    matrix = (48,) * ndim
    maps = phantom.coil_maps(matrix, 8)
    assert maps.shape == (8, *matrix) and maps.dtype == np.complex64
    inside = phantom.shepp_logan_image(matrix, oversample=1).real > 0
    power = np.sum(np.abs(maps) ** 2, axis=0)[inside]
    assert power.mean() == pytest.approx(1.0, abs=0.02)
    assert power.min() > 1 - spread and power.max() < 1 + spread
    assert np.std(np.angle(maps[0][inside])) > 0.05  # a spatially varying phase


def test_add_noise_has_the_stated_snr(rng):
    clean = (rng.normal(size=(2, 50_000)) + 1j * rng.normal(size=(2, 50_000))).astype(np.complex64)
    rms = np.sqrt(np.mean(np.abs(clean) ** 2))
    noisy, sigma = phantom.add_noise(clean, 20.0, rng)
    assert noisy.dtype == np.complex64 and noisy.shape == clean.shape
    assert sigma == pytest.approx(rms / 20.0)
    noise = noisy - clean
    assert np.sqrt(np.mean(np.abs(noise) ** 2)) == pytest.approx(sigma, rel=0.02)
    assert np.std(noise.real) == pytest.approx(sigma / np.sqrt(2), rel=0.02)
    assert abs(np.mean(noise)) < 0.02 * sigma
    _, given = phantom.add_noise(clean, 4.0, rng, signal=2.0)
    assert given == 0.5
    same, zero = phantom.add_noise(clean, np.inf, rng)
    assert zero == 0.0 and np.array_equal(same, clean)


def test_cartesian_signal_makes_snr_an_image_snr(rng):
    """With signal = cartesian_signal(x), the inverse DFT of full Cartesian data has noise std rms(x) / snr."""
    n, snr = 32, 10.0
    image = phantom.shepp_logan_image((n, n)).astype(np.complex128)
    grid = np.stack(np.meshgrid(*(np.arange(n) - n // 2,) * 2, indexing="ij"), axis=-1).reshape(-1, 2)
    clean = nufft_cpu.forward(image[None], grid)
    noisy, _ = phantom.add_noise(clean, snr, rng, signal=phantom.cartesian_signal(image[None]))
    recon = nufft_cpu.adjoint(noisy, grid, (n, n))[0] / n**2
    assert rel(nufft_cpu.adjoint(clean, grid, (n, n))[0] / n**2, image) < 1e-6
    rms = np.sqrt(np.mean(np.abs(image) ** 2))
    assert np.sqrt(np.mean(np.abs(recon - image) ** 2)) == pytest.approx(rms / snr, rel=0.1)


def test_noise_samples(rng):
    noise = phantom.noise_samples(3, 20_000, 0.5, rng)
    assert noise.shape == (3, 20_000) and noise.dtype == np.complex64
    assert np.sqrt(np.mean(np.abs(noise) ** 2)) == pytest.approx(0.5, rel=0.03)


@pytest.mark.parametrize("call,match", [
    (lambda: phantom.shepp_logan_image((8, 8), oversample=0), "oversample must be a positive integer"),
    (lambda: phantom.shepp_logan(np.zeros((4, 4))), r"points must have shape \(P, 2\) or \(P, 3\)"),
    (lambda: phantom.shepp_logan_kspace(np.zeros((5, 3)), (8, 8)), r"trajectory must have shape \(M, 2\)"),
    (lambda: phantom.coil_maps((8, 8), 0), "coils must be a positive integer"),
    (lambda: phantom.coil_model(4, 2), "coil maps need 2 or 3 dimensions, found 4"),
    (lambda: phantom.add_noise(np.ones(4, complex), 0.0, np.random.default_rng()), "snr must be a positive"),
    (lambda: phantom.add_noise(np.ones(4, complex), "high", np.random.default_rng()), "snr must be a positive"),
    (lambda: phantom.add_noise(np.ones(4, complex), 5.0, np.random.default_rng(), signal=-1.0),
     "signal must be finite and non-negative"),
    (lambda: phantom.noise_samples(2, 0, 1.0, np.random.default_rng()), "count must be a positive integer"),
    (lambda: phantom.noise_samples(2, 8, np.nan, np.random.default_rng()), "sigma must be finite"),
], ids=["oversample", "points", "trajectory", "coils", "ndim", "snr-zero", "snr-text", "signal", "count",
        "sigma"])
def test_bad_arguments_raise(call, match):
    with pytest.raises(InvalidDataError, match=match):
        call()


def _dark_ellipses(image):
    """``(area, centre)`` of the two dark ellipses inside the head, smaller first."""
    from scipy import ndimage

    head = ndimage.binary_fill_holes(image > 0.5 * image.max())
    inner = ndimage.binary_erosion(head, iterations=max(2, image.shape[0] // 20))
    labels, count = ndimage.label(inner & (image < np.percentile(image[inner], 20)))
    found = [(int((labels == i).sum()), ndimage.center_of_mass(labels == i)) for i in range(1, count + 1)]
    return sorted(f for f in found if f[0] > image.size // 500)[-2:]


def test_the_phantom_lies_as_barts_does():
    """Axis 0 from the top of the classic picture down, axis 1 from left to right: the larger dark ellipse
    on the left (small axis-1 index), the ellipse at y = 0.35 above the centre (small axis-0 index)."""
    image = np.abs(phantom.shepp_logan_image((96, 96)))
    (_, small), (_, large) = _dark_ellipses(image)
    assert large[1] < 48 < small[1] and abs(large[0] - 48) < 3
    column = image[:, 48]
    top = np.argmax(column[14:46] > column[48] + 0.05) + 14  # inside the skull: the ellipse at y = 0.35
    assert 15 < top < 40


@pytest.mark.skipif(__import__("shutil").which("bart") is None, reason="needs BART (apt-get install bart)")
def test_the_phantom_has_barts_orientation(tmp_path):
    import subprocess

    from mri_recon.io.cfl import read_cfl

    subprocess.run(["bart", "phantom", "-x", "96", "ph"], cwd=tmp_path, check=True, capture_output=True)
    theirs = np.abs(np.asarray(read_cfl(tmp_path / "ph")).reshape(96, 96))
    ours = np.abs(phantom.shepp_logan_image((96, 96)))
    for (_, a), (_, b) in zip(_dark_ellipses(theirs), _dark_ellipses(ours)):
        assert np.max(np.abs(np.subtract(a, b))) < 4  # each dark ellipse at BART's place, to 4 voxels
