"""Output names: an extension that names no output format is refused (never HDF5 under a PNG's name), and no
writer replaces an input, under its own name, a symbolic link or a hard link to it."""

from __future__ import annotations

import hashlib
import os
import re

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from mri_recon.cli import main
from mri_recon.errors import OutputError
from mri_recon.io import save_scan
from mri_recon.io.ismrmrd_write import write_ismrmrd
from mri_recon.io.writers import OUTPUTS, formats, output_format, output_suffixes
from mri_recon.sim.simulate import simulate_scan


def _valid() -> str:
    """The pattern of the accepted names a refusal lists: every registered format's endings and name
    (:data:`mri_recon.io.writers.OUTPUTS`), the PNG preview, the formats ``--format`` writes under any name."""
    named = ", ".join(rf"{' or '.join(map(re.escape, f.suffixes))} \({re.escape(f.title or f.label)}\)"
                      for f in OUTPUTS.values() if f.suffixes)
    folders = ", ".join(f.name for f in OUTPUTS.values() if f.folder)
    return (rf"use {named}; a PNG preview is --png FILE\.png; --format {re.escape('|'.join(formats()))} writes that "
            rf"format under any name" + (rf" \({folders}: a folder\)" if folders else ""))


VALID = _valid()
REFUSED = [n for n in ("x.png", "x.JPG", "x.txt", "x.npy", "x.mat", "x.h5.gz", "x.nii.bz2")
           if not n.lower().endswith(output_suffixes())]
"""Names of no output format (those a registered format claims left out)."""
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


def _digest(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize("name", REFUSED)
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


# ----------------------------------------------------------------------------------------------------------
# Never the input


def _aliases(source, folder):
    """``make(kind, name)``: the input itself, or a symbolic or hard link to it named ``name``."""
    def make(kind, name):
        path = folder / name
        if kind == "symlink":
            path.symlink_to(source)
        elif kind == "hardlink":
            path.hardlink_to(source)
        return source if kind == "itself" else path

    return make


@pytest.mark.parametrize("kind", ["itself", "symlink", "hardlink"])
@pytest.mark.parametrize("option", ["-o h5", "-o nii", "-o mrd.h5", "--png", "--log-json"])
def test_no_output_of_reconstruct_replaces_the_input(scan_path, tmp_path, kind, option):
    flag, _, ext = option.partition(" ")
    ext = ext or {"--png": "png", "--log-json": "json"}[flag]
    source = tmp_path / "in.h5"
    source.write_bytes(scan_path.read_bytes())
    before = _digest(source)
    target = _aliases(source, tmp_path)(kind, f"alias.{ext}")
    args = ["-o", target] if flag == "-o" else ["-o", tmp_path / "out.h5", flag, target]
    _one_line_error(_run("reconstruct", source, *args, *FAST),
                    rf"{re.escape(str(target))}: output would overwrite the input file; choose another path")
    assert _digest(source) == before
    assert not (tmp_path / "out.h5").exists()


def test_a_batch_log_never_replaces_an_input_of_its_folders(scan_path, tmp_path):
    folder = tmp_path / "scans"
    folder.mkdir()
    source = folder / "a.h5"
    source.write_bytes(scan_path.read_bytes())
    (tmp_path / "link.json").symlink_to(source)
    before = _digest(source)
    for log in (source, tmp_path / "link.json"):
        _one_line_error(_run("reconstruct", folder, "-o", tmp_path / "out", "--log-json", log, *FAST),
                        rf"{re.escape(str(log))}: output would overwrite the input file")
    _one_line_error(_run("reconstruct", folder, "-o", tmp_path / "out", "--log-json",
                         tmp_path / "out" / "a.recon.h5", *FAST), r"--log-json names an output of the batch")
    assert _digest(source) == before and not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["itself", "symlink", "hardlink"])
def test_convert_never_replaces_its_input(tmp_path, kind):
    source = tmp_path / "in.mrd"
    seed = int(np.random.SeedSequence().entropy % 2**31)
    write_ismrmrd(source, simulate_scan((16, 16), "radial", coils=1, seed=seed))
    before = _digest(source)
    target = _aliases(source, tmp_path)(kind, "alias.h5")
    _one_line_error(_run("convert", source, target, "-q"), r"output would overwrite the input file")
    assert _digest(source) == before


@pytest.mark.parametrize("name", ["scan.png", "scan.nii.gz", "scan.txt", "scan"])
@pytest.mark.parametrize("command", ["simulate", "simulate --frames 2", "convert"])
def test_a_scan_is_written_only_under_a_scan_files_name(tmp_path, command, name):
    """simulate and convert write HDF5 (schema v1 or MRD raw data): another format's name is refused before any
    work, nothing written (convert wrote c.nii_rep0.gz ... as HDF5, simulate an HDF5 file named .png)."""
    source = tmp_path / "in.mrd"
    write_ismrmrd(source, simulate_scan((16, 16), "radial", coils=1, seed=3))
    target = tmp_path / "out" / name
    target.parent.mkdir()
    words, *rest = command.split()
    args = [source, target] if words == "convert" else [target, "--matrix", "16", "--coils", "1", *rest]
    _one_line_error(_run(words, *args, "-q"), rf"{re.escape(name)}: a scan is written as schema v1 \(HDF5\), named "
                                              rf"\.h5 or \.hdf5, or as MRD raw data, named \.mrd\.h5 or \.mrd")
    assert list(target.parent.iterdir()) == []


@pytest.mark.parametrize("matrix", ["64x", "x64", "64,,64", "64xx"])
def test_simulate_refuses_a_matrix_with_an_empty_size(tmp_path, matrix):
    result = _run("simulate", tmp_path / "s.h5", "--matrix", matrix, "-q")
    assert result.exit_code == 2 and "expected N, NxM or NxMxK" in result.output
    assert not (tmp_path / "s.h5").exists()
