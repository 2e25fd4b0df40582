"""Host-side layout of the off-resonance kernels' inputs: the field map and times in fixed point, the F^H
records, the runs of uniform time steps and their phasors, the forward kernel's voxel records
(:mod:`.gpu_offres` launches them). CuPy or NumPy arrays in, the same kind out."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...arrays.backend import get_xp
from ...checks.grid import centre as grid_centre
from ...errors import InvalidDataError
from ...kernels.configs import OFFRES_RESEED, fhd_record_words

MAX_FIELD_HZ = 32767.0
"""Largest |f| the kernels take: F = round(2^16 f) is an int32."""
MAX_TIME_SPAN_S = 0.999
"""Largest span of the sample times: the centred times t - t_c must stay within +-1/2 s (tau is an int32)."""


def fixed_point_offres(field_map: Any, times: Any) -> tuple[Any, Any, float]:
    """The kernels' fixed-point off-resonance inputs: ``F = round(2^16 f)`` (int32, per voxel),
    ``tau = round(2^32 (t - t_c))`` (int32, per sample) and the centre ``t_c`` (s, the middle of the times).

    The kernels' phase is ``f (t - t_c)``; the launchers add ``f t_c`` per voxel (the image of F^H d times
    ``exp(+i 2 pi f t_c)``, the image given to F times ``exp(-i 2 pi f t_c)``), so any time origin works.
    NumPy or CuPy. Raises :class:`InvalidDataError` beyond :data:`MAX_FIELD_HZ` or :data:`MAX_TIME_SPAN_S`.
    """
    xp = get_xp(times)
    t = times.astype(xp.float64)
    low, high = float(t.min()), float(t.max())
    if high - low > MAX_TIME_SPAN_S:
        raise InvalidDataError(f"the sample times span {high - low:.4g} s; the exact GPU off-resonance kernels take "
                               f"at most {MAX_TIME_SPAN_S} s (use time segmentation)")
    largest = float(xp.abs(field_map).max())
    if largest > MAX_FIELD_HZ:
        raise InvalidDataError(f"the field map reaches {largest:.6g} Hz; the exact GPU off-resonance kernels take "
                               f"|f| <= {MAX_FIELD_HZ:g} Hz")
    centre = 0.5 * (low + high)
    tau = xp.rint((t - centre) * 4294967296.0).astype(xp.int32)
    fixed = xp.rint(field_map.astype(xp.float64) * 65536.0).astype(xp.int32)
    return fixed, tau, centre


def centre_phase(field_map: Any, centre: float) -> Any:
    """complex64 ``exp(+i 2 pi f t_c)`` per voxel (in float64 turns reduced to one turn, then rounded)."""
    xp = get_xp(field_map)
    turns = field_map.astype(xp.float64) * centre
    turns -= xp.rint(turns)
    return xp.exp(2j * np.pi * turns).astype(xp.complex64)


def adjoint_records(kfix: Any, taus: Any, data: Any, flags: Any = None) -> Any:
    """Constant-memory records (M, words) uint32 of ``FHD_OFFRES`` 1: fixed-point trajectory, ``tau_m``
    (int32 bits, :func:`fixed_point_offres`), with ``flags`` (uint32 (M,), :attr:`TimeRuns.flags`; the time
    recurrence, ``FHD_RECUR`` 1) the flags word, padding, the complex64 samples ``data`` (coils, M) of the
    group. NumPy or CuPy."""
    xp = get_xp(kfix)
    n_samples, dim = kfix.shape
    coils = data.shape[0]
    words = fhd_record_words(dim, coils, False, True, flags is not None)
    records = xp.zeros((n_samples, words), dtype=xp.uint32)
    records[:, :dim] = kfix
    records[:, dim] = xp.ascontiguousarray(taus, dtype=xp.int32).view(xp.uint32)
    if flags is not None:
        records[:, dim + 1] = flags
    records[:, words - 2 * coils:] = xp.ascontiguousarray(data.T, dtype=xp.complex64).view(xp.float32).view(xp.uint32)
    return records


STEP_TOLERANCE_TURNS = 2.0**-20
"""Largest phase (turns) the time recurrence may add to a voxel-sample pair: ``|f| |t_m - t_m0 - (m - m0) dtau|``
for two samples of one run (9.5e-7 turns, 6e-6 rad). float32 times deviate from their grid by up to half their
spacing: within the tolerance up to about 2 kHz for 4 ms readouts, 450 Hz for 16 ms, 150 Hz for 50 ms."""
RUN_SAMPLES = 8
"""Fewest samples per run, on average, for which F^H d takes the time recurrence (a run start re-seeds E with
one phasor per voxel, so much shorter runs gain nothing over the ``phasor`` kernel)."""


@dataclass(frozen=True)
class TimeRuns:
    """The sample times as runs of one uniform step: what the time recurrence of F^H d needs
    (``FHD_RECUR`` 1 with ``FHD_OFFRES`` 1)."""

    dtau: float
    """The uniform step in units of 2^-32 s (float64: the median of the runs' mean steps, not an integer)."""
    flags: Any
    """uint32 ``(M,)``: 1 where the kernel re-seeds E exactly (the first sample of a run, and every
    :data:`~mri_recon.kernels.configs.OFFRES_RESEED`-th sample), else 0."""
    runs: int
    """Number of runs (samples 0 and every sample whose step from the previous one is not ``dtau``)."""
    steps: Any
    """complex64 ``(voxels,)``: ``r_n = exp(i 2 pi f_n dtau) - 1`` (:func:`step_phasors`)."""


def step_phasors(fixed: Any, dtau: float) -> Any:
    """complex64 ``r_n = exp(i 2 pi F_n dtau 2^-48) - 1`` (the phase of one uniform step in the kernels' fixed
    point, ``F_n dtau 2^-48`` turns), computed in float64 as ``(-2 sin^2(pi x), sin(2 pi x))`` so that its
    rounding is relative to the small ``r``. NumPy or CuPy."""
    xp = get_xp(fixed)
    turns = fixed.astype(xp.float64) * (float(dtau) * 2.0**-48)
    turns -= xp.rint(turns)
    half = xp.sin(np.pi * turns)
    return (-2.0 * half * half + 1j * xp.sin(2.0 * np.pi * turns)).astype(xp.complex64)


def time_runs(taus: Any, fixed: Any) -> TimeRuns | None:
    """The runs of one uniform step in the fixed-point times ``taus`` (int32, :func:`fixed_point_offres`) for
    the field map ``fixed`` (int32 ``F_n``), or None when the samples do not form runs of
    :data:`RUN_SAMPLES` on average (F^H d then takes the ``phasor`` kernel). NumPy or CuPy.

    A sample starts a new run when its step is not within the tolerance of the median step; ``dtau`` is the
    median of the runs' mean steps (so it need not be an integer). Between two samples m0 < m of a run the
    kernel takes ``tau_m = tau_m0 + (m - m0) dtau``, a phase error ``|F| |D_m - D_m0| 2^-48`` turns with
    ``D_m = tau_m - (m - s) dtau`` less its mean over the run (s the run's first sample); a run with some
    ``|D_m|`` above half of :data:`STEP_TOLERANCE_TURNS` (in time, for the largest ``|F|``) re-seeds at every
    sample. With a zero field every sample lies in one run (the recurrence is exact).
    """
    xp = get_xp(taus)
    tau = xp.asarray(taus).astype(xp.int64)
    n_samples = int(tau.shape[0])
    largest = float(xp.abs(xp.asarray(fixed).astype(xp.int64)).max()) if fixed.size else 0.0
    limit = math.inf if largest == 0.0 else STEP_TOLERANCE_TURNS * 2.0**47 / largest  # on |D_m|, in 2^-32 s
    start = xp.zeros(n_samples, dtype=bool)
    start[0] = True
    dtau = 0.0
    if n_samples > 1:
        steps = xp.diff(tau).astype(xp.float64)
        start[1:] = xp.abs(steps - float(xp.median(steps))) > 2.0 * limit
        first = xp.flatnonzero(start)
        last = xp.concatenate([first[1:] - 1, xp.asarray([n_samples - 1])])
        length = last - first
        if bool((length > 0).any()):  # the median slope of the runs: a run at another dwell time cannot bias it
            dtau = float(xp.median((tau[last] - tau[first])[length > 0] / length[length > 0]))
        # D_m: the time off the run's grid, about the run's mean (segment sums by a cumulative sum)
        run = xp.cumsum(start) - 1
        begin = first[run]
        offset = (tau - tau[begin]).astype(xp.float64) - (xp.arange(n_samples) - begin) * dtau
        total = xp.concatenate([xp.zeros(1), xp.cumsum(offset)])
        deviation = xp.abs(offset - ((total[last + 1] - total[first]) / (length + 1))[run])
        off_grid = deviation > limit
        if bool(off_grid.any()):
            start |= xp.isin(run, run[off_grid])
    runs = int(start.sum())
    if runs > 1 and runs * RUN_SAMPLES > n_samples:
        return None
    flags = (start | (xp.arange(n_samples) % OFFRES_RESEED == 0)).astype(xp.uint32)
    return TimeRuns(dtau, flags, runs, step_phasors(fixed, dtau))


@dataclass(frozen=True)
class PreparedOffres:
    """What the launchers derive from the field map and the times, once (:func:`prepare_offres`)."""

    fixed: Any
    """int32 ``(voxels,)``: ``F_n = round(2^16 f_n)`` (:func:`fixed_point_offres`)."""
    taus: Any
    """int32 ``(M,)``: ``tau_m = round(2^32 (t_m - t_c))``."""
    shift: Any
    """complex64 ``(voxels,)``: ``exp(+i 2 pi f_n t_c)`` (:func:`centre_phase`)."""

    @functools.cached_property
    def runs(self) -> TimeRuns | None:
        """The runs of a uniform step (:func:`time_runs`), or None: F^H d takes the ``phasor`` kernel. Found on
        first use: the tensor cores and F do not need them."""
        return time_runs(self.taus, self.fixed)


def prepare_offres(field_map: Any, times: Any) -> PreparedOffres:
    """What the launchers derive from the field map and the times, once (:func:`fixed_point_offres`,
    :func:`centre_phase`; :func:`time_runs` on first use); pass it as ``prepared=`` to skip the work (CG)."""
    fmap = field_map.reshape(-1)
    fixed, taus, centre = fixed_point_offres(fmap, times)
    return PreparedOffres(fixed, taus, centre_phase(fmap, centre))


def uses_recurrence(prepared: PreparedOffres, recur: bool | None) -> bool:
    """Whether F^H d takes the time recurrence: ``recur=None`` wherever the times form runs of a uniform step,
    ``True`` demands it, ``False`` refuses it. Raises :class:`InvalidDataError` for ``True`` without runs."""
    if recur is None:
        return prepared.runs is not None
    if recur and prepared.runs is None:
        raise InvalidDataError("recur=True needs sample times in runs of one uniform step (a constant dwell time, "
                               f"{RUN_SAMPLES} samples per run on average, within the tolerance of "
                               "gpu_offres.time_runs); use recur=None to choose from the times")
    return bool(recur)


@functools.lru_cache(maxsize=8)
def voxel_headers(matrix: tuple[int, ...]) -> np.ndarray:
    """int32 ``(voxels, 3)``: ``Q_d = 2 j_d - 2 (N_d // 2)`` of every voxel in C order (2-D: Q_x, Q_y, 0)."""
    axes = [2 * np.arange(n, dtype=np.int64) - 2 * grid_centre(n) for n in matrix]
    grids = [g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij")]
    if len(matrix) == 2:
        grids.append(np.zeros_like(grids[0]))
    out = np.ascontiguousarray(np.stack(grids, axis=1).astype(np.int32))
    out.flags.writeable = False
    return out


def forward_records(headers: Any, fixed: Any, values: Any) -> Any:
    """Voxel records (voxels, words) uint32 of ``FWD_OFFRES`` 1: Q_x, Q_y, Q_z (:func:`voxel_headers`),
    ``F_n`` (int32 bits, :func:`fixed_point_offres`), then the complex64 ``values`` (coils, voxels) of the
    group, zero-padded to a multiple of four words. NumPy or CuPy."""
    xp = get_xp(values)
    coils, n_voxels = values.shape
    records = xp.zeros((n_voxels, 4 + 4 * ((coils + 1) // 2)), dtype=xp.uint32)
    records[:, :3] = xp.asarray(headers).view(xp.uint32)
    records[:, 3] = xp.ascontiguousarray(fixed, dtype=xp.int32).view(xp.uint32)
    records[:, 4:4 + 2 * coils] = xp.ascontiguousarray(values.T, dtype=xp.complex64).view(xp.float32).view(xp.uint32)
    return records
