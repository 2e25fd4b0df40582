"""Plans kept between calls: the last trajectory's encoding (with its NUFFT plan) and Toeplitz kernel spectrum,
kept on the GPU between reconstructions, and the small per-device LRU of plans behind the one-shot
:func:`~mri_recon.operators.fhd`, :func:`~mri_recon.operators.forward` and :func:`~mri_recon.operators.psf`.

A study reconstructs many scans with one trajectory and one set of density weights. Their encoding plan (the
samples sorted into bins) and the spectrum of their point-spread function are the same each time, and making
them costs as much as the 30 CG iterations of a 2D scan. :class:`SpectrumMemo` keeps one entry per GPU: the
trajectory and weights it was made for (device arrays), the encoding and the spectrum. A new scan is a hit
only when its engine and matrix are the same and its trajectory and (scaled) weights are *bit-identical* to the
entry's, compared on the device (one read back), so a hit can never serve another trajectory's
spectrum. An entry larger than :func:`memo_limit` bytes is not kept. The pipeline consults the memo in every
GPU reconstruction that is not given a PSF (a loop of ``mri_recon.reconstruct`` calls over the slices or
repetitions of one trajectory plans once, as the one-shot functions below do); the result says ``psf:
"memory"`` when it was served. The PSF cache (:class:`mri_recon.io.cache.PsfCache`) is the disk tier of the
same idea.

:class:`DeviceCaches` (:data:`CACHES`) owns every memo and plan cache, and :func:`plan_cache_clear` frees them
with the launchers' device copies and the kept cuFFT plans.

:class:`PlanCache` (one per device, :func:`plan_cache`) holds the same kind of thing for the public functions:
up to :func:`plan_entries` plans (an encoding, or a PSF plan), least recently used first out, within
:func:`plan_limit` bytes. An entry is found by its key (engine, matrix, the trajectory's shape, dtype and
device) and then by the trajectory's *bits*, compared with a private copy kept at the time (on the array's own
device: NumPy on the host, CuPy on its GPU, one read back for all candidates), so a trajectory modified
in place, or another one of the same shape, is never served a stale plan. Comparing costs one pass over the
trajectory and one read-back, far less than making a NUFFT plan (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays.backend import Device, cupy_module, device_memory, get_xp, is_gpu_array, resolve_device
from .engines.encoding import Encoding
from .reads import DIFFERENT, Flags

LIMIT_SHARE = 0.05
"""Default limit of one entry: this share of the GPU's total memory."""
LIMIT_VARIABLE = "MRI_RECON_MEMO_MAX"
"""Environment variable that sets the limit in bytes (0 turns the memo off)."""


def _switched_off() -> bool:
    """``$MRI_RECON_MEMO_MAX`` is 0 (read without asking the device for its memory)."""
    value = os.environ.get(LIMIT_VARIABLE, "").strip()
    try:
        return bool(value) and int(value) <= 0
    except ValueError:
        return False


def memo_limit(device: Device) -> int:
    """Most bytes one entry may hold on ``device``: ``$MRI_RECON_MEMO_MAX`` or :data:`LIMIT_SHARE` of its
    memory."""
    value = os.environ.get(LIMIT_VARIABLE, "").strip()
    if value:
        try:
            return max(0, int(value))
        except ValueError:
            pass
    _, total = device_memory(device)
    return int(LIMIT_SHARE * total)


@dataclass
class _Entry:
    engine: str
    matrix: tuple[int, ...]
    trajectory: Any
    weights: Any
    encoding: Encoding
    spectrum: Any


def _device_bytes(value: Any, seen: set[int], kinds: tuple[type, ...] | None = None) -> int:
    """Bytes of the arrays of ``kinds`` (default: CuPy arrays) reachable from ``value`` (arrays, containers, an
    object's attributes)."""
    kinds = kinds or (cupy_module().ndarray,)
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, kinds):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(_device_bytes(v, seen, kinds) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_device_bytes(v, seen, kinds) for v in value)
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return sum(_device_bytes(v, seen, kinds) for v in vars(value).values())
    return 0


class SpectrumMemo:
    """One entry: the last (engine, matrix, trajectory, weights) and its encoding and kernel spectrum."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._entry: _Entry | None = None
        self._lock = threading.Lock()

    def lookup(self, engine: str, matrix: tuple[int, ...], trajectory: Any, weights: Any
               ) -> tuple[Encoding, Any] | None:
        """``(encoding, spectrum)`` of the entry when it was made for exactly these inputs, else None (always
        None when :data:`LIMIT_VARIABLE` turns the memo off, whatever an earlier call kept)."""
        if _switched_off():
            return None
        with self._lock:
            entry = self._entry
        if entry is None:
            return None
        same = (entry.engine == engine and entry.matrix == tuple(matrix) and entry.trajectory.shape == trajectory.shape
                and entry.weights.shape == weights.shape)
        if same:
            flags = Flags(get_xp(trajectory), 2)
            flags.compare(entry.trajectory, trajectory)
            flags.compare(entry.weights, weights)
            same = not any(bits & DIFFERENT for bits in flags.read())
        if not same:  # a miss frees the entry before the new run builds its own (one of the two on the GPU at once)
            with self._lock:
                if self._entry is entry:
                    self._entry = None
            return None
        return entry.encoding, entry.spectrum

    def store(self, engine: str, matrix: tuple[int, ...], trajectory: Any, weights: Any, encoding: Encoding,
              spectrum: Any) -> bool:
        """Keep these as the entry (replacing the last) when they fit :func:`memo_limit`; whether kept."""
        entry = _Entry(engine, tuple(matrix), trajectory, weights, encoding, spectrum)
        fits = _device_bytes(entry, set()) <= memo_limit(self.device)
        with self._lock:
            self._entry = entry if fits else None
        return fits

    def held(self) -> int:
        """Entries kept: 0 or 1."""
        with self._lock:
            return int(self._entry is not None)

    def clear(self) -> None:
        with self._lock:
            self._entry = None


def spectrum_memo(device: Device) -> SpectrumMemo:
    """The memo of GPU ``device`` (one per device and process, owned by :data:`CACHES`)."""
    return CACHES.of(device)[0]


# --------------------------------------------------------------------------------------------------------
# The plans of the one-shot public functions

ENTRIES_VARIABLE = "MRI_RECON_PLAN_CACHE"
"""Environment variable that sets the plans kept per device (0 turns the plan cache off)."""
DEFAULT_ENTRIES = 4
"""Plans kept per device by default."""
HOST_LIMIT = 256 * 2**20
"""Most bytes the CPU's plans may hold (their trajectories: FINUFFT and the exact sum keep no plan)."""


def plan_entries() -> int:
    """Plans each device's :class:`PlanCache` keeps: ``$MRI_RECON_PLAN_CACHE`` or :data:`DEFAULT_ENTRIES`."""
    value = os.environ.get(ENTRIES_VARIABLE, "").strip()
    try:
        return max(0, int(value)) if value else DEFAULT_ENTRIES
    except ValueError:
        return DEFAULT_ENTRIES


def plan_limit(device: Device) -> int:
    """Most bytes the plans of ``device`` may hold together: :func:`memo_limit` on a GPU, :data:`HOST_LIMIT`
    on the CPU."""
    return memo_limit(device) if device.is_gpu else HOST_LIMIT


class UseGuard:
    """One use of a plan at a time. A plan's work buffers (the NUFFT's fine grids) are shared by its uses: one
    thread at a time enqueues work with it, and on a GPU a use from another stream (or thread) than the last use
    first waits, on the device, for everything queued on the last use's stream so far (an event recorded there
    when the new use starts), so uses from different streams never overlap. Uses from one stream and thread are
    ordered by the stream itself and cost no event. The CPU's plans hold no work buffers: there the guard does
    nothing and calls run in parallel."""

    def __init__(self, device: Device) -> None:
        self._gpu = device.is_gpu
        self._lock = threading.Lock()
        self._last: tuple[Any, int] | None = None  # (stream, thread) of the last use; the stream is kept alive

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        if not self._gpu:
            yield
            return
        cupy = cupy_module()
        with self._lock:
            stream, thread = cupy.cuda.get_current_stream(), threading.get_ident()
            if self._last is not None:
                last, last_thread = self._last
                if last.ptr != stream.ptr or last_thread != thread:  # a per-thread stream has one ptr everywhere
                    stream.wait_event(last.record())
            try:
                yield
            finally:
                self._last = (stream, thread)


@dataclass(frozen=True)
class PlanCacheInfo:
    """What the plan caches did: ``hits`` and ``misses`` of lookups, plans held (``entries``, at most
    ``max_entries`` per device) and the bytes they hold (``bytes``, counted when a plan is stored)."""

    hits: int
    misses: int
    entries: int
    max_entries: int
    bytes: int


@dataclass
class _Plan:
    key: Hashable
    kept: Any  # a private copy of the trajectory's bits, on its own device
    value: Any
    guard: UseGuard
    nbytes: int = 0


def _bits(array: Any) -> Any:
    """``array`` (contiguous) viewed as unsigned integers of its item size: compared bit for bit, so -0.0 and
    0.0 differ and nothing is rounded."""
    xp = get_xp(array)
    array = xp.ascontiguousarray(array)
    size = array.dtype.itemsize
    return array.view(f"u{size}" if size in (1, 2, 4, 8) else "u1")


def _same(entries: list[_Plan], array: Any) -> list[bool]:
    """Whether each entry's kept copy has the bits of ``array`` (one read-back for all, on a GPU)."""
    if not entries:
        return []
    bits = _bits(array)
    if not is_gpu_array(array):
        return [bool(np.array_equal(e.kept, bits)) for e in entries]
    cupy = cupy_module()
    with cupy.cuda.Device(int(array.device.id)):
        if bits.dtype.itemsize not in (4, 8):
            return [bool(f) for f in cupy.stack([cupy.array_equal(e.kept, bits) for e in entries]).get()]
        flags = Flags(cupy, len(entries))
        for entry in entries:
            flags.compare(entry.kept, bits)
        return [not f & DIFFERENT for f in flags.read()]


def trajectory_key(kind: str, engine: str, matrix: tuple[int, ...], trajectory: Any) -> tuple:
    """The key of a plan: what it is (``kind``), the engine, the matrix and the trajectory's shape, dtype and
    device (its bits are compared separately)."""
    where = f"gpu:{trajectory.device.id}" if is_gpu_array(trajectory) else "cpu"
    return (kind, engine, tuple(matrix), tuple(trajectory.shape), str(trajectory.dtype), where)


class PlanCache:
    """The plans of one device: an LRU of at most :func:`plan_entries` plans within :func:`plan_limit` bytes,
    found by key and by the trajectory's bits (see the module doc). Thread-safe."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._plans: OrderedDict[int, _Plan] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = self._misses = 0

    def _find(self, key: Hashable, trajectory: Any) -> _Plan | None:
        with self._lock:
            candidates = [p for p in self._plans.values() if p.key == key]
        for plan, same in zip(candidates, _same(candidates, trajectory)):
            if same:
                return plan
        return None

    @contextlib.contextmanager
    def use(self, key: Hashable, trajectory: Any, build: Callable[[], Any]) -> Iterator[Any]:
        """The plan of ``key`` for this trajectory (``build()`` makes it when there is none), used inside its
        :class:`UseGuard`; a new plan is stored after its first use, so the buffers it made are counted."""
        found = self._find(key, trajectory) if plan_entries() else None
        with self._lock:
            if found is not None:
                self._hits += 1
                self._plans.move_to_end(id(found))
            else:
                self._misses += 1
        if found is not None:
            with found.guard():
                yield found.value
            return
        plan = _Plan(key, None, build(), UseGuard(self.device))
        with plan.guard():
            yield plan.value
        self._store(plan, trajectory)

    def _store(self, plan: _Plan, trajectory: Any) -> None:
        entries = plan_entries()
        if not entries or self._find(plan.key, trajectory) is not None:  # off, or another thread stored it
            return
        plan.kept = _bits(trajectory).copy()
        kinds = (np.ndarray,) if not self.device.is_gpu else (cupy_module().ndarray, np.ndarray)
        plan.nbytes = _device_bytes(plan.value, set(), kinds) + int(plan.kept.nbytes)
        limit = plan_limit(self.device)
        if plan.nbytes > limit:
            return
        with self._lock:
            self._plans[id(plan)] = plan
            while len(self._plans) > entries or sum(p.nbytes for p in self._plans.values()) > limit:
                self._plans.popitem(last=False)

    def info(self) -> PlanCacheInfo:
        with self._lock:
            return PlanCacheInfo(self._hits, self._misses, len(self._plans), plan_entries(),
                                 sum(p.nbytes for p in self._plans.values()))

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()
            self._hits = self._misses = 0


class DeviceCaches:
    """Everything the operators keep between calls, owned in one place: per device the reconstructions'
    :class:`SpectrumMemo` and the one-shot functions' :class:`PlanCache`, and for every GPU the launchers'
    device copies of host structures (:func:`~mri_recon.operators.gpu.launch.on_device`) and the kept cuFFT
    plans (:mod:`mri_recon.operators.gpu.fft`). :meth:`clear` frees them all; :meth:`held` counts what is kept."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[SpectrumMemo, PlanCache]] = {}
        self._lock = threading.Lock()

    def of(self, device: Device) -> tuple[SpectrumMemo, PlanCache]:
        """The memo and the plan cache of ``device`` (made on first use)."""
        with self._lock:
            if device.index not in self._kept:
                self._kept[device.index] = (SpectrumMemo(device), PlanCache(device))
            return self._kept[device.index]

    def plan_caches(self) -> list[PlanCache]:
        with self._lock:
            return [plans for _, plans in self._kept.values()]

    def held(self) -> dict[str, int]:
        """What is kept: memo entries, one-shot plans, device copies of the launchers' host structures and
        cuFFT plans (all 0 after :meth:`clear`, until the next call keeps something)."""
        from .gpu import fft, launch  # noqa: PLC0415 - GPU helpers, imported where they are asked about

        with self._lock:
            kept = list(self._kept.values())
        return {"memo entries": sum(memo.held() for memo, _ in kept), "plans": sum(p.info().entries for _, p in kept),
                "device copies": launch.on_device.cache_info().currsize, "cufft plans": fft.kept()}

    def clear(self) -> None:
        """Drop everything kept (its device memory goes back to CuPy's pool once no operator holds it) and
        reset the plan caches' counters."""
        from .gpu import fft, launch  # noqa: PLC0415 - GPU helpers, imported where they are cleared

        with self._lock:
            kept = [held for pair in self._kept.values() for held in pair]
        for held in kept:
            held.clear()
        launch.on_device.cache_clear()
        fft.release()


CACHES = DeviceCaches()
"""The process's one :class:`DeviceCaches`."""


def plan_cache(device: Device) -> PlanCache:
    """The plan cache of ``device`` (one per device and process, owned by :data:`CACHES`)."""
    return CACHES.of(device)[1]


def plan_cache_info(device: Device | str | None = None) -> PlanCacheInfo:
    """What the plan caches of the one-shot :func:`~mri_recon.fhd`, :func:`~mri_recon.forward` and
    :func:`~mri_recon.psf` did: of ``device`` (a :class:`~mri_recon.arrays.backend.Device`, ``"cpu"``, ``"gpu:N"``), or
    summed over every device for None. Counters count since the process started or :func:`plan_cache_clear`."""
    if device is not None:
        return plan_cache(resolve_device(device)).info()
    infos = [c.info() for c in CACHES.plan_caches()]
    return PlanCacheInfo(sum(i.hits for i in infos), sum(i.misses for i in infos),
                         sum(i.entries for i in infos), plan_entries(), sum(i.bytes for i in infos))


def plan_cache_clear() -> None:
    """Drop everything the operators keep between calls, freeing its memory, and reset the counters: the
    one-shot functions' plans, the reconstructions' memo entries, the launchers' device copies of host
    structures and the kept cuFFT plans (:meth:`DeviceCaches.clear`)."""
    CACHES.clear()
