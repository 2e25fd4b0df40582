"""The fused GPU CG-SENSE operator equals the NumPy normal operator, for every coil batching; and its kernels
(toeplitz.cu built for the host, no GPU needed) behind FusedSenseNormal's own launches."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mri_recon.backend import cupy_module
from mri_recon.kernels import KERNEL_DIR
from mri_recon.operators import gpu_toeplitz
from mri_recon.operators.toeplitz import kernel_spectrum, normal_operator

HOST_SOURCE = Path(__file__).resolve().parent / "host" / "toeplitz_host.cpp"


def _crandn(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(16, 16), (13, 7), (6, 5, 4)], ids=["2d-even", "2d-odd", "3d"])
@pytest.mark.parametrize("coil_batch", [None, 1, 2], ids=["all", "one", "two"])
def test_fused_sense_operator_matches_numpy(rng, matrix, coil_batch):
    cupy = cupy_module()
    psf = _crandn(rng, *(2 * n for n in matrix))
    maps = _crandn(rng, 3, *matrix)
    x = _crandn(rng, *matrix)
    ref = normal_operator(kernel_spectrum(psf), coil_maps=maps, lam=0.3)(x)
    op = normal_operator(kernel_spectrum(cupy.asarray(psf)), coil_maps=cupy.asarray(maps), lam=0.3,
                         coil_batch=coil_batch)
    first = cupy.asnumpy(op(cupy.asarray(x)))
    second = cupy.asnumpy(op(cupy.asarray(x)))  # the reused work buffer must not leak between calls
    for got in (first, second):
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-5


@pytest.fixture(scope="module")
def host_toeplitz(tmp_path_factory):
    """``toeplitz.cu`` built for the host (tests/host/toeplitz_host.cpp): ``get_kernel``'s twin."""
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler to build toeplitz.cu for the host")
    target = tmp_path_factory.mktemp("toeplitz_host") / "toeplitz.so"
    subprocess.run([compiler, "-O1", "-std=c++17", "-shared", "-fPIC", f"-I{KERNEL_DIR}", str(HOST_SOURCE), "-o",
                    str(target)], check=True)
    library = ctypes.CDLL(str(target))

    def argument(value):
        if isinstance(value, np.ndarray):
            assert value.dtype == np.complex64 and value.flags.c_contiguous
            return ctypes.c_void_p(value.ctypes.data)
        return {np.int32: ctypes.c_int, np.int64: ctypes.c_longlong, np.float32: ctypes.c_float}[type(value)](value)

    def get_kernel(filename, name, defines, device):
        assert filename == "toeplitz.cu" and name.startswith("mri_recon_sense_")
        function = getattr(library, "emu_" + name.removeprefix("mri_recon_sense_"))
        return lambda grid, block, args: function(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]),
                                                  *(argument(a) for a in args))

    return get_kernel


class _HostPlan:
    """cuFFT's batched in-place C2C plan in NumPy: unnormalized both ways, the shape checked."""

    def __init__(self, shape, device_index):
        self.shape = tuple(shape)

    def fft(self, a, out, direction):
        assert a.shape == self.shape and out is a
        axes = tuple(range(1, a.ndim))
        out[...] = np.fft.fftn(a, axes=axes) if direction == -1 else np.fft.ifftn(a, axes=axes) * np.prod(a.shape[1:])


class _HostMaps(np.ndarray):
    """Coil maps that name a device, as CuPy arrays do."""

    @property
    def device(self):
        return SimpleNamespace(id=0)


@pytest.mark.parametrize("matrix", [(16, 16), (13, 7), (6, 5, 4)], ids=["2d-even", "2d-odd", "3d"])
@pytest.mark.parametrize("coil_batch", [None, 1, 2], ids=["all", "one", "two"])
def test_kernels_run_on_the_host_are_the_sense_normal(rng, monkeypatch, host_toeplitz, matrix, coil_batch):
    """toeplitz.cu itself (threads run in turn) behind FusedSenseNormal's launches, NumPy FFTs for cuFFT's:
    every element written (poisoned buffers), equal to the NumPy normal operator, twice in a row."""
    cupy = pytest.importorskip("cupy")
    # cuFFT's direction constants without loading libcufft (absent without the CUDA toolkit's libraries)
    monkeypatch.setitem(vars(cupy.cuda), "cufft", SimpleNamespace(CUFFT_FORWARD=-1, CUFFT_INVERSE=1))
    monkeypatch.setattr(gpu_toeplitz, "cupy_module", lambda: np)
    monkeypatch.setattr(gpu_toeplitz, "get_kernel", host_toeplitz)
    monkeypatch.setattr(gpu_toeplitz, "fft_plan", _HostPlan)
    psf = _crandn(rng, *(2 * n for n in matrix))
    maps, x = _crandn(rng, 3, *matrix), _crandn(rng, *matrix)
    spectrum = kernel_spectrum(psf)
    ref = normal_operator(spectrum, coil_maps=maps, lam=0.3)(x)
    op = gpu_toeplitz.FusedSenseNormal(spectrum.astype(np.complex64), maps.view(_HostMaps), 0.3, coil_batch)
    for _ in range(2):  # the reused work buffer must not leak between applications
        op._padded[...] = np.nan
        out = np.full(matrix, np.nan, np.complex64)
        op.apply_into(x, out)
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5
