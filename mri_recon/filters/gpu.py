"""GPU execution of the post-filter: compiled kernels, cached plans, ``__constant__`` uploads on change only.

Semantics are those of :func:`mri_recon.filters.convolve` (correlation, like ``scipy.ndimage.correlate``);
the launch geometry comes from :mod:`.plan`. What a call costs besides its kernels:

- **Plans are made once** per (image shape, dtype, filter taps, boundary mode, strategy, 16-byte alignment,
  device) and kept in a bounded LRU cache of :data:`PLAN_CACHE_SIZE` entries: the launches, their compiled
  kernels, their scalar arguments and a device copy of each launch's taps. A plan given to :func:`execute`
  again (the same :class:`~.plan.Launch` objects) is prepared once too.
- **Taps are validated and hashed once** (:func:`.taps.prepare`: NumPy taps by their bytes, CuPy taps read
  once per array object).
- **Constant memory is written only when the taps change**: the last taps uploaded are remembered per
  loaded CUDA module and device (two ``RawModule`` objects built from the same source and options share one
  loaded module per device, and so one ``__constant__`` array: the key is the loaded module's handle). An
  upload is a device-to-device copy from the plan's device copy of the taps, queued on the current stream
  before the launch that reads it: no host-device copy, no synchronization. Uploads and launches must stay
  on one stream (as everywhere in mri-recon): a module's ``__constant__`` array is shared by all streams.

No call reads a device value on the host, except a CuPy filter array seen for the first time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import kernels
from ..arrays import backend
from ..arrays.backend import Device
from ..errors import DeviceError, FilterError, InvalidDataError
from .plan import (
    FILENAME,
    MAX_RADIUS,
    SEPARABLE_MAX_RADIUS,
    STATIC_SHARED_BYTES,
    STRATEGIES,
    VECTOR_BYTES,
    Launch,
    check_shared_memory,
    plan,
)
from .taps import Taps, check_image, check_mode, outer_product, prepare

PLAN_CACHE_SIZE = 64
"""Prepared plans kept per process (least recently used dropped first)."""
_NEAREST = {"zero": 0, "nearest": 1}


@dataclass(frozen=True, eq=False)
class _Step:
    """One launch ready to go: kernel, taps on the device and every argument but the two arrays."""

    module: Any
    kernel: Any
    resident: tuple[int, int]
    """``(device, loaded module handle)``: whose ``__constant__`` array the taps go to."""
    taps: Any
    """float32 CuPy copy of the launch's taps, source of the constant upload."""
    taps_key: bytes
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    scalars: tuple[np.int32, ...]
    """``nx, ny, nz, tiles_x, nearest``."""


@dataclass(frozen=True, eq=False)
class Prepared:
    """A plan on one GPU with everything a call needs, made once and cached."""

    launches: tuple[Launch, ...]
    steps: tuple[_Step, ...]
    device_index: int
    aligned: bool
    """The plan needs 16-byte aligned arrays (a streaming launch)."""


def correlate(image: Any, weights: Any, *, mode: str = "zero", strategy: str = "auto",
              factors: list[np.ndarray] | None = None, out: Any = None):
    """Correlate a CuPy ``image`` with ``weights`` on the image's GPU.

    Parameters
    ----------
    image : cupy.ndarray
        1-D, 2-D or 3-D; computed as float32 or complex64 (other dtypes are cast).
    weights : array_like
        Real filter of the image's rank, odd sizes (see :func:`.taps.check_filter`): radius <=
        :data:`~.plan.MAX_RADIUS`, or <= :data:`~.plan.SEPARABLE_MAX_RADIUS` for a separable filter.
    mode : {"zero", "nearest"}
        Ghost cells.
    strategy : {"auto", "A", "B", "register", "stream", "separable"}
        Kernel family (:mod:`.plan`).
    factors : list of numpy.ndarray, optional
        1-D taps whose outer product is ``weights``; found automatically when omitted.
    out : cupy.ndarray, optional
        C-contiguous array of the result's shape and dtype to write into; not the image itself.

    Returns
    -------
    cupy.ndarray
        ``out`` or a new array, float32 or complex64.

    Raises
    ------
    DeviceError
        ``image`` is not a CuPy array.
    FilterError
        Invalid filter or mode, or one this GPU path cannot take (the message names the limit).
    InvalidDataError
        Invalid image or ``out``.
    """
    if not backend.is_gpu_array(image):
        raise DeviceError(f"gpu_filter.correlate needs a CuPy array; found {type(image).__name__}")
    data = check_image(image)
    taps = prepare(weights, data.ndim, factors)
    return run(data, taps, mode=check_mode(mode), strategy=strategy, out=out)


def run(data: Any, taps: Taps, *, mode: str, strategy: str = "auto", out: Any = None):
    """Correlate an already checked image (:func:`.taps.check_image`) with validated ``taps``.

    The internal entry of :func:`mri_recon.filters.convolve`: no validation beyond a cache lookup.
    """
    factors = taps.factors
    if factors is not None and max((f.size - 1) // 2 for f in factors) > SEPARABLE_MAX_RADIUS:
        return _wide_separable(data, factors, mode, out)
    device_index = int(data.device.id)
    aligned = _aligned(data) and (out is None or not backend.is_gpu_array(out) or _aligned(out))
    prepared = _planned(data.shape, data.dtype.kind == "c", taps, strategy, aligned, mode, device_index)
    return _execute(prepared, data, out)


def _wide_separable(data: Any, factors: Any, mode: str, out: Any) -> Any:
    """A separable filter wider than the project's kernels (radius > :data:`SEPARABLE_MAX_RADIUS`, e.g. a
    Gaussian of sigma > 6): 1-D correlations along each axis through ``cupyx.scipy.ndimage.correlate1d``,
    which has no radius limit. Same semantics (correlation; zero or nearest boundaries)."""
    from cupyx.scipy import ndimage  # noqa: PLC0415 - CuPy's path

    cupy = backend.cupy_module()
    scipy_mode = {"zero": "constant", "nearest": "nearest"}[mode]
    result = data
    for axis, factor in enumerate(factors):
        weights = cupy.asarray(factor, dtype=cupy.float32)
        if data.dtype.kind == "c":
            result = (ndimage.correlate1d(result.real, weights, axis=axis, mode=scipy_mode, cval=0.0)
                      + 1j * ndimage.correlate1d(result.imag, weights, axis=axis, mode=scipy_mode, cval=0.0))
        else:
            result = ndimage.correlate1d(result, weights, axis=axis, mode=scipy_mode, cval=0.0)
    result = result.astype(data.dtype, copy=False)
    if out is not None:
        out[...] = result
        return out
    return result


@functools.lru_cache(maxsize=PLAN_CACHE_SIZE)
def _planned(shape: tuple[int, ...], complex_: bool, taps: Taps, strategy: str, aligned: bool, mode: str,
             device_index: int) -> Prepared:
    weights = None if taps.from_factors else taps.dense
    launches = plan(shape, weights, complex_=complex_, strategy=strategy, factors=taps.factors, aligned=aligned)
    return _prepare(tuple(launches), device_index, _NEAREST[mode])


def execute(launches: list[Launch], image: Any, *, out: Any = None, mode: str = "zero"):
    """Run a :func:`.plan.plan` on a C-contiguous float32 / complex64 CuPy ``image`` (no other validation;
    a streaming launch also needs 16-byte aligned arrays).

    The same plan (the same :class:`~.plan.Launch` objects) is prepared once: later calls only launch.
    Multi-pass plans alternate between ``out`` and one scratch array so that the last pass writes ``out``.
    """
    nearest = _NEAREST[check_mode(mode)]
    return _execute(_prepare(tuple(launches), int(image.device.id), nearest), image, out)


def _aligned(array: Any) -> bool:
    return int(array.data.ptr) % VECTOR_BYTES == 0


@functools.lru_cache(maxsize=PLAN_CACHE_SIZE)
def _prepare(launches: tuple[Launch, ...], device_index: int, nearest: int) -> Prepared:
    """Compile the launches' kernels and copy their taps to the GPU once (the only host-to-device copy)."""
    cupy = backend.cupy_module()
    steps = []
    with cupy.cuda.Device(device_index):
        for launch in launches:
            module, kernel = _compiled(launch.defines, launch.name, launch.shared_bytes, device_index)
            nz, ny, nx = launch.view
            scalars = tuple(np.int32(v) for v in (nx, ny, nz, launch.tiles_x, nearest))
            steps.append(_Step(module, kernel, (device_index, _module_handle(module)), cupy.asarray(launch.taps),
                               launch.taps.tobytes(), launch.grid, launch.block, launch.shared_bytes, scalars))
    return Prepared(launches, tuple(steps), device_index,
                    any(launch.strategy == "stream" for launch in launches))


def _module_handle(module: Any) -> int:
    """The loaded CUDA module (``CUmodule``) behind a ``RawModule`` on the current device."""
    handle = getattr(getattr(module, "module", None), "ptr", None)
    return int(handle) if handle else id(module)


_resident: dict[tuple[int, int], bytes] = {}  # (device, CUmodule) -> taps in its __constant__ array


def _execute(prepared: Prepared, image: Any, out: Any):
    cupy = backend.cupy_module()
    with cupy.cuda.Device(prepared.device_index):
        if out is None:
            out = cupy.empty_like(image)
        elif (not backend.is_gpu_array(out) or out.shape != image.shape or out.dtype != image.dtype
              or not out.flags.c_contiguous or out.data.ptr == image.data.ptr):
            raise InvalidDataError(f"out must be a C-contiguous {image.dtype} array of shape {image.shape} other "
                                   f"than the image; found {type(out).__name__} {getattr(out, 'dtype', '')} "
                                   f"{getattr(out, 'shape', '')}")
        if prepared.aligned and not (_aligned(image) and _aligned(out)):
            raise FilterError("strategy 'stream' needs arrays that start on 16-byte boundaries")
        steps = prepared.steps
        scratch = cupy.empty_like(image) if len(steps) > 1 else None
        source = image
        for i, step in enumerate(steps):
            target = out if (len(steps) - 1 - i) % 2 == 0 else scratch
            if _resident.get(step.resident) != step.taps_key:
                kernels.upload_constant(step.module, "c_filter", step.taps)
                _resident[step.resident] = step.taps_key
            step.kernel(step.grid, step.block, (source, target, *step.scalars), shared_mem=step.shared_bytes)
            source = target
    return out


@functools.cache
def _compiled(defines: tuple[tuple[str, int], ...], name: str, shared_bytes: int, device_index: int):
    """The module and kernel of a launch on one GPU, allowed ``shared_bytes`` of dynamic shared memory."""
    module = kernels.get_module(FILENAME, dict(defines), Device(device_index))
    kernel = module.get_function(name)
    if shared_bytes > STATIC_SHARED_BYTES:
        attributes = backend.cupy_module().cuda.Device(device_index).attributes
        check_shared_memory(name, shared_bytes, int(attributes["MaxSharedMemoryPerBlockOptin"]))
        kernel.max_dynamic_shared_size_bytes = shared_bytes
    return module, kernel


def compile_configurations() -> list[tuple[str, dict[str, int]]]:
    """Every ``(filename, defines)`` the launchers produce for isotropic radii.

    Covers strategies A, B, register, stream and the separable passes for radii 0..:data:`MAX_RADIUS` and
    the separable passes for radii up to :data:`SEPARABLE_MAX_RADIUS`, on 1-D, 2-D and 3-D images, float32
    and complex64. (Anisotropic direct filters compile the same code with other ``RX, RY, RZ``.) For CI:
    ``kernels.compile_ptx(filename, defines)`` on each.
    """
    shapes = {1: (1000,), 2: (300, 300), 3: (40, 40, 40)}
    seen: dict[tuple[tuple[str, int], ...], None] = {}
    for complex_ in (False, True):
        for ndim, shape in shapes.items():
            for radius in range(SEPARABLE_MAX_RADIUS + 1):
                factors = [np.ones(2 * radius + 1, np.float32)] * ndim
                weights = outer_product(factors) if radius <= MAX_RADIUS else None
                strategies = STRATEGIES[1:] if radius <= MAX_RADIUS else ("separable",)
                for strategy in strategies:
                    try:
                        launches = plan(shape, weights, complex_=complex_, strategy=strategy, factors=factors)
                    except FilterError:  # strategy A in 3-D beyond radius 4, stream beyond radius 3
                        continue
                    for launch in launches:
                        seen.setdefault(launch.defines)
    return [(FILENAME, dict(defines)) for defines in seen]
