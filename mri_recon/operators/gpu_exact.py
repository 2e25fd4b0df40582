"""F^H d, F and the Toeplitz PSF on the GPU by exact direct summation (CUDA in ``kernels/fhd*.cu``,
``kernels/forward.cu``).

Conventions (schema v1): voxel j of an axis of size N sits at ``r = (j - N/2) / N``, the trajectory is in
cycles per field of view, ``F x = sum_n x_n exp(-i 2 pi k . r_n)`` and ``F^H d = sum_m d_m exp(+i 2 pi k_m . r)``.
The launchers take CuPy arrays on the current device and return CuPy arrays there.

F^H d climbs the optimization ladder of the FHD kernel (``variant=``, see :data:`VARIANTS`): the seed's four
rungs (global memory, registers, constant-memory chunks, array-of-structures chunks; one coil per launch)
and four more: ``packed`` (trajectory in exact fixed-point turns and the samples of up to eight coils in one
constant-memory record, so one phase serves every coil of the group), ``mirror`` (one phase serves the voxel
at r and its mirror at -r), ``multi`` (several voxels per thread along the last axis) and ``recur`` (their
phases by the angle-addition recurrence on the FMA pipe instead of the special function unit). The
kernels' header comments hold the mathematics and the record layouts.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..backend import Device, cupy_module, gpu_available
from ..errors import DeviceError, InvalidDataError, ResourceError, SchemaError
from ..kernels import CONSTANT_BYTES, get_module, upload_constant
from ..validation import validate_matrix

VARIANTS = ("naive", "registers", "constant", "aos", "packed", "mirror", "multi", "recur")
"""The rungs of the F^H d ladder, slowest first; ``"best"`` names :data:`BEST`."""
BEST = "recur"
"""The rung ``variant="best"`` runs: the fastest one that meets the accuracy requirement."""
FORWARD_VARIANTS = ("naive", "tiled", "recur")
"""Forward kernels: global memory; shared-memory tiles of mirror pairs; tiles plus the recurrence."""
FORWARD_BEST = "recur"

MAX_GROUP = 8
"""Coils per launch (one phase evaluation serves all of them); more coils are split into groups."""
DEFAULT_ROW = 64
"""Threads along the voxels of one block row (fast F^H d kernels); a warp never spans two rows. Measured
on an H200 (docs/benchmarks.md): rows of 64 beat rows of 32 by 23% with 8 coils, 16% with one coil and 4%
for the PSF (fewer in-block sample slices to reduce)."""
DEFAULT_BLOCK = 256
"""Threads per block of the seed rungs and of the forward kernels."""
FORWARD_RUN = 8
"""Positions per run of the forward ``recur`` kernel (recurrence steps between exact phases + 1)."""
FORWARD_TILE_WORDS = 8192
"""32-bit words of one shared-memory tile of the forward kernel (32 KB)."""
THREADS_PER_SM = 1024
"""Threads per multiprocessor the forward launcher aims for when it splits the voxels into slices."""
WAVE_EFFICIENCY = 0.9
"""Smallest acceptable fill of the last wave of blocks before F^H d splits chunks into grid slices."""

_SEED_RUNG = {"naive": 0, "registers": 1, "constant": 2, "aos": 3}
_SEED_KERNEL = ("mri_recon_fhd_naive", "mri_recon_fhd_registers", "mri_recon_fhd_constant",
                "mri_recon_fhd_aos")
_VOX = {1: 8, 2: 4}  # positions per thread of "multi" and "recur" by coils per launch; 2 beyond (measured on
# an H200, docs/benchmarks.md: 1 coil 8 beats 4 in 3D and ties in 2D; 8 coils 2 beats 4 and 8)
PSF_VOX = 8  # positions per thread of the real-weight PSF kernel (measured: 8 is 2.7x faster than 4)


def _empty(shape: tuple[int, ...], dtype: Any) -> Any:
    """Uninitialized device buffer; every buffer the kernels fill comes from here (tests poison it)."""
    return cupy_module().empty(shape, dtype)


# ----------------------------------------------------------------------------------------------------
# Kernel configurations


def positions_per_thread(coils: int) -> int:
    """Positions (voxels, or mirror pairs) per thread of the ``multi`` and ``recur`` rungs."""
    return _VOX.get(int(coils), 2)


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


def fhd_record_words(dim: int, coils: int, real: bool = False) -> int:
    """32-bit words of one constant-memory record of ``fhd.cu`` (trajectory, padding, sample data)."""
    header = dim if real else dim + dim % 2  # complex data is float2-aligned
    return header + coils * (1 if real else 2)


def fhd_defines(dim: int, coils: int, vox: int, recur: bool, real: bool = False) -> dict[str, int]:
    """The ``-D`` options of ``fhd.cu`` for one launch configuration."""
    words = fhd_record_words(dim, coils, real)
    accumulators = vox * coils * (2 if real else 4)
    return {"FHD_DIM": dim, "FHD_COILS": coils, "FHD_VOX": vox, "FHD_RECUR": int(recur),
            "FHD_REAL": int(real), "FHD_OFFRES": 0, "FHD_WORDS": words,
            "FHD_CHUNK": CONSTANT_BYTES // (4 * words), "FHD_MAX_THREADS": 512 if accumulators <= 32 else 256}


def seed_defines(dim: int, rung: int) -> dict[str, int]:
    """The ``-D`` options of ``fhd_seed.cu`` for one rung (0 naive .. 3 aos)."""
    defines = {"FHD_DIM": dim, "FHD_RUNG": rung}
    if rung >= 2:
        defines["FHD_CHUNK"] = CONSTANT_BYTES // (4 * dim)
    return defines


def forward_defines(dim: int, coils: int | None, run: int | None) -> dict[str, int]:
    """The ``-D`` options of ``forward.cu``: ``coils=None`` selects the naive kernel."""
    if coils is None:
        return {"FWD_DIM": dim, "FWD_NAIVE": 1}
    words = 4 + 4 * run * coils
    return {"FWD_DIM": dim, "FWD_NAIVE": 0, "FWD_COILS": coils, "FWD_RUN": run,
            "FWD_TILE_RUNS": max(1, FORWARD_TILE_WORDS // words)}


def compile_configurations() -> list[tuple[str, dict[str, int]]]:
    """Every ``(filename, defines)`` the launchers can build, for the compile test and ``doctor``."""
    configs: list[tuple[str, dict[str, int]]] = []
    for dim in (2, 3):
        configs += [("fhd_seed.cu", seed_defines(dim, rung)) for rung in range(4)]
        for coils in range(1, MAX_GROUP + 1):
            vox = positions_per_thread(coils)
            configs += [("fhd.cu", fhd_defines(dim, coils, 1, False)),
                        ("fhd.cu", fhd_defines(dim, coils, vox, False)),
                        ("fhd.cu", fhd_defines(dim, coils, vox, True))]
        configs.append(("fhd.cu", fhd_defines(dim, 1, PSF_VOX, True, real=True)))
        configs.append(("forward.cu", forward_defines(dim, None, None)))
        for coils in range(1, MAX_GROUP + 1):
            configs += [("forward.cu", forward_defines(dim, coils, 1)),
                        ("forward.cu", forward_defines(dim, coils, FORWARD_RUN))]
    return configs


# ----------------------------------------------------------------------------------------------------
# Host-side structures (NumPy, or the array module of the input)


def fixed_point_turns(trajectory: Any, matrix: tuple[int, ...]) -> Any:
    """``K_d = round(2^32 frac(k_d / (2 N_d)))`` as uint32 ``(M, D)``, on the trajectory's device.

    With ``Q_d = 2 j_d - N_d``, ``sum_d K_d Q_d mod 2^32`` is the phase ``k . r_j`` in units of 2^-32 turns.
    """
    xp = cupy_module() if _is_cupy(trajectory) else np
    scale = xp.asarray([2.0 * n for n in matrix], dtype=xp.float64)
    u = trajectory.astype(xp.float64) / scale
    u -= xp.floor(u)
    k = xp.rint(u * 4294967296.0).astype(xp.uint64) & xp.uint64(0xFFFFFFFF)
    return xp.ascontiguousarray(k.astype(xp.uint32))


@functools.lru_cache(maxsize=16)
def line_list(matrix: tuple[int, ...], paired: bool) -> np.ndarray:
    """Lines of the last axis that the F^H d threads walk: int32 ``(n, 3)`` = ``jx, jy, paired flag``.

    ``paired=False`` lists every line with flag 0. ``paired=True`` lists one line per mirror pair (the
    lexicographically smaller, flag 1: its partner is ``(Nx - jx, Ny - jy)``) and every line without a
    partner (an index 0 on a leading axis, or the line that is its own mirror), flag 0.
    """
    if len(matrix) == 2:
        jx = np.arange(matrix[0])
        jy = np.zeros_like(jx)
        key, partner, has = jx, matrix[0] - jx, jx >= 1
    else:
        jx, jy = (g.reshape(-1) for g in np.meshgrid(np.arange(matrix[0]), np.arange(matrix[1]), indexing="ij"))
        key = jx * matrix[1] + jy
        partner = (matrix[0] - jx) * matrix[1] + (matrix[1] - jy)
        has = (jx >= 1) & (jy >= 1)
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
    """Positions per line: ``L + 1`` with mirror pairs (position L reaches the partner's voxel 0), else L."""
    return matrix[-1] + 1 if paired else matrix[-1]


@functools.lru_cache(maxsize=8)
def forward_runs(matrix: tuple[int, ...], run: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs of the forward kernel: headers int32 ``(n, 4)`` and voxel indices ``(n, run)`` of the
    position's own voxel and of its mirror (int32 C-order flat indices, ``prod(matrix)`` where absent)."""
    lines = line_list(matrix, True)
    size = matrix[-1]
    nvox = math.prod(matrix)
    per_line = -(-line_positions(matrix, True) // run) * run
    p = np.arange(per_line, dtype=np.int64)[None, :]
    jx, jy, flag = (lines[:, i:i + 1].astype(np.int64) for i in range(3))
    if len(matrix) == 2:
        line_a, line_b = jx * size, (matrix[0] - jx) * size
    else:
        line_a = (jx * matrix[1] + jy) * size
        line_b = ((matrix[0] - jx) * matrix[1] + (matrix[1] - jy)) * size
    own = np.where(p < size, line_a + p, nvox)
    mirror = np.where((flag == 1) & (p >= 1) & (p <= size), line_b + size - p, nvox)
    shape = (lines.shape[0], per_line // run)
    qx = np.broadcast_to(2 * jx - matrix[0], shape)
    qlast = np.broadcast_to(2 * p[:, ::run] - size, shape)
    zero = np.zeros(shape, dtype=np.int64)
    if len(matrix) == 2:
        columns = [qx, qlast, zero, zero]
    else:
        columns = [qx, np.broadcast_to(2 * jy - matrix[1], shape), qlast, zero]
    arrays = (np.stack([c.reshape(-1) for c in columns], axis=1), own.reshape(-1, run), mirror.reshape(-1, run))
    out = tuple(np.ascontiguousarray(a, dtype=np.int32) for a in arrays)
    for a in out:
        a.flags.writeable = False
    return out


def voxel_axes(matrix: tuple[int, ...]) -> list[np.ndarray]:
    """float32 voxel coordinates ``r = (j - N/2) / N`` per axis, each of length ``prod(matrix)`` (C order)."""
    axes = [(np.arange(n, dtype=np.float64) - n / 2) / n for n in matrix]
    return [np.ascontiguousarray(g.reshape(-1), dtype=np.float32)
            for g in np.meshgrid(*axes, indexing="ij")]


# ----------------------------------------------------------------------------------------------------
# Device helpers


def _is_cupy(array: Any) -> bool:
    cupy = cupy_module()
    return cupy is not None and isinstance(array, cupy.ndarray)


def _device() -> Device:
    """The current CUDA device; DeviceError without CuPy or a GPU."""
    if cupy_module() is None or not gpu_available():
        raise DeviceError("the GPU kernels need CuPy and an NVIDIA GPU (use the CPU path: device='cpu')")
    return Device(int(cupy_module().cuda.Device().id))


@functools.cache
def _sm_count(index: int) -> int:
    return int(cupy_module().cuda.Device(index).attributes["MultiProcessorCount"])


@functools.lru_cache(maxsize=32)
def _on_device(kind: str, matrix: tuple[int, ...], extra: int, index: int) -> tuple[Any, ...]:
    """Device copies of the host structures, memoized per device."""
    cupy = cupy_module()
    with cupy.cuda.Device(index):
        if kind == "lines":
            return (cupy.asarray(line_list(matrix, bool(extra))),)
        if kind == "axes":
            return tuple(cupy.asarray(a) for a in voxel_axes(matrix))
        return tuple(cupy.asarray(a) for a in forward_runs(matrix, extra))


def _gpu_array(name: str, array: Any, device: Device, kinds: str, ndim: int) -> None:
    if not _is_cupy(array):
        raise DeviceError(f"{name} must be a CuPy array on the GPU, found {type(array).__name__}")
    if int(array.device.id) != device.index:
        raise DeviceError(f"{name} lives on gpu:{array.device.id} but the current device is gpu:{device.index}")
    if array.dtype.kind not in kinds or array.ndim != ndim:
        want = {"c": "complex64", "f": "float32"}[kinds[0]]
        raise SchemaError(f"{name} must be {want} with {ndim} dimensions, found {array.dtype} {array.shape}")


def _check_trajectory(trajectory: Any, matrix: tuple[int, ...], n_samples: int | None, device: Device) -> int:
    """Check a device trajectory ``(M, D)`` (M = ``n_samples`` when given) and return M."""
    _gpu_array("trajectory", trajectory, device, "f", 2)
    if n_samples is None:
        n_samples = int(trajectory.shape[0])
    if trajectory.shape != (n_samples, len(matrix)):
        raise SchemaError(f"trajectory must have shape ({n_samples}, {len(matrix)}) for {n_samples} samples and "
                          f"matrix {list(matrix)}, found {trajectory.shape}")
    if n_samples < 1:
        raise InvalidDataError("there are no samples (M = 0)")
    return n_samples


def _launch_size(value: int | None, default: int, limit: int, what: str) -> int:
    if value is None:
        return min(default, limit)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= int(value) <= limit:
        raise InvalidDataError(f"{what} must be an integer in [1, {limit}], found {value!r}")
    return int(value)


def _variant(variant: str, names: tuple[str, ...], best: str, what: str) -> str:
    name = best if variant == "best" else variant
    if name not in names:
        raise InvalidDataError(f"unknown {what} variant {variant!r}: expected 'best' or one of {', '.join(names)}")
    return name


# ----------------------------------------------------------------------------------------------------
# F^H d


def fhd_gpu(kspace: Any, trajectory: Any, matrix: tuple[int, ...], *, variant: str = "best",
            chunk: int | None = None, block: int | None = None) -> Any:
    """F^H d on the GPU by exact direct summation.

    Parameters
    ----------
    kspace
        CuPy complex64 ``(C, M)`` on the current device (complex128 is cast).
    trajectory
        CuPy float32 ``(M, D)`` in cycles per field of view (float64 is accepted).
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``.
    variant
        A rung of :data:`VARIANTS`, or ``"best"``.
    chunk
        Samples per constant-memory chunk (at most the 64 KB capacity of the rung's record); None: full.
    block
        Threads per block (seed rungs) or per block row (the other rungs); None: a default.

    Returns
    -------
    cupy.ndarray
        complex64 ``(C, *matrix)``.
    """
    name = _variant(variant, VARIANTS, BEST, "F^H d")
    matrix = validate_matrix(matrix)
    device = _device()
    cupy = cupy_module()
    _gpu_array("kspace", kspace, device, "c", 2)
    n_coils, n_samples = kspace.shape
    if n_coils < 1:
        raise InvalidDataError("kspace has no coils (C = 0)")
    _check_trajectory(trajectory, matrix, n_samples, device)
    data = cupy.ascontiguousarray(kspace, dtype=cupy.complex64)
    if name in _SEED_RUNG:
        return _fhd_seed(data, trajectory, matrix, _SEED_RUNG[name], chunk, block, device)
    kfix = fixed_point_turns(trajectory, matrix)
    paired = name != "packed"
    recur = name == "recur"
    multi = name in ("multi", "recur")
    out = _empty((n_coils, math.prod(matrix)), cupy.complex64)
    for start, size in coil_groups(n_coils):
        records = _records(kfix, data[start:start + size], real=False)
        vox = positions_per_thread(size) if multi else 1
        _fhd_fast(out, records, matrix, fhd_defines(len(matrix), size, vox, recur), paired, start, chunk, block,
                  device)
    return out.reshape(n_coils, *matrix)


def psf_gpu(trajectory: Any, weights: Any, matrix: tuple[int, ...], *, chunk: int | None = None,
            block: int | None = None) -> Any:
    """The Toeplitz PSF on the 2x grid: ``p[j] = sum_m w_m exp(+i 2 pi k_m . (j - N)/N)``, j in [0, 2N).

    It is F^H w with trajectory 2k on matrix 2N; real weights make it Hermitian, ``p(-r) = conj(p(r))``,
    and the kernel evaluates one phase per mirror pair with real accumulators.

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
    device = _device()
    cupy = cupy_module()
    n_samples = _check_trajectory(trajectory, matrix, None, device)
    if weights is None:
        weights = cupy.ones(n_samples, dtype=cupy.float32)
    _gpu_array("weights", weights, device, "f", 1)
    if weights.shape != (n_samples,):
        raise SchemaError(f"weights must have shape ({n_samples},), found {weights.shape}")
    kfix = fixed_point_turns(trajectory.astype(cupy.float64) * 2.0, big)
    records = _records(kfix, weights.astype(cupy.float32)[None, :], real=True)
    out = _empty((1, math.prod(big)), cupy.complex64)
    defines = fhd_defines(len(big), 1, PSF_VOX, True, real=True)
    _fhd_fast(out, records, big, defines, True, 0, chunk, block, device)
    return out.reshape(big)


def _records(kfix: Any, data: Any, *, real: bool) -> Any:
    """The constant-memory records (M, words) uint32: fixed-point trajectory, padding, samples."""
    cupy = cupy_module()
    n_samples, dim = kfix.shape
    coils = data.shape[0]
    words = fhd_record_words(dim, coils, real)
    records = cupy.zeros((n_samples, words), dtype=cupy.uint32)
    records[:, :dim] = kfix
    values = cupy.ascontiguousarray(data.T)
    records[:, words - coils * (1 if real else 2):] = values.view(cupy.float32).view(cupy.uint32)
    return records


def _fhd_fast(out: Any, records: Any, matrix: tuple[int, ...], defines: dict[str, int], paired: bool,
              coil0: int, chunk: int | None, block: int | None, device: Device, slices: int | None = None) -> None:
    """Run ``fhd.cu`` over every chunk of ``records`` into the coils ``coil0 ..`` of ``out`` (C, voxels)."""
    module = get_module("fhd.cu", defines, device)
    kernel = module.get_function("mri_recon_fhd")
    n_samples = records.shape[0]
    capacity, limit = defines["FHD_CHUNK"], defines["FHD_MAX_THREADS"]
    size = _launch_size(chunk, capacity, capacity, "chunk (samples per constant-memory chunk)")
    row = _launch_size(block, DEFAULT_ROW, limit, "block (threads per block row)")
    rows = 1 << (max(1, min(limit // row, size // 32)).bit_length() - 1)  # in-block sample slices, 2^n
    lines = _on_device("lines", matrix, int(paired), device.index)[0]
    per_line = -(-line_positions(matrix, paired) // defines["FHD_VOX"])
    blocks = -(-lines.shape[0] * per_line // row)
    if slices is None:
        slices = grid_slices(blocks, row * rows, int(getattr(kernel, "num_regs", 64)), _sm_count(device.index),
                             max(1, min(8, size // (64 * rows))))
    coils = defines["FHD_COILS"]
    target, first_coil = (out, coil0) if slices == 1 else (_empty((slices, coils, out.shape[1]), out.dtype), 0)
    accumulators = defines["FHD_VOX"] * coils * (2 if defines["FHD_REAL"] else 4)
    shared = 4 * (accumulators + 1) * row * (rows // 2)  # the reduction tree's slots (about 32 KB at most)
    dims = [int(n) for n in matrix] + [1] * (3 - len(matrix))
    args = [target, lines, np.int32(lines.shape[0]), np.int32(per_line), *(np.int32(n) for n in dims)]
    tail = (np.int32(target.shape[-2]), np.int32(first_coil))
    if shared > 48 * 1024:  # beyond the default limit a kernel must opt in to more dynamic shared memory
        kernel.max_dynamic_shared_size_bytes = shared
    for index, begin in enumerate(range(0, n_samples, size)):
        count = min(size, n_samples - begin)
        upload_constant(module, "c_k", records[begin:begin + count])
        kernel((blocks, slices, 1), (row, rows, 1),
               (*args, np.int32(count), *tail, np.int32(index == 0), np.uint64(0)), shared_mem=shared)
    if slices > 1:
        out[coil0:coil0 + coils] = target.sum(axis=0)


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


def _fhd_seed(data: Any, trajectory: Any, matrix: tuple[int, ...], rung: int, chunk: int | None,
              block: int | None, device: Device) -> Any:
    """The seed's rungs, one coil per launch (fhd_seed.cu)."""
    cupy = cupy_module()
    dim = len(matrix)
    defines = seed_defines(dim, rung)
    module = get_module("fhd_seed.cu", defines, device)
    kernel = module.get_function(_SEED_KERNEL[rung])
    nvox = math.prod(matrix)
    n_coils, n_samples = data.shape
    capacity = defines.get("FHD_CHUNK", n_samples)
    size = _launch_size(chunk, capacity, capacity if rung >= 2 else 2**31 - 1, "chunk (samples per launch)")
    threads = _launch_size(block, DEFAULT_BLOCK, 1024, "block (threads per block)")
    grid = (-(-nvox // threads), 1, 1)
    axes = list(_on_device("axes", matrix, 0, device.index))
    axes += axes[:1] * (3 - dim)  # unused z pointer in 2D
    k = cupy.ascontiguousarray(trajectory, dtype=cupy.float32)
    columns = [cupy.ascontiguousarray(k[:, d]) for d in range(dim)]
    columns += columns[:1] * (3 - dim)
    out = _empty((n_coils, nvox), cupy.complex64)
    parts = out.view(cupy.float32).reshape(n_coils, nvox, 2)
    re_out, im_out = _empty((nvox,), cupy.float32), _empty((nvox,), cupy.float32)
    for coil in range(n_coils):
        re_in = cupy.ascontiguousarray(data[coil].real)
        im_in = cupy.ascontiguousarray(data[coil].imag)
        if rung < 2:
            kernel(grid, (threads, 1, 1), (*columns, *axes, re_in, im_in, re_out, im_out, np.int32(n_samples),
                                           np.int32(nvox)))
        else:
            for index, begin in enumerate(range(0, n_samples, size)):
                stop = min(n_samples, begin + size)
                if rung == 2:
                    for d, symbol in enumerate(("c_kx", "c_ky", "c_kz")[:dim]):
                        upload_constant(module, symbol, columns[d][begin:stop])
                else:
                    upload_constant(module, "c_k", k[begin:stop])
                kernel(grid, (threads, 1, 1), (*axes, re_in[begin:], im_in[begin:], re_out, im_out,
                                               np.int32(stop - begin), np.int32(nvox), np.int32(index == 0)))
        parts[coil, :, 0] = re_out
        parts[coil, :, 1] = im_out
    return out.reshape(n_coils, *matrix)


# ----------------------------------------------------------------------------------------------------
# F x


def forward_gpu(image: Any, trajectory: Any, *, variant: str = "best", chunk: int | None = None,
                block: int | None = None) -> Any:
    """F x on the GPU by exact direct summation, one thread per sample.

    Parameters
    ----------
    image
        CuPy complex64 ``(C, *matrix)`` on the current device (complex128 is cast).
    trajectory
        CuPy float32 ``(M, D)`` in cycles per field of view, D = ``image.ndim - 1``.
    variant
        One of :data:`FORWARD_VARIANTS`, or ``"best"``.
    chunk
        Voxel positions per slice of the tiled kernels (each slice is one grid row whose partial sums are
        added at the end); None: slices sized to fill the GPU. Ignored by ``naive``.
    block
        Threads per block (at most 256).

    Returns
    -------
    cupy.ndarray
        complex64 ``(C, M)``.
    """
    name = _variant(variant, FORWARD_VARIANTS, FORWARD_BEST, "forward")
    device = _device()
    cupy = cupy_module()
    if _is_cupy(image) and image.ndim not in (3, 4):
        raise SchemaError(f"image must be complex64 (C, Nx, Ny) or (C, Nx, Ny, Nz), found shape {image.shape}")
    _gpu_array("image", image, device, "c", getattr(image, "ndim", 0))
    matrix = validate_matrix(image.shape[1:])
    n_coils = image.shape[0]
    if n_coils < 1:
        raise InvalidDataError("image has no coils (C = 0)")
    n_samples = _check_trajectory(trajectory, matrix, None, device)
    flat = cupy.ascontiguousarray(image, dtype=cupy.complex64).reshape(n_coils, -1)
    threads = _launch_size(block, DEFAULT_BLOCK, 256, "block (threads per block)")
    if name == "naive":
        return _forward_naive(flat, trajectory, matrix, threads, device)
    run = FORWARD_RUN if name == "recur" else 1
    headers, own, mirror = _on_device("runs", matrix, run, device.index)
    n_runs = headers.shape[0]
    kfix = fixed_point_turns(trajectory, matrix)
    blocks = -(-n_samples // threads)
    if chunk is None:
        slices = max(1, min(-(-_sm_count(device.index) * THREADS_PER_SM // (blocks * threads)), n_runs))
        per_slice = -(-n_runs // slices)
    else:
        per_slice = -(-_launch_size(chunk, 1, 2**31 - 1, "chunk (voxel positions per slice)") // run)
    per_slice = max(per_slice, -(-n_runs // 65535))
    slices = -(-n_runs // per_slice)
    padded = cupy.concatenate([flat, cupy.zeros((n_coils, 1), cupy.complex64)], axis=1)
    out = _empty((slices, n_coils, n_samples), cupy.complex64)
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


def _forward_naive(flat: Any, trajectory: Any, matrix: tuple[int, ...], threads: int, device: Device) -> Any:
    cupy = cupy_module()
    dim = len(matrix)
    kernel = get_module("forward.cu", forward_defines(dim, None, None), device).get_function(
        "mri_recon_forward_naive")
    axes = list(_on_device("axes", matrix, 0, device.index))
    axes += axes[:1] * (3 - dim)
    k = cupy.ascontiguousarray(trajectory, dtype=cupy.float32)
    columns = [cupy.ascontiguousarray(k[:, d]) for d in range(dim)]
    columns += columns[:1] * (3 - dim)
    n_coils, nvox = flat.shape
    n_samples = k.shape[0]
    out = _empty((n_coils, n_samples), cupy.complex64)
    for coil in range(n_coils):
        kernel((-(-n_samples // threads), 1, 1), (threads, 1, 1),
               (*columns, *axes, flat[coil], out[coil], np.int32(n_samples), np.int32(nvox)))
    return out
