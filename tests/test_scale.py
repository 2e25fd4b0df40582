"""Scale-free numerics: the image scales with the data and nothing else changes, on CPU and GPU.

A scan whose k-space, coil maps or weights are multiplied by any factor in [1e-20, 1e20] reconstructs to
the reference image times the implied factor (k-space: the factor; maps: its inverse; weights: 1).
"""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module
from mri_recon.io.outputs import nrmse_vs_truth
from mri_recon.pipeline import power_of_two, reconstruct
from mri_recon.prep import prepare_scan
from mri_recon.sim.simulate import simulate_scan
from mri_recon.solvers.cg import cg, inner

FACTORS = [1e-20, 3.7e-9, 1.0 / 3, 5e7, 1e20]


def rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.complex128), np.asarray(b, dtype=np.complex128)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def scan():
    return simulate_scan((24, 20), "golden", coils=3, spokes=30, samples=48, snr=40.0, seed=4, dcf="pipe")


def _run(scan, device, **changes):
    return reconstruct(scan.replace(**changes), iterations=12, tol=0.0, lam=1e-2, device=device,
                       progress=False).image


def _check_scales(scan, device):
    ref = _run(scan, device)
    for f in FACTORS:
        assert rel(_run(scan, device, kspace=scan.kspace * f), ref * np.float32(f)) <= 1e-4, f
        assert rel(_run(scan, device, coil_maps=scan.coil_maps * f), ref / np.float32(f)) <= 1e-4, f
        assert rel(_run(scan, device, weights=scan.weights * f), ref) <= 1e-4, f
    together = _run(scan, device, kspace=scan.kspace * 1e15, coil_maps=scan.coil_maps * 1e-12,
                    weights=scan.weights * 1e18)
    assert rel(together, ref * np.float32(1e27)) <= 1e-4
    # per-coil images (no maps): the same rule
    rss = scan.replace(coil_maps=None)
    ref = _run(rss, device)
    assert rel(_run(rss, device, kspace=scan.kspace * 1e-19), ref * np.float32(1e-19)) <= 1e-4


def test_scale_free_cpu(scan):
    _check_scales(scan, "cpu")


@pytest.mark.gpu
def test_scale_free_gpu(scan):
    _check_scales(scan, "gpu")


def test_lambda_is_relative_to_the_operator_solved(scan):
    # maps x 1e-5 used to turn lam = 1e-3 into total regularization (image ~ 0), maps x 1e5 into none
    ref = reconstruct(scan, iterations=10, tol=0.0, lam=0.5, device="cpu", progress=False)
    small = reconstruct(scan.replace(coil_maps=scan.coil_maps * 1e-5), iterations=10, tol=0.0, lam=0.5,
                        device="cpu", progress=False)
    assert rel(small.image * np.float32(1e-5), ref.image) <= 1e-4
    assert small.parameters["lam_abs"] == pytest.approx(ref.parameters["lam_abs"] * 1e-10, rel=1e-6)
    peak = float(np.max(np.sum(np.abs(scan.coil_maps) ** 2, axis=0))) * float(np.sum(scan.weights, dtype=np.float64))
    assert ref.parameters["lam_abs"] == pytest.approx(0.5 * peak, rel=1e-5)


def test_all_zero_weights_are_refused(scan):
    from mri_recon.errors import InvalidDataError

    with pytest.raises(InvalidDataError, match="weights are all zero: every sample would be ignored"):
        reconstruct(scan.replace(weights=np.zeros_like(scan.weights)), iterations=2, device="cpu",
                    progress=False)


@pytest.mark.parametrize("noise_scale", [1.0, 5.0, 0.01])
def test_estimated_and_file_maps_give_the_same_scale(noise_scale):
    # With prewhitening, file maps are whitened with the data; estimated maps are normalized in the
    # receiver's channels (maps_basis), so both images sit at the ground truth's scale whatever the noise
    # level. Magnitudes are compared: estimated maps carry an arbitrary phase, which no method can know.
    scan = simulate_scan((32, 32), "golden", coils=4, spokes=48, samples=64, snr=30.0, seed=7, dcf="pipe")
    scan = scan.replace(noise=scan.noise * noise_scale)
    truth = np.abs(scan.ground_truth)
    norms = []
    for maps in ("file", "walsh", "rss"):
        ready, record = prepare_scan(scan, coil_maps=maps)
        assert record["prewhitened"]
        result = reconstruct(ready, iterations=20, tol=0.0, device="cpu", progress=False,
                             estimate_maps=record["estimate_maps"], maps_basis=record["maps_basis"])
        image = np.abs(result.image)
        plain = rel(image, truth)
        fitted = rel(image * (np.vdot(image, truth) / np.vdot(image, image)), truth)
        assert plain <= 1.1 * fitted, (maps, plain, fitted)
        norms.append(np.linalg.norm(image))
        # the NRMSE the output file records: complex with the file's maps, magnitudes otherwise
        kind, value = nrmse_vs_truth(result.image, scan.ground_truth, result)
        assert kind == ("complex" if maps == "file" else "magnitude")
        assert value <= 1.1 * fitted if kind == "magnitude" else value < 0.5
    assert norms[1] == pytest.approx(norms[0], rel=0.1) and norms[2] == pytest.approx(norms[0], rel=0.15)


def test_power_of_two():
    assert power_of_two(1.0) == 1.0 and power_of_two(3.1) == 4.0 and power_of_two(1e-30) == 2.0 ** -100
    assert power_of_two(0.0) == 1.0 and power_of_two(float("inf")) == 1.0


@pytest.mark.parametrize("magnitude", [1e25, 1e-25], ids=["huge", "tiny"])
def test_cg_inner_products_do_not_overflow(rng, magnitude):
    # squares of 1e25 overflow float32 and squares of 1e-25 underflow it: the sums are float64
    n = 40
    q, _ = np.linalg.qr(rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)))
    a = (q * np.linspace(1.0, 20.0, n)) @ q.conj().T
    b = ((rng.standard_normal(n) + 1j * rng.standard_normal(n)) * magnitude).astype(np.complex64)
    x, residuals = cg(lambda v: (a @ v).astype(np.complex64), b, max_iterations=80, tolerance=1e-5)
    assert residuals[-1] <= 1e-5
    assert rel(x, np.linalg.solve(a, b.astype(np.complex128))) <= 1e-4
    assert abs(inner(b, b) - np.vdot(b.astype(np.complex128), b)) <= 1e-6 * abs(np.vdot(b.astype(complex), b))


@pytest.mark.gpu
def test_gpu_cg_inner_products_do_not_overflow(rng):
    cupy = cupy_module()
    n = 40
    q, _ = np.linalg.qr(rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)))
    a = ((q * np.linspace(1.0, 20.0, n)) @ q.conj().T).astype(np.complex64)
    b = ((rng.standard_normal(n) + 1j * rng.standard_normal(n)) * 1e25).astype(np.complex64)
    ad = cupy.asarray(a)
    x, residuals = cg(lambda v: ad @ v, cupy.asarray(b), max_iterations=80, tolerance=1e-5)
    assert residuals[-1] <= 1e-5
    assert rel(cupy.asnumpy(x), np.linalg.solve(a.astype(np.complex128), b.astype(np.complex128))) <= 1e-4


def test_reconstruct_refuses_a_field_map_without_times(scan):
    from mri_recon.errors import InvalidDataError

    with pytest.raises(InvalidDataError, match="has 'field_map' but no 'times'.* field_map='ignore'"):
        reconstruct(scan.replace(field_map=np.zeros(scan.matrix, dtype=np.float32)), iterations=2, device="cpu",
                    progress=False)


@pytest.mark.gpu
def test_gpu_engines_reconstruct_the_same_image(scan):
    images = {m: reconstruct(scan, iterations=12, tol=0.0, device="gpu", method=m, progress=False)
              for m in ("exact", "nufft")}
    assert images["exact"].parameters["method"] == "exact" and images["nufft"].parameters["method"] == "nufft"
    assert rel(images["nufft"].image, images["exact"].image) <= 1e-4


@pytest.mark.gpu
def test_gpu_nufft_does_not_use_the_psf_cache(scan, tmp_path, monkeypatch):
    from mri_recon.io.cache import PsfCache
    from mri_recon.operators.memo import LIMIT_VARIABLE

    monkeypatch.setenv(LIMIT_VARIABLE, "0")  # the disk cache alone (the memo would serve the earlier tests' scan)

    cache = PsfCache(tmp_path)
    result = reconstruct(scan, iterations=3, device="gpu", method="nufft", progress=False, psf_cache=cache)
    assert result.parameters["psf"] == "computed (disk cache not used by the GPU NUFFT)"
    assert not list(tmp_path.iterdir())
    exact = reconstruct(scan, iterations=3, device="gpu", method="exact", progress=False, psf_cache=cache)
    assert exact.parameters["psf"] == "miss" and list(tmp_path.iterdir())


def test_a_bart_scan_with_bart_maps_reconstructs_on_the_cpu():
    # BART's `phantom -S` maps have magnitudes near 1.2e5: float32 inner products overflowed here before
    # ("<p, A p> = nan at iteration 1"). Same NRMSE as BART's own `pics` on the same data (recorded in the file).
    from pathlib import Path

    from mri_recon.io import load_scan

    scan = load_scan(Path(__file__).parent / "data" / "bart_radial_64.h5")
    assert float(np.abs(scan.coil_maps).max()) > 1e5
    truth = scan.ground_truth
    for method in ("nufft", "exact"):
        image = reconstruct(scan, iterations=30, tol=0.0, lam=1e-3, device="cpu", method=method,
                            progress=False).image
        assert np.isfinite(image).all()
        best = np.vdot(image, truth) / np.vdot(image, image)
        assert rel(image * best, truth) <= 1.02 * scan.attrs["bart_pics_nrmse_best_scale"]


def test_scales_at_the_ends_of_the_float32_range(scan):
    # factors whose powers of two float32 cannot hold: weights near 3e38, k-space near 2e38, maps subnormal
    ref = _run(scan, "cpu")
    big = (scan.weights.astype(np.float64) * (2.6e38 / float(scan.weights.max()))).astype(np.float32)
    assert rel(_run(scan, "cpu", weights=big), ref) <= 1e-4
    f = 2e38 / float(np.abs(scan.kspace.view(np.float32)).max())
    assert rel(_run(scan, "cpu", kspace=(scan.kspace * f).astype(np.complex64)), ref * np.float32(f)) <= 1e-4
    # subnormal maps (1e-40) keep about 17 bits: the implied factor within 1e-3
    tiny = _run(scan, "cpu", coil_maps=(scan.coil_maps * 1e-40).astype(np.complex64), kspace=scan.kspace * 1e-12)
    assert np.isfinite(tiny).all() and rel(tiny, ref * np.float32(1e28)) <= 1e-3


def test_an_image_beyond_float32_is_refused(scan):
    from mri_recon.errors import InvalidDataError

    with pytest.raises(InvalidDataError, match="the image exceeds the float32 range"):
        _run(scan, "cpu", kspace=scan.kspace * 1e30, coil_maps=scan.coil_maps * 1e-20)


def test_a_cached_psf_serves_only_the_engine_that_computed_it(scan, tmp_path):
    from mri_recon.io.cache import PsfCache

    cache = PsfCache(tmp_path)
    runs = [reconstruct(scan, iterations=3, device="cpu", method=m, progress=False, psf_cache=cache)
            for m in ("nufft", "exact", "exact")]
    assert [r.parameters["psf"] for r in runs] == ["miss", "miss", "hit"]
    np.testing.assert_array_equal(runs[1].image, runs[2].image)
