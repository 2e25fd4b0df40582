"""F^H d, F and the Toeplitz PSF on the GPU by exact direct summation (CUDA in ``kernels/fhd.cu`` and
``kernels/forward.cu``): the production launchers.

Conventions (schema v1, :mod:`mri_recon.checks.grid`): voxel j of an axis of size N sits at ``r = (j - N // 2) / N``,
the trajectory is in cycles per field of view, ``F x = sum_n x_n exp(-i 2 pi k . r_n)`` and
``F^H d = sum_m d_m exp(+i 2 pi k_m . r)``. The launchers take CuPy arrays on the current device and return
CuPy arrays there.

F^H d keeps the trajectory in exact fixed-point turns and the samples of up to eight coils in one
constant-memory record, so one phase serves every coil of a group; one phase also serves the voxel at r and
its mirror at -r (``paired``), each thread owns several voxels along the last axis (``multi``), and their
phases come from the angle-addition recurrence on the FMA pipe (``recur``). The defaults are the fastest
configuration; the others exist for the optimization ladder of ``tests/gpu_ladder.py``
(benchmarks and tests). The kernels' header comments hold the mathematics and the record layouts; the
host-side layout lives in :mod:`mri_recon.operators.engines.gpu_layout` and the ``-D`` options in
:mod:`mri_recon.kernels.configs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...arrays.backend import Device, cupy_module
from ...checks.validation import validate_matrix
from ...errors import InvalidDataError, ResourceError, SchemaError
from ...kernels import get_module, upload_constant
from ...kernels.configs import (
    FORWARD_RUN,
    adjoint_defines,
    fhd_accumulators,
    fhd_record_words,
    forward_defines,
    psf_defines,
)
from ..arith import records as arith_records
from ..gpu.launch import (
    check_gpu_array,
    check_trajectory,
    current_device,
    empty,
    is_cupy,
    launch_size,
    on_device,
    sm_count,
)
from .gpu_layout import coil_groups, fixed_point_turns, grid_slices, line_positions, scaled_turns

DEFAULT_ROW = 64
"""Threads along the voxels of one block row (F^H d kernels); a warp never spans two rows. Rows of 64 are
faster than rows of 32 with one coil and with 8, and for the PSF: wider rows leave fewer in-block sample slices
to reduce (docs/benchmarks.md, "Exact F^H d kernels")."""
DEFAULT_BLOCK = 256
"""Threads per block of the forward kernels."""
THREADS_PER_SM = 1024
"""Threads per multiprocessor the forward launcher aims for when it splits the voxels into slices."""


def adjoint_inputs(kspace: Any, trajectory: Any, matrix: tuple[int, ...]) -> tuple[Any, tuple[int, ...], Device]:
    """Checked F^H d inputs: contiguous complex64 ``(C, M)`` data, the matrix and the current device."""
    matrix = validate_matrix(matrix)
    device = current_device()
    check_gpu_array("kspace", kspace, device, "c", 2)
    n_coils, n_samples = kspace.shape
    if n_coils < 1:
        raise InvalidDataError("kspace has no coils (C = 0)")
    check_trajectory(trajectory, matrix, n_samples, device)
    return cupy_module().ascontiguousarray(kspace, dtype=cupy_module().complex64), matrix, device


def forward_inputs(image: Any, trajectory: Any) -> tuple[Any, tuple[int, ...], Device]:
    """Checked F inputs: the image flattened to contiguous complex64 ``(C, voxels)``, its matrix, the device."""
    device = current_device()
    if is_cupy(image) and image.ndim not in (3, 4):
        raise SchemaError(f"image must be complex64 (C, Nx, Ny) or (C, Nx, Ny, Nz), found shape {image.shape}")
    check_gpu_array("image", image, device, "c", getattr(image, "ndim", 0))
    matrix = validate_matrix(image.shape[1:])
    if image.shape[0] < 1:
        raise InvalidDataError("image has no coils (C = 0)")
    check_trajectory(trajectory, matrix, None, device)
    flat = cupy_module().ascontiguousarray(image, dtype=cupy_module().complex64).reshape(image.shape[0], -1)
    return flat, matrix, device


# ----------------------------------------------------------------------------------------------------
# F^H d


def fhd_gpu(kspace: Any, trajectory: Any, matrix: tuple[int, ...], *, paired: bool = True, multi: bool = True,
            recur: bool = True, chunk: int | None = None, block: int | None = None) -> Any:
    """F^H d on the GPU by exact direct summation.

    Parameters
    ----------
    kspace
        CuPy complex64 ``(C, M)`` on the current device (complex128 is cast).
    trajectory
        CuPy float32 ``(M, D)`` in cycles per field of view (float64 is accepted).
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``.
    paired
        One phase serves a voxel and its mirror (False: every voxel on its own).
    multi
        Several voxels per thread along the last axis (:func:`mri_recon.kernels.configs.positions_per_thread`).
    recur
        Their phases by the angle-addition recurrence (needs ``multi``).
    chunk
        Samples per constant-memory chunk (at most the 64 KB capacity of the record); None: full.
    block
        Threads per block row; None: :data:`DEFAULT_ROW`.

    Returns
    -------
    cupy.ndarray
        complex64 ``(C, *matrix)``.
    """
    if recur and not multi:
        raise InvalidDataError("recur=True walks several voxels per thread: it needs multi=True")
    data, matrix, device = adjoint_inputs(kspace, trajectory, matrix)
    n_coils = data.shape[0]
    kfix = fixed_point_turns(trajectory, matrix)
    out = empty((n_coils, math.prod(matrix)), cupy_module().complex64)
    for start, size in coil_groups(n_coils):
        records = fhd_records(kfix, data[start:start + size], real=False)
        defines = adjoint_defines(len(matrix), size, multi=multi, recur=recur)
        fhd_launch(out, records, matrix, defines, paired, start, chunk, block, device)
    return out.reshape(n_coils, *matrix)


def psf_gpu(trajectory: Any, weights: Any, matrix: tuple[int, ...], *, chunk: int | None = None,
            block: int | None = None) -> Any:
    """The Toeplitz PSF on the 2x grid: ``p[j] = sum_m w_m exp(+i 2 pi k_m . (j - N)/N)``, j in [0, 2N).

    It is F^H w with trajectory 2k on matrix 2N (centre ``2N // 2 = N``); real weights make it Hermitian,
    ``p(-r) = conj(p(r))``, and the kernel evaluates one phase per mirror pair with real accumulators.

    Parameters
    ----------
    trajectory
        CuPy float32 ``(M, D)`` in cycles per field of view of ``matrix``.
    weights
        CuPy float32 ``(M,)``, or None for ones.
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``; the PSF has twice that size.
    chunk, block
        As for :func:`fhd_gpu`.

    Returns
    -------
    cupy.ndarray
        complex64 of shape ``tuple(2 * n for n in matrix)``.
    """
    matrix = validate_matrix(matrix)
    big = tuple(2 * n for n in matrix)
    if math.prod(big) > 2**31 - 1:
        raise ResourceError(f"the PSF grid {list(big)} of matrix {list(matrix)} exceeds 2^31 - 1 voxels")
    device = current_device()
    cupy = cupy_module()
    n_samples = check_trajectory(trajectory, matrix, None, device)
    kfix = scaled_turns(trajectory, big, 2.0)
    records = fhd_records(kfix, psf_weights(weights, n_samples, device)[None, :], real=True)
    out = empty((1, math.prod(big)), cupy.complex64)
    fhd_launch(out, records, big, psf_defines(len(big)), True, 0, chunk, block, device)
    return out.reshape(big)


def psf_weights(weights: Any, count: int, device: Device) -> Any:
    """Checked PSF weights: contiguous float32 ``(count,)`` on ``device`` (None: ones)."""
    cupy = cupy_module()
    if weights is None:
        return cupy.ones(count, dtype=cupy.float32)
    check_gpu_array("weights", weights, device, "f", 1)
    if weights.shape != (count,):
        raise SchemaError(f"weights must have shape ({count},), found {weights.shape}")
    return cupy.ascontiguousarray(weights, dtype=cupy.float32)


def fhd_records(kfix: Any, data: Any, *, real: bool) -> Any:
    """The constant-memory records (M, words) uint32: fixed-point trajectory, padding, samples."""
    dim, coils = kfix.shape[1], data.shape[0]
    return arith_records(kfix, cupy_module().ascontiguousarray(data), fhd_record_words(dim, coils, real))


def _pointer(array: Any) -> Any:
    """A device array as a kernel argument, or NULL for None."""
    return np.uint64(0) if array is None else array


@dataclass(frozen=True)
class _Geometry:
    """One ``fhd.cu`` launch's shape: the kernel, the line list, positions per line, blocks along the voxels,
    threads per block row and sample slices per block, and the reduction tree's shared memory."""

    kernel: Any
    lines: Any
    per_line: int
    blocks: int
    row: int
    rows: int
    shared: int


def launch_geometry(module: Any, matrix: tuple[int, ...], defines: dict[str, int], paired: bool, samples: int,
              block: int | None, device: Device) -> _Geometry:
    """The launch shape of ``fhd.cu`` for ``samples`` samples per launch (rows of a block share them)."""
    kernel = module.get_function("mri_recon_fhd")
    row = launch_size(block, DEFAULT_ROW, defines["FHD_MAX_THREADS"], "block (threads per block row)")
    rows = 1 << (max(1, min(defines["FHD_MAX_THREADS"] // row, samples // 32)).bit_length() - 1)  # 2^n slices
    lines = on_device("lines", matrix, int(paired), device.index)[0]
    per_line = -(-line_positions(matrix, paired) // defines["FHD_VOX"])
    blocks = -(-lines.shape[0] * per_line // row)
    accumulators = fhd_accumulators(defines["FHD_VOX"], defines["FHD_COILS"], defines["FHD_REAL"],
                                    defines["FHD_OFFRES"], defines["FHD_RECUR"])
    shared = 4 * (accumulators + 1) * row * (rows // 2)  # the reduction tree's slots (about 32 KB at most)
    if shared > 48 * 1024:  # beyond the default limit a kernel must opt in to more dynamic shared memory
        kernel.max_dynamic_shared_size_bytes = shared
    return _Geometry(kernel, lines, per_line, blocks, row, rows, shared)


def launch_slices(geometry: _Geometry, frames: int, samples: int, device: Device) -> int:
    """Grid rows splitting each launch's samples so that the last wave of blocks is nearly full."""
    return grid_slices(geometry.blocks * frames, geometry.row * geometry.rows,
                       int(getattr(geometry.kernel, "num_regs", 64)), sm_count(device.index),
                       max(1, min(8, samples // (64 * geometry.rows))))


def grid_dims(matrix: tuple[int, ...]) -> list[np.int32]:
    return [np.int32(n) for n in matrix] + [np.int32(1)] * (3 - len(matrix))


def fhd_launch(out: Any, records: Any, matrix: tuple[int, ...], defines: dict[str, int], paired: bool,
                coil0: int, chunk: int | None, block: int | None, device: Device, slices: int | None = None,
                field_map: Any = None, steps: Any = None) -> None:
    """Run ``fhd.cu`` over every chunk of ``records`` into the coils ``coil0 ..`` of ``out`` (C, voxels);
    ``field_map`` (int32 voxels, ``F_n``) for ``FHD_OFFRES`` 1, ``steps`` (complex64 voxels, ``r_n``) for its
    time recurrence (``FHD_RECUR`` 1 too)."""
    module = get_module("fhd.cu", defines, device)
    n_samples = records.shape[0]
    capacity = defines["FHD_CHUNK"]
    size = launch_size(chunk, capacity, capacity, "chunk (samples per constant-memory chunk)")
    geometry = launch_geometry(module, matrix, defines, paired, size, block, device)
    if slices is None:
        slices = launch_slices(geometry, 1, size, device)
    coils = defines["FHD_COILS"]
    target, first_coil = (out, coil0) if slices == 1 else (empty((slices, coils, out.shape[1]), out.dtype), 0)
    args = [target, geometry.lines, np.int32(geometry.lines.shape[0]), np.int32(geometry.per_line),
            *grid_dims(matrix)]
    tail = (np.int32(target.shape[-2]), np.int32(first_coil))
    for index, begin in enumerate(range(0, n_samples, size)):
        count = min(size, n_samples - begin)
        upload_constant(module, "c_k", records[begin:begin + count])
        geometry.kernel((geometry.blocks, slices, 1), (geometry.row, geometry.rows, 1),
                        (*args, np.int32(count), *tail, np.int32(index == 0), _pointer(field_map), _pointer(steps)),
                        shared_mem=geometry.shared)
    if slices > 1:
        out[coil0:coil0 + coils] = target.sum(axis=0)


# ----------------------------------------------------------------------------------------------------
# F x


def forward_gpu(image: Any, trajectory: Any, *, recur: bool = True, chunk: int | None = None,
                block: int | None = None) -> Any:
    """F x on the GPU by exact direct summation, one thread per sample.

    Parameters
    ----------
    image
        CuPy complex64 ``(C, *matrix)`` on the current device (complex128 is cast).
    trajectory
        CuPy float32 ``(M, D)`` in cycles per field of view, D = ``image.ndim - 1``.
    recur
        Runs of :data:`~mri_recon.kernels.configs.FORWARD_RUN` positions whose phases follow the angle-addition
        recurrence (False: one exact phase per position, runs of 1).
    chunk
        Voxel positions per slice (each slice is one grid row whose partial sums are added at the end);
        None: slices sized to fill the GPU.
    block
        Threads per block (at most 256).

    Returns
    -------
    cupy.ndarray
        complex64 ``(C, M)``.
    """
    flat, matrix, device = forward_inputs(image, trajectory)
    cupy = cupy_module()
    n_coils = flat.shape[0]
    n_samples = int(trajectory.shape[0])
    threads = launch_size(block, DEFAULT_BLOCK, 256, "block (threads per block)")
    run = FORWARD_RUN if recur else 1
    headers, own, mirror = on_device("runs", matrix, run, device.index)
    n_runs = headers.shape[0]
    kfix = fixed_point_turns(trajectory, matrix)
    blocks = -(-n_samples // threads)
    if chunk is None:
        slices = max(1, min(-(-sm_count(device.index) * THREADS_PER_SM // (blocks * threads)), n_runs))
        per_slice = -(-n_runs // slices)
    else:
        per_slice = -(-launch_size(chunk, 1, 2**31 - 1, "chunk (voxel positions per slice)") // run)
    per_slice = max(per_slice, -(-n_runs // 65535))
    slices = -(-n_runs // per_slice)
    padded = cupy.concatenate([flat, cupy.zeros((n_coils, 1), cupy.complex64)], axis=1)
    out = empty((slices, n_coils, n_samples), cupy.complex64)
    for start, size in coil_groups(n_coils):
        defines = forward_defines(len(matrix), size, run)
        kernel = get_module("forward.cu", defines, device).get_function("mri_recon_forward")
        group = padded[start:start + size]
        xa, xm = group[:, own], group[:, mirror]  # (size, n_runs, run)
        body = cupy.stack([(xa + xm).real, (xa + xm).imag, (xa - xm).real, (xa - xm).imag], axis=-1)
        body = cupy.ascontiguousarray(body.transpose(1, 2, 0, 3)).reshape(n_runs, -1)
        records = cupy.ascontiguousarray(cupy.concatenate([headers.view(cupy.uint32),
                                                           body.view(cupy.uint32)], axis=1))
        kernel((blocks, slices, 1), (threads, 1, 1),
               (out, kfix, records, np.int32(n_runs), np.int32(n_samples), np.int32(per_slice),
                np.int32(n_coils), np.int32(start)))
    return out[0] if slices == 1 else out.sum(axis=0)
