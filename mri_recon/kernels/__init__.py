"""CUDA sources of mri-recon and the one module that loads them.

Kernels live in ``*.cu`` files beside this module, ``extern "C"`` and prefixed ``mri_recon_``; device
functions they share live in ``*.cuh`` headers here, found through ``-I`` of this folder (a checksum of the
headers is part of the options, so CuPy's on-disk cache never serves a kernel built with an older header).
Every configuration the launchers build is listed in :mod:`mri_recon.kernels.registry`. Sizes known
at compile time are passed as ``-D`` options (never by editing the source text). Modules are memoized per
(file, options, device). :func:`upload_constant` is the single way to fill ``__constant__`` memory: it checks
that the data fits the symbol (and so the 64 KB constant bank) before copying on the current stream, which
keeps uploads ordered with the launches that read them.

:func:`compile_ptx` compiles a file with NVRTC without touching a GPU; CI uses it so that a kernel that does
not build never lands.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..backend import Device, cupy_module
from ..errors import KernelError

KERNEL_DIR = Path(__file__).resolve().parent
CONSTANT_BYTES = 65536  # size of the __constant__ bank every CUDA device has
BASE_OPTIONS = ("--std=c++17",)


def kernel_files() -> list[Path]:
    """Every ``.cu`` file shipped with the package."""
    return sorted(KERNEL_DIR.glob("*.cu"))


def header_files() -> list[Path]:
    """Every ``.cuh`` header shipped with the package (included by the ``.cu`` files)."""
    return sorted(KERNEL_DIR.glob("*.cuh"))


@functools.cache
def source(filename: str) -> str:
    """The text of ``filename`` in the kernel folder."""
    path = KERNEL_DIR / filename
    if not path.is_file():
        raise KernelError(f"kernel source {filename!r} not found in {KERNEL_DIR}")
    return path.read_text()


def options(defines: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """NVRTC options: the base options plus ``-DNAME=VALUE`` for each define, in sorted order."""
    items = sorted((defines or {}).items())
    return BASE_OPTIONS + tuple(f"-D{name}={int(value)}" for name, value in items)


def include_options() -> tuple[str, ...]:
    """``-I`` of the kernel folder and ``-DMRI_RECON_HEADERS=<crc32 of every header>`` (the cache key)."""
    crc = 0
    for path in header_files():
        crc = zlib.crc32(path.name.encode() + b"\0" + source(path.name).encode(), crc)
    return (f"-I{KERNEL_DIR}", f"-DMRI_RECON_HEADERS={crc}")


def _freeze(defines: Mapping[str, Any] | None) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((str(k), int(v)) for k, v in (defines or {}).items()))


@functools.cache
def _module(filename: str, frozen: tuple[tuple[str, int], ...], device_index: int):
    cupy = cupy_module()
    if cupy is None:
        raise KernelError("CuPy is not installed: GPU kernels are unavailable")
    with cupy.cuda.Device(device_index):
        try:
            module = cupy.RawModule(code=source(filename), options=options(dict(frozen)) + include_options())
            module.compile()
        except cupy.cuda.compiler.CompileException as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise KernelError(f"CUDA kernel {filename} failed to compile: {first}") from exc
    return module


def get_module(filename: str, defines: Mapping[str, Any] | None = None, device: Device | None = None):
    """The compiled ``cupy.RawModule`` of ``filename`` with ``defines``, memoized per device."""
    index = 0 if device is None else device.index
    return _module(filename, _freeze(defines), index)


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
