"""The time-segmented CG-SENSE normal operator on the GPU with fused stages (``kernels/segments.cu``).

``A x = sum_c conj(S_c) sum_l conj(c_l) sum_l' T_{l l'}(c_l' S_c x) + lam x`` (:class:`~.time_segments.
SegmentedNormal`, whose CuPy form costs a dozen separate array operations, transposes of L B grids among them,
per coil batch). Here, per application and coil batch of B coils: one kernel writes the zero-padded
``c_l S_c x`` of every segment and coil onto the 2x grid (L B grids, every element, so the buffer is reused
without clearing); one batched cuFFT transforms them in place; one kernel applies, at every frequency p and
for every coil, the Hermitian L x L matrix of kernel spectra ``K(p)`` (the L (L + 1) / 2 spectra of
:func:`~.segmented.segment_spectra` stored as ``(pairs, P)`` and pre-scaled by the inverse FFT's 1/P);
one unnormalized batched inverse cuFFT; and one kernel crops, multiplies by ``conj(c_l)``, sums the segments,
multiplies by ``conj(S_c)``, sums the coils and adds ``lam x``. Five launches per batch; the cuFFT plans are
made once (one per batch size).

Memory: the spectra ``8 P L (L + 1) / 2`` bytes, and per coil of a batch L grids of work plus cuFFT's work
area of about the same size (``OffresCorrection._segment_batch`` counts both).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...arrays.backend import cupy_module, get_xp
from ...errors import SchemaError
from ...kernels import get_kernel
from ...kernels.configs import SEGMENT_TIERS, segments_defines
from ..gpu.fft import FORWARD, INVERSE
from ..normal.gpu_toeplitz import BLOCK, GridNormal

MIX_LANES = 8
"""Coil lanes of the mixing kernel's blocks (``SEG_COIL_LANES`` in ``segments.cu``): blocks of 32 x 8 threads."""
SHARED_MIX_MAX = 16
"""``SEG_SHARED_MAX`` of ``segments.cu`` (a test reads it there): tiers up to this ``SEG_MAX`` stage the spectra
in shared memory, and their launches pass that shared size."""
MAX_FUSED_SEGMENTS = SEGMENT_TIERS[-1]
"""Most segments the fused kernels take (the largest ``SEG_MAX``)."""


def pair_row(first: int, second: int, segments: int) -> int:
    """Row of the spectrum of the pair ``(first, second)``, ``first <= second``, in the ``(pairs, P)`` store:
    the pairs in the order ``(0, 0), (0, 1), .., (0, L-1), (1, 1), ..``."""
    return first * segments - first * (first - 1) // 2 + second - first


def spectra_store(spectra: dict[tuple[int, int], Any], segments: int) -> Any:
    """The kernel spectra as the mixing kernel reads them: complex64 ``(L (L + 1) / 2, P)``, the pair
    ``(l, l')``, ``l <= l'``, at row :func:`pair_row`, divided by P (the unnormalized inverse FFT's factor).
    NumPy or CuPy, as the spectra."""
    xp = get_xp(spectra[(0, 0)])
    grid_size = int(spectra[(0, 0)].size)
    store = xp.empty((segments * (segments + 1) // 2, grid_size), dtype=np.complex64)
    for first in range(segments):
        for second in range(first, segments):
            xp.divide(spectra[(first, second)].reshape(-1), np.float32(grid_size),
                      out=store[pair_row(first, second, segments)])
    return store


class FusedSegmentedNormal(GridNormal):
    """``x -> sum_c conj(S_c) sum_{l,l'} conj(c_l) T_{l l'}(c_l' S_c x) + lam x`` for CuPy ``x`` of shape
    ``matrix`` (see the module doc). :meth:`apply_into` only launches (no allocation, no synchronization), so a
    CUDA graph can capture it.

    Parameters
    ----------
    spectra
        ``{(l, l'): spectrum}`` for ``l <= l'`` (:func:`~.segmented.segment_spectra`): complex64 CuPy
        arrays of the 2x grid.
    phases
        complex64 ``(L, *matrix)``: ``c_l = exp(-i 2 pi f tau_l)``; 1 <= L <= :data:`MAX_FUSED_SEGMENTS`.
    coil_maps
        complex64 ``(C, *matrix)``.
    lam
        Absolute Tikhonov weight.
    coil_batch
        Coils per pass (bounds the L B work grids); None: all.
    """

    def __init__(self, spectra: dict[tuple[int, int], Any], phases: Any, coil_maps: Any, lam: float,
                 coil_batch: int | None) -> None:
        cupy = cupy_module()
        matrix = tuple(int(n) for n in coil_maps.shape[1:])
        segments = int(phases.shape[0])
        if tuple(phases.shape[1:]) != matrix or not 1 <= segments <= MAX_FUSED_SEGMENTS:
            raise SchemaError(f"FusedSegmentedNormal phases must have shape (L, *{matrix}) with 1 <= L <= "
                              f"{MAX_FUSED_SEGMENTS}, found {tuple(phases.shape)}")
        grid = tuple(int(n) for n in spectra[(0, 0)].shape)
        super().__init__(grid, coil_maps, lam, coil_batch)
        device = self._device
        self.segments = segments
        self._spectra = spectra_store(spectra, segments)
        self._phases = cupy.ascontiguousarray(phases, dtype=cupy.complex64)
        self._work = cupy.empty((self._step * segments, *grid), dtype=cupy.complex64)
        defines = segments_defines(segments)
        self._expand = get_kernel("segments.cu", "mri_recon_segments_expand", defines, device)
        self._mix = get_kernel("segments.cu", "mri_recon_segments_mix", defines, device)
        pairs = segments * (segments + 1) // 2
        self._mix_shared = pairs * 32 * 8 if defines["SEG_MAX"] <= SHARED_MIX_MAX else 0  # staged spectra
        self._reduce = get_kernel("segments.cu", "mri_recon_segments_reduce", defines, device)
        self._plans = self._transforms(segments)

    def apply_into(self, x: Any, out: Any) -> None:
        """``out = A x``; both C-contiguous complex64 of shape ``matrix``."""
        for first, start in enumerate(range(0, self._n_coils, self._step)):
            count = min(self._step, self._n_coils - start)
            work = self.expand(x, start, count)
            self._plans[count](work, FORWARD)
            self.mix(work, count)
            self._plans[count](work, INVERSE)  # unnormalized: 1/P is in the spectra
            self.reduce(x, out, start, count, first == 0)

    def expand(self, x: Any, start: int, count: int) -> Any:
        """Launch the expand kernel: coils ``start .. start + count`` times each segment's phase times ``x`` on
        the 2x grid; returns the work buffer it wrote (``count * L`` grids)."""
        work = self._work[:count * self.segments]
        self._expand(self._blocks(count * self._grid_size), (BLOCK,),
                     (self._maps[start:start + count], self._phases, x, work, np.int32(count),
                      np.int32(self.segments), *self._sizes))
        return work

    def reduce(self, x: Any, out: Any, start: int, count: int, first: bool) -> None:
        """Launch the reduce kernel: ``out`` (``lam x`` first when ``first``) plus the coils' conj(S_c) sum_l
        conj(c_l) of their transformed-back segments in the work buffer."""
        self._reduce(self._blocks(self._nvox), (BLOCK,),
                     (self._maps[start:start + count], self._phases, self._work[:count * self.segments], x, out,
                      np.int32(count), np.int32(self.segments), *self._sizes, self._lam, np.int32(first)))

    def mix(self, work: Any, count: int) -> None:
        """Launch the mixing kernel on the ``count`` coils' transformed segments ``work``."""
        tiles = (min(-(-self._grid_size // 32), 65535 * 8),)
        self._mix(tiles, (32, MIX_LANES), (work, self._spectra, np.int32(count), np.int32(self.segments),
                                          np.int64(self._grid_size)), shared_mem=self._mix_shared)
