"""Frames of a time series (cut from readouts, from MRD indices), their files with a time axis, and the CLI."""

from __future__ import annotations

import logging
import re

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import mri_recon
from mri_recon.cli import main
from mri_recon.errors import InvalidDataError
from mri_recon.io.frames import frames_by_index, frames_by_readouts, load_series
from mri_recon.io.geometry import geometry_of
from mri_recon.io.ismrmrd_write import write_ismrmrd
from mri_recon.io.series_files import (
    save_series_mrd,
    write_series_hdf5,
    write_series_mrd,
    write_series_nifti,
    write_series_png,
)
from mri_recon.scan import Scan
from mri_recon.sim import dynamic


def _stream(readouts: int, n: int = 8, coils: int = 2, seed: int = 0) -> Scan:
    rng = np.random.default_rng(seed)
    m = readouts * n
    return Scan(kspace=(rng.standard_normal((coils, m)) + 1j * rng.standard_normal((coils, m))).astype(np.complex64),
                trajectory=((rng.random((m, 2)) - 0.5) * 8).astype(np.float32), matrix=(8, 8),
                attrs={"samples_per_readout": n}, source="stream")


@pytest.mark.parametrize(("readouts", "k", "frames", "kept", "dropped"),
                         [(20, 4, None, 5, 0), (23, 4, None, 5, 3), (23, 4, 2, 2, 15), (7, 7, None, 1, 0),
                          (9, 1, None, 9, 0)])
def test_cut_frames_and_remainder(readouts, k, frames, kept, dropped, caplog):
    scan = _stream(readouts)
    with caplog.at_level(logging.WARNING, logger="mri_recon.io.frames"):
        series = frames_by_readouts(scan, k, frames=frames)
    assert series.n_frames == kept and series.dropped_readouts == dropped
    assert (f"{dropped} readout(s)" in caplog.text) == bool(dropped)
    for t, frame in enumerate(series.frames):
        part = slice(t * k * 8, (t + 1) * k * 8)
        assert np.array_equal(frame.kspace, scan.kspace[:, part])
        assert np.array_equal(frame.trajectory, scan.trajectory[part])
    assert series.labels == tuple(range(kept)) and series.axis == "readouts"


def test_cut_frames_refusals():
    scan = _stream(10)
    with pytest.raises(InvalidDataError, match="do not fill one frame of 11"):
        frames_by_readouts(scan, 11)
    with pytest.raises(InvalidDataError, match="frames must be 1 to 3"):
        frames_by_readouts(scan, 3, frames=4)
    with pytest.raises(InvalidDataError, match="readout length 7 does not divide"):
        frames_by_readouts(scan, 2, samples_per_readout=7)
    with pytest.raises(InvalidDataError, match="spokes per frame must be >= 1"):
        frames_by_readouts(scan, 0)


def test_frame_duration_from_time_stamps():
    scan = _stream(12)
    stamped = scan.replace(attrs={**scan.attrs, "readout_time_ms": 5.0 * np.arange(12)})
    assert frames_by_readouts(stamped, 3).frame_duration_s == pytest.approx(0.015)
    assert frames_by_readouts(scan, 3).frame_duration_s is None


def test_frames_by_index_choices():
    scans = [_stream(4, seed=s) for s in range(3)]
    pairs = [({"slice": 0, "repetition": r, "phase": 0}, s) for r, s in zip((2, 0, 1), scans)]
    series = frames_by_index(pairs)
    assert series.axis == "repetition" and series.labels == (0, 1, 2)
    assert series.frames[0] is scans[1]
    both = [({"repetition": r, "phase": p}, scans[0]) for r in (0, 1) for p in (0, 1)]
    with pytest.raises(InvalidDataError, match="both repetition .* and phase"):
        frames_by_index(both)
    assert frames_by_index([({"repetition": 0, "phase": p}, scans[p]) for p in (0, 1)], "phase").axis == "phase"
    with pytest.raises(InvalidDataError, match="need one slice, found"):
        frames_by_index([({"slice": s, "repetition": r}, scans[0]) for s in (0, 1) for r in (0, 1)])
    with pytest.raises(InvalidDataError, match="no time axis"):
        frames_by_index([({"repetition": 0}, scans[0])])
    with pytest.raises(InvalidDataError, match="temporal axis must be one of"):
        frames_by_index(pairs, "slice")


def test_a_frame_cut_short_is_reported(caplog):
    """A file whose last repetition was cut short (fewer readouts than the others) is read as it is, and the
    log names the short frame; frames of one size give no warning."""
    full, short = _stream(6), _stream(2)
    pairs = [({"repetition": r}, s) for r, s in enumerate((full, full, short))]
    with caplog.at_level(logging.WARNING, logger="mri_recon"):
        series = frames_by_index(pairs)
        assert series.n_frames == 3 and series.frames[2] is short
        frames_by_index(pairs[:2])
        frames_by_index(pairs[1:])  # one frame of each size: the short one is still named
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2
    for message in warned:
        assert f"fewer samples than the largest's {full.n_samples}: 2 ({short.n_samples})" in message


@pytest.fixture(scope="module")
def series_file(tmp_path_factory):
    series = dynamic.simulate_series((24, 24), frames=4, spokes_per_frame=7, coils=3, snr=50, seed=5)
    path = tmp_path_factory.mktemp("series") / "beating.mrd.h5"
    save_series_mrd(path, series)
    return series, path


def test_mrd_round_trip(series_file):
    series, path = series_file
    loaded = load_series(path)
    assert loaded.axis == "repetition" and loaded.labels == (0, 1, 2, 3)
    assert np.array_equal(loaded.ground_truth, series.ground_truth)
    for a, b in zip(loaded.frames, series.frames):
        assert np.array_equal(a.kspace, b.kspace)
        assert np.allclose(a.trajectory, b.trajectory, rtol=0, atol=1e-5)
    # 3.5 ms readouts in 2.5 ms ticks: the frame step is known to a tick
    assert abs(loaded.frame_duration_s - series.frame_duration_s) <= 2.5e-3
    first = load_series(path, frames=2)
    assert first.n_frames == 2 and first.ground_truth.shape == (2, 24, 24)


def test_output_files_have_a_time_axis(series_file, tmp_path):
    import ismrmrd
    import nibabel

    series, _ = series_file
    image = series.ground_truth
    labels = (3, 5, 7, 9)
    write_series_hdf5(tmp_path / "x.h5", image, labels=labels, axis="repetition", frame_duration_s=0.05,
                      parameters={"temporal": "tv", "rho": None}, history=(1.0, 0.5), nrmse=0.1)
    with h5py.File(tmp_path / "x.h5") as f:
        assert list(f.attrs["axes"]) == ["time", "x", "y"]
        assert np.array_equal(f["image"][()], image)
        assert f.attrs["time_labels"].tolist() == list(labels) and f.attrs["frame_duration_s"] == 0.05
        assert f.attrs["param_rho"] == "none"
    geometry = geometry_of((24, 24), {}, "x")
    write_series_nifti(tmp_path / "x.nii.gz", image, geometry, frame_duration_s=0.05)
    nii = nibabel.load(tmp_path / "x.nii.gz")
    assert nii.shape == (24, 24, 1, 4) and nii.header.get_zooms()[3] == pytest.approx(0.05)
    assert nii.header.get_xyzt_units() == ("mm", "sec")
    assert np.allclose(np.asarray(nii.dataobj)[:, :, 0, 2], np.abs(image[2]))
    write_series_mrd(tmp_path / "x.mrd.h5", image, geometry, labels=labels, axis="phase")
    dataset = ismrmrd.Dataset(str(tmp_path / "x.mrd.h5"), "dataset", create_if_needed=False)
    records = [dataset.read_image("image_0", i) for i in range(4)]
    assert [r.phase for r in records] == list(labels)
    assert np.array_equal(records[1].data[0].T[:, :, 0], image[1])
    shown = write_series_png(tmp_path / "x.png", image)
    assert "4 images" in shown


def test_cli_simulate_and_reconstruct_series(tmp_path):
    runner = CliRunner()
    scan = tmp_path / "s.mrd.h5"
    done = runner.invoke(main, ["simulate", str(scan), "--matrix", "24", "--coils", "3", "--frames", "4",
                                "--spokes-per-frame", "7"])
    assert done.exit_code == 0, done.output
    out = tmp_path / "r.h5"
    done = runner.invoke(main, ["reconstruct", str(scan), "-o", str(out), "--temporal", "tv", "--iterations", "20",
                                "--device", "cpu", "--png", str(tmp_path / "r.png")])
    assert done.exit_code == 0, done.output
    assert "4 frames along repetition" in done.output and "NRMSE vs ground truth 0." in done.output
    assert re.search(r", \d+\.\d\d s \(\d+\.\d\d s since the command started\)", done.output)  # as one image's line
    with h5py.File(out) as f:
        assert f["image"].shape == (4, 24, 24) and f.attrs["param_temporal"] == "tv"
    done = runner.invoke(main, ["reconstruct", str(scan), "-o", str(tmp_path / "one.h5"), "--repetition", "0",
                                "--temporal", "tv", "--device", "cpu"])
    assert done.exit_code == 1 and "no time axis" in done.output and "Traceback" not in done.output
    done = runner.invoke(main, ["reconstruct", str(scan), "-o", str(tmp_path / "cut.nii"), "--repetition", "1",
                                "--spokes-per-frame", "3", "--temporal", "tv", "--iterations", "5", "--device", "cpu"])
    assert done.exit_code == 0, done.output
    assert "2 frames along readouts, 1 readout(s) dropped" in done.output  # 7 spokes: 2 frames of 3
    done = runner.invoke(main, ["reconstruct", str(scan), "--frames", "2", "--device", "cpu"])
    assert done.exit_code == 2 and "--frames applies to a time series" in done.output
    done = runner.invoke(main, ["simulate", str(tmp_path / "x.h5"), "--spokes-per-frame", "3"])
    assert done.exit_code != 0 and "needs --frames" in done.output


@pytest.mark.parametrize(("extra", "named"), [
    (["--temporal", "tv", "--solver", "admm"], "solver 'admm': a time series with a temporal term"),
    (["--temporal-axis", "repetition", "--temporal-lambda", "0.1"], "temporal_lam applies to a joint time series"),
    (["--temporal", "tv", "--temporal-solver", "pdhg", "--rho", "2"], "rho and inner_iterations are ADMM's"),
])
def test_options_a_series_does_not_take_are_refused(tmp_path, extra, named):
    runner = CliRunner()
    scan = tmp_path / "s.mrd.h5"
    done = runner.invoke(main, ["simulate", str(scan), "--matrix", "16", "--coils", "2", "--frames", "2",
                                "--spokes-per-frame", "6"])
    assert done.exit_code == 0, done.output
    out = tmp_path / "r.h5"
    done = runner.invoke(main, ["reconstruct", str(scan), "-o", str(out), "--device", "cpu", *extra])
    assert done.exit_code == 1 and named in done.output
    assert not out.exists() and "Traceback" not in done.output


def test_one_repetition_file_unchanged(tmp_path):
    """Without the time-series options a one-repetition MRD file reconstructs as before: the CLI's image is
    mri_recon.reconstruct's of the loaded scan, bit for bit, whether or not its readouts carry time stamps."""
    scan = mri_recon.simulate_scan((24, 24), "golden", coils=3, spokes=30, snr=40)
    runner = CliRunner()
    for stamps in (False, True):
        attrs = {**scan.attrs, "readout_time_ms": 3.5 * np.arange(30)} if stamps else scan.attrs
        path = tmp_path / f"one{int(stamps)}.mrd.h5"
        write_ismrmrd(path, scan.replace(attrs=attrs))
        out = tmp_path / f"one{int(stamps)}.recon.h5"
        done = runner.invoke(main, ["reconstruct", str(path), "-o", str(out), "--device", "cpu", "-q", "--no-cache"])
        assert done.exit_code == 0, done.output
        expected = mri_recon.reconstruct(mri_recon.load_scan(path), device="cpu").image
        with h5py.File(out) as f:
            assert np.array_equal(f["image"][()], expected)
            assert "axes" in f.attrs and "time" not in list(f.attrs["axes"])
    with h5py.File(tmp_path / "one0.recon.h5") as a, h5py.File(tmp_path / "one1.recon.h5") as b:
        assert np.array_equal(a["image"][()], b["image"][()])


def test_nifti_of_3d_frames(tmp_path):
    import nibabel

    frames = (np.random.default_rng(3).standard_normal((3, 6, 5, 4)) + 0j).astype(np.complex64)
    write_series_nifti(tmp_path / "v.nii", frames, geometry_of((6, 5, 4), {}, "v"), frame_duration_s=None)
    nii = nibabel.load(tmp_path / "v.nii")
    assert nii.shape == (6, 5, 4, 3) and nii.header.get_zooms()[3] == 0.0
    assert np.allclose(np.asarray(nii.dataobj)[..., 1], np.abs(frames[1]))


def test_a_series_output_that_places_its_image_warns_when_the_scan_does_not_say_where(tmp_path):
    """As for one image: a NIfTI named by its file name (not by --format) warns that the simulated scan has no
    position; HDF5 records that in its geometry attribute and does not warn."""
    runner = CliRunner()
    scan = tmp_path / "s.mrd.h5"
    assert runner.invoke(main, ["simulate", str(scan), "--matrix", "16", "--coils", "2", "--frames", "2",
                                "--spokes-per-frame", "6", "-q"]).exit_code == 0
    common = ["--temporal", "tv", "--iterations", "2", "--device", "cpu"]
    nifti = runner.invoke(main, ["reconstruct", str(scan), "-o", str(tmp_path / "r.nii.gz"), *common])
    assert nifti.exit_code == 0 and "does not say where the image lies" in nifti.output
    hdf5 = runner.invoke(main, ["reconstruct", str(scan), "-o", str(tmp_path / "r.h5"), *common])
    assert hdf5.exit_code == 0 and "does not say where" not in hdf5.output
