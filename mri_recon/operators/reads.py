"""What a GPU reconstruction reads back to the host, gathered so that a stage reads it at once: checks of arrays
(:class:`Flags`: finite, signs, bit-for-bit equality) and reductions (:class:`Scalars`: sums, maxima, the coil
maps' root-sum-of-squares peak; :func:`inner`). The kernels are those of ``kernels/arith.cu``
(:mod:`mri_recon.operators.arith`); on the host NumPy computes the same to float32 rounding, sums in float64.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..arrays.backend import cupy_module, get_xp
from ..checks.scaling import largest as host_largest
from .arith import BLOCKS, THREADS, _blocks, _dense, _floats, _kernel, _launch, _on_gpu

NOT_FINITE, NEGATIVE, POSITIVE, DIFFERENT = 1, 2, 4, 8
"""The bits :meth:`Flags.check` sets (some value not finite, some below zero, some above zero) and
:meth:`Flags.compare` sets (two arrays not equal bit for bit)."""


def _reduce(name: str, array: Any, n: int, args: tuple, parts: int = 1) -> np.ndarray:
    """The ``parts`` float64 results of reduction kernel ``name`` over ``n`` items (one read)."""
    cupy = cupy_module()
    blocks = _blocks(n)
    partial = cupy.empty(parts * blocks, dtype=np.float64)
    counter = cupy.zeros(1, dtype=np.uint32)
    result = cupy.empty(parts, dtype=np.float64)
    _kernel(name, int(array.device.id))((blocks,), (THREADS,), (*args, partial, counter, result))
    return result.get()


class Scalars:
    """Reductions of arrays read together: :meth:`total`, :meth:`largest` and :meth:`rss_peak` queue one
    (a device array's on its device, a host array's computed at once) and return its slot; :meth:`read` returns
    every value in slot order, the device's in one transfer. The module's functions of the same names are one
    reduction read alone."""

    CAPACITY = 8
    """Most device reductions of one instance."""

    def __init__(self) -> None:
        self._values: list[float | None] = []  # host values; None where the device's value goes
        self._finish: list[Any] = []  # per slot, what turns the device's float64 into the value
        self._device: tuple[Any, Any, Any] | None = None  # (results, partials, counter) on the device
        self._pending: list[int] = []  # slots whose value the device computes, in results order

    def _host(self, value: float) -> int:
        self._values.append(float(value))
        self._finish.append(None)
        return len(self._values) - 1

    def _queue(self, name: str, array: Any, n: int, args: tuple, finish: Any = float) -> int:
        cupy = cupy_module()
        if self._device is None:
            self._device = (cupy.empty(self.CAPACITY, np.float64), cupy.empty(BLOCKS, np.float64),
                            cupy.zeros(1, np.uint32))
        if len(self._pending) >= self.CAPACITY:
            raise IndexError(f"Scalars holds {self.CAPACITY} device reductions")
        results, partial, counter = self._device
        index = len(self._pending)
        _kernel(name, int(array.device.id))((_blocks(n),), (THREADS,),
                                            (*args, partial, counter, results[index:index + 1]))
        self._values.append(None)
        self._finish.append(finish)
        self._pending.append(len(self._values) - 1)
        return len(self._values) - 1

    def total(self, array: Any) -> int:
        """The sum of a real array in float64."""
        if not _on_gpu(array):
            return self._host(np.sum(array, dtype=np.float64))
        flat = _floats(array)
        return self._queue("mri_recon_arith_sum", array, flat.size, (flat, np.int64(flat.size)))

    def largest(self, array: Any) -> int:
        """``max |Re|, |Im|`` of a complex64 array, ``max |.|`` of a float32 one
        (:func:`mri_recon.checks.scaling.largest`)."""
        if not _on_gpu(array) or array.dtype not in (np.float32, np.complex64):
            return self._host(host_largest(array))
        if array.size == 0:
            return self._host(0.0)
        flat = _floats(_dense(array, array.dtype))
        return self._queue("mri_recon_arith_max_abs", array, flat.size, (flat, np.int64(flat.size)))

    def rss_peak(self, maps: Any) -> int:
        """``max_n sqrt(sum_c |S_c(n)|^2)`` of coil maps ``(C, *matrix)``, without overflow or underflow (the
        squares in float64 on the GPU; on the host of the maps divided by a power of two near their largest
        component)."""
        if not _on_gpu(maps):
            from ..checks.scaling import unit_scale  # noqa: PLC0415 - the host twin only

            unit, scale = unit_scale(maps)
            return self._host(scale * math.sqrt(float(np.max((unit.real ** 2 + unit.imag ** 2).sum(axis=0)))))
        maps = _dense(maps, np.complex64)
        coils, n = int(maps.shape[0]), int(maps.size // max(1, maps.shape[0]))
        return self._queue("mri_recon_arith_rss_max", maps, n, (maps, np.int32(coils), np.int64(n)),
                           lambda peak: math.sqrt(float(peak)))

    def read(self) -> list[float]:
        """Every value queued, in slot order."""
        values = list(self._values)
        if self._pending:
            results = self._device[0][:len(self._pending)].get()
            for slot, value in zip(self._pending, results, strict=True):
                values[slot] = self._finish[slot](value)
        return values


def _alone(method: Any, array: Any) -> float:
    scalars = Scalars()
    method(scalars, array)
    return scalars.read()[0]


def total(array: Any) -> float:
    """The sum of a real array in float64 (:meth:`Scalars.total`, read alone)."""
    return _alone(Scalars.total, array)


def largest(array: Any) -> float:
    """``max |Re|, |Im|`` of a complex64 array, ``max |.|`` of a float32 one (:meth:`Scalars.largest`, read
    alone)."""
    return _alone(Scalars.largest, array)


def rss_peak(maps: Any) -> float:
    """``max_n sqrt(sum_c |S_c(n)|^2)`` of coil maps ``(C, *matrix)`` (:meth:`Scalars.rss_peak`, read alone)."""
    return _alone(Scalars.rss_peak, maps)


def inner(a: Any, b: Any) -> complex:
    """``sum conj(a) b`` of two C-contiguous complex64 CuPy arrays of one size, in float64."""
    n = int(a.size)
    re, im = _reduce("mri_recon_arith_dot", a, n, (a, b, np.int64(n)), parts=2)
    return complex(re, im)


class Flags:
    """Checks of arrays on one device, read together: :meth:`check` records which of :data:`NOT_FINITE`,
    :data:`NEGATIVE` and :data:`POSITIVE` values an array holds; :meth:`read` returns each check's bits.

    On a GPU, :meth:`send` starts the copy of the bits to the host right after the checks queued so far; a
    later :meth:`read` then waits for those checks only, not for the work queued after them. :meth:`clear`
    makes the flags ready for new checks (a caller that checks on every call keeps one instance)."""

    def __init__(self, xp: Any, capacity: int = 8):
        self.xp = xp
        self.bits = xp.zeros(capacity, dtype=np.int32)
        self.count = 0
        self._sent: tuple[Any, Any] | None = None  # (pinned host copy, event after it) of a send

    def clear(self) -> None:
        """Forget every check: the bits are zeroed (on the device, in stream order) and slots count from 0."""
        self.count, self._sent = 0, None
        if self.xp is np:
            self.bits[:] = 0
        else:
            self.bits.data.memset_async(0, self.bits.nbytes)

    def _slot(self) -> int:
        """The next check's slot (refused beyond the capacity)."""
        if self.count >= self.bits.size:
            raise IndexError(f"Flags holds {self.bits.size} checks")
        self.count += 1
        return self.count - 1

    def check(self, array: Any) -> int:
        """Queue the check of ``array`` (float32 or complex64: both components); returns its slot."""
        slot = self._slot()
        if self.xp is np:
            flat = array.reshape(-1).view(array.real.dtype) if array.dtype.kind == "c" else array.reshape(-1)
            self.bits[slot] = ((0 if np.isfinite(flat).all() else NOT_FINITE) | (NEGATIVE if (flat < 0).any() else 0)
                               | (POSITIVE if (flat > 0).any() else 0))
            return slot
        flat = _floats(_dense(array, array.dtype))
        _launch("mri_recon_arith_flags", array, flat.size, (flat, np.int64(flat.size), self.bits[slot:]))
        return slot

    def compare(self, a: Any, b: Any) -> int:
        """Queue the comparison of two arrays of one shape and dtype (4 or 8 bytes an item), bit for bit; returns
        its slot, whose :data:`DIFFERENT` bit is set when they differ anywhere."""
        if a.shape != b.shape or a.dtype != b.dtype or a.dtype.itemsize not in (4, 8):
            raise TypeError(f"compare takes two arrays of one shape and a 4- or 8-byte dtype, found {a.shape} "
                            f"{a.dtype} and {b.shape} {b.dtype}")
        slot = self._slot()
        words = [self.xp.ascontiguousarray(x).reshape(-1).view(np.uint32) for x in (a, b)]
        if self.xp is np:
            self.bits[slot] = 0 if np.array_equal(*words) else DIFFERENT
            return slot
        _launch("mri_recon_arith_differ", words[0], words[0].size, (*words, np.int64(words[0].size),
                                                                     self.bits[slot:]))
        return slot

    def send(self) -> None:
        """Queue the copy of the checks' bits to (pinned) host memory now; :meth:`read` waits for it alone."""
        if self.xp is np:
            return
        cupy = cupy_module()
        out = cupy.cuda.alloc_pinned_memory(4 * max(1, self.count))
        out = np.ndarray((self.count,), dtype=np.int32, buffer=out)
        self.bits[:self.count].get(out=out, blocking=False)
        done = cupy.cuda.Event(block=False, disable_timing=True)
        done.record()
        self._sent = (out, done)

    def read(self) -> list[int]:
        """Every check's bits, in the order checked (one read: of what :meth:`send` sent, if it was called)."""
        if self._sent is not None:
            out, done = self._sent
            done.synchronize()
            return [int(b) for b in out]
        bits = self.bits[:self.count]
        return [int(b) for b in (bits if self.xp is np else bits.get())]


def all_finite(array: Any) -> bool:
    """Whether every value of a float32 or complex64 array is finite (one read)."""
    flags = Flags(get_xp(array), 1)
    flags.check(array)
    return not flags.read()[0] & NOT_FINITE


__all__ = ["DIFFERENT", "NEGATIVE", "NOT_FINITE", "POSITIVE", "Flags", "Scalars", "all_finite", "inner", "largest",
           "rss_peak", "total"]
