"""F and F^H with off-resonance on the GPU by exact direct summation (``fhd.cu`` with ``FHD_OFFRES`` 1 and
``forward.cu`` with ``FWD_OFFRES`` 1).

Model (:mod:`mri_recon.operators.offres`): ``d_m = sum_n x_n exp(-i 2 pi (k_m . r_n + f_n t_m))`` with the
field map f in Hz and the sample times t in s; ``F^H d = sum_m d_m exp(+i 2 pi (k_m . r_n + f_n t_m))``.
The whole phase is in fixed-point turns: the trajectory part as in :mod:`.gpu_exact`, ``f_n t_m`` from the
integers ``F_n = round(2^16 f_n)`` and ``tau_m = round(2^32 (t_m - t_c))`` (:func:`fixed_point_offres`; their
64-bit product holds ``f (t - t_c)`` in its bits 16..47), and ``f_n t_c`` applied per voxel by the
launchers. A field map breaks the mirror symmetry (and the recurrence along a line), so F^H walks unpaired
lines with one phase per voxel and sample, and F streams one record per voxel. The launchers take CuPy arrays
on the current device and return CuPy arrays there.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..backend import Device, cupy_module, get_xp
from ..errors import InvalidDataError, SchemaError
from ..grid import centre as grid_centre
from ..kernels import get_module
from ..kernels.configs import fhd_record_words, offres_adjoint_defines, offres_forward_defines
from .gpu_exact import (
    DEFAULT_BLOCK,
    THREADS_PER_SM,
    _empty,
    _fhd_launch,
    _gpu_array,
    _launch_size,
    _sm_count,
    adjoint_inputs,
    forward_inputs,
)
from .gpu_layout import coil_groups, fixed_point_turns


def _offres_inputs(field_map: Any, times: Any, matrix: tuple[int, ...], n_samples: int,
                   device: Device) -> tuple[Any, Any]:
    """Checked float32 ``field_map`` (flattened, C order) and ``times`` on ``device``."""
    cupy = cupy_module()
    _gpu_array("field_map", field_map, device, "f", len(matrix))
    _gpu_array("times", times, device, "f", 1)
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


def adjoint_records(kfix: Any, taus: Any, data: Any) -> Any:
    """Constant-memory records (M, words) uint32 of ``FHD_OFFRES`` 1: fixed-point trajectory, ``tau_m``
    (int32 bits, :func:`fixed_point_offres`), padding, the complex64 samples ``data`` (coils, M) of the
    group. NumPy or CuPy."""
    xp = get_xp(kfix)
    n_samples, dim = kfix.shape
    coils = data.shape[0]
    words = fhd_record_words(dim, coils, False, True)
    records = xp.zeros((n_samples, words), dtype=xp.uint32)
    records[:, :dim] = kfix
    records[:, dim] = xp.ascontiguousarray(taus, dtype=xp.int32).view(xp.uint32)
    records[:, words - 2 * coils:] = xp.ascontiguousarray(data.T, dtype=xp.complex64).view(xp.float32).view(xp.uint32)
    return records


def prepare_offres(field_map: Any, times: Any) -> tuple[Any, Any, Any]:
    """What the launchers derive from the field map and the times, once: ``(F, tau, exp(+i 2 pi f t_c))``
    (:func:`fixed_point_offres`, :func:`centre_phase`); pass it as ``prepared=`` to skip the work (CG)."""
    fmap = field_map.reshape(-1)
    fixed, taus, centre = fixed_point_offres(fmap, times)
    return fixed, taus, centre_phase(fmap, centre)


def fhd_offres_gpu(kspace: Any, trajectory: Any, matrix: tuple[int, ...], field_map: Any, times: Any, *,
                   chunk: int | None = None, block: int | None = None, prepared: Any = None) -> Any:
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
        As for :func:`mri_recon.operators.gpu_exact.fhd_gpu`.
    prepared
        :func:`prepare_offres` of ``field_map`` and ``times``, or None.

    Returns
    -------
    cupy.ndarray
        complex64 ``(C, *matrix)``.
    """
    data, matrix, device = adjoint_inputs(kspace, trajectory, matrix)
    fixed, taus, shift = prepared or prepare_offres(*_offres_inputs(field_map, times, matrix, data.shape[1], device))
    n_coils = data.shape[0]
    kfix = fixed_point_turns(trajectory, matrix)
    out = _empty((n_coils, math.prod(matrix)), cupy_module().complex64)
    for start, size in coil_groups(n_coils):
        records = adjoint_records(kfix, taus, data[start:start + size])
        _fhd_launch(out, records, matrix, offres_adjoint_defines(len(matrix), size), False, start, chunk, block,
                    device, field_map=fixed)
    out *= shift
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
                       chunk: int | None = None, block: int | None = None, prepared: Any = None) -> Any:
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
    fixed, taus, shift = prepared or prepare_offres(*_offres_inputs(field_map, times, matrix, n_samples, device))
    flat = flat * shift.conj()
    cupy = cupy_module()
    n_coils, n_voxels = flat.shape
    threads = _launch_size(block, DEFAULT_BLOCK, 256, "block (threads per block)")
    kfix = fixed_point_turns(trajectory, matrix)
    blocks = -(-n_samples // threads)
    if chunk is None:
        slices = max(1, min(-(-_sm_count(device.index) * THREADS_PER_SM // (blocks * threads)), n_voxels))
        per_slice = -(-n_voxels // slices)
    else:
        per_slice = _launch_size(chunk, 1, 2**31 - 1, "chunk (voxels per slice)")
    per_slice = max(per_slice, -(-n_voxels // 65535))
    slices = -(-n_voxels // per_slice)
    headers = cupy.asarray(voxel_headers(matrix))
    out = _empty((slices, n_coils, n_samples), cupy.complex64)
    for start, size in coil_groups(n_coils):
        defines = offres_forward_defines(len(matrix), size)
        kernel = get_module("forward.cu", defines, device).get_function("mri_recon_forward_offres")
        records = forward_records(headers, fixed, flat[start:start + size])
        kernel((blocks, slices, 1), (threads, 1, 1),
               (out, kfix, taus, records, np.int32(n_voxels), np.int32(n_samples), np.int32(per_slice),
                np.int32(n_coils), np.int32(start)))
    return out[0] if slices == 1 else out.sum(axis=0)
