"""Where the kernel sources are and the NVRTC options every build of them starts from (no GPU, no CuPy)."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
    """The text of ``filename`` in the kernel folder, or of the ``.cu`` file at an absolute path (kernels of
    the tests and benchmarks, which are not shipped; they may include the package's headers)."""
    path = Path(filename) if Path(filename).is_absolute() else KERNEL_DIR / filename
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
