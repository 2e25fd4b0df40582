"""Smoothing post-filter: correlation of a 1-D, 2-D or 3-D image with a real odd filter.

Semantics: **correlation**, the "convolution" of Programming Massively Parallel Processors (ch. 7) and
exactly ``scipy.ndimage.correlate``: the filter is not flipped,
``out[i] = sum_j F[j] * image[i + j - r]`` per axis, with ``r`` the filter radius. (For the symmetric
Gaussian filters of :func:`smooth` correlation and convolution coincide.) Example from the book: image
``[4, 1, 3, 2, 3]`` and filter ``[2, 1, 4]`` give ``[8, 21, 13, 20, 7]``.

- Filters have odd sizes ``2r + 1`` and the image's rank. The CPU takes any radius. The GPU takes radius
  ``<= 7`` per axis (:data:`MAX_RADIUS`: its kernels hold the filter in ``__constant__`` memory), and a
  separable filter such as :func:`smooth`'s Gaussian up to radius 24 (:data:`SEPARABLE_MAX_RADIUS`, as
  1-D passes); a wider separable filter runs as 1-D passes of ``cupyx.scipy.ndimage.correlate1d``, and a
  wider non-separable one is refused with a :class:`~mri_recon.errors.FilterError` that names the limit.
  No filter is ever cut.
- :func:`smooth`'s default radius is ``int(4 sigma + 0.5)``, that of ``scipy.ndimage.gaussian_filter``
  (``truncate=4.0``), so ``smooth(x, s)`` equals ``gaussian_filter(x, s, mode="constant")``.
- Boundary ``mode``: ``"zero"`` (ghost cells are 0, scipy ``mode="constant", cval=0``) or ``"nearest"``
  (ghost cells repeat the edge element).
- Images: float32 or complex64 (other real / complex dtypes are cast); a complex image is filtered as its
  real and imaginary parts with the same real filter. Image values are not checked: a NaN or Inf spreads
  to the outputs whose footprint holds it, as in scipy.
- Device: ``device="auto"`` runs on the GPU when one is present (on the array's own GPU for a CuPy input),
  ``"cpu"``, ``"gpu"``, ``"gpu:N"`` or a :class:`~mri_recon.arrays.backend.Device`. NumPy in gives NumPy out,
  CuPy in gives CuPy out, wherever the work ran.
- Repeated calls: filters are validated once and GPU plans made once (:mod:`.taps`, :mod:`.gpu`). A CuPy
  filter array is read once; change its values in place and the change is not seen (pass a new array).

Layout: :mod:`.taps` (validation, Gaussian taps, separable factors), :mod:`.cpu` (the scipy reference
path), :mod:`.plan` (GPU strategies and launch geometry, pure Python), :mod:`.gpu` (GPU execution).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..arrays import backend
from ..arrays.backend import Device
from . import cpu
from .plan import MAX_RADIUS, SEPARABLE_MAX_RADIUS
from .taps import (
    MODES,
    SEPARABLE_TOLERANCE,
    TRUNCATE,
    Taps,
    check_filter,
    check_image,
    check_mode,
    default_radius,
    gaussian,
    gaussian_taps,
    outer_product,
    prepare,
    separable_factors,
)

__all__ = ["MAX_RADIUS", "MODES", "SEPARABLE_MAX_RADIUS", "SEPARABLE_TOLERANCE", "TRUNCATE", "check_filter",
           "check_image", "check_mode", "convolve", "default_radius", "gaussian_taps", "gaussian_weights",
           "outer_product", "separable_factors", "smooth"]


def gaussian_weights(sigma: float | Sequence[float], radius: int | Sequence[int] | None = None, *,
                     ndim: int) -> np.ndarray:
    """n-D Gaussian filter: the outer product of one :func:`gaussian_taps` per axis.

    ``sigma`` and ``radius`` are one value for every axis or one per axis. Returns float32 of shape
    ``(2 r_0 + 1, ..., 2 r_{ndim-1} + 1)`` summing to 1.
    """
    return gaussian(sigma, radius, ndim).dense.copy()


def convolve(image: Any, filter: Any, *, mode: str = "zero", device: str | int | Device | None = "auto"):
    """Correlate ``image`` with ``filter`` (no flip, like ``scipy.ndimage.correlate``).

    Parameters
    ----------
    image : numpy.ndarray or cupy.ndarray
        1-D, 2-D or 3-D, real or complex (computed as float32 / complex64).
    filter : array_like
        Real taps of the image's rank, odd size ``2r + 1`` along every axis. On the GPU ``r <= 7``, or
        ``r <= 24`` for a separable filter (module docstring); NumPy or CuPy.
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
        Even filter size, rank mismatch, non-finite or complex taps, unknown mode; on the GPU, a radius
        beyond its limits.
    InvalidDataError
        Image of rank other than 1..3, empty, or not numeric.
    """
    mode = check_mode(mode)
    data = check_image(image)
    return _apply(image, data, prepare(filter, data.ndim), mode, device)


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
        Filter half-width per axis, ``>= 0``. Default ``int(4 sigma + 0.5)``, as
        ``scipy.ndimage.gaussian_filter``. Any radius: on the GPU, radii above 24 run through
        ``cupyx.scipy.ndimage.correlate1d`` instead of the project's kernels.
    mode, device
        As for :func:`convolve`.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        Same shape and array type as ``image``, float32 or complex64.

    Raises
    ------
    FilterError
        Bad sigma or radius, unknown mode.
    """
    mode = check_mode(mode)
    data = check_image(image)
    return _apply(image, data, gaussian(sigma, radius, data.ndim), mode, device)


def _array_device(array: Any) -> Device:
    return Device(int(array.device.id))


def _apply(original: Any, data: Any, taps: Taps, mode: str, device: str | int | Device | None):
    """Run on the resolved device; return the input's array type."""
    on_gpu = backend.is_gpu_array(original)
    if (device is None or device == "auto") and on_gpu:
        target = _array_device(original)
    else:
        target = backend.resolve_device(device)
    if target.is_gpu:
        from . import gpu  # noqa: PLC0415 - CuPy's path, imported on first use

        with target.use():
            result = gpu.run(backend.to_device(data, target), taps, mode=mode)
        return result if on_gpu else backend.to_host(result)
    result = cpu.correlate(backend.to_host(data), taps, mode)
    return backend.to_device(result, _array_device(original)) if on_gpu else result
