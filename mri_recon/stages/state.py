"""What a reconstruction passes from stage to stage, frozen records each made by one stage (:class:`Planned`,
:class:`Uploaded`, :class:`Maps`, ...; per frame :class:`FrameData`, :class:`Encoded`, :class:`FrameNormal`), the
run's resources (:class:`Context`), and its first stages: the plan (device, engine, memory, off-resonance
choice) and the upload (the scales, the scaled weights)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..arrays.backend import Device, to_device
from ..checks.scaling import power_of_two
from ..io.frames import TimeSeries
from ..kernels import prefetch
from ..kernels.configs import maps_defines
from ..operators.arith import scaled
from ..operators.engines import Encoding
from ..operators.reads import Scalars
from ..planning.planner import Plan, Preparation
from ..planning.preparation import preparation_of
from ..prep.maps_methods import COIL_MAPS
from ..progress import Clock, progress_callback
from ..scan import Scan
from .options import Options

if TYPE_CHECKING:
    from ..operators.offres.setup import OffresCorrection

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


@dataclass(frozen=True)
class FrameData:
    """One frame's data on the device, in scaled units (the upload stage's record; a single scan is one frame)."""

    scan: Scan
    kspace: Any
    trajectory: Any
    w: Any
    """The weights on the device."""
    weights: np.ndarray
    """float32 ``(M,)``: the frame's density weights divided by the run's ``weight_scale`` (ones without)."""
    weight_sum: float


@dataclass(frozen=True)
class Encoded:
    """One frame's encoding (the encoding stage's record)."""

    encoding: Encoding
    kept: tuple[Encoding, Any] | None = None
    """The encoding and spectrum of the last trajectory still on this GPU (:mod:`mri_recon.operators.memo`)."""
    memo: Any = None
    lookup: Future | None = None
    """The PSF cache lookup running on a host thread."""


@dataclass(frozen=True)
class FrameNormal:
    """One frame's normal operator (the normal-operator stage's record)."""

    spectrum: Any
    operator: Any
    """``A^H W A + lam I`` for CG (None where the solver builds its own: sparse or joint)."""
    cache_state: str | None = None


@dataclass(frozen=True)
class Planned:
    """What a reconstruction is (the plan stage's record): its frames, how the image is formed, the device, the
    engine, the memory plan and the off-resonance correction."""

    scan: Scan
    """The scan, or a time series' first frame with the series' maps (its settings and messages)."""
    frames: tuple[Scan, ...]
    """The scans reconstructed: the scan itself, or a time series' frames."""
    series: TimeSeries | None
    sense: bool
    """One image with coil maps (the scan's or estimated), or one per coil."""
    combine: str
    """``"sense"``, ``"rss"`` (per-coil images) or ``"single"`` (one coil)."""
    device: Device
    engine: type[Encoding]
    budget: Plan
    offres: OffresCorrection | None


@dataclass(frozen=True)
class Context:
    """What a run holds rather than computes (:func:`held`): the clock that times its stages, and the exit
    stack that releases the GPU's lock, the current device and the host threads the stages start, at its end."""

    clock: Clock
    stack: contextlib.ExitStack


@dataclass(frozen=True)
class Maps:
    """The coil maps solved with, and their scales (the coil-map stages' record; ``array`` None: one image per
    coil)."""

    array: Any = None
    """The maps on the device, ``(C, *matrix)``: the maps divided by ``scale`` once scaled."""
    scale: float = 1.0
    """The maps solved with are the maps divided by this power of two."""
    peak: float = 1.0
    """``max_n sqrt(sum_c |S_c(n)|^2)`` of the maps solved with (1 without maps); of the scan's maps as given
    until :func:`~mri_recon.stages.work.scale_maps`."""
    basis_scale: float = 1.0
    """Estimated maps in the receiver's basis: the maps are those returned divided by this."""


@dataclass(frozen=True)
class Uploaded:
    """The data on the device in scaled units (the upload stage's record).

    The problem is solved in scaled units: ``kspace / data_scale``, weights divided by ``weight_scale`` and
    maps divided by :attr:`Maps.scale`, all powers of two shared by every frame, so the result does not depend
    on the data's scale (see :mod:`mri_recon.pipeline`)."""

    data: tuple[FrameData, ...]
    """One record per frame (a single scan is one frame)."""
    data_scale: float
    weight_scale: float

@dataclass(frozen=True)
class RightHandSide:
    """The right-hand side and what the solvers' weights are relative to (the right-hand-side stage's record)."""

    b: Any
    """``A^H W d``: the image's, or ``(T, *matrix)`` for a time series."""
    energies: tuple[float, ...]
    """Each frame's ``d^H W d`` (the sparse and joint solvers' objective; 0 where unused)."""
    peaks: tuple[float, ...]
    """Each frame's largest diagonal entry of its normal operator, ``max_n sum_c |S_c(n)|^2 * sum(w)``."""


@dataclass(frozen=True)
class Solution:
    """What the solve found (the solve stage's record), in scaled units but for ``lam_abs``."""

    x: Any
    """The solution: the image, per-coil images, or a time series' frames first."""
    residuals: Any
    """CG's relative residuals, or a sparse or joint solver's objective, per iteration."""
    extra: dict[str, Any]
    """The solver's words for the result's parameters (regularizer, solver, ...)."""
    lam_abs: float
    """The weight solved with, in the data's units: Tikhonov's, or a sparse regularizer's."""


def run_kernels(engine: Any, ndim: int, coil_batch: int) -> list[tuple[str, dict]]:
    """The CUDA modules a reconstruction with ``engine`` builds (off-resonance correction aside): the engine's
    for ``ndim`` axes and ``coil_batch`` coils at a time, and the solver's."""
    return [*engine.kernel_configs(ndim, coil_batch), *SOLVER_KERNELS]


def maps_kernels(method: str | None, coils: int) -> list[tuple[str, dict]]:
    """The module of ``maps.cu`` for ``coils`` coils when the estimate ``method`` (None: none) runs on it
    (:attr:`~mri_recon.prep.maps_methods.CoilMapMethod.maps_kernels`) and the module holds them; coil compression
    may estimate the maps from fewer coils, whose module is then built at its first use."""
    from ..prep import walsh_gpu  # noqa: PLC0415 - the GPU's maps, loaded where a GPU run plans them

    if method is None or not COIL_MAPS[method].maps_kernels or not walsh_gpu.fits(coils):
        return []
    return [(walsh_gpu.KERNEL_FILE, maps_defines(coils))]


def default_kernels() -> list[tuple[str, dict]]:
    """Every CUDA module a reconstruction with the default settings may build on a GPU: those of each engine
    ``method="auto"`` chooses among (non-Cartesian, 2-D and 3-D, 1 to MAX_GROUP coils at a time), the
    solver's and those of Walsh's maps (estimated when a scan has none), each once. The package ships these
    precompiled (``scripts/build_kernels.py --defaults``, docs/kernels.md)."""
    from ..kernels.configs import MAX_GROUP  # noqa: PLC0415 - the bundle's build and its test only
    from ..operators.engines.registry import engines  # noqa: PLC0415
    from ..operators.gpu.configurations import maps_configurations  # noqa: PLC0415 - loads the filters' modules

    auto = [e for e in engines() if e.device_kind == "gpu" and e.auto and "non-cartesian" in e.samplings]
    found = [config for engine in auto for dim in (2, 3) if dim in engine.dims
             for coils in range(1, MAX_GROUP + 1) for config in run_kernels(engine, dim, coils)]
    found += maps_configurations()
    return [(f, dict(d)) for f, d in dict.fromkeys((f, tuple(sorted(d.items()))) for f, d in found)]


def sources(source: Scan | TimeSeries) -> tuple[Scan, tuple[Scan, ...], TimeSeries | None]:
    """``(reference scan, frames, series)`` of what is reconstructed: a scan is its own one frame; a time
    series' reference is its first frame with the series' coil maps (settings are checked on it)."""
    if isinstance(source, TimeSeries):
        first = source.frames[0]
        reference = first if source.coil_maps is None else first.replace(coil_maps=source.coil_maps)
        return reference, source.frames, source
    return source, (source,), None


def plan(source: Scan | TimeSeries, options: Options, planner: Planner,
         planned: tuple[Device, type[Encoding], Plan] | None = None) -> Planned:
    """Plan: the device, the engine, the memory (``planned``, or ``planner``'s: refuse or batch coils), the
    off-resonance correction; start building this run's CUDA modules on threads."""
    scan, frames, series = sources(source)
    sense = scan.coil_maps is not None or options.maps.method is not None
    combine = "sense" if sense else ("rss" if scan.n_coils > 1 else "single")
    dev, engine, budget = planned or planner(scan, options.device, options.method, options.iterations, sense,
                                             preparation_of(scan, estimate_maps=options.maps.method))
    offres = None if scan.field_map is None else _correction(scan, options, dev)
    log.info("%s: matrix %s, %d coil(s), %d samples in %d frame(s); engine %s on %s, %d coil(s) per batch",
             scan.source, list(scan.matrix), scan.n_coils, sum(f.n_samples for f in frames), len(frames),
             engine.name, dev, budget.coil_batch)
    if dev.is_gpu:  # build this run's CUDA modules on threads while the data are uploaded
        prefetch([*run_kernels(engine, len(scan.matrix), budget.coil_batch),
                  *(offres.kernel_configs(sense) if offres is not None else ()),
                  *maps_kernels(options.maps.method, scan.n_coils)], dev)
    return Planned(scan, frames, series, sense, combine, dev, engine, budget, offres)


def _correction(scan: Scan, options: Options, dev: Device) -> OffresCorrection:
    """The off-resonance correction of a scan with a field map (its modules load only for such a scan)."""
    from ..operators.offres.setup import plan_correction  # noqa: PLC0415 - only for a scan with a field map

    return plan_correction(scan.field_map, scan.times, scan.n_coils, gpu=dev.is_gpu,
                           correction=options.settings.field_map_correction, segments=options.settings.segments,
                           iterations=options.iterations)


@contextlib.contextmanager
def held(options: Options, planned: Planned) -> Iterator[Context]:
    """The device for the run: on a GPU its lock (one reconstruction at a time per GPU and process: they share
    plans and work buffers), the device made current; the run's clock; and the host thread of the PSF lookup,
    joined at the end."""
    clock = Clock(planned.device, progress_callback(options.progress), options.iterations)
    with contextlib.ExitStack() as stack:
        if planned.device.is_gpu:
            stack.enter_context(gpu_lock(planned.device.index))
        stack.enter_context(planned.device.use())
        yield Context(clock, stack)


def _read(queue: list[tuple[str, Any]]) -> list[float]:
    """The reductions ``(kind, array)`` (``kind``: a :class:`~mri_recon.operators.reads.Scalars` method), read
    together as far as one read holds them."""
    values: list[float] = []
    for start in range(0, len(queue), Scalars.CAPACITY):
        reads = Scalars()
        for kind, array in queue[start:start + Scalars.CAPACITY]:
            getattr(reads, kind)(array)
        values += reads.read()
    return values


def _scales(frames: tuple[Scan, ...], kspaces: list[Any], maps: Any) -> tuple[float, float, float, list[Any]]:
    """The data's scale and the weights' (largest over every frame) and the peak of the scan's ``maps`` (1
    without), read together; each frame's weights divided by theirs (ones without) and their sum."""
    weighted = [f for f in frames if f.weights is not None]
    queue = [("largest", k) for k in kspaces] + [(kind, f.weights) for f in weighted for kind in ("largest", "total")]
    values = _read(queue + ([("rss_peak", maps)] if maps is not None else []))
    data_scale = power_of_two(max(values[:len(kspaces)]))
    maps_peak = values[-1] if maps is not None else 1.0
    weight_scale = 1.0
    if weighted:  # > 0 (a Scan refuses all-zero and negative weights); by a power of two: exact, and so the sums
        weight_scale = power_of_two(max(values[len(kspaces):len(queue):2]))
    totals = iter(values[len(kspaces) + 1:len(queue):2])
    weights = [(np.ones(f.n_samples, dtype=np.float32), float(f.n_samples)) if f.weights is None else
               (scaled(f.weights, 1.0 / weight_scale), next(totals) / weight_scale) for f in frames]
    return data_scale, weight_scale, maps_peak, weights


def upload(options: Options, planned: Planned) -> tuple[Uploaded, Maps]:
    """Upload each frame's k-space and trajectory and the scan's (series') maps once; the scales of the data and
    the weights and the peak of the maps, read together (:class:`~mri_recon.operators.reads.Scalars`); the
    weights divided by theirs, uploaded; the field map. The maps as given (none when they are estimated or
    absent) are returned apart from the data, so that no record keeps them once they are scaled."""
    dev, frames = planned.device, planned.frames
    kspaces = [to_device(f.kspace, dev) for f in frames]
    trajectories = [to_device(f.trajectory, dev) for f in frames]
    given = planned.scan.coil_maps if planned.sense and options.maps.method is None else None
    maps = None if given is None else to_device(given, dev)
    data_scale, weight_scale, maps_peak, weights = _scales(frames, kspaces, maps)
    data = tuple(FrameData(f, k, t, to_device(w, dev), w, total)
                 for f, k, t, (w, total) in zip(frames, kspaces, trajectories, weights))
    if planned.offres is not None:
        planned.offres.upload(dev)
    return Uploaded(data, data_scale, weight_scale), Maps(maps, peak=maps_peak)
