"""Post-filter on the CPU: scipy.ndimage.correlate semantics, Gaussian taps, validation, GPU launch plans."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import ndimage

from mri_recon import filters
from mri_recon.errors import DeviceError, FilterError, InvalidDataError, ResourceError
from mri_recon.filters import convolve, gaussian_taps, gaussian_weights, separable_factors, smooth
from mri_recon.filters import gpu as gpu_filter
from mri_recon.filters import plan as gpu_plan
from mri_recon.filters import taps as filter_taps
from mri_recon.kernels import compile_ptx

SCIPY_MODE = {"zero": "constant", "nearest": "nearest"}


def reference(image: np.ndarray, weights: np.ndarray, mode: str) -> np.ndarray:
    """scipy.ndimage.correlate in double precision (complex: real and imaginary parts)."""
    w = np.asarray(weights, dtype=np.float64)
    if np.iscomplexobj(image):
        return reference(image.real, w, mode) + 1j * reference(image.imag, w, mode)
    return ndimage.correlate(np.asarray(image, dtype=np.float64), w, mode=SCIPY_MODE[mode], cval=0.0)


def relative_error(result: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(result - expected) / np.linalg.norm(expected))


# --- correlation semantics -------------------------------------------------------------------------------

def test_seed_example_1d():
    out = convolve(np.array([4, 1, 3, 2, 3], np.float32), np.array([2, 1, 4], np.float32), device="cpu")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [8, 21, 13, 20, 7])


def test_correlation_does_not_flip(rng):
    image = np.zeros(7, np.float32)
    image[3] = 1.0
    taps = rng.uniform(0.1, 1.0, 3).astype(np.float32)
    # an impulse correlated with F returns F reversed around the impulse (convolution would return F)
    np.testing.assert_allclose(convolve(image, taps, device="cpu")[2:5], taps[::-1], rtol=1e-7)


@pytest.mark.parametrize("mode", ["zero", "nearest"])
@pytest.mark.parametrize("shape, fshape", [((13, 17), (3, 5)), ((5, 6, 7), (3, 1, 5)), ((9,), (7,)), ((1, 9), (15, 3))],
                         ids=["2d", "3d", "1d", "1xN"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_convolve_matches_scipy(rng, mode, shape, fshape, dtype):
    image = rng.standard_normal(shape).astype(np.float32)
    if dtype == np.complex64:
        image = (image + 1j * rng.standard_normal(shape)).astype(np.complex64)
    weights = rng.uniform(-1.0, 1.0, fshape).astype(np.float32)
    out = convolve(image, weights, mode=mode, device="cpu")
    assert out.dtype == dtype and out.shape == shape
    assert relative_error(out, reference(image, weights, mode)) <= 1e-6


def test_inputs_are_cast_and_types_kept(rng):
    ints = rng.integers(0, 10, (6, 6))
    assert convolve(ints, np.ones((3, 3)), device="cpu").dtype == np.float32
    wide = rng.standard_normal((6, 6)) + 1j * rng.standard_normal((6, 6))
    out = smooth(wide, 1.0, device="cpu")
    assert isinstance(out, np.ndarray) and out.dtype == np.complex64


# --- Gaussian taps and separability ----------------------------------------------------------------------

@pytest.mark.parametrize("sigma, radius", [(0.5, None), (1.0, None), (2.0, 3), (10.0, None), (0.7, 0)])
def test_gaussian_taps(sigma, radius):
    taps = gaussian_taps(sigma, radius)
    r = filters.default_radius(sigma) if radius is None else radius
    assert taps.dtype == np.float32 and taps.shape == (2 * r + 1,)
    assert abs(float(taps.astype(np.float64).sum()) - 1.0) <= 1e-6
    x = np.arange(-r, r + 1)
    expected = np.exp(-(x**2) / (2 * sigma**2))
    np.testing.assert_allclose(taps, expected / expected.sum(), rtol=1e-6)
    np.testing.assert_array_equal(taps, taps[::-1])


def test_default_radius_is_scipy_truncate_four():
    # scipy.ndimage.gaussian_filter: radius = int(truncate * sigma + 0.5), truncate = 4
    sigmas = (0.1, 0.5, 1.0, 2.0, 2.4, 5.0, 6.1)
    assert [filters.default_radius(s) for s in sigmas] == [int(4.0 * s + 0.5) for s in sigmas]
    assert [filters.default_radius(s) for s in sigmas] == [0, 2, 4, 8, 10, 20, 24]


def test_gaussian_weights_is_separable_and_normalized():
    weights = gaussian_weights((1.0, 2.0, 0.5), ndim=3)
    assert weights.shape == (9, 17, 5)  # radii int(4 sigma + 0.5)
    assert abs(float(weights.astype(np.float64).sum()) - 1.0) <= 1e-6
    factors = separable_factors(weights)
    assert factors is not None and [f.size for f in factors] == [9, 17, 5]
    rebuilt = filters.outer_product(factors, np.float64)
    assert np.max(np.abs(rebuilt - weights)) <= 1e-7 * np.max(weights)


def test_non_separable_filter_is_detected(rng):
    assert separable_factors(rng.uniform(-1, 1, (5, 5)).astype(np.float32)) is None
    assert separable_factors(np.zeros((3, 3), np.float32)) is None
    assert len(separable_factors(np.ones(5, np.float32))) == 1


@pytest.mark.parametrize("mode", ["zero", "nearest"])
def test_smooth_equals_correlation_with_gaussian_weights(rng, mode):
    image = rng.standard_normal((10, 12, 14)).astype(np.float32)
    out = smooth(image, (0.8, 1.2, 0.6), mode=mode, device="cpu")
    weights = gaussian_weights((0.8, 1.2, 0.6), ndim=3)
    assert relative_error(out, reference(image, weights, mode)) <= 1e-6


def test_smooth_preserves_constants_with_nearest(rng):
    level = float(rng.uniform(1, 5))
    out = smooth(np.full((20, 20), level, np.float32), 1.5, mode="nearest", device="cpu")
    np.testing.assert_allclose(out, level, rtol=1e-6)


# --- validation ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("weights, match", [
    (np.ones((4, 3)), r"even size 4 along axis 0: expected odd sizes"),
    (np.ones((3, 3, 3)), r"filter of rank 3 .* for a 2-D image: expected a 2-D filter"),
    (np.ones((3, 3), np.complex64), r"filter dtype complex64: expected real taps"),
    (np.array([["a", "b", "c"]]), r"filter dtype <U1: expected real numbers"),
    (np.array([[1.0, np.nan, 1.0]]), r"1 NaN or Inf tap\(s\)"),
    (np.array([[1.0, 1e39, 1.0]]), r"1 NaN or Inf tap\(s\) \(as float32\)"),
])
def test_bad_filters(weights, match):
    with pytest.raises(FilterError, match=match):
        convolve(np.ones((8, 8), np.float32), weights, device="cpu")


def test_oversized_filter_names_constant_memory_bytes(rng):
    weights = rng.uniform(0.1, 1.0, (31, 31, 31)).astype(np.float32)  # not separable
    with pytest.raises(FilterError, match=r"its 119164 bytes would not fit the 65536-byte __constant__ memory"):
        gpu_plan.plan((4, 4, 4), weights)


@pytest.mark.parametrize("sigma, radius, match", [
    (0.0, None, r"sigma must be finite and > 0; found 0.0"),
    (-1.0, None, r"sigma must be finite and > 0; found -1.0"),
    (float("nan"), None, r"sigma must be finite and > 0; found nan"),
    ("wide", None, r"sigma must be a number; found 'wide'"),
    ((1.0, 2.0, 3.0), None, r"sigma has 3 values for a 2-D image: expected 1 or 2"),
    (1.0, -1, r"radius must be an integer >= 0; found -1"),
    (1.0, 2.5, r"radius must be an integer >= 0; found 2.5"),
    (1.0, (1, 2, 3), r"radius has 3 values for a 2-D image: expected 1 or 2"),
])
def test_bad_smoothing_parameters(sigma, radius, match):
    with pytest.raises(FilterError, match=match):
        smooth(np.ones((8, 8), np.float32), sigma, radius=radius, device="cpu")


def test_gaussian_taps_rejects_bad_radius():
    with pytest.raises(FilterError, match=r"radius must be an integer >= 0; found -3"):
        gaussian_taps(1.0, -3)


def test_unknown_mode():
    with pytest.raises(FilterError, match=r"unknown boundary mode 'reflect': expected 'zero' or 'nearest'"):
        convolve(np.ones((8, 8), np.float32), np.ones((3, 3)), mode="reflect", device="cpu")


@pytest.mark.parametrize("image, match", [
    (np.ones((2, 2, 2, 2)), r"image has rank 4 .*: expected a 1-D, 2-D or 3-D image"),
    (np.ones((0, 5)), r"image of shape \(0, 5\) is empty"),
    (np.array([["x"]]), r"image dtype <U1: expected float32 or complex64"),
])
def test_bad_images(image, match):
    with pytest.raises(InvalidDataError, match=match):
        smooth(image, 1.0, device="cpu")


# --- GPU launch plans (pure Python: geometry checked without a GPU) ---------------------------------------

def _covers(launch: gpu_plan.Launch) -> bool:
    nz, ny, nx = launch.view
    oz, oy, ox = launch.out_tile
    gx, gy, gz = launch.grid
    return gx // launch.batch * ox >= nx and gy * oy >= ny and gz * oz >= nz and gx % launch.batch == 0


@pytest.mark.parametrize("strategy", ["A", "B", "register", "separable"])
@pytest.mark.parametrize("shape", [(5,), (1, 300), (300, 1), (70, 33), (9, 30, 65)], ids=str)
def test_plans_cover_the_image(strategy, shape, rng):
    radius = 2
    factors = [rng.uniform(0.1, 1, 2 * radius + 1).astype(np.float32) for _ in shape]
    launches = gpu_plan.plan(shape, filters.outer_product(factors), strategy=strategy, factors=factors)
    assert len(launches) == (len(shape) if strategy == "separable" else 1)
    for launch in launches:
        assert _covers(launch)
        assert math.prod(launch.view) * launch.batch == math.prod(shape)
        assert math.prod(launch.block) <= gpu_plan.MAX_THREADS
        assert launch.shared_bytes <= gpu_plan.SHARED_LIMIT_BYTES
        assert launch.taps.size == math.prod(2 * r + 1 for r in launch.radii)


def test_register_plan_runs_2d_rows_as_the_blocked_axis():
    (launch,) = gpu_plan.plan((40, 50), np.ones((5, 3), np.float32), strategy="register")
    assert launch.view == (40, 1, 50) and launch.radii == (2, 0, 1)
    assert launch.out_tile == (64, 1, 32) and launch.in_tile == (68, 1, 34)


def test_strategy_a_tiles():
    assert gpu_plan.tile_a((0, 2, 2), 2) == (32, 32, 1)
    in_x, in_y, in_z = gpu_plan.tile_a((1, 1, 1), 3)
    assert in_x * in_y * in_z <= 1024 and min(in_x, in_y, in_z) >= 3
    with pytest.raises(FilterError, match=r"strategy 'A' cannot tile radii .* \(5, 5, 5\) in 3-D"):
        gpu_plan.plan((20, 20, 20), np.ones((11, 11, 11), np.float32), strategy="A")


def test_separable_folds_single_taps_into_one_pass():
    factors = [np.array([2.0], np.float32), np.array([1.0, 3.0, 1.0], np.float32)]
    (launch,) = gpu_plan.plan((10, 10), filters.outer_product(factors), strategy="separable", factors=factors)
    np.testing.assert_allclose(launch.taps, [2.0, 6.0, 2.0])
    assert launch.radii == (0, 0, 1)


def test_auto_strategy_rule():
    assert gpu_plan.choose_strategy((512, 512, 512), (2, 2, 2), separable=True) == "separable"
    assert gpu_plan.choose_strategy((256, 256, 256), (1, 1, 1), separable=True) == "register"
    assert gpu_plan.choose_strategy((8192, 8192), (7, 7), separable=True) == "separable"
    assert gpu_plan.choose_strategy((8192, 8192), (2, 2), separable=True) == "register"
    assert gpu_plan.choose_strategy((8192, 8192), (7, 7), separable=False) == "register"
    assert gpu_plan.choose_strategy((64, 64), (7, 7), separable=True) == "register"
    assert gpu_plan.choose_strategy((8192, 8192), (2, 2), separable=True, streamable=True) == "stream"
    assert gpu_plan.choose_strategy((8192, 8192), (7, 7), separable=True, streamable=True) == "separable"
    assert gpu_plan.choose_strategy((8192, 8192), (3, 3), separable=False, streamable=True) == "register"


def test_stream_plans():
    five = np.ones((5, 5), np.float32)
    (launch,) = gpu_plan.plan((8192, 8192), five)
    assert launch.strategy == "stream"
    rows, width = gpu_plan.STREAM_ROWS, 32 * gpu_plan.STREAM_WARPS * 4
    assert launch.out_tile == (1, rows, width)
    assert launch.grid == (8192 // width, 8192 // rows, 1) and launch.block == (width // 4, 1, 1)
    (launch,) = gpu_plan.plan((3, 70, 132), np.ones((1, 3, 3), np.float32), strategy="stream")
    assert launch.grid == (1, -(-70 // gpu_plan.STREAM_ROWS), 3)  # planes on the grid's z axis
    (launch,) = gpu_plan.plan((64, 64), five, complex_=True, strategy="stream")
    assert launch.out_tile[2] == 32 * gpu_plan.STREAM_WARPS * 2
    # auto takes the register kernel when streaming does not fit
    assert gpu_plan.plan((8192, 8190), five)[0].strategy == "register"
    assert gpu_plan.plan((8192, 8192), five, aligned=False)[0].strategy == "register"
    assert gpu_plan.plan((64, 64), np.ones((9, 9), np.float32))[0].strategy == "register"
    assert gpu_plan.plan((64, 64), five, complex_=True)[0].strategy == "register"
    refusals = [((64, 62), five, False, "multiple of 4 elements"),
                ((64, 64), np.ones((9, 9), np.float32), False, "radius is at most 3"),
                ((64, 64), np.ones((3, 7), np.float32), True, "x radius is at most 2"),
                ((8, 64, 64), np.ones((3, 3, 3), np.float32), False, "2-D planes only")]
    for shape, weights, complex_, reason in refusals:
        with pytest.raises(FilterError, match=f"strategy 'stream' cannot filter .*{reason}"):
            gpu_plan.plan(shape, weights, complex_=complex_, strategy="stream")
    with pytest.raises(FilterError, match="not 16-byte aligned"):
        gpu_plan.plan((64, 64), five, strategy="stream", aligned=False)


def test_plan_errors():
    weights = np.ones((3, 3), np.float32)
    with pytest.raises(FilterError, match=r"unknown strategy 'C': expected one of auto, A, B"):
        gpu_plan.plan((8, 8), weights, strategy="C")
    with pytest.raises(FilterError, match=r"strategy 'separable' needs a filter that is an outer product"):
        gpu_plan.plan((8, 8), weights, strategy="separable", factors=None)
    with pytest.raises(ResourceError, match=r"needs a grid of .* at most 65535 blocks along y and z"):
        gpu_plan.plan((3_000_000, 2), weights, strategy="A")


def test_check_factors():
    weights = filters.outer_product([np.ones(3), np.arange(1.0, 6.0)])
    assert len(filter_taps.check_factors([np.ones(3), np.arange(1.0, 6.0)], weights)) == 2
    with pytest.raises(FilterError, match=r"factors of lengths \(3,\) for a filter of shape \(3, 5\)"):
        filter_taps.check_factors([np.ones(3)], weights)
    with pytest.raises(FilterError, match=r"separable factors do not multiply to the filter"):
        filter_taps.check_factors([np.ones(3), np.ones(5)], weights)


def test_shared_memory_limit():
    (launch,) = gpu_plan.plan((20, 20, 20), np.ones((15, 15, 15), np.float32), strategy="register")
    assert gpu_plan.STATIC_SHARED_BYTES < launch.shared_bytes <= gpu_plan.SHARED_LIMIT_BYTES
    gpu_plan.check_shared_memory(launch.name, launch.shared_bytes, 232448)  # H100 / H200
    with pytest.raises(ResourceError, match=r"needs \d+ bytes of shared memory per block; this GPU allows 65536"):
        gpu_plan.check_shared_memory(launch.name, launch.shared_bytes, 65536)  # Turing


def test_gpu_correlate_needs_a_cupy_array():
    with pytest.raises(DeviceError, match=r"needs a CuPy array; found ndarray"):
        gpu_filter.correlate(np.ones((4, 4), np.float32), np.ones((3, 3)))


def test_kernel_configurations_compile():
    configurations = gpu_filter.compile_configurations()
    assert len({tuple(sorted(d.items())) for _, d in configurations}) == len(configurations)
    variants = {d["VARIANT"] for _, d in configurations}
    assert variants == {0, 1, 2, 3}
    # one of each kernel family here; every configuration is compiled by tests/test_kernels_compile.py, whose
    # registry holds this list (tests/test_kernel_registry.py)
    for variant in sorted(variants):
        filename, defines = next((f, d) for f, d in configurations if d["VARIANT"] == variant and d["RX"] == 2)
        assert ".entry mri_recon_conv_" in compile_ptx(filename, defines)
