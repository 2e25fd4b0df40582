"""Time series of frames: the frames of a dynamic scan, from MRD indices or cut from a continuous stream.

A :class:`TimeSeries` is a list of frames that share one matrix, one coil set, one noise measurement and
(once estimated) one set of coil maps; each frame is a :class:`~mri_recon.scan.Scan` with its own k-space,
trajectory and density weights. Frames come from

- :func:`frames_by_index`: the values of one MRD index (``repetition`` or ``phase``) of the ``(key, Scan)``
  pairs of :func:`mri_recon.io.load_scans`, every other index holding one value;
- :func:`frames_by_readouts`: one continuous acquisition cut into frames of ``K`` consecutive readouts in
  acquisition order; ``frames=N`` keeps the first N, and readouts that do not fill a frame are dropped and
  reported (``TimeSeries.dropped_readouts``, and a warning of logger ``mri_recon.io.frames``).

The frame duration comes from the MRD acquisition time stamps (2.5 ms ticks) when the file has them
(``Scan.attrs["readout_time_ms"]``), else it is unknown (None).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidDataError
from ..scan import Scan

__all__ = ["AXES", "TimeSeries", "frames_by_index", "frames_by_readouts", "temporal_axis"]

log = logging.getLogger(__name__)

AXES = ("repetition", "phase")
"""MRD indices that may be the time axis."""
TICK_MS = 2.5
"""One MRD ``acquisition_time_stamp`` tick in milliseconds."""


@dataclass(frozen=True, eq=False)
class TimeSeries:
    """Frames of one dynamic scan (see the module docstring)."""

    frames: tuple[Scan, ...]
    """One scan per frame, in time order: k-space ``(C, M_t)``, trajectory ``(M_t, D)``, weights ``(M_t,)``."""
    axis: str
    """Where the frames came from: ``"repetition"``, ``"phase"`` or ``"readouts"``."""
    labels: tuple[int, ...]
    """The index value of each frame (``repetition`` / ``phase``), or the frame number (readouts)."""
    coil_maps: np.ndarray | None = None
    """complex64 ``(C, *matrix)``: coil maps shared by every frame (None: estimated from all frames)."""
    ground_truth: np.ndarray | None = None
    """complex64 ``(T, *matrix)``: the true frames of a simulated scan."""
    frame_duration_s: float | None = None
    """Seconds per frame (from the time stamps, or the simulation); None when unknown."""
    dropped_readouts: int = 0
    """Readouts at the end of the stream that did not fill a frame (readouts only)."""
    attrs: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<memory>"

    def __post_init__(self) -> None:
        if not self.frames:
            raise InvalidDataError(f"{self.source}: a time series needs at least one frame")
        first = self.frames[0]
        for t, frame in enumerate(self.frames):
            if frame.matrix != first.matrix or frame.n_coils != first.n_coils:
                raise InvalidDataError(f"{self.source}: frame {t} has matrix {list(frame.matrix)} and "
                                       f"{frame.n_coils} coils, frame 0 {list(first.matrix)} and {first.n_coils}")
        if len(self.labels) != len(self.frames):
            raise InvalidDataError(f"{self.source}: {len(self.labels)} labels for {len(self.frames)} frames")
        if self.coil_maps is not None and tuple(self.coil_maps.shape) != (first.n_coils, *first.matrix):
            raise InvalidDataError(f"{self.source}: coil_maps must have shape {(first.n_coils, *first.matrix)}, "
                                   f"found {tuple(self.coil_maps.shape)}")
        if self.ground_truth is not None and tuple(self.ground_truth.shape) != (len(self.frames), *first.matrix):
            raise InvalidDataError(f"{self.source}: ground_truth must have shape "
                                   f"{(len(self.frames), *first.matrix)}, found {tuple(self.ground_truth.shape)}")

    @property
    def matrix(self) -> tuple[int, ...]:
        return self.frames[0].matrix

    @property
    def n_frames(self) -> int:
        return len(self.frames)

    @property
    def n_coils(self) -> int:
        return self.frames[0].n_coils

    @property
    def samples_per_frame(self) -> int:
        """The most samples of any frame (what the planner counts per frame)."""
        return max(frame.n_samples for frame in self.frames)

    def averaged(self) -> Scan:
        """Every frame's samples as one scan (the time-averaged data the coil maps are estimated from); no
        density weights (the frames' weights are per frame)."""
        first = self.frames[0]
        return Scan(kspace=np.concatenate([f.kspace for f in self.frames], axis=1),
                    trajectory=np.concatenate([f.trajectory for f in self.frames]), matrix=first.matrix,
                    coil_maps=self.coil_maps, noise=first.noise, attrs=dict(first.attrs), source=self.source)

    def replace_frames(self, frames: Sequence[Scan], **changes: Any) -> TimeSeries:
        """A copy with other frames (e.g. prepared ones) and any other fields changed."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update(changes, frames=tuple(frames))
        return TimeSeries(**values)


def temporal_axis(keys: Sequence[Mapping[str, int]], axis: str | None, source: str) -> str:
    """The MRD index that is the time axis: ``axis`` itself (checked), or the one of :data:`AXES` that takes
    more than one value among ``keys``.

    Raises
    ------
    InvalidDataError
        An unknown axis, both or neither taking several values (without a choice).
    """
    counts = {name: len({int(k.get(name, 0)) for k in keys}) for name in AXES}
    if axis is not None:
        if axis not in AXES:
            raise InvalidDataError(f"temporal axis must be one of {', '.join(AXES)}, found {axis!r}")
        return axis
    several = [name for name in AXES if counts[name] > 1]
    if len(several) == 1:
        return several[0]
    if several:
        raise InvalidDataError(f"{source}: both repetition ({counts['repetition']}) and phase ({counts['phase']}) "
                               f"take several values; choose the time axis (--temporal-axis repetition|phase)")
    raise InvalidDataError(f"{source}: one repetition and one phase: no time axis; cut a continuous "
                           f"acquisition into frames with --spokes-per-frame K")


def frames_by_index(pairs: Sequence[tuple[Mapping[str, int], Scan]], axis: str | None = None) -> TimeSeries:
    """The frames of MRD images keyed by their indices (:func:`mri_recon.io.load_scans`): one frame per
    value of ``axis`` (:func:`temporal_axis`), in increasing order.

    Raises
    ------
    InvalidDataError
        No time axis, or another index (slice, contrast, set, the other of repetition/phase) with several
        values: choose one (``--slice`` ...).
    """
    source = pairs[0][1].source if pairs else "<memory>"
    keys = [key for key, _ in pairs]
    axis = temporal_axis(keys, axis, source)
    for name in ("slice", "contrast", "set", *(a for a in AXES if a != axis)):
        values = sorted({int(k.get(name, 0)) for k in keys})
        if len(values) > 1:
            raise InvalidDataError(f"{source}: the frames along {axis} need one {name}, found {values}; choose "
                                   f"one (--{name} N)")
    ordered = sorted(pairs, key=lambda pair: int(pair[0].get(axis, 0)))
    frames = tuple(scan for _, scan in ordered)
    _warn_unequal(frames, [int(k.get(axis, 0)) for k, _ in ordered], axis, source)
    return TimeSeries(frames=frames, axis=axis, labels=tuple(int(k.get(axis, 0)) for k, _ in ordered),
                      frame_duration_s=_duration_of_frames(frames), attrs={"temporal_axis": axis}, source=source)


def _warn_unequal(frames: Sequence[Scan], labels: Sequence[int], axis: str, source: str) -> None:
    """Log a warning naming the frames with fewer samples than the largest frame (an acquisition cut short, or
    frames of different sizes on purpose: they are reconstructed as they are)."""
    counts = [f.n_samples for f in frames]
    common = max(counts)
    short = [f"{labels[t]} ({n})" for t, n in enumerate(counts) if n < common]
    if short:
        log.warning("%s: frames along %s with fewer samples than the largest's %d: %s (an acquisition cut short?); "
                    "they are reconstructed with what they have", source, axis, common, ", ".join(short[:5]) +
                    (f" and {len(short) - 5} more" if len(short) > 5 else ""))


def _duration_of_frames(frames: Sequence[Scan]) -> float | None:
    """The median step between the frames' first time stamps, in seconds (None without stamps)."""
    starts = [f.attrs.get("readout_time_ms") for f in frames]
    if len(frames) < 2 or any(s is None or len(s) == 0 for s in starts):
        return None
    steps = np.diff([float(np.min(s)) for s in starts])
    step = float(np.median(steps))
    return step * 1e-3 if step > 0 else None


def frames_by_readouts(scan: Scan, spokes_per_frame: int, *, frames: int | None = None,
                       samples_per_readout: int | None = None) -> TimeSeries:
    """``scan`` (one continuous acquisition, readouts in acquisition order) cut into frames of
    ``spokes_per_frame`` consecutive readouts; ``frames`` keeps the first N.

    ``samples_per_readout``: by default ``scan.attrs["samples_per_readout"]`` (MRD) or ``attrs["samples"]``
    (simulated scans). Density weights of the scan are not kept (they belong to all readouts together).

    Raises
    ------
    InvalidDataError
        A readout length that does not divide the samples, fewer readouts than one frame, or more frames
        asked for than the readouts fill.
    """
    n = int(samples_per_readout or scan.attrs.get("samples_per_readout") or scan.attrs.get("samples") or 0)
    if n <= 0 or scan.n_samples % n:
        raise InvalidDataError(f"{scan.source}: cannot cut frames: readout length {n} does not divide the "
                               f"{scan.n_samples} samples (give samples_per_readout)")
    k = int(spokes_per_frame)
    if k < 1:
        raise InvalidDataError(f"spokes per frame must be >= 1, found {spokes_per_frame}")
    readouts = scan.n_samples // n
    full = readouts // k
    if full < 1:
        raise InvalidDataError(f"{scan.source}: {readouts} readouts do not fill one frame of {k}")
    if frames is not None:
        if int(frames) < 1 or int(frames) > full:
            raise InvalidDataError(f"{scan.source}: frames must be 1 to {full} ({readouts} readouts of {k} per "
                                   f"frame), found {frames}")
        full = int(frames)
    dropped = readouts - full * k
    if dropped:
        log.warning("%s: %d readout(s) after frame %d dropped (%d frames of %d readouts)", scan.source, dropped,
                    full - 1, full, k)
    cut = [_frame(scan, slice(t * k * n, (t + 1) * k * n), t) for t in range(full)]
    stamps = scan.attrs.get("readout_time_ms")
    duration = None
    if stamps is not None and len(stamps) == readouts and readouts > 1:
        step = float(np.median(np.diff(np.asarray(stamps, dtype=np.float64))))
        duration = step * k * 1e-3 if step > 0 else None
    return TimeSeries(frames=tuple(cut), axis="readouts", labels=tuple(range(full)), coil_maps=scan.coil_maps,
                      frame_duration_s=duration, dropped_readouts=dropped,
                      attrs={"temporal_axis": "readouts", "spokes_per_frame": k, "samples_per_readout": n},
                      source=scan.source)


def _frame(scan: Scan, part: slice, t: int) -> Scan:
    """Samples ``part`` of ``scan`` as frame ``t`` (no maps, weights or ground truth: the series holds them)."""
    attrs = {name: value for name, value in scan.attrs.items() if name != "readout_time_ms"}
    return Scan(kspace=scan.kspace[:, part], trajectory=scan.trajectory[part], matrix=scan.matrix,
                noise=scan.noise, attrs={**attrs, "frame": t}, source=scan.source)


def load_series(path: Any, *, temporal_axis: str | None = None, spokes_per_frame: int | None = None,
                frames: int | None = None, allow_external: bool = False, **choice: Any) -> TimeSeries:
    """The frames of a scan file: cut from its one image's readouts (``spokes_per_frame``), else the values
    of ``temporal_axis`` (:func:`frames_by_index`); ``choice`` (``slice=``, ``traj_units=``, ...) as for
    :func:`mri_recon.io.load_scans`. A ground truth stored by :func:`~mri_recon.io.series_files.save_series_mrd`
    is attached (an ISMRMRD file's: the other formats hold none)."""
    from . import ismrmrd, load_scans  # noqa: PLC0415 - the package's dispatcher
    from .readers import reader_of  # noqa: PLC0415 - the registry of readers imports this module's users
    from .series_files import read_series_truth  # noqa: PLC0415

    pairs = load_scans(path, allow_external=allow_external, **choice)
    if spokes_per_frame is not None:
        if len(pairs) > 1:
            raise InvalidDataError(f"{path}: --spokes-per-frame cuts one continuous acquisition; the file holds "
                                   f"{len(pairs)} images (choose one with --slice, --repetition, ...)")
        series = frames_by_readouts(pairs[0][1], spokes_per_frame, frames=frames)
    else:
        series = frames_by_index(pairs, temporal_axis)
        if frames is not None:
            if not 1 <= int(frames) <= series.n_frames:
                raise InvalidDataError(f"{path}: frames must be 1 to {series.n_frames}, found {frames}")
            series = series.replace_frames(series.frames[: int(frames)], labels=series.labels[: int(frames)])
    stored = series.axis != "readouts" and reader_of(path, allow_external)[0] is ismrmrd.INPUT
    truth = read_series_truth(path, series.n_frames, series.matrix) if stored else None
    return series if truth is None else series.replace_frames(series.frames, ground_truth=truth)
