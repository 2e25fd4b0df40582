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
    assert "samples applied (ring)" in done.output and f"and {log}" in done.output
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
    from mri_recon.series import TEMPORAL_ITERATIONS

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
