"""The PSF cache under attack and accident: an entry is used only when it is a regular file of the expected
size, owned by the user, writable by nobody else, in a folder of the same kind, bound to the key it is read
for and intact; anything else is refused with a warning and the PSF is computed again. The cache touches
only its own files."""

from __future__ import annotations

import logging
import multiprocessing
import os
import stat
import struct

import numpy as np
import pytest

from mri_recon.io.cache import PsfCache, psf_key
from mri_recon.pipeline import reconstruct
from mri_recon.sim.simulate import simulate_scan

SHAPE = (12, 10)
_CTX = multiprocessing.get_context("fork")
_LOGGER = "mri_recon.io.cache"


def _psf(rng, shape=SHAPE):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _refused(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == _LOGGER and r.levelno == logging.WARNING]


def _in_child(function, timeout_s=20.0):
    """``function()`` run in a forked child with 1 GiB more address space than it starts with: ``("ok",
    result)``, ``("error", text)`` or ``("timeout", None)`` (the child is then killed)."""
    queue = _CTX.Queue()

    def target():
        import resource

        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
        limit = pages * os.sysconf("SC_PAGE_SIZE") + 2**30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            queue.put(("ok", function()))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            queue.put(("error", repr(exc)))

    child = _CTX.Process(target=target)
    child.start()
    child.join(timeout_s)
    if child.is_alive():
        child.kill()
        child.join()
        return "timeout", None
    return queue.get(timeout=10)


# --- the pipeline: a planted entry never changes the image ---------------------------------------------------

@pytest.fixture(scope="module")
def scan():
    seed = int(np.random.SeedSequence().entropy % 2**31)
    return simulate_scan((20, 16), "golden", coils=2, spokes=24, samples=40, snr=40.0, seed=seed, dcf="pipe")


def _recon(scan, cache=None):
    return reconstruct(scan, iterations=5, tol=0.0, device="cpu", method="exact", progress=False, psf_cache=cache)


def _only_entry(folder):
    entries = [p for p in folder.iterdir() if p.name.endswith(".psf")]
    assert len(entries) == 1
    return entries[0]


def _poison(cache, entry, shape):
    """A wrong but plausible PSF for ``entry``: the right one shifted by a voxel and doubled."""
    right = cache.load(entry.name[:-4], shape)
    assert right is not None
    return np.roll(right, 1, axis=0) * np.float32(2)


def test_an_entry_of_another_key_under_this_name_is_refused_and_recomputed(scan, tmp_path, caplog):
    reference = _recon(scan).image
    cache = PsfCache(tmp_path)
    assert _recon(scan, cache).parameters["psf"] == "miss"
    entry, shape = _only_entry(tmp_path), tuple(2 * n for n in scan.matrix)
    # a complete entry, checksum and all, of another key, put under this key's name
    cache.store("decoy", _poison(cache, entry, shape))
    os.replace(cache.path("decoy"), entry)
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        again = _recon(scan, cache)
    assert again.parameters["psf"] == "miss"
    np.testing.assert_array_equal(again.image, reference)
    assert any("refused" in m and "another key" in m for m in _refused(caplog))
    assert _recon(scan, cache).parameters["psf"] == "hit"  # the recomputed entry replaced it


@pytest.mark.parametrize("plant", ["group-writable", "someone else's"])
def test_an_entry_others_could_have_written_is_refused_and_recomputed(scan, tmp_path, caplog, plant):
    if plant == "someone else's" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    reference = _recon(scan).image
    cache = PsfCache(tmp_path)
    _recon(scan, cache)
    entry, shape = _only_entry(tmp_path), tuple(2 * n for n in scan.matrix)
    cache.store(entry.name[:-4], _poison(cache, entry, shape))  # right key, right checksum, wrong PSF
    if plant == "group-writable":
        os.chmod(entry, 0o664)
    else:
        os.chown(entry, 65534, 65534)
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        again = _recon(scan, cache)
    assert again.parameters["psf"] == "miss"
    np.testing.assert_array_equal(again.image, reference)
    reason = "writable by group or others" if plant == "group-writable" else "owned by uid 65534"
    assert any("refused" in m and reason in m for m in _refused(caplog))


# --- ownership and permissions -------------------------------------------------------------------------------

def test_a_new_folder_is_private_and_so_are_its_entries(tmp_path, rng):
    folder = tmp_path / "a" / "psf"
    cache = PsfCache(folder)
    cache.store("k", _psf(rng))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.path("k").stat().st_mode) == 0o600


@pytest.mark.parametrize("problem", ["someone else's", "writable by others"])
def test_a_folder_others_could_write_is_not_used(tmp_path, rng, caplog, monkeypatch, problem):
    cache, psf = PsfCache(tmp_path), _psf(rng)
    cache.store("k", psf)
    if problem == "someone else's":
        me = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: me + 1)
        reason = f"owned by uid {me}, not by this user (uid {me + 1})"
    else:
        os.chmod(tmp_path, 0o777)
        reason = "writable by group or others (mode 0777)"
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        assert cache.load("k", SHAPE) is None
        assert cache.store("other", psf) is None
        again, state = cache.fill("k", SHAPE, lambda: psf * 2)
    assert state == "miss" and again.tobytes() == (psf * 2).tobytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.psf"]  # nothing written, nothing removed
    assert any("not used" in m and reason in m for m in _refused(caplog))
    assert reason in PsfCache(tmp_path).info().problem


def test_an_entry_moved_to_another_name_is_refused(tmp_path, rng, caplog):
    cache = PsfCache(tmp_path)
    cache.store("a", _psf(rng))
    os.replace(cache.path("a"), cache.path("b"))
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        assert cache.load("b", SHAPE) is None
    assert any("entry of another key ('a')" in m for m in _refused(caplog))


def test_the_key_includes_the_version(rng):
    traj, w = rng.standard_normal((30, 2)).astype(np.float32), rng.random(30).astype(np.float32)
    keys = {psf_key(traj, w, (4, 4), "exact"), psf_key(traj, w, (4, 4), "exact", version="0.0.0"),
            psf_key(traj, w, (4, 4), "exact", version="0.1.0+local")}
    assert len(keys) == 3


@pytest.mark.parametrize("key", ["../outside", "a/b", "", "k" * 129, "k.psf"])
def test_a_key_that_is_not_a_plain_name_is_refused(tmp_path, key):
    from mri_recon.errors import InvalidDataError

    with pytest.raises(InvalidDataError, match="a PSF cache key is 1-128 letters, digits, '-' or '_'"):
        PsfCache(tmp_path).path(key)


# --- things that are not entries ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/zero", "symlink to an entry", "huge sparse file"])
def test_a_planted_non_entry_is_refused_without_hanging(tmp_path, rng, caplog, kind):
    cache, psf = PsfCache(tmp_path / "c"), _psf(rng)
    cache.store("elsewhere", psf)
    path = cache.path("k")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink to /dev/zero":
        os.symlink("/dev/zero", path)
    elif kind == "symlink to an entry":
        os.symlink(cache.path("elsewhere"), path)
    else:
        with open(path, "wb") as f:
            f.truncate(64 * 2**30)
    outcome = _in_child(lambda: cache.load("k", SHAPE) is None)
    assert outcome == ("ok", True)
    with caplog.at_level(logging.WARNING, logger=_LOGGER):
        outcome = _in_child(lambda: cache.fill("k", SHAPE, lambda: psf)[1])
    assert outcome == ("ok", "miss")
    assert cache.load("k", SHAPE).tobytes() == psf.tobytes()  # replaced by a real entry
    assert cache.load("elsewhere", SHAPE).tobytes() == psf.tobytes()  # a link's target is untouched
    assert os.path.exists("/dev/zero")


# --- the cache's own files only --------------------------------------------------------------------------------

def test_foreign_files_survive_eviction_and_clear(tmp_path, rng):
    from click.testing import CliRunner

    from mri_recon.cli import main

    foreign = {"measured_microscope.psf": rng.bytes(4096), "notes.lock": b"", "deadbeef.psf.lock": b"mine",
               "MRIRECON-PSF.psf": b"MRIRECON-PSF-2\n\0 but not an entry",
               "claims.psf": struct.pack("<16s128sII8Q", b"MRIRECON-PSF-2\n\0", b"claims", 8, 1, *[2**63] * 8)}
    for name, data in foreign.items():
        (tmp_path / name).write_bytes(data)
        os.utime(tmp_path / name, (1000, 1000))  # the oldest files of the folder
    outside = tmp_path.parent / f"{tmp_path.name}-target.psf"
    outside.write_bytes(b"x" * 100)
    (tmp_path / "link.psf").symlink_to(outside)
    psf = _psf(rng)
    cache = PsfCache(tmp_path, max_bytes=2 * len(psf.tobytes()) + 1000)
    for key in ("a", "b", "c"):
        cache.store(key, psf)
    ours = sorted(p.name for p in tmp_path.iterdir() if p.name in {"a.psf", "b.psf", "c.psf"})
    assert len(ours) == 2 and cache.info().entries == 2
    result = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0 and f"removed 2 file(s) from {tmp_path}" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*foreign, "link.psf"])
    for name, data in foreign.items():
        assert (tmp_path / name).read_bytes() == data
    assert outside.read_bytes() == b"x" * 100


def test_clear_removes_entries_of_the_earlier_format_and_abandoned_locks(tmp_path, rng):
    import json

    payload = _psf(rng).tobytes()
    header = json.dumps({"shape": list(SHAPE), "dtype": "complex64"}).encode()
    old = tmp_path / f"{'e' * 64}.psf"  # written by mri-recon before entries were bound to their keys
    old.write_bytes(b"MRIRECON-PSF-1\n" + len(header).to_bytes(4, "little") + header + payload)
    (tmp_path / f"{'f' * 64}.lock").write_bytes(b"")  # a lock file of that version
    cache = PsfCache(tmp_path)
    assert cache.info().entries == 1
    assert len(cache.clear()) == 2 and list(tmp_path.iterdir()) == []


def test_cache_info_names_a_refused_folder(tmp_path, rng):
    from click.testing import CliRunner

    from mri_recon.cli import main

    PsfCache(tmp_path).store("k", _psf(rng))
    os.chmod(tmp_path, 0o775)
    result = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0 and "entries  1" in result.output
    assert "refused  the folder is writable by group or others (mode 0775)" in result.output


def test_a_psf_of_more_than_eight_dimensions_is_refused(tmp_path):
    from mri_recon.errors import InvalidDataError

    with pytest.raises(InvalidDataError, match="a cached PSF has 1 to 8 dimensions, found 9"):
        PsfCache(tmp_path).store("k", np.zeros((1,) * 9, np.complex64))


def test_a_format_1_entry_nested_too_deeply_is_not_the_caches(tmp_path):
    from mri_recon.io.cache_entry import MAGIC_V1, own_entry

    path = tmp_path / ("0" * 64 + ".psf")
    body = b"[" * 4000
    path.write_bytes(MAGIC_V1 + len(body).to_bytes(4, "little") + body)
    assert own_entry(path) is None  # it was a RecursionError out of the cache's cleanup


def test_a_completion_record_nested_too_deeply_is_unreadable(tmp_path):
    from mri_recon.batch.record import complete, record_path

    output = tmp_path / "a.recon.h5"
    output.write_bytes(b"x")
    record_path(output).write_text("[" * 100_000)
    assert complete(output, tmp_path / "a.h5", {}) == "no completion record"
