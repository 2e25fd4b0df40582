"""The one place that knows about CuPy.

Everything else asks an array for its module with :func:`get_xp` and moves data with :func:`to_device` /
:func:`to_host`. CuPy is optional: without it (or without a GPU) ``device="auto"`` means the CPU and
``device="gpu"`` raises :class:`~mri_recon.errors.DeviceError`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import resource
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..errors import DeviceError
from .staging import copy_product_up, copy_up


@dataclass(frozen=True)
class Device:
    """A compute device: ``index == -1`` is the CPU, ``index >= 0`` a CUDA GPU."""

    index: int = -1

    @property
    def is_gpu(self) -> bool:
        return self.index >= 0

    @property
    def xp(self) -> Any:
        """The array module of this device (``numpy`` or ``cupy``)."""
        return cupy_module() if self.is_gpu else np

    def __str__(self) -> str:
        return f"gpu:{self.index}" if self.is_gpu else "cpu"

    def use(self):
        """Context manager making this device current (a no-op for the CPU)."""
        if self.is_gpu:
            return cupy_module().cuda.Device(self.index)
        return _NullContext()


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


CPU = Device(-1)


T = TypeVar("T")
THREADS_ENV = "MRI_RECON_THREADS"
"""Environment variable that sets :func:`cpu_threads` (a batch cluster's CPU workers get their share of cores)."""


def cpu_threads() -> int:
    """Threads the CPU path may use: ``MRI_RECON_THREADS`` when set, else the CPUs this process may run on.

    The CPU path's results do not depend on it: FINUFFT runs one single-threaded transform per coil, the FFTs
    split whole lines, and the solvers' inner products are summed in a fixed order.
    """
    value = os.environ.get(THREADS_ENV, "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise DeviceError(f"{THREADS_ENV} must be a whole number of threads, found {value!r}") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@functools.lru_cache(maxsize=1)
def _blas_controller():
    from threadpoolctl import ThreadpoolController  # noqa: PLC0415 - scans the loaded libraries once, on use

    return ThreadpoolController()


_blas_lock = threading.Lock()
_blas_state: dict[str, Any] = {"depth": 0, "limiter": None}


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """A context in which BLAS (OpenBLAS, MKL, ...) runs on one thread: the CPU path's matrix products give
    the same bits whatever the thread count (OpenBLAS splits a product among its threads, and its last bits
    change with their number). The limit is the process's: nested and concurrent uses keep it until the last
    one ends, then the earlier setting comes back."""
    with _blas_lock:
        if _blas_state["depth"] == 0:
            _blas_state["limiter"] = _blas_controller().limit(limits=1, user_api="blas")
        _blas_state["depth"] += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_state["depth"] -= 1
            if _blas_state["depth"] == 0:
                _blas_state["limiter"].restore_original_limits()
                _blas_state["limiter"] = None


def blas_on_one_thread(function: Callable[..., T]) -> Callable[..., T]:
    """``function`` run inside :func:`one_blas_thread` (the entry points of the CPU path)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        with one_blas_thread():
            return function(*args, **kwargs)

    return wrapper


UNLIMITED = 1 << 60
"""Limits at or above this many bytes mean none (cgroup v1 writes 2^63 rounded down to a page)."""


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _number(text: str | None) -> int | None:
    """An integer file's value; None for "max", an absent file or anything else."""
    try:
        value = int((text or "").strip())
    except ValueError:
        return None
    return value if 0 <= value < UNLIMITED else None


def _meminfo_available(proc: str) -> int | None:
    for line in (_read(f"{proc}/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            try:
                return int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                return None
    return None


def _cgroup_paths(proc: str) -> tuple[str | None, str | None]:
    """This process's cgroup v2 path and cgroup v1 memory-controller path (``/proc/self/cgroup``)."""
    v2 = v1 = None
    for line in (_read(f"{proc}/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "memory" in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def _headroom(folder: str, path: str, limit: str, usage: str) -> int | None:
    """The least ``limit - usage`` over the cgroup ``path`` under ``folder`` and its ancestors (a limit set on a
    parent binds its children); the cgroup's own folder may be absent in a namespace, whose root is then read."""
    parts = [p for p in path.strip().split("/") if p and p != ".."]
    best = None
    for depth in range(len(parts) + 1):
        directory = "/".join([folder, *parts[:depth]])
        cap, used = _number(_read(f"{directory}/{limit}")), _number(_read(f"{directory}/{usage}"))
        if cap is not None:
            room = max(0, cap - (used or 0))
            best = room if best is None else min(best, room)
    return best


def _address_space_room(proc: str) -> int | None:
    """``RLIMIT_AS`` (soft) minus the current virtual size (``VmSize`` of ``/proc/self/status``), or None."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0 or soft >= UNLIMITED:
        return None
    size = 0
    for line in (_read(f"{proc}/self/status") or "").splitlines():
        if line.startswith("VmSize:"):
            try:
                size = int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                size = 0
    return max(0, soft - size)


def host_memory_limits(proc: str = "/proc", sys: str = "/sys") -> dict[str, int]:
    """Bytes this process may still allocate on the host, by the limit that sets them (absent: no such limit).

    ``"MemAvailable"`` (``/proc/meminfo``: free memory and reclaimable cache), ``"cgroup memory.max"`` (cgroup
    v2: ``memory.max - memory.current`` of this process's cgroup, found through ``/proc/self/cgroup``, and of
    its ancestors), ``"cgroup memory.limit_in_bytes"`` (v1: ``memory.limit_in_bytes - memory.usage_in_bytes``)
    and ``"RLIMIT_AS"`` (the address-space limit, ``ulimit -v``, minus the virtual size ``VmSize``). ``proc``
    and ``sys`` are the roots read (tests give fake ones).
    """
    v2, v1 = _cgroup_paths(proc)
    found = {
        "MemAvailable": _meminfo_available(proc),
        "cgroup memory.max": None if v2 is None else _headroom(f"{sys}/fs/cgroup", v2, "memory.max",
                                                               "memory.current"),
        "cgroup memory.limit_in_bytes": None if v1 is None else _headroom(
            f"{sys}/fs/cgroup/memory", v1, "memory.limit_in_bytes", "memory.usage_in_bytes"),
        "RLIMIT_AS": _address_space_room(proc),
    }
    return {name: value for name, value in found.items() if value is not None}


def host_memory_available(proc: str = "/proc", sys: str = "/sys") -> int | None:
    """The least of :func:`host_memory_limits` (None when none is known): what this process may really use."""
    limits = host_memory_limits(proc, sys)
    if limits:
        return min(limits.values())
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=1)
def cupy_module():
    """The ``cupy`` module (imported on the first call: a CPU reconstruction never pays for it), or None when
    CuPy is not installed or cannot be loaded."""
    try:  # CuPy is the optional "gpu" extra.
        import cupy  # noqa: PLC0415
    except Exception:  # pragma: no cover - depends on the machine
        return None
    return cupy


def _loaded_cupy():
    """``cupy`` if some code has imported it, else None: a CuPy array exists only once CuPy is imported, so the
    array-type tests need not import it. A module another thread is still importing (no ``ndarray`` yet) counts
    as not imported: no array of it can exist yet."""
    module = sys.modules.get("cupy")
    return module if module is not None and hasattr(module, "ndarray") else None


def driver_loadable() -> bool:
    """False where the NVIDIA driver's library cannot be loaded (Linux: ``libcuda.so.1``), so that no CUDA GPU
    can be used: CuPy loads the same library. Asked before CuPy is imported, so that ``device="auto"`` on a
    machine with CuPy installed and no driver does not pay for CuPy's import. True elsewhere (CuPy decides)."""
    if not sys.platform.startswith("linux"):
        return True
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """Number of usable CUDA GPUs (0 without the driver, CuPy or a GPU)."""
    cupy = cupy_module() if driver_loadable() else None
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def gpu_available() -> bool:
    return gpu_count() > 0


def resolve_device(device: str | int | Device | None = "auto") -> Device:
    """Turn ``"auto" | "cpu" | "gpu" | "gpu:N" | N | Device`` into a :class:`Device`.

    ``"auto"`` picks GPU 0 when CuPy and a GPU are present, else the CPU. Asking for a GPU that is not
    there raises :class:`DeviceError` naming what is missing.
    """
    if isinstance(device, Device):
        if device.is_gpu:
            return resolve_device(device.index)
        return device
    if device is None or device == "auto":
        return Device(0) if gpu_available() else CPU
    if device == "cpu" or device == -1:
        return CPU
    if isinstance(device, str):
        text = device.strip().lower()
        if text == "gpu":
            index = 0
        elif text.startswith("gpu:") and text[4:].isdigit():
            index = int(text[4:])
        else:
            raise DeviceError(f"unknown device {device!r}: expected 'auto', 'cpu', 'gpu' or 'gpu:N'")
    elif isinstance(device, (int, np.integer)):
        index = int(device)
    else:
        raise DeviceError(f"unknown device {device!r}: expected 'auto', 'cpu', 'gpu' or 'gpu:N'")
    if cupy_module() is None:
        raise DeviceError(
            "device 'gpu' requested but CuPy is not installed: pip install 'mri-recon[gpu]' "
            "(or use --device cpu)"
        )
    count = gpu_count()
    if count == 0:
        raise DeviceError("device 'gpu' requested but no CUDA GPU or driver was found (use --device cpu)")
    if not 0 <= index < count:
        raise DeviceError(f"device 'gpu:{index}' requested but only {count} GPU(s) are present")
    return Device(index)


def resolve_device_like(device: str | int | Device | None, like: Any) -> Device:
    """:func:`resolve_device`, except that ``"auto"`` (or None) with a CuPy array ``like`` is that array's GPU."""
    auto = device is None or (isinstance(device, str) and device == "auto")
    return resolve_device(int(like.device.id)) if auto and is_gpu_array(like) else resolve_device(device)


def get_xp(array: Any) -> Any:
    """Array module (``numpy`` or ``cupy``) of ``array``."""
    cupy = _loaded_cupy()
    if cupy is not None and isinstance(array, cupy.ndarray):
        return cupy
    return np


def is_gpu_array(array: Any) -> bool:
    cupy = _loaded_cupy()
    return cupy is not None and isinstance(array, cupy.ndarray)


def to_device(array: Any, device: Device) -> Any:
    """Copy ``array`` to ``device`` (no copy when it is already there)."""
    if device.is_gpu:
        cupy = cupy_module()
        with cupy.cuda.Device(device.index):
            if isinstance(array, np.ndarray):
                host = np.ascontiguousarray(array)
                out = cupy.empty(host.shape, dtype=host.dtype)
                upload_into(host, out, device)
                return out
            return cupy.asarray(array)
    return to_host(array)


def upload_into(host: np.ndarray, out: Any, device: Device) -> None:
    """The C-contiguous host array ``host`` into the CuPy array ``out`` of the same bytes on ``device``,
    complete on return (:func:`mri_recon.arrays.staging.copy_up`: pinned buffers filled by several threads)."""
    copy_up(cupy_module(), host, out, device.index)


def upload_product(matrix: np.ndarray, host: np.ndarray, out: Any, device: Device) -> None:
    """``matrix @ host`` (host ``(N, C)`` and ``(C, L)`` of one dtype) into the C-contiguous CuPy array ``out``
    ``(N, L)`` on ``device``, computed on the host on the way up, complete on return
    (:func:`mri_recon.arrays.staging.copy_product_up`). Each product runs on one BLAS thread: the staging's
    threads are the parallelism."""
    with one_blas_thread():
        copy_product_up(cupy_module(), matrix, host, out, device.index)


def to_host(array: Any) -> np.ndarray:
    """NumPy copy of ``array`` (CuPy arrays are downloaded)."""
    if is_gpu_array(array):
        return _loaded_cupy().asnumpy(array)
    return np.asarray(array)


def synchronize(device: Device) -> None:
    if device.is_gpu:
        cupy = cupy_module()
        with cupy.cuda.Device(device.index):
            cupy.cuda.get_current_stream().synchronize()


def device_memory(device: Device) -> tuple[int, int]:
    """``(free, total)`` bytes of a GPU's memory (CuPy's pool counts as free)."""
    if not device.is_gpu:
        raise DeviceError("device_memory() needs a GPU device")
    cupy = cupy_module()
    with cupy.cuda.Device(device.index):
        free, total = cupy.cuda.runtime.memGetInfo()
        pool = cupy.get_default_memory_pool()
        return int(free + pool.free_bytes()), int(total)
