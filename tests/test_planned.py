"""The encoding planned once (mri_recon.EncodingOperator) and the plans the one-shot functions keep: adjointness,
agreement with fhd/forward bit for bit, the normal operator against the float64 oracle, cache hits, a trajectory
changed in place, bounds, threads, errors; GPU twins under the marker."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import adjoint_gap

import mri_recon
from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import InvalidDataError, SchemaError, TrajectoryUnitsError
from mri_recon.operators.engines.nudft import nudft_adjoint, nudft_forward
from mri_recon.operators.memo import ENTRIES_VARIABLE

CASES = [((16, 12), 1), ((16, 12), 3), ((7, 6, 5), 2)]
IDS = ["2d-1coil", "2d-3coils", "3d-odd-2coils"]


def rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.complex128), np.asarray(b, dtype=np.complex128)
    assert a.shape == b.shape
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def crandn(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def trajectory(rng, matrix, m):
    return ((rng.random((m, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)


@pytest.fixture(autouse=True)
def fresh_cache():
    mri_recon.plan_cache_clear()
    yield
    mri_recon.plan_cache_clear()


def fresh(monkeypatch, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with the plan cache off: a plan made for this call alone."""
    with monkeypatch.context() as m:
        m.setenv(ENTRIES_VARIABLE, "0")
        return fn(*args, **kwargs)


@pytest.mark.parametrize("method", ["nufft", "exact"])
@pytest.mark.parametrize(("matrix", "coils"), CASES, ids=IDS)
def test_the_operator_is_the_adjoint_of_its_adjoint(rng, matrix, coils, method):
    m = 211
    op = mri_recon.EncodingOperator(trajectory(rng, matrix, m), matrix, coils=coils, device="cpu", method=method)
    assert op.ishape == (coils, *matrix) and op.oshape == (coils, m)
    assert op.name == method and not op.device.is_gpu
    x, y = crandn(rng, coils, *matrix), crandn(rng, coils, m)
    fx, fhy = op(x), op.H(y)
    assert fx.shape == y.shape and fhy.shape == x.shape and fx.dtype == fhy.dtype == np.complex64
    assert adjoint_gap(x, fhy, y, fx) < 1e-5


@pytest.mark.parametrize("method", ["nufft", "exact"])
@pytest.mark.parametrize(("matrix", "coils"), CASES, ids=IDS)
def test_the_operator_gives_the_one_shot_results_bit_for_bit(rng, matrix, coils, method, monkeypatch):
    m = 150
    k = trajectory(rng, matrix, m)
    op = mri_recon.EncodingOperator(k, matrix, coils=coils, device="cpu", method=method)
    x, y = crandn(rng, coils, *matrix), crandn(rng, coils, m)
    assert np.array_equal(op(x), fresh(monkeypatch, mri_recon.forward, x, k, device="cpu", method=method))
    assert np.array_equal(op.H(y), fresh(monkeypatch, mri_recon.fhd, y, k, matrix, device="cpu", method=method))
    assert np.array_equal(op.H(y.astype(np.complex128)), op.H(y))  # any complex precision, made complex64
    assert rel(op.H(y), nudft_adjoint(y, k, matrix)) < 1e-6 and rel(op(x), nudft_forward(x, k)) < 1e-6
    if coils == 1:  # the coil axis may be left out, as in fhd and forward
        assert np.array_equal(op(x[0]), op(x)[0]) and np.array_equal(op.H(y[0]), op.H(y)[0])


def test_the_operator_keeps_its_own_trajectory(rng):
    matrix, m = (12, 10), 90
    k = trajectory(rng, matrix, m)
    y = crandn(rng, 2, m)
    op = mri_recon.EncodingOperator(k, matrix, coils=2, device="cpu", method="exact")
    before = op.H(y)
    k[:] = 0  # the caller's array changes; the operator planned the old one
    assert np.array_equal(op.H(y), before)


def oracle_normal(x, k, w, lam, maps=None):
    """F^H W F x + lam x (per coil image), or sum_c conj(S_c) F^H W F (S_c x) + lam x, in float64."""
    x = x.astype(np.complex128)
    matrix = x.shape[-len(k[0]):] if maps is None else x.shape
    images = x if maps is None else maps.astype(np.complex128) * x
    out = nudft_adjoint(w * nudft_forward(images, k), k, matrix)
    out = out if maps is None else (np.conj(maps) * out).sum(axis=0)
    return out + lam * x


@pytest.mark.parametrize("method", ["nufft", "exact"])
@pytest.mark.parametrize(("matrix", "coils"), CASES, ids=IDS)
def test_the_normal_operator_matches_the_float64_oracle(rng, matrix, coils, method):
    m = 240
    k = trajectory(rng, matrix, m)
    w = rng.random(m).astype(np.float32) + 0.1
    op = mri_recon.EncodingOperator(k, matrix, coils=coils, device="cpu", method=method)
    x = crandn(rng, coils, *matrix)
    lam = float(rng.random() * m)
    normal = op.normal(weights=w, lam=lam)
    assert normal.hermitian and normal.ishape == (coils, *matrix)
    out = normal(x)
    assert out.dtype == np.complex64 and isinstance(out, np.ndarray)
    expected = oracle_normal(x, k, w.astype(np.float64), lam)
    assert rel(out, expected) < 2e-5
    assert rel(op.H(w * op(x)) + np.float32(lam) * x, expected) < 2e-5
    maps = crandn(rng, coils, *matrix)
    sense = op.normal(weights=w, maps=maps, lam=lam, coil_batch=1)
    assert sense.ishape == matrix
    assert rel(sense(x[0]), oracle_normal(x[0], k, w.astype(np.float64), lam, maps)) < 2e-5
    ones = op.normal()(x)
    assert rel(ones, oracle_normal(x, k, np.ones(m), 0.0)) < 2e-5


def test_the_normal_operator_solves_the_sense_problem_with_the_solver(rng):
    from mri_recon.solvers.cg import cg

    matrix, coils, m = (8, 6), 3, 120
    k = trajectory(rng, matrix, m)
    w = rng.random(m) + 0.5
    maps, d = crandn(rng, coils, *matrix), crandn(rng, coils, m)
    lam = 0.3 * m
    op = mri_recon.EncodingOperator(k, matrix, coils=coils, device="cpu", method="exact")
    x, _ = cg(op.normal(w.astype(np.float32), maps=maps, lam=lam), (np.conj(maps) * op.H(w.astype(np.float32) * d)
                                                                   ).sum(axis=0), max_iterations=200, tolerance=1e-7)
    # the oracle: the normal equations written out in float64 and solved directly
    grids = np.meshgrid(*[(np.arange(n) - n // 2) / n for n in matrix], indexing="ij")
    e = np.exp(-2j * np.pi * k.astype(np.float64) @ np.stack([g.reshape(-1) for g in grids]))  # (M, N)
    a = [e * maps[c].reshape(-1).astype(np.complex128) for c in range(coils)]
    lhs = sum(ac.conj().T @ (w[:, None] * ac) for ac in a) + lam * np.eye(e.shape[1])
    rhs = sum(ac.conj().T @ (w * d[c]) for c, ac in enumerate(a))
    assert rel(x.reshape(-1), np.linalg.solve(lhs, rhs)) < 1e-4


def test_the_stable_api_names_the_planned_operator():
    for name in ("EncodingOperator", "plan_cache_info", "plan_cache_clear"):
        assert name in mri_recon.__all__ and callable(getattr(mri_recon, name))
    assert mri_recon.EncodingOperator is mri_recon.operators.EncodingOperator


def test_a_repeated_trajectory_is_planned_once(rng, monkeypatch):
    matrix, m = (14, 12), 120
    k = trajectory(rng, matrix, m)
    d, x = crandn(rng, 3, m), crandn(rng, 2, *matrix)
    first = mri_recon.fhd(d, k, matrix, device="cpu")
    info = mri_recon.plan_cache_info("cpu")
    assert (info.hits, info.misses, info.entries) == (0, 1, 1) and info.bytes >= k.nbytes
    second = mri_recon.fhd(d[:1], k.copy(), matrix, device="cpu")  # another array, the same bits and engine
    assert np.array_equal(second, first[:1])
    mri_recon.forward(x, k, device="cpu")
    assert (mri_recon.plan_cache_info().hits, mri_recon.plan_cache_info().misses) == (2, 1)
    p = mri_recon.psf(k, matrix, device="cpu")
    assert np.array_equal(mri_recon.psf(k, matrix, device="cpu"), p)  # the PSF's own plan, then a hit
    assert (mri_recon.plan_cache_info().hits, mri_recon.plan_cache_info().misses) == (3, 2)
    assert np.array_equal(p, fresh(monkeypatch, mri_recon.psf, k, matrix, device="cpu"))
    mri_recon.fhd(d, k, matrix, device="cpu", method="exact")  # another engine: another plan
    mri_recon.fhd(d, k.astype(np.float64), matrix, device="cpu")  # another dtype: another plan
    assert mri_recon.plan_cache_info().misses == 5  # with the fresh PSF's (the cache off)


def test_a_trajectory_changed_in_place_is_planned_again(rng, monkeypatch):
    matrix, m = (12, 10), 80
    k = trajectory(rng, matrix, m)
    d = crandn(rng, 2, m)
    original = k.copy()
    for method in ("exact", "nufft"):
        mri_recon.fhd(d, k, matrix, device="cpu", method=method)
        k[17, 0] = np.nextafter(k[17, 0], np.float32(0))  # one sample moved by one float32 step
        changed = mri_recon.fhd(d, k, matrix, device="cpu", method=method)
        assert np.array_equal(changed, fresh(monkeypatch, mri_recon.fhd, d, k.copy(), matrix, device="cpu",
                                             method=method))
        # the first plan kept the first trajectory, not the caller's array that has changed since
        again = mri_recon.fhd(d, original, matrix, device="cpu", method=method)
        assert np.array_equal(again, fresh(monkeypatch, mri_recon.fhd, d, original, matrix, device="cpu",
                                           method=method))
        k[:] = original
    info = mri_recon.plan_cache_info()
    assert (info.hits, info.misses) == (2, 8)  # the fresh calls count as misses: the cache was off
    zero = np.zeros((4, 2), dtype=np.float32)
    mri_recon.fhd(d[:, :4], zero, (4, 4), device="cpu")
    mri_recon.fhd(d[:, :4], -zero, (4, 4), device="cpu")  # -0.0 has other bits: not served 0.0's plan
    assert mri_recon.plan_cache_info().misses == 10


def test_the_cache_is_bounded_and_can_be_turned_off(rng, monkeypatch):
    matrix, m = (10, 8), 40
    ks = [trajectory(rng, matrix, m) for _ in range(3)]
    d = crandn(rng, 1, m)
    monkeypatch.setenv(ENTRIES_VARIABLE, "2")
    for k in ks:
        mri_recon.fhd(d, k, matrix, device="cpu")
    assert mri_recon.plan_cache_info("cpu").entries == 2 and mri_recon.plan_cache_info().max_entries == 2
    mri_recon.fhd(d, ks[2], matrix, device="cpu")  # the most recent are kept
    mri_recon.fhd(d, ks[0], matrix, device="cpu")  # the least recent went first
    assert (mri_recon.plan_cache_info().hits, mri_recon.plan_cache_info().misses) == (1, 4)
    monkeypatch.setenv(ENTRIES_VARIABLE, "0")
    mri_recon.plan_cache_clear()
    for _ in range(2):
        mri_recon.fhd(d, ks[1], matrix, device="cpu")
    info = mri_recon.plan_cache_info()
    assert (info.hits, info.misses, info.entries) == (0, 2, 0)


def test_threads_share_the_cache(rng):
    matrix, m = (16, 16), 300
    k = trajectory(rng, matrix, m)
    data = [crandn(rng, 2, m) for _ in range(8)]
    serial = [mri_recon.fhd(d, k, matrix, device="cpu") for d in data]
    mri_recon.plan_cache_clear()
    results: dict[int, np.ndarray] = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, mri_recon.fhd(data[i], k, matrix,
                                                                                         device="cpu")))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(results[i], serial[i]) for i in range(8))
    info = mri_recon.plan_cache_info()
    assert info.hits + info.misses == 8 and info.entries == 1


def test_errors(rng):
    matrix, m = (12, 10), 50
    k = trajectory(rng, matrix, m)
    op = mri_recon.EncodingOperator(k, matrix, coils=2, device="cpu")
    with pytest.raises(InvalidDataError, match="EncodingOperator: coils must be a positive integer, found 0"):
        mri_recon.EncodingOperator(k, matrix, coils=0)
    with pytest.raises(TrajectoryUnitsError, match="EncodingOperator: trajectory reaches"):
        mri_recon.EncodingOperator(3 * k, matrix)
    with pytest.raises(SchemaError, match=r"EncodingOperator: trajectory has D = 2 columns but matrix \[12, 10, 4\]"):
        mri_recon.EncodingOperator(k, (12, 10, 4))
    with pytest.raises(InvalidDataError, match="unknown method 'fast'"):
        mri_recon.EncodingOperator(k, matrix, method="fast")
    with pytest.raises(SchemaError, match=r"EncodingOperator: image must have shape \(2, 12, 10\), found \(12, 10\)"):
        op(crandn(rng, *matrix))
    with pytest.raises(SchemaError, match=r"image must have shape \(2, 12, 10\), found \(3, 12, 10\)"):
        op(crandn(rng, 3, *matrix))
    with pytest.raises(SchemaError, match="EncodingOperator: dataset 'image' must be complex64"):
        op(np.ones((2, *matrix), dtype=np.float32))
    with pytest.raises(SchemaError, match=r"EncodingOperator.H: kspace must have shape \(2, 50\), found \(2, 49\)"):
        op.H(crandn(rng, 2, m - 1))
    bad = crandn(rng, 2, m)
    bad[1, 3] = np.nan
    with pytest.raises(InvalidDataError, match="EncodingOperator.H: dataset 'kspace' contains 1 NaN or Inf"):
        op.H(bad)
    with pytest.raises(InvalidDataError, match=r"EncodingOperator.normal: lam must be a finite number >= 0, found -1"):
        op.normal(lam=-1)
    with pytest.raises(InvalidDataError, match="lam must be a finite number >= 0, found nan"):
        op.normal(lam=float("nan"))
    with pytest.raises(SchemaError, match="EncodingOperator.normal: weights has 49 samples but trajectory has 50"):
        op.normal(weights=np.ones(m - 1, dtype=np.float32))
    with pytest.raises(SchemaError, match=r"EncodingOperator.normal: maps must have shape \(2, 12, 10\)"):
        op.normal(maps=crandn(rng, 1, *matrix))
    with pytest.raises(InvalidDataError, match="coil_batch must be a positive integer, found 0"):
        op.normal(coil_batch=0)
    sense = op.normal(maps=crandn(rng, 2, *matrix))
    with pytest.raises(SchemaError, match=r"EncodingOperator.normal: dataset 'image' must have rank 2"):
        sense(crandn(rng, 2, *matrix))
    with pytest.raises(SchemaError, match=r"normal: image must have shape \(12, 10\), found \(12, 9\)"):
        sense(crandn(rng, 12, 9))


def test_a_kept_plan_still_checks_the_samples(rng):
    matrix, m = (12, 10), 50
    k = trajectory(rng, matrix, m)
    d = crandn(rng, 2, m)
    mri_recon.fhd(d, k, matrix, device="cpu")
    with pytest.raises(SchemaError, match="fhd: trajectory has 50 samples but kspace has 49"):
        mri_recon.fhd(d[:, :-1], k, matrix, device="cpu")
    mri_recon.psf(k, matrix, device="cpu")
    with pytest.raises(SchemaError, match="psf: weights has 49 samples but trajectory has 50"):
        mri_recon.psf(k, matrix, np.ones(m - 1, dtype=np.float32), device="cpu")
    with pytest.raises(TrajectoryUnitsError, match="forward: trajectory reaches"):
        mri_recon.forward(crandn(rng, 4, 4), k, device="cpu")  # another matrix: another key, checked


# ---------------------------------------------------------------------------------------------- GPU twins


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["nufft", "exact"])
@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_gpu_inputs_with_nan_or_inf_are_refused_after_the_work_is_queued(rng, method, device):
    """A CuPy input's finiteness is read after the transform was queued: the same error as for NumPy input,
    every value counted, whichever device the operator is on; finite inputs then give their result."""
    cupy = cupy_module()
    matrix, m = (12, 10), 64
    k = trajectory(rng, matrix, m)
    op = mri_recon.EncodingOperator(k, matrix, coils=2, device=device, method=method)
    y, x = crandn(rng, 2, m), crandn(rng, 2, *matrix)
    y[1, 3], y[0, 5], x[1, 2, 3] = np.nan, np.inf, np.nan
    for call, value, message in ((op.H, y, "EncodingOperator.H: dataset 'kspace' contains 2 NaN or Inf"),
                                 (op, x, "EncodingOperator: dataset 'image' contains 1 NaN or Inf")):
        for kind in (np.asarray, cupy.asarray):
            with pytest.raises(InvalidDataError, match=message):
                call(kind(value))
    y[1, 3], y[0, 5] = 1.0, 2.0
    assert rel(cupy.asnumpy(op.H(cupy.asarray(y))), nudft_adjoint(y, k, matrix)) < 2e-5


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["nufft", "exact"])
@pytest.mark.parametrize(("matrix", "coils"), CASES, ids=IDS)
def test_gpu_operator_adjointness_oracle_and_array_types(rng, matrix, coils, method):
    cupy = cupy_module()
    m = 333
    k = trajectory(rng, matrix, m)
    op = mri_recon.EncodingOperator(cupy.asarray(k), matrix, coils=coils, method=method)
    assert op.device.is_gpu and op.name == method
    x, y = crandn(rng, coils, *matrix), crandn(rng, coils, m)
    fx, fhy = op(cupy.asarray(x)), op.H(cupy.asarray(y))
    assert isinstance(fx, cupy.ndarray) and isinstance(fhy, cupy.ndarray)
    assert adjoint_gap(x, cupy.asnumpy(fhy), y, cupy.asnumpy(fx)) < 1e-5
    assert rel(cupy.asnumpy(fhy), nudft_adjoint(y, k, matrix)) < 2e-5
    assert rel(cupy.asnumpy(fx), nudft_forward(x, k)) < 2e-5
    host = op.H(y)  # NumPy in: uploaded, NumPy out
    assert isinstance(host, np.ndarray) and rel(host, cupy.asnumpy(fhy)) < 1e-6
    one_shot = mri_recon.fhd(cupy.asarray(y), cupy.asarray(k), matrix, method=method)
    if method == "exact":  # deterministic kernels: the same bits
        assert bool(cupy.array_equal(one_shot, fhy))
    else:  # the NUFFT adds its tiles with atomics: equal to float32 rounding
        assert rel(cupy.asnumpy(one_shot), cupy.asnumpy(fhy)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["nufft", "exact"])
def test_gpu_normal_operator_matches_the_float64_oracle(rng, method):
    cupy = cupy_module()
    matrix, coils, m = (20, 18), 3, 500
    k = trajectory(rng, matrix, m)
    w = rng.random(m).astype(np.float32) + 0.1
    op = mri_recon.EncodingOperator(cupy.asarray(k), matrix, coils=coils, method=method)
    x, maps = crandn(rng, coils, *matrix), crandn(rng, coils, *matrix)
    lam = float(rng.random() * m)
    plain = op.normal(weights=cupy.asarray(w), lam=lam)
    assert rel(cupy.asnumpy(plain(cupy.asarray(x))), oracle_normal(x, k, w.astype(np.float64), lam)) < 5e-5
    sense = op.normal(weights=w, maps=cupy.asarray(maps), lam=lam)  # the fused GPU operator
    assert sense.writes_into
    expected = oracle_normal(x[0], k, w.astype(np.float64), lam, maps)
    assert rel(cupy.asnumpy(sense(cupy.asarray(x[0]))), expected) < 5e-5
    out = cupy.empty(matrix, dtype=cupy.complex64)
    sense.apply_into(cupy.asarray(x[0]), out)
    assert rel(cupy.asnumpy(out), expected) < 5e-5
    assert isinstance(sense(x[0]), np.ndarray)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["nufft", "exact"])
def test_gpu_cache_hit_and_trajectory_changed_in_place(rng, method, monkeypatch):
    cupy = cupy_module()
    matrix, m = (24, 20), 400
    k = cupy.asarray(trajectory(rng, matrix, m))
    d = cupy.asarray(crandn(rng, 2, m))
    first = mri_recon.fhd(d, k, matrix, method=method)
    mri_recon.fhd(d, k, matrix, method=method)
    mri_recon.psf(k, matrix, method=method)
    mri_recon.psf(k, matrix, method=method)
    info = mri_recon.plan_cache_info()
    assert (info.hits, info.misses) == (2, 2) and info.bytes > 0
    k[5, 1] *= cupy.float32(0.5)  # in place, on the GPU (enough to show in the exact kernels' fixed point)
    changed = mri_recon.fhd(d, k, matrix, method=method)
    assert mri_recon.plan_cache_info().misses == 3
    expected = fresh(monkeypatch, mri_recon.fhd, d, k.copy(), matrix, method=method)
    if method == "exact":  # deterministic kernels: the same bits as a fresh plan, and the moved sample shows
        assert bool(cupy.array_equal(changed, expected)) and not bool(cupy.array_equal(changed, first))
    else:  # the NUFFT adds its tiles with atomics: equal to float32 rounding
        assert rel(cupy.asnumpy(changed), cupy.asnumpy(expected)) < 1e-6
    k[7, 0] = cupy.nextafter(k[7, 0], cupy.float32(0))  # one float32 step: other bits, another plan
    latest = mri_recon.fhd(d, k, matrix, method=method)
    assert mri_recon.plan_cache_info().misses == 5  # with the fresh call's (the cache off)
    host = mri_recon.fhd(cupy.asnumpy(d), cupy.asnumpy(k), matrix, device="gpu", method=method)
    assert isinstance(host, np.ndarray) and rel(host, cupy.asnumpy(latest)) < 1e-6


@pytest.mark.gpu
def test_gpu_uses_from_two_streams_are_ordered(rng):
    cupy = cupy_module()
    matrix, m = (64, 64), 20000
    k = cupy.asarray(trajectory(rng, matrix, m))
    data = [cupy.asarray(crandn(rng, 4, m)) for _ in range(4)]
    op = mri_recon.EncodingOperator(k, matrix, coils=4, method="nufft")
    serial = [cupy.asnumpy(op.H(d)) for d in data]
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(3)]
    order = [streams[0], streams[0], cupy.cuda.Stream.null, streams[1], streams[0], streams[2], streams[2]]
    outs = []
    for i, s in enumerate(order):  # back to a stream used before, the same stream twice, the null stream
        with s:
            outs.append(op.H(data[i % 4]))
    cupy.cuda.Device().synchronize()
    assert all(rel(cupy.asnumpy(o), serial[i % 4]) < 1e-5 for i, o in enumerate(outs))


@pytest.mark.gpu
def test_gpu_finiteness_is_checked_once_the_input_is_ready(rng):
    """The check runs on a stream of its own, after the work that makes the input on the caller's stream."""
    cupy = cupy_module()
    matrix, m = (64, 64), 50000
    op = mri_recon.EncodingOperator(cupy.asarray(trajectory(rng, matrix, m)), matrix, coils=2, method="nufft")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        y = cupy.asarray(crandn(rng, 2, m))
        op.H(y)
        op.H(y)  # the second call replays the transform
        for _ in range(50):  # queued ahead of the NaN on the caller's stream
            y = y * cupy.complex64(1)
        y[1, m - 1] = cupy.nan
        with pytest.raises(InvalidDataError, match="EncodingOperator.H: dataset 'kspace' contains 1 NaN or Inf"):
            op.H(y)


@pytest.mark.gpu
@pytest.mark.parametrize(("matrix", "coils"), CASES, ids=IDS)
def test_gpu_replayed_transforms_are_the_transforms_call_after_call(rng, matrix, coils, monkeypatch):
    """The GPU NUFFT's transforms, replayed as CUDA graphs from the second call on, give call after call with
    fresh inputs what the one-shot functions give (float32 rounding: the spreading adds with atomics) and the
    float64 sums, each into a new array that is written everywhere."""
    from helpers import poison_empty

    from mri_recon.operators import replay

    cupy = cupy_module()
    poison_empty(monkeypatch, replay)
    captured, real = [], replay.capture
    monkeypatch.setattr(replay, "capture", lambda xp, work: captured.append(1) or real(xp, work))
    m = 333
    k = trajectory(rng, matrix, m)
    op = mri_recon.EncodingOperator(cupy.asarray(k), matrix, coils=coils, method="nufft")
    adjoints, forwards = [], []
    for _ in range(4):
        y, x = crandn(rng, coils, m), crandn(rng, coils, *matrix)
        fhy, fx = op.H(cupy.asarray(y)), op(cupy.asarray(x))
        assert rel(cupy.asnumpy(fhy), nudft_adjoint(y, k, matrix)) < 2e-5
        assert rel(cupy.asnumpy(fx), nudft_forward(x, k)) < 2e-5
        assert rel(cupy.asnumpy(fhy), cupy.asnumpy(mri_recon.fhd(cupy.asarray(y), cupy.asarray(k), matrix,
                                                                   method="nufft"))) < 1e-5
        adjoints.append((y, fhy))
        forwards.append((x, fx))
    assert len(captured) == 2  # F and F^H, each once
    for y, fhy in adjoints:  # earlier results are not overwritten by later calls
        assert rel(cupy.asnumpy(fhy), nudft_adjoint(y, k, matrix)) < 2e-5
    for x, fx in forwards:
        assert rel(cupy.asnumpy(fx), nudft_forward(x, k)) < 2e-5


@pytest.mark.gpu
def test_gpu_transforms_run_as_they_are_where_capture_is_refused(rng, monkeypatch):
    from mri_recon.operators import replay

    cupy = cupy_module()
    monkeypatch.setattr(replay, "capture", lambda xp, work: None)
    matrix, m = (16, 12), 333
    k = trajectory(rng, matrix, m)
    op = mri_recon.EncodingOperator(cupy.asarray(k), matrix, coils=2, method="nufft")
    for _ in range(3):
        y = crandn(rng, 2, m)
        assert rel(cupy.asnumpy(op.H(cupy.asarray(y))), nudft_adjoint(y, k, matrix)) < 2e-5
        assert rel(op.H(y), nudft_adjoint(y, k, matrix)) < 2e-5  # NumPy in, uploaded

