"""Repeated filter calls (issue 10): taps validated and factorized once, plans made once, read-only cached
data. GPU-marked tests check the cached paths on a device (results, uploads on change, no re-reads)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from mri_recon.arrays import backend
from mri_recon.filters import convolve, smooth
from mri_recon.filters import gpu as gpu_filter
from mri_recon.filters import plan as gpu_plan
from mri_recon.filters import taps as filter_taps


def relative_error(result, expected) -> float:
    return float(np.linalg.norm(result - expected) / np.linalg.norm(expected))


def test_equal_numpy_taps_are_validated_once(rng, monkeypatch):
    weights = rng.uniform(0.1, 1.0, (5, 3)).astype(np.float32)
    first = filter_taps.prepare(weights, 2)
    calls = []
    original = filter_taps.check_filter
    monkeypatch.setattr(filter_taps, "check_filter", lambda *a: calls.append(a) or original(*a))
    assert filter_taps.prepare(weights.copy(), 2) is first  # same bytes: the cached Taps, no validation
    assert filter_taps.prepare(weights.astype(np.float64), 2) is not first  # other dtype: its own entry
    assert len(calls) == 1


def test_changed_taps_are_not_taken_from_the_cache(rng):
    weights = rng.uniform(0.1, 1.0, (3, 3)).astype(np.float32)
    first = filter_taps.prepare(weights, 2)
    weights[1, 1] += 1.0  # the same array, new values
    second = filter_taps.prepare(weights, 2)
    assert second is not first and second.dense[1, 1] == weights[1, 1]
    image = rng.standard_normal((9, 9)).astype(np.float32)
    expected = ndimage.correlate(image.astype(np.float64), weights.astype(np.float64), mode="constant")
    assert relative_error(convolve(image, weights, device="cpu"), expected) <= 1e-6


def test_cached_taps_are_read_only_and_factorized_once(rng):
    taps = filter_taps.prepare(np.outer(np.arange(1.0, 4.0), np.ones(5)), 2)
    assert taps.factors is taps.factors and len(taps.factors) == 2
    for array in (taps.dense, *taps.factors):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 0.0
    assert filter_taps.prepare(rng.uniform(0, 1, (3, 3)), 2).factors is None
    gaussian = filter_taps.gaussian(1.5, None, 3)
    assert filter_taps.gaussian(1.5, None, 3) is gaussian and gaussian.from_factors
    returned = filter_taps.gaussian_taps(1.5)
    returned[0] = 99.0  # the caller's copy: the cache is unaffected
    assert filter_taps.gaussian_taps(1.5)[0] != 99.0


def test_taps_need_a_definition():
    with pytest.raises(ValueError, match="Taps needs dense taps or factors"):
        filter_taps.Taps()


def test_plan_taps_are_read_only():
    (launch,) = gpu_plan.plan((20, 20), np.ones((3, 3), np.float32), strategy="register")
    with pytest.raises(ValueError, match="read-only"):
        launch.taps[0] = 2.0


# --- on a GPU ----------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_repeated_calls_reuse_one_plan_and_stay_correct(rng):
    cupy = backend.cupy_module()
    image = rng.standard_normal((70, 132)).astype(np.float32)
    weights = rng.uniform(0.1, 1.0, (5, 5)).astype(np.float32)
    expected = ndimage.correlate(image.astype(np.float64), weights.astype(np.float64), mode="constant")
    d_image = cupy.asarray(image)
    convolve(d_image, weights)
    before = gpu_filter._planned.cache_info()
    for _ in range(3):
        assert relative_error(cupy.asnumpy(convolve(d_image, weights)), expected) <= 1e-6
    after = gpu_filter._planned.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 3


@pytest.mark.gpu
def test_alternating_filters_upload_each_time(rng):
    # two filters of one shape share one compiled module: each call must put its own taps in constant memory
    cupy = backend.cupy_module()
    image = rng.standard_normal((40, 64)).astype(np.float32)
    d_image = cupy.asarray(image)
    filters_ = [rng.uniform(0.1, 1.0, (5, 5)).astype(np.float32) for _ in range(2)]
    outs = [[convolve(d_image, w) for w in filters_] for _ in range(3)]  # queued back to back, no sync
    for row in outs:
        for out, w in zip(row, filters_):
            expected = ndimage.correlate(image.astype(np.float64), w.astype(np.float64), mode="constant")
            assert relative_error(cupy.asnumpy(out), expected) <= 1e-6


@pytest.mark.gpu
def test_cupy_taps_are_read_once_per_array(rng, monkeypatch):
    cupy = backend.cupy_module()
    image = rng.standard_normal((30, 40)).astype(np.float32)
    d_image = cupy.asarray(image)
    weights = rng.uniform(0.1, 1.0, (3, 5)).astype(np.float32)
    d_weights = cupy.asarray(weights)
    first = convolve(d_image, d_weights)
    reads = []
    original = backend.to_host
    monkeypatch.setattr(backend, "to_host", lambda a: reads.append(a) or original(a))
    second = convolve(d_image, d_weights)
    assert reads == []  # the same CuPy filter array: no device-to-host read
    expected = ndimage.correlate(image.astype(np.float64), weights.astype(np.float64), mode="constant")
    for out in (first, second):
        assert relative_error(cupy.asnumpy(out), expected) <= 1e-6
    other = rng.uniform(0.1, 1.0, (3, 5)).astype(np.float32)  # a new array with new values is read
    out = convolve(d_image, cupy.asarray(other))
    assert len(reads) == 1
    expected = ndimage.correlate(image.astype(np.float64), other.astype(np.float64), mode="constant")
    assert relative_error(cupy.asnumpy(out), expected) <= 1e-6


@pytest.mark.gpu
def test_smooth_on_gpu_repeated(rng):
    cupy = backend.cupy_module()
    image = rng.standard_normal((16, 20, 24)).astype(np.float32)
    expected = smooth(image, 1.2, device="cpu")
    d_image = cupy.asarray(image)
    for _ in range(3):
        assert relative_error(cupy.asnumpy(smooth(d_image, 1.2)), expected) <= 1e-6
