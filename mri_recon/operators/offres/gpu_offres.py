"""F and F^H with off-resonance on the GPU by exact direct summation (``fhd.cu`` with ``FHD_OFFRES`` 1 and
``forward.cu`` with ``FWD_OFFRES`` 1).

Model (:mod:`mri_recon.operators.offres.model`): ``d_m = sum_n x_n exp(-i 2 pi (k_m . r_n + f_n t_m))`` with the
field map f in Hz and the sample times t in s; ``F^H d = sum_m d_m exp(+i 2 pi (k_m . r_n + f_n t_m))``.
The whole phase is in fixed-point turns: the trajectory part as in :mod:`.gpu_exact`, ``f_n t_m`` from the
integers ``F_n = round(2^16 f_n)`` and ``tau_m = round(2^32 (t_m - t_c))`` (:func:`fixed_point_offres`; their
64-bit product holds ``f (t - t_c)`` in its bits 16..47), and ``f_n t_c`` applied per voxel by the
launchers. F streams one record per voxel. F^H has two kernels, chosen per call from the times
(:func:`time_runs`): where the samples form runs of one uniform step (a constant dwell time), ``recur``
splits ``exp(i 2 pi (k . r + f t)) = exp(i 2 pi k . r) exp(i 2 pi f t)``, takes the first factor from mirror
pairs and the angle-addition recurrence as the plain kernel does and the second from a recurrence along
the samples, re-seeded exactly at every run start and every :data:`~mri_recon.kernels.configs.OFFRES_RESEED`
samples; otherwise the ``phasor`` kernel evaluates every voxel-sample phase on its own (unpaired lines).
The launchers take CuPy arrays on the current device and return CuPy arrays there.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...backend import Device, cupy_module, get_xp
from ...errors import InvalidDataError, SchemaError
from ...grid import centre as grid_centre
from ...kernels import get_module
from ...kernels.configs import (
    OFFRES_RESEED,
    TC_MIN_COILS,
    fhd_record_words,
    offres_adjoint_defines,
    offres_forward_defines,
)
from ..engines.gpu_exact import (
    DEFAULT_BLOCK,
    THREADS_PER_SM,
    adjoint_inputs,
    fhd_launch,
    forward_inputs,
)
from ..engines.gpu_layout import coil_groups, fixed_point_turns
from ..gpu.launch import check_gpu_array, empty, launch_size, sm_count
from .gpu_offres_tc import fhd_offres_tc, tc_groups, tensor_cores_available


def _offres_inputs(field_map: Any, times: Any, matrix: tuple[int, ...], n_samples: int,
                   device: Device) -> tuple[Any, Any]:
    """Checked float32 ``field_map`` (flattened, C order) and ``times`` on ``device``."""
    cupy = cupy_module()
    check_gpu_array("field_map", field_map, device, "f", len(matrix))
    check_gpu_array("times", times, device, "f", 1)
    if tuple(field_map.shape) != tuple(matrix):
        raise SchemaError(f"field_map must have the image's shape {tuple(matrix)}, found {tuple(field_map.shape)}")
    if tuple(times.shape) != (n_samples,):
        raise SchemaError(f"times must have shape ({n_samples},) (one per sample), found {tuple(times.shape)}")
    return (cupy.ascontiguousarray(field_map, dtype=cupy.float32).reshape(-1),
            cupy.ascontiguousarray(times, dtype=cupy.float32))


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


def tensor_request(tensor: bool | None, recur: bool | None, rotate: bool | None, chunk: int | None,
                   block: int | None) -> bool | None:
    """The ``tensor`` that :func:`fhd_offres_gpu`'s options ask for: ``recur``, ``rotate``, ``chunk`` and
    ``block`` are ``fhd.cu``'s, so any of them given (not None) asks for ``fhd.cu`` (False) unless ``tensor``
    says otherwise, and with ``tensor=True`` they are refused (:class:`InvalidDataError`) rather than ignored."""
    given = [name for name, value in (("recur", recur), ("rotate", rotate), ("chunk", chunk), ("block", block))
             if value is not None]
    if not given:
        return tensor
    if tensor:
        options = f"{given[0]} is an fhd.cu option" if len(given) == 1 else f"{', '.join(given)} are fhd.cu options"
        raise InvalidDataError(f"{options}: not with tensor=True (the tensor cores)")
    return False


def coil_launches(n_coils: int, device: Device, tensor: bool | None) -> list[tuple[int, int, bool]]:
    """``(first coil, coils, on the tensor cores)`` of each launch of F^H d with off-resonance.

    ``tensor=None``: on a GPU of compute capability 8.0 or newer, groups of up to 8 coils
    (:func:`.gpu_offres_tc.tc_groups`), each on the tensor cores from
    :data:`~mri_recon.kernels.configs.TC_MIN_COILS` coils and in ``fhd.cu`` below (9 coils: 8 on the tensor
    cores, 1 in ``fhd.cu``); elsewhere ``fhd.cu``'s even groups. ``True`` puts every group on the tensor cores
    (raises :class:`InvalidDataError` on an older GPU), ``False`` none.
    """
    if tensor is False or (tensor is None and not tensor_cores_available(device)):
        return [(start, size, False) for start, size in coil_groups(n_coils)]
    if tensor and not tensor_cores_available(device):
        raise InvalidDataError("tensor=True needs a GPU of compute capability 8.0 or newer (mma.sync with half "
                               "operands)")
    return [(start, size, bool(tensor) or size >= TC_MIN_COILS) for start, size in tc_groups(n_coils)]


def fhd_offres_gpu(kspace: Any, trajectory: Any, matrix: tuple[int, ...], field_map: Any, times: Any, *,
                   chunk: int | None = None, block: int | None = None, prepared: PreparedOffres | None = None,
                   recur: bool | None = None, rotate: bool | None = None, tensor: bool | None = None) -> Any:
    """F^H d with off-resonance on the GPU: ``sum_m d_m exp(+i 2 pi (k_m . r_n + f_n t_m))``.

    Parameters
    ----------
    kspace
        CuPy complex64 ``(C, M)`` on the current device.
    trajectory
        CuPy float32 ``(M, D)`` in cycles per field of view.
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``.
    field_map
        CuPy float32 ``matrix``: off-resonance in Hz.
    times
        CuPy float32 ``(M,)``: sample times in s.
    chunk, block
        As for :func:`mri_recon.operators.engines.gpu_exact.fhd_gpu`.
    prepared
        :func:`prepare_offres` of ``field_map`` and ``times``, or None.
    recur
        The time recurrence (mirror pairs, recurrences along the voxels and along the samples) instead of one
        phasor per voxel-sample pair: None wherever the times form runs of a uniform step
        (:func:`uses_recurrence`).
    rotate
        With the recurrence, rotating sums instead of walking phasors (``FHD_ROTATE``); None: by the coil
        count (:func:`mri_recon.kernels.configs.offres_rotates`).
    tensor
        The tensor cores (``offres_tc.cu``, :mod:`.gpu_offres_tc`: every voxel-sample phase exact, the sums
        over samples as a matrix product, 1.5x ``fhd.cu`` with 8 coils; compute capability 8.0) instead of
        ``fhd.cu``: None by the coil count (:func:`coil_launches`), True always, False never. ``recur``,
        ``rotate``, ``chunk`` and ``block`` are ``fhd.cu``'s: giving any of them asks for ``fhd.cu``
        (:func:`tensor_request`).

    Returns
    -------
    cupy.ndarray
        complex64 ``(C, *matrix)``.
    """
    data, matrix, device = adjoint_inputs(kspace, trajectory, matrix)
    prepared = prepared or prepare_offres(*_offres_inputs(field_map, times, matrix, data.shape[1], device))
    n_coils = data.shape[0]
    kfix = fixed_point_turns(trajectory, matrix)
    out = empty((n_coils, math.prod(matrix)), cupy_module().complex64)
    tensor = tensor_request(tensor, recur, rotate, chunk, block)
    for start, size, tensor_cores in coil_launches(n_coils, device, tensor):
        group = data[start:start + size]
        if tensor_cores:
            fhd_offres_tc(out[start:start + size], group, kfix, prepared.taus, prepared.fixed, matrix, device)
        elif uses_recurrence(prepared, recur):
            runs = prepared.runs
            fhd_launch(out, adjoint_records(kfix, prepared.taus, group, runs.flags), matrix,
                        offres_adjoint_defines(len(matrix), size, True, rotate), True, start, chunk, block, device,
                        field_map=prepared.fixed, steps=runs.steps)
        else:
            fhd_launch(out, adjoint_records(kfix, prepared.taus, group), matrix,
                        offres_adjoint_defines(len(matrix), size), False, start, chunk, block, device,
                        field_map=prepared.fixed)
    out *= prepared.shift
    return out.reshape(n_coils, *matrix)


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


def forward_offres_gpu(image: Any, trajectory: Any, field_map: Any, times: Any, *,
                       chunk: int | None = None, block: int | None = None,
                       prepared: PreparedOffres | None = None) -> Any:
    """F x with off-resonance on the GPU: ``d_m = sum_n x_n exp(-i 2 pi (k_m . r_n + f_n t_m))``.

    Parameters
    ----------
    image
        CuPy complex64 ``(C, *matrix)`` on the current device.
    trajectory
        CuPy float32 ``(M, D)`` in cycles per field of view.
    field_map
        CuPy float32 ``matrix`` (Hz).
    times
        CuPy float32 ``(M,)`` (s).
    chunk
        Voxels per slice (each slice is one grid row whose partial sums are added at the end); None: slices
        sized to fill the GPU.
    block
        Threads per block (at most 256).
    prepared
        :func:`prepare_offres` of ``field_map`` and ``times``, or None.

    Returns
    -------
    cupy.ndarray
        complex64 ``(C, M)``.
    """
    flat, matrix, device = forward_inputs(image, trajectory)
    n_samples = int(trajectory.shape[0])
    prepared = prepared or prepare_offres(*_offres_inputs(field_map, times, matrix, n_samples, device))
    fixed, taus = prepared.fixed, prepared.taus
    flat = flat * prepared.shift.conj()
    cupy = cupy_module()
    n_coils, n_voxels = flat.shape
    threads = launch_size(block, DEFAULT_BLOCK, 256, "block (threads per block)")
    kfix = fixed_point_turns(trajectory, matrix)
    blocks = -(-n_samples // threads)
    if chunk is None:
        slices = max(1, min(-(-sm_count(device.index) * THREADS_PER_SM // (blocks * threads)), n_voxels))
        per_slice = -(-n_voxels // slices)
    else:
        per_slice = launch_size(chunk, 1, 2**31 - 1, "chunk (voxels per slice)")
    per_slice = max(per_slice, -(-n_voxels // 65535))
    slices = -(-n_voxels // per_slice)
    headers = cupy.asarray(voxel_headers(matrix))
    out = empty((slices, n_coils, n_samples), cupy.complex64)
    for start, size in coil_groups(n_coils):
        defines = offres_forward_defines(len(matrix), size)
        kernel = get_module("forward.cu", defines, device).get_function("mri_recon_forward_offres")
        records = forward_records(headers, fixed, flat[start:start + size])
        kernel((blocks, slices, 1), (threads, 1, 1),
               (out, kfix, taus, records, np.int32(n_voxels), np.int32(n_samples), np.int32(per_slice),
                np.int32(n_coils), np.int32(start)))
    return out[0] if slices == 1 else out.sum(axis=0)
