"""--gradient-delay on the command line: the estimate in the HDF5 output and the JSON log, one-line refusals."""

from __future__ import annotations

import json
import re

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from mri_recon.cli import main


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_simulate_and_reconstruct_record_the_estimate(tmp_path):
    scan = tmp_path / "scan.h5"
    done = _run("simulate", scan, "--matrix", "48", "--coils", "4", "--spokes", "80", "--gradient-delay", "0.6,-0.3",
                "--quiet")
    assert done.exit_code == 0, done.output
    with h5py.File(scan) as f:
        assert np.allclose(f.attrs["gradient_delay_samples"], [0.6, -0.3, 0.0])
    out, log = tmp_path / "out.h5", tmp_path / "run.json"
    done = _run("reconstruct", scan, "-o", out, "--device", "cpu", "--gradient-delay", "auto", "--log-json", log,
                "--iterations", "5", "--quiet")
    assert done.exit_code == 0, done.output
    with h5py.File(out) as f:
        assert f.attrs["gradient_delay"] == "ring"
        assert np.max(np.abs(f.attrs["gradient_delay_samples"] - [0.6, -0.3, 0.0])) < 0.02
        assert "ring estimate" in f.attrs["gradient_delay_note"] and "from 80 spokes" in f.attrs["gradient_delay_note"]
    record = json.loads(log.read_text())
    assert record["settings"]["gradient_delay"] == "auto"
    preparation = record["images"][0]["preparation"]
    assert preparation["gradient_delay"] == "ring" and preparation["gradient_delay_spokes"] == 80
    assert np.max(np.abs(np.subtract(preparation["gradient_delay_samples"], [0.6, -0.3, 0.0]))) < 0.02


def test_bad_values_and_non_radial_scans_end_in_one_line(tmp_path):
    spiral = tmp_path / "spiral.h5"
    assert _run("simulate", spiral, "--matrix", "32", "--coils", "2", "--trajectory", "spiral", "-q").exit_code == 0
    for bad in ("1,2,3,4", "x,1", "fast"):
        done = _run("reconstruct", spiral, "-o", tmp_path / "o.h5", "--gradient-delay", bad)
        assert done.exit_code == 1 and "X,Y[,Z]" in done.output and "Traceback" not in done.output
        assert len(done.output.strip().splitlines()) == 1 and not (tmp_path / "o.h5").exists()
    done = _run("reconstruct", spiral, "-o", tmp_path / "o.h5", "--device", "cpu", "--gradient-delay", "ring")
    assert done.exit_code == 1 and "the ring estimate takes radial scans only" in done.output
    assert len(done.output.strip().splitlines()) == 1 and not (tmp_path / "o.h5").exists()
    done = _run("simulate", tmp_path / "s.h5", "--trajectory", "spiral", "--gradient-delay", "1,1")
    assert done.exit_code == 1 and "radial trajectories" in done.output


def test_a_batch_applies_the_delay_to_every_scan(tmp_path):
    folder = tmp_path / "scans"
    folder.mkdir()
    for seed in (1, 2):
        assert _run("simulate", folder / f"s{seed}.h5", "--matrix", "32", "--coils", "2", "--spokes", "40",
                    "--seed", seed, "--gradient-delay", "0.5,0.2", "-q").exit_code == 0
    done = _run("reconstruct", folder, "-o", tmp_path / "out", "--device", "cpu", "--iterations", "3",
                "--gradient-delay", "0.5,0.2", "--quiet")
    assert done.exit_code == 0, done.output
    for seed in (1, 2):
        with h5py.File(tmp_path / "out" / f"s{seed}.recon.h5") as f:
            assert f.attrs["gradient_delay"] == "given"
            assert np.allclose(f.attrs["gradient_delay_samples"], [0.5, 0.2, 0.0])


def test_the_frames_of_an_mrd_file_share_one_estimate(tmp_path):
    pytest.importorskip("ismrmrd")
    from mri_recon.io.ismrmrd_write import write_ismrmrd
    from mri_recon.sim.simulate import simulate_scan

    frames = [({"repetition": r}, simulate_scan((32, 32), "golden", coils=2, spokes=30, seed=r,
                                               gradient_delay=(0.7, -0.4))) for r in range(3)]
    path, log = tmp_path / "frames.mrd.h5", tmp_path / "run.json"
    write_ismrmrd(path, frames)
    done = _run("reconstruct", path, "-o", tmp_path / "out.h5", "--device", "cpu", "--iterations", "3", "--quiet",
                "--gradient-delay", "ring", "--log-json", log)
    assert done.exit_code == 0, done.output
    images = json.loads(log.read_text())["images"]
    assert len(images) == 3 and len({json.dumps(i["preparation"]["gradient_delay_samples"]) for i in images}) == 1
    preparation = images[0]["preparation"]
    assert preparation["gradient_delay_spokes"] == 90 and "3 frames" in preparation["gradient_delay_note"]
    assert np.max(np.abs(np.subtract(preparation["gradient_delay_samples"], [0.7, -0.4, 0.0]))) < 0.02


def test_the_result_line_says_what_was_done_with_the_delay(tmp_path):
    for name, given in (("delayed", ["--gradient-delay", "0.6,-0.3"]), ("plain", [])):
        assert _run("simulate", tmp_path / f"{name}.h5", "--matrix", "48", "--coils", "4", "--spokes", "80",
                    *given, "-q").exit_code == 0
    done = _run("reconstruct", tmp_path / "delayed.h5", "-o", tmp_path / "a.h5", "--device", "cpu",
                "--iterations", "3", "--gradient-delay", "auto")
    assert done.exit_code == 0, done.output
    assert "; gradient delay (0.6" in done.output and "samples applied (ring; --gradient-delay " in done.output
    again = re.search(r"--gradient-delay (\S+) gives it again\)", done.output).group(1)  # BART's y:x:yx
    with h5py.File(tmp_path / "a.h5", "r") as f:
        estimated = np.asarray(f.attrs["gradient_delay_samples"])
    given = _run("reconstruct", tmp_path / "delayed.h5", "-o", tmp_path / "c.h5", "--device", "cpu",
                 "--iterations", "3", "--gradient-delay", again, "-q")
    assert given.exit_code == 0, given.output
    with h5py.File(tmp_path / "c.h5", "r") as f:
        assert np.max(np.abs(np.asarray(f.attrs["gradient_delay_samples"]) - estimated)) <= 5e-5
    done = _run("reconstruct", tmp_path / "plain.h5", "-o", tmp_path / "b.h5", "--device", "cpu",
                "--iterations", "3", "--gradient-delay", "auto")
    assert done.exit_code == 0, done.output
    assert "; gradient delay not applied (ring estimate (" in done.output
    assert "no delay above 0.02 samples: not applied)" in done.output


def test_bart_delays_and_out_of_range_delays_on_the_command_line(tmp_path):
    scan = tmp_path / "scan.h5"
    assert _run("simulate", scan, "--matrix", "32", "--coils", "2", "--spokes", "40", "-q").exit_code == 0
    done = _run("reconstruct", scan, "-o", tmp_path / "o.h5", "--device", "cpu", "--iterations", "2",
                "--gradient-delay", "bart:-0.3:0.6:0.1", "--quiet")
    assert done.exit_code == 0, done.output
    with h5py.File(tmp_path / "o.h5") as f:
        assert np.allclose(f.attrs["gradient_delay_samples"], [0.6, -0.3, 0.1])
    done = _run("reconstruct", scan, "-o", tmp_path / "p.h5", "--gradient-delay", "1e30,1e30")
    assert done.exit_code == 1 and "out of range: a delay is at most 16 samples" in done.output
    assert "Traceback" not in done.output and "traj-units" not in done.output


def test_simulate_refuses_a_z_delay_in_plane_and_takes_barts_form(tmp_path):
    for kind in ("golden", "stack-of-stars"):
        done = _run("simulate", tmp_path / "s.h5", "--trajectory", kind, "--matrix", "16", "--coils", "1",
                    "--spokes", "20", "--gradient-delay", "0,0,0.5")
        assert done.exit_code == 2 and "takes X,Y (a Z only for a kooshball" in done.output
    done = _run("simulate", tmp_path / "b.h5", "--matrix", "16", "--coils", "1", "--spokes", "20",
                "--gradient-delay", "bart:0.1:0.2:0.3", "-q")
    assert done.exit_code == 0, done.output
    with h5py.File(tmp_path / "b.h5") as f:
        assert np.allclose(f.attrs["gradient_delay_samples"], [0.2, 0.1, 0.3])
