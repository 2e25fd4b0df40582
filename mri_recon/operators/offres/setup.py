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

The cost constants (:mod:`mri_recon.operators.engines.cost`: ``OFFRES_EXACT_PAIRS_PER_S``,
``SEGMENT_FFT_POINTS_PER_S``, ``SEGMENT_PSF_POINTS_PER_S``) come from timed reconstructions: the CPU's in
docs/offres.md, the GPU's by scripts/bench_offres.py (docs/benchmarks.md). The encodings of the choice are engines
of the encoding protocol, and each builds its own normal operator (``encoding.normal``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...arrays.backend import Device, resolve_device, to_device
from ...errors import InvalidDataError
from ...kernels.configs import segments_defines
from ..engines import cost
from . import CORRECTIONS, time_segments
from .gpu_offres_layout import MAX_FIELD_HZ, MAX_TIME_SPAN_S
from .gpu_segments import MAX_FUSED_SEGMENTS
from .model import OffresEncoding
from .segmented import TimeSegmentedEncoding


def predicted_seconds(correction: str, segments: int, matrix: tuple[int, ...], n_samples: int, coils: int,
                      iterations: int, gpu: bool) -> float:
    """Predicted time of the right-hand side, the set-up and ``iterations`` CG iterations."""
    kind = "gpu" if gpu else "cpu"
    voxels = math.prod(matrix)
    if correction == "exact":
        return (iterations + 1) * 2 * coils * voxels * n_samples / cost.OFFRES_EXACT_PAIRS_PER_S[kind]
    big = voxels * 2 ** len(matrix)
    per_iteration = coils * (2 * segments + segments ** 2 / 4) * big / cost.SEGMENT_FFT_POINTS_PER_S[kind]
    setup = segments * (segments + 1) / 2 * (n_samples + big) / cost.SEGMENT_PSF_POINTS_PER_S[kind]
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
        return TimeSegmentedEncoding(base, self.b, self.phases)


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
