"""Element-wise operations of a reconstruction on NumPy or CuPy arrays: NumPy on the host, the kernels of
``kernels/arith.cu`` on a GPU (its checks and reductions, read back to the host, are :mod:`.reads`).

On a GPU these replace CuPy's generated kernels (``x * s``, ``isfinite(x).all()``, ``x.sum()``, ...), which NVRTC
compiles on their first use in an installation, one after the other (seconds for a first 2-D reconstruction:
docs/benchmarks.md); ``arith.cu`` is one module, shipped precompiled (docs/kernels.md). Each function computes on
the host what it computes on the device, to float32 rounding.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..arrays.backend import Device, cupy_module, get_xp
from ..checks.scaling import rescale as host_rescale
from ..checks.scaling import rescale_steps
from ..kernels import get_kernel

KERNEL_FILE = "arith.cu"
THREADS = 256
"""Threads per block (``ARITH_THREADS`` in ``kernels/arith.cu``)."""
BLOCKS = 1024
"""Most blocks of one launch (grid-stride loops beyond); also the partial sums of a reduction."""
WHITEN_SHARED = 32 * 1024
"""Most bytes of shared memory the whitening kernel's block holds (its columns)."""


def empty(shape: tuple[int, ...], dtype: Any) -> Any:
    """An uninitialized device buffer: every output of these kernels comes from here (tests poison it)."""
    return cupy_module().empty(shape, dtype)


def _on_gpu(array: Any) -> bool:
    return get_xp(array) is not np


@functools.lru_cache(maxsize=64)
def _kernel(name: str, index: int):
    return get_kernel(KERNEL_FILE, name, None, Device(index))


def _blocks(n: int, threads: int = THREADS) -> int:
    return max(1, min(-(-int(n) // threads), BLOCKS))


def _launch(name: str, array: Any, n: int, args: tuple, shared: int = 0, threads: int = THREADS) -> None:
    _kernel(name, int(array.device.id))((_blocks(n, threads),), (threads,), args, shared_mem=shared)


def _dense(array: Any, dtype: Any) -> Any:
    """``array`` as a C-contiguous CuPy array of ``dtype`` (itself when it is one already)."""
    return get_xp(array).ascontiguousarray(array, dtype=dtype)


def _floats(array: Any) -> Any:
    """A C-contiguous float32 or complex64 array as float32 values (complex: interleaved components)."""
    if array.dtype not in (np.float32, np.complex64) or not array.flags.c_contiguous:
        raise TypeError(f"expected a C-contiguous float32 or complex64 array, found {array.dtype}")
    return array.reshape(-1).view(np.float32)


def scaled(array: Any, factor: float, out: Any = None) -> Any:
    """``array * float32(factor)`` (float32 or complex64), into ``out`` when given (``out`` may be ``array``)."""
    factor = np.float32(factor)
    if not _on_gpu(array):
        if out is None:
            return array * factor
        np.multiply(array, factor, out=out)
        return out
    if out is None:
        out = empty(array.shape, array.dtype)
    flat, steps = _floats(array), [factor]
    if 0 < abs(float(factor)) < np.finfo(np.float32).tiny:  # a subnormal factor: the kernels flush it to zero
        steps = [np.float32(float(factor) * 2.0 ** 64), np.float32(2.0 ** -64)]
    for step in steps:
        _launch("mri_recon_arith_scale", array, flat.size, (flat, step, _floats(out), np.int64(flat.size)))
        flat = _floats(out)
    return out


def alternate(array: Any, factor: float) -> Any:
    """``array[b, i...] *= float32(factor) (-1)^(sum of i)`` in place for a CuPy complex64 ``(B, *grid)`` (one to
    three grid axes, each of even size): the spectrum of a grid's ifftshift from the grid's own spectrum."""
    sizes = [int(n) for n in array.shape[1:]]
    if not 1 <= len(sizes) <= 3 or any(n % 2 for n in sizes):
        raise ValueError(f"alternate takes 1 to 3 grid axes of even size, found {sizes}")
    if array.dtype != np.complex64 or not array.flags.c_contiguous:
        raise TypeError(f"alternate works in place on a C-contiguous complex64 array, found {array.dtype}")
    sizes = [1] * (3 - len(sizes)) + sizes
    flat = array.reshape(-1)
    _launch("mri_recon_arith_alternate", array, flat.size, (flat, np.float32(factor), np.int64(flat.size),
                                                            *(np.int32(n) for n in sizes)))
    return array


def rescale(array: Any, factor: float) -> Any:
    """``array *= factor`` in place for a power of two ``factor`` (:func:`mri_recon.checks.scaling.rescale`)."""
    if not _on_gpu(array):
        return host_rescale(array, factor)
    for step in rescale_steps(factor):
        scaled(array, step, out=array)
    return array


def copy(array: Any) -> Any:
    """A C-contiguous copy of an array (on a GPU one device-to-device memcpy when it is C-contiguous)."""
    if not _on_gpu(array) or not array.flags.c_contiguous:
        return array.copy()
    out = empty(array.shape, array.dtype)
    out.data.copy_from_device_async(array.data, array.nbytes)
    return out


def weighted(kspace: Any, weights: Any, factor: float) -> Any:
    """``kspace * (weights * float32(factor))``: complex ``(C, M)`` k-space times real ``(M,)`` weights."""
    factor = np.float32(factor)
    if not _on_gpu(kspace):
        return kspace * (weights * factor)
    kspace, weights = _dense(kspace, np.complex64), _dense(weights, np.float32)
    out = empty(kspace.shape, kspace.dtype)
    m, total = int(kspace.shape[-1]), int(kspace.size)
    _launch("mri_recon_arith_weighted", kspace, total,
            (kspace, weights, factor, out, np.int64(m), np.int64(total)))
    return out


def whiten(array: Any, matrix: Any) -> Any:
    """``array[:, j] = W array[:, j]`` in place for every column of complex64 ``(C, M)`` (``W``: complex64
    ``(C, C)`` on the same device); returns ``array``. NumPy: ``W @ array`` written back."""
    if not _on_gpu(array):
        array[...] = matrix @ array
        return array
    coils, m = (int(n) for n in array.shape)
    threads = max(32, min(THREADS, WHITEN_SHARED // (8 * coils)) // 32 * 32)
    if 8 * coils * threads > WHITEN_SHARED:
        array[...] = matrix @ array  # more coils than a block's columns hold: cuBLAS and a copy
        return array
    _launch("mri_recon_arith_whiten", array, m, (array, matrix, np.int32(coils), np.int64(m)),
            shared=8 * coils * threads, threads=threads)
    return array


def combine_coils(maps: Any, images: Any, out: Any, accumulate: bool) -> Any:
    """``out (+)= sum_c conj(S_c) y_c`` for maps and coil images ``(C, *matrix)`` into ``out`` (``matrix``)."""
    if not _on_gpu(maps):
        product = (np.conj(maps) * images).sum(axis=0)
        if accumulate:
            out += product
        else:
            out[...] = product
        return out
    if out.dtype != np.complex64 or not out.flags.c_contiguous:
        raise TypeError(f"combine_coils writes a C-contiguous complex64 array, found {out.dtype}")
    maps, images = _dense(maps, np.complex64), _dense(images, np.complex64)
    coils, n = int(maps.shape[0]), int(out.size)
    _launch("mri_recon_arith_combine", out, n, (maps, images, out, np.int32(coils), np.int64(n),
                                                np.int32(bool(accumulate))))
    return out


def turns(trajectory: Any, scales: list[float], mult: float) -> Any:
    """``round(2^32 frac(mult k_d / scale_d)) mod 2^32`` as uint32 ``(M, D)`` of a CuPy float32 trajectory, in
    float64 (:func:`mri_recon.operators.engines.gpu_layout.fixed_point_turns`)."""
    k = _dense(trajectory, np.float32)
    out = empty(k.shape, np.uint32)
    padded = [np.float64(v) for v in [*scales, 1.0, 1.0, 1.0][:3]]
    _launch("mri_recon_arith_turns", k, k.size, (k, np.int64(k.size), np.int32(k.shape[1]), np.float64(mult),
                                                 *padded, out))
    return out


def records(kfix: Any, data: Any, words: int) -> Any:
    """The exact sums' constant-memory records ``(M, words)`` uint32 (CuPy): the fixed-point trajectory
    ``kfix`` ``(M, D)``, zeros, then the samples of C-contiguous ``data`` (complex64 ``(C, M)`` or float32
    ``(1, M)``) of each sample."""
    m, dim = (int(n) for n in kfix.shape)
    per = 2 if data.dtype.kind == "c" else 1
    out = empty((m, words), np.uint32)
    _launch("mri_recon_arith_records", kfix, m * words, (kfix, _floats(data), np.int64(m), np.int32(dim),
                                                         np.int32(data.shape[0]), np.int32(per), np.int32(words), out))
    return out


def _reduction_buffers(blocks: int) -> tuple[Any, Any, Any]:
    """A reduction's partials (one per block), its counter (zero) and its one result, all on the device."""
    cupy = cupy_module()
    return cupy.empty(blocks, np.float64), cupy.zeros(1, np.uint32), cupy.empty(1, np.float64)


def ramp_density(trajectory: Any, matrix: tuple[int, ...], scales: tuple[float, ...], still: float, gaussians: Any,
                 reach: tuple[float, ...]) -> tuple[Any, Any, Any]:
    """The normalized ramp weights of a CuPy float32 trajectory ``(M, D)`` on its device, in three launches
    and no read: ``(weights, moving, positive)`` as :func:`mri_recon.prep.device_dcf.ramp_weights` returns
    them (its NumPy code is the host's twin), for image size ``matrix``. ``scales``: the axes' factors
    ``max N / N_d``; ``still``: the radius at or below which a sample is at k = 0; ``gaussians``: the blob's
    float64 samples, axis after axis (``matrix[d]`` each); ``reach``: per axis, the largest ``|k_d|`` where
    the blob's spectrum is kept."""
    cupy = cupy_module()
    k = _dense(trajectory, np.float32)
    m, dims = (int(n) for n in k.shape)
    sizes = [int(n) for n in matrix]
    blocks, device = _blocks(m), int(k.device.id)
    radius, weights = cupy.empty(m, np.float64), cupy.empty(m, np.float64)
    out, verdict = empty((m,), np.float32), cupy.empty(2, dtype=bool)
    pad = [np.float64(v) for v in [*scales, 1.0, 1.0][:3]]
    partial, counter, delta = _reduction_buffers(blocks)
    _kernel("mri_recon_arith_ramp_radius", device)((blocks,), (THREADS,), (
        k, np.int64(m), np.int32(dims), *pad, np.float64(still), radius, partial, counter, delta))
    partial, counter, gain = _reduction_buffers(blocks)
    _kernel("mri_recon_arith_ramp_gain", device)((blocks,), (THREADS,), (
        k, radius, np.int64(m), np.int32(dims), np.float64(still), delta, gaussians,
        *(np.int32(n) for n in [*sizes, 0, 0][:3]), *(np.float64(v) for v in [*reach, 0.0, 0.0][:3]),
        weights, partial, counter, gain))
    _kernel("mri_recon_arith_ramp_finish", device)((blocks,), (THREADS,), (
        weights, np.int64(m), delta, gain, out, verdict))
    return out, verdict[0], verdict[1]


__all__ = ["alternate", "combine_coils", "copy", "empty", "ramp_density", "records", "rescale", "scaled", "turns",
           "weighted", "whiten"]
