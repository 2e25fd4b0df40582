"""Output names: an extension that names no output format is refused (never HDF5 under a PNG's name)."""

from __future__ import annotations

import os
import re

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from mri_recon.cli import main
from mri_recon.errors import OutputError
from mri_recon.io import save_scan
from mri_recon.result import output_format
from mri_recon.sim.simulate import simulate_scan

VALID = r"use \.h5 or \.hdf5 \(HDF5\), \.nii or \.nii\.gz \(NIfTI\), \.mrd\.h5 or \.mrd \(MRD images\); " \
        r"a PNG preview is --png FILE\.png; --format hdf5\|nifti\|mrd writes that format under any name"
FAST = ["--device", "cpu", "--iterations", "2", "--no-cache", "--quiet"]


@pytest.fixture(scope="module")
def scan_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("scan") / "scan.h5"
    save_scan(path, simulate_scan((24, 24), "golden", coils=2, seed=int(np.random.SeedSequence().entropy % 2**31)))
    return path


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_line_error(result, pattern: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize("name", ["x.png", "x.JPG", "x.txt", "x.npy", "x.mat", "x.h5.gz", "x.nii.bz2"])
def test_an_extension_of_no_output_format_is_refused_before_any_work(scan_path, tmp_path, name):
    suffix = os.path.splitext(name)[1]
    _one_line_error(_run("reconstruct", scan_path, "-o", tmp_path / name, *FAST),
                    rf"{re.escape(str(tmp_path / name))}: the extension '{re.escape(suffix)}' is not an output "
                    rf"format: {VALID}")
    assert list(tmp_path.iterdir()) == []


def test_a_name_without_extension_is_refused(scan_path, tmp_path):
    _one_line_error(_run("reconstruct", scan_path, "-o", tmp_path / "result", *FAST),
                    rf"result: the name has no extension naming an output format: {VALID}")
    with pytest.raises(OutputError, match=rf"x\.png: the extension '\.png' is not an output format: {VALID}"):
        output_format("x.png")
    assert list(tmp_path.iterdir()) == []


def test_format_writes_under_any_name_and_the_valid_names_choose(scan_path, tmp_path):
    assert _run("reconstruct", scan_path, "-o", tmp_path / "x.png", "--format", "hdf5", *FAST).exit_code == 0
    assert h5py.is_hdf5(tmp_path / "x.png")
    chosen = {n: output_format(n) for n in ("a.h5", "a.HDF5", "a.nii", "a.NII.GZ", "a.mrd", "a.mrd.h5")}
    assert chosen == {"a.h5": "hdf5", "a.HDF5": "hdf5", "a.nii": "nifti", "a.NII.GZ": "nifti", "a.mrd": "mrd",
                      "a.mrd.h5": "mrd"}
    assert output_format("x.txt", "nifti") == "nifti"
