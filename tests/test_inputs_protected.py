"""No run writes a file it reads, whatever the spelling: the scan, its BART pair by stem or extension, the
trajectory, the sensitivities, a link to any of them; and every output name is checked before anything is
written."""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner

from mri_recon.cli import main
from mri_recon.io.cfl import write_cfl
from mri_recon.io.files import FileSet

N, RO, SPOKES, COILS = 8, 16, 10, 2


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture()
def bart(tmp_path, rng):
    """A small BART radial scan: ``ksp``, ``traj``, ``sens`` pairs; returns the folder and every file's bytes."""
    angles = np.arange(SPOKES) * np.pi / SPOKES
    line = (np.arange(RO) - RO / 2) * N / RO
    traj = np.zeros((3, RO, SPOKES), np.complex64)
    traj[0], traj[1] = np.outer(line, np.cos(angles)), np.outer(line, np.sin(angles))
    write_cfl(tmp_path / "traj", traj)
    write_cfl(tmp_path / "ksp", (rng.standard_normal((1, RO, SPOKES, COILS)) + 1j).astype(np.complex64))
    write_cfl(tmp_path / "sens", (rng.standard_normal((N, N, 1, COILS)) + 1j).astype(np.complex64))
    return tmp_path, _contents(tmp_path)


def _contents(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _base(folder, scan="ksp.cfl"):
    return ["reconstruct", folder / scan, "--trajectory", folder / "traj.cfl", "--sensitivities",
            folder / "sens.cfl", "--device", "cpu", "--iterations", "2"]


@pytest.mark.parametrize(("scan", "extra"), [
    ("ksp.cfl", ["-o", "traj.cfl"]), ("ksp.cfl", ["-o", "sens.cfl"]), ("ksp", ["-o", "ksp.cfl"]),
    ("ksp.cfl", ["-o", "ksp.hdr", "--format", "hdf5"]), ("ksp.cfl", ["-o", "traj.hdr", "--format", "hdf5"]),
    ("ksp.cfl", ["-o", "out.h5", "--log-json", "traj.hdr"]), ("ksp.cfl", ["-o", "out.h5", "--png", "sens.hdr"]),
    ("ksp.cfl", ["-o", "link.cfl"]),
], ids=["traj", "sens", "stem", "own-header", "traj-header", "log-json", "png", "link"])
def test_reconstruct_refuses_to_write_any_input(bart, scan, extra):
    folder, before = bart
    os.symlink(folder / "traj.cfl", folder / "link.cfl")
    before = _contents(folder)
    extra = [folder / e if e.endswith((".cfl", ".hdr", ".h5")) else e for e in extra]
    done = _run(*_base(folder, scan), *extra)
    assert done.exit_code == 1 and "Traceback" not in done.output, done.output
    assert "overwrite" in done.output or "same file" in done.output or ".png" in done.output, done.output
    assert _contents(folder) == before  # nothing written, nothing replaced


def test_convert_refuses_the_header_of_its_input(bart):
    folder, before = bart
    done = _run("convert", folder / "ksp.cfl", folder / "ksp.hdr", "--trajectory", folder / "traj.cfl",
                "--sensitivities", folder / "sens.cfl")
    assert done.exit_code == 1 and "would overwrite the input file" in done.output
    assert _contents(folder) == before


def test_a_bart_name_stands_for_its_pair(tmp_path):
    write_cfl(tmp_path / "a", np.zeros(3, np.complex64))
    for given in ("a", "a.cfl", "a.hdr"):
        protected = FileSet([tmp_path / given])
        assert all(tmp_path / name in protected for name in ("a", "a.cfl", "a.hdr"))
        assert tmp_path / "b.cfl" not in protected
    assert tmp_path / "x.cfl" not in FileSet([tmp_path / "x.h5"])  # not a BART name: itself only


def test_a_time_series_checks_every_output_name_before_writing(tmp_path):
    scan, previous = tmp_path / "dyn.mrd.h5", tmp_path / "prev.h5"
    assert _run("simulate", scan, "--matrix", "16", "--coils", "2", "--frames", "3", "--spokes-per-frame", "5",
                "-q").exit_code == 0
    previous.write_bytes(b"an earlier result")
    done = _run("reconstruct", scan, "-o", previous, "--temporal", "tv", "--png", tmp_path / "prev.txt",
                "--device", "cpu", "--iterations", "2")
    assert done.exit_code == 1 and "name it with the extension .png" in done.output
    assert previous.read_bytes() == b"an earlier result"


def test_the_json_log_cannot_replace_the_header_of_a_bart_output(tmp_path):
    scan = tmp_path / "s.h5"
    assert _run("simulate", scan, "--matrix", "16", "--coils", "1", "-q").exit_code == 0
    done = _run("reconstruct", scan, "-o", tmp_path / "out", "--format", "cfl", "--log-json", tmp_path / "out.hdr",
                "--iterations", "2", "--device", "cpu")
    assert done.exit_code == 1 and "--log-json names the same file as -o" in done.output
    assert not (tmp_path / "out.hdr").exists() and not (tmp_path / "out.cfl").exists()
