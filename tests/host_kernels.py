"""Running the element-wise CUDA kernels on the host (tests/host/*_host.cpp): building them with the host's
C++ compiler, passing arguments through ctypes, and the NumPy stand-ins for cuFFT plans and CuPy coil maps
that let a fused GPU operator run its own launches on NumPy arrays."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mri_recon.kernels import KERNEL_DIR

HOST_DIR = Path(__file__).resolve().parent / "host"
FORWARD = -1
"""cuFFT's ``CUFFT_FORWARD`` (fixed by its API; ``CUFFT_INVERSE`` is 1)."""


def build(source: str, target: Path, *flags: str) -> ctypes.CDLL:
    """``tests/host/<source>`` compiled into the shared library ``target`` (skips without a C++ compiler)."""
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip(f"no C++ compiler to build {source} for the host")
    subprocess.run([compiler, "-O1", "-std=c++17", "-pthread", "-shared", "-fPIC", "-Wno-unknown-pragmas", *flags,
                    f"-I{KERNEL_DIR}", str(HOST_DIR / source), "-o", str(target)], check=True)
    return ctypes.CDLL(str(target))


def argument(value):
    """A kernel argument as ctypes passes it: a C-contiguous complex64 array's address, or a typed scalar."""
    if isinstance(value, np.ndarray):
        assert value.dtype == np.complex64 and value.flags.c_contiguous
        return ctypes.c_void_p(value.ctypes.data)
    return {np.int32: ctypes.c_int, np.int64: ctypes.c_longlong, np.float32: ctypes.c_float}[type(value)](value)


class HostPlan:
    """cuFFT's batched in-place C2C plan in NumPy: unnormalized both ways, the shape checked. ``columns``: the
    plan over the leading axes of a ``(*lengths, batch)`` layout (any array of that many elements)."""

    def __init__(self, shape, device_index, columns=False):
        self.shape, self.columns = tuple(shape), columns

    def fft(self, a, out, direction):
        assert out is a
        if self.columns:
            assert a.size == np.prod(self.shape)
            view, axes = a.reshape(self.shape), tuple(range(len(self.shape) - 1))
        else:
            assert a.shape == self.shape
            view, axes = a, tuple(range(1, a.ndim))
        if direction == FORWARD:
            view[...] = np.fft.fftn(view, axes=axes)
        else:
            view[...] = np.fft.ifftn(view, axes=axes) * np.prod([view.shape[k] for k in axes])


class HostMaps(np.ndarray):
    """Coil maps that name a device, as CuPy arrays do."""

    @property
    def device(self):
        return SimpleNamespace(id=0)
