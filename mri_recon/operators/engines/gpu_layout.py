"""Host-side layout of the exact GPU transforms: fixed-point trajectories, the line list of F^H d, the runs
of F, coil groups and grid slices. Pure NumPy (or the trajectory's array module); no GPU needed.

Grid (:mod:`mri_recon.checks.grid`): voxel j of an axis of size N sits at ``r = Q / (2N)`` with ``Q = 2j - 2c``,
``c = N // 2``; its mirror (the voxel at ``-r``) is ``2c - j``, which exists for every voxel of an odd axis
and for all but voxel 0 of an even axis.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ...arrays.backend import cupy_module
from ...checks.grid import centre
from ...kernels.configs import MAX_GROUP
from ..arith import turns

WAVE_EFFICIENCY = 0.9
"""Smallest acceptable fill of the last wave of blocks before F^H d splits chunks into grid slices."""


def fixed_point_turns(trajectory: Any, matrix: tuple[int, ...]) -> Any:
    """``K_d = round(2^32 frac(k_d / (2 N_d)))`` as uint32 ``(M, D)``, on the trajectory's device.

    With ``Q_d = 2 j_d - 2 (N_d // 2)``, ``sum_d K_d Q_d mod 2^32`` is the phase ``k . r_j`` in units of
    2^-32 turns.
    """
    return scaled_turns(trajectory, matrix, 1.0)


def scaled_turns(trajectory: Any, matrix: tuple[int, ...], mult: float) -> Any:
    """:func:`fixed_point_turns` of ``mult`` times the trajectory (the product in float64); on a GPU by
    ``kernels/arith.cu`` with the same float64 operations, so the same bits."""
    cupy = cupy_module()
    scales = [2.0 * n for n in matrix]
    if cupy is not None and isinstance(trajectory, cupy.ndarray) and trajectory.dtype == np.float32:
        return turns(trajectory, scales, mult)
    xp = cupy if cupy is not None and isinstance(trajectory, cupy.ndarray) else np
    u = trajectory.astype(xp.float64) * mult / xp.asarray(scales, dtype=xp.float64)
    u -= xp.floor(u)
    k = xp.rint(u * 4294967296.0).astype(xp.uint64) & xp.uint64(0xFFFFFFFF)
    return xp.ascontiguousarray(k.astype(xp.uint32))


def _twice_centres(matrix: tuple[int, ...]) -> list[int]:
    return [2 * centre(n) for n in matrix]


@functools.lru_cache(maxsize=16)
def line_list(matrix: tuple[int, ...], paired: bool) -> np.ndarray:
    """Lines of the last axis that the F^H d threads walk: int32 ``(n, 3)`` = ``jx, jy, paired flag``.

    ``paired=False`` lists every line with flag 0. ``paired=True`` lists one line per mirror pair (the
    lexicographically smaller, flag 1: its partner is ``(2 cx - jx, 2 cy - jy)``) and every line without a
    partner (index 0 of an even leading axis) or that is its own mirror (the centre of odd axes), flag 0.
    """
    c2 = _twice_centres(matrix)
    if len(matrix) == 2:
        jx = np.arange(matrix[0])
        jy = np.zeros_like(jx)
        key, partner, has = jx, c2[0] - jx, c2[0] - jx < matrix[0]
    else:
        jx, jy = (g.reshape(-1) for g in np.meshgrid(np.arange(matrix[0]), np.arange(matrix[1]), indexing="ij"))
        key = jx * matrix[1] + jy
        partner = (c2[0] - jx) * matrix[1] + (c2[1] - jy)
        has = (c2[0] - jx < matrix[0]) & (c2[1] - jy < matrix[1])
    if paired:
        keep = ~has | (key <= partner)
        flag = has & (key < partner)
    else:
        keep = np.ones(jx.shape, dtype=bool)
        flag = np.zeros(jx.shape, dtype=bool)
    lines = np.ascontiguousarray(np.stack([jx[keep], jy[keep], flag[keep]], axis=1).astype(np.int32))
    lines.flags.writeable = False
    return lines


def line_positions(matrix: tuple[int, ...], paired: bool) -> int:
    """Positions per line: ``2c + 1`` with mirror pairs (``L + 1`` for even L, where position L reaches the
    partner's voxel 0; ``L`` for odd L), else ``L``."""
    return 2 * centre(matrix[-1]) + 1 if paired else matrix[-1]


def position_voxels(matrix: tuple[int, ...], lines: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, ...]:
    """C-order flat indices of the own and mirror voxels of ``positions`` (row vector) on each of ``lines``
    (``(n, 3)`` of :func:`line_list`), ``prod(matrix)`` where the voxel does not exist."""
    size, nvox = matrix[-1], math.prod(matrix)
    c2 = _twice_centres(matrix)
    jx, jy, flag = (lines[:, i:i + 1].astype(np.int64) for i in range(3))
    if len(matrix) == 2:
        line_a, line_b = jx * size, (c2[0] - jx) * size
    else:
        line_a = (jx * matrix[1] + jy) * size
        line_b = ((c2[0] - jx) * matrix[1] + (c2[1] - jy)) * size
    p = np.asarray(positions, dtype=np.int64).reshape(1, -1)
    own = np.where(p < size, line_a + p, nvox)
    mirror = np.where((flag == 1) & (p <= c2[-1]) & (c2[-1] - p < size), line_b + c2[-1] - p, nvox)
    return own, mirror


@functools.lru_cache(maxsize=8)
def forward_runs(matrix: tuple[int, ...], run: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs of the forward kernel: headers int32 ``(n, 4)`` and voxel indices ``(n, run)`` of the
    position's own voxel and of its mirror (int32 C-order flat indices, ``prod(matrix)`` where absent)."""
    lines = line_list(matrix, True)
    c2 = _twice_centres(matrix)
    per_line = -(-line_positions(matrix, True) // run) * run
    p = np.arange(per_line, dtype=np.int64)[None, :]
    own, mirror = position_voxels(matrix, lines, p)
    jx, jy = (lines[:, i:i + 1].astype(np.int64) for i in range(2))
    shape = (lines.shape[0], per_line // run)
    qx = np.broadcast_to(2 * jx - c2[0], shape)
    qlast = np.broadcast_to(2 * p[:, ::run] - c2[-1], shape)
    zero = np.zeros(shape, dtype=np.int64)
    if len(matrix) == 2:
        columns = [qx, qlast, zero, zero]
    else:
        columns = [qx, np.broadcast_to(2 * jy - c2[1], shape), qlast, zero]
    arrays = (np.stack([c.reshape(-1) for c in columns], axis=1), own.reshape(-1, run), mirror.reshape(-1, run))
    out = tuple(np.ascontiguousarray(a, dtype=np.int32) for a in arrays)
    for a in out:
        a.flags.writeable = False
    return out


def coil_groups(n_coils: int) -> list[tuple[int, int]]:
    """``(first coil, coils)`` of each launch: at most :data:`MAX_GROUP` coils, sizes as even as possible."""
    count = -(-int(n_coils) // MAX_GROUP)
    base, extra = divmod(int(n_coils), count)
    groups, start = [], 0
    for g in range(count):
        size = base + (1 if g < extra else 0)
        groups.append((start, size))
        start += size
    return groups


def grid_slices(blocks: int, block_threads: int, registers: int, sms: int, limit: int) -> int:
    """Grid rows that split each chunk of F^H d so that the last wave of blocks is nearly full.

    Each multiprocessor holds ``min(32, 2048 // threads, 65536 // (registers * threads))`` blocks at once
    (registers rounded up to 8); the fill of the last wave is ``g / (ceil(g / slots) * slots)`` for ``g``
    blocks. Returns the smallest count in ``1 .. limit`` whose fill reaches :data:`WAVE_EFFICIENCY`, else
    the count with the best fill.
    """
    per_thread = -(-max(int(registers), 1) // 8) * 8
    resident = max(1, min(32, 2048 // block_threads, 65536 // (per_thread * block_threads)))
    slots = max(1, int(sms)) * resident
    best, best_fill = 1, 0.0
    for count in range(1, max(1, int(limit)) + 1):
        total = blocks * count
        fill = total / (-(-total // slots) * slots)
        if fill >= WAVE_EFFICIENCY:
            return count
        if fill > best_fill:
            best, best_fill = count, fill
    return best
