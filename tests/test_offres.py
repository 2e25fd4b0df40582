"""Off-resonance: the model against a NumPy oracle of its formula, time segmentation against the exact
operator, the reconstruction with a field map, and the simulator's data."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import adjoint_gap, relative

import mri_recon
from mri_recon.errors import InvalidDataError, SchemaError
from mri_recon.operators.engines import FinufftEncoding, NudftEncoding
from mri_recon.operators.engines.nudft import nudft_forward
from mri_recon.operators.offres import segmented as seg
from mri_recon.operators.offres import time_segments as ts
from mri_recon.operators.offres.model import EncodingNormal, OffresEncoding, offres_adjoint, offres_forward
from mri_recon.operators.offres.setup import plan_correction
from mri_recon.sim import offres as sim_offres
from mri_recon.solvers.sparse import sparse_names


def oracle_matrix(k, f, t, matrix):
    """E[m, n] = exp(-i 2 pi (k_m . r_n + f_n t_m)), r_n = (j - N // 2) / N, in float64 (the model itself)."""
    axes = [(np.arange(n) - n // 2) / n for n in matrix]
    r = np.stack([g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij")], axis=1)
    phase = np.asarray(k, np.float64) @ r.T + np.asarray(t, np.float64)[:, None] * np.asarray(f, np.float64).reshape(-1)
    return np.exp(-2j * np.pi * phase)


def problem(rng, matrix, coils, samples, spread=120.0, readout=16e-3):
    k = ((rng.random((samples, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    f = (spread * rng.standard_normal(matrix)).astype(np.float32)
    t = np.sort(rng.random(samples) * readout).astype(np.float32)
    x = (rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix))).astype(np.complex64)
    d = (rng.standard_normal((coils, samples)) + 1j * rng.standard_normal((coils, samples))).astype(np.complex64)
    return k, f, t, x, d


@pytest.mark.parametrize("matrix", [(9, 12), (6, 5, 4)], ids=["2d-odd-even", "3d"])
def test_exact_operator_is_the_formula(rng, matrix):
    k, f, t, x, d = problem(rng, matrix, 2, 157)
    e = oracle_matrix(k, f, t, matrix)
    assert relative(offres_forward(x, k, f, t), x.reshape(2, -1) @ e.T) < 1e-13
    assert relative(offres_adjoint(d, k, f, t), (d @ e.conj()).reshape(2, *matrix)) < 1e-13
    # chunked evaluation (small blocks) gives the same sums
    assert relative(offres_forward(x, k, f, t, chunk_bytes=2000), x.reshape(2, -1) @ e.T) < 1e-13


def test_zero_field_is_the_plain_encoding_and_the_sign_of_a_constant_field(rng):
    matrix = (8, 10)
    k, f, t, x, _ = problem(rng, matrix, 1, 64)
    plain = nudft_forward(x, k)
    assert relative(offres_forward(x, k, np.zeros(matrix), t), plain) < 1e-13
    # a uniform off-resonance f0 multiplies sample m by exp(-i 2 pi f0 t_m): the documented sign
    shifted = offres_forward(x, k, np.full(matrix, 37.0), t)
    assert relative(shifted, plain * np.exp(-2j * np.pi * 37.0 * t.astype(np.float64))) < 1e-12


def test_shapes_are_checked(rng):
    k, f, t, x, d = problem(rng, (6, 6), 1, 20)
    with pytest.raises(SchemaError, match=r"times must have shape \(20,\)"):
        offres_forward(x, k, f, t[:-1])
    with pytest.raises(SchemaError, match=r"trajectory must have shape \(M, 2\)"):
        offres_adjoint(d, k[:, :1], f, t)
    with pytest.raises(SchemaError, match=r"kspace must have shape \(C, 20\)"):
        offres_adjoint(d[:, :5], k, f, t)
    with pytest.raises(SchemaError, match=r"image must have shape \(C, 6, 6\)"):
        offres_forward(x[:, :5], k, f, t)


def _adjoint_gap(op, rng):
    x = (rng.standard_normal(op.ishape) + 1j * rng.standard_normal(op.ishape)).astype(np.complex64)
    y = (rng.standard_normal(op.oshape) + 1j * rng.standard_normal(op.oshape)).astype(np.complex64)
    return adjoint_gap(x, op.H(y), y, op(x))


def _segmented(k, f, t, matrix, coils, segments, base=FinufftEncoding):
    b, tau, error = ts.interpolators(f, t, segments)
    phases = np.exp(-2j * np.pi * f[None].astype(np.float64) * tau.reshape(-1, *([1] * len(matrix))))
    return seg.TimeSegmentedEncoding(base(k, matrix, coils), b.astype(np.complex64), phases.astype(np.complex64)), error


def test_operators_are_adjoint(rng):
    matrix = (10, 12)
    k, f, t, *_ = problem(rng, matrix, 2, 200)
    assert _adjoint_gap(OffresEncoding(k, f, t, 2), rng) < 1e-5
    segmented, _ = _segmented(k, f, t, matrix, 2, 5)
    assert _adjoint_gap(segmented, rng) < 1e-5


def test_segment_count_meets_the_tolerance_and_is_the_smallest(rng):
    matrix = (12, 12)
    k, f, t, x, _ = problem(rng, matrix, 2, 300)
    exact = offres_forward(x, k, f, t)
    errors = [ts.interpolation_error(f, t, n) for n in (2, 4, 8, 12)]
    assert errors == sorted(errors, reverse=True)
    for tol in (1e-2, 1e-3):
        count = ts.choose_segments(f, t, tol)
        assert ts.interpolation_error(f, t, count) <= tol < ts.interpolation_error(f, t, count - 1)
        segmented, error = _segmented(k, f, t, matrix, 2, count, base=NudftEncoding)
        # the operator's error on an image is the RMS phase-factor error (up to a small factor)
        assert relative(segmented(x), exact) < 2 * tol


def test_segment_search_refuses_bad_requests(rng):
    f = (300 * rng.standard_normal((32, 32))).astype(np.float32)
    t = np.linspace(0, 0.2, 50).astype(np.float32)
    with pytest.raises(InvalidDataError, match="needs more than 64 segments to reach the tolerance 1e-06"):
        ts.choose_segments(f, t, 1e-6)
    with pytest.raises(InvalidDataError, match=r"tolerance must lie in \(0, 1\), found 0"):
        ts.choose_segments(f, t, 0)
    with pytest.raises(InvalidDataError, match="segments must be a positive integer, found 0"):
        ts.interpolators(f, t, 0)
    with pytest.raises(InvalidDataError, match="unknown field-map correction 'fast'"):
        plan_correction(f, t, 1, gpu=False, correction="fast")
    with pytest.raises(InvalidDataError, match="segments must be a positive integer or None, found 2.5"):
        plan_correction(f, t, 1, gpu=False, segments=2.5)
    with pytest.raises(InvalidDataError, match="needs more than 64 segments"):
        plan_correction(f, t, 1, gpu=False, correction="segmented")
    assert plan_correction(f, t, 1, gpu=False).kind == "exact"  # auto: segmentation impossible, exact instead
    with pytest.raises(InvalidDataError, match="fit neither time segmentation .* nor the exact GPU kernels"):
        plan_correction(f, np.linspace(0, 2.0, 50).astype(np.float32), 1, gpu=True)  # 2 s: beyond the kernels
    with pytest.raises(InvalidDataError, match="segments \\(L = 4\\) apply to time segmentation, not to the exact"):
        plan_correction(f, t, 1, gpu=False, correction="exact", segments=4)


def test_normal_operators_match_their_encodings(rng):
    matrix = (10, 8)
    k, f, t, *_ = problem(rng, matrix, 1, 180)
    w = rng.random(180).astype(np.float32)
    maps = (rng.standard_normal((3, *matrix)) + 1j * rng.standard_normal((3, *matrix))).astype(np.complex64)
    x = (rng.standard_normal(matrix) + 1j * rng.standard_normal(matrix)).astype(np.complex64)
    segmented, _ = _segmented(k, f, t, matrix, 1, 4)
    spectra = seg.segment_spectra(segmented, w)
    toeplitz = seg.SegmentedNormal(spectra, segmented.phases, coil_maps=maps, lam=0.3)
    a = segmented.batched(3)
    direct = (np.conj(maps) * a.H(a(maps * x) * w)).sum(axis=0) + 0.3 * x
    assert relative(toeplitz(x), direct) < 1e-5
    exact = OffresEncoding(k, f, t, 1)
    normal = EncodingNormal(exact, w, coil_maps=maps, lam=0.3, coil_batch=2)
    e = exact.batched(3)
    assert relative(normal(x), (np.conj(maps) * e.H(e(maps * x) * w)).sum(axis=0) + 0.3 * x) < 1e-5
    # the same operators through the encoding protocol (Encoding.normal)
    assert relative(segmented.normal(w, maps, 0.3)(x), direct) < 1e-5
    assert relative(exact.normal(w, maps, 0.3, coil_batch=2)(x), normal(x)) == 0.0
    # without maps: one image per coil, solved independently
    per_coil = seg.SegmentedNormal(spectra, segmented.phases, coil_batch=1)
    stack = maps
    assert relative(per_coil(stack), a.H(a(stack) * w)) < 1e-5


def test_simulated_field_map_times_and_zero_peak():
    scan = mri_recon.simulate_scan((24, 24), "radial", coils=2, snr=None, spokes=20, field_map_peak=150,
                                   readout_ms=8)
    plain = mri_recon.simulate_scan((24, 24), "radial", coils=2, snr=None, spokes=20)
    assert scan.field_map.shape == (24, 24) and scan.times.shape == (scan.n_samples,)
    assert 140 < scan.field_map.max() <= 150 and -150 <= scan.field_map.min() < -100
    per = scan.attrs["samples"]
    assert np.allclose(scan.times[:per], np.arange(per) * 8e-3 / per) and np.array_equal(scan.times[per:2 * per],
                                                                                         scan.times[:per])
    zero = mri_recon.simulate_scan((24, 24), "radial", coils=2, snr=None, spokes=20, field_map_peak=0)
    assert np.array_equal(zero.kspace, plain.kspace)
    assert relative(scan.kspace, plain.kspace) > 0.05  # the off-resonance changed the data
    with pytest.raises(InvalidDataError, match="field_map_peak must be a non-negative number of Hz"):
        mri_recon.simulate_scan((24, 24), "radial", coils=1, field_map_peak=-1)
    with pytest.raises(InvalidDataError, match="readout duration must be a positive number"):
        sim_offres.readout_times(10, 5, 0.0)
    with pytest.raises(InvalidDataError, match="10 samples do not split into readouts of 3"):
        sim_offres.readout_times(10, 3, 1e-3)


def test_simulated_perturbation_is_the_fine_grid_sum(rng):
    """The segmented fine-grid computation equals the exact float64 sum on the fine grid."""
    matrix, coils, peak = (8, 8), 2, 150.0
    k = ((rng.random((90, 2)) - 0.5) * 8).astype(np.float32)
    t = np.tile(np.linspace(0, 16e-3, 30, endpoint=False), 3).astype(np.float32)
    fine = tuple(sim_offres.FINE * n for n in matrix)
    image = mri_recon.sim.phantom.shepp_logan_image(fine) * mri_recon.sim.phantom.coil_maps(fine, coils)
    f = sim_offres.field_map(fine, peak)
    exact = offres_forward(image, k, f.astype(np.float64), t) - nudft_forward(image, k)
    assert relative(sim_offres.perturbation(k, matrix, coils, peak, t), exact * (64 / 256)) < 2e-6


@pytest.fixture(scope="module")
def spiral_scans():
    fm = mri_recon.simulate_scan((48, 48), "spiral", coils=4, snr=None, field_map_peak=150, readout_ms=16)
    return fm, mri_recon.simulate_scan((48, 48), "spiral", coils=4, snr=None)


def test_correction_recovers_the_image_of_a_scan_without_off_resonance(spiral_scans):
    fm, clean = spiral_scans
    options = {"iterations": 25, "lam": 1e-4, "device": "cpu", "progress": False}
    truth = fm.ground_truth
    reference = relative(mri_recon.reconstruct(clean, **options).image, truth)
    blurred = mri_recon.reconstruct(fm.replace(field_map=None, times=None), **options)
    corrected = mri_recon.reconstruct(fm, field_map_correction="segmented", **options)
    assert blurred.parameters["field_map_correction"] == "none"
    label = corrected.parameters["field_map_correction"]
    assert label.startswith("time-segmented (L=") and int(label[18:-1]) > 1
    assert relative(corrected.image, truth) <= 1.2 * reference
    assert relative(blurred.image, truth) > 2 * relative(corrected.image, truth)


def test_exact_and_segmented_solutions_agree(rng):
    scan = mri_recon.simulate_scan((16, 16), "spiral", coils=2, snr=None, field_map_peak=100, readout_ms=10)
    options = {"iterations": 8, "lam": 1e-3, "device": "cpu", "progress": False}
    exact = mri_recon.reconstruct(scan, field_map_correction="exact", **options)
    segmented = mri_recon.reconstruct(scan, field_map_correction="segmented", **options)
    assert exact.parameters["field_map_correction"] == "exact"
    with pytest.raises(InvalidDataError, match="a PSF applies to the model without off-resonance"):
        mri_recon.reconstruct(scan, psf=np.zeros((32, 32), np.complex64), **options)
    assert relative(segmented.image, exact.image) < 3e-3
    # scale independence: the data times 2^-40 give the image times 2^-40
    small = mri_recon.reconstruct(scan.replace(kspace=scan.kspace * np.float32(2.0 ** -40)),
                                  field_map_correction="segmented", **options)
    assert relative(small.image * np.float32(2.0 ** 40), segmented.image) < 1e-6


def test_public_functions_are_the_formula_and_check_inputs(rng):
    matrix = (7, 9)
    k, f, t, x, d = problem(rng, matrix, 2, 90)
    e = oracle_matrix(k, f, t, matrix)
    assert relative(mri_recon.fhd_offres(d, k, matrix, f, t, device="cpu"), (d @ e.conj()).reshape(2, *matrix)) < 1e-6
    assert relative(mri_recon.forward_offres(x[0], k, f, t, device="cpu"), x[0].reshape(-1) @ e.T) < 1e-6
    with pytest.raises(SchemaError, match=r"fhd_offres: field_map must have the image's shape \(7, 9\)"):
        mri_recon.fhd_offres(d, k, matrix, f[:, :8], t, device="cpu")
    with pytest.raises(SchemaError, match="forward_offres: times has 89 samples but the data have 90"):
        mri_recon.forward_offres(x, k, f, t[:-1], device="cpu")
    with pytest.raises(SchemaError, match=r"forward_offres: image must have the field map's shape \(7, 9\)"):
        mri_recon.forward_offres(x[:, :6], k, f, t, device="cpu")


def test_cli_simulates_and_corrects_a_field_map(tmp_path):
    import h5py
    from click.testing import CliRunner

    from mri_recon.cli import main

    runner = CliRunner()
    path = tmp_path / "fm.h5"
    made = runner.invoke(main, ["simulate", str(path), "--matrix", "32", "--trajectory", "spiral", "--coils", "2",
                                "--field-map", "100", "--readout-ms", "8", "-q"])
    assert made.exit_code == 0, made.output
    info = runner.invoke(main, ["info", str(path), "--device", "cpu"])
    assert info.exit_code == 0, info.output
    assert re.search(r"off-res +-9\d\.\d+ \.\. 100 Hz over 7\.99\d* ms: time-segmented \(L=\d+\)", info.output)
    out = tmp_path / "r.h5"
    done = runner.invoke(main, ["reconstruct", str(path), "-o", str(out), "--device", "cpu", "--iterations", "5",
                                "--field-map-correction", "segmented", "--segments", "3", "-q"])
    assert done.exit_code == 0, done.output
    with h5py.File(out) as f:
        assert f.attrs["param_field_map_correction"] == "time-segmented (L=3)"
    bad = runner.invoke(main, ["simulate", str(tmp_path / "x.h5"), "--field-map", "nan"])
    assert bad.exit_code != 0 and "must be a finite number" in bad.output


@pytest.mark.parametrize("kind", ["kooshball", "stack-of-stars"])
def test_three_dimensional_scans_are_simulated_and_corrected(kind):
    scan = mri_recon.simulate_scan((16, 16, 12), kind, coils=2, snr=None, field_map_peak=100, readout_ms=8)
    assert scan.field_map.shape == (16, 16, 12) and scan.times.shape == (scan.n_samples,)
    options = {"iterations": 10, "lam": 1e-3, "device": "cpu", "progress": False}
    corrected = mri_recon.reconstruct(scan, **options)
    blurred = mri_recon.reconstruct(scan.replace(field_map=None, times=None), **options)
    assert corrected.parameters["field_map_correction"].startswith("time-segmented")
    assert relative(corrected.image, scan.ground_truth) < 0.5 * relative(blurred.image, scan.ground_truth)


def test_correction_settings_that_cannot_apply_are_refused():
    from mri_recon.pipeline import reconstruct as solve
    from mri_recon.sim.simulate import simulate_scan

    plain = simulate_scan((16, 16), "golden", coils=2, spokes=12, seed=1)
    with pytest.raises(InvalidDataError, match="field_map_correction must be one of auto, exact, segmented, "
                                               "found 'fast'"):
        solve(plain, iterations=2, device="cpu", field_map_correction="fast")
    with pytest.raises(InvalidDataError, match=r"segments \(L = 4\) apply to off-resonance correction, and the "
                                               r"scan has no field map"):
        solve(plain, iterations=2, device="cpu", segments=4)


def test_a_field_map_with_tv_or_wavelets_is_refused():
    from mri_recon.pipeline import reconstruct as solve
    from mri_recon.sim.simulate import simulate_scan

    scan = simulate_scan((16, 16), "spiral", coils=2, seed=1, field_map_peak=50, readout_ms=8)
    for regularizer in sparse_names():
        with pytest.raises(InvalidDataError, match=f"off-resonance correction runs with the l2 regularizer only, "
                                                   f"not {regularizer}"):
            solve(scan, iterations=2, device="cpu", regularizer=regularizer)


def test_offres_engines_build_their_own_normal_operators_only(rng):
    """Neither off-resonance engine has one Toeplitz PSF: asking for it, or passing a spectrum, is refused."""
    matrix = (8, 6)
    k, f, t, *_ = problem(rng, matrix, 1, 60)
    w = np.ones(60, dtype=np.float32)
    segmented, _ = _segmented(k, f, t, matrix, 1, 3)
    exact = OffresEncoding(k, f, t, 1)
    assert (exact.name, exact.device_kind, exact.caches_psf) == ("exact", "cpu", False)
    assert (segmented.name, segmented.device_kind, segmented.key) == ("nufft", "cpu", "nufft-cpu")
    with pytest.raises(InvalidDataError, match="exact off-resonance encoding has no Toeplitz PSF"):
        exact.psf(w)
    with pytest.raises(InvalidDataError, match="exact off-resonance encoding has no Toeplitz spectrum"):
        exact.normal(w, spectrum=np.zeros((16, 12), np.complex64))
    with pytest.raises(InvalidDataError, match="has L \\(L \\+ 1\\) / 2 segment PSFs, not one PSF"):
        segmented.psf(w)
    with pytest.raises(InvalidDataError, match="computes its own segment spectra"):
        segmented.normal(w, spectrum=np.zeros((16, 12), np.complex64))
