"""PSF cache: keys follow the inputs, entries round-trip, corrupt entries are detected and dropped."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.io.cache import PsfCache, default_cache_dir, psf_key


def _psf(rng, shape=(8, 6)):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def test_key_depends_on_trajectory_weights_matrix_and_engine(rng):
    traj = rng.standard_normal((20, 2)).astype(np.float32)
    w = rng.random(20).astype(np.float32)
    key = psf_key(traj, w, (4, 3))
    assert key == psf_key(traj.astype(np.float64), w, (4, 3))  # same float32 bytes
    changed = traj.copy()
    changed[3, 1] = np.nextafter(changed[3, 1], np.float32(np.inf))
    others = {psf_key(changed, w, (4, 3)), psf_key(traj, None, (4, 3)), psf_key(traj, w, (4, 4)),
              psf_key(traj, w * 2, (4, 3)), psf_key(traj, w, (4, 3), "exact")}
    assert key not in others and len(others) == 5


def test_round_trip_is_bit_identical(tmp_path, rng):
    cache = PsfCache(tmp_path)
    psf = _psf(rng)
    assert cache.load("k", psf.shape) is None
    cache.store("k", psf)
    back = cache.load("k", psf.shape)
    assert back is not None and back.tobytes() == psf.tobytes()


@pytest.mark.parametrize("damage", ["truncate", "flip", "shape", "garbage", "empty"])
def test_corrupt_entries_are_rejected_and_removed(tmp_path, rng, damage):
    cache = PsfCache(tmp_path)
    psf = _psf(rng)
    cache.store("k", psf)
    path = cache.path("k")
    blob = bytearray(path.read_bytes())
    if damage == "truncate":
        blob = blob[:-9]
    elif damage == "flip":
        blob[-5] ^= 0x40
    elif damage == "garbage":
        blob = bytearray(b"not a psf at all")
    elif damage == "empty":
        blob = bytearray()
    path.write_bytes(bytes(blob))
    shape = (6, 8) if damage == "shape" else psf.shape
    assert cache.load("k", shape) is None
    assert not path.exists()


def test_unwritable_folder_is_not_an_error(tmp_path, rng):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert PsfCache(blocker / "sub").store("k", _psf(rng)) is None


def test_default_folder_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MRI_RECON_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("MRI_RECON_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "mri-recon" / "psf"


def test_size_cap_evicts_least_recently_used_and_a_hit_counts_as_use(tmp_path, rng):
    import os

    psf = _psf(rng)
    entry = 8 * psf.size  # payload bytes; each header adds under 300
    cache = PsfCache(tmp_path, max_bytes=3 * entry + 3 * 300)
    for i, key in enumerate("abc"):
        cache.store(key, psf)
        os.utime(cache.path(key), (1000 + i, 1000 + i))  # a, b, c from oldest to newest
    assert cache.load("a", psf.shape) is not None  # a hit: a is now the most recently used
    assert cache.store("d", psf) is not None
    assert sorted(p.stem for p in tmp_path.glob("*.psf")) == ["a", "c", "d"]  # b, the least recent, went
    assert cache.info().entries == 3 and cache.info().total_bytes <= cache.max_bytes


def test_entry_larger_than_the_cap_is_not_kept(tmp_path, rng):
    cache = PsfCache(tmp_path, max_bytes=100)
    assert cache.store("k", _psf(rng)) is None and cache.info().entries == 0


def test_cap_from_the_environment(monkeypatch, tmp_path):
    from mri_recon.errors import InvalidDataError
    from mri_recon.io.cache import DEFAULT_MAX_BYTES

    monkeypatch.delenv("MRI_RECON_CACHE_MAX", raising=False)
    assert PsfCache(tmp_path).max_bytes == DEFAULT_MAX_BYTES == 8 * 2**30
    monkeypatch.setenv("MRI_RECON_CACHE_MAX", "12345")
    assert PsfCache(tmp_path).max_bytes == 12345
    for bad in ("-1", "1e9", "lots"):
        monkeypatch.setenv("MRI_RECON_CACHE_MAX", bad)
        with pytest.raises(InvalidDataError, match="MRI_RECON_CACHE_MAX must be a whole number of bytes >= 0"):
            PsfCache(tmp_path)
    with pytest.raises(InvalidDataError, match="max_bytes must be >= 0, found -5"):
        PsfCache(tmp_path, max_bytes=-5)


def test_cli_cache_info_and_clear_touch_only_our_files(tmp_path, rng, monkeypatch):
    import os

    from click.testing import CliRunner

    from mri_recon.cli import main

    monkeypatch.delenv("MRI_RECON_CACHE_MAX", raising=False)
    cache = PsfCache(tmp_path)
    cache.store("a", _psf(rng))
    cache.store("b", _psf(rng))
    (tmp_path / "notes.txt").write_text("mine")
    stale = tmp_path / ".mri-recon.00000000.1.0123456789ab.tmp"
    stale.write_bytes(b"x")
    os.utime(stale, (1, 1))
    size = sum(p.stat().st_size for p in tmp_path.glob("*.psf"))
    result = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0
    assert f"folder   {tmp_path}" in result.output and "entries  2" in result.output
    assert f"size     {size} bytes" in result.output and f"cap      {8 * 2**30} bytes" in result.output
    result = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0 and f"removed 3 file(s) from {tmp_path}" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    monkeypatch.setenv("MRI_RECON_CACHE_MAX", "many")
    result = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 1 and "MRI_RECON_CACHE_MAX must be a whole number" in result.output


def test_clear_on_a_file_says_it_is_not_a_folder(tmp_path):
    from click.testing import CliRunner

    from mri_recon.cli import main

    afile = tmp_path / "afile"
    afile.write_text("not a cache")
    done = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", str(afile)])
    assert done.exit_code == 1 and "is not a folder, so it holds no PSF cache" in done.output
    assert "Traceback" not in done.output and afile.read_text() == "not a cache"
    done = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", str(tmp_path / "missing")])
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(afile)])
    assert "refused  the path is not a folder: choose a folder with --cache-dir" in done.output
    assert "chmod" not in done.output
    done = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(tmp_path / "missing")])
    assert done.exit_code == 0 and "missing (not created yet: made at the first PSF cached)" in done.output
