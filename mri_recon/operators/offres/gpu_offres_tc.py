"""F^H d with off-resonance on the tensor cores (``offres_tc.cu``).

The exact phase of every voxel-sample pair (the fixed-point phase of :mod:`.gpu_offres`, one sine and cosine
each on the special function unit) and the sums over the samples as a complex matrix product on the tensor
cores: both factors split into two half-precision parts (22 significant bits), three products, float32
accumulation, partial sums moved into float32 registers every :data:`~mri_recon.kernels.configs.TC_CHUNK`
blocks of 16 samples; each coil's samples scaled by a power of two into [-1, 1] on the GPU (no host round trip)
and its sums scaled back. The multiply-adds per coil leave the FMA pipe, which is what limits ``fhd.cu``'s
off-resonance kernels with several coils.

A launch takes up to 8 coils (their real and imaginary parts interleaved over two 8-column tiles). Each sample
travels as one record (:func:`pack_samples`, the layout in ``offres_tc.cu``): its fixed-point trajectory and
time, then its complex64 values of the launch's coils. Needs compute capability 8.0
(:func:`tensor_cores_available`).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ...arrays.backend import Device, cupy_module
from ...errors import KernelError
from ...kernels import get_module
from ...kernels.configs import MAX_GROUP, TC_CHUNK, TC_WARPS, offres_tc_defines, tc_column_tiles
from ..engines.gpu_layout import grid_slices
from ..gpu.launch import empty, sm_count

MIN_CAPABILITY = 80
"""Compute capability (major * 10 + minor) the kernel needs: ``mma.sync`` m16n8k16 with half operands and float32
sums."""
HEADER_WORDS = 4
"""Words of a sample record before its values: K_0, K_1, K_2, tau."""
PACK_BLOCK = 256
"""Threads per block of the packing kernel."""


@functools.lru_cache(maxsize=16)
def _capability(index: int) -> int:
    return int(cupy_module().cuda.Device(index).compute_capability)


def tensor_cores_available(device: Device) -> bool:
    """Whether ``device`` runs ``offres_tc.cu`` (compute capability 8.0 or newer)."""
    return device.index >= 0 and _capability(device.index) >= MIN_CAPABILITY


def record_words(coils: int) -> int:
    """32-bit words per sample record: the header and the complex64 values of 4 coils per column tile."""
    return HEADER_WORDS + 8 * tc_column_tiles(coils)


def tc_groups(n_coils: int) -> list[tuple[int, int]]:
    """``(first coil, coils)`` of each launch: groups of :data:`MAX_GROUP` and the remainder (a group of 5..8
    fills two column tiles, 1..4 one)."""
    return [(start, min(MAX_GROUP, int(n_coils) - start)) for start in range(0, int(n_coils), MAX_GROUP)]


def sample_scale(data: Any, start: int, size: int, dim: int, device: Device) -> Any:
    """float32 ``(16,)`` on the GPU: ``s_c = 2^-e_c`` at ``[c]`` and ``1 / s_c`` at ``[8 + c]`` for each coil c of
    ``start .. start + size`` of ``data``, e_c the binary exponent of the coil's largest real or imaginary part
    (so ``s_c |d| < 1``, e_c clamped to [-125, 126] so that s_c and 1 / s_c stay normal; ``s_c = 1`` for a zero
    coil), found without a host round trip (``mri_recon_offres_tc_scale``). One scale per coil: the kernel's
    absolute error floor then follows each coil's own largest sample."""
    cupy = cupy_module()
    group = data[start:start + size]
    largest = cupy.ascontiguousarray(cupy.abs(group.view(cupy.float32)).max(axis=1))
    scale = empty((2 * MAX_GROUP,), cupy.float32)
    module = get_module("offres_tc.cu", offres_tc_defines(dim, size), device)
    module.get_function("mri_recon_offres_tc_scale")((1,), (MAX_GROUP,), (scale, largest, np.int32(size)))
    return scale


def pack_samples(kfix: Any, taus: Any, data: Any, scale: Any, start: int, size: int, device: Device) -> Any:
    """The sample records (uint32 ``(16 ceil(M / 16), record_words(size))``) of coils ``start .. start + size`` of
    ``data`` (complex64 ``(C, M)``), coil c times ``scale[c]`` (:func:`sample_scale`), with the fixed-point trajectory
    ``kfix`` (uint32 ``(M, D)``) and times ``taus`` (int32 ``(M,)``), written by ``mri_recon_offres_tc_pack``."""
    cupy = cupy_module()
    n_samples, dim = (int(s) for s in kfix.shape)
    n_blocks = max(1, -(-n_samples // 16))
    words = record_words(size)
    records = empty((16 * n_blocks, words), cupy.uint32)
    kernel = get_module("offres_tc.cu", offres_tc_defines(dim, size), device).get_function("mri_recon_offres_tc_pack")
    total = records.size
    kernel((-(-total // PACK_BLOCK),), (PACK_BLOCK,),
           (records, cupy.ascontiguousarray(kfix), cupy.ascontiguousarray(taus, dtype=cupy.int32), data, scale,
            np.int32(n_samples), np.int32(n_blocks), np.int32(size), np.int32(start)))
    return records


def slice_count(n_voxels: int, n_blocks: int, mtiles: int, sm_count: int, registers: int) -> int:
    """Sample slices (grid rows) of a launch: the fewest whose blocks fill the last wave on ``sm_count``
    multiprocessors at ``registers`` per thread (:func:`.gpu_layout.grid_slices`), at most one per staged chunk
    of the ``n_blocks`` blocks of 16 samples."""
    warps = -(-n_voxels // (16 * mtiles))
    return grid_slices(-(-warps // TC_WARPS), 32 * TC_WARPS, registers, sm_count,
                       min(65535, max(1, -(-n_blocks // TC_CHUNK))))


def fhd_offres_tc(out: Any, data: Any, kfix: Any, taus: Any, fixed: Any, matrix: tuple[int, ...], device: Device,
                  *, mtiles: int | None = None, slices: int | None = None) -> None:
    """Write F^H d with off-resonance (times centred: no ``exp(i 2 pi f t_c)``) of every coil of ``data``
    (complex64 ``(C, M)``) into ``out`` (complex64 ``(C, voxels)``), on the tensor cores.

    ``kfix``, ``taus`` and ``fixed`` are the fixed-point trajectory, times and field map
    (:func:`mri_recon.operators.engines.gpu_layout.fixed_point_turns`, :func:`.gpu_offres_layout.fixed_point_offres`);
    ``mtiles`` 16-voxel tiles per warp (1..4; None: the default), ``slices`` sample slices (1..65535, the grid's
    rows; None: :func:`slice_count`). Raises :class:`KernelError` for either out of range or a GPU without the
    tensor cores the kernel needs.
    """
    if mtiles is not None and not 1 <= int(mtiles) <= 4:
        raise KernelError(f"offres_tc.cu takes 1 to 4 tiles of 16 voxels per warp, found mtiles={mtiles}")
    if slices is not None and not 1 <= int(slices) <= 65535:
        raise KernelError(f"slices (grid rows of sample slices) must lie in 1..65535, found {slices}")
    if not tensor_cores_available(device):
        raise KernelError(f"offres_tc.cu needs compute capability {MIN_CAPABILITY / 10:.1f} or newer")
    cupy = cupy_module()
    n_coils, n_samples = (int(s) for s in data.shape)
    n_voxels = math.prod(matrix)
    nx, ny = matrix[0], matrix[1]
    nz = matrix[2] if len(matrix) == 3 else 1
    n_blocks = max(1, -(-n_samples // 16))
    for start, size in tc_groups(n_coils):
        defines = offres_tc_defines(len(matrix), size, mtiles)
        tiles = defines["OTC_MTILES"]
        kernel = get_module("offres_tc.cu", defines, device).get_function("mri_recon_fhd_offres_tc")
        count = slices or slice_count(n_voxels, n_blocks, tiles, sm_count(device.index), int(kernel.num_regs))
        per_slice = -(-n_blocks // count)
        count = -(-n_blocks // per_slice)
        scale = sample_scale(data, start, size, len(matrix), device)
        records = pack_samples(kfix, taus, data, scale, start, size, device)
        target = out if count == 1 else empty((count, size, n_voxels), cupy.complex64)
        warps = -(-n_voxels // (16 * tiles))
        kernel((-(-warps // TC_WARPS), count), (32 * TC_WARPS,),
               (target, records, fixed, scale, np.int32(nx), np.int32(ny), np.int32(nz), np.int32(size),
                np.int32(n_coils if count == 1 else size), np.int32(start if count == 1 else 0),
                np.int32(n_blocks), np.int32(per_slice)))
        if count > 1:
            cupy.sum(target, axis=0, out=out[start:start + size])
