"""Coil sensitivity estimation: low-resolution images, Walsh, ESPIRiT, against exact synthetic maps."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import InvalidDataError, SchemaError, listed
from mri_recon.operators.engines.nudft import nudft_adjoint, nudft_forward
from mri_recon.planning import preparation as prep_memory
from mri_recon.prep import cartesian_maps, coilmaps
from mri_recon.prep.coilmaps import (
    calibration_region,
    cell_density_weights,
    dominant_eigenvectors,
    espirit,
    estimate_coil_maps,
    fourier_resize,
    lowres_images,
    walsh,
)
from mri_recon.prep.maps_methods import COIL_MAPS, choices, chosen_method, estimated, method_of
from mri_recon.scan import Scan
from mri_recon.sim import phantom, trajectories

CASES = {
    "radial-2d": ((64, 64), lambda: trajectories.radial((64, 64), 96, golden=True)),
    "spiral-2d": ((64, 64), lambda: trajectories.spiral((64, 64), 16)),
    "radial-3d": ((20, 20, 20), lambda: trajectories.kooshball((20, 20, 20), 220)),
}
COILS = 8
SNR = 30.0


@functools.cache
def _exact(kind):
    """Noise-free analytic k-space of the coil-weighted Shepp-Logan phantom (no inverse crime)."""
    matrix, make = CASES[kind]
    traj = make()
    return traj, phantom.coil_kspace(traj, matrix, COILS), phantom.coil_maps(matrix, COILS), \
        phantom.shepp_logan_image(matrix)


def _scan(kind, rng, snr=SNR):
    traj, kspace, maps, image = _exact(kind)
    noisy, _ = phantom.add_noise(kspace, snr, rng)
    return Scan(kspace=noisy, trajectory=traj, matrix=CASES[kind][0]), maps, np.abs(image) > 0.05


def _correlation(estimate, truth):
    """|<S_est, S_true>| / (|S_est| |S_true|) per voxel: 1 when equal up to a per-voxel complex factor."""
    num = np.abs(np.sum(np.conj(estimate) * truth, axis=0))
    return num / np.maximum(np.linalg.norm(estimate, axis=0) * np.linalg.norm(truth, axis=0), 1e-30)


def _complex(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


# --------------------------------------------------------------------------------------------------------
# Against the true maps


@pytest.mark.parametrize("kind", list(CASES), ids=list(CASES))
@pytest.mark.parametrize("method", estimated())
def test_estimated_maps_match_the_true_maps_inside_the_object(rng, kind, method):
    scan, truth, inside = _scan(kind, rng)
    options = {"calibration": 10, "kernel": 3} if method == "espirit" and scan.ndim == 3 else {}
    maps = estimate_coil_maps(scan, method, device="cpu", **options)
    assert maps.shape == truth.shape and maps.dtype == np.complex64
    c = _correlation(maps, truth)[inside]
    # Measured at SNR 30 (64^2: Walsh mean 0.998, ESPIRiT 0.999; 1st percentile >= 0.99).
    assert c.mean() > 0.995 and np.percentile(c, 1) > 0.98, (c.mean(), np.percentile(c, 1))
    norm = np.linalg.norm(maps, axis=0)[inside]
    np.testing.assert_allclose(norm, 1.0, rtol=1e-4)  # unit norm (ESPIRiT: nothing cropped inside)


def test_recon_with_estimated_maps_is_close_to_recon_with_true_maps(rng):
    """Coil images S x (free of the per-voxel phase ambiguity) within 8% NRMSE inside the object."""
    recon = pytest.importorskip("mri_recon.pipeline")
    dcf = pytest.importorskip("mri_recon.prep.dcf")
    scan, truth, inside = _scan("radial-2d", rng)
    scan = scan.replace(weights=dcf.ramp(scan.trajectory, scan.matrix))
    images = {}
    for name in ("true", "walsh", "espirit"):
        maps = truth if name == "true" else estimate_coil_maps(scan, name, device="cpu")
        result = recon.reconstruct(scan.replace(coil_maps=maps), iterations=30, tol=1e-6, lam=1e-3,
                                   device="cpu", progress=False)
        images[name] = maps * result.image[None]
    reference = images["true"][:, inside]
    for name in ("walsh", "espirit"):
        nrmse = np.linalg.norm(images[name][:, inside] - reference) / np.linalg.norm(reference)
        assert nrmse < 0.08, (name, nrmse)  # measured about 0.05 for both


# --------------------------------------------------------------------------------------------------------
# The pieces, against oracles


def test_lowres_images_is_the_windowed_density_compensated_adjoint(rng):
    """On the full matrix (grid = matrix) it is F^H of the selected, weighted, windowed samples."""
    matrix, radius, flat = (24, 20), 6.0, 2.0
    traj = ((rng.random((900, 2)) - 0.5) * np.array([24, 20])).astype(np.float32)
    kspace = _complex(rng, (3, 900)).astype(np.complex64)
    weights = rng.random(900).astype(np.float32)
    got = lowres_images(kspace, traj, matrix, radius=radius, flat=flat, weights=weights, device="cpu",
                        grid=matrix)
    r = np.linalg.norm(traj.astype(np.float64), axis=1)
    t = np.clip((r - flat) / (radius - flat), 0, 1)
    w = np.where(r < radius, weights * np.cos(np.pi / 2 * t) ** 2, 0.0)
    expected = nudft_adjoint(kspace * w, traj, matrix)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_coarse_grid_is_close_to_the_full_adjoint(rng):
    scan, _, _ = _scan("radial-2d", rng, snr=np.inf)
    full = lowres_images(scan.kspace, scan.trajectory, scan.matrix, device="cpu", grid=scan.matrix)
    coarse = lowres_images(scan.kspace, scan.trajectory, scan.matrix, device="cpu")  # 48 x 48 for radius 12
    assert np.linalg.norm(coarse - full) / np.linalg.norm(full) < 0.02


def test_fourier_resize_keeps_the_coarse_voxels(rng):
    coarse = _complex(rng, (2, 8, 12, 6)).astype(np.complex64)
    fine = fourier_resize(coarse, (16, 36, 18))
    np.testing.assert_allclose(fine[:, ::2, ::3, ::3], coarse, atol=1e-5)
    np.testing.assert_array_equal(fourier_resize(coarse, (8, 12, 6)), coarse)


def test_calibration_region_is_the_forward_transform_at_integer_frequencies(rng):
    images = _complex(rng, (2, 16, 15)).astype(np.complex64)
    size = (6, 5)
    kappa = np.stack(np.meshgrid(np.arange(6) - 3, np.arange(5) - 2, indexing="ij"), axis=-1).reshape(-1, 2)
    expected = nudft_forward(images, kappa.astype(np.float32)).reshape(2, *size)
    np.testing.assert_allclose(calibration_region(images, size), expected, rtol=1e-4, atol=1e-3)


def test_cell_density_weights_count_samples_per_cell():
    traj = np.array([[0.1, 0.0], [-0.2, 0.3], [0.4, -0.4], [1.2, 0.0], [-3.0, 2.0], [-2.6, 2.4]], np.float32)
    np.testing.assert_allclose(cell_density_weights(traj), [1 / 3, 1 / 3, 1 / 3, 1, 1 / 2, 1 / 2])


def test_walsh_is_exact_for_noise_free_rank_one_data(rng):
    """Without noise, kernel 1: R = x x^H, so the map is S / |S| times a phase; referenced coil is real. The
    image's magnitude stays within 1/4 to 1 of its peak: the box sums are float32 cumulative sums, whose rounding
    is absolute along a row (walsh's docstring), so a voxel hundreds of times weaker than its row is not exact
    to 1e-5 (one draw of 0.17% of the peak came out 1.9e-5 off)."""
    maps = _complex(rng, (5, 12, 10))
    rho = rng.uniform(0.25, 1.0, (12, 10)) * np.exp(2j * np.pi * rng.random((12, 10)))
    est = walsh((maps * rho).astype(np.complex64), kernel=1)
    np.testing.assert_allclose(_correlation(est, maps), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(est, axis=0), 1.0, atol=1e-5)
    ref = int(np.argmax(np.sum(np.abs(maps * rho) ** 2, axis=(1, 2))))
    np.testing.assert_allclose(est[ref].imag, 0.0, atol=1e-5)
    assert np.all(est[ref].real >= 0)


def test_power_solver_matches_eigh(rng):
    coils, n = 6, 500
    vectors = _complex(rng, (n, coils, coils))
    q, _ = np.linalg.qr(vectors)
    gaps = np.sort(rng.random((n, coils)), axis=1) * np.linspace(0.2, 0.6, coils)  # ratios <= 0.6
    gaps[:, -1] = rng.uniform(1.0, 5.0, n)
    mats = (q * gaps[:, None, :]) @ q.conj().transpose(0, 2, 1)
    v_power, w_power = dominant_eigenvectors(mats)
    v_eigh, w_eigh = dominant_eigenvectors(mats, solver="eigh")
    np.testing.assert_allclose(w_power, gaps[:, -1], rtol=1e-5)
    np.testing.assert_allclose(w_eigh, gaps[:, -1], rtol=1e-5)
    np.testing.assert_allclose(np.abs(np.sum(np.conj(v_power) * v_eigh, axis=1)), 1.0, atol=1e-5)
    zero_v, zero_w = dominant_eigenvectors(np.zeros((2, 3, 3), np.complex64))
    assert np.all(zero_v == 0) and np.all(zero_w == 0)


def test_espirit_crops_outside_the_object(rng):
    """With an object that fills half the FOV the eigenvalue falls below crop outside it."""
    matrix = (48, 48)
    x, y = np.meshgrid(*[(np.arange(n) - n / 2) / n for n in matrix], indexing="ij")
    rho = ((x / 0.25) ** 2 + (y / 0.2) ** 2 < 1).astype(np.complex128)
    maps = np.stack([np.exp(2j * np.pi * (0.3 * c * x - 0.2 * y)) * (1.2 + np.cos(np.pi * (x - c / 8)))
                     for c in range(4)])
    calib = calibration_region((maps * rho).astype(np.complex64), 20)
    est = espirit(calib, matrix, kernel=5)
    inside = (x / 0.22) ** 2 + (y / 0.17) ** 2 < 1
    outside = (x / 0.4) ** 2 + (y / 0.35) ** 2 > 1
    assert _correlation(est, maps)[inside].min() > 0.99
    assert np.mean(np.linalg.norm(est, axis=0)[outside] == 0) > 0.9


# --------------------------------------------------------------------------------------------------------
# Errors


def test_errors(rng):
    scan, _, _ = _scan("radial-2d", rng, snr=np.inf)
    k, t = scan.kspace, scan.trajectory
    expected = listed(estimated(), quote=True)
    with pytest.raises(InvalidDataError, match=f"unknown coil map method 'sense': expected {expected}$"):
        estimate_coil_maps(scan, "sense")
    with pytest.raises(InvalidDataError, match=f"unknown coil map method 'rss': expected {expected}$"):
        cartesian_maps.cartesian_coil_maps(k, np.rint(t), (64, 64), "rss")
    with pytest.raises(InvalidDataError, match="no samples within"):
        lowres_images(k, t + 40, (64, 64), radius=4, device="cpu")
    with pytest.raises(InvalidDataError, match=r"flat must be in \[0, radius = 4\), found 5"):
        lowres_images(k, t, (64, 64), radius=4, flat=5, device="cpu")
    with pytest.raises(InvalidDataError, match="exceeds the Nyquist extent of the grid"):
        lowres_images(k, t, (64, 64), radius=20, grid=(32, 32), device="cpu")
    with pytest.raises(SchemaError, match=r"trajectory must have shape \(12288, 2\), found \(12288, 3\)"):
        lowres_images(k, np.zeros((t.shape[0], 3), np.float32), (64, 64), device="cpu")
    with pytest.raises(InvalidDataError, match="kernel must be a positive odd number of voxels, found 4"):
        walsh(np.ones((2, 8, 8), np.complex64), kernel=4)
    with pytest.raises(SchemaError, match=r"walsh: images must have shape \(C, Nx, Ny\[, Nz\]\)"):
        walsh(np.ones((8, 8), np.complex64))
    with pytest.raises(InvalidDataError, match=r"calibration size \[40, 40\] must be between 1 and the matrix"):
        calibration_region(np.ones((2, 32, 32), np.complex64), 40)
    with pytest.raises(InvalidDataError, match="grid .* is larger than the matrix"):
        fourier_resize(np.ones((2, 32, 32), np.complex64), (16, 16))
    calib = np.ones((2, 10, 10), np.complex64)
    with pytest.raises(InvalidDataError, match="kernel 6 needs a matrix of at least 11 per axis"):
        espirit(calib, (8, 8))
    with pytest.raises(InvalidDataError, match="must exceed the kernel size 6"):
        espirit(calib[:, :6], (32, 32))
    with pytest.raises(InvalidDataError, match="threshold must be in"):
        espirit(calib, (32, 32), threshold=1.5)
    with pytest.raises(SchemaError, match="2 spatial axes"):
        espirit(calib[:, :, :, None], (32, 32))
    with pytest.raises(InvalidDataError, match="unknown eigen solver 'qr'"):
        dominant_eigenvectors(np.eye(2)[None], solver="qr")


# --------------------------------------------------------------------------------------------------------
# GPU


@pytest.mark.gpu
@pytest.mark.parametrize("method", estimated())
def test_gpu_matches_cpu(rng, method):
    scan, truth, inside = _scan("radial-2d", rng)
    cpu = estimate_coil_maps(scan, method, device="cpu")
    gpu = estimate_coil_maps(scan, method, device="gpu")
    assert isinstance(gpu, np.ndarray) and gpu.dtype == np.complex64
    assert _correlation(gpu, cpu)[inside].min() > 0.9999
    assert _correlation(gpu, truth)[inside].mean() > 0.995


@pytest.mark.gpu
def test_gpu_pieces_take_and_return_cupy(rng):
    cp = cupy_module()
    images = _complex(rng, (4, 24, 24)).astype(np.complex64)
    got = walsh(cp.asarray(images))
    assert isinstance(got, cp.ndarray)
    assert _correlation(cp.asnumpy(got), walsh(images)).min() > 0.9999
    mats = images.reshape(4, -1).T[:, :, None] * images.reshape(4, -1).T[:, None, :].conj()
    v, w = dominant_eigenvectors(cp.asarray(mats))
    v_cpu, w_cpu = dominant_eigenvectors(mats)
    np.testing.assert_allclose(cp.asnumpy(w), w_cpu, rtol=1e-4)


# --------------------------------------------------------------------------------------------------------
# The registry of coil-map methods


def test_every_estimated_method_has_its_estimators_and_its_memory_model():
    names = set(estimated())
    assert names and set(coilmaps.FROM_CENTRE) == set(cartesian_maps.FROM_ACS) == names
    assert set(prep_memory.ESTIMATES) == names


@pytest.mark.parametrize("sampling", ["non-cartesian", "cartesian"])
def test_auto_chooses_by_the_registry(sampling):
    estimate = chosen_method("auto", False, 4, sampling)
    assert COIL_MAPS[estimate].estimated and sampling in COIL_MAPS[estimate].auto_for
    assert COIL_MAPS[chosen_method("auto", True, 4, sampling)].file
    single = COIL_MAPS[chosen_method("auto", False, 1, sampling)]
    assert not (single.sense or single.offered or single.estimated)
    assert all(chosen_method(name, False, 4, sampling) == name for name in choices() if name != "auto")


@pytest.mark.parametrize("name", ["pca", "none", 3])
def test_only_a_choice_is_taken(name):
    with pytest.raises(InvalidDataError, match=f"unknown coil-map choice {name!r}: expected one of "
                                               f"{', '.join(choices())}$"):
        method_of(name)
    with pytest.raises(InvalidDataError, match="unknown coil-map choice"):
        chosen_method(name, False, 4, "non-cartesian")
