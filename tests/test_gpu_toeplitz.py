"""The fused GPU CG-SENSE operator equals the NumPy normal operator, for every coil batching; and its kernels
(toeplitz.cu built for the host, no GPU needed) behind FusedSenseNormal's and FusedSeriesNormal's own launches."""

from __future__ import annotations

import ctypes

import host_kernels as host
import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module
from mri_recon.operators.gpu import fft as gpu_fft
from mri_recon.operators.normal import gpu_toeplitz
from mri_recon.operators.normal.toeplitz import kernel_spectrum, normal_operator


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
    library = host.build("toeplitz_host.cpp", tmp_path_factory.mktemp("toeplitz_host") / "toeplitz.so")

    def get_kernel(filename, name, defines, device):
        assert filename == "toeplitz.cu" and name.startswith("mri_recon_toeplitz_")
        function = getattr(library, "emu_" + name.removeprefix("mri_recon_toeplitz_"))
        return lambda grid, block, args: function(ctypes.c_uint(grid[0]), ctypes.c_uint(grid[1]),
                                                  ctypes.c_uint(block[0]), *(host.argument(a) for a in args))

    return get_kernel


@pytest.mark.parametrize("matrix", [(16, 16), (13, 7), (6, 5, 4)], ids=["2d-even", "2d-odd", "3d"])
@pytest.mark.parametrize("coil_batch", [None, 1, 2], ids=["all", "one", "two"])
def test_kernels_run_on_the_host_are_the_sense_normal(rng, monkeypatch, host_toeplitz, matrix, coil_batch):
    """toeplitz.cu itself (threads run in turn) behind FusedSenseNormal's launches, NumPy FFTs for cuFFT's:
    every element written (poisoned buffers), equal to the NumPy normal operator, twice in a row."""
    monkeypatch.setattr(gpu_toeplitz, "cupy_module", lambda: np)
    monkeypatch.setattr(gpu_toeplitz, "get_kernel", host_toeplitz)
    monkeypatch.setattr(gpu_fft, "fft_plan", host.HostPlan)
    psf = _crandn(rng, *(2 * n for n in matrix))
    maps, x = _crandn(rng, 3, *matrix), _crandn(rng, *matrix)
    spectrum = kernel_spectrum(psf)
    ref = normal_operator(spectrum, coil_maps=maps, lam=0.3)(x)
    op = gpu_toeplitz.FusedSenseNormal(spectrum.astype(np.complex64), maps.view(host.HostMaps), 0.3, coil_batch)
    for _ in range(2):  # the reused work buffer must not leak between applications
        op._padded[...] = np.nan
        out = np.full(matrix, np.nan, np.complex64)
        op.apply_into(x, out)
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.parametrize("matrix", [(12, 10), (5, 4, 3)], ids=["2d", "3d"])
@pytest.mark.parametrize("frame_batch", [None, 1, 2], ids=["all", "one", "two"])
def test_kernels_run_on_the_host_are_the_series_normal(rng, monkeypatch, host_toeplitz, matrix, frame_batch):
    """The same kernels behind FusedSeriesNormal's launches (every coil of a batch of frames, each frame its own
    spectrum; the last batch shorter): equal to the frames' NumPy normal operators, every element written."""
    from mri_recon.solvers.temporal import BatchedSeriesNormal

    monkeypatch.setattr(gpu_toeplitz, "cupy_module", lambda: np)
    monkeypatch.setattr(gpu_toeplitz, "get_kernel", host_toeplitz)
    monkeypatch.setattr(gpu_fft, "fft_plan", host.HostPlan)
    frames = 3
    spectra = np.stack([kernel_spectrum(_crandn(rng, *(2 * n for n in matrix))) for _ in range(frames)])
    maps, x = _crandn(rng, 3, *matrix), _crandn(rng, frames, *matrix)
    ref = BatchedSeriesNormal(spectra, maps, lam=0.3)(x)
    per_frame = np.stack([normal_operator(spectra[t], coil_maps=maps, lam=0.3)(x[t]) for t in range(frames)])
    assert np.linalg.norm(ref - per_frame) / np.linalg.norm(per_frame) < 1e-5
    op = gpu_toeplitz.FusedSeriesNormal(spectra.astype(np.complex64), maps.view(host.HostMaps), 0.3, frame_batch)
    for _ in range(2):  # the reused work buffer must not leak between applications
        op._padded[...] = np.nan
        out = np.full(x.shape, np.nan, np.complex64)
        op.apply_into(x, out)
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.parametrize("bad", ["dtype", "layout", "frames"])
def test_series_normal_refuses_arrays_its_kernels_cannot_index(rng, monkeypatch, host_toeplitz, bad):
    """The kernels read raw memory: a complex128, a strided or a wrongly sized array is refused, not misread."""
    monkeypatch.setattr(gpu_toeplitz, "cupy_module", lambda: np)
    monkeypatch.setattr(gpu_toeplitz, "get_kernel", host_toeplitz)
    monkeypatch.setattr(gpu_fft, "fft_plan", host.HostPlan)
    matrix, frames = (6, 4), 3
    spectra = np.stack([kernel_spectrum(_crandn(rng, 12, 8)) for _ in range(frames)]).astype(np.complex64)
    op = gpu_toeplitz.FusedSeriesNormal(spectra, _crandn(rng, 2, *matrix).view(host.HostMaps), 0.0)
    x = {"dtype": _crandn(rng, frames, *matrix).astype(np.complex128),
         "layout": _crandn(rng, frames, matrix[1], matrix[0]).astype(np.complex64).transpose(0, 2, 1),
         "frames": _crandn(rng, frames + 1, *matrix).astype(np.complex64)}[bad]
    with pytest.raises(ValueError, match="C-contiguous complex64"):
        op.apply_into(x, np.empty((frames, *matrix), np.complex64))
