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
        self._grid_size = math.prod(grid)
        self._n_coils = int(coil_maps.shape[0])
        self._step = self._n_coils if coil_batch is None else max(1, min(self._n_coils, int(coil_batch)))
        self._maps = cupy.ascontiguousarray(coil_maps, dtype=cupy.complex64)
        self._nvox = math.prod(matrix)
        self._lam = np.float32(lam)

    def _transforms(self, total: int, step: int, grids_per_step: int) -> dict[int, CornerFft]:
        """The transforms of the passes over ``total`` items ``step`` at a time (the last pass shorter), one
        cuFFT plan per pass size ``count`` for its ``count * grids_per_step`` work grids (the image in their
        corner)."""
        counts = {step, total % step or step}
        return {count: CornerFft(count * grids_per_step, self._grid, int(self._maps.shape[1]), self._device.index)
                for count in counts}

    def _check(self, *arrays: Any) -> None:
        """The kernels index raw memory: refuse anything but C-contiguous complex64 of the operator's shape."""
        for array in arrays:
            if (tuple(array.shape) != self.ishape or array.dtype != np.complex64
                    or not array.flags.c_contiguous):
                raise ValueError(f"{type(self).__name__} takes C-contiguous complex64 arrays of shape "
                                 f"{self.ishape}, not {array.dtype} {tuple(array.shape)}")

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
        self._scaled = scaled(cupy.ascontiguousarray(spectrum, dtype=cupy.complex64), 1.0 / self._grid_size)
        self._padded = cupy.empty((self._step, *grid), dtype=cupy.complex64)
        self._kernels = ToeplitzKernels(self)
        self._plans = self._transforms(self._n_coils, self._step, 1)

    def apply_into(self, x: Any, out: Any) -> None:
        """``out = A x``; both C-contiguous complex64 of shape ``matrix``."""
        self._check(x, out)
        step, kernels = self._step, self._kernels
        for first, start in enumerate(range(0, self._n_coils, step)):
            count = min(step, self._n_coils - start)
            work = self._padded[:count]
            kernels.expand(self._maps[start:start + count], x, work, count, count)
            self._plans[count](work, FORWARD)
            kernels.filter(work, self._scaled, count, count)
            self._plans[count](work, INVERSE)  # unnormalized: 1/N is in `scaled`
            kernels.reduce(self._maps[start:start + count], work, x, out, count, 1, first == 0)


class ToeplitzKernels:
    """The three launches of ``kernels/toeplitz.cu`` for a :class:`GridNormal`'s sizes: ``blockIdx.y`` the grid
    (or, in the reduction, the frame), the points of each strided over ``blockIdx.x``."""

    MAX_BLOCKS_X = 4096
    """Blocks along a grid's points (grid-stride loops beyond)."""

    def __init__(self, normal: GridNormal) -> None:
        if normal._grid_size >= 2 ** 31:
            raise ValueError(f"a 2x grid of {normal._grid_size} points is beyond the fused kernels' 32-bit indices")
        device = normal._device
        self._expand, self._filter, self._reduce = (
            get_kernel("toeplitz.cu", f"mri_recon_toeplitz_{name}", None, device)
            for name in ("expand", "filter", "reduce"))
        dims = list(normal.ishape[-len(normal._grid):]) + [1] * (3 - len(normal._grid))
        pdims = list(normal._grid) + [1] * (3 - len(normal._grid))
        self._sizes = (*(np.int32(n) for n in dims), np.int32(pdims[1]), np.int32(pdims[2]))
        self._grid_size, self._nvox, self._lam = normal._grid_size, normal._nvox, normal._lam

    def _blocks(self, points: int, grids: int) -> tuple[int, int]:
        return min(-(-points // BLOCK), self.MAX_BLOCKS_X), grids

    def expand(self, maps: Any, x: Any, padded: Any, coils: int, grids: int) -> None:
        """``padded[t * coils + c] = pad(S_c x_t)`` for the ``grids`` grids of ``padded``."""
        self._expand(self._blocks(self._grid_size, grids), (BLOCK,),
                     (maps, x, padded, np.int32(coils), *self._sizes, np.int32(self._grid_size)))

    def filter(self, padded: Any, spectra: Any, coils: int, grids: int) -> None:
        """``padded[t * coils + c] *= spectra[t]``."""
        self._filter(self._blocks(self._grid_size, grids), (BLOCK,),
                     (padded, spectra, np.int32(coils), np.int32(self._grid_size)))

    def reduce(self, maps: Any, padded: Any, x: Any, out: Any, coils: int, frames: int, first: bool) -> None:
        """``out_t = (lam x_t if first else out_t) + sum_c conj(S_c) crop(padded[t * coils + c])``."""
        self._reduce(self._blocks(self._nvox, frames), (BLOCK,),
                     (maps, padded, x, out, np.int32(coils), *self._sizes, np.int32(self._grid_size), self._lam,
                      np.int32(first)))


class FusedSeriesNormal(GridNormal):
    """``x_t -> sum_c conj(S_c) T_t(S_c x_t) + lam x_t`` for every frame ``t`` of CuPy ``x`` ``(T, *matrix)``,
    each frame with its own kernel spectrum ``spectra[t]`` (2x grid): the launches of :class:`FusedSenseNormal`
    with every coil of ``frame_batch`` frames in one launch each (:class:`ToeplitzKernels`) and one batched
    cuFFT plan per pass size; nothing allocated per application."""

    def __init__(self, spectra: Any, coil_maps: Any, lam: float, frame_batch: int | None = None) -> None:
        cupy = cupy_module()
        grid = tuple(int(n) for n in spectra.shape[1:])
        super().__init__(grid, coil_maps, lam, None)
        frames = int(spectra.shape[0])
        self._kernels = ToeplitzKernels(self)
        self.ishape = self.oshape = (frames, *self.ishape)
        self._frames = frames
        self._frame_step = frames if frame_batch is None else max(1, min(frames, int(frame_batch)))
        self._scaled = scaled(cupy.ascontiguousarray(spectra, dtype=cupy.complex64), 1.0 / self._grid_size)
        self._padded = cupy.empty((self._frame_step * self._n_coils, *grid), dtype=cupy.complex64)
        self._plans = self._transforms(frames, self._frame_step, self._n_coils)

    def apply_into(self, x: Any, out: Any) -> None:
        """``out = A x``; both C-contiguous complex64 of shape ``(T, *matrix)``."""
        self._check(x, out)
        coils, kernels = self._n_coils, self._kernels
        for start in range(0, self._frames, self._frame_step):
            count = min(self._frame_step, self._frames - start)
            frames = slice(start, start + count)
            work = self._padded[:count * coils]
            kernels.expand(self._maps, x[frames], work, coils, count * coils)
            self._plans[count](work, FORWARD)
            kernels.filter(work, self._scaled[frames], coils, count * coils)
            self._plans[count](work, INVERSE)  # unnormalized: 1/N is in `scaled`
            kernels.reduce(self._maps, work, x[frames], out[frames], coils, count, True)
