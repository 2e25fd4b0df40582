"""Batch reconstruction without Dask: inputs, output names, completion records, skipping, failures, and the
single-scan path importing no Dask."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from mri_recon.batch import expand_inputs, reconstruct_many
from mri_recon.batch.cluster import plan_gpu_workers, visible_gpus, wants_gpu
from mri_recon.batch.inputs import output_paths
from mri_recon.batch.record import complete, record_path
from mri_recon.cli import main
from mri_recon.errors import DeviceError, InvalidDataError, OutputError, ScanFileError
from mri_recon.io import save_scan
from mri_recon.sim.simulate import simulate_scan

FAST = {"iterations": 6, "device": "cpu"}


def make_scans(folder: Path, n: int, rng, matrix=(32, 32), coils=2) -> list[Path]:
    """``n`` scans of one trajectory (one PSF) with different noise."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"scan{i}.h5"
        save_scan(path, simulate_scan(matrix, "golden", coils=coils, snr=40, seed=int(rng.integers(2**31))))
        paths.append(path)
    return paths


def single(scan: Path, out: Path, *extra) -> Path:
    """The single-scan command's output for ``scan`` (the reference of bit identity)."""
    result = CliRunner().invoke(main, ["reconstruct", str(scan), "-o", str(out), "--iterations", "6", "--device",
                                       "cpu", "--quiet", *map(str, extra)])
    assert result.exit_code == 0, result.output
    return out


def arrays(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with h5py.File(path) as f:
        return f["image"][()], f["residuals"][()]


def test_inputs_expand_files_folders_and_patterns(tmp_path, rng):
    a = make_scans(tmp_path / "a", 3, rng)
    (tmp_path / "a" / "scan0.recon.h5").write_bytes(b"")  # an earlier output: not an input
    (tmp_path / "a" / ".hidden.h5").write_bytes(b"")
    (tmp_path / "a" / "notes.txt").write_text("x")
    assert expand_inputs([tmp_path / "a"]) == a
    assert expand_inputs([str(tmp_path / "a" / "scan[12].h5"), a[0], a[1]]) == [a[1], a[2], a[0]]
    with pytest.raises(ScanFileError, match="pattern matches no file"):
        expand_inputs([str(tmp_path / "*.mrd")])
    with pytest.raises(ScanFileError, match="no such file or folder"):
        expand_inputs([tmp_path / "missing.h5"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ScanFileError, match="folder holds no scan file"):
        expand_inputs([tmp_path / "empty"])


def test_outputs_are_named_after_inputs_and_never_collide(tmp_path):
    inputs = [Path("/x/a.h5"), Path("/x/b.mrd.h5"), Path("/x/c.mrd")]
    assert [p.name for p in output_paths(inputs, tmp_path, None)] == ["a.recon.h5", "b.recon.h5", "c.recon.h5"]
    assert [p.name for p in output_paths(inputs, tmp_path, "nifti")][0] == "a.recon.nii.gz"
    assert output_paths(inputs, None, "mrd")[0] == Path("/x/a.recon.mrd.h5")
    with pytest.raises(OutputError, match="would both be written to"):
        output_paths([Path("/x/a.h5"), Path("/y/a.h5")], tmp_path, None)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="-o names a folder, and this is a file"):
        output_paths(inputs, tmp_path / "file", None)


def test_outputs_are_bit_identical_to_single_scan_runs(tmp_path, rng):
    scans = make_scans(tmp_path / "in", 3, rng)
    report = reconstruct_many(scans, tmp_path / "out", cache_dir=str(tmp_path / "cache"), **FAST)
    assert report.ok and [o.status for o in report.outcomes] == ["done"] * 3
    assert [o.psf for o in report.outcomes] == ["miss", "hit", "hit"]  # one trajectory: one PSF computation
    for scan, outcome in zip(scans, report.outcomes):
        reference = single(scan, tmp_path / f"{scan.stem}.single.h5", "--no-cache")
        image, residuals = arrays(Path(outcome.output))
        ref_image, ref_residuals = arrays(reference)
        assert image.tobytes() == ref_image.tobytes() and residuals.tobytes() == ref_residuals.tobytes()
        assert record_path(outcome.output).is_file()


def test_rerun_skips_complete_outputs_and_redoes_changed_ones(tmp_path, rng):
    scans = make_scans(tmp_path / "in", 3, rng)
    out = tmp_path / "out"
    first = reconstruct_many(scans, out, **FAST)
    assert [o.status for o in first.outcomes] == ["done"] * 3
    stamps = [os.stat(o.output).st_mtime_ns for o in first.outcomes]
    again = reconstruct_many(scans, out, **FAST)
    assert [o.status for o in again.outcomes] == ["skipped"] * 3
    assert [os.stat(o.output).st_mtime_ns for o in again.outcomes] == stamps
    # different settings: every output is redone; then tamper with one output, and touch one input
    assert complete(first.outcomes[0].output, scans[0], {"iterations": 7}) == "settings differ"
    assert [o.status for o in reconstruct_many(scans, out, **{**FAST, "iterations": 5}).outcomes] == ["done"] * 3
    outputs = [Path(o.output) for o in first.outcomes]
    with h5py.File(outputs[1], "r+") as f:
        f["image"][0, 0] += 1
    os.utime(scans[2], ns=(os.stat(scans[2]).st_atime_ns, os.stat(scans[2]).st_mtime_ns + 10**9))
    redo = reconstruct_many(scans, out, **{**FAST, "iterations": 5})
    assert [o.status for o in redo.outcomes] == ["skipped", "done", "done"]
    assert complete(outputs[1], scans[1], json.loads(record_path(outputs[1]).read_text())["settings"]) is None
    assert [o.status for o in reconstruct_many(scans, out, overwrite=True, **{**FAST, "iterations": 5}).outcomes] \
        == ["done"] * 3
    record_path(outputs[0]).unlink()  # an output without its record (killed between the two renames)
    assert [o.status for o in reconstruct_many(scans, out, **{**FAST, "iterations": 5}).outcomes][0] == "done"


def test_a_failed_scan_is_reported_and_the_others_complete(tmp_path, rng):
    scans = make_scans(tmp_path / "in", 2, rng)
    bad = tmp_path / "in" / "broken.h5"
    bad.write_bytes(b"not an hdf5 file at all")
    report = reconstruct_many(tmp_path / "in", tmp_path / "out", **FAST)
    status = {Path(o.input).name: o for o in report.outcomes}
    assert status["broken.h5"].status == "failed" and "\n" not in status["broken.h5"].reason
    assert status["broken.h5"].reason and not Path(status["broken.h5"].output).exists()
    assert all(status[s.name].status == "done" and Path(status[s.name].output).is_file() for s in scans)
    assert "1 failed" in report.table() and "broken.h5" in report.table()


def test_cli_batch_exit_code_summary_and_log_json(tmp_path, rng):
    make_scans(tmp_path / "in", 2, rng)
    (tmp_path / "in" / "broken.h5").write_bytes(b"junk")
    log = tmp_path / "run.json"
    result = CliRunner().invoke(main, ["reconstruct", str(tmp_path / "in"), "-o", str(tmp_path / "out"),
                                       "--iterations", "4", "--device", "cpu", "--log-json", str(log)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "1 of 3 scan(s) failed (first: " in result.output and "broken.h5" in result.output
    assert "3 scan(s): 2 done, 0 skipped (complete), 1 failed" in result.output
    record = json.loads(log.read_text())
    assert (record["done"], record["failed"], len(record["scans"])) == (2, 1, 3)
    assert record["settings"]["iterations"] == 4
    result = CliRunner().invoke(main, ["reconstruct", str(tmp_path / "in" / "scan*.h5"), "-o",
                                       str(tmp_path / "out"), "--iterations", "4", "--device", "cpu"])
    assert result.exit_code == 0 and "2 skipped (complete)" in result.output


def test_cli_batch_refuses_contradictions(tmp_path, rng):
    scans = make_scans(tmp_path / "in", 2, rng)
    for extra, message in ((["--png", str(tmp_path / "p.png")], "--png writes one preview"),
                           (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "give one"),
                           (["--device", "gpu:1", "--workers", "1"], "picks one GPU")):
        result = CliRunner().invoke(main, ["reconstruct", *map(str, scans), *extra])
        assert result.exit_code == 2 or result.exit_code == 1, result.output
        assert message in result.output and "Traceback" not in result.output
    with pytest.raises(InvalidDataError, match="iterations must be a whole number >= 1"):
        reconstruct_many(scans, tmp_path / "o", iterations=0)
    with pytest.raises(InvalidDataError, match="unexpected keyword argument 'iters'"):
        reconstruct_many(scans, tmp_path / "o", iters=3)
    with pytest.raises(InvalidDataError, match="workers must be a whole number >= 1"):
        reconstruct_many(scans, tmp_path / "o", workers=0)
    victim = tmp_path / "in" / "scan0.recon.h5"  # given as an input, and the output of scan0.h5
    save_scan(victim, simulate_scan((16, 16), "golden", coils=1, seed=1))
    with pytest.raises(OutputError, match="output would overwrite the input file"):
        reconstruct_many([scans[0], victim], None, **FAST)


def test_gpu_worker_planning(monkeypatch):
    from mri_recon.batch import cluster

    assert plan_gpu_workers(None, ["0", "1"]) == ["0", "1"] and plan_gpu_workers(1, ["3", "5"]) == ["3"]
    with pytest.raises(DeviceError, match="--workers 3 asks for one GPU per worker, but 2 GPU"):
        plan_gpu_workers(3, ["0", "1"])
    with pytest.raises(DeviceError, match="none is visible"):
        plan_gpu_workers(None, [])
    monkeypatch.setattr(cluster, "gpu_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert visible_gpus() == ["4", "6"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpus() == ["0", "1"]
    assert wants_gpu("gpu") and not wants_gpu("cpu")
    with pytest.raises(InvalidDataError, match="picks one GPU"):
        wants_gpu("gpu:1")


def test_single_scan_path_imports_no_dask(tmp_path, rng):
    scan = make_scans(tmp_path, 1, rng, matrix=(16, 16), coils=1)[0]
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "import mri_recon\n"
        "from mri_recon.cli import main\n"
        f"r = CliRunner().invoke(main, ['reconstruct', {str(scan)!r}, '-o', {str(tmp_path / 'o.h5')!r}, "
        "'--iterations', '2', '--device', 'cpu', '-q'])\n"
        "assert r.exit_code == 0, r.output\n"
        f"mri_recon.reconstruct_many([{str(scan)!r}], {str(tmp_path / 'b')!r}, iterations=2, device='cpu')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'dask_cuda'))\n"
        "assert not bad, bad\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr

