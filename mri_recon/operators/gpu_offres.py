"""F and F^H with off-resonance on the GPU by exact direct summation (``fhd.cu`` with ``FHD_OFFRES`` 1 and
``forward.cu`` with ``FWD_OFFRES`` 1).

Model (:mod:`mri_recon.operators.offres`): ``d_m = sum_n x_n exp(-i 2 pi (k_m . r_n + f_n t_m))`` with the
field map f in Hz and the sample times t in s; ``F^H d = sum_m d_m exp(+i 2 pi (k_m . r_n + f_n t_m))``.
The trajectory part of the phase stays in exact fixed-point turns as in :mod:`.gpu_exact`; ``f_n t_m`` is a
float32 product reduced to one turn inside the kernels. A field map breaks the mirror symmetry (and the
recurrence along a line), so F^H walks unpaired lines with one phase per voxel and sample, and F streams
one record per voxel. The launchers take CuPy arrays on the current device and return CuPy arrays there.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..backend import Device, cupy_module, get_xp
from ..errors import SchemaError
from ..grid import centre
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


def adjoint_records(kfix: Any, times: Any, data: Any) -> Any:
    """Constant-memory records (M, words) uint32 of ``FHD_OFFRES`` 1: fixed-point trajectory, the sample
    time (float32 bits), padding, the complex64 samples ``data`` (coils, M) of the group. NumPy or CuPy."""
    xp = get_xp(kfix)
    n_samples, dim = kfix.shape
    coils = data.shape[0]
    words = fhd_record_words(dim, coils, False, True)
    records = xp.zeros((n_samples, words), dtype=xp.uint32)
    records[:, :dim] = kfix
    records[:, dim] = xp.ascontiguousarray(times, dtype=xp.float32).view(xp.uint32)
    records[:, words - 2 * coils:] = xp.ascontiguousarray(data.T, dtype=xp.complex64).view(xp.float32).view(xp.uint32)
    return records


def fhd_offres_gpu(kspace: Any, trajectory: Any, matrix: tuple[int, ...], field_map: Any, times: Any, *,
                   chunk: int | None = None, block: int | None = None) -> Any:
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

    Returns
    -------
    cupy.ndarray
        complex64 ``(C, *matrix)``.
    """
    data, matrix, device = adjoint_inputs(kspace, trajectory, matrix)
    fmap, t = _offres_inputs(field_map, times, matrix, data.shape[1], device)
    n_coils = data.shape[0]
    kfix = fixed_point_turns(trajectory, matrix)
    out = _empty((n_coils, math.prod(matrix)), cupy_module().complex64)
    for start, size in coil_groups(n_coils):
        records = adjoint_records(kfix, t, data[start:start + size])
        _fhd_launch(out, records, matrix, offres_adjoint_defines(len(matrix), size), False, start, chunk, block,
                    device, field_map=fmap)
    return out.reshape(n_coils, *matrix)


@functools.lru_cache(maxsize=8)
def voxel_headers(matrix: tuple[int, ...]) -> np.ndarray:
    """int32 ``(voxels, 3)``: ``Q_d = 2 j_d - 2 (N_d // 2)`` of every voxel in C order (2-D: Q_x, Q_y, 0)."""
    axes = [2 * np.arange(n, dtype=np.int64) - 2 * centre(n) for n in matrix]
    grids = [g.reshape(-1) for g in np.meshgrid(*axes, indexing="ij")]
    if len(matrix) == 2:
        grids.append(np.zeros_like(grids[0]))
    out = np.ascontiguousarray(np.stack(grids, axis=1).astype(np.int32))
    out.flags.writeable = False
    return out


def forward_records(headers: Any, field_map: Any, values: Any) -> Any:
    """Voxel records (voxels, words) uint32 of ``FWD_OFFRES`` 1: Q_x, Q_y, Q_z (:func:`voxel_headers`), f_n
    (float32 bits), then the complex64 ``values`` (coils, voxels) of the group, zero-padded to a multiple of
    four words. NumPy or CuPy."""
    xp = get_xp(values)
    coils, n_voxels = values.shape
    records = xp.zeros((n_voxels, 4 + 4 * ((coils + 1) // 2)), dtype=xp.uint32)
    records[:, :3] = xp.asarray(headers).view(xp.uint32)
    records[:, 3] = xp.ascontiguousarray(field_map, dtype=xp.float32).view(xp.uint32)
    records[:, 4:4 + 2 * coils] = xp.ascontiguousarray(values.T, dtype=xp.complex64).view(xp.float32).view(xp.uint32)
    return records


def forward_offres_gpu(image: Any, trajectory: Any, field_map: Any, times: Any, *,
                       chunk: int | None = None, block: int | None = None) -> Any:
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

    Returns
    -------
    cupy.ndarray
        complex64 ``(C, M)``.
    """
    flat, matrix, device = forward_inputs(image, trajectory)
    n_samples = int(trajectory.shape[0])
    fmap, t = _offres_inputs(field_map, times, matrix, n_samples, device)
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
        records = forward_records(headers, fmap, flat[start:start + size])
        kernel((blocks, slices, 1), (threads, 1, 1),
               (out, kfix, t, records, np.int32(n_voxels), np.int32(n_samples), np.int32(per_slice),
                np.int32(n_coils), np.int32(start)))
    return out[0] if slices == 1 else out.sum(axis=0)
