"""The CG-SENSE normal operator on the GPU with fused element-wise stages.

Per application and coil batch: one kernel writes the zero-padded ``S_c x`` onto the 2x grid (every element,
so the buffer is reused without clearing), cuFFT transforms it in place, one kernel multiplies by the kernel
spectrum (pre-scaled by the inverse FFT's 1/N), an unnormalized in-place inverse transform, and one kernel
that crops, multiplies by ``conj(S_c)``, sums the coils and adds ``lam x``. Five steps per batch instead
of a dozen; the cuFFT plans are made once (one per batch size) and executed directly, so the host's cost
per application stays below the device's. The NumPy/CuPy reference is
:func:`mri_recon.operators.normal.toeplitz.normal_operator`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...arrays.backend import Device, cupy_module
from ...kernels import get_kernel
from ..arith import scaled
from ..base import LinearOperator
from ..gpu.fft import FORWARD, INVERSE, CornerFft

BLOCK = 256
"""Threads per block of the element-wise kernels (grid-stride loops)."""


class GridNormal(LinearOperator):
    """What the fused normal operators on the 2x grid share: the image and grid sizes their kernels take,
    the coil maps and coil passes, the launch shape, and ``_apply`` through :meth:`apply_into` (which the
    subclasses define: launches only, no allocation, no synchronization, so a CUDA graph can capture it)."""

    hermitian = True
    writes_into = True

    def __init__(self, grid: tuple[int, ...], coil_maps: Any, lam: float, coil_batch: int | None) -> None:
        cupy = cupy_module()
        matrix = tuple(int(n) for n in coil_maps.shape[1:])
        super().__init__(matrix, matrix)
        self._device = Device(int(coil_maps.device.id))
        self._grid = tuple(int(n) for n in grid)
        dims = list(matrix) + [1] * (3 - len(matrix))
        pdims = list(grid) + [1] * (3 - len(grid))
        self._grid_size = math.prod(grid)
        self._n_coils = int(coil_maps.shape[0])
        self._step = self._n_coils if coil_batch is None else max(1, min(self._n_coils, int(coil_batch)))
        self._maps = cupy.ascontiguousarray(coil_maps, dtype=cupy.complex64)
        self._nvox = math.prod(matrix)
        self._lam = np.float32(lam)
        self._sizes = (np.int32(dims[0]), np.int32(dims[1]), np.int32(dims[2]), np.int32(pdims[1]),
                       np.int32(pdims[2]), np.int64(self._grid_size))

    def _pass_sizes(self) -> set[int]:
        """The coil counts of the passes (one cuFFT plan each)."""
        return {self._step, self._n_coils % self._step or self._step}

    def _transforms(self, grids_per_coil: int = 1) -> dict[int, CornerFft]:
        """Per pass size, the transform of its ``count * grids_per_coil`` work grids (the image in their corner)."""
        return {count: CornerFft(count * grids_per_coil, self._grid, self.ishape[0], self._device.index)
                for count in self._pass_sizes()}

    @staticmethod
    def _blocks(n: int) -> tuple[int]:
        return (min(-(-n // BLOCK), 65535 * 8),)

    def apply_into(self, x: Any, out: Any) -> None:
        raise NotImplementedError

    def _apply(self, x: Any) -> Any:
        cupy = cupy_module()
        x = cupy.ascontiguousarray(x, dtype=cupy.complex64)
        out = cupy.empty_like(x)
        self.apply_into(x, out)
        return out


class FusedSenseNormal(GridNormal):
    """``x -> sum_c conj(S_c) T(S_c x) + lam x`` for CuPy ``x`` of shape ``matrix`` (see the module doc)."""

    def __init__(self, spectrum: Any, coil_maps: Any, lam: float, coil_batch: int | None) -> None:
        cupy = cupy_module()
        grid = tuple(int(n) for n in spectrum.shape)
        super().__init__(grid, coil_maps, lam, coil_batch)
        device = self._device
        self._scaled = scaled(cupy.ascontiguousarray(spectrum, dtype=cupy.complex64), 1.0 / self._grid_size)
        self._padded = cupy.empty((self._step, *grid), dtype=cupy.complex64)
        self._expand = get_kernel("toeplitz.cu", "mri_recon_sense_expand", None, device)
        self._reduce = get_kernel("toeplitz.cu", "mri_recon_sense_reduce", None, device)
        self._multiply = get_kernel("toeplitz.cu", "mri_recon_sense_filter", None, device)
        self._plans = self._transforms()

    def apply_into(self, x: Any, out: Any) -> None:
        """``out = A x``; both C-contiguous complex64 of shape ``matrix``."""
        step, grid_size, sizes = self._step, self._grid_size, self._sizes
        for first, start in enumerate(range(0, self._n_coils, step)):
            count = min(step, self._n_coils - start)
            part = self._maps[start:start + count]
            work = self._padded[:count]
            blocks = self._blocks(count * grid_size)
            self._expand(blocks, (BLOCK,), (part, x, work, np.int32(count), *sizes))
            self._plans[count](work, FORWARD)
            self._multiply(blocks, (BLOCK,), (work, self._scaled, np.int32(count), np.int64(grid_size)))
            self._plans[count](work, INVERSE)  # unnormalized: 1/N is in `scaled`
            self._reduce(self._blocks(self._nvox), (BLOCK,),
                         (part, work, x, out, np.int32(count), *sizes, self._lam, np.int32(first == 0)))


class FusedSeriesNormal(GridNormal):
    """``x_t -> sum_c conj(S_c) T_t(S_c x_t) + lam x_t`` for every frame ``t`` of CuPy ``x`` ``(T, *matrix)``,
    each frame with its own kernel spectrum ``spectra[t]`` (2x grid): the steps of :class:`FusedSenseNormal`
    with every coil of ``frame_batch`` frames in one launch each (``kernels/toeplitz.cu``,
    ``mri_recon_series_*``) and one batched cuFFT plan per pass size; nothing allocated per application."""

    def __init__(self, spectra: Any, coil_maps: Any, lam: float, frame_batch: int | None = None) -> None:
        cupy = cupy_module()
        grid = tuple(int(n) for n in spectra.shape[1:])
        super().__init__(grid, coil_maps, lam, None)
        frames = int(spectra.shape[0])
        self.ishape = self.oshape = (frames, *self.ishape)
        self._frames = frames
        self._frame_step = frames if frame_batch is None else max(1, min(frames, int(frame_batch)))
        self._scaled = scaled(cupy.ascontiguousarray(spectra, dtype=cupy.complex64), 1.0 / self._grid_size)
        self._padded = cupy.empty((self._frame_step * self._n_coils, *grid), dtype=cupy.complex64)
        self._expand, self._multiply, self._reduce = (
            get_kernel("toeplitz.cu", f"mri_recon_series_{name}", None, self._device)
            for name in ("expand", "filter", "reduce"))
        steps = {self._frame_step, frames % self._frame_step or self._frame_step}
        self._plans = {count: CornerFft(count * self._n_coils, grid, self.ishape[1], self._device.index)
                       for count in steps}

    def apply_into(self, x: Any, out: Any) -> None:
        """``out = A x``; both C-contiguous complex64 of shape ``(T, *matrix)``."""
        coils, grid_size, sizes, nvox = self._n_coils, self._grid_size, self._sizes, self._nvox
        for start in range(0, self._frames, self._frame_step):
            count = min(self._frame_step, self._frames - start)
            frames = slice(start, start + count)
            work = self._padded[:count * coils]
            blocks = self._blocks(count * coils * grid_size)
            self._expand(blocks, (BLOCK,), (self._maps, x[frames], work, np.int32(coils), np.int32(count), *sizes))
            self._plans[count](work, FORWARD)
            self._multiply(blocks, (BLOCK,), (work, self._scaled[frames], np.int32(coils), np.int32(count),
                                              np.int64(grid_size)))
            self._plans[count](work, INVERSE)  # unnormalized: 1/N is in `scaled`
            self._reduce(self._blocks(count * nvox), (BLOCK,),
                         (self._maps, work, x[frames], out[frames], np.int32(coils), np.int32(count), *sizes,
                          self._lam))
