"""The PSF cache shared by several processes: one computes a missing entry while the others wait and read it,
concurrent writers never leave a corrupt entry, and a process killed while holding a lock blocks nobody."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import numpy as np
import pytest

from mri_recon.io.cache import PsfCache

SHAPE = (16, 12)
_CTX = multiprocessing.get_context("fork")


def _array(seed: int) -> np.ndarray:
    gen = np.random.default_rng(seed)
    return (gen.standard_normal(SHAPE) + 1j * gen.standard_normal(SHAPE)).astype(np.complex64)


def _fill_worker(folder, key, seed, counter, out, start):
    start.wait()

    def compute():
        with open(counter, "a") as f:  # one line per computation
            f.write(f"{os.getpid()}\n")
        time.sleep(0.4)  # long enough that the others arrive while it runs
        return _array(seed)

    psf, state = PsfCache(folder).fill(key, SHAPE, compute)
    np.save(out, psf)
    with open(f"{out}.state", "w") as f:
        f.write(state)


def test_several_processes_compute_a_missing_entry_once(tmp_path, rng):
    seed, n = int(rng.integers(2**31)), 4
    counter = tmp_path / "computed.txt"
    start = _CTX.Event()
    procs = [_CTX.Process(target=_fill_worker, args=(tmp_path / "cache", "k", seed, counter,
                                                     tmp_path / f"out{i}.npy", start)) for i in range(n)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(counter.read_text().split()) == 1
    expected = _array(seed)
    states = sorted((tmp_path / f"out{i}.npy.state").read_text() for i in range(n))
    assert states == ["hit"] * (n - 1) + ["miss"]
    for i in range(n):
        assert np.load(tmp_path / f"out{i}.npy").tobytes() == expected.tobytes()
    assert PsfCache(tmp_path / "cache").load("k", SHAPE).tobytes() == expected.tobytes()


def _store_worker(folder, seed, rounds, start):
    start.wait()
    cache, psf = PsfCache(folder), _array(seed)
    for _ in range(rounds):
        cache.store("k", psf)


def test_concurrent_writers_and_readers_never_see_a_corrupt_entry(tmp_path, rng):
    seeds = [int(s) for s in rng.integers(2**31, size=4)]
    allowed = {_array(s).tobytes() for s in seeds}
    start = _CTX.Event()
    procs = [_CTX.Process(target=_store_worker, args=(tmp_path, s, 40, start)) for s in seeds]
    for p in procs:
        p.start()
    start.set()
    cache, seen = PsfCache(tmp_path), 0
    while any(p.is_alive() for p in procs):
        found = cache.load("k", SHAPE)
        if found is not None:
            assert found.tobytes() in allowed
            seen += 1
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    final = cache.load("k", SHAPE)
    assert final is not None and final.tobytes() in allowed
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


def _hold_lock_forever(folder, ready):
    def compute():
        ready.set()
        time.sleep(600)

    PsfCache(folder).fill("k", SHAPE, compute)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_process_killed_while_computing_releases_its_lock(tmp_path, rng):
    ready = _CTX.Event()
    holder = _CTX.Process(target=_hold_lock_forever, args=(tmp_path, ready))
    holder.start()
    assert ready.wait(30)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    seed = int(rng.integers(2**31))
    started = time.perf_counter()
    psf, state = PsfCache(tmp_path).fill("k", SHAPE, lambda: _array(seed))
    assert state == "miss" and psf.tobytes() == _array(seed).tobytes()
    assert time.perf_counter() - started < 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.psf"]  # the killed holder's lock file went too


def test_lock_file_goes_with_the_computation_and_clear_removes_a_stray_one(tmp_path, rng):
    cache = PsfCache(tmp_path)
    psf, state = cache.fill("k", SHAPE, lambda: _array(int(rng.integers(2**31))))
    assert state == "miss" and sorted(p.name for p in tmp_path.iterdir()) == ["k.psf"]
    again, state = cache.fill("k", SHAPE, lambda: pytest.fail("an entry present is not computed again"))
    assert state == "hit" and again.tobytes() == psf.tobytes()
    (tmp_path / "other.psf.lock").write_bytes(b"")  # left by a process killed while computing
    cache.clear()
    assert list(tmp_path.iterdir()) == []


def test_no_lock_file_remains_after_a_concurrent_fill(tmp_path, rng):
    # four workers arrive while the entry is computed (they wait on its lock), three more once it is stored
    seed = int(rng.integers(2**31))
    counter, folder = tmp_path / "computed.txt", tmp_path / "cache"
    starts = [_CTX.Event(), _CTX.Event()]
    procs = [_CTX.Process(target=_fill_worker, args=(folder, "k", seed, counter, tmp_path / f"out{i}.npy",
                                                     starts[i // 4])) for i in range(7)]
    for p in procs:
        p.start()
    starts[0].set()
    for p in procs[:4]:
        p.join(60)
    starts[1].set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(counter.read_text().split()) == 1
    assert sorted(p.name for p in folder.iterdir()) == ["k.psf"]
    for i in range(7):
        assert np.load(tmp_path / f"out{i}.npy").tobytes() == _array(seed).tobytes()


def test_a_hit_under_the_lock_leaves_no_lock_file(tmp_path, rng):
    cache = PsfCache(tmp_path)
    cache.store("k", _array(int(rng.integers(2**31))))
    _, state = cache.fill("k", SHAPE, lambda: pytest.fail("an entry present is not computed again"))
    assert state == "hit" and sorted(p.name for p in tmp_path.iterdir()) == ["k.psf"]
