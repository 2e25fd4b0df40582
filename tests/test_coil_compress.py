"""Coil compression (``coil_compress=N``, :mod:`mri_recon.prep.compress`): the subspace against a NumPy SVD and
against ``bart cc``, exactness of SENSE in the compressed subspace, the quality kept on a 32-coil scan, scale
freedom, refusals, and every path: the API, the CLI, a batch, the server's settings, a time series and the
device preparation (its NumPy twin here, CuPy under the ``gpu`` marker)."""

from __future__ import annotations

import shutil
import subprocess

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import assert_same_preparation, load_script, relative
from scipy.linalg import subspace_angles

import mri_recon
from mri_recon import pipeline
from mri_recon.api import plan_prepared, prepare_and_reconstruct
from mri_recon.arrays.backend import CPU, cupy_module, resolve_device, to_host
from mri_recon.batch import reconstruct_many
from mri_recon.cli import main
from mri_recon.errors import InvalidDataError
from mri_recon.io import save_scan
from mri_recon.io.cfl import read_cfl, write_cfl
from mri_recon.prep import compress, prepare_scan
from mri_recon.prep.compress import CoilCompression, centre_samples, compression_of, parse_coil_compress
from mri_recon.prep.compress_methods import compression_for
from mri_recon.prep.device import prepare_on_device
from mri_recon.prep.frames import prepare_series
from mri_recon.prep.noise import noise_covariance, whitening_and_basis
from mri_recon.server.config import ConfigError, configured
from mri_recon.settings import ReconSettings
from mri_recon.sim.dynamic import simulate_series
from mri_recon.sim.simulate import simulate_scan

BART = shutil.which("bart")
FAST = {"device": "cpu", "iterations": 8}


def _scan(coils: int = 12, matrix=(40, 40), seed: int = 2):
    """A simulated scan whose noise is correlated across coils (whitening mixes them)."""
    rng = np.random.default_rng(seed)
    scan = simulate_scan(matrix, "golden", coils=coils, snr=30.0, seed=seed)
    mix = np.eye(coils) + 0.3 * (rng.standard_normal((coils, coils)) + 1j * rng.standard_normal((coils, coils)))
    return scan.replace(noise=(mix @ scan.noise).astype(np.complex64), kspace=(mix @ scan.kspace).astype(np.complex64),
                        coil_maps=(mix @ scan.coil_maps.reshape(coils, -1)).reshape(scan.coil_maps.shape)
                        .astype(np.complex64))


@pytest.fixture(scope="module")
def scan():
    return _scan()


def _angle(a, b) -> float:
    """The largest principal angle between the column spaces of ``a`` and ``b``."""
    return float(subspace_angles(np.asarray(a), np.asarray(b)).max())


# --- the matrix ---------------------------------------------------------------------------------------------------


def test_the_matrix_spans_the_principal_subspace_of_the_whitened_centre(scan):
    w, _ = whitening_and_basis(scan)
    index = centre_samples(scan.trajectory, scan.n_coils)
    centre = w @ scan.kspace[:, index].astype(np.complex128)
    u, s, _ = np.linalg.svd(centre, full_matrices=False)  # the oracle
    for n in (1, 3, 5, 8):
        found = compression_of(scan.kspace, scan.trajectory, n, w)
        assert found.matrix.shape == (n, scan.n_coils) and found.virtual == n and found.coils == scan.n_coils
        np.testing.assert_allclose(found.matrix @ found.matrix.conj().T, np.eye(n), atol=1e-12)  # orthonormal rows
        assert _angle(found.matrix.conj().T, u[:, :n]) < 1e-6
        assert found.energy == pytest.approx(np.sum(s[:n] ** 2) / np.sum(s ** 2), rel=1e-9)
        assert found.samples == len(index)


def test_auto_keeps_the_fewest_coils_that_hold_the_energy(scan):
    w, _ = whitening_and_basis(scan)
    found = compression_of(scan.kspace, scan.trajectory, "auto", w)
    shares = [compression_of(scan.kspace, scan.trajectory, n, w).energy for n in range(1, found.virtual + 1)]
    assert shares[-1] >= compress.AUTO_ENERGY and all(share < compress.AUTO_ENERGY for share in shares[:-1])
    assert found.energy == shares[-1] and found.asked == "auto"


def test_the_centre_is_the_samples_nearest_k0():
    rng = np.random.default_rng(1)
    trajectory = (rng.random((50_000, 2)) - 0.5) * 128
    radius = np.hypot(*trajectory.T)
    index = centre_samples(trajectory, 8)
    assert np.array_equal(index, np.flatnonzero(radius < compress.CENTRE_RADIUS))
    few = centre_samples(trajectory[radius > 30], 8)  # nothing inside: the 4 x 8 nearest
    assert len(few) == compress.MIN_PER_COIL * 8 and radius[radius > 30][few].max() < np.sort(radius[radius > 30])[40]
    dense = np.concatenate([trajectory * 0.01] * 2)  # every sample inside: the nearest MAX_SAMPLES
    chosen = centre_samples(dense, 8)
    assert len(chosen) == compress.MAX_SAMPLES and np.all(np.diff(chosen) > 0)
    squared = np.sum(dense.astype(np.float64) ** 2, axis=1)
    assert squared[chosen].max() <= np.sort(squared)[compress.MAX_SAMPLES - 1]
    assert len(centre_samples(trajectory[:10], 8)) == 10  # fewer samples than asked: all of them
    r = compress.CENTRE_RADIUS
    below = np.nextafter(np.float32(r), np.float32(0))
    edge = np.array([[r, 0], [0, -r], [below, 0], [r * 0.6, r * 0.8], [r * 0.6, -r * 0.79], [0, 0]] * 8,
                    dtype=np.float32)  # on the radius, just inside, on the circle, either side of it
    squared = np.sum(edge.astype(np.float64) ** 2, axis=1)
    assert np.array_equal(centre_samples(edge, 1), np.flatnonzero(squared < r ** 2))


def test_compressing_keeps_the_sense_model_and_white_noise(scan):
    ready, record = prepare_scan(scan, coil_maps="file", coil_compress=5)
    white, _ = prepare_scan(scan, coil_maps="file")
    w, _ = whitening_and_basis(scan)
    a = compression_of(scan.kspace, scan.trajectory, 5, w).matrix
    assert ready.n_coils == 5 and record["coil_compress"] == 5 and "12 coils compressed to 5" in \
        record["coil_compress_note"]
    for name in ("kspace", "noise", "coil_maps"):  # d' = A d, n' = A n, S' = A S (so A d = F (A S) x)
        whole = getattr(white, name).reshape(12, -1).astype(np.complex128)
        assert relative(getattr(ready, name).reshape(5, -1), a @ whole) < 1e-6, name
    np.testing.assert_allclose(noise_covariance(ready.noise), np.eye(5), atol=1e-5)  # still white


def test_all_coils_rotated_leave_the_image_unchanged(scan):
    """N = C: a unitary rotation of the receivers, under which SENSE (file or estimated maps) and
    root-sum-of-squares give the same image to float32 rounding (Walsh's maps of this noisy scan amplify a
    rounding of the data about 2400 times: tests/test_prepare_device.py)."""
    _, _, unitary = np.linalg.svd(np.random.default_rng(0).standard_normal((12, 12)) + 0j)
    full = CoilCompression(12, 12, unitary, 1.0, 0, 12)
    for maps, tolerance in (("file", 1e-5), ("walsh", 2e-4), ("rss", 1e-5)):
        plain = mri_recon.reconstruct(scan, coil_maps=maps, **FAST).image
        ready, record = prepare_scan(scan, coil_maps=maps, coil_compress=full)
        assert relative(ready.kspace, unitary @ prepare_scan(scan, coil_maps=maps)[0].kspace) < 1e-6
        image = pipeline.reconstruct(ready, estimate_maps=record["estimate_maps"], maps_basis=record["maps_basis"],
                                     **FAST).image
        assert relative(np.abs(image), np.abs(plain)) < tolerance, maps


def test_as_many_coils_as_the_scan_has_change_nothing(scan):
    plain = mri_recon.reconstruct(scan, **FAST)
    for n in (12, 40):
        _, record, same = prepare_and_reconstruct(scan, coil_compress=n, **FAST)
        assert np.array_equal(same.image, plain.image)
        assert record["coil_compress"] == 12 and "not compressed" in record["coil_compress_note"]
    _, none_record, _ = prepare_and_reconstruct(scan, **FAST)
    assert not any(key.startswith("coil_compress") for key in none_record)  # the default records nothing


def test_one_virtual_coil_is_combined_in_the_receivers_scale(scan):
    """N = 1 with root-sum-of-squares: the one image scaled by its receiver column, as the rss of C coils."""
    rss = mri_recon.reconstruct(scan, coil_maps="rss", **FAST).image
    one = mri_recon.reconstruct(scan, coil_maps="rss", coil_compress=1, **FAST)
    assert one.combine == "single"
    assert relative(np.abs(one.image), np.abs(rss)) < 0.2  # one coil of twelve: the same scale, not the same image


# --- quality --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def thirty_two():
    return simulate_scan((96, 96), "golden", coils=32, snr=30.0, seed=5)


@pytest.mark.parametrize("maps", ["file", "walsh"])
def test_32_coils_compressed_to_8_to_12_keep_the_nrmse_within_2_percent(thirty_two, maps):
    from mri_recon.io.outputs import nrmse_vs_truth

    def error(choice):
        _, record, result = prepare_and_reconstruct(thirty_two, device="cpu", coil_maps=maps, coil_compress=choice)
        return nrmse_vs_truth(result.image, thirty_two.ground_truth, result)[1], record

    full, _ = error("none")
    for n in (8, 10, 12):
        compressed, record = error(n)
        assert record["coil_compress"] == n and compressed <= 1.02 * full, (n, compressed, full)


# --- scale ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prewhiten", [True, False])
def test_compression_does_not_depend_on_the_data_scale(scan, prewhiten):
    reference = prepare_and_reconstruct(scan, coil_compress="auto", prewhiten=prewhiten, **FAST)
    for factor in (1e-20, 1e-7, 1e20):
        scaled = scan.replace(kspace=(scan.kspace * np.float32(factor)).astype(np.complex64),
                              noise=(scan.noise * np.float32(factor)).astype(np.complex64))
        _, record, result = prepare_and_reconstruct(scaled, coil_compress="auto", prewhiten=prewhiten, **FAST)
        assert record["coil_compress"] == reference[1]["coil_compress"]
        assert record["coil_compress_energy"] == pytest.approx(reference[1]["coil_compress_energy"], rel=1e-9)
        assert relative(result.image.astype(np.complex128) / factor, reference[2].image) < 1e-5, factor
        w = whitening_and_basis(scaled)[0] if prewhiten else None
        w0 = whitening_and_basis(scan)[0] if prewhiten else None
        ours = compression_of(scaled.kspace, scaled.trajectory, 5, w).matrix
        base = compression_of(scan.kspace, scan.trajectory, 5, w0).matrix
        assert _angle(ours.conj().T, base.conj().T) < 1e-6


# --- refusals -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "message"), [
    (0, r"coil_compress must be none, auto or a number of virtual coils N >= 1, found 0"),
    (-3, r"N >= 1, found -3"),
    ("0", r"N >= 1, found 0"),
    (2.5, r"N >= 1, found 2.5"),
    (True, r"N >= 1, found True"),
    ("eight", r"N >= 1, found 'eight'"),
    ("ecc:4", r"ESPIRiT-based compression \(ECC, bart cc -E\) is not implemented"),
], ids=str)
def test_bad_values_are_refused_with_the_option_s_name(value, message):
    with pytest.raises(InvalidDataError, match=message):
        parse_coil_compress(value)
    with pytest.raises(InvalidDataError, match=message):
        ReconSettings(coil_compress=value)


def test_good_values_are_one_record():
    assert ReconSettings(coil_compress="8") == ReconSettings(coil_compress=8)
    assert ReconSettings(coil_compress=" Auto ").coil_compress == "auto"
    assert ReconSettings(coil_compress=np.int64(4)).record()["coil_compress"] == 4
    assert ReconSettings().coil_compress == "none"


def test_a_silent_centre_and_a_foreign_compression_are_refused(scan):
    quiet = scan.kspace.copy()
    quiet[:, centre_samples(scan.trajectory, scan.n_coils)] = 0
    with pytest.raises(InvalidDataError, match=r"samples nearest the centre are all zero; coil compression needs"):
        prepare_scan(scan.replace(kspace=quiet), coil_compress=4)
    with pytest.raises(InvalidDataError, match=r"samples nearest the centre are all zero"):
        prepare_on_device(scan.replace(kspace=quiet), CPU, coil_compress=4)
    other = CoilCompression(8, 4, np.eye(4, 8, dtype=np.complex128))
    with pytest.raises(InvalidDataError, match=r"a coil compression of 8 coils cannot compress 12 coils"):
        prepare_scan(scan, coil_compress=other)


def test_compression_without_the_preparation_is_refused(scan):
    with pytest.raises(InvalidDataError, match=r"coil_compress=4 compresses the coils in the preparation, and "
                                               r"prepare=False reconstructs the scan as given"):
        mri_recon.reconstruct(scan, prepare=False, coil_compress=4, **FAST)
    with pytest.raises(InvalidDataError, match=r"pipeline.reconstruct: unexpected keyword argument 'coil_compress'"):
        pipeline.reconstruct(scan, coil_compress=4, **FAST)


def test_the_cli_refuses_a_bad_value_in_one_line(tmp_path, scan):
    path = tmp_path / "s.h5"
    save_scan(path, scan)
    result = CliRunner().invoke(main, ["reconstruct", str(path), "-o", str(tmp_path / "r.h5"), "--coil-compress",
                                       "ecc", "--device", "cpu"])
    assert result.exit_code != 0 and "ESPIRiT-based compression (ECC, bart cc -E) is not implemented" in result.output
    assert not (tmp_path / "r.h5").exists()


# --- every path -----------------------------------------------------------------------------------------------------


def test_the_cli_writes_what_the_api_gives(tmp_path, scan):
    path, out = tmp_path / "s.h5", tmp_path / "r.h5"
    save_scan(path, scan)
    result = CliRunner().invoke(main, ["reconstruct", str(path), "-o", str(out), "--coil-compress", "4", "--device",
                                       "cpu", "--iterations", "8"])
    assert result.exit_code == 0, result.output
    assert "12 coils compressed to 4 virtual coils" in result.output
    assert "per readout position" not in result.output  # the default method: one matrix
    api = mri_recon.reconstruct(mri_recon.load_scan(path), coil_compress=4, **FAST).image
    with h5py.File(out) as f:
        assert np.array_equal(f["image"][()], api)
        assert f.attrs["coil_compress"] == 4 and 0.9 < f.attrs["coil_compress_energy"] <= 1.0
        assert "compressed to 4" in f.attrs["coil_compress_note"]


def test_a_batch_compresses_every_scan(tmp_path, scan):
    paths = []
    for i, seed in enumerate((3, 4)):
        paths.append(tmp_path / f"in{i}.h5")
        save_scan(paths[-1], _scan(seed=seed))
    report = reconstruct_many(paths, tmp_path / "out", coil_compress=4, cache_dir=str(tmp_path / "cache"), **FAST)
    assert report.ok and [o.status for o in report.outcomes] == ["done"] * 2
    for path, outcome in zip(paths, report.outcomes):
        with h5py.File(outcome.output) as f:
            assert f.attrs["coil_compress"] == 4
            single = mri_recon.reconstruct(mri_recon.load_scan(path), coil_compress=4, **FAST).image
            assert np.array_equal(f["image"][()], single)


def test_a_client_chooses_compression_by_the_option_s_name():
    base = ReconSettings(device="cpu")
    assert configured(base, [("text", '{"coil_compress": 6}')]).coil_compress == 6
    assert configured(base, [("text", '{"coil-compress": "auto"}')]).coil_compress == "auto"
    with pytest.raises(ConfigError, match=r"config: coil_compress 'ecc': ESPIRiT-based compression \(ECC"):
        configured(base, [("text", '{"coil_compress": "ecc"}')])


def test_the_server_sends_what_reconstruct_writes(tmp_path):
    from server_helpers import assert_same_images, make_scan, reference, running_server

    from mri_recon.server.client import send_scan

    path = make_scan(tmp_path / "s.mrd.h5", 11)
    with running_server() as server:
        _, reply = send_scan(path, *server.address, settings='{"coil_compress": 2}')
    assert not reply.errors and len(reply.images) == 1
    assert_same_images(reply.images, reference(path, tmp_path, "--coil-compress", "2"))


def test_a_time_series_is_compressed_with_one_matrix():
    series = simulate_series((32, 32), frames=4, spokes_per_frame=9, coils=8, snr=40.0, seed=3)
    ready, record = prepare_series(series, coil_compress=3)
    averaged = series.averaged()
    w, _ = whitening_and_basis(averaged)
    a = compression_of(averaged.kspace, averaged.trajectory, 3, w).matrix
    assert record["coil_compress"] == 3 and ready.n_coils == 3
    for raw, frame in zip(series.frames, ready.frames):
        assert frame.n_coils == 3 and relative(frame.kspace, a @ (w @ raw.kspace.astype(np.complex128))) < 1e-6
    plain = mri_recon.reconstruct(series, temporal="tv", device="cpu", iterations=10)
    result = mri_recon.reconstruct(series, temporal="tv", coil_compress=3, device="cpu", iterations=10)
    truth = np.abs(series.ground_truth)
    errors = [relative(np.abs(r.image), truth) for r in (plain, result)]
    assert errors[1] < 1.1 * errors[0], errors


def test_the_planner_s_constants_are_the_compression_s():
    from mri_recon.planning import preparation

    assert preparation.COMPRESS_MAX_SAMPLES == compress.MAX_SAMPLES


def test_the_plan_uses_the_virtual_coils(scan):
    _, _, plain = plan_prepared(scan, device="cpu")
    _, _, compressed = plan_prepared(scan, device="cpu", coil_compress=4)
    _, _, auto = plan_prepared(scan, device="cpu", coil_compress="auto")
    assert plain.n_coils == 12 and compressed.n_coils == 4 and auto.n_coils == 12  # auto: decided from the data
    assert "compress" in compressed.stages and "compress" not in plain.stages
    assert compressed.stages["iterations"] < plain.stages["iterations"]
    assert compressed.estimated_seconds < plain.estimated_seconds


def test_one_matrix_is_known_before_the_compression_is_computed(scan):
    """The SVD method is one matrix, the geometric one is not; a given compression says so itself."""
    from mri_recon.prep.compress_methods import compression_for, one_matrix
    from mri_recon.prep.geometric import GeometricCompression

    assert one_matrix(8) and one_matrix("auto", "svd") and not one_matrix(8, "geometric")
    assert one_matrix(compression_for(scan, 4)) and not one_matrix(compression_for(scan, scan.n_coils))
    assert not one_matrix(GeometricCompression(12, 4, np.zeros((3, 4, 12), np.complex128)))


def test_a_gpu_plan_holds_only_the_virtual_coils_of_a_compression_on_the_way(scan):
    """One matrix applied on the host as the data go up: the GPU never holds the receivers' k-space and maps."""
    from mri_recon.planning.planner import plan
    from mri_recon.planning.preparation import preparation_of

    plans = [plan(scan.matrix, scan.n_coils, scan.n_samples, sense=True, iterations=30, available_bytes=None,
                  gpu=True, preparation=preparation_of(scan, coils=4, compress_on_the_way=flag))
             for flag in (True, False)]
    assert "compress" not in plans[0].stages and "compress" in plans[1].stages
    assert plans[0].n_coils == plans[1].n_coils == 4
    assert plans[0].peak_bytes < plans[1].peak_bytes


def test_the_plan_of_a_compressed_run_is_within_25_percent_of_the_traced_peak():
    """32 coils compressed to 8 with Walsh maps: the peak is the estimate on the virtual coils (tracemalloc, as
    tests/test_planner_prep.py traces the uncompressed runs)."""
    import tracemalloc

    tracemalloc.start()
    try:
        scan = simulate_scan((128, 128), "golden", coils=32, snr=30.0, seed=3, dcf="ramp")
        _, _, planned = plan_prepared(scan, device="cpu", iterations=2, coil_maps="walsh", coil_compress=8)
        tracemalloc.reset_peak()
        mri_recon.reconstruct(scan, device="cpu", iterations=2, coil_maps="walsh", coil_compress=8)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert max(planned.stages, key=planned.stages.get) == "coil_maps"
    assert abs(planned.peak_bytes - peak) <= 0.25 * peak, (planned.stages, peak)


# --- the device preparation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("maps", ["file", "walsh", "rss"])
def test_the_numpy_twin_compresses_as_prepare_scan(scan, maps):
    ready, record = prepare_on_device(scan, CPU, coil_maps=maps, coil_compress=5)
    assert_same_preparation(ready, record, *prepare_scan(scan, coil_maps=maps, coil_compress=5), 1e-12)


@pytest.mark.parametrize("choice", [5, "auto", "given", 40])
@pytest.mark.parametrize("maps", ["file", "walsh"])
def test_the_numpy_twin_compressing_after_the_upload_is_prepare_scan(scan, maps, choice):
    """Compressed after the k-space went up unchanged (the centre's samples chosen on the host thread, their Gram
    from the uploaded k-space): the host preparation's arrays and record, for a number, auto, a compression given
    and more coils than the scan has (only whitened)."""
    if choice == "given":
        choice = compression_for(scan, 4, whitening=whitening_and_basis(scan)[0])
    ready, record = prepare_on_device(scan, CPU, coil_maps=maps, coil_compress=choice, compress_after_upload=True)
    assert_same_preparation(ready, record, *prepare_scan(scan, coil_maps=maps, coil_compress=choice), 1e-12)


class _Gpu:
    is_gpu = True


def test_a_gpu_run_compresses_after_the_upload_where_the_receivers_fit(monkeypatch, scan):
    """One matrix on a GPU: planned with the receivers' k-space on the device and compressed there; where that
    plan does not fit, the plan of the virtual coils alone, compressed on the way up; ``auto`` checked with one
    coil fewer than the scan's and run on its own plan; other runs plan once."""
    from mri_recon import api
    from mri_recon.errors import ResourceError

    calls = []

    def planned(scan, *, device, coil_compress, compress_on_the_way=None, **keywords):
        calls.append((coil_compress, compress_on_the_way))
        if compress_on_the_way is False and coil_compress == 6:
            raise ResourceError("too large")
        return _Gpu(), coil_compress, compress_on_the_way

    monkeypatch.setattr(api, "plan_prepared", planned)
    last = scan.n_coils - 1
    for choice, after, asked, plan in [(5, True, [(5, None), (5, False)], (5, False)),
                                       ("auto", True, [("auto", None), (last, False)], ("auto", None)),
                                       (6, False, [(6, None), (6, False)], (6, None)),
                                       ("none", False, [("none", None)], ("none", None))]:
        calls.clear()
        _, *got, compressed_after = api._planned(scan, ReconSettings(coil_compress=choice))
        assert compressed_after is after and calls == asked and tuple(got) == plan, choice


def _upload_product(*arguments):
    from mri_recon.arrays.backend import upload_product

    return upload_product(*arguments)


@pytest.mark.gpu
@pytest.mark.parametrize("maps", ["file", "walsh", "rss"])
def test_gpu_preparation_compresses_as_the_host(monkeypatch, scan, maps):
    """The k-space (and the scan's maps) compressed on the host on the way up, as the host preparation does."""
    from mri_recon.prep import upload

    products = []
    monkeypatch.setattr(upload, "upload_product", lambda *a: products.append(a[0].shape) or _upload_product(*a))
    gpu = resolve_device("gpu")
    ready, record = prepare_on_device(scan, gpu, coil_maps=maps, coil_compress=5)
    assert products == [(5, scan.n_coils)] * (2 if maps == "file" else 1)
    assert cupy_module().get_array_module(ready.kspace) is cupy_module()
    ref, ref_record = prepare_scan(scan, coil_maps=maps, coil_compress=5)
    assert relative(to_host(ready.kspace), ref.kspace) < 1e-5
    if ref.coil_maps is not None:
        assert relative(to_host(ready.coil_maps), ref.coil_maps) < 1e-5
    assert record["coil_compress"] == ref_record["coil_compress"] == 5
    products.clear()
    after, after_record = prepare_on_device(scan, gpu, coil_maps=maps, coil_compress=5, compress_after_upload=True)
    assert products == []  # compressed on the device, with the host's choices (its Gram to float64 rounding)
    assert after_record["coil_compress_energy"] == pytest.approx(record["coil_compress_energy"], rel=1e-12)
    assert {k: v for k, v in after_record.items() if k not in ("coil_compress_energy", "coil_compress_note",
                                                                  "maps_basis")} == \
        {k: v for k, v in record.items() if k not in ("coil_compress_energy", "coil_compress_note", "maps_basis")}
    if record["maps_basis"] is not None:
        assert relative(after_record["maps_basis"], record["maps_basis"]) < 1e-10
    assert relative(to_host(after.kspace), ref.kspace) < 1e-5
    if ref.coil_maps is not None:
        assert relative(to_host(after.coil_maps), ref.coil_maps) < 1e-5
    image = mri_recon.reconstruct(scan, device="gpu", coil_maps=maps, coil_compress=5, iterations=8).image
    host = mri_recon.reconstruct(scan, device="cpu", coil_maps=maps, coil_compress=5, iterations=8).image
    assert relative(np.abs(image), np.abs(host)) < 1e-3


# --- against BART ---------------------------------------------------------------------------------------------------


@pytest.mark.skipif(BART is None, reason="needs BART's command line (apt-get install bart)")
def test_the_subspace_is_bart_cc_s(tmp_path):
    """``bart cc -A -M`` of the same whitened centre samples (its first N columns are what ``cc -A -p N``
    applies): principal angles below 1e-3 rad where the spectrum leaves float32's eigen solver room."""
    bench = load_script("bench_coil_compress")
    birdcage = bench.birdcage_scan()
    centre = bench.whitened_centre(birdcage)
    theirs = bench.bart_matrix(centre, tmp_path, BART)
    assert bench.bart_applies(centre, theirs, 8, tmp_path, BART) < 1e-5
    w, _ = whitening_and_basis(birdcage)
    for n in (4, 8, 10):
        ours = compression_of(birdcage.kspace, birdcage.trajectory, n, w).matrix
        assert _angle(theirs[:, :n], ours.conj().T) < 1e-3, n
    write_cfl(tmp_path / "k", centre.T.reshape(1, -1, 1, 32))
    subprocess.run([BART, "cc", "-A", "-p", "8", str(tmp_path / "k"), str(tmp_path / "k8")], check=True,
                   capture_output=True)
    assert np.asarray(read_cfl(tmp_path / "k8")).shape[3] == 8


@pytest.mark.parametrize("samples", [0, 1, 4095, 4096, 4097, 20000])
def test_the_centre_gram_matrix_is_the_same_with_any_thread_count(monkeypatch, rng, samples):
    """The Gram matrix computed block by block equals the float64 product of the gathered samples (relative
    1e-14), with the same bits on one thread and on four."""
    from mri_recon.prep import compress

    kspace = (rng.standard_normal((6, 30000)) + 1j * rng.standard_normal((6, 30000))).astype(np.complex64)
    index = np.sort(rng.choice(30000, samples, replace=False))
    centre = kspace[:, index].astype(np.complex128)
    expected = centre @ centre.conj().T
    monkeypatch.setattr(compress, "cpu_threads", lambda: 4)  # four threads, whatever the host has
    grams = []
    for threads in (1, 4):
        monkeypatch.setattr(compress, "GRAM_THREADS", threads)
        grams.append(compress.centre_gram(kspace, index))
    np.testing.assert_array_equal(grams[0], grams[1])
    assert grams[0].shape == (6, 6)
    assert np.linalg.norm(grams[0] - expected) <= 1e-14 * max(np.linalg.norm(expected), 1e-300)
