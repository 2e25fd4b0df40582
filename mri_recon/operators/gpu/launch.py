"""Helpers of the GPU launchers (the exact sums, off-resonance, tensor cores, the benchmark ladder): device
buffers, the current device, argument checks of device arrays and launch sizes. CuPy arrays on the current
device in, nothing copied to the host."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ...arrays.backend import Device, cupy_module, gpu_available
from ...errors import DeviceError, InvalidDataError, SchemaError
from ..engines.gpu_layout import forward_runs, line_list

__all__ = ["check_gpu_array", "check_trajectory", "current_device", "empty", "is_cupy", "launch_size", "on_device",
           "sm_count"]


def empty(shape: tuple[int, ...], dtype: Any) -> Any:
    """Uninitialized device buffer; every buffer the kernels fill comes from here (tests poison it)."""
    return cupy_module().empty(shape, dtype)


def is_cupy(array: Any) -> bool:
    cupy = cupy_module()
    return cupy is not None and isinstance(array, cupy.ndarray)


def current_device() -> Device:
    """The current CUDA device; DeviceError without CuPy or a GPU."""
    if cupy_module() is None or not gpu_available():
        raise DeviceError("the GPU kernels need CuPy and an NVIDIA GPU (use the CPU path: device='cpu')")
    return Device(int(cupy_module().cuda.Device().id))


@functools.cache
def sm_count(index: int) -> int:
    return int(cupy_module().cuda.Device(index).attributes["MultiProcessorCount"])


@functools.lru_cache(maxsize=32)
def on_device(kind: str, matrix: tuple[int, ...], extra: int, index: int) -> tuple[Any, ...]:
    """Device copies of the host structures, memoized per device."""
    cupy = cupy_module()
    with cupy.cuda.Device(index):
        if kind == "lines":
            return (cupy.asarray(line_list(matrix, bool(extra))),)
        return tuple(cupy.asarray(a) for a in forward_runs(matrix, extra))


def check_gpu_array(name: str, array: Any, device: Device, kinds: str, ndim: int) -> None:
    if not is_cupy(array):
        raise DeviceError(f"{name} must be a CuPy array on the GPU, found {type(array).__name__}")
    if int(array.device.id) != device.index:
        raise DeviceError(f"{name} lives on gpu:{array.device.id} but the current device is gpu:{device.index}")
    if array.dtype.kind not in kinds or array.ndim != ndim:
        want = {"c": "complex64", "f": "float32"}[kinds[0]]
        raise SchemaError(f"{name} must be {want} with {ndim} dimensions, found {array.dtype} {array.shape}")


def check_trajectory(trajectory: Any, matrix: tuple[int, ...], n_samples: int | None, device: Device) -> int:
    """Check a device trajectory ``(M, D)`` (M = ``n_samples`` when given) and return M."""
    check_gpu_array("trajectory", trajectory, device, "f", 2)
    if n_samples is None:
        n_samples = int(trajectory.shape[0])
    if trajectory.shape != (n_samples, len(matrix)):
        raise SchemaError(f"trajectory must have shape ({n_samples}, {len(matrix)}) for {n_samples} samples and "
                          f"matrix {list(matrix)}, found {trajectory.shape}")
    if n_samples < 1:
        raise InvalidDataError("there are no samples (M = 0)")
    return n_samples


def launch_size(value: int | None, default: int, limit: int, what: str) -> int:
    if value is None:
        return min(default, limit)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= int(value) <= limit:
        raise InvalidDataError(f"{what} must be an integer in [1, {limit}], found {value!r}")
    return int(value)
