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
The launchers take CuPy arrays on the current device and return CuPy arrays there; the host-side layout of
their inputs lives in :mod:`.gpu_offres_layout`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...arrays.backend import Device, cupy_module
from ...errors import InvalidDataError, SchemaError
from ...kernels import get_module
from ...kernels.configs import (
    TC_MIN_COILS,
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
from .gpu_offres_layout import (
    PreparedOffres,
    adjoint_records,
    forward_records,
    prepare_offres,
    uses_recurrence,
    voxel_headers,
)
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
