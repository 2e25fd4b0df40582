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
