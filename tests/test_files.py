"""Atomic outputs: temporary names that fit any valid target name, non-regular targets, and the removal of
temporary files left by a writer that was killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mri_recon.errors import OutputError
from mri_recon.io import files
from mri_recon.io.cache import PsfCache
from mri_recon.io.files import atomic_output, check_output, clean_stale, is_stale, temp_name

ROOT = Path(__file__).resolve().parents[1]
WRITER = """
import sys, time
from mri_recon.io.files import atomic_output
with atomic_output(sys.argv[1]) as tmp:
    tmp.write_bytes(b"partial " * 1000)
    print(tmp, flush=True)
    time.sleep(120)
"""


def _killed_writer(target: Path) -> Path:
    """Start a writer of ``target``, SIGKILL it in the middle of the write; returns the temp it left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        tmp = Path(proc.stdout.readline().strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    return tmp


def test_temporary_names_are_short_and_ours():
    name = temp_name()
    assert len(name) <= 47 and name.startswith(".mri-recon.") and name.endswith(".tmp")
    assert f".{os.getpid()}." in name and name != temp_name()


@pytest.mark.parametrize("length", [242, 250, 255])
def test_a_long_valid_name_is_written(tmp_path, length):
    target = tmp_path / ("n" * (length - 3) + ".h5")
    with atomic_output(target) as tmp:
        tmp.write_bytes(b"ok")
    assert target.read_bytes() == b"ok" and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_a_name_over_the_limit_is_one_clear_error(tmp_path):
    target = tmp_path / ("n" * 253 + ".h5")
    with pytest.raises(OutputError, match=r"output file name is 256 bytes long; the file system allows at most 255"):
        check_output(target)
    with pytest.raises(OutputError, match="256 bytes long"), atomic_output(target):
        pass
    assert list(tmp_path.iterdir()) == []


def test_non_regular_targets_are_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (Path("/dev/null"), fifo):
        with pytest.raises(OutputError, match=r"exists and is not a regular file \(a device, FIFO or socket\)"):
            check_output(target)
    assert Path("/dev/null").is_char_device() and fifo.is_fifo()


def test_a_killed_writer_leaves_a_temp_that_the_next_write_removes(tmp_path):
    target = tmp_path / "out.h5"
    tmp = _killed_writer(target)
    assert tmp.exists() and tmp.parent == tmp_path and not target.exists()
    with atomic_output(tmp_path / "other.h5") as new:
        new.write_bytes(b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.h5"]


def test_a_killed_psf_store_is_cleaned_by_the_next_store(tmp_path):
    cache = PsfCache(tmp_path)
    tmp = _killed_writer(cache.path("a" * 64))
    assert tmp.exists()
    cache.store("b" * 64, np.ones((4, 4), np.complex64))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b" * 64 + ".psf"]


def test_only_stale_temporary_files_of_ours_are_removed(tmp_path, monkeypatch):
    old = time.time() - files.STALE_AGE_S - 60
    host = files._host_token()
    live = tmp_path / f".mri-recon.{host}.{os.getpid()}.0123456789ab.tmp"  # this process: alive
    other_host = tmp_path / ".mri-recon.00000000.1.0123456789ab.tmp"  # PIDs elsewhere mean nothing here
    legacy_old, legacy_new = tmp_path / ".out.h5.abcd_123.tmp", tmp_path / ".out.h5.zzzz0000.tmp"
    legacy_psf = tmp_path / f".{'c' * 64}.psf.k2j4h5g6.tmp"
    foreign = [tmp_path / ".out.h5.tmp", tmp_path / ".mri-recon.notours.tmp", tmp_path / "data.tmp",
               tmp_path / ".other.h5.abcd_123.tmp"]
    for path in (live, other_host, legacy_old, legacy_new, legacy_psf, *foreign):
        path.write_bytes(b"x")
    for path in (legacy_old, legacy_psf, *foreign):
        os.utime(path, (old, old))
    removed = clean_stale(tmp_path, target_name="out.h5")
    assert sorted(removed) == sorted([legacy_old, legacy_psf])
    os.utime(other_host, (old, old))
    assert clean_stale(tmp_path) == [other_host]
    assert all(p.exists() for p in (live, legacy_new, *foreign))
    assert not is_stale(live.name, 0.0) and is_stale(live.name, files.STALE_AGE_S + 1)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    assert is_stale(f".mri-recon.{host}.{int(dead.stdout)}.0123456789ab.tmp", 0.0)


def test_file_set_decides_as_same_file_does(tmp_path):
    from mri_recon.io.files import FileSet, same_file

    a, b = tmp_path / "a.h5", tmp_path / "sub" / "b.h5"
    b.parent.mkdir()
    a.write_bytes(b"x")
    b.write_bytes(b"y")
    (tmp_path / "link.h5").symlink_to(a)
    (tmp_path / "hard.h5").hardlink_to(b)
    protected = FileSet([a, tmp_path / "sub" / ".." / "sub" / "b.h5", tmp_path / "missing.h5"])
    for candidate in (a, b, tmp_path / "link.h5", tmp_path / "hard.h5", tmp_path / "sub" / "../a.h5",
                      tmp_path / "missing.h5", tmp_path / "other.h5", tmp_path / "sub" / "a.h5"):
        expected = any(same_file(candidate, p) for p in (a, b, tmp_path / "missing.h5"))
        assert (candidate in protected) == expected, candidate
    assert tmp_path / "hard.h5" in protected and tmp_path / "other.h5" not in protected
