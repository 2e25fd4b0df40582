"""Filter radius (issue 11): scipy's default Gaussian radius, any radius on the CPU, separable GPU passes up
to SEPARABLE_MAX_RADIUS, and a refusal that names the limit beyond it (never a silent cut)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from mri_recon import filters
from mri_recon.arrays import backend
from mri_recon.errors import FilterError
from mri_recon.filters import convolve, smooth
from mri_recon.filters import gpu as gpu_filter
from mri_recon.filters import plan as gpu_plan
from mri_recon.filters import taps as filter_taps
from mri_recon.kernels import compile_ptx

SCIPY_MODE = {"zero": "constant", "nearest": "nearest"}


def relative_error(result, expected) -> float:
    return float(np.linalg.norm(result - expected) / np.linalg.norm(expected))


def gaussian_reference(image, sigma, mode):
    """scipy.ndimage.gaussian_filter in double precision, default truncate=4 (complex: part by part)."""
    if np.iscomplexobj(image):
        return gaussian_reference(image.real, sigma, mode) + 1j * gaussian_reference(image.imag, sigma, mode)
    return ndimage.gaussian_filter(np.asarray(image, np.float64), sigma, mode=SCIPY_MODE[mode], cval=0.0)


def random_image(rng, shape, complex_=False):
    image = rng.standard_normal(shape).astype(np.float32)
    if complex_:
        image = (image + 1j * rng.standard_normal(shape)).astype(np.complex64)
    return image


# --- CPU: any radius, scipy's default -------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["zero", "nearest"])
@pytest.mark.parametrize("shape, sigma", [((200,), 5.0), ((61, 70), 5.0), ((20, 33, 41), (5.0, 2.0, 7.5))],
                         ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("complex_", [False, True], ids=["float32", "complex64"])
def test_smooth_matches_scipy_gaussian_filter_on_cpu(rng, mode, shape, sigma, complex_):
    image = random_image(rng, shape, complex_)
    out = smooth(image, sigma, mode=mode, device="cpu")
    assert out.dtype == image.dtype and out.shape == shape
    assert relative_error(out, gaussian_reference(image, sigma, mode)) <= 1e-6


def test_sigma_five_is_not_cut(rng):
    # the old default cut sigma 5 at radius 7: 11% from scipy; the radius is now 20 = int(4 * 5 + 0.5)
    assert filters.gaussian_taps(5.0).shape == (41,)
    image = random_image(rng, (80, 80))
    cut = convolve(image, filters.gaussian_weights(5.0, 7, ndim=2), device="cpu")
    expected = gaussian_reference(image, 5.0, "zero")
    assert relative_error(cut, expected) > 1e-2
    assert relative_error(smooth(image, 5.0, device="cpu"), expected) <= 1e-6


@pytest.mark.parametrize("mode", ["zero", "nearest"])
def test_cpu_convolve_takes_any_radius(rng, mode):
    image = random_image(rng, (30, 25))
    weights = rng.uniform(-1.0, 1.0, (41, 9)).astype(np.float32)  # radius 20 x 4, not separable
    expected = ndimage.correlate(image.astype(np.float64), weights.astype(np.float64), mode=SCIPY_MODE[mode])
    assert relative_error(convolve(image, weights, mode=mode, device="cpu"), expected) <= 1e-6


# --- GPU plans (pure Python) ----------------------------------------------------------------------------

def test_large_separable_radius_plans_separable_passes():
    factors = [filters.gaussian_taps(5.0)] * 2  # radius 20
    launches = gpu_plan.plan((64, 64), None, factors=factors)
    assert [launch.strategy for launch in launches] == ["register", "register"]
    assert [launch.radii for launch in launches] == [(0, 0, 20), (20, 0, 0)]
    limit = gpu_plan.SEPARABLE_MAX_RADIUS
    edge = [np.ones(2 * limit + 1, np.float32)] * 3
    assert len(gpu_plan.plan((5, 6, 7), None, factors=edge, strategy="separable")) == 3


def test_radius_beyond_the_separable_passes_is_refused():
    limit = gpu_plan.SEPARABLE_MAX_RADIUS
    factors = [np.ones(3, np.float32), np.ones(2 * limit + 3, np.float32)]
    with pytest.raises(FilterError, match=rf"radius {limit + 1} along axis 1: the GPU's separable passes take "
                                          rf"radius <= {limit} .*use device='cpu'"):
        gpu_plan.plan((64, 64), None, factors=factors)


def test_direct_kernels_refuse_radius_beyond_seven(rng):
    non_separable = rng.uniform(0.1, 1.0, (3, 17)).astype(np.float32)
    with pytest.raises(FilterError, match=r"radius 8 along axis 1: the GPU's direct kernels take radius <= 7 .*"
                                          r"not separable: use device='cpu'"):
        gpu_plan.plan((64, 64), non_separable)
    separable = np.ones((3, 17), np.float32)
    with pytest.raises(FilterError, match=r"radius 8 along axis 1: .*use strategy 'separable' \(radius <= 24\)"):
        gpu_plan.plan((64, 64), separable, factors=filters.separable_factors(separable), strategy="register")
    (launch, _) = gpu_plan.plan((64, 64), separable, factors=filters.separable_factors(separable))
    assert launch.radii == (0, 0, 8)  # auto: the separable passes


def test_smooth_radius_beyond_the_gpu_limit_is_refused_by_the_plan():
    too_large = gpu_plan.SEPARABLE_MAX_RADIUS + 1
    taps = filter_taps.gaussian(3.0, too_large, 2)
    with pytest.raises(FilterError, match=rf"radius {too_large} along axis 0: the GPU's separable passes"):
        gpu_plan.plan((50, 50), None, factors=taps.factors)


def test_separable_pass_configurations_are_compiled():
    configurations = {tuple(sorted(d.items())) for _, d in gpu_filter.compile_configurations()}
    limit = gpu_plan.SEPARABLE_MAX_RADIUS
    for factors, shape in (([np.ones(2 * limit + 1)] * 3, (9, 10, 11)), ([np.ones(17)] * 2, (40, 40)),
                           ([np.ones(2 * limit - 1)], (100,))):
        for complex_ in (False, True):
            for launch in gpu_plan.plan(shape, None, factors=factors, complex_=complex_):
                assert launch.defines in configurations
    x_pass = dict(next(launch.defines for launch in gpu_plan.plan((64, 64), None, factors=[np.ones(49)] * 2)))
    assert ".entry mri_recon_conv_register" in compile_ptx(gpu_plan.FILENAME, x_pass)


# --- GPU: the same answers (run on a device) -------------------------------------------------------------

def run_poisoned(image, taps, mode, strategy="auto"):
    cupy = backend.cupy_module()
    out = cupy.full(image.shape, np.nan, dtype=image.dtype)
    result = gpu_filter.correlate(cupy.asarray(image), taps.dense, factors=taps.factors, mode=mode,
                                  strategy=strategy, out=out)
    host = cupy.asnumpy(result)
    assert int(np.isnan(host).sum()) == 0, "outputs not written"
    return host


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["zero", "nearest"])
@pytest.mark.parametrize("complex_", [False, True], ids=["float32", "complex64"])
def test_smooth_sigma_five_matches_scipy_on_gpu(rng, mode, complex_):
    cupy = backend.cupy_module()
    for shape, sigma in (((61, 70), 5.0), ((20, 33, 41), (5.0, 2.0, 6.0)), ((300,), 5.0)):
        image = random_image(rng, shape, complex_)
        out = smooth(cupy.asarray(image), sigma, mode=mode)
        assert backend.is_gpu_array(out)
        assert relative_error(cupy.asnumpy(out), gaussian_reference(image, sigma, mode)) <= 1e-6
        downloaded = smooth(image, sigma, mode=mode, device="gpu")
        assert relative_error(downloaded, gaussian_reference(image, sigma, mode)) <= 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("radius", [8, 15, gpu_plan.SEPARABLE_MAX_RADIUS])
def test_large_separable_radius_every_edge_size(rng, radius):
    # the flat register tile is 32 (x) by 64 (rows): tile - 1, tile, tile + 1, and images smaller than r
    shapes = [(63, 33), (64, 32), (65, 31), (5, 7), (1, 100), (3, 40, 65)]
    for shape in shapes:
        taps = filter_taps.gaussian(radius / 3.0, radius, len(shape))
        for mode in ("zero", "nearest"):
            image = random_image(rng, shape)
            expected = image.astype(np.float64)
            for axis, factor in enumerate(taps.factors):
                expected = ndimage.correlate1d(expected, factor.astype(np.float64), axis=axis, mode=SCIPY_MODE[mode])
            assert relative_error(run_poisoned(image, taps, mode), expected) <= 1e-6, (shape, mode)


@pytest.mark.gpu
def test_gpu_takes_wide_separable_filters_and_refuses_wide_dense_ones(rng):
    cupy = backend.cupy_module()
    image = cupy.asarray(random_image(rng, (40, 40)))
    limit = gpu_plan.SEPARABLE_MAX_RADIUS
    # a separable filter beyond the passes' limit is served by cupyx's correlate1d, never cut
    wide = cupy.asnumpy(smooth(image, 1.0, radius=limit + 1))
    np.testing.assert_allclose(wide, smooth(cupy.asnumpy(image), 1.0, radius=limit + 1, device="cpu"),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(FilterError, match=r"direct kernels take radius <= 7 .*not separable"):
        convolve(image, rng.uniform(0.1, 1.0, (17, 3)).astype(np.float32))
    # the CPU takes it
    assert convolve(cupy.asnumpy(image), rng.uniform(0.1, 1.0, (17, 3)).astype(np.float32),
                    device="cpu").shape == (40, 40)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["zero", "nearest"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=["float32", "complex64"])
def test_gpu_smooth_beyond_the_separable_passes_matches_scipy(rng, mode, dtype):
    # sigma 8: default radius 32 > SEPARABLE_MAX_RADIUS, served by cupyx's correlate1d passes (never cut)
    cupy = backend.cupy_module()
    image = rng.standard_normal((70, 61)).astype(np.float32)
    if dtype == np.complex64:
        image = (image + 1j * rng.standard_normal((70, 61))).astype(np.complex64)
    got = cupy.asnumpy(filters.smooth(cupy.asarray(image), 8.0, mode=mode))
    scipy_mode = "constant" if mode == "zero" else "nearest"
    ref = ndimage.gaussian_filter(image.real.astype(np.float64), 8.0, mode=scipy_mode)
    if dtype == np.complex64:
        ref = ref + 1j * ndimage.gaussian_filter(image.imag.astype(np.float64), 8.0, mode=scipy_mode)
    assert got.dtype == dtype
    assert np.linalg.norm(got - ref) <= 1e-5 * np.linalg.norm(ref)
