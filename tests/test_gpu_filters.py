"""GPU post-filter: every strategy equals scipy.ndimage.correlate and writes every output.

Outputs are filled with NaN before the launch, so a tile that a kernel forgets stays NaN. Sizes straddle the
output tile of each strategy (tile - 1, tile, tile + 1), plus 1 x N and N x 1. Filters are positive so that
the relative error measures rounding, not cancellation. The first run compiles about 90 kernel variants
(CuPy caches them on disk for later runs).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from mri_recon import filters
from mri_recon.arrays import backend
from mri_recon.arrays.backend import Device
from mri_recon.errors import FilterError, InvalidDataError
from mri_recon.filters import convolve, smooth
from mri_recon.filters import gpu as gpu_filter
from mri_recon.filters import plan as gpu_plan

pytestmark = pytest.mark.gpu

STRATEGIES = ("A", "B", "register", "separable")
TOLERANCE = 1e-6


def reference(image, weights, mode):
    """scipy.ndimage.correlate in double precision (complex: real and imaginary parts)."""
    w = np.asarray(weights, dtype=np.float64)
    if np.iscomplexobj(image):
        return reference(image.real, w, mode) + 1j * reference(image.imag, w, mode)
    scipy_mode = {"zero": "constant", "nearest": "nearest"}[mode]
    return ndimage.correlate(np.asarray(image, dtype=np.float64), w, mode=scipy_mode, cval=0.0)


def relative_error(result, expected):
    return float(np.linalg.norm(result - expected) / np.linalg.norm(expected))


def random_image(rng, shape, complex_=False):
    image = rng.standard_normal(shape).astype(np.float32)
    if complex_:
        image = (image + 1j * rng.standard_normal(shape)).astype(np.complex64)
    return image


def random_filter(rng, fshape, separable):
    """Positive taps; for the separable strategy an outer product, returned with its factors."""
    if separable:
        factors = [rng.uniform(0.1, 1.0, n).astype(np.float32) for n in fshape]
        return filters.outer_product(factors), factors
    return rng.uniform(0.1, 1.0, fshape).astype(np.float32), None


def run_poisoned(strategy, image, weights, factors, mode):
    """Correlate on the GPU into a NaN-filled output; fail if any output stays NaN."""
    cupy = backend.cupy_module()
    out = cupy.full(image.shape, np.nan, dtype=image.dtype)
    result = gpu_filter.correlate(cupy.asarray(image), weights, mode=mode, strategy=strategy, factors=factors,
                                  out=out)
    assert result is out
    host = cupy.asnumpy(out)
    missing = int(np.isnan(host).sum())
    assert missing == 0, f"{missing} outputs not written"
    return host


def check(rng, strategy, shape, fshape, mode, complex_=False):
    image = random_image(rng, shape, complex_)
    weights, factors = random_filter(rng, fshape, strategy == "separable")
    out = run_poisoned(strategy, image, weights, factors, mode)
    error = relative_error(out, reference(image, weights, mode))
    assert error <= TOLERANCE, f"{strategy} {shape} filter {fshape} {mode}: relative error {error:.2e}"


def image_tile(strategy, ndim, radius):
    """Output tile of the (first) launch, in image axes."""
    fshape = (2 * radius + 1,) * ndim
    factors = [np.ones(n, np.float32) for n in fshape]
    launch = gpu_plan.plan((100,) * ndim, filters.outer_product(factors), strategy=strategy, factors=factors)[0]
    oz, oy, ox = launch.out_tile
    if strategy in ("register", "separable") and ndim == 2:
        return oz, ox  # 2-D images run as (ny, 1, nx): rows are the blocked axis
    return launch.out_tile[-ndim:]


def around(tile):
    """tile - 1, tile and tile + 1, mixed across axes (never below 1)."""
    minus = tuple(max(1, t - 1) for t in tile)
    plus = tuple(t + 1 for t in tile)
    mixed = tuple(m if i % 2 else p for i, (m, p) in enumerate(zip(minus, plus)))
    swapped = tuple(p if i % 2 else m for i, (m, p) in enumerate(zip(minus, plus)))
    return [mixed, tuple(tile), swapped]


@pytest.mark.parametrize("radius", range(8))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_2d_every_radius_and_edge_size(rng, strategy, radius):
    fshape = (2 * radius + 1, 2 * radius + 1)
    shapes = around(image_tile(strategy, 2, radius)) + [(1, 45), (45, 1)]
    for shape in shapes:
        for mode in ("zero", "nearest"):
            check(rng, strategy, shape, fshape, mode)


@pytest.mark.parametrize("radius", range(8))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_3d_every_radius_and_edge_size(rng, strategy, radius):
    fshape = (2 * radius + 1,) * 3
    if strategy == "A" and radius > 4:
        with pytest.raises(FilterError, match="strategy 'A' cannot tile"):
            check(rng, strategy, (5, 5, 5), fshape, "zero")
        return
    if strategy == "separable":
        shapes = [(3, 5, 33), (9, 10, 65), (2, 70, 31)]
    else:
        shapes = around(image_tile(strategy, 3, radius))
    for shape in shapes:
        for mode in ("zero", "nearest"):
            check(rng, strategy, shape, fshape, mode)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_complex64(rng, strategy):
    for shape, fshape in (((37, 70), (5, 3)), ((9, 10, 33), (3, 3, 3)), ((1, 40), (3, 3))):
        for mode in ("zero", "nearest"):
            check(rng, strategy, shape, fshape, mode, complex_=True)


def test_complex64_large_shared_tile(rng):
    # 3-D radius 7 complex: the register tile needs more than the default 48 KB of shared memory
    (launch,) = gpu_plan.plan((9, 9, 33), np.ones((15, 15, 15), np.float32), complex_=True, strategy="register")
    assert launch.shared_bytes > gpu_plan.STATIC_SHARED_BYTES
    check(rng, "register", (9, 9, 33), (15, 15, 15), "nearest", complex_=True)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_anisotropic_filters(rng, strategy):
    for shape, fshape in (((9, 12, 40), (3, 5, 7)), ((30, 40), (1, 7)), ((30, 40), (7, 1)), ((6, 20, 35), (5, 1, 3))):
        for mode in ("zero", "nearest"):
            check(rng, strategy, shape, fshape, mode)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_one_dimensional(rng, strategy):
    image = np.array([4, 1, 3, 2, 3], np.float32)
    out = run_poisoned(strategy, image, np.array([2, 1, 4], np.float32), None if strategy != "separable"
                       else [np.array([2, 1, 4], np.float32)], "zero")
    np.testing.assert_array_equal(out, [8, 21, 13, 20, 7])
    for mode in ("zero", "nearest"):
        check(rng, strategy, (300,), (15,), mode)


@pytest.mark.parametrize("fshape", [(7, 1, 1), (1, 7, 1), (1, 1, 7)], ids=["z", "y", "x"])
def test_each_separable_pass_writes_every_output(rng, fshape):
    # a single non-trivial factor gives a single pass straight into the poisoned output
    weights, factors = random_filter(rng, fshape, separable=True)
    assert len(gpu_plan.plan((9, 10, 65), weights, strategy="separable", factors=factors)) == 1
    check(rng, "separable", (9, 10, 65), fshape, "nearest")


def test_filter_changes_between_launches_of_one_module(rng):
    cupy = backend.cupy_module()
    image = random_image(rng, (40, 50))
    for _ in range(2):
        for weights in (rng.uniform(0.1, 1, (5, 5)), rng.uniform(0.1, 1, (5, 5))):
            weights = weights.astype(np.float32)
            out = cupy.asnumpy(gpu_filter.correlate(cupy.asarray(image), weights, strategy="register"))
            assert relative_error(out, reference(image, weights, "zero")) <= TOLERANCE


def test_array_types_follow_the_input(rng):
    cupy = backend.cupy_module()
    image = random_image(rng, (20, 24, 28), complex_=True)
    expected = smooth(image, 1.3, mode="nearest", device="cpu")
    on_gpu = smooth(cupy.asarray(image), 1.3, mode="nearest", device=Device(0))
    assert backend.is_gpu_array(on_gpu) and on_gpu.dtype == np.complex64
    assert relative_error(cupy.asnumpy(on_gpu), expected) <= TOLERANCE
    downloaded = smooth(image, 1.3, mode="nearest", device="gpu")
    assert isinstance(downloaded, np.ndarray) and relative_error(downloaded, expected) <= TOLERANCE
    weights = rng.uniform(0.1, 1, (3, 5, 3)).astype(np.float32)
    auto = convolve(cupy.asarray(image.real), weights)
    assert backend.is_gpu_array(auto)
    assert relative_error(cupy.asnumpy(auto), reference(image.real, weights, "zero")) <= TOLERANCE
    on_cpu = convolve(cupy.asarray(image.real), weights, device="cpu")
    assert backend.is_gpu_array(on_cpu)


def test_auto_strategy_on_a_large_separable_filter(rng):
    cupy = backend.cupy_module()
    image = random_image(rng, (64, 64, 64))
    out = smooth(cupy.asarray(image), 2.0)  # radius 6, 2^18 voxels: the separable passes
    expected = smooth(image, 2.0, device="cpu")
    assert relative_error(cupy.asnumpy(out), expected) <= TOLERANCE


def test_bad_output_arrays():
    cupy = backend.cupy_module()
    image = cupy.ones((8, 8), np.float32)
    weights = np.ones((3, 3), np.float32)
    for out in (image, cupy.ones((8, 8), np.complex64), cupy.ones((8, 9), np.float32), np.ones((8, 8), np.float32)):
        with pytest.raises(InvalidDataError, match=r"out must be a C-contiguous float32 array of shape \(8, 8\)"):
            gpu_filter.correlate(image, weights, out=out)


def stream_shapes(radius, complex_=False):
    """Around the streaming kernel's output tile: widths of whole vectors (tile - 1 vector, tile, tile + 1
    vector), heights ROWS - 1, ROWS, ROWS + 1, one-row and one-vector images."""
    (launch,) = gpu_plan.plan((64, 64), np.ones((2 * radius + 1, 1), np.float32), complex_=complex_,
                                strategy="stream")
    _, rows, width = launch.out_tile
    vec = gpu_plan.vector_elements(complex_)
    return [(rows - 1, width + vec), (rows, width), (rows + 1, width - vec), (1, 4 * vec), (45, vec),
            (2 * rows + 3, 3 * width + 2 * vec)]


@pytest.mark.parametrize("radius", range(gpu_plan.STREAM_MAX_RADIUS + 1))
@pytest.mark.parametrize("complex_", [False, True], ids=["float32", "complex64"])
def test_stream_every_radius_and_edge_size(rng, radius, complex_):
    vec = gpu_plan.vector_elements(complex_)
    fshapes = [(2 * radius + 1, 2 * min(radius, vec) + 1), (2 * radius + 1, 1), (1, 2 * min(radius, vec) + 1)]
    for shape in stream_shapes(radius, complex_):
        for fshape in fshapes:
            for mode in ("zero", "nearest"):
                check(rng, "stream", shape, fshape, mode, complex_=complex_)


def test_stream_planes_of_a_volume(rng):
    # a 3-D image with a filter flat in z: every plane filtered on its own
    for mode in ("zero", "nearest"):
        check(rng, "stream", (3, 37, 132), (1, 5, 5), mode)


def test_stream_one_dimensional(rng):
    image = np.array([4, 1, 3, 2, 3, 0, 0, 1], np.float32)
    out = run_poisoned("stream", image, np.array([2, 1, 4], np.float32), None, "zero")
    np.testing.assert_array_equal(out, [8, 21, 13, 20, 7, 6, 4, 1])


def test_stream_refuses_unaligned_arrays(rng):
    cupy = backend.cupy_module()
    contiguous = cupy.asarray(random_image(rng, (8, 16)))
    offset = cupy.empty(8 * 16 + 1, np.float32)[1:].reshape(8, 16)  # 4 bytes past an aligned start
    weights = np.ones((3, 3), np.float32)
    with pytest.raises(FilterError, match="not 16-byte aligned"):
        gpu_filter.correlate(contiguous, weights, strategy="stream", out=offset)
    # a streaming plan made for aligned arrays is refused at execution, before any launch
    launches = gpu_plan.plan((8, 16), weights, strategy="stream")
    with pytest.raises(FilterError, match="strategy 'stream' needs arrays that start on 16-byte boundaries"):
        gpu_filter.execute(launches, contiguous, out=offset)
    # auto falls back to the register kernel for the same arrays
    result = gpu_filter.correlate(contiguous, weights, out=offset)
    expected = reference(cupy.asnumpy(contiguous), weights, "zero")
    assert relative_error(cupy.asnumpy(result), expected) <= TOLERANCE
