"""Every option of a single image reaches the time series or is refused by name: ``simulate --frames`` with a
gradient delay (the data change) or options it cannot honour (refused), ``reconstruct --temporal tv`` with
``--gradient-delay`` (one estimate from all the frames) and ``--log-json``."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from mri_recon.cli import main
from mri_recon.io.frames import load_series

FRAMES = ["--matrix", "32", "--coils", "4", "--frames", "4", "--spokes-per-frame", "16", "-q"]


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_simulate_frames_honours_the_gradient_delay(tmp_path):
    assert _run("simulate", tmp_path / "plain.mrd.h5", *FRAMES).exit_code == 0
    done = _run("simulate", tmp_path / "late.mrd.h5", *FRAMES, "--gradient-delay", "0.8,-0.5")
    assert done.exit_code == 0, done.output
    plain, late = load_series(tmp_path / "plain.mrd.h5"), load_series(tmp_path / "late.mrd.h5")
    assert np.array_equal(plain.frames[0].trajectory, late.frames[0].trajectory)  # the nominal trajectory
    change = np.linalg.norm(late.frames[0].kspace - plain.frames[0].kspace) / np.linalg.norm(plain.frames[0].kspace)
    assert change > 0.05  # the data are those of the delayed positions


@pytest.mark.parametrize("extra", [["--spokes", "40"], ["--field-map", "50"], ["--readout-ms", "4"],
                                   ["--interleaves", "4"]], ids=lambda e: e[0])
def test_simulate_frames_refuses_what_it_cannot_honour(tmp_path, extra):
    done = _run("simulate", tmp_path / "x.mrd.h5", *FRAMES, *extra)
    assert done.exit_code == 2 and f"{extra[0]}: not available with --frames" in done.output
    assert not (tmp_path / "x.mrd.h5").exists()


def test_a_time_series_estimates_one_delay_and_logs_its_run(tmp_path):
    scan, out, log = tmp_path / "late.mrd.h5", tmp_path / "r.h5", tmp_path / "run.json"
    assert _run("simulate", scan, *FRAMES, "--gradient-delay", "0.8,-0.5").exit_code == 0
    done = _run("reconstruct", scan, "-o", out, "--temporal", "tv", "--device", "cpu", "--iterations", "5",
                "--gradient-delay", "ring", "--log-json", log)
    assert done.exit_code == 0, done.output
    assert "samples applied (ring; --gradient-delay " in done.output and f"and {log}" in done.output
    record = json.loads(log.read_text())
    preparation = record["series"]["preparation"]
    assert preparation["gradient_delay"] == "ring" and "4 frames" in preparation["gradient_delay_note"]
    assert np.max(np.abs(np.subtract(preparation["gradient_delay_samples"], [0.8, -0.5, 0.0]))) < 0.03
    assert record["series"]["frames"] == 4 and record["series"]["iterations"] == 5
    assert record["settings"]["gradient_delay"] == "ring"
    with h5py.File(out) as f:
        assert f["image"].shape[0] == 4


def test_a_time_series_refuses_a_batch_by_name(tmp_path):
    scan = tmp_path / "s.mrd.h5"
    assert _run("simulate", scan, *FRAMES).exit_code == 0
    done = _run("reconstruct", scan, "-o", tmp_path / "r.h5", "--temporal", "tv", "--workers", "2")
    assert done.exit_code == 2 and "--workers: not available with a time series" in done.output


def test_a_joint_solve_without_iterations_runs_its_own_default(tmp_path):
    from mri_recon.solvers.temporal import ITERATIONS_DEFAULT as TEMPORAL_ITERATIONS

    scan, log = tmp_path / "s.mrd.h5", tmp_path / "run.json"
    assert _run("simulate", scan, "--matrix", "16", "--coils", "2", "--frames", "2", "--spokes-per-frame", "6",
                "-q").exit_code == 0
    done = _run("reconstruct", scan, "-o", tmp_path / "r.h5", "--temporal", "tv", "--device", "cpu", "--tol", "0",
                "--log-json", log)
    assert done.exit_code == 0, done.output
    assert json.loads(log.read_text())["series"]["iterations"] == TEMPORAL_ITERATIONS == 200
    done = _run("reconstruct", scan, "-o", tmp_path / "q.h5", "--temporal", "tv", "--device", "cpu", "--tol", "0",
                "--iterations", "30", "--log-json", log)
    assert done.exit_code == 0 and json.loads(log.read_text())["series"]["iterations"] == 30


@pytest.fixture(scope="module")
def series_file(tmp_path_factory):
    scan = tmp_path_factory.mktemp("series") / "s.mrd.h5"
    assert _run("simulate", scan, "--matrix", "24", "--coils", "3", "--frames", "3", "--spokes-per-frame", "8",
                "-q").exit_code == 0
    return scan


def _formats():
    from mri_recon.io.writers import OUTPUTS

    return sorted(OUTPUTS)


@pytest.mark.parametrize("name", _formats())
def test_every_output_format_takes_a_time_series(tmp_path, series_file, name):
    """Each registered format writes the frames: its own time axis, or the frames as a stack of images."""
    from mri_recon.io.writers import OUTPUTS

    chosen = OUTPUTS[name]
    output = tmp_path / ("out" if chosen.folder else f"out{chosen.default_suffix}")
    done = _run("reconstruct", series_file, "-o", output, "--format", name, "--temporal", "tv", "--device", "cpu",
                "--iterations", "3", "-q")
    assert done.exit_code == 0, done.output
    written = [output] if output.is_file() else sorted(output.iterdir()) if output.is_dir() else \
        sorted(tmp_path.glob("out*"))
    assert written and all(p.stat().st_size > 0 for p in written)


def test_a_time_series_takes_the_single_image_options(tmp_path, series_file):
    """The post-filter, the PSF cache and the JSON log reach a time series as they reach one image."""
    base = ["reconstruct", series_file, "--temporal", "tv", "--device", "cpu", "--iterations", "4", "-q"]
    assert _run(*base, "-o", tmp_path / "plain.h5").exit_code == 0
    done = _run(*base, "-o", tmp_path / "smooth.h5", "--filter-sigma", "1.5", "--cache-dir", tmp_path / "psf",
                "--log-json", tmp_path / "run.json")
    assert done.exit_code == 0, done.output
    with h5py.File(tmp_path / "plain.h5") as a, h5py.File(tmp_path / "smooth.h5") as b:
        plain, smooth = a["image"][()], b["image"][()]
        assert b.attrs["param_filter_sigma"] == 1.5
    assert plain.shape == smooth.shape == (3, 24, 24)
    roughness = [np.abs(np.diff(np.abs(x), axis=-1)).sum() for x in (plain, smooth)]
    assert roughness[1] < 0.8 * roughness[0]
    assert len(list((tmp_path / "psf").rglob("*"))) > 0  # each frame's PSF went to the cache
    assert json.loads((tmp_path / "run.json").read_text())["series"]["parameters"]["filter_sigma"] == 1.5


def test_a_time_series_reports_progress_and_honours_lambda(series_file):
    from mri_recon import load_series, reconstruct

    series = load_series(series_file)
    events = []
    first = reconstruct(series, temporal="tv", regularizer="tv", iterations=6, device="cpu",
                        progress=lambda *event: events.append(event))
    stages = [stage for stage, iteration, *_ in events if iteration is None]
    assert stages[-1] == "download" and "iterations" in stages
    assert [e[1] for e in events if e[0] == "iterations" and e[1] is not None] == [6]  # the check at the end
    other = reconstruct(series, temporal="tv", regularizer="tv", lam=0.3, iterations=6, device="cpu")
    assert np.linalg.norm(other.image - first.image) > 0.05 * np.linalg.norm(first.image)
    assert other.parameters["lam"] == 0.3 and first.frames.labels == (0, 1, 2)


def test_a_batch_and_the_server_refuse_the_time_series_options(tmp_path, series_file):
    from mri_recon import reconstruct_many
    from mri_recon.errors import InvalidDataError
    from mri_recon.server.config import CLIENT_FIELDS, ConfigError, client_keywords
    from mri_recon.settings import series_fields

    with pytest.raises(InvalidDataError, match="--temporal: a batch reconstructs images one by one"):
        reconstruct_many([series_file], tmp_path / "out", temporal="tv")
    assert series_fields() and not set(series_fields()) & set(CLIENT_FIELDS)
    with pytest.raises(ConfigError, match="unexpected keyword argument 'temporal_solver'"):
        client_keywords({"temporal_solver": "pdhg"})


def test_the_series_hdf5_holds_the_preparation_record(tmp_path, series_file):
    out = tmp_path / "r.h5"
    done = _run("reconstruct", series_file, "-o", out, "--temporal", "tv", "--device", "cpu", "--iterations", "3",
                "-q")
    assert done.exit_code == 0, done.output
    with h5py.File(out) as f:
        assert f.attrs["param_prewhitened"] in (True, False) and f.attrs["param_frames"] == 3
        assert f.attrs["param_temporal_axis"] == "repetition" and f.attrs["param_dcf"] == "auto"
