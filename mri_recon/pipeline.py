"""The reconstruction pipeline: CG-SENSE with coil maps, per-coil Tikhonov least squares without.

One pipeline for the CPU and the GPU, a sequence of stages (:mod:`mri_recon.stages`): choose the device and
the encoding engine, check memory, upload once, estimate coil maps, scale the problem, form the right-hand side
``b = A^H W d`` with ``A = Encoding @ Sense``, build the engine's normal operator ``A^H W A + lam_abs I`` (the
Toeplitz PSF once; no sample is touched inside the loop), solve, combine, post-filter, download once. Every
stage is timed by one :class:`~mri_recon.progress.Clock`,
which logs it (``logging``, logger ``mri_recon.pipeline``: stages at INFO, iterations at DEBUG; silent unless
configured) and reports it to an optional progress callback.

Scale. The problem is solved in scaled units: data, weights and maps are divided by powers of two close to
their magnitudes (``max |d|``, ``max w`` and the largest root-sum-of-squares of the maps), and the image is
multiplied back. Powers of two are exact in floating point, so the result does not depend on the data's
scale, and float32 holds every intermediate value for data of any magnitude float32 can represent.

Regularization. ``lam`` is dimensionless, relative to the peak of the normal operator actually solved: its
largest diagonal entry ``max_n sum_c |S_c(n)|^2 * sum(w)`` (``sum(w)`` without maps). Scaling the data, the
maps or the weights by any factor scales the image by the implied factor and changes nothing else.
"""

from __future__ import annotations

import math
from typing import Any

from . import stages
from .arrays.backend import Device, blas_on_one_thread, device_memory
from .checks.scaling import power_of_two
from .errors import ResourceError
from .io.cache import PsfCache
from .io.frames import TimeSeries
from .operators.engines import Encoding, choose_engine
from .operators.engines.registry import sampling_of
from .planning.planner import (
    COMPLEX64,
    FLOAT32,
    HEADROOM,
    Plan,
    Preparation,
    host_memory_available,
    host_memory_limits,
    human_bytes,
    plan,
)
from .planning.preparation import coils_after, preparation_of
from .progress import STAGES, Progress, print_progress
from .result import Result
from .scan import Scan
from .settings import ReconSettings, fields_in, refuse_unknown
from .stages import SOLVER_KERNELS, gpu_lock

SOLVER_FIELDS = fields_in("solve", "device")
"""The settings :func:`reconstruct` takes as keywords."""

__all__ = ["SOLVER_KERNELS", "STAGES", "Result", "gpu_lock", "memory_plan", "plan_reconstruction", "plan_series",
           "power_of_two", "print_progress", "reconstruct", "run"]


def memory_plan(scan: Scan, device: Device, iterations: int, sense: bool | None = None,
                method: str = "auto", preparation: Preparation | None = None) -> Plan:
    """Check that the reconstruction fits the memory of ``device`` before anything is allocated.

    Uses :func:`mri_recon.planning.planner.plan` with the memory this process may use on the host (the least of
    ``MemAvailable``, its cgroup's limit and ``RLIMIT_AS``: :func:`~mri_recon.arrays.backend.host_memory_limits`) or
    the GPU's free memory; raises :class:`~mri_recon.errors.ResourceError` naming the bytes needed and
    available. The plan's ``coil_batch`` bounds how many coils go through the Toeplitz FFTs at once.
    ``preparation`` (:func:`~mri_recon.planning.preparation.preparation_of`) adds the preparation's stages; by default
    the scan's arrays that the run does not use are counted as held.
    """
    limit = None
    if device.is_gpu:
        available, what = device_memory(device)[0], f"GPU memory ({device})"
    else:
        available, what = host_memory_available(), "host memory"
        limits = host_memory_limits()
        tightest = min(limits, key=limits.get, default=None)
        if tightest is not None and limits[tightest] == available:  # named when it is the one read
            limit = f"the tightest limit: {tightest}"
    sense = scan.coil_maps is not None if sense is None else sense
    return plan(scan.matrix, scan.n_coils, scan.n_samples, sense=sense, iterations=iterations,
                available_bytes=available, gpu=device.is_gpu, what=what, method=method,
                preparation=preparation_of(scan) if preparation is None else preparation, limit=limit)


def plan_reconstruction(scan: Scan, device: str | int | Device | None = "auto", method: str = "auto",
                        iterations: int = 30, sense: bool | None = None,
                        preparation: Preparation | None = None) -> tuple[Device, type[Encoding], Plan]:
    """The device, the encoding engine and the memory plan of a reconstruction of ``scan``: the one estimate
    that :func:`reconstruct` acts on and ``mri-recon info`` reports.

    Parameters
    ----------
    scan
        The scan as it will be reconstructed (its shapes count, not its values).
    device, method
        As for :func:`reconstruct`; the engine is :func:`~mri_recon.operators.choose_engine`'s choice.
    iterations
        CG iterations (the time estimate scales with them).
    sense
        One image with coil maps (True) or one per coil (False); None: whether ``scan`` has maps.
    preparation
        What the preparation computes (:func:`~mri_recon.planning.preparation.preparation_of`); None: the scan's arrays
        only.

    Raises
    ------
    ResourceError
        The reconstruction does not fit the device's memory even one coil at a time.
    """
    coils = scan.n_coils if preparation is None else coils_after(preparation, scan.n_coils)  # coil compression
    dev, engine = choose_engine(device, method, problem=(scan.matrix, scan.n_samples, coils),
                                sampling=sampling_of(scan))
    return dev, engine, memory_plan(scan, dev, iterations, sense, engine.name, preparation)


def _series_bytes(series: TimeSeries, gpu: bool, splits: int) -> int:
    """What a time series keeps at once: every frame's Toeplitz spectrum (on a GPU also the batched normal
    operator's coil grids), the solver's vectors over all frames (x, r, p, A p, b and the previous b; frame by
    frame fewer), ``splits`` split, dual and update triples of frames' size per term of a joint solve (on a GPU
    twice: the temporaries of the ADMM iteration its CUDA graph keeps, beside an eager iteration's), the frames'
    data and the maps."""
    matrix, t, c = series.matrix, series.n_frames, series.n_coils
    n_vox, grid2 = math.prod(matrix), math.prod(matrix) * 2 ** len(matrix)
    per_frame = grid2 * COMPLEX64 * (1 + 3 * c if gpu else 1)
    vectors = 6 * t * n_vox * COMPLEX64
    triples = (6 if gpu else 3) * splits * t * n_vox * COMPLEX64
    data = sum(f.n_samples * (c * COMPLEX64 + (len(matrix) + 1) * FLOAT32) for f in series.frames)
    return int(t * per_frame + vectors + triples + data + c * n_vox * COMPLEX64)


def plan_series(series: TimeSeries, device: str | int | Device | None = "auto", method: str = "auto",
                iterations: int = 30, splits: int = 0) -> tuple[Device, type[Encoding], Plan]:
    """The device, the engine and the memory plan of a time series: one frame's stages
    (:func:`mri_recon.planning.planner.plan`) and, when its frames are solved together, what every frame keeps
    (``splits``: the frames-sized split variables of the temporal and spatial terms).

    Raises
    ------
    ResourceError
        It does not fit the device's (or host's) memory; nothing has been allocated.
    """
    dev, engine = choose_engine(device, method, problem=(series.matrix, series.samples_per_frame, series.n_coils),
                                sampling=sampling_of(series.frames[0]))
    available = device_memory(dev)[0] if dev.is_gpu else host_memory_available()
    what = f"GPU memory ({dev})" if dev.is_gpu else "host memory"
    frame = plan(series.matrix, series.n_coils, series.samples_per_frame, sense=True, iterations=iterations,
                 available_bytes=available, gpu=dev.is_gpu, what=what, method=engine.name)
    need = _series_bytes(series, dev.is_gpu, splits)
    if available is not None and need > available * HEADROOM:
        raise ResourceError(f"the time series needs {human_bytes(need)} of {what} ({series.n_frames} frames, matrix "
                            f"{list(series.matrix)}, {series.n_coils} coils) but {human_bytes(available)} are "
                            f"available; use fewer frames (--frames N) or coils")
    return dev, engine, frame


def reconstruct(scan: Scan | TimeSeries, settings: ReconSettings | None = None, *, progress: Progress | None = None,
                psf: Any = None, psf_cache: PsfCache | None = None, estimate_maps: str | None = None,
                maps_basis: Any = None, **keywords: Any) -> Result:
    """Reconstruct ``scan`` exactly as given (no preparation): CG on the Toeplitz normal equations
    (``regularizer="l2"``), total variation / l1-wavelets by their solvers, or for a
    :class:`~mri_recon.io.frames.TimeSeries` (its coil maps or ``estimate_maps``, every frame's weights) each
    frame as one scan or, with a temporal term, all frames together.

    ``settings`` (default: the defaults) with ``keywords`` changed: the ``solve`` and ``device`` fields of
    :class:`~mri_recon.settings.ReconSettings` (``iterations``, ``lam``, ``regularizer``, ``method``,
    ``device``, ``temporal``, ...), which say what each one does. What the caller computed or wants told:
    ``progress`` (a callback ``(stage, iteration, total, value)`` or True), ``psf`` (this trajectory's PSF from
    :func:`mri_recon.psf`) or ``psf_cache`` (:mod:`mri_recon.io.cache`), ``estimate_maps`` (``"walsh" |
    "espirit"``) and ``maps_basis`` (the preparation's coil-map stage,
    :class:`mri_recon.prep.maps_stage.CoilMapEstimate`); :class:`mri_recon.stages.Options` states each.

    Returns the :class:`~mri_recon.result.Result`: the complex64 image, residuals, timings, settings used.
    """
    refuse_unknown(keywords, SOLVER_FIELDS, "pipeline.reconstruct")
    base = settings if settings is not None else ReconSettings()
    keywords = series_keywords(scan, keywords) if settings is None else keywords
    settings = base.replace(**keywords) if keywords else base
    options = options_of(scan, settings, progress=progress, psf=psf, psf_cache=psf_cache,
                         estimate_maps=estimate_maps, maps_basis=maps_basis)
    return run(scan, options)


def options_of(source: Scan | TimeSeries, settings: ReconSettings, **runtime: Any) -> stages.Options:
    """:meth:`stages.Options.of <mri_recon.stages.Options.of>` for a scan or a time series."""
    reference, frames, series = stages.sources(source)
    if series is not None:
        stages.check_frames(frames, series.source)
    return stages.Options.of(reference, settings, series=series is not None, frames=len(frames), **runtime)


def series_splits(series: TimeSeries, settings: ReconSettings) -> int:
    """The frames-sized split variables of a joint solve's terms (none when each frame is solved alone)."""
    from .solvers.regularizers import regularizer  # noqa: PLC0415
    from .solvers.temporal_terms import temporal_term  # noqa: PLC0415

    term = temporal_term(settings.temporal)
    if not term.joint:
        return 0
    spatial = regularizer(settings.regularizer)
    if not spatial.sparse:
        return term.splits
    shape = (series.n_frames, *series.matrix)
    sparsity, _ = spatial.sparsity(shape, len(series.matrix), anisotropic=settings.anisotropic)
    return term.splits + math.prod(sparsity.shape) // math.prod(shape)


def series_keywords(source: Scan | TimeSeries, keywords: dict[str, Any]) -> dict[str, Any]:
    """``keywords`` with a joint time series' own number of iterations when none is given
    (:data:`mri_recon.solvers.temporal.ITERATIONS_DEFAULT`, where it has converged; one scan's 30 stop early),
    as the command line does."""
    from .solvers.temporal import ITERATIONS_DEFAULT  # noqa: PLC0415
    from .solvers.temporal_terms import temporal_term  # noqa: PLC0415

    joint = temporal_term(keywords.get("temporal", ReconSettings().temporal)).joint
    if isinstance(source, TimeSeries) and joint and "iterations" not in keywords:
        return {**keywords, "iterations": ITERATIONS_DEFAULT}
    return keywords


@blas_on_one_thread
def run(scan: Scan | TimeSeries, options: stages.Options, planned: tuple[Device, type[Encoding], Plan] | None = None,
        prepared_s: float | None = None) -> Result:
    """The stages of :func:`reconstruct` with its settings checked (:meth:`stages.Options.of
    <mri_recon.stages.Options.of>`). ``planned``: the device, engine and memory plan that
    :func:`plan_reconstruction` gave the caller for this scan (:func:`mri_recon.api.plan_prepared`, which also
    counts the preparation), used instead of planning again; ``prepared_s``: the seconds the caller's
    preparation of ``scan`` took (device synchronized), the run's ``prepare`` stage."""
    if planned is None and isinstance(scan, TimeSeries):
        planned = plan_series(scan, options.device, options.method, options.iterations,
                              series_splits(scan, options.settings))
    run_plan = stages.plan(scan, options, plan_reconstruction, planned)
    with stages.held(options, run_plan) as context:
        clock = context.clock
        if prepared_s is not None:
            clock.record("prepare", prepared_s)
        with clock.stage("upload"):
            uploaded, maps = stages.upload(options, run_plan)
        if options.maps.method is not None:
            with clock.stage("coil_maps"):
                maps = stages.coil_maps(options, run_plan, uploaded.data)
        maps = stages.scale_maps(options, run_plan, maps)
        encoded = stages.encoding(options, run_plan, uploaded.data, context.stack)
        with clock.stage("fhd"):
            rhs = stages.right_hand_side(options, run_plan, uploaded, maps, encoded)
        with clock.stage("psf"):
            normals = stages.normal_operator(options, run_plan, uploaded, maps, encoded, rhs.peaks)
        with clock.stage("iterations"):
            solution = stages.solve(options, run_plan, clock, uploaded, maps, encoded, rhs, normals)
            image = stages.combine(options, run_plan, solution.x, uploaded.data_scale, maps.scale)
        if options.filter_sigma is not None:
            with clock.stage("filter"):
                image = stages.post_filter(options, run_plan, image)
        with clock.stage("download"):
            host = stages.download(image)
    return stages.result(options, run_plan, clock.timings, encoded, normals, solution, host)
