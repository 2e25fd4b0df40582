"""CUDA sources of mri-recon and the one module that loads them.

Kernels live in ``*.cu`` files beside this module, ``extern "C"`` and prefixed ``mri_recon_``; device
functions they share live in ``*.cuh`` headers here, found through ``-I`` of this folder (a checksum of the
headers is part of the options, so CuPy's on-disk cache never serves a kernel built with an older header).
Every configuration the launchers build is listed in :mod:`mri_recon.kernels.registry`. Sizes known
at compile time are passed as ``-D`` options (never by editing the source text). Modules are memoized per
(file, options, device); :func:`prefetch` builds a list of them on threads ahead of use. A module is loaded
from the precompiled bundle (:mod:`mri_recon.kernels.bundle`, docs/kernels.md) when it holds a verified binary
of this source and these options for the device, and compiled with NVRTC otherwise.
:func:`upload_constant` is the single way to fill ``__constant__`` memory: it checks that the data fits
the symbol (and so the 64 KB constant bank) before copying on the current stream, which keeps uploads
ordered with the launches that read them.

:func:`compile_ptx` compiles a file with NVRTC without touching a GPU; CI uses it so that a kernel that does
not build never lands.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..arrays.backend import Device, cupy_module
from ..errors import KernelError
from . import bundle, warmup
from .sources import BASE_OPTIONS, KERNEL_DIR, header_files, include_options, kernel_files, options, source

__all__ = ["BASE_OPTIONS", "CONSTANT_BYTES", "KERNEL_DIR", "compile_ptx", "get_kernel", "get_module", "header_files",
           "include_options", "kernel_files", "options", "prefetch", "source", "symbol_bytes",
           "upload_constant", "warm_up"]

CONSTANT_BYTES = 65536  # size of the __constant__ bank every CUDA device has


def _freeze(defines: Mapping[str, Any] | None) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((str(k), int(v)) for k, v in (defines or {}).items()))


_BUILT: dict[tuple[str, tuple[tuple[str, int], ...], int], Future] = {}
_BUILT_LOCK = threading.Lock()


def _build(filename: str, frozen: tuple[tuple[str, int], ...], device_index: int):
    cupy = cupy_module()
    if cupy is None:
        raise KernelError("CuPy is not installed: GPU kernels are unavailable")
    with cupy.cuda.Device(device_index):
        module = bundle.load(cupy, filename, dict(frozen), device_index)
        if module is not None:
            return module
        try:
            module = cupy.RawModule(code=source(filename), options=options(dict(frozen)) + include_options())
            module.compile()
        except cupy.cuda.compiler.CompileException as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise KernelError(f"CUDA kernel {filename} failed to compile: {first}") from exc
    return module


def _module(filename: str, frozen: tuple[tuple[str, int], ...], device_index: int):
    """The module of ``(filename, frozen, device_index)``, built once: a thread asking for a module that
    another thread (a :func:`prefetch`) is building waits for that build instead of starting its own."""
    key = (filename, frozen, device_index)
    with _BUILT_LOCK:
        future = _BUILT.get(key)
        owner = future is None
        if owner:
            future = _BUILT[key] = Future()
    if owner:
        try:
            future.set_result(_build(filename, frozen, device_index))
        except BaseException as exc:
            with _BUILT_LOCK:
                del _BUILT[key]  # a failed build is retried (and fails again, with its message) on next use
            future.set_exception(exc)
    return future.result()


def get_module(filename: str, defines: Mapping[str, Any] | None = None, device: Device | None = None):
    """The compiled ``cupy.RawModule`` of ``filename`` with ``defines``, memoized per device."""
    index = 0 if device is None else device.index
    return _module(filename, _freeze(defines), index)


@functools.cache
def _compile_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, min(16, os.cpu_count() or 1)), thread_name_prefix="mri-recon-nvrtc")


def prefetch(configs: Iterable[tuple[str, Mapping[str, Any] | None]], device: Device | None = None) -> list[Future]:
    """Start building every ``(filename, defines)`` of ``configs`` on ``device`` on a pool of threads and return
    at once (NVRTC releases the GIL, so the builds run in parallel with each other and with the caller).

    A launcher that later asks for one of these modules (:func:`get_module`) waits for its build rather than
    starting a second one; with CuPy's disk cache warm, a prefetch only loads the binaries. Errors surface
    where the module is used (or from the returned futures). Then :func:`warm_up`: CuPy's own kernels are in
    its cache before the first GPU work."""
    index = 0 if device is None else device.index
    futures = []
    for filename, defines in configs:
        key = (filename, _freeze(defines), index)
        with _BUILT_LOCK:
            built = _BUILT.get(key)
        # built or being built: nothing to submit (a warm process pays no thread hand-off)
        futures.append(built if built is not None else _compile_pool().submit(_module, *key))
    warm_up(Device(index))
    return futures


def warm_up(device: Device) -> None:
    """Before the first GPU work: the first time CuPy is to compile a kernel of its own in this process, the
    recorded ones are compiled ahead on worker processes first (unless the cache holds them), so that CuPy
    loads them from its cache instead of compiling each on first use (:mod:`mri_recon.kernels.warmup`). Work
    that asks nothing of CuPy's compiler (a default reconstruction) starts no worker and waits for none."""
    if not device.is_gpu:
        return  # nothing to warm, and CuPy not imported for the CPU
    cupy = cupy_module()
    if cupy is not None:
        warmup.wait_before_compiling(cupy)


def get_kernel(filename: str, name: str, defines: Mapping[str, Any] | None = None,
               device: Device | None = None):
    """A ``cupy.RawKernel`` for the ``extern "C"`` function ``name`` of ``filename``."""
    return get_module(filename, defines, device).get_function(name)


def upload_constant(module, symbol: str, data) -> None:
    """Copy ``data`` (NumPy or CuPy array) to the start of the ``__constant__`` array ``symbol``.

    Raises :class:`KernelError` when the data is larger than the symbol (or than the 64 KB bank).
    The copy is issued on the current stream, so it is ordered with the launches around it.
    """
    cupy = cupy_module()
    pointer = module.get_global(symbol)
    capacity = min(symbol_bytes(module, symbol) or CONSTANT_BYTES, CONSTANT_BYTES)
    nbytes = int(data.nbytes)
    if nbytes > capacity:
        raise KernelError(
            f"constant-memory upload to {symbol!r} needs {nbytes} bytes but the symbol holds {capacity}"
        )
    if nbytes == 0:
        return
    view = cupy.ndarray(data.shape, data.dtype, pointer)
    if isinstance(data, cupy.ndarray):
        view[...] = data
    else:
        view.set(data)


@functools.lru_cache(maxsize=1)
def _libcuda():
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuModuleGetGlobal_v2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                   ctypes.c_char_p]
    fn.restype = ctypes.c_int
    return fn


def symbol_bytes(module, symbol: str) -> int | None:
    """Size in bytes of the ``__constant__`` (or ``__device__``) symbol, from the CUDA driver; None when
    the driver cannot be asked (CuPy's pointer to a global does not carry its size)."""
    import ctypes

    fn = _libcuda()
    handle = getattr(getattr(module, "module", None), "ptr", None)
    if fn is None or not handle:
        return None
    dptr, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    if fn(ctypes.byref(dptr), ctypes.byref(size), ctypes.c_void_p(int(handle)), symbol.encode()) != 0:
        return None
    return int(size.value)


def compile_ptx(filename: str, defines: Mapping[str, Any] | None = None, arch: str = "compute_90") -> str:
    """Compile ``filename`` to PTX with NVRTC (no GPU needed). Raises :class:`KernelError` with the log."""
    try:
        from cupy_backends.cuda.libs import nvrtc
    except Exception as exc:  # pragma: no cover - depends on the machine
        raise KernelError(f"NVRTC is unavailable ({exc}); install 'mri-recon[test]'") from exc
    program = nvrtc.createProgram(source(filename), filename, [], [])
    try:
        nvrtc.compileProgram(program, [*options(defines), *include_options(), f"-arch={arch}"])
    except nvrtc.NVRTCError as exc:
        log = nvrtc.getProgramLog(program)
        raise KernelError(f"CUDA kernel {filename} failed to compile:\n{log}") from exc
    ptx = nvrtc.getPTX(program)
    return ptx.decode() if isinstance(ptx, bytes) else ptx
