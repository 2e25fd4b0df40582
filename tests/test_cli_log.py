"""What ``reconstruct`` records and prints: ``--log-json`` settings under the typed option names, the NRMSE
against a ground truth, and a progress bar only on a terminal."""

from __future__ import annotations

import io
import json
import re
import sys

import h5py
import pytest
from click.testing import CliRunner

from mri_recon import load_scan, save_scan
from mri_recon.cli import main


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    path = tmp_path_factory.mktemp("scans") / "s.h5"
    result = CliRunner().invoke(main, ["simulate", str(path), "--matrix", "24", "--coils", "2", "--quiet"])
    assert result.exit_code == 0, result.output
    return path


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_log_json_settings_use_the_option_names_the_user_types(scan, tmp_path):
    record = tmp_path / "run.json"
    result = _run("reconstruct", scan, "-o", tmp_path / "r.h5", "--format", "hdf5", "--lambda", "0.002",
                  "--iterations", "2", "--device", "cpu", "--log-json", record, "--quiet")
    assert result.exit_code == 0, result.output
    settings = json.loads(record.read_text())["settings"]
    assert settings["format"] == "hdf5" and settings["lambda"] == 0.002 and settings["complex"] is False
    assert {"slice", "contrast", "phase", "set", "repetition"} <= set(settings)
    assert settings["slice"] is None and settings["log_json"] == str(record)
    assert not [name for name in settings if name.endswith("_")]
    typed = _run("reconstruct", "--help").output
    for name in set(settings) - {"scans"}:
        assert f"--{name.replace('_', '-')}" in typed, name


def test_a_batch_log_json_uses_the_typed_names_too(scan, tmp_path):
    folder, record = tmp_path / "in", tmp_path / "run.json"
    folder.mkdir()
    for name in ("a.h5", "b.h5"):
        (folder / name).write_bytes(scan.read_bytes())
    result = _run("reconstruct", folder, "-o", tmp_path / "out", "--format", "nifti", "--iterations", "2",
                  "--device", "cpu", "--log-json", record, "--quiet")
    assert result.exit_code == 0, result.output
    settings = json.loads(record.read_text())["settings"]
    assert settings["format"] == "nifti" and "format_" not in settings and "lambda" in settings
    assert not [name for name in settings if name.endswith("_")]


class _Terminal(io.StringIO):
    """stderr as a terminal shows it (the bar is drawn only there)."""

    def isatty(self) -> bool:
        return True


def _on_terminal(monkeypatch, *args) -> str:
    """Run the command in this process with stderr a terminal; returns what it wrote there."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    main.main([str(a) for a in args], prog_name="mri-recon", standalone_mode=False)
    return terminal.getvalue()


def test_the_progress_bar_is_drawn_on_a_terminal_and_ends_full(scan, tmp_path, monkeypatch):
    out = tmp_path / "r.h5"
    shown = _on_terminal(monkeypatch, "reconstruct", scan, "-o", out, "--iterations", "4", "--tol", "0",
                         "--device", "cpu")
    bar, line = shown.rsplit("\r", 1)[-1], shown.strip().splitlines()[-1]
    assert re.search(r"CG: 100%.* 4/4 ", bar), bar
    assert line.startswith(f"wrote {out} (HDF5): 1 image(s), 4 CG iterations")
    tv = _on_terminal(monkeypatch, "reconstruct", scan, "-o", tmp_path / "tv.h5", "--regularizer", "tv",
                      "--iterations", "3", "--device", "cpu")
    assert re.search(r"TV: 100%.* 3/3 .*objective=", tv.rsplit("\r", 1)[-1]), tv  # the ADMM bar shows the objective
    quiet = tmp_path / "q.h5"
    assert _on_terminal(monkeypatch, "reconstruct", scan, "-o", quiet, "--iterations", "2", "--device", "cpu",
                        "--quiet") == "" and quiet.is_file()


def test_no_bar_and_no_carriage_returns_when_stderr_is_not_a_terminal(scan, tmp_path):
    out = tmp_path / "r.h5"
    result = _run("reconstruct", scan, "-o", out, "--iterations", "3", "--tol", "0", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "\r" not in result.stderr and "CG:" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # the result line alone
    assert result.stderr.startswith(f"wrote {out} (HDF5): 1 image(s), 3 CG iterations")


def test_the_nrmse_against_the_ground_truth_is_in_the_result_line_and_the_json_log(scan, tmp_path):
    out, record = tmp_path / "r.h5", tmp_path / "run.json"
    result = _run("reconstruct", scan, "-o", out, "--iterations", "5", "--device", "cpu", "--log-json", record)
    assert result.exit_code == 0, result.output
    (image,) = json.loads(record.read_text())["images"]
    with h5py.File(out) as f:
        value, kind = float(f.attrs["nrmse_vs_ground_truth"]), f.attrs["nrmse_kind"]
    assert image["nrmse_vs_ground_truth"] == value and image["nrmse_kind"] == kind and 0 < value < 1
    assert f", NRMSE vs ground truth {value:.3g} ({kind}), " in result.stderr.strip().splitlines()[-1]


def test_mrd_output_carries_the_nrmse_in_its_image_meta(scan, tmp_path):
    ismrmrd = pytest.importorskip("ismrmrd")
    out, record = tmp_path / "r.mrd.h5", tmp_path / "run.json"
    result = _run("reconstruct", scan, "-o", out, "--iterations", "3", "--device", "cpu", "--log-json", record)
    assert result.exit_code == 0, result.output
    (image,) = json.loads(record.read_text())["images"]
    with ismrmrd.Dataset(str(out), "dataset", create_if_needed=False, mode="r") as dataset:
        meta = dataset.read_image("image_0", 0).meta
    assert float(meta["nrmse_vs_ground_truth"]) == image["nrmse_vs_ground_truth"]
    assert meta["nrmse_kind"] == image["nrmse_kind"]


def test_without_a_ground_truth_no_nrmse_is_claimed(scan, tmp_path):
    bare, record = tmp_path / "bare.h5", tmp_path / "run.json"
    save_scan(bare, load_scan(scan).replace(ground_truth=None))
    result = _run("reconstruct", bare, "-o", tmp_path / "r.h5", "--iterations", "2", "--device", "cpu",
                  "--log-json", record)
    assert result.exit_code == 0, result.output
    assert "NRMSE" not in result.stderr
    (image,) = json.loads(record.read_text())["images"]
    assert "nrmse_vs_ground_truth" not in image and "nrmse_kind" not in image
    ismrmrd = pytest.importorskip("ismrmrd")
    mrd = tmp_path / "r.mrd.h5"
    assert _run("reconstruct", bare, "-o", mrd, "--iterations", "2", "--device", "cpu", "-q").exit_code == 0
    with ismrmrd.Dataset(str(mrd), "dataset", create_if_needed=False, mode="r") as dataset:
        meta = dataset.read_image("image_0", 0).meta
    assert "nrmse_vs_ground_truth" not in meta and meta["iterations"] == "2"
