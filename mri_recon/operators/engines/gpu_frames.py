"""F^H d and the Toeplitz PSF of every frame of a time series in one launch on the GPU (``kernels/fhd.cu`` with
``FHD_FRAMES`` 1): each frame a ``blockIdx.z``, its records read from global memory rather than streamed through
``__constant__`` chunks, so that a series of T frames costs one launch per coil group instead of one per chunk
and frame. The sums are those of :mod:`.gpu_exact` frame by frame (the same records, phases and work
assignment); the engine's :meth:`~.gpu.GpuExactEncoding.adjoint_frames` and ``spectra_frames`` call these.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...arrays.backend import Device, cupy_module
from ...checks.validation import validate_matrix
from ...errors import InvalidDataError, ResourceError
from ...kernels import get_module
from ...kernels.configs import adjoint_defines, frames_defines, psf_defines
from ..gpu.launch import check_trajectory, current_device, empty
from .gpu_exact import adjoint_inputs, fhd_records, grid_dims, launch_geometry, launch_slices, psf_weights
from .gpu_layout import coil_groups, fixed_point_turns, scaled_turns

MAX_FRAMES = 65535
"""Frames of one ``FHD_FRAMES`` launch at most (``gridDim.z``)."""


def fhd_frames_gpu(kspaces: list[Any], trajectories: list[Any], matrix: tuple[int, ...],
                   block: int | None = None) -> Any:
    """F^H d of every frame of a time series in one launch per coil group: frame ``t``'s ``kspaces[t]``
    (complex64 ``(C, M_t)``, the same C for all) at ``trajectories[t]`` (float32 ``(M_t, D)``). The same sums
    as :func:`~.gpu_exact.fhd_gpu` frame by frame (mirror pairs, the recurrence), the records read from global memory
    (``fhd.cu`` ``FHD_FRAMES`` 1). Returns complex64 ``(T, C, *matrix)``."""
    cupy = cupy_module()
    checked = [adjoint_inputs(d, k, matrix) for d, k in zip(kspaces, trajectories, strict=True)]
    if not checked:
        raise InvalidDataError("a time series needs at least one frame")
    matrix, device = checked[0][1], checked[0][2]
    n_coils = checked[0][0].shape[0]
    if any(data.shape[0] != n_coils for data, _, _ in checked):
        raise InvalidDataError("every frame of a time series needs the same number of coils")
    kfix = fixed_point_turns(cupy.concatenate(trajectories), matrix)
    counts = [data.shape[1] for data, _, _ in checked]
    data = cupy.concatenate([data for data, _, _ in checked], axis=1)
    out = empty((len(checked), n_coils, math.prod(matrix)), cupy.complex64)
    for first, size in coil_groups(n_coils):
        records = fhd_records(kfix, data[first:first + size], real=False)
        defines = frames_defines(adjoint_defines(len(matrix), size, multi=True, recur=True))
        fhd_frames_launch(out, records, counts, matrix, defines, first, block, device)
    return out.reshape(len(checked), n_coils, *matrix)


def psf_frames_gpu(trajectories: list[Any], weights: list[Any], matrix: tuple[int, ...],
                   block: int | None = None) -> Any:
    """The Toeplitz PSF (:func:`~.gpu_exact.psf_gpu`) of every frame of a time series in one launch: frame ``t``'s
    ``trajectories[t]`` (float32 ``(M_t, D)``) with ``weights[t]`` (float32 ``(M_t,)``, or None for ones).
    Returns complex64 ``(T, *2 matrix)``."""
    cupy = cupy_module()
    matrix = validate_matrix(matrix)
    big = tuple(2 * n for n in matrix)
    if math.prod(big) > 2**31 - 1:
        raise ResourceError(f"the PSF grid {list(big)} of matrix {list(matrix)} exceeds 2^31 - 1 voxels")
    device = current_device()
    counts = [check_trajectory(k, matrix, None, device) for k in trajectories]
    if not counts:
        raise InvalidDataError("a time series needs at least one frame")
    parts = [psf_weights(w, count, device) for w, count in zip(weights, counts, strict=True)]
    kfix = scaled_turns(cupy.concatenate(trajectories), big, 2.0)
    records = fhd_records(kfix, cupy.concatenate(parts)[None, :], real=True)
    out = empty((len(counts), 1, math.prod(big)), cupy.complex64)
    fhd_frames_launch(out, records, counts, big, frames_defines(psf_defines(len(big))), 0, block, device)
    return out.reshape(len(counts), *big)


def _frame_start(counts: list[int]) -> Any:
    """int32 ``(T + 1,)`` on the current device: where each frame's records begin, then their total."""
    total = sum(counts)
    if total > 2**31 - 1:
        raise ResourceError(f"a time series of {total} samples exceeds the 2^31 - 1 the frames' offsets take")
    return cupy_module().asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))


def fhd_frames_launch(out: Any, records: Any, counts: list[int], matrix: tuple[int, ...], defines: dict[str, int],
                      coil0: int, block: int | None, device: Device) -> None:
    """Run ``fhd.cu`` with ``FHD_FRAMES`` 1 (``defines`` have it): frame ``t``'s ``counts[t]`` records, which
    follow the earlier frames' in ``records``, into the coils ``coil0 ..`` of ``out[t]`` (T, C, voxels), every
    frame and sample in one launch (mirror pairs)."""
    if not 1 <= len(counts) <= MAX_FRAMES:
        raise ValueError(f"one launch takes 1 to {MAX_FRAMES} frames, found {len(counts)}")
    module = get_module("fhd.cu", defines, device)
    frames, longest = len(counts), max(counts)
    frame_start = _frame_start(counts)
    geometry = launch_geometry(module, matrix, defines, True, max(longest, 1), block, device)
    slices = launch_slices(geometry, frames, longest, device)
    coils = defines["FHD_COILS"]
    target, first_coil = ((out, coil0) if slices == 1
                          else (empty((frames, slices, coils, out.shape[-1]), out.dtype), 0))
    null = np.uint64(0)  # no field map, no steps
    geometry.kernel((geometry.blocks, slices, frames), (geometry.row, geometry.rows, 1),
                    (target, geometry.lines, np.int32(geometry.lines.shape[0]), np.int32(geometry.per_line),
                     *grid_dims(matrix), np.int32(0), np.int32(target.shape[-2]), np.int32(first_coil), np.int32(1),
                     null, null, records, frame_start), shared_mem=geometry.shared)
    if slices > 1:
        out[:, coil0:coil0 + coils] = target.sum(axis=1)
