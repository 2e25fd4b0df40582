"""Scale-free coil-map estimation: a scan without coil maps, reconstructed through ``mri_recon.reconstruct``
with its preparation (prewhitening, Walsh or ESPIRiT maps estimated from the k-space centre, or per-coil
images combined by root-sum-of-squares), gives the reference image times the factor its k-space is
multiplied by, for any factor in [1e-20, 1e20].

The k-space is multiplied with its noise samples kept (the whitened data then carry the factor into the
estimation) or with the noise multiplied too (the whitened data are unchanged; the receiver basis, the
noise's Cholesky factor, carries it: its covariance scales by the factor squared).
"""

from __future__ import annotations

import numpy as np
import pytest

import mri_recon
from mri_recon.sim.simulate import simulate_scan

FACTORS = [1e-20, 1e-15, 1e-10, 1e-5, 1e5, 1e8, "1.2e8/peak", "1.2e9/peak", 1e10, 1e15, 1e20]
"""Factors of the k-space; "x/peak" makes its largest component x (float32 squares overflow from ~1.8e19)."""
CASES = {
    "2d-walsh": ((32, 32), "golden", "auto"),
    "2d-espirit": ((32, 32), "golden", "espirit"),
    "3d-walsh": ((16, 16, 16), "kooshball", "auto"),
    "3d-espirit": ((16, 16, 16), "kooshball", "espirit"),
    "2d-rss": ((32, 32), "golden", "rss"),  # no maps: per-coil images combined in the receiver's channels
}
SEED = int(np.random.SeedSequence().entropy % 2**32)  # fresh data every run, named in a failure's message
ROUNDING = 2e-4
"""The largest relative difference allowed from the reference: the float32 rounding of the scaled k-space,
through the estimated maps and 8 CG iterations. Over 25 seeds of the 2-D Walsh case a harmless factor (1e5)
gave 3.6e-5 to 8.8e-5 and 1.2e8/peak 3.2e-5 to 1.01e-4 (which failed the earlier bound of 1e-4); a dependence
on the scale would be orders of magnitude larger."""


def rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.complex128), np.asarray(b, dtype=np.complex128)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _scan(case: str):
    matrix, trajectory, _ = CASES[case]
    size = {"spokes": 40} if len(matrix) == 2 else {"spokes": 300}
    scan = simulate_scan(matrix, trajectory, coils=4, snr=40.0, samples=2 * matrix[0], seed=SEED, **size)
    return scan.replace(coil_maps=None)  # the default path estimates the maps (Walsh for several coils)


def _factor(scan, factor) -> float:
    if isinstance(factor, str):
        target = float(factor.split("/")[0])
        return target / float(np.abs(scan.kspace.view(np.float32)).max())
    return factor


def _run(scan, case: str, device: str, **options):
    method = CASES[case][2]
    result = mri_recon.reconstruct(scan, coil_maps=method, iterations=8, tol=0.0, device=device,
                                   progress=False, **options)
    assert result.parameters["coil_maps"] == {"auto": "walsh", "rss": "none"}.get(method, method)
    return result.image


_REFERENCES: dict = {}


def _reference(case: str, device: str, **options):
    key = (case, device, tuple(sorted(options.items())))
    if key not in _REFERENCES:
        scan = _scan(case)
        _REFERENCES[key] = scan, _run(scan, case, device, **options)
    return _REFERENCES[key]


def _check(case: str, factor, noise: str, device: str, **options) -> None:
    scan, ref = _reference(case, device, **options)
    f = _factor(scan, factor)
    scaled = scan.replace(kspace=(scan.kspace * f).astype(np.complex64),
                          noise=(scan.noise * f).astype(np.complex64) if noise == "scaled" else scan.noise)
    image = _run(scaled, case, device, **options)
    assert np.isfinite(image).all(), (case, factor, noise, SEED)
    error = rel(image / np.float32(f), ref)
    assert error <= ROUNDING, (case, factor, noise, error, SEED)


@pytest.mark.parametrize("noise", ["kept", "scaled"])
@pytest.mark.parametrize("factor", FACTORS, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_estimated_maps_are_scale_free_cpu(case, factor, noise):
    _check(case, factor, noise, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("noise", ["kept", "scaled"])
@pytest.mark.parametrize("factor", FACTORS, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_estimated_maps_are_scale_free_gpu(case, factor, noise):
    _check(case, factor, noise, "gpu")


@pytest.mark.parametrize("factor", [1e-20, 1e-15, "1.2e8/peak", 1e20], ids=str)
def test_pipe_density_compensation_with_scaled_data(factor):
    # weights from the trajectory alone (dcf="pipe" in the preparation), maps estimated from the data
    _check("2d-walsh", factor, "kept", "cpu", dcf="pipe")


@pytest.mark.parametrize("exponent", [-100, -40, 40, 100])
def test_eigen_solver_and_map_estimators_do_not_depend_on_the_scale(rng, exponent):
    # squares of 2^+-64 over- or underflow float32: every step works in units near 1, so a power of two
    # changes no bit of the maps (and scales the eigenvalues exactly)
    from mri_recon.prep.coilmaps import calibration_region, dominant_eigenvectors, espirit, walsh

    f = np.float32(2.0 ** exponent)
    x = (rng.standard_normal((50, 4, 6)) + 1j * rng.standard_normal((50, 4, 6))).astype(np.complex64)
    mats = x @ x.conj().transpose(0, 2, 1)
    for solver in ("power", "eigh"):
        vec, val = dominant_eigenvectors(mats, solver=solver)
        big_vec, big_val = dominant_eigenvectors(mats * f, solver=solver)
        np.testing.assert_array_equal(big_vec, vec)
        np.testing.assert_allclose(big_val / f, val, rtol=1e-6)
    images = (rng.standard_normal((3, 24, 24)) + 1j * rng.standard_normal((3, 24, 24))).astype(np.complex64)
    np.testing.assert_array_equal(walsh(images * f), walsh(images))
    calib = calibration_region(images, 12)
    np.testing.assert_array_equal(espirit(calib * f, (24, 24), kernel=5), espirit(calib, (24, 24), kernel=5))


@pytest.mark.parametrize("factor", [2.0**-80, 2.0**80])
def test_lowres_images_scale_with_the_data(factor):
    from mri_recon.prep.coilmaps import lowres_images

    scan = _scan("2d-walsh")
    ref = lowres_images(scan.kspace, scan.trajectory, scan.matrix, device="cpu")
    got = lowres_images(scan.kspace * np.float32(factor), scan.trajectory, scan.matrix, device="cpu")
    np.testing.assert_array_equal(got / np.float32(factor), ref)
