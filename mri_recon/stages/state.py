"""What a reconstruction holds between its stages (:class:`State`), and its first stages: the plan (device,
engine, memory, off-resonance choice, scaled weights) and the upload."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backend import Device, to_device
from ..kernels import prefetch
from ..operators.arith import scaled
from ..operators.engines import Encoding
from ..operators.offres.setup import OffresCorrection, plan_correction
from ..operators.reads import Scalars
from ..planner import Plan, Preparation
from ..prep_memory import preparation_of
from ..progress import Clock, progress_callback
from ..scaling import power_of_two
from ..scan import Scan
from .options import Options

log = logging.getLogger("mri_recon.pipeline")

SOLVER_KERNELS = (("toeplitz.cu", {}), ("cg.cu", {}), ("arith.cu", {}))
"""The CUDA modules of the fused Toeplitz normal operator and the CG loop (every GPU reconstruction)."""

Planner = Callable[[Scan, Any, str, int, bool, Preparation], tuple[Device, type[Encoding], Plan]]
""":func:`mri_recon.pipeline.plan_reconstruction`'s signature."""

_GPU_LOCKS: dict[int, threading.RLock] = {}
_GPU_LOCKS_GUARD = threading.Lock()


def gpu_lock(index: int) -> threading.RLock:
    """The lock a GPU reconstruction holds on GPU ``index``: threads of one process that reconstruct on one
    GPU take turns, because they share its cuFFT plans, the NUFFT plan and work buffers kept by
    :mod:`mri_recon.operators.memo` and the kernels' constant memory. Processes (Dask workers) are unaffected."""
    with _GPU_LOCKS_GUARD:
        return _GPU_LOCKS.setdefault(index, threading.RLock())


@dataclass
class State:
    """One reconstruction between its stages: host inputs, device arrays, scales and what each stage made.

    The problem is solved in scaled units: ``kspace / data_scale``, ``weights`` (already divided by
    ``weight_scale``) and ``maps / maps_scale``, all powers of two, so the result does not depend on the
    data's scale (see :mod:`mri_recon.pipeline`)."""

    scan: Scan
    sense: bool
    """One image with coil maps (the scan's or estimated), or one per coil."""
    combine: str
    """``"sense"``, ``"rss"`` (per-coil images) or ``"single"`` (one coil)."""
    device: Device
    engine: type[Encoding]
    budget: Plan
    offres: OffresCorrection | None
    clock: Clock
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    weights: Any = None
    """float32 ``(M,)``, where the scan's are: its density weights divided by ``weight_scale`` (ones without)."""
    weight_scale: float = 1.0
    weight_sum: float = 0.0
    kspace: Any = None
    trajectory: Any = None
    w: Any = None
    """The weights on the device."""
    maps: Any = None
    data_scale: float = 1.0
    maps_scale: float = 1.0
    """The maps solved with are the maps divided by this power of two."""
    maps_peak: float = 1.0
    """``max_n sqrt(sum_c |S_c(n)|^2)`` of the maps solved with (1 without maps); of the scan's maps as given
    until :func:`~mri_recon.stages.work.scale_maps`."""
    basis_scale: float = 1.0
    """Estimated maps in the receiver's basis: the maps are those returned divided by this."""
    memo: Any = None
    kept: tuple[Encoding, Any] | None = None
    """The encoding and spectrum of the last trajectory still on this GPU (:mod:`mri_recon.operators.memo`)."""
    encoding: Encoding | None = None
    lookup: Future | None = None
    """The PSF cache lookup running on a host thread."""
    rhs: Any = None
    energy: float = 0.0
    peak: float = 0.0
    """The largest diagonal entry of the normal operator solved, ``max_n sum_c |S_c(n)|^2 * sum(w)``."""
    spectrum: Any = None
    operator: Any = None
    cache_state: str | None = None
    x: Any = None
    residuals: Any = ()
    extra: dict[str, Any] = field(default_factory=dict)
    image: Any = None
    host: np.ndarray | None = None


def run_kernels(engine: Any, ndim: int, coil_batch: int) -> list[tuple[str, dict]]:
    """The CUDA modules a reconstruction with ``engine`` builds (off-resonance correction aside): the engine's
    for ``ndim`` axes and ``coil_batch`` coils at a time, and the solver's."""
    return [*engine.kernel_configs(ndim, coil_batch), *SOLVER_KERNELS]


def default_kernels() -> list[tuple[str, dict]]:
    """Every CUDA module a reconstruction with the default settings may build on a GPU: those of each engine
    ``method="auto"`` chooses among (non-Cartesian, 2-D and 3-D, 1 to MAX_GROUP coils at a time) and the
    solver's, each once. The package ships these precompiled (``scripts/build_kernels.py --defaults``,
    docs/kernels.md)."""
    from ..kernels.configs import MAX_GROUP  # noqa: PLC0415 - the bundle's build and its test only
    from ..operators.engines.registry import engines  # noqa: PLC0415

    auto = [e for e in engines() if e.device_kind == "gpu" and e.auto and "non-cartesian" in e.samplings]
    found = [config for engine in auto for dim in (2, 3) if dim in engine.dims
             for coils in range(1, MAX_GROUP + 1) for config in run_kernels(engine, dim, coils)]
    return [(f, dict(d)) for f, d in dict.fromkeys((f, tuple(sorted(d.items()))) for f, d in found)]


def plan(scan: Scan, options: Options, planner: Planner, planned: tuple[Device, type[Encoding], Plan] | None = None
         ) -> State:
    """Plan: the device, the engine, the memory (``planned``, or ``planner``'s: refuse or batch coils), the
    off-resonance correction; start building this run's CUDA modules on threads."""
    sense = scan.coil_maps is not None or options.maps.method is not None
    combine = "sense" if sense else ("rss" if scan.n_coils > 1 else "single")
    dev, engine, budget = planned or planner(scan, options.device, options.method, options.iterations, sense,
                                             preparation_of(scan, estimate_maps=options.maps.method))
    offres = None if scan.field_map is None else plan_correction(
        scan.field_map, scan.times, scan.n_coils, gpu=dev.is_gpu, correction=options.field_map_correction,
        segments=options.segments, iterations=options.iterations)
    log.info("%s: matrix %s, %d coil(s), %d samples; engine %s on %s, %d coil(s) per batch", scan.source,
             list(scan.matrix), scan.n_coils, scan.n_samples, engine.name, dev, budget.coil_batch)
    if dev.is_gpu:  # build this run's CUDA modules on threads while the data are uploaded
        prefetch([*run_kernels(engine, len(scan.matrix), budget.coil_batch),
                  *(offres.kernel_configs(sense) if offres is not None else ())], dev)
    clock = Clock(dev, progress_callback(options.progress), options.iterations)
    return State(scan, sense, combine, dev, engine, budget, offres, clock)


@contextlib.contextmanager
def held(state: State) -> Iterator[State]:
    """The device for the run: on a GPU its lock (one reconstruction at a time per GPU and process: they share
    plans and work buffers), the device made current; and the host thread of the PSF lookup, joined at the
    end."""
    with state.stack:
        if state.device.is_gpu:
            state.stack.enter_context(gpu_lock(state.device.index))
        state.stack.enter_context(state.device.use())
        yield state


def _scales(scan: Scan, state: State) -> None:
    """The data's scale, the weights divided by theirs and their sum, the peak of the scan's maps: one read."""
    reads = Scalars()
    data = reads.largest(state.kspace)
    weights = None if scan.weights is None else (reads.largest(scan.weights), reads.total(scan.weights))
    maps = None if state.maps is None else reads.rss_peak(state.maps)
    values = reads.read()
    state.data_scale = power_of_two(values[data])
    if weights is None:
        state.weights, state.weight_sum = np.ones(scan.n_samples, dtype=np.float32), float(scan.n_samples)
    else:  # > 0 (a Scan refuses all-zero and negative weights); by a power of two: exact, and so is the sum
        state.weight_scale = power_of_two(values[weights[0]])
        state.weights = scaled(scan.weights, 1.0 / state.weight_scale)
        state.weight_sum = values[weights[1]] / state.weight_scale
    if maps is not None:
        state.maps_peak = values[maps]


def upload(options: Options, state: State) -> None:
    """Upload k-space, trajectory and the scan's maps once; the scales of the data and the weights and the
    peak of the scan's maps, read together (:class:`~mri_recon.operators.reads.Scalars`); the weights divided
    by theirs, uploaded; the field map."""
    scan, dev = state.scan, state.device
    state.kspace = to_device(scan.kspace, dev)
    state.trajectory = to_device(scan.trajectory, dev)
    state.maps = to_device(scan.coil_maps, dev) if state.sense and options.maps.method is None else None
    _scales(scan, state)
    state.w = to_device(state.weights, dev)
    if state.offres is not None:
        state.offres.upload(dev)
