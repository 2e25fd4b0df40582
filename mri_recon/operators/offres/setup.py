"""Off-resonance correction in a reconstruction: which way (exact or time-segmented), how many segments,
and the encoding and CG operator of that choice.

``correction``:

- ``"exact"``: every CG iteration applies the exact encoding with the field map and its adjoint
  (:class:`~mri_recon.operators.offres.model.OffresEncoding`; the IMPATIENT approach, Stone et al. 2008): the
  CUDA kernels on a GPU, the float64 sum on the CPU (slow: 2 M N phases per coil batch and iteration).
- ``"segmented"``: time segmentation with L segments (:mod:`.time_segments`): L plain encodings of the
  chosen engine, and the normal operator as L (L + 1) / 2 Toeplitz kernels, 2 L FFTs on the 2x grid per coil
  and iteration (on a GPU with coil maps the fused :class:`~.gpu_segments.FusedSegmentedNormal`). L is chosen
  so that the interpolation error is at most ``tol`` unless given; one :class:`~.time_segments.SegmentFit`
  serves the search and the interpolators.
- ``"auto"``: the one with the smaller predicted time (:func:`predicted_seconds`).

The cost constants were measured: the CPU's on 2 cores (docs/offres.md), the GPU's on an H200
(scripts/bench_offres.py, docs/benchmarks.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...backend import Device, device_memory, is_gpu_array, resolve_device, to_device
from ...errors import InvalidDataError, ResourceError
from ...kernels.configs import segments_defines
from . import time_segments
from .gpu_offres import MAX_FIELD_HZ, MAX_TIME_SPAN_S
from .gpu_segments import MAX_FUSED_SEGMENTS
from .model import EncodingNormal, OffresEncoding

CORRECTIONS = ("auto", "exact", "segmented")
EXACT_PAIRS_PER_S = {"gpu": 3.8e12, "cpu": 1e8}
"""Coil-voxel-sample triples per second of one exact off-resonance transform (F or F^H). CPU: measured, 8 coils
x 16,384 voxels x 77,296 samples in 101 s (float64 NumPy, 2 cores); GPU: measured on an H200, 8 coils x
65,536 voxels x 309,120 samples, the right-hand side and 30 CG iterations (31 x 2 transforms: F^H on the tensor
cores at 5.1e12, F at 3.0e12) in 2.63 s. One rate for every coil count: with 1 or 2 coils the transforms run at
about 1.2e12 and 1.8e12 (F^H in fhd.cu, F), so exact correction is predicted up to 3.2x too fast there; it stays
the slower choice by far (docs/offres.md: 93x the uncorrected time against the segments' 2-3x)."""
FFT_POINTS_PER_S = {"gpu": 1.4e11, "cpu": 1.2e8}
"""2x-grid points per second of the segmented operator's work per coil, counted as ``2 L + L^2 / 4`` grids
(FFTs and mixing). CPU: measured, 0.19 s per iteration at 128^2, 8 coils, L = 10; GPU: measured on an H200,
0.67 ms per application of the fused operator (``kernels/segments.cu``) at 256^2, 8 coils, L = 10
(scripts/profile_segments.py)."""
PSF_POINTS_PER_S = {"gpu": 4.1e9, "cpu": 1e7}
"""Samples plus 2x-grid points per second of one segment PSF through the plain engine. CPU: measured, 55 PSFs
of 77,296 samples on 256^2 in 0.75 s; GPU: measured on an H200, 55 PSFs of 309,120 samples on 512^2 with
their spectra in 7.6 ms (GPU NUFFT)."""


def predicted_seconds(correction: str, segments: int, matrix: tuple[int, ...], n_samples: int, coils: int,
                      iterations: int, gpu: bool) -> float:
    """Predicted time of the right-hand side, the set-up and ``iterations`` CG iterations."""
    kind = "gpu" if gpu else "cpu"
    voxels = math.prod(matrix)
    if correction == "exact":
        return (iterations + 1) * 2 * coils * voxels * n_samples / EXACT_PAIRS_PER_S[kind]
    big = voxels * 2 ** len(matrix)
    per_iteration = coils * (2 * segments + segments ** 2 / 4) * big / FFT_POINTS_PER_S[kind]
    setup = segments * (segments + 1) / 2 * (n_samples + big) / PSF_POINTS_PER_S[kind]
    return iterations * per_iteration + setup


@dataclass
class OffresCorrection:
    """The correction chosen for one scan (host arrays until :meth:`upload`)."""

    kind: str
    """``"exact"`` or ``"segmented"``."""
    segments: int
    """L (0 for exact)."""
    error: float
    """The interpolation error of the segments (0 for exact)."""
    field_map: Any
    times: Any
    tau: Any = None
    """Segmented: the segment times (s, float64 ``(L,)``)."""
    table: Any = None
    """Segmented: the interpolators of the distinct sample times, complex64 ``(U, L)``."""
    index: Any = None
    """Segmented: each sample's row of ``table``, int32 ``(M,)``."""
    field_map64: Any = None
    """Segmented: the field map in float64, for the segment phases."""

    @property
    def label(self) -> str:
        """What the output records: ``"exact"`` or ``"time-segmented (L=..)"``."""
        return "exact" if self.kind == "exact" else f"time-segmented (L={self.segments})"

    @functools.cached_property
    def b(self) -> Any:
        """Segmented: the interpolator of every sample, complex64 ``(M, L)``, made on the arrays' device."""
        return None if self.table is None else self.table[self.index]

    @functools.cached_property
    def phases(self) -> Any:
        """Segmented: ``c_l = exp(-i 2 pi f tau_l)``, complex64 ``(L, *matrix)``, made on the arrays' device."""
        return None if self.tau is None else time_segments.segment_phases(self.field_map64, self.tau)

    def upload(self, device: Device) -> None:
        """Move the arrays to ``device``; the segments' interpolators and phases are made there (the table, the
        index and the map are a tenth of the size of ``b`` and the phases)."""
        self.field_map, self.times = to_device(self.field_map, device), to_device(self.times, device)
        if self.table is not None:
            self.table, self.index = to_device(self.table, device), to_device(self.index, device)
            self.field_map64 = to_device(self.field_map64, device)
            for made in ("b", "phases"):  # made again on the new device
                self.__dict__.pop(made, None)

    def kernel_configs(self, sense: bool) -> list[tuple[str, dict[str, int]]]:
        """The ``(file, defines)`` of the CUDA modules the GPU normal operator of this correction builds beyond
        the plain engine's: ``segments.cu`` for time segmentation with coil maps (the fused operator)."""
        if self.kind != "segmented" or not sense or self.segments > MAX_FUSED_SEGMENTS:
            return []
        return [("segments.cu", segments_defines(self.segments))]

    def encoding(self, base: Any) -> Any:
        """The encoding with off-resonance for the plain engine ``base``."""
        if self.kind == "exact":
            return OffresEncoding(base.trajectory, self.field_map, self.times, base.ishape[0])
        return time_segments.TimeSegmentedEncoding(base, self.b, self.phases)

    def normal(self, encoding: Any, weights: Any, *, coil_maps: Any, lam: float, coil_batch: int) -> Any:
        """The CG operator ``A^H W A + lam I`` (with maps: summed over coils)."""
        if self.kind == "exact":
            return EncodingNormal(encoding, weights, coil_maps=coil_maps, lam=lam, coil_batch=coil_batch)
        coil_batch = self._segment_batch(weights, coil_batch, time_segments.fused_normal(coil_maps, self.segments))
        spectra = time_segments.segment_spectra(encoding, weights)
        return time_segments.segmented_normal(spectra, self.phases, coil_maps=coil_maps, lam=lam,
                                              coil_batch=coil_batch)

    def _segment_batch(self, weights: Any, coil_batch: int, fused: bool) -> int:
        """On a GPU: the coils per pass that fit the free memory beside the kernel spectra (complex64, 2x grid:
        the L (L + 1) / 2 PSF spectra and the operator's copy of them, ``(pairs, P)`` fused or ``(P, L, L)``
        unfused) with, per coil, L grids of work and cuFFT's work area of the same size (the fused operator,
        with maps) or four L-deep work arrays (the unfused CuPy operator); ResourceError when not even one coil
        fits. (The memory planner does not count the segments; the host is not checked.)"""
        if not is_gpu_array(weights):
            return coil_batch
        points = math.prod(self.phases.shape[1:]) * 2 ** (self.phases.ndim - 1)
        kernels = 8 * points * self.segments * (self.segments + 1)  # the PSFs' spectra, then the operator's
        if not fused:
            kernels += 8 * points * self.segments * (self.segments - 1) // 2  # (P, L, L) holds both triangles
        per_coil = 8 * points * (2 if fused else 4) * self.segments
        free = device_memory(Device(int(weights.device.id)))[0]
        fits = (free - kernels) // per_coil
        if fits < 1:
            raise ResourceError(f"time segmentation with L = {self.segments} needs {(kernels + per_coil) / 2**30:.1f} "
                                f"GiB of GPU memory, {free / 2**30:.1f} GiB are free; use fewer segments or "
                                f"--field-map-correction exact")
        return int(max(1, min(coil_batch, fits)))


def plan_correction(field_map: np.ndarray, times: np.ndarray, n_coils: int, *, gpu: bool,
                    correction: str = "auto", segments: int | None = None, tol: float = time_segments.DEFAULT_TOL,
                    iterations: int = 30) -> OffresCorrection:
    """Choose the correction for a field map (Hz, ``matrix``) and sample times (s, ``(M,)``).

    ``segments`` fixes L (``"segmented"``, or ``"auto"`` comparing that L with exact); None picks the smallest
    L with interpolation error <= ``tol``.
    """
    if correction not in CORRECTIONS:
        raise InvalidDataError(f"unknown field-map correction {correction!r}: expected 'auto', 'exact' or "
                               f"'segmented'")
    if segments is not None and (isinstance(segments, bool) or int(segments) != segments or segments < 1):
        raise InvalidDataError(f"segments must be a positive integer or None, found {segments!r}")
    if correction == "exact" and segments is not None:
        raise InvalidDataError(f"segments (L = {segments}) apply to time segmentation, not to the exact correction")
    matrix = tuple(field_map.shape)
    fit = None
    if correction != "exact":
        fit = time_segments.SegmentFit(field_map, times)  # one fit for the search over L and the interpolators
        try:
            count = int(segments) if segments is not None else fit.choose(tol, time_segments.RIDGE)
        except InvalidDataError:
            if correction == "segmented":
                raise
            count = 0
        kernels_fit = not gpu or (float(np.ptp(times)) <= MAX_TIME_SPAN_S
                                  and float(np.abs(field_map).max()) <= MAX_FIELD_HZ)  # the GPU kernels' range
        if correction == "auto" and kernels_fit and (count == 0 or predicted_seconds(
                "exact", 0, matrix, len(times), n_coils, iterations, gpu) < predicted_seconds(
                "segmented", count, matrix, len(times), n_coils, iterations, gpu)):
            correction = "exact"
        elif count == 0:
            raise InvalidDataError(f"the field map ({np.ptp(field_map):.4g} Hz range) and the times "
                                   f"({np.ptp(times):.4g} s) fit neither time segmentation (more than "
                                   f"{time_segments.MAX_SEGMENTS} segments) nor the exact GPU kernels "
                                   f"(|f| <= {MAX_FIELD_HZ:g} Hz, times within {MAX_TIME_SPAN_S} s)")
        else:
            correction = "segmented"
    if correction == "exact":
        return OffresCorrection("exact", 0, 0.0, field_map.astype(np.float32), times.astype(np.float32))
    table, index, tau, error = fit.interpolator_table(count, time_segments.RIDGE, np.complex64)
    return OffresCorrection("segmented", count, error, field_map.astype(np.float32), times.astype(np.float32),
                            tau, table, index, np.asarray(field_map, dtype=np.float64))


def describe_correction(field_map: np.ndarray, times: np.ndarray, n_coils: int, device: Any = "auto") -> str:
    """One line for ``mri-recon info``: the field map's range, the readout span and what ``auto`` chooses."""
    choice = plan_correction(field_map, times, n_coils, gpu=resolve_device(device).is_gpu)
    return (f"{field_map.min():.4g} .. {field_map.max():.4g} Hz over {np.ptp(times) * 1e3:.4g} ms: {choice.label} "
            f"(--field-map-correction auto)")
