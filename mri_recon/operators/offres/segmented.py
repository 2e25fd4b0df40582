"""The operators of time-segmented off-resonance correction (:mod:`.time_segments` fits the interpolators):
:class:`TimeSegmentedEncoding`, an engine of the encoding protocol over any plain engine, and its normal
operators (:class:`SegmentedNormal`; the fused GPU :class:`~.gpu_segments.FusedSegmentedNormal`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...arrays.backend import Device, device_memory, get_xp, is_gpu_array
from ...errors import InvalidDataError, ResourceError
from ..base import LinearOperator, SenseNormal
from ..engines.encoding import Encoding
from ..normal.toeplitz import _cropped_ifft, _padded_fft, kernel_spectra


class TimeSegmentedEncoding(Encoding):
    """``A x = sum_l b_l * F(c_l * x)``: the off-resonance encoding through L plain encodings.

    Parameters
    ----------
    base
        A plain encoding (:class:`~mri_recon.operators.engines.encoding.Encoding`) of the trajectory and matrix.
    b
        complex ``(M, L)`` interpolators (:func:`interpolators`), on the base's device.
    phases
        complex ``(L, *matrix)``: ``c_l = exp(-i 2 pi f tau_l)``, same device.
    """

    caches_psf = False
    time_segmentation = False

    def __init__(self, base: Any, b: Any, phases: Any) -> None:
        super().__init__(base.trajectory, base.matrix, base.ishape[0])
        self.base, self.b, self.phases = base, b, phases
        self.name, self.device_kind, self.key = base.name, base.device_kind, base.key  # the engine it runs on

    @property
    def segments(self) -> int:
        return int(self.phases.shape[0])

    def batched(self, batch: int) -> TimeSegmentedEncoding:
        """The same operator for ``batch`` images at once."""
        if batch == self.ishape[0]:
            return self
        return TimeSegmentedEncoding(self.base.batched(batch), self.b, self.phases)

    def _apply(self, x: Any) -> Any:
        out = None
        for seg in range(self.segments):
            y = self.base(x * self.phases[seg]) * self.b[:, seg]
            out = y if out is None else out + y
        return out

    def _adjoint(self, y: Any) -> Any:
        xp = get_xp(y)
        out = None
        for seg in range(self.segments):
            x = self.base.H(y * xp.conj(self.b[:, seg])) * xp.conj(self.phases[seg])
            out = x if out is None else out + x
        return out

    def psf(self, weights: Any) -> Any:
        raise InvalidDataError("a time-segmented encoding has L (L + 1) / 2 segment PSFs, not one PSF: use "
                               "normal(weights, maps, lam) or segment_spectra")

    def normal(self, weights: Any, maps: Any = None, lam: float = 0.0, *, coil_batch: int | None = None,
               spectrum: Any = None) -> LinearOperator:
        """``A^H W A + lam I`` as L (L + 1) / 2 Toeplitz kernels (the segment PSFs of ``weights``, computed
        here): on a GPU with maps the fused operator, coils per pass bounded by the free memory
        (:func:`segment_batch`)."""
        if spectrum is not None:
            raise InvalidDataError("a time-segmented encoding computes its own segment spectra; pass spectrum=None")
        coil_batch = segment_batch(self.phases, weights, coil_batch, fused_normal(maps, self.segments))
        spectra = segment_spectra(self, weights)
        return segmented_normal(spectra, self.phases, coil_maps=maps, lam=lam, coil_batch=coil_batch)


def segment_spectra(encoding: TimeSegmentedEncoding, weights: Any) -> dict[tuple[int, int], Any]:
    """Spectra of the Toeplitz kernels ``T_{l l'}`` for ``l <= l'``: the PSFs of the weights
    ``conj(b_l) w b_l'`` on the 2x grid (one batched F^H of the base engine), Fourier transformed."""
    xp = get_xp(weights)
    base, b = encoding.base, encoding.b
    pairs = [(i, j) for i in range(encoding.segments) for j in range(i, encoding.segments)]
    if xp is np:
        data = np.stack([np.conj(b[:, i]) * weights * b[:, j] for i, j in pairs]).astype(np.complex64)
    else:  # two row gathers of the transposed interpolators instead of 3 L (L + 1) / 2 small launches
        first, second = (xp.asarray(np.array(side, dtype=np.int32)) for side in zip(*pairs))
        rows = xp.ascontiguousarray(b.T.astype(np.complex64))
        data = xp.conj(rows[first])
        data *= (rows * weights.astype(np.float32)[None])[second]
    big = tuple(2 * n for n in base.matrix)
    psfs = type(base)(2 * base.trajectory, big, len(pairs))._adjoint(data)
    spectra = kernel_spectra(psfs)  # every pair's in one batched transform
    return {pair: spectra[index] for index, pair in enumerate(pairs)}


class SegmentedNormal(SenseNormal):
    """The CG operator ``x -> sum_c conj(S_c) sum_{l,l'} conj(c_l) T_{l l'}(c_l' S_c x) + lam x`` (Hermitian).

    Without maps ``x`` holds one image per coil (any leading axes). Coils go through the 2x-grid FFTs
    ``coil_batch`` at a time; each costs 2 L FFTs per iteration, and the L x L kernels are applied at every
    frequency of the 2x grid as one batched matrix product (kernels stored as ``(frequencies, L, L)``).
    NumPy, or CuPy without maps; on a GPU with maps :func:`segmented_normal` gives the fused operator.
    """

    def __init__(self, spectra: dict[tuple[int, int], Any], phases: Any, *, coil_maps: Any = None,
                 lam: float = 0.0, coil_batch: int | None = None) -> None:
        matrix = tuple(phases.shape[1:])
        super().__init__(matrix, matrix)
        xp = get_xp(phases)
        segments = int(phases.shape[0])
        self.big = tuple(int(n) for n in next(iter(spectra.values())).shape)
        kernels = xp.empty((segments, segments, math.prod(self.big)), dtype=np.complex64)
        for (i, j), spectrum in spectra.items():  # T_{l' l} is the adjoint of T_{l l'}: conjugate spectrum
            kernels[i, j] = spectrum.reshape(-1)
            kernels[j, i] = xp.conj(spectrum.reshape(-1))
        self.kernels = xp.ascontiguousarray(kernels.transpose(2, 0, 1))  # (P, L, L)
        self.phases, self.maps, self.lam = phases, coil_maps, float(lam)
        self.coil_batch = coil_batch

    def _normal(self, z: Any) -> Any:
        """``sum_{l,l'} conj(c_l) T_{l l'}(c_l' z)`` for a batch of images ``z`` ``(B, *matrix)``."""
        xp = get_xp(z)
        ndim = self.phases.ndim - 1
        segments, batch = int(self.phases.shape[0]), int(z.shape[0])
        axes = tuple(range(2, 2 + ndim))
        spectra = _padded_fft(z[None] * self.phases[:, None], self.big, axes).reshape(segments, batch, -1)
        if xp is np:  # einsum: faster than NumPy's stacked matmul of these small matrices (docs/benchmarks.md)
            mixed = np.einsum("pij,jbp->ibp", self.kernels, spectra, optimize=True)
        else:  # one batched GEMM (cuBLAS) over the frequencies
            mixed = xp.ascontiguousarray(xp.matmul(self.kernels, spectra.transpose(2, 0, 1)).transpose(1, 2, 0))
        mixed = mixed.reshape(segments, batch, *self.big)                                # (L, B, *big)
        images = _cropped_ifft(mixed, self.ishape, axes)                                 # (L, B, *matrix)
        return (images * xp.conj(self.phases[:, None])).sum(axis=0)

    def _apply(self, x: Any) -> Any:
        return super()._apply(x).astype(np.complex64, copy=False)


def segmented_normal(spectra: dict[tuple[int, int], Any], phases: Any, *, coil_maps: Any = None, lam: float = 0.0,
                     coil_batch: int | None = None) -> LinearOperator:
    """The CG operator of the time-segmented encoding (:class:`SegmentedNormal`'s arguments): on a GPU with coil
    maps and at most :data:`~mri_recon.operators.offres.gpu_segments.MAX_FUSED_SEGMENTS` segments the fused
    :class:`~mri_recon.operators.offres.gpu_segments.FusedSegmentedNormal` (which writes into a given array, for
    CUDA-graph CG), otherwise :class:`SegmentedNormal` (NumPy, or CuPy without maps: one image per coil)."""
    if fused_normal(coil_maps, int(phases.shape[0])):
        from .gpu_segments import FusedSegmentedNormal  # noqa: PLC0415 - GPU only

        return FusedSegmentedNormal(spectra, phases, coil_maps, lam, coil_batch)
    return SegmentedNormal(spectra, phases, coil_maps=coil_maps, lam=lam, coil_batch=coil_batch)


def fused_normal(coil_maps: Any, segments: int) -> bool:
    """Whether :func:`segmented_normal` gives the fused GPU operator: CuPy coil maps and L at most
    :data:`~mri_recon.operators.offres.gpu_segments.MAX_FUSED_SEGMENTS`."""
    from .gpu_segments import MAX_FUSED_SEGMENTS  # noqa: PLC0415 - the GPU module only when asked

    return coil_maps is not None and get_xp(coil_maps) is not np and 1 <= int(segments) <= MAX_FUSED_SEGMENTS


def segment_batch(phases: Any, weights: Any, coil_batch: int | None, fused: bool) -> int | None:
    """On a GPU: the coils per pass that fit the free memory beside the kernel spectra (complex64, 2x grid:
    the L (L + 1) / 2 PSF spectra and the operator's copy of them, ``(pairs, P)`` fused or ``(P, L, L)``
    unfused) with, per coil, L grids of work and cuFFT's work area of the same size (the fused operator,
    with maps) or four L-deep work arrays (the unfused CuPy operator); ResourceError when not even one coil
    fits. (The memory planner does not count the segments; the host is not checked.)"""
    if not is_gpu_array(weights):
        return coil_batch
    segments = int(phases.shape[0])
    points = math.prod(phases.shape[1:]) * 2 ** (phases.ndim - 1)
    kernels = 8 * points * segments * (segments + 1)  # the PSFs' spectra, then the operator's
    if not fused:
        kernels += 8 * points * segments * (segments - 1) // 2  # (P, L, L) holds both triangles
    per_coil = 8 * points * (2 if fused else 4) * segments
    free = device_memory(Device(int(weights.device.id)))[0]
    fits = (free - kernels) // per_coil
    if fits < 1:
        raise ResourceError(f"time segmentation with L = {segments} needs {(kernels + per_coil) / 2**30:.1f} "
                            f"GiB of GPU memory, {free / 2**30:.1f} GiB are free; use fewer segments or "
                            f"--field-map-correction exact")
    return int(max(1, min(coil_batch if coil_batch is not None else fits, fits)))
