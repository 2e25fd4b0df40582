"""Filter taps: validation, Gaussian taps, separable factors, and the cache of validated filters.

A filter reaches the CPU and GPU paths as a :class:`Taps`: validated once, hashed on the host once, its
separable factors found once. :func:`prepare` caches them so that calling :func:`mri_recon.filters.convolve`
again with the same taps does no validation, no factorization and no device read:

- NumPy (or list) taps are keyed by their dtype, shape and bytes, hashed on the host on every call (a few
  hundred bytes at most for the filters the GPU takes).
- CuPy taps are read to the host once per array object (keyed by its identity; the cache holds a reference
  so that the identity cannot be reused while the entry lives). **Values written into that same CuPy array
  in place afterwards are not seen**: pass a new array (or NumPy taps) for new values. This is what lets a
  call with CuPy taps run without a synchronizing device-to-host copy.

No radius limit here: the CPU path takes any odd size; the GPU limits are in :mod:`.plan`.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..arrays import backend
from ..errors import FilterError, InvalidDataError

MODES = ("zero", "nearest")
TRUNCATE = 4.0
"""Default Gaussian half-width in standard deviations, that of ``scipy.ndimage.gaussian_filter``."""
SEPARABLE_TOLERANCE = 16 * float(np.finfo(np.float32).eps)
"""Largest deviation, relative to the largest tap, of a filter from an outer product still called separable."""
CACHE_SIZE = 64
"""Entries of each cache of validated filters (least recently used dropped first)."""
CACHE_BYTES = 1 << 16
"""Largest host filter kept in the cache (larger ones exceed every GPU kernel and run on the CPU)."""


class Taps:
    """A validated real filter of odd sizes, as float32, with its separable factors when it has them.

    Built by :func:`prepare` (dense taps) or :func:`gaussian` (1-D factors); immutable (its arrays are
    read-only) and hashable by :attr:`key`, so plans can be cached per filter.
    """

    __slots__ = ("shape", "key", "from_factors", "_dense", "_factors", "_factors_known")

    def __init__(self, *, dense: np.ndarray | None = None, factors: Sequence[np.ndarray] | None = None):
        if dense is None and factors is None:
            raise ValueError("Taps needs dense taps or factors")  # programming error, not user input
        self.from_factors = dense is None
        """True when the filter is defined by its 1-D factors (:func:`mri_recon.filters.smooth`)."""
        self._dense = None if dense is None else _frozen(dense)
        self._factors = None if factors is None else tuple(_frozen(f) for f in factors)
        self._factors_known = factors is not None
        self.shape = self._dense.shape if self._dense is not None else tuple(f.size for f in self._factors)
        """``(2 r_0 + 1, ...)``, one odd size per image axis."""
        parts = (self._dense.tobytes() if self._dense is not None else None,
                 None if self._factors is None else tuple(f.tobytes() for f in self._factors))
        self.key = (self.shape, parts)
        """Hashable identity: the shape and the bytes of the dense taps and of the factors given."""

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Taps) and other.key == self.key

    @property
    def radii(self) -> tuple[int, ...]:
        return tuple((n - 1) // 2 for n in self.shape)

    @property
    def dense(self) -> np.ndarray:
        """The n-D float32 taps (for factors: their outer product, formed on first use)."""
        if self._dense is None:
            self._dense = _frozen(outer_product(self._factors))
        return self._dense

    @property
    def factors(self) -> tuple[np.ndarray, ...] | None:
        """1-D float32 factors whose outer product is the filter, or None when it is not separable."""
        if not self._factors_known:
            found = separable_factors(self._dense)
            self._factors = None if found is None else tuple(_frozen(f) for f in found)
            self._factors_known = True
        return self._factors


def _frozen(array: np.ndarray) -> np.ndarray:
    out = np.array(array, dtype=np.float32, order="C")
    out.flags.writeable = False
    return out


def check_mode(mode: str) -> str:
    """Return ``mode`` if it is a boundary mode this package knows, else raise :class:`FilterError`."""
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
    if array.dtype == target and array.flags.c_contiguous:
        return array
    return backend.get_xp(array).ascontiguousarray(array.astype(target, copy=False))


def check_filter(filter: Any, ndim: int) -> np.ndarray:
    """Validate filter taps for a ``ndim``-D image; return them as a C-contiguous float32 NumPy array.

    Raises :class:`FilterError` for complex or non-numeric taps, a rank other than ``ndim``, an even size
    or a NaN / Inf tap. Any odd size is accepted (the GPU's limits are checked when it plans).
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
    with np.errstate(over="ignore"):  # taps beyond float32 range become Inf and are reported below
        weights = np.ascontiguousarray(weights, dtype=np.float32)
    finite = np.isfinite(weights)
    if not finite.all():
        raise FilterError(f"filter has {weights.size - int(finite.sum())} NaN or Inf tap(s) (as float32): "
                          "expected finite values")
    return weights


def check_factors(factors: Sequence[Any], weights: np.ndarray) -> list[np.ndarray]:
    """Validate separable ``factors`` of ``weights``: one 1-D array per axis whose outer product matches."""
    factors = [np.asarray(f, dtype=np.float32).ravel() for f in factors]
    shape = tuple(f.size for f in factors)
    if shape != weights.shape:
        raise FilterError(f"separable factors of lengths {shape} for a filter of shape {weights.shape}: "
                          "expected one factor per axis with the filter's sizes")
    peak = float(np.max(np.abs(weights)))
    if np.max(np.abs(outer_product(factors, np.float64) - weights)) > SEPARABLE_TOLERANCE * max(peak, 1e-30):
        raise FilterError("separable factors do not multiply to the filter: expected their outer product")
    return factors


@functools.lru_cache(maxsize=CACHE_SIZE)
def _from_bytes(dtype: str, shape: tuple[int, ...], data: bytes, ndim: int) -> Taps:
    return Taps(dense=check_filter(np.frombuffer(data, dtype=dtype).reshape(shape), ndim))


@functools.lru_cache(maxsize=CACHE_SIZE)
def _with_factors(taps: Taps, factors: tuple[bytes, ...]) -> Taps:
    checked = check_factors([np.frombuffer(f, dtype=np.float32) for f in factors], taps.dense)
    return Taps(dense=taps.dense, factors=checked)


_device_taps: OrderedDict[int, tuple[Any, int, Taps]] = OrderedDict()  # id -> (array, ndim, Taps)


def prepare(filter: Any, ndim: int, factors: Sequence[Any] | None = None) -> Taps:
    """The validated :class:`Taps` of ``filter`` for a ``ndim``-D image, from the cache when seen before.

    ``factors``: optional 1-D taps whose outer product is the filter (checked with :func:`check_factors`).
    CuPy taps are read once per array object (module docstring: later in-place changes are not seen).
    """
    if backend.is_gpu_array(filter):
        entry = _device_taps.get(id(filter))
        if entry is not None and entry[0] is filter and entry[1] == ndim:
            _device_taps.move_to_end(id(filter))
            taps = entry[2]
        else:
            taps = _from_host(backend.to_host(filter), ndim)
            _device_taps[id(filter)] = (filter, ndim, taps)
            while len(_device_taps) > CACHE_SIZE:
                _device_taps.popitem(last=False)
    else:
        taps = _from_host(filter, ndim)
    if factors is not None:
        taps = _with_factors(taps, tuple(np.ascontiguousarray(f, dtype=np.float32).tobytes() for f in factors))
    return taps


def _from_host(filter: Any, ndim: int) -> Taps:
    array = np.asarray(filter)
    if array.dtype.kind not in "biuf":  # complex, strings, objects: validation reports them
        return Taps(dense=check_filter(array, ndim))
    array = np.ascontiguousarray(array)
    if array.nbytes > CACHE_BYTES:  # a large filter (CPU path only): validated each call, not kept
        return Taps(dense=check_filter(array, ndim))
    return _from_bytes(array.dtype.str, array.shape, array.tobytes(), ndim)


def default_radius(sigma: float) -> int:
    """Radius of :func:`gaussian_taps` and :func:`mri_recon.filters.smooth` when none is given.

    ``int(4 sigma + 0.5)``: the Gaussian is cut at :data:`TRUNCATE` standard deviations, exactly like
    ``scipy.ndimage.gaussian_filter`` with its default ``truncate=4.0``.
    """
    return int(TRUNCATE * float(sigma) + 0.5)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _gaussian_taps(sigma: float, radius: int) -> np.ndarray:
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    taps = np.exp(-0.5 * (x / sigma) ** 2)
    return _frozen(taps / taps.sum())


def gaussian_taps(sigma: float, radius: int | None = None) -> np.ndarray:
    """Normalized 1-D Gaussian filter.

    Parameters
    ----------
    sigma : float
        Standard deviation in voxels, finite and > 0.
    radius : int, optional
        Half-width ``r >= 0`` (``2r + 1`` taps). Default: :func:`default_radius`, ``int(4 sigma + 0.5)``.

    Returns
    -------
    numpy.ndarray
        float32 ``(2r + 1,)``, ``exp(-x^2 / (2 sigma^2))`` for ``x = -r..r``, divided by its sum (formed in
        double precision, like ``scipy.ndimage.gaussian_filter``'s kernel).
    """
    sigma = check_sigma(sigma)
    radius = default_radius(sigma) if radius is None else check_radius(radius)
    return _gaussian_taps(sigma, radius).copy()


@functools.lru_cache(maxsize=CACHE_SIZE)
def _gaussian(sigmas: tuple[float, ...], radii: tuple[int | None, ...]) -> Taps:
    factors = [_gaussian_taps(s, default_radius(s) if r is None else r) for s, r in zip(sigmas, radii)]
    return Taps(factors=factors)


def gaussian(sigma: Any, radius: Any, ndim: int) -> Taps:
    """The separable Gaussian :class:`Taps` of :func:`mri_recon.filters.smooth` (cached per sigma and radius)."""
    sigmas = tuple(check_sigma(s) for s in per_axis(sigma, ndim, "sigma"))
    radii = (None,) * ndim if radius is None else tuple(check_radius(r) for r in per_axis(radius, ndim, "radius"))
    return _gaussian(sigmas, radii)


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


def check_sigma(sigma: Any) -> float:
    """``sigma`` as a finite float > 0, else :class:`FilterError`."""
    try:
        value = float(sigma)
    except (TypeError, ValueError):
        raise FilterError(f"sigma must be a number; found {sigma!r}") from None
    if not math.isfinite(value) or value <= 0.0:
        raise FilterError(f"sigma must be finite and > 0; found {sigma}")
    return value


def check_radius(radius: Any) -> int:
    """``radius`` as an int >= 0, else :class:`FilterError` (no upper limit: the GPU checks its own)."""
    if isinstance(radius, bool) or not isinstance(radius, (int, np.integer)) or radius < 0:
        raise FilterError(f"radius must be an integer >= 0; found {radius!r}")
    return int(radius)


def per_axis(value: Any, ndim: int, name: str) -> list[Any]:
    """One value per image axis: ``value`` repeated, or a sequence of exactly ``ndim`` values."""
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, str):
        values = list(value)
        if len(values) != ndim:
            raise FilterError(f"{name} has {len(values)} values for a {ndim}-D image: expected 1 or {ndim}")
        return values
    return [value] * ndim
