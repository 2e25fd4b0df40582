"""The on-device memo of the last trajectory's encoding and spectrum (mri_recon.operators.memo)."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.io.cache import PsfCache
from mri_recon.operators.memo import LIMIT_VARIABLE, memo_limit, spectrum_memo
from mri_recon.pipeline import reconstruct
from mri_recon.sim.simulate import simulate_scan


def rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


class _FakeDevice:
    index = 0
    is_gpu = True


def test_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv(LIMIT_VARIABLE, "12345")
    assert memo_limit(_FakeDevice()) == 12345
    monkeypatch.setenv(LIMIT_VARIABLE, "0")
    assert memo_limit(_FakeDevice()) == 0


def test_lookup_serves_only_the_same_inputs_and_a_miss_frees_the_entry(monkeypatch):
    from mri_recon.operators import memo as memo_module

    monkeypatch.setattr(memo_module, "memo_limit", lambda device: 1 << 30)
    monkeypatch.delenv(LIMIT_VARIABLE, raising=False)
    rng = np.random.default_rng()
    k, w = rng.standard_normal((50, 2)).astype(np.float32), rng.random(50).astype(np.float32)
    memo = memo_module.SpectrumMemo(_FakeDevice())
    assert memo.store("nufft-gpu", (8, 8), k, w, "encoding", "spectrum")
    assert memo.lookup("nufft-gpu", (8, 8), k.copy(), w.copy()) == ("encoding", "spectrum")
    monkeypatch.setenv(LIMIT_VARIABLE, "0")
    assert memo.lookup("nufft-gpu", (8, 8), k, w) is None  # switched off: not served, and kept
    monkeypatch.delenv(LIMIT_VARIABLE)
    assert memo.lookup("nufft-gpu", (8, 8), k, w) == ("encoding", "spectrum")
    moved, signed = k.copy(), w.copy()
    moved[3, 1] = np.nextafter(moved[3, 1], np.float32(1))
    w[7], signed[7] = 0.0, -0.0  # equal values, other bits: a miss
    memo.store("nufft-gpu", (8, 8), k, w, "encoding", "spectrum")
    for args in (("nufft-gpu", (8, 8), moved, w), ("nufft-gpu", (8, 8), k, signed), ("exact-gpu", (8, 8), k, w),
                 ("nufft-gpu", (8, 9), k, w)):
        memo.store("nufft-gpu", (8, 8), k, w, "encoding", "spectrum")
        assert memo.lookup(*args) is None
        assert memo.lookup("nufft-gpu", (8, 8), k, w) is None  # the miss freed the entry


@pytest.fixture(scope="module")
def scan():
    return simulate_scan((40, 36), "golden", coils=4, spokes=40, samples=80, snr=40.0, seed=11, dcf="pipe")


def _run(scan, method, cache):
    return reconstruct(scan, iterations=8, tol=0.0, device="gpu", method=method, progress=False, psf_cache=cache)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["nufft", "exact"])
def test_a_repeated_trajectory_reuses_the_spectrum_and_gives_the_same_image(scan, method, tmp_path):
    cache = PsfCache(tmp_path)
    first = _run(scan, method, cache)
    second = _run(scan, method, cache)
    assert first.parameters["psf"] != "memory" and second.parameters["psf"] == "memory"
    no_cache = reconstruct(scan, iterations=8, tol=0.0, device="gpu", method=method, progress=False)
    assert no_cache.parameters["psf"] == "memory"  # the memo serves calls without a disk cache too
    if method == "exact":  # deterministic kernels: the same bits
        assert np.array_equal(first.image, second.image) and np.array_equal(no_cache.image, first.image)
    else:  # the NUFFT adds subproblem tiles to the fine grid with atomics: equal to float32 rounding
        assert rel(second.image, first.image) <= 1e-5 and rel(no_cache.image, first.image) <= 1e-5


@pytest.mark.gpu
def test_another_trajectory_or_weights_or_engine_is_not_served(scan, tmp_path):
    cache = PsfCache(tmp_path)
    _run(scan, "nufft", cache)
    moved = scan.trajectory.copy()
    moved[17, 0] = np.nextafter(moved[17, 0], np.float32(0))  # one sample moved by one float32 step
    changed = [scan.replace(trajectory=moved), scan.replace(weights=scan.weights * np.float32(0.75) + 0.125)]
    for other in changed:
        assert _run(other, "nufft", cache).parameters["psf"] != "memory"
        assert _run(scan, "nufft", cache).parameters["psf"] != "memory"  # the entry was replaced
    assert _run(scan, "exact", cache).parameters["psf"] != "memory"  # another engine


@pytest.mark.gpu
def test_limit_zero_turns_the_memo_off(scan, tmp_path, monkeypatch):
    monkeypatch.setenv(LIMIT_VARIABLE, "0")
    cache = PsfCache(tmp_path)
    runs = [_run(scan, "nufft", cache) for _ in range(2)]
    assert [r.parameters["psf"] for r in runs] == ["computed (disk cache not used by the GPU NUFFT)"] * 2
    from mri_recon.arrays.backend import resolve_device

    assert spectrum_memo(resolve_device("gpu")).lookup("nufft-gpu", scan.matrix, None, None) is None


def test_one_lock_per_gpu_shared_by_every_thread():
    import threading

    from mri_recon.pipeline import gpu_lock

    seen = []
    threads = [threading.Thread(target=lambda: seen.append(gpu_lock(7))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(lock) for lock in seen}) == 1 and gpu_lock(7) is seen[0] and gpu_lock(6) is not seen[0]
    with gpu_lock(7), gpu_lock(7):  # re-entrant: a reconstruction may call another on the same thread
        pass


FAKE_GPU = 97
"""A device index no machine has: what the fake device keeps cannot be served to a real GPU."""


def test_one_clear_frees_the_memo_the_plans_the_device_copies_and_the_fft_plans(monkeypatch):
    import contextlib
    import types

    import mri_recon
    from mri_recon.operators import memo as memo_module
    from mri_recon.operators.gpu import fft as gpu_fft
    from mri_recon.operators.gpu import launch

    fake_cupy = types.SimpleNamespace(asarray=np.asarray,
                                      cuda=types.SimpleNamespace(Device=lambda index: contextlib.nullcontext()))
    monkeypatch.setattr(launch, "cupy_module", lambda: fake_cupy)  # device copies made by NumPy
    monkeypatch.setattr(memo_module, "CACHES", memo_module.DeviceCaches())
    monkeypatch.setattr(memo_module, "memo_limit", lambda device: 1 << 30)
    monkeypatch.delenv(LIMIT_VARIABLE, raising=False)
    fake = type("FakeGpu", (), {"index": FAKE_GPU, "is_gpu": True})()
    rng = np.random.default_rng(5)
    k, w = ((rng.random((60, 2)) - 0.5) * 8).astype(np.float32), rng.random(60).astype(np.float32)
    try:
        assert set(memo_module.CACHES.held().values()) == {0}
        assert spectrum_memo(fake).store("nufft-gpu", (8, 8), k, w, "encoding", "spectrum")
        mri_recon.fhd(np.ones((1, 60), np.complex64), k, (8, 8), device="cpu")
        launch.on_device("lines", (8, 8), 0, FAKE_GPU)
        gpu_fft._LARGE[((2, 8, 8), FAKE_GPU, False)] = "a plan"
        assert memo_module.CACHES.held() == {"memo entries": 1, "plans": 1, "device copies": 1, "cufft plans": 1}
        mri_recon.plan_cache_clear()
        assert memo_module.CACHES.held() == {"memo entries": 0, "plans": 0, "device copies": 0, "cufft plans": 0}
        assert spectrum_memo(fake).lookup("nufft-gpu", (8, 8), k, w) is None
        info = mri_recon.plan_cache_info("cpu")
        assert (info.hits, info.misses, info.entries, info.bytes) == (0, 0, 0, 0)
    finally:
        launch.on_device.cache_clear()
        gpu_fft._LARGE.pop(((2, 8, 8), FAKE_GPU, False), None)


@pytest.mark.gpu
def test_gpu_one_clear_frees_what_the_gpu_keeps(scan, tmp_path):
    import gc

    import cupy

    import mri_recon
    from mri_recon.operators.memo import CACHES

    mri_recon.plan_cache_clear()
    gc.collect()
    pool = cupy.get_default_memory_pool()
    before = pool.used_bytes()
    for method in ("exact", "nufft"):  # the exact launchers' device copies, the NUFFT's plans and cuFFT plans
        _run(scan, method, PsfCache(tmp_path))
        mri_recon.fhd(cupy.asarray(scan.kspace), cupy.asarray(scan.trajectory), scan.matrix, method=method,
                      device="gpu")
    held = CACHES.held()
    assert held["memo entries"] == 1 and held["plans"] == 2 and held["device copies"] >= 1 and held["cufft plans"]
    mri_recon.plan_cache_clear()
    gc.collect()
    assert set(CACHES.held().values()) == {0}
    assert pool.used_bytes() <= before  # nothing kept holds device memory any more
