"""The CG-SENSE normal operator on the GPU with fused element-wise stages.

Each application runs in passes over a few coils (CG-SENSE) or frames (a time series), each pass a handful of
launches into kept buffers, in one of two ways (``kernels/toeplitz.cu``):

- :class:`RowPasses`, where the padded grid's last axis is a power of two up to ``ROWS_MAX_P``: one kernel
  writes ``S_c x`` onto the padded leading axes, cuFFT transforms those axes, one kernel pads each row of the
  last axis in shared memory, transforms it, multiplies by the kernel spectrum, transforms back and keeps the
  image's part, cuFFT transforms back, and one kernel crops, multiplies by ``conj(S_c)``, sums the coils and adds
  ``lam x``. The last axis' zero half is never stored and the filter has no pass over memory of its own.
- :class:`GridPasses` otherwise: the zero-padded ``S_c x`` on the whole 2x grid (every element written, so the
  buffer is reused without clearing), cuFFT over the grid, a filter kernel, the inverse, the same reduction.

The grid is the spectrum's: the 2x grid of a non-Cartesian scan, or the image grid itself for a Cartesian one
(no padding; the row passes then transform rows of ``n`` points). The spectrum is pre-scaled by the inverse
FFT's 1/N; the cuFFT plans are made once (one per pass size) and
executed directly, so the host's cost per application stays below the device's. The NumPy/CuPy reference is
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
from ..gpu.fft import FORWARD, INVERSE, CornerFft, fft_plan

BLOCK = 256
"""Threads per block of the element-wise kernels (grid-stride loops)."""
MAX_BLOCKS_X = 4096
"""Blocks along a launch's points (grid-stride loops beyond)."""
ROWS_MAX_P = 2048
"""Longest padded last axis :class:`RowPasses` takes (``ROWS_MAX_P`` of ``toeplitz.cu``: shared memory)."""
SHARED_DEFAULT = 48 * 1024
"""Dynamic shared memory a launch gets without its kernel opting in to more."""
ROWS_POINTS = 2048
"""Points of the rows one block of ``mri_recon_toeplitz_rows`` transforms at a time (``ROWS_POINTS``)."""
INDEX_LIMIT = 2**31 - BLOCK * MAX_BLOCKS_X
"""Points of a pass (or of its frames' spectra) the 32-bit kernels take: below 2^31 by one grid-stride step, so
that no thread's next position overflows."""
MAX_GRIDS_Y = 65535
"""Grids of a pass (``gridDim.y`` of the whole-grid kernels) and frames of a pass (of the reductions) at most."""
ROWS_MAX_ROWS = 64
"""Most rows one block of ``mri_recon_toeplitz_rows`` transforms at a time (``ROWS_MAX_ROWS``)."""
ROW_PASS_DIMS = (2,)
"""Image dimensions whose operators take :class:`RowPasses` where the grid allows. Not 3-D: there cuFFT's
strided transforms of the leading two axes took longer than the pruned whole-grid transforms (docs/benchmarks.md)."""


class GridNormal(LinearOperator):
    """What the fused normal operators on the 2x grid share: the image and grid sizes, the coil maps and coil
    passes, the checks of their arrays, and ``_apply`` through :meth:`apply_into` (which the subclasses define:
    launches only, no allocation, no synchronization, so a CUDA graph can capture it). ``_sizes``,
    ``_transforms`` and ``_blocks`` serve the time-segmented operator (``offres/gpu_segments.py``)."""

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

    def _transforms(self, grids_per_coil: int = 1) -> dict[int, CornerFft]:
        """Per coil pass size, the transform of its ``count * grids_per_coil`` work grids."""
        counts = {self._step, self._n_coils % self._step or self._step}
        return {count: CornerFft(count * grids_per_coil, self._grid, self.ishape[0], self._device.index)
                for count in counts}

    @staticmethod
    def _blocks(n: int) -> tuple[int]:
        return (min(-(-n // BLOCK), 65535 * 8),)

    def _check_arrays(self, *arrays: Any) -> None:
        """The kernels index raw memory: refuse anything but C-contiguous complex64 of the operator's shape, and
        an output that is the input (a later coil pass reads the input)."""
        if len(arrays) == 2 and arrays[0] is arrays[1]:
            raise ValueError(f"{type(self).__name__} cannot write its product over its input")
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


def rows_per_block(p: int) -> int:
    """Rows of ``p`` points one block of ``mri_recon_toeplitz_rows`` takes at a time."""
    return min(ROWS_MAX_ROWS, max(1, ROWS_POINTS // p))


def rows_shared_bytes(p: int) -> int:
    """Dynamic shared memory of ``mri_recon_toeplitz_rows`` for rows of ``p`` points: the twiddles and two row
    buffers, each with one float2 of padding after every 8 (``rows_pad``), and the rows' spectrum offsets."""
    def padded(count: int) -> int:
        return count + count // 8

    rows = rows_per_block(p)
    return 8 * (padded(p) + 2 * padded(rows * p)) + 4 * rows


def rows_kernel(device: Any) -> Any:
    """``mri_recon_toeplitz_rows``, opted in to the dynamic shared memory of the longest rows it takes
    (:func:`rows_shared_bytes` of :data:`ROWS_MAX_P`: 55 KB at 2048 points, beyond :data:`SHARED_DEFAULT`)."""
    kernel = get_kernel("toeplitz.cu", "mri_recon_toeplitz_rows", None, device)
    shared = rows_shared_bytes(ROWS_MAX_P)
    if shared > SHARED_DEFAULT:
        kernel.max_dynamic_shared_size_bytes = shared
    return kernel


def row_passes_fit(matrix: tuple[int, ...], grid: tuple[int, ...], max_grids: int) -> bool:
    """Whether :class:`RowPasses` takes this image and 2x grid for passes of up to ``max_grids`` grids: the
    dimension in :data:`ROW_PASS_DIMS`, the last padded axis a power of two up to :data:`ROWS_MAX_P`, and every
    index of a pass and of the frames' spectra inside 32 bits."""
    p = int(grid[-1])
    planes = math.prod(grid[:-1])
    return (len(grid) in ROW_PASS_DIMS and 2 <= p <= ROWS_MAX_P and p & (p - 1) == 0
            and planes * max_grids * int(matrix[-1]) < INDEX_LIMIT and math.prod(grid) * max_grids < INDEX_LIMIT)


class Passes:
    """One pass of ``sum_c conj(S_c) T_t(S_c x_t)`` over a few coils and frames, in five steps that the two
    kinds below launch their own way (a profiler may call them one by one)."""

    def run(self, maps: Any, x: Any, out: Any, spectra: Any, coils: int, frames: int, first: bool) -> None:
        """``out_t = (lam x_t if first else out_t) + sum_c conj(S_c) T_t(S_c x_t)`` for the ``frames`` images of
        ``x`` and the ``coils`` maps of ``maps``, ``spectra`` one pre-scaled spectrum per frame."""
        grids = coils * frames
        self.expand(maps, x, coils, grids)
        self.transform(grids, FORWARD)
        self.filter(spectra, coils, grids)
        self.transform(grids, INVERSE)  # unnormalized: 1/N is in the spectra
        self.reduce(maps, x, out, coils, frames, first)

    def expand(self, maps: Any, x: Any, coils: int, grids: int) -> None:
        raise NotImplementedError

    def transform(self, grids: int, direction: int) -> None:
        raise NotImplementedError

    def filter(self, spectra: Any, coils: int, grids: int) -> None:
        raise NotImplementedError

    def reduce(self, maps: Any, x: Any, out: Any, coils: int, frames: int, first: bool) -> None:
        raise NotImplementedError


class RowPasses(Passes):
    """One pass of ``sum_c conj(S_c) T_t(S_c x_t)`` with the last axis inside ``mri_recon_toeplitz_rows`` (see
    the module doc): the work buffer ``(planes, grids, n)`` holds the image's rows over the padded leading
    axes, cuFFT transforms those axes (one strided plan per pass size), the kernel the rows."""

    def __init__(self, normal: GridNormal, grid_counts: set[int]) -> None:
        cupy = cupy_module()
        matrix, grid, device = normal.ishape[-len(normal._grid):], normal._grid, normal._device
        lead, plead = list(matrix[:-1]) + [1] * (3 - len(grid)), list(grid[:-1]) + [1] * (3 - len(grid))
        self._n, self._p = int(matrix[-1]), int(grid[-1])
        self._planes, self._nvox, self._lam = math.prod(grid[:-1]), normal._nvox, normal._lam
        self._lead = (np.int32(lead[0]), np.int32(lead[1]), np.int32(plead[1]), np.int32(self._n))
        self._rows_per_block = rows_per_block(self._p)
        self._shared = rows_shared_bytes(self._p)
        self._expand, self._reduce = (get_kernel("toeplitz.cu", name, None, device)
                                      for name in ("mri_recon_toeplitz_rows_expand", "mri_recon_toeplitz_rows_reduce"))
        self._rows = rows_kernel(device)
        self._work = cupy.empty(self._planes * max(grid_counts) * self._n, dtype=cupy.complex64)
        self._plans = {count: fft_plan((*grid[:-1], count * self._n), device.index, columns=True)
                       for count in grid_counts}

    def work(self, grids: int) -> Any:
        """The work buffer of a pass of ``grids`` grids."""
        return self._work[:self._planes * grids * self._n]

    def expand(self, maps: Any, x: Any, coils: int, grids: int) -> None:
        """``work[l, t * coils + c, k] = S_c x_t`` inside the image, 0 in the leading axes' padding."""
        points = grids * self._n
        self._expand((min(-(-points // BLOCK), MAX_BLOCKS_X), min(self._planes, 65535)), (BLOCK,),
                     (maps, x, self.work(grids), np.int32(coils), np.int32(grids), *self._lead,
                      np.int32(self._planes)))

    def transform(self, grids: int, direction: int) -> None:
        """cuFFT over the padded leading axes of every row, in place."""
        work = self.work(grids)
        self._plans[grids].fft(work, work, direction)

    def filter(self, spectra: Any, coils: int, grids: int) -> None:
        """Each row padded, transformed, filtered by its frame's spectrum row, transformed back, cut."""
        blocks = min(-(-self._planes * grids // self._rows_per_block), MAX_BLOCKS_X)
        self._rows((blocks,), (BLOCK,), (self.work(grids), spectra, np.int32(coils), np.int32(grids),
                                         np.int32(self._planes), np.int32(self._n),
                                         np.int32(self._p.bit_length() - 1), np.int32(self._rows_per_block)),
                   shared_mem=self._shared)

    def reduce(self, maps: Any, x: Any, out: Any, coils: int, frames: int, first: bool) -> None:
        """``out_t = (lam x_t if first else out_t) + sum_c conj(S_c) work[l, t * coils + c, k]``."""
        self._reduce((min(-(-self._nvox // BLOCK), MAX_BLOCKS_X), frames), (BLOCK,),
                     (maps, self.work(coils * frames), x, out, np.int32(coils), np.int32(coils * frames),
                      *self._lead, self._lam, np.int32(first)))


class GridPasses(Passes):
    """One pass on the whole 2x grid: ``mri_recon_toeplitz_expand``, cuFFT, ``_filter``, the inverse and
    ``_reduce``, ``blockIdx.y`` the grid (or, in the reduction, the frame), the points of each strided over
    ``blockIdx.x``."""

    def __init__(self, normal: GridNormal, grid_counts: set[int]) -> None:
        if normal._grid_size >= INDEX_LIMIT:
            raise ValueError(f"a 2x grid of {normal._grid_size} points is beyond the fused kernels' 32-bit indices")
        if max(grid_counts) > MAX_GRIDS_Y:
            raise ValueError(f"{max(grid_counts)} grids in one pass are more than the fused kernels' {MAX_GRIDS_Y}: "
                             "pass a smaller coil or frame batch")
        cupy = cupy_module()
        grid, device = normal._grid, normal._device
        self._expand, self._filter, self._reduce = (
            get_kernel("toeplitz.cu", f"mri_recon_toeplitz_{name}", None, device)
            for name in ("expand", "filter", "reduce"))
        dims = list(normal.ishape[-len(grid):]) + [1] * (3 - len(grid))
        pdims = list(grid) + [1] * (3 - len(grid))
        self._sizes = (*(np.int32(n) for n in dims), np.int32(pdims[1]), np.int32(pdims[2]))
        self._grid_size, self._nvox, self._lam = normal._grid_size, normal._nvox, normal._lam
        self._work = cupy.empty((max(grid_counts), *grid), dtype=cupy.complex64)
        corner = int(normal.ishape[-len(grid)])
        self._plans = {count: CornerFft(count, grid, corner, device.index) for count in grid_counts}

    def _blocks(self, points: int, grids: int) -> tuple[int, int]:
        return min(-(-points // BLOCK), MAX_BLOCKS_X), grids

    def work(self, grids: int) -> Any:
        """The work buffer of a pass of ``grids`` grids."""
        return self._work[:grids]

    def expand(self, maps: Any, x: Any, coils: int, grids: int) -> None:
        """``work[t * coils + c] = pad(S_c x_t)``, every point of the 2x grids."""
        self._expand(self._blocks(self._grid_size, grids), (BLOCK,),
                     (maps, x, self.work(grids), np.int32(coils), *self._sizes, np.int32(self._grid_size)))

    def transform(self, grids: int, direction: int) -> None:
        """cuFFT over the 2x grids, in place."""
        self._plans[grids](self.work(grids), direction)

    def filter(self, spectra: Any, coils: int, grids: int) -> None:
        """``work[t * coils + c] *= spectra[t]``."""
        self._filter(self._blocks(self._grid_size, grids), (BLOCK,),
                     (self.work(grids), spectra, np.int32(coils), np.int32(self._grid_size)))

    def reduce(self, maps: Any, x: Any, out: Any, coils: int, frames: int, first: bool) -> None:
        """``out_t = (lam x_t if first else out_t) + sum_c conj(S_c) crop(work[t * coils + c])``."""
        self._reduce(self._blocks(self._nvox, frames), (BLOCK,),
                     (maps, self.work(coils * frames), x, out, np.int32(coils), *self._sizes,
                      np.int32(self._grid_size), self._lam, np.int32(first)))


def _passes(normal: GridNormal, grid_counts: set[int]) -> RowPasses | GridPasses:
    """:class:`RowPasses` where :func:`row_passes_fit`, else :class:`GridPasses`."""
    matrix = normal.ishape[-len(normal._grid):]
    if row_passes_fit(matrix, normal._grid, max(grid_counts)):
        return RowPasses(normal, grid_counts)
    return GridPasses(normal, grid_counts)


class FusedSenseNormal(GridNormal):
    """``x -> sum_c conj(S_c) T(S_c x) + lam x`` for CuPy ``x`` of shape ``matrix`` (see the module doc)."""

    def __init__(self, spectrum: Any, coil_maps: Any, lam: float, coil_batch: int | None) -> None:
        cupy = cupy_module()
        grid = tuple(int(n) for n in spectrum.shape)
        super().__init__(grid, coil_maps, lam, coil_batch)
        self._scaled = scaled(cupy.ascontiguousarray(spectrum, dtype=cupy.complex64), 1.0 / self._grid_size)
        self._passes = _passes(self, {self._step, self._n_coils % self._step or self._step})

    def apply_into(self, x: Any, out: Any) -> None:
        """``out = A x``; both C-contiguous complex64 of shape ``matrix``."""
        self._check_arrays(x, out)
        for first, start in enumerate(range(0, self._n_coils, self._step)):
            count = min(self._step, self._n_coils - start)
            self._passes.run(self._maps[start:start + count], x, out, self._scaled, count, 1, first == 0)


class FusedSeriesNormal(GridNormal):
    """``x_t -> sum_c conj(S_c) T_t(S_c x_t) + lam x_t`` for every frame ``t`` of CuPy ``x`` ``(T, *matrix)``,
    each frame with its own kernel spectrum ``spectra[t]`` (2x grid): every coil of ``frame_batch`` frames in
    one pass (the module doc); nothing allocated per application."""

    def __init__(self, spectra: Any, coil_maps: Any, lam: float, frame_batch: int | None = None) -> None:
        cupy = cupy_module()
        grid = tuple(int(n) for n in spectra.shape[1:])
        super().__init__(grid, coil_maps, lam, None)
        frames = int(spectra.shape[0])
        self.ishape = self.oshape = (frames, *self.ishape)
        self._frames = frames
        self._frame_step = frames if frame_batch is None else max(1, min(frames, int(frame_batch)))
        self._scaled = scaled(cupy.ascontiguousarray(spectra, dtype=cupy.complex64), 1.0 / self._grid_size)
        counts = {self._frame_step, frames % self._frame_step or self._frame_step}
        self._passes = _passes(self, {count * self._n_coils for count in counts})

    def apply_into(self, x: Any, out: Any) -> None:
        """``out = A x``; both C-contiguous complex64 of shape ``(T, *matrix)``."""
        self._check_arrays(x, out)
        for start in range(0, self._frames, self._frame_step):
            count = min(self._frame_step, self._frames - start)
            frames = slice(start, start + count)
            self._passes.run(self._maps, x[frames], out[frames], self._scaled[frames], self._n_coils, count, True)
