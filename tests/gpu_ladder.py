"""The optimization ladder of the GPU F^H d (and F) kernels, for benchmarks and tests; off the production path.

F^H d climbs the ladder of the FHD kernel of *Programming Massively Parallel Processors* (chapter 17):
the seed's four rungs (``tests/kernels/fhd_seed.cu``: global memory, registers, constant-memory chunks,
array-of-structures chunks; one coil per launch, voxel coordinates read as float32 from
:func:`mri_recon.checks.grid.voxel_axes`), then four configurations of the production kernel
(:func:`mri_recon.operators.engines.gpu_exact.fhd_gpu`): ``packed`` (fixed-point trajectory and up to eight coils in
one constant-memory record), ``mirror`` (one phase serves r and -r), ``multi`` (several voxels per thread)
and ``recur`` (their phases by the angle-addition recurrence; the production default). F has three:
``naive`` (global memory, the reference rung of ``kernels/forward.cu``), ``tiled`` and ``recur``.

:mod:`mri_recon.operators.engines.gpu_exact` never imports this module.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import numpy as np

from mri_recon.arrays.backend import Device, cupy_module
from mri_recon.checks.grid import voxel_axes
from mri_recon.errors import InvalidDataError
from mri_recon.kernels import CONSTANT_BYTES, get_module, upload_constant
from mri_recon.kernels.configs import forward_defines
from mri_recon.operators.engines import gpu_exact

VARIANTS = ("naive", "registers", "constant", "aos", "packed", "mirror", "multi", "recur")
"""The rungs of the F^H d ladder, slowest first; ``"best"`` names :data:`BEST`."""
BEST = "recur"
"""The rung ``variant="best"`` runs: the production configuration."""
FORWARD_VARIANTS = ("naive", "tiled", "recur")
"""Forward kernels: global memory; shared-memory tiles of mirror pairs; tiles plus the recurrence."""
FORWARD_BEST = "recur"
SEED_KERNELS = ("mri_recon_fhd_naive", "mri_recon_fhd_registers", "mri_recon_fhd_constant", "mri_recon_fhd_aos")
"""The ``extern "C"`` kernel of each seed rung (``FHD_RUNG`` 0..3)."""
FAST_RUNGS = {"packed": {"paired": False, "multi": False, "recur": False},
              "mirror": {"paired": True, "multi": False, "recur": False},
              "multi": {"paired": True, "multi": True, "recur": False},
              "recur": {"paired": True, "multi": True, "recur": True}}
"""The options of :func:`mri_recon.operators.engines.gpu_exact.fhd_gpu` that make each of the fast rungs."""
SEED_BLOCK = 256
"""Threads per block of the seed rungs."""

SEED_SOURCE = str(Path(__file__).resolve().parent / "kernels" / "fhd_seed.cu")
"""The seed kernel of the ladder (test and benchmark code, not shipped)."""
SEED_RUNGS = 4
"""Rungs of ``fhd_seed.cu`` (naive, registers, constant, aos)."""


def seed_defines(dim: int, rung: int) -> dict[str, int]:
    """The ``-D`` options of ``fhd_seed.cu`` for one rung of the textbook ladder (0 naive .. 3 aos)."""
    defines = {"FHD_DIM": dim, "FHD_RUNG": rung}
    if rung >= 2:
        defines["FHD_CHUNK"] = CONSTANT_BYTES // (4 * dim)
    return defines


def _variant(variant: str, names: tuple[str, ...], best: str, what: str) -> str:
    name = best if variant == "best" else variant
    if name not in names:
        raise InvalidDataError(f"unknown {what} variant {variant!r}: expected 'best' or one of {', '.join(names)}")
    return name


def seed_capacity(dim: int, variant: str) -> int:
    """Samples per constant-memory chunk of the ``constant`` and ``aos`` rungs."""
    return seed_defines(dim, VARIANTS.index(variant))["FHD_CHUNK"]


def fhd_ladder(kspace: Any, trajectory: Any, matrix: tuple[int, ...], *, variant: str = "best",
               chunk: int | None = None, block: int | None = None) -> Any:
    """F^H d by one rung of the ladder; arguments and result as for :func:`gpu_exact.fhd_gpu`.

    Parameters
    ----------
    kspace, trajectory, matrix
        As for :func:`mri_recon.operators.engines.gpu_exact.fhd_gpu`.
    variant
        A rung of :data:`VARIANTS`, or ``"best"``.
    chunk
        Samples per launch (seed rungs; the constant-memory capacity for ``constant`` and ``aos``) or per
        constant-memory chunk (the other rungs); None: the largest.
    block
        Threads per block (seed rungs) or per block row (the other rungs); None: a default.

    Returns
    -------
    cupy.ndarray
        complex64 ``(C, *matrix)``.
    """
    name = _variant(variant, VARIANTS, BEST, "F^H d")
    if name in FAST_RUNGS:
        return gpu_exact.fhd_gpu(kspace, trajectory, matrix, chunk=chunk, block=block, **FAST_RUNGS[name])
    data, matrix, device = gpu_exact.adjoint_inputs(kspace, trajectory, matrix)
    return _fhd_seed(data, trajectory, matrix, VARIANTS.index(name), chunk, block, device)


def forward_ladder(image: Any, trajectory: Any, *, variant: str = "best", chunk: int | None = None,
                   block: int | None = None) -> Any:
    """F x by one forward kernel of :data:`FORWARD_VARIANTS` (or ``"best"``); arguments and result as for
    :func:`mri_recon.operators.engines.gpu_exact.forward_gpu` (``chunk`` is ignored by ``naive``)."""
    name = _variant(variant, FORWARD_VARIANTS, FORWARD_BEST, "forward")
    if name != "naive":
        return gpu_exact.forward_gpu(image, trajectory, recur=name == "recur", chunk=chunk, block=block)
    flat, matrix, device = gpu_exact.forward_inputs(image, trajectory)
    threads = gpu_exact.launch_size(block, gpu_exact.DEFAULT_BLOCK, 256, "block (threads per block)")
    return _forward_naive(flat, trajectory, matrix, threads, device)


@functools.lru_cache(maxsize=16)
def _axes(matrix: tuple[int, ...], index: int) -> tuple[Any, ...]:
    """float32 voxel coordinates per axis on GPU ``index``, padded to three pointers (unused z in 2-D)."""
    cupy = cupy_module()
    with cupy.cuda.Device(index):
        axes = [cupy.asarray(a) for a in voxel_axes(matrix, np.float32)]
    return tuple(axes + axes[:1] * (3 - len(matrix)))


def _columns(trajectory: Any, dim: int) -> tuple[Any, list[Any]]:
    cupy = cupy_module()
    k = cupy.ascontiguousarray(trajectory, dtype=cupy.float32)
    columns = [cupy.ascontiguousarray(k[:, d]) for d in range(dim)]
    return k, columns + columns[:1] * (3 - dim)


def _fhd_seed(data: Any, trajectory: Any, matrix: tuple[int, ...], rung: int, chunk: int | None,
              block: int | None, device: Device) -> Any:
    """The seed's rungs, one coil per launch (fhd_seed.cu)."""
    cupy = cupy_module()
    dim = len(matrix)
    defines = seed_defines(dim, rung)
    module = get_module(SEED_SOURCE, defines, device)
    kernel = module.get_function(SEED_KERNELS[rung])
    nvox = math.prod(matrix)
    n_coils, n_samples = data.shape
    capacity = defines.get("FHD_CHUNK", n_samples)
    size = gpu_exact.launch_size(chunk, capacity, capacity if rung >= 2 else 2**31 - 1,
                                  "chunk (samples per launch)")
    threads = gpu_exact.launch_size(block, SEED_BLOCK, 1024, "block (threads per block)")
    grid = (-(-nvox // threads), 1, 1)
    axes = _axes(matrix, device.index)
    k, columns = _columns(trajectory, dim)
    out = gpu_exact.empty((n_coils, nvox), cupy.complex64)
    parts = out.view(cupy.float32).reshape(n_coils, nvox, 2)
    re_out, im_out = gpu_exact.empty((nvox,), cupy.float32), gpu_exact.empty((nvox,), cupy.float32)
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


def _forward_naive(flat: Any, trajectory: Any, matrix: tuple[int, ...], threads: int, device: Device) -> Any:
    """The reference forward kernel (``FWD_NAIVE``), one coil per launch."""
    cupy = cupy_module()
    dim = len(matrix)
    kernel = get_module("forward.cu", forward_defines(dim, None, None), device).get_function(
        "mri_recon_forward_naive")
    axes = _axes(matrix, device.index)
    k, columns = _columns(trajectory, dim)
    n_coils, nvox = flat.shape
    n_samples = k.shape[0]
    out = gpu_exact.empty((n_coils, n_samples), cupy.complex64)
    for coil in range(n_coils):
        kernel((-(-n_samples // threads), 1, 1), (threads, 1, 1),
               (*columns, *axes, flat[coil], out[coil], np.int32(n_samples), np.int32(nvox)))
    return out
