"""Smoothing post-filter: correlation of a 1-D, 2-D or 3-D image with a small odd filter.

Semantics: **correlation**, the "convolution" of Programming Massively Parallel Processors (ch. 7) and
exactly ``scipy.ndimage.correlate``: the filter is not flipped,
``out[i] = sum_j F[j] * image[i + j - r]`` per axis, with ``r`` the filter radius. (For the symmetric
Gaussian filters of :func:`smooth` correlation and convolution coincide.) Example from the book: image
``[4, 1, 3, 2, 3]`` and filter ``[2, 1, 4]`` give ``[8, 21, 13, 20, 7]``.

- Filters have odd sizes ``2r + 1`` with ``r <= 7`` per axis (the GPU keeps them in ``__constant__``
  memory) and the image's rank.
- Boundary ``mode``: ``"zero"`` (ghost cells are 0, scipy ``mode="constant", cval=0``) or ``"nearest"``
  (ghost cells repeat the edge element).
- Images: float32 or complex64 (other real / complex dtypes are cast); a complex image is filtered as its
  real and imaginary parts with the same real filter. Image values are not checked: a NaN or Inf spreads
  to the outputs whose footprint holds it, as in scipy.
- Device: ``device="auto"`` runs on the GPU when one is present (on the array's own GPU for a CuPy input),
  ``"cpu"``, ``"gpu"``, ``"gpu:N"`` or a :class:`~mri_recon.backend.Device`. NumPy in gives NumPy out,
  CuPy in gives CuPy out, wherever the work ran.

The CPU path is the reference: ``scipy.ndimage.correlate`` in double precision (:func:`smooth` runs one
``scipy.ndimage.correlate1d`` per axis, which is the same operation for its separable filter). The GPU path
is :mod:`mri_recon.gpu_filter`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import ndimage

from .. import backend
from ..backend import Device
from ..errors import FilterError, InvalidDataError
from ..kernels import CONSTANT_BYTES

MAX_RADIUS = 7
"""Largest filter radius per axis (15 taps), as compiled into the GPU kernels."""
MODES = ("zero", "nearest")
_SCIPY_MODES = {"zero": "constant", "nearest": "nearest"}
SEPARABLE_TOLERANCE = 16 * float(np.finfo(np.float32).eps)
"""Largest deviation, relative to the largest tap, of a filter from an outer product still called separable."""


def default_radius(sigma: float) -> int:
    """Radius used by :func:`gaussian_taps` and :func:`smooth` when none is given: ``min(ceil(3 sigma), 7)``."""
    return min(math.ceil(3.0 * float(sigma)), MAX_RADIUS)


def gaussian_taps(sigma: float, radius: int | None = None) -> np.ndarray:
    """Normalized 1-D Gaussian filter.

    Parameters
    ----------
    sigma : float
        Standard deviation in voxels, finite and > 0.
    radius : int, optional
        Half-width ``r`` (``2r + 1`` taps), ``0 <= r <= 7``. Default: :func:`default_radius`.

    Returns
    -------
    numpy.ndarray
        float32 ``(2r + 1,)``, ``exp(-x^2 / (2 sigma^2))`` for ``x = -r..r``, divided by its sum.
    """
    sigma = _check_sigma(sigma)
    radius = default_radius(sigma) if radius is None else _check_radius(radius, ndim=1)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    taps = np.exp(-0.5 * (x / sigma) ** 2)
    return (taps / taps.sum()).astype(np.float32)


def gaussian_weights(sigma: float | Sequence[float], radius: int | Sequence[int] | None = None, *,
                     ndim: int) -> np.ndarray:
    """n-D Gaussian filter: the outer product of one :func:`gaussian_taps` per axis.

    ``sigma`` and ``radius`` are one value for every axis or one per axis. Returns float32 of shape
    ``(2 r_0 + 1, ..., 2 r_{ndim-1} + 1)`` summing to 1.
    """
    return outer_product(_gaussian_factors(sigma, radius, ndim))


def convolve(image: Any, filter: Any, *, mode: str = "zero", device: str | int | Device | None = "auto"):
    """Correlate ``image`` with ``filter`` (no flip, like ``scipy.ndimage.correlate``).

    Parameters
    ----------
    image : numpy.ndarray or cupy.ndarray
        1-D, 2-D or 3-D, real or complex (computed as float32 / complex64).
    filter : array_like
        Real taps of the image's rank, odd size ``2r + 1`` with ``r <= 7`` along every axis.
    mode : {"zero", "nearest"}
        Ghost cells: 0, or the nearest edge element.
    device : str, int or Device
        ``"auto"`` (GPU when present), ``"cpu"``, ``"gpu"``, ``"gpu:N"``.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        Same shape as ``image``, float32 or complex64, of the input's array type.

    Raises
    ------
    FilterError
        Even filter size, radius above 7, rank mismatch, non-finite or complex taps, unknown mode.
    InvalidDataError
        Image of rank other than 1..3, empty, or not numeric.
    """
    mode = check_mode(mode)
    data = check_image(image)
    weights = check_filter(filter, data.ndim)
    return _apply(image, data, weights, None, mode, device)


def smooth(image: Any, sigma: float | Sequence[float], *, radius: int | Sequence[int] | None = None,
           mode: str = "zero", device: str | int | Device | None = "auto"):
    """Gaussian smoothing: :func:`convolve` with :func:`gaussian_weights` of ``sigma``.

    Parameters
    ----------
    image : numpy.ndarray or cupy.ndarray
        1-D, 2-D or 3-D, real or complex.
    sigma : float or sequence of float
        Standard deviation in voxels, one for all axes or one per axis; finite and > 0.
    radius : int or sequence of int, optional
        Filter half-width per axis, ``0..7``. Default ``min(ceil(3 sigma), 7)``: the Gaussian is cut at
        three standard deviations, or at 7 voxels for ``sigma > 7/3``.
    mode, device
        As for :func:`convolve`.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        Same shape and array type as ``image``, float32 or complex64.
    """
    mode = check_mode(mode)
    data = check_image(image)
    factors = _gaussian_factors(sigma, radius, data.ndim)
    return _apply(image, data, outer_product(factors), factors, mode, device)


def check_mode(mode: str) -> str:
    """Return ``mode`` if it is a boundary mode this module knows, else raise :class:`FilterError`."""
    if mode not in MODES:
        raise FilterError(f"unknown boundary mode {mode!r}: expected 'zero' or 'nearest'")
    return mode


def check_image(image: Any):
    """The image as a C-contiguous float32 / complex64 array of its own array module.

    Raises :class:`InvalidDataError` for a rank other than 1..3, an empty image or a non-numeric dtype.
    """
    array = image if backend.is_gpu_array(image) else np.asarray(image)
    if array.ndim not in (1, 2, 3):
        raise InvalidDataError(f"image has rank {array.ndim} (shape {array.shape}): expected a 1-D, 2-D or 3-D image")
    if array.size == 0:
        raise InvalidDataError(f"image of shape {array.shape} is empty")
    kind = array.dtype.kind
    if kind not in "biufc":
        raise InvalidDataError(f"image dtype {array.dtype}: expected float32 or complex64 (or a castable number type)")
    target = np.complex64 if kind == "c" else np.float32
    return backend.get_xp(array).ascontiguousarray(array.astype(target, copy=False))


def check_filter(filter: Any, ndim: int) -> np.ndarray:
    """Validate filter taps for a ``ndim``-D image; return them as a C-contiguous float32 NumPy array.

    Raises :class:`FilterError` for complex or non-numeric taps, a rank other than ``ndim``, an even size,
    a radius above :data:`MAX_RADIUS` or a NaN / Inf tap.
    """
    weights = backend.to_host(filter) if backend.is_gpu_array(filter) else np.asarray(filter)
    if weights.dtype.kind == "c":
        raise FilterError(f"filter dtype {weights.dtype}: expected real taps (a complex image is filtered "
                          "part by part with a real filter)")
    if weights.dtype.kind not in "biuf":
        raise FilterError(f"filter dtype {weights.dtype}: expected real numbers")
    if weights.ndim != ndim:
        raise FilterError(f"filter of rank {weights.ndim} (shape {weights.shape}) for a {ndim}-D image: "
                          f"expected a {ndim}-D filter")
    for axis, size in enumerate(weights.shape):
        if size % 2 == 0:
            raise FilterError(f"filter shape {weights.shape} has even size {size} along axis {axis}: "
                              "expected odd sizes 2r+1")
    for axis, size in enumerate(weights.shape):
        if size > 2 * MAX_RADIUS + 1:
            raise FilterError(_too_large(weights.shape, axis))
    with np.errstate(over="ignore"):  # taps beyond float32 range become Inf and are reported below
        weights = np.ascontiguousarray(weights, dtype=np.float32)
    finite = np.isfinite(weights)
    if not finite.all():
        raise FilterError(f"filter has {weights.size - int(finite.sum())} NaN or Inf tap(s) (as float32): "
                          "expected finite values")
    return weights


def separable_factors(weights: np.ndarray) -> list[np.ndarray] | None:
    """1-D factors ``[f_0, ..., f_{n-1}]`` whose outer product is ``weights``, or None.

    The factors are the lines through the largest tap (all but the first divided by it); the filter counts
    as separable when their outer product matches every tap to ``16 eps_float32`` times the largest tap,
    i.e. to float32 rounding. An all-zero filter is reported as not separable.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 1:
        return [w.astype(np.float32)]
    peak = np.unravel_index(int(np.argmax(np.abs(w))), w.shape)
    pivot = float(w[peak])
    if pivot == 0.0:
        return None
    factors = []
    for axis in range(w.ndim):
        index = list(peak)
        index[axis] = slice(None)
        line = w[tuple(index)]
        factors.append(line if axis == 0 else line / pivot)
    if np.max(np.abs(outer_product(factors, np.float64) - w)) > SEPARABLE_TOLERANCE * abs(pivot):
        return None
    return [f.astype(np.float32) for f in factors]


def outer_product(factors: Sequence[np.ndarray], dtype: type = np.float32) -> np.ndarray:
    """Outer product of 1-D factors (formed in double precision), C-contiguous ``dtype``."""
    product = functools.reduce(np.multiply.outer, [np.asarray(f, dtype=np.float64) for f in factors])
    return np.ascontiguousarray(product, dtype=dtype)


def _too_large(shape: tuple[int, ...], axis: int) -> str:
    radius = (shape[axis] - 1) // 2
    nbytes = 4 * math.prod(shape)
    message = (f"filter shape {shape} has radius {radius} along axis {axis}: expected radius <= {MAX_RADIUS} "
               f"(at most {2 * MAX_RADIUS + 1} taps per axis, the size the GPU kernels are built for)")
    if nbytes > CONSTANT_BYTES:
        message += f"; its {nbytes} bytes would not fit the {CONSTANT_BYTES}-byte __constant__ memory"
    return message


def _check_sigma(sigma: Any) -> float:
    try:
        value = float(sigma)
    except (TypeError, ValueError):
        raise FilterError(f"sigma must be a number; found {sigma!r}") from None
    if not math.isfinite(value) or value <= 0.0:
        raise FilterError(f"sigma must be finite and > 0; found {sigma}")
    return value


def _check_radius(radius: Any, ndim: int) -> int:
    if isinstance(radius, bool) or not isinstance(radius, (int, np.integer)) or radius < 0:
        raise FilterError(f"radius must be an integer in 0..{MAX_RADIUS}; found {radius!r}")
    if radius > MAX_RADIUS:
        raise FilterError(_too_large((2 * int(radius) + 1,) * ndim, 0))
    return int(radius)


def _per_axis(value: Any, ndim: int, name: str) -> list[Any]:
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, str):
        values = list(value)
        if len(values) != ndim:
            raise FilterError(f"{name} has {len(values)} values for a {ndim}-D image: expected 1 or {ndim}")
        return values
    return [value] * ndim


def _gaussian_factors(sigma: Any, radius: Any, ndim: int) -> list[np.ndarray]:
    sigmas = _per_axis(sigma, ndim, "sigma")
    radii = [None] * ndim if radius is None else _per_axis(radius, ndim, "radius")
    for r in radii:
        if r is not None:
            _check_radius(r, ndim)
    return [gaussian_taps(s, r) for s, r in zip(sigmas, radii)]


def _array_device(array: Any) -> Device:
    return Device(int(array.device.id))


def _apply(original: Any, data: Any, weights: np.ndarray, factors: list[np.ndarray] | None, mode: str,
           device: str | int | Device | None):
    """Run on the resolved device; return the input's array type."""
    on_gpu = backend.is_gpu_array(original)
    if (device is None or device == "auto") and on_gpu:
        target = _array_device(original)
    else:
        target = backend.resolve_device(device)
    if target.is_gpu:
        from . import gpu as gpu_filter  # noqa: PLC0415 - needs CuPy, imported only on the GPU path

        with target.use():
            result = gpu_filter.correlate(backend.to_device(data, target), weights, mode=mode, factors=factors)
        return result if on_gpu else backend.to_host(result)
    result = _correlate_cpu(backend.to_host(data), weights, factors, mode)
    return backend.to_device(result, _array_device(original)) if on_gpu else result


def _correlate_cpu(image: np.ndarray, weights: np.ndarray, factors: list[np.ndarray] | None,
                   mode: str) -> np.ndarray:
    """scipy.ndimage in double precision, rounded to the image's dtype."""
    wide = image.astype(np.complex128 if image.dtype.kind == "c" else np.float64)
    scipy_mode = _SCIPY_MODES[mode]
    if factors is None:
        out = ndimage.correlate(wide, weights.astype(np.float64), mode=scipy_mode, cval=0.0)
    else:
        out = wide
        for axis, taps in enumerate(factors):
            out = ndimage.correlate1d(out, taps.astype(np.float64), axis=axis, mode=scipy_mode, cval=0.0)
    return out.astype(image.dtype)
