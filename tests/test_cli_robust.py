"""The command line on hostile options and outputs: early one-line errors, never a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from test_files import _killed_writer  # tests/ is on sys.path (pytest rootdir imports)

from mri_recon.cli import main
from mri_recon.io import load_scan, save_scan


@pytest.fixture(scope="module")
def small_scan(tmp_path_factory):
    path = tmp_path_factory.mktemp("scans") / "small.h5"
    result = CliRunner().invoke(main, ["simulate", str(path), "--matrix", "24", "--coils", "2", "--quiet"])
    assert result.exit_code == 0, result.output
    return path


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_line_error(result, pattern: str) -> str:
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert re.search(pattern, errors[0]), errors[0]
    return errors[0]


def _recon(scan, *args):
    return _run("reconstruct", scan, "--device", "cpu", "--iterations", "2", "--no-cache", "--quiet", *args)


@pytest.mark.parametrize("option, value", [("--lambda", "inf"), ("--lambda", "nan"), ("--tol", "nan"),
                                           ("--tol", "inf"), ("--filter-sigma", "inf")])
def test_non_finite_numbers_are_refused_naming_the_option(small_scan, tmp_path, option, value):
    result = _recon(small_scan, "-o", tmp_path / "r.h5", option, value)
    _one_line_error(result, rf"Invalid value for '{option}': must be a finite number, found {value}")
    assert list(tmp_path.iterdir()) == []


def test_png_equal_to_the_output_is_refused(small_scan, tmp_path):
    out = tmp_path / "r.h5"
    _one_line_error(_recon(small_scan, "-o", out, "--png", out), r"--png names the same file as the output")
    _one_line_error(_recon(small_scan, "-o", out, "--png", tmp_path / "." / "r.h5"), r"--png names the same")
    assert not out.exists()


def test_a_device_or_fifo_output_is_refused(small_scan, tmp_path):
    _one_line_error(_recon(small_scan, "-o", "/dev/null"), r"/dev/null: exists and is not a regular file")
    assert Path("/dev/null").is_char_device()
    _one_line_error(_recon(small_scan, "-o", tmp_path / "r.h5", "--png", "/dev/null"), "not a regular file")


def test_output_names_up_to_the_limit_work_and_longer_ones_are_one_line(small_scan, tmp_path):
    good = tmp_path / ("g" * 252 + ".h5")
    result = _recon(small_scan, "-o", good)
    assert result.exit_code == 0, result.output
    assert good.exists() and sorted(p.name for p in tmp_path.iterdir()) == [good.name]
    _one_line_error(_recon(small_scan, "-o", tmp_path / ("b" * 253 + ".h5")), "256 bytes long")
    _one_line_error(_run("info", tmp_path / ("c" * 300 + ".h5")), r"cannot be opened \(File name too long\)")


def test_a_stale_temporary_output_is_removed_by_the_next_run(small_scan, tmp_path):
    tmp = _killed_writer(tmp_path / "r.h5")
    assert tmp.exists()
    result = _recon(small_scan, "-o", tmp_path / "r.h5")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.h5"]


def test_all_zero_weights_are_refused(small_scan, tmp_path):
    scan = load_scan(small_scan)
    path = tmp_path / "zero.h5"
    with h5py.File(small_scan) as src, h5py.File(path, "w") as f:
        for name in src:
            f.create_dataset(name, data=src[name][()])
        f.attrs.update(dict(src.attrs))
        f["weights"][...] = 0
    assert scan.weights is not None
    _one_line_error(_recon(path, "-o", tmp_path / "r.h5"), r"zero.h5: weights are all zero")


def test_a_field_map_is_corrected_or_dropped_on_purpose(small_scan, tmp_path):
    scan = load_scan(small_scan)
    path = tmp_path / "fm.h5"
    save_scan(path, scan.replace(field_map=np.full(scan.matrix, 30.0, np.float32),
                                 times=np.linspace(0, 4e-3, scan.n_samples, dtype=np.float32)))
    result = _recon(path, "-o", tmp_path / "c.h5", "--field-map-correction", "segmented")
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "c.h5") as f:
        assert f.attrs["param_field_map_correction"] == "time-segmented (L=1)"  # a constant map: one segment
    result = _recon(path, "-o", tmp_path / "r.h5", "--no-field-map")
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "r.h5") as f:
        assert f.attrs["field_map"] == "ignored" and f.attrs["param_field_map_correction"] == "ignored"
    half = tmp_path / "half.h5"
    save_scan(half, scan.replace(times=np.zeros(scan.n_samples, np.float32)))
    _one_line_error(_recon(half, "-o", tmp_path / "h.h5"), r"has 'times' but no 'field_map'.*--no-field-map")
    info = _run("info", path, "--device", "cpu")
    assert info.exit_code == 0 and "field_map   float32 (24, 24)" in info.output
