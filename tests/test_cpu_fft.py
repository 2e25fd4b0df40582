"""The NumPy paths' FFTs (mri_recon.arrays.fft) against NumPy's complex128 FFT: every norm, direction, padding
and precision, through pocketfft loaded by itself and through scipy.fft; and the process that uses them does
not import scipy.fft."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from mri_recon.arrays import fft

CASES = [((7,), (0,)), ((6, 5), (0, 1)), ((3, 8, 9), (1, 2)), ((4, 5, 6), (0, 2)), ((2, 3, 4, 5), (-3, -2, -1))]


@pytest.fixture(params=["pocketfft", "scipy.fft"])
def engine(request, monkeypatch):
    if request.param == "scipy.fft":
        monkeypatch.setattr(fft, "pocketfft", lambda: None)
    else:
        assert fft.pocketfft() is not None, "pocketfft's module did not load by itself"
    return request.param


def _draw(rng, shape, dtype):
    x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return x.astype(dtype) * 10.0 ** rng.uniform(-20, 20)


def _error(result, oracle):
    return np.linalg.norm(result - oracle) / np.linalg.norm(oracle)


@pytest.mark.parametrize(("shape", "axes"), CASES)
@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("inverse", [False, True])
def test_fftn_matches_numpy_in_complex128(engine, shape, axes, norm, inverse):
    rng = np.random.default_rng()
    x = _draw(rng, shape, np.complex64)
    call = np.fft.ifftn if inverse else np.fft.fftn
    oracle = call(x.astype(np.complex128), axes=axes, norm=norm)
    result = fft.fftn(x, axes, inverse=inverse, norm=norm)
    assert result.dtype == np.complex64
    assert _error(result, oracle) < 2e-6


@pytest.mark.parametrize(("shape", "axes"), CASES)
def test_fftn_pads_with_zeros_at_the_end(engine, shape, axes):
    rng = np.random.default_rng()
    x = _draw(rng, shape, np.complex128)
    kept = x.copy()
    padded = tuple(2 * shape[a] + 1 for a in axes)
    result = fft.fftn(x, axes, shape=padded)
    assert result.dtype == np.complex128
    assert _error(result, np.fft.fftn(kept, s=padded, axes=axes)) < 1e-13
    assert np.array_equal(x, kept)  # without overwrite the input is kept


def test_fftn_keeps_its_input_unless_told(engine):
    rng = np.random.default_rng()
    x = _draw(rng, (6, 10), np.complex64)
    kept = x.copy()
    fft.fftn(x, (0, 1))
    assert np.array_equal(x, kept)
    result = fft.fftn(x, (0, 1), overwrite=True)
    assert _error(result, np.fft.fftn(kept.astype(np.complex128))) < 2e-6


def test_fftn_of_real_input_is_the_complex_transform_in_its_precision(engine):
    rng = np.random.default_rng()
    x = rng.standard_normal((9, 4)).astype(np.float32)
    result = fft.fftn(x, (0,))
    assert result.dtype == np.complex64
    assert _error(result, np.fft.fft(x.astype(np.float64), axis=0)) < 2e-6


def test_fftn_of_a_strided_view_in_place(engine):
    """The Toeplitz operator's cropped passes transform views of a larger array in place."""
    rng = np.random.default_rng()
    base = _draw(rng, (4, 12, 10), np.complex64)
    view = base[:, :7, :]
    oracle = np.fft.ifft(view.astype(np.complex128), axis=2)
    result = fft.fftn(view, (2,), inverse=True, overwrite=True)
    assert _error(result, oracle) < 2e-6


@pytest.mark.parametrize(("axes", "shape", "message"), [
    ((0, 1), (3, 4), "shorter than the input"),
    ((0, 1), (8,), "differ in length"),
    ((), None, "are not axes"),
    ((2,), None, "are not axes"),
    ((0, 0), None, "repeat an axis"),
])
def test_fftn_refuses_axes_and_shapes_numpy_refuses(engine, axes, shape, message):
    with pytest.raises(ValueError, match=message):
        fft.fftn(np.ones((4, 4), np.complex64), axes, shape=shape)


def test_fftn_refuses_an_axis_of_no_points(engine):
    with pytest.raises(ValueError, match="no points"):
        fft.fftn(np.ones((0, 4), np.complex64), (0,))


def test_fftn_refuses_an_unknown_norm_and_takes_none_as_backward(engine):
    x = np.arange(6, dtype=np.complex64)
    assert np.array_equal(fft.fftn(x, (0,), norm=None), fft.fftn(x, (0,), norm="backward"))
    with pytest.raises(ValueError, match="norm must be one of"):
        fft.fftn(x, (0,), norm="unitary")


@pytest.mark.parametrize(("dtype", "expected"), [(np.int16, np.complex128), (np.bool_, np.complex128),
                                                 (np.float64, np.complex128), (np.float32, np.complex64),
                                                 (">c8", np.complex64), (">f8", np.complex128)])
def test_fftn_precision_and_byte_order_of_any_input(engine, dtype, expected):
    x = np.array([1, 0, 2, 3, 0, 1], dtype=dtype)
    result = fft.fftn(x, (0,))
    assert result.dtype == expected
    assert _error(result, np.fft.fft(x.astype(np.complex128))) < 2e-6


def test_a_transform_does_not_import_scipy_fft():
    code = ("import sys, numpy as np; from mri_recon.arrays import fft; "
            "y = fft.fftn(np.ones((8, 8), np.complex64), (0, 1)); "
            "assert abs(y[0, 0] - 64) < 1e-4; print('scipy.fft' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_module_that_answers_otherwise_is_not_used(monkeypatch):
    monkeypatch.setattr(fft, "_answers_like_numpy", lambda module: False)
    fft.pocketfft.cache_clear()
    try:
        assert fft.pocketfft() is None
        x = np.arange(8, dtype=np.complex64)
        assert _error(fft.fftn(x, (0,)), np.fft.fft(x.astype(np.complex128))) < 2e-6  # scipy.fft serves
    finally:
        monkeypatch.undo()
        fft.pocketfft.cache_clear()
    assert fft.pocketfft() is not None
