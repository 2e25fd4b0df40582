"""The reconstruction pipeline: CG-SENSE with coil maps, per-coil Tikhonov least squares without.

One pipeline for the CPU and the GPU: choose the device and the encoding engine, check memory, upload once,
scale the problem, form the right-hand side ``b = A^H W d`` with ``A = Encoding @ Sense``, compute the Toeplitz
PSF once, run CG on the normal operator ``A^H W A + lam_abs I`` (no sample is touched inside the loop),
post-filter, download once. Every stage is timed by one :class:`~mri_recon.progress.Clock`,
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

import contextlib
import logging
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .backend import Device, blas_on_one_thread, device_memory, get_xp, to_device, to_host
from .errors import InvalidDataError, SchemaError
from .io.cache import PsfCache, psf_key
from .kernels import prefetch
from .operators.base import Sense
from .operators.cartesian import cartesian_engine
from .operators.encoding import Encoding, choose_engine
from .operators.memo import spectrum_memo
from .operators.offres_setup import CORRECTIONS, plan_correction
from .operators.toeplitz import kernel_spectrum, normal_operator
from .planner import Plan, Preparation, host_memory_available, host_memory_limits, plan
from .prep_memory import preparation_of
from .progress import STAGES, Clock, Progress, print_progress, progress_callback
from .result import Result
from .scaling import largest, power_of_two, rescale, unit_scale
from .scan import Scan
from .solvers.cg import cg
from .solvers.sparse import check_sparse, data_energy, resolve_lam, solve_regularized
from .validation import check_field_map_pair

__all__ = ["STAGES", "SOLVER_KERNELS", "memory_plan", "plan_reconstruction", "power_of_two", "print_progress",
           "reconstruct"]

log = logging.getLogger(__name__)


_GPU_LOCKS: dict[int, threading.RLock] = {}
_GPU_LOCKS_GUARD = threading.Lock()


def gpu_lock(index: int) -> threading.RLock:
    """The lock a GPU reconstruction holds on GPU ``index``: threads of one process that reconstruct on one
    GPU take turns, because they share its cuFFT plans, the NUFFT plan and work buffers kept by
    :mod:`mri_recon.operators.memo` and the kernels' constant memory. Processes (Dask workers) are unaffected."""
    with _GPU_LOCKS_GUARD:
        return _GPU_LOCKS.setdefault(index, threading.RLock())


SOLVER_KERNELS = (("toeplitz.cu", {}), ("cg.cu", {}))
"""The CUDA modules of the fused Toeplitz normal operator and the CG loop (every GPU reconstruction)."""


def _rss_peak(maps: Any) -> float:
    """``max_n sqrt(sum_c |S_c(n)|^2)`` of coil maps ``(C, *matrix)``, without overflow or underflow (the
    squares are taken of the maps divided by a power of two near their largest component)."""
    xp = get_xp(maps)
    unit, scale = unit_scale(maps)
    return scale * math.sqrt(float(xp.max((unit.real ** 2 + unit.imag ** 2).sum(axis=0))))


def memory_plan(scan: Scan, device: Device, iterations: int, sense: bool | None = None,
                method: str = "auto", preparation: Preparation | None = None) -> Plan:
    """Check that the reconstruction fits the memory of ``device`` before anything is allocated.

    Uses :func:`mri_recon.planner.plan` with the memory this process may use on the host (the least of
    ``MemAvailable``, its cgroup's limit and ``RLIMIT_AS``: :func:`~mri_recon.backend.host_memory_limits`) or
    the GPU's free memory; raises :class:`~mri_recon.errors.ResourceError` naming the bytes needed and
    available. The plan's ``coil_batch`` bounds how many coils go through the Toeplitz FFTs at once.
    ``preparation`` (:func:`~mri_recon.prep_memory.preparation_of`) adds the preparation's stages; by default
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
        What the preparation computes (:func:`~mri_recon.prep_memory.preparation_of`); None: the scan's arrays
        only.

    Raises
    ------
    ResourceError
        The reconstruction does not fit the device's memory even one coil at a time.
    """
    dev, engine = choose_engine(device, method, problem=(scan.matrix, scan.n_samples, scan.n_coils))
    if method == "auto" and scan.attrs.get("sampling") == "cartesian":  # FFT engine: mri_recon.operators.cartesian
        engine = cartesian_engine(dev.is_gpu)
    return dev, engine, memory_plan(scan, dev, iterations, sense, getattr(engine, "plan_method", engine.name),
                                    preparation)


def _rhs(encoding: Encoding, weighted: Any, maps: Any, coil_batch: int) -> Any:
    """``A^H (W d) = sum_c conj(S_c) F^H (W d_c)`` (shape ``matrix``), or ``F^H (W d)`` per coil without maps.

    Coils go through F^H ``coil_batch`` at a time, which bounds the memory of the coil images.
    """
    xp = get_xp(weighted)
    if maps is None:
        return encoding.batched(weighted.shape[0]).H(weighted)
    out = xp.zeros(encoding.matrix, dtype=np.complex64)
    for start in range(0, weighted.shape[0], coil_batch):
        part = slice(start, start + coil_batch)
        images = encoding.batched(weighted[part].shape[0]).H(weighted[part])
        out += Sense(maps[part]).H(images)
    return out


def _point_spread(encoding: Encoding, weights: Any, given: Any, device: Device) -> Any:
    """The PSF on the 2x grid: ``given`` (a cached one, checked and uploaded) or computed now."""
    if given is None:
        return encoding.psf(weights)
    shape = tuple(2 * n for n in encoding.matrix)
    if tuple(given.shape) != shape:
        raise SchemaError(f"psf must have shape {shape} (twice the matrix {list(encoding.matrix)}), "
                          f"found {tuple(given.shape)}")
    return to_device(given, device).astype(np.complex64, copy=False)


def _lookup_psf(psf_cache: PsfCache, trajectory: np.ndarray, weights: np.ndarray | None,
                matrix: tuple[int, ...], engine: str) -> tuple[str, np.ndarray | None]:
    """The cache key of the PSF of these (scaled) weights by ``engine`` and the cached PSF (None when absent
    or refused)."""
    key = psf_key(trajectory, weights, matrix, engine)
    return key, psf_cache.load(key, tuple(2 * n for n in matrix))


def _combine(x: Any, combine: str, basis: Any = None) -> tuple[Any, float]:
    """The image from CG's solution and the power of two it is to be multiplied by: itself (SENSE), the
    root-sum-of-squares of the per-coil images (taken in the receiver's channels when ``basis`` takes the
    whitened channels back there), or the one image. The basis enters divided by a power of two near its
    largest entry (:func:`_unit_basis`), so that no square over- or underflows whatever the noise's scale."""
    xp = get_xp(x)
    unit, scale = _unit_basis(basis)
    if combine == "rss":
        if basis is not None:
            x = (xp.asarray(unit) @ x.reshape(x.shape[0], -1)).reshape(x.shape)
        return xp.sqrt((x.real**2 + x.imag**2).sum(axis=0)).astype(np.complex64), scale
    if combine == "single":
        return (x[0] * np.float32(abs(complex(unit.reshape(-1)[0]))) if basis is not None else x[0]), scale
    return x, scale


def _unit_basis(basis: Any) -> tuple[Any, float]:
    """``(basis / s, s)`` as complex64 NumPy with ``s`` a power of two near the basis' largest entry
    (``(None, 1.0)`` without a basis): the receiver basis scales with the noise, by any factor."""
    if basis is None:
        return None, 1.0
    unit, scale = unit_scale(np.asarray(to_host(basis), dtype=np.complex128))
    return unit.astype(np.complex64), scale


@blas_on_one_thread
def reconstruct(scan: Scan, *, iterations: int = 30, tol: float = 1e-6, lam: float | None = None,
                filter_sigma: float | None = None, device: str | int | Device | None = "auto",
                progress: Progress | None = None, method: str = "auto", psf: Any = None,
                psf_cache: PsfCache | None = None, estimate_maps: str | None = None,
                maps_basis: Any = None, regularizer: str = "l2", rho: float | None = None,
                inner_iterations: int | None = None, anisotropic: bool = False, solver: str | None = None,
                field_map_correction: str = "auto", segments: int | None = None) -> Result:
    """Reconstruct ``scan`` by conjugate gradients on the Toeplitz normal equations, or with total variation
    or l1-wavelet regularization (``regularizer="tv" | "wavelet"``: :mod:`mri_recon.solvers.sparse`, whose
    ``rho``, ``inner_iterations``, ``anisotropic`` and ``solver`` it takes; ``iterations`` are then outer).

    Parameters
    ----------
    scan
        The validated scan; ``scan.weights`` (density compensation) are W, ones when absent.
    iterations
        Most CG iterations.
    tol
        Stop when the relative residual is at most this.
    lam
        Dimensionless weight. l2: Tikhonov's, relative to the largest diagonal entry of the normal operator
        (``max_n sum_c |S_c(n)|^2 * sum(w)``; ``sum(w)`` without maps): see the module docstring; tv and
        wavelet: relative to ``max |A^H W d|``. None: the regularizer's default for a scan with or without
        weights (:data:`mri_recon.solvers.sparse.LAM_DEFAULTS`: 1e-3 for l2), recorded in ``parameters["lam"]``.
    filter_sigma
        Width in voxels of a Gaussian post-filter (:func:`mri_recon.filters.smooth`); None: no filter.
    device
        ``"auto" | "cpu" | "gpu" | "gpu:N"`` or a :class:`~mri_recon.backend.Device`.
    progress
        None, or a callable ``progress(stage, iteration, total, residual)``: called with
        ``(stage, None, None, None)`` when a stage ends (in the order of ``STAGES``, skipping stages not run)
        and with ``("iterations", k, iterations, residual_k)`` after CG iteration k. On the GPU the iteration
        calls come in batches at the solver's residual checks (no extra read-back). ``True`` prints those
        events on stderr (:func:`print_progress`); ``False`` is None. Without it the library prints nothing:
        stage timings and iterations are ``logging`` records of ``mri_recon.pipeline`` at INFO and DEBUG.
    method
        ``"auto" | "exact" | "nufft"`` for F^H and the PSF (see :func:`mri_recon.operators.choose_engine`:
        on a GPU, ``"auto"`` picks the exact kernels or the GPU NUFFT by predicted time). The engine used is
        ``Result.parameters["method"]``.
    psf
        The PSF of this trajectory, the scan's weights and this matrix, computed before by
        :func:`mri_recon.psf` (``psf(scan.trajectory, scan.matrix, scan.weights)``), of shape ``2 * matrix``;
        None computes it (or takes it from ``psf_cache``).
    estimate_maps
        ``"walsh"`` or ``"espirit"``: estimate coil maps from the k-space centre on the device, from the
        data already uploaded (:func:`mri_recon.prep.coilmaps.coil_maps_from_kspace`), instead of using
        ``scan.coil_maps``; None uses the scan's maps (or none).
    maps_basis
        With prewhitened data and no maps from the file: the ``(C, C)`` Cholesky factor of the noise
        covariance (:func:`mri_recon.prep.noise.receiver_basis`). Estimated maps are then normalized in the
        receiver's channels, and per-coil images are combined there, like a reconstruction with maps from a
        file, so the image has the same scale whichever maps (or none) are used.
    psf_cache
        A :class:`mri_recon.io.cache.PsfCache`: for the exact engines the PSF is read from it when an entry
        for this trajectory, these weights, this matrix, this engine and this mri-recon version exists and
        passes the cache's checks (its own, intact, bound to its key: :mod:`mri_recon.io.cache`), else computed
        and stored in it; a refused entry is logged as a warning and never changes the image. The GPU NUFFT
        does not use the disk (it computes a PSF faster than a read). On a GPU, a cache also turns on
        :mod:`mri_recon.operators.memo`: the last trajectory's encoding and spectrum stay on the device, and a
        scan with a bit-identical trajectory and weights reuses them (``parameters["psf"] == "memory"``).
    field_map_correction, segments
        With a ``field_map`` (and ``times``) in the scan: ``"exact"``, ``"segmented"`` (L = ``segments``, None:
        chosen for interpolation error <= 1e-3) or ``"auto"`` (:mod:`mri_recon.operators.offres_setup`).
        ``Result.parameters["field_map_correction"]`` records ``"exact"``, ``"time-segmented (L=..)"`` or
        ``"none"``. Not with ``regularizer="tv" | "wavelet"``.

    Returns
    -------
    Result
        The image (complex64 ``matrix``), residuals, timings and the settings used.
    """
    lam = resolve_lam(regularizer, lam, weighted=scan.weights is not None)
    sparse = check_sparse(regularizer, rho, inner_iterations, anisotropic, solver, scan.weights is not None,
                          scan.matrix)
    matrix = scan.matrix
    if estimate_maps not in (None, "walsh", "espirit"):
        raise InvalidDataError(f"estimate_maps must be None, 'walsh' or 'espirit', found {estimate_maps!r}")
    check_field_map_pair(scan.field_map, scan.times, scan.source)
    if field_map_correction not in CORRECTIONS:
        raise InvalidDataError(f"unknown field-map correction {field_map_correction!r}: expected one of "
                               f"{', '.join(CORRECTIONS)}")
    if segments is not None and scan.field_map is None:
        raise InvalidDataError(f"{scan.source}: segments (L = {segments}) apply to off-resonance correction, and "
                               f"the scan has no field map")
    if scan.field_map is not None and sparse:
        raise InvalidDataError(f"{scan.source}: off-resonance correction runs with the l2 regularizer only, not "
                               f"{regularizer}; reconstruct with l2, or drop the field map on purpose (--no-field-map)")
    if maps_basis is not None and scan.coil_maps is not None and estimate_maps is None:
        raise InvalidDataError("maps_basis applies to estimated coil maps and to per-coil images, not to the "
                               "scan's own coil maps (they are whitened with the data)")
    sense = scan.coil_maps is not None or estimate_maps is not None
    combine = "sense" if sense else ("rss" if scan.n_coils > 1 else "single")
    # weights scaled by a power of two near their largest value (the PSF cache keys the scaled weights)
    if scan.weights is None:
        weights, weight_scale = np.ones(scan.n_samples, dtype=np.float32), 1.0
    else:
        weight_scale = power_of_two(float(scan.weights.max()))  # > 0: a Scan refuses all-zero weights
        weights = (scan.weights.astype(np.float64) / weight_scale).astype(np.float32)
    weight_sum = float(np.sum(weights, dtype=np.float64))
    dev, engine, budget = plan_reconstruction(scan, device, method, iterations, sense,
                                              preparation_of(scan, estimate_maps=estimate_maps))
    if scan.field_map is not None and psf is not None:
        raise InvalidDataError("a PSF applies to the model without off-resonance; with a field map leave psf=None")
    offres = None if scan.field_map is None else plan_correction(
        scan.field_map, scan.times, scan.n_coils, gpu=dev.is_gpu, correction=field_map_correction,
        segments=segments, iterations=iterations)
    log.info("%s: matrix %s, %d coil(s), %d samples; engine %s on %s, %d coil(s) per batch", scan.source,
             list(matrix), scan.n_coils, scan.n_samples, engine.name, dev, budget.coil_batch)
    if dev.is_gpu:  # build this run's CUDA modules on threads while the data are uploaded
        prefetch([*engine.kernel_configs(len(matrix), budget.coil_batch), *SOLVER_KERNELS,
                  *(offres.kernel_configs(sense) if offres is not None else ())], dev)
    clock = Clock(dev, progress_callback(progress), iterations)
    with contextlib.ExitStack() as stack:
        if dev.is_gpu:  # one reconstruction at a time per GPU and process: they share plans and work buffers
            stack.enter_context(gpu_lock(dev.index))
        stack.enter_context(dev.use())
        with clock.stage("upload"):
            kspace = to_device(scan.kspace, dev)
            trajectory = to_device(scan.trajectory, dev)
            w = to_device(weights, dev)
            maps = to_device(scan.coil_maps, dev) if sense and estimate_maps is None else None
            data_scale = power_of_two(largest(kspace))
            if offres is not None:
                offres.upload(dev)
        basis_scale = 1.0  # estimated maps in the receiver's basis: the maps are those returned / basis_scale
        # the last trajectory's encoding and spectrum, still on this GPU (a bit-identical trajectory and weights)
        memo = spectrum_memo(dev) if psf_cache is not None and psf is None and dev.is_gpu and not offres and \
            not hasattr(engine, "mask_spectrum") else None  # the FFT engines' mask costs less than a lookup
        kept = memo.lookup(engine.name, matrix, trajectory, w) if memo is not None else None
        encoding = engine(trajectory, matrix, scan.n_coils) if kept is None else kept[0].batched(scan.n_coils)
        encoding = encoding if offres is None else offres.encoding(encoding)
        lookup = None
        # The GPU NUFFT computes a PSF about as fast as the cache hashes, reads and checks one, or much faster
        # (H200: 12.4 ms per 2D reconstruction with a cache hit, 12.2 ms without; at 128^3 the PSF stage
        # takes 206 ms from the cache, 9 ms computed): the cache serves the exact engines only.
        cache_used = psf_cache is not None and encoding.name not in ("gpu-nufft", "fft", "gpu-fft") and offres is None
        if psf is None and cache_used and kept is None:
            # Hashing the trajectory and reading the entry are host work: done on a thread while the device
            # computes F^H d (hashlib and file reads release the GIL).
            key_weights = weights if scan.weights is not None else None
            lookup = stack.enter_context(ThreadPoolExecutor(1)).submit(
                _lookup_psf, psf_cache, scan.trajectory, key_weights, matrix, encoding.name)
        if estimate_maps is not None:
            with clock.stage("coil_maps"):
                from .prep.coilmaps import coil_maps_from_kspace  # noqa: PLC0415 - only when estimating

                if scan.attrs.get("sampling") == "cartesian":  # from the ACS region (mri_recon.prep.cartesian_maps)
                    from .prep.cartesian_maps import cartesian_coil_maps as coil_maps_from_kspace  # noqa: PLC0415
                maps = coil_maps_from_kspace(kspace, trajectory, matrix, estimate_maps,
                                             weights=w if scan.weights is not None else None, device=dev)
                maps = maps.astype(np.complex64, copy=False)
                if maps_basis is not None:
                    maps, basis_scale = _normalize_in_basis(maps, maps_basis)
        maps_scale = 1.0  # the maps solved with are the maps divided by maps_scale (a power of two)
        if maps is not None:
            maps_peak = _rss_peak(maps)
            if maps_peak == 0.0:
                raise InvalidDataError(f"{scan.source}: the coil maps are zero everywhere")
            unit = power_of_two(maps_peak)
            if unit != 1.0:
                maps = maps * np.float32(1.0 / unit)
            maps_scale = unit / basis_scale
        with clock.stage("fhd"):
            weighted = kspace * (w * np.float32(1.0 / data_scale))
            rhs = _rhs(encoding, weighted, maps, budget.coil_batch)
            energy = data_energy(kspace, weighted, data_scale) if sparse else 0.0
            del weighted
        # lam relative to the largest diagonal entry of the normal operator solved (scaled units)
        peak = weight_sum * (_rss_peak(maps) ** 2 if maps is not None else 1.0)
        with clock.stage("psf"):
            key = cache_state = operator = None
            if offres is not None:  # segment PSFs (time-segmented) or nothing (exact: A and A^H every iteration)
                operator = offres.normal(encoding, w, coil_maps=maps, lam=lam * peak, coil_batch=budget.coil_batch)
            elif kept is not None:
                spectrum, cache_state = kept[1], "memory"
            elif maps is not None and psf is None and hasattr(encoding, "mask_spectrum"):  # Cartesian SENSE:
                spectrum = encoding.mask_spectrum(w)  # F^H W F on the image grid, no 2x padding
            else:
                given = None if psf is None else psf / np.float32(weight_scale)  # the caller's: unscaled weights
                if lookup is not None:
                    key, given = lookup.result()  # the cache's: scaled weights
                    cache_state = "hit" if given is not None else "miss"
                if cache_state == "miss":  # computed by one process at a time; the others wait, then read it
                    given, cache_state = psf_cache.fill(key, tuple(2 * n for n in matrix),
                                                        lambda: to_host(encoding.psf(w)))
                point_spread = _point_spread(encoding, w, given, dev)
                spectrum = kernel_spectrum(point_spread)
                del point_spread
                if memo is not None:
                    memo.store(engine.name, matrix, trajectory, w, encoding, spectrum)
        with clock.stage("iterations"):
            if sparse:
                x, residuals, extra = solve_regularized(spectrum, maps, rhs, lam, peak, energy, iterations,
                                                        budget.coil_batch, clock.callback(), **sparse)
            else:
                if operator is None:
                    operator = normal_operator(spectrum, coil_maps=maps, lam=lam * peak, coil_batch=budget.coil_batch)
                x, residuals = cg(operator, rhs, max_iterations=iterations, tolerance=tol, callback=clock.callback())
                extra = {"regularizer": "l2"}
            image, combine_scale = _combine(x, combine, maps_basis if not sense else None)
            # back to the data's units (powers of two: exact)
            image = rescale(image, data_scale * combine_scale / maps_scale)
            if not bool(get_xp(image).isfinite(image).all()):
                raise InvalidDataError(f"{scan.source}: the image exceeds the float32 range (the k-space is near "
                                       f"float32's largest values and the coil maps are small); scale the data down")
        if filter_sigma is not None:
            with clock.stage("filter"):
                from .filters import smooth  # noqa: PLC0415 - loaded on use

                image = smooth(image, filter_sigma, device=dev)
        with clock.stage("download"):
            host = np.ascontiguousarray(to_host(image), dtype=np.complex64)
    lam_abs = lam * peak * weight_scale * maps_scale ** 2 if not sparse else extra.pop("lam_abs") * (
        weight_scale * maps_scale * data_scale)  # max|A^H W d| in the data's units
    parameters = {"iterations": int(iterations), "tol": float(tol), "lam": float(lam), "lam_abs": lam_abs,
                  "filter_sigma": None if filter_sigma is None else float(filter_sigma), "method": encoding.name,
                  "weights": "scan" if scan.weights is not None else "ones",
                  "psf": cache_state or ("given" if psf is not None else
                                         "computed (disk cache not used by the GPU NUFFT)" if psf_cache is not None
                                         else "computed"),
                  "coil_batch": int(budget.coil_batch), "coil_maps": estimate_maps or ("scan" if sense else "none"),
                  "field_map_correction": offres.label if offres else scan.attrs.get("field_map_correction", "none"),
                  **extra}
    return Result(image=host, residuals=residuals, iterations=iterations if sparse else len(residuals) - 1,
                  timings=dict(clock.timings),
                  device=str(dev), parameters=parameters, combine=combine)


def _normalize_in_basis(maps: Any, basis: Any) -> tuple[Any, float]:
    """Estimated maps ``S`` (unit root-sum-of-squares in the channels they were estimated in) rescaled per
    voxel so that ``basis @ S`` has unit root-sum-of-squares: the convention of maps given in the receiver's
    channels and then whitened. ``basis`` is the ``(C, C)`` matrix taking whitened channels back to receiver
    channels (the Cholesky factor L of the noise covariance). Returns ``(S', s)``: the maps are ``S' / s``,
    ``s`` a power of two near L's largest entry (L scales with the noise, which float32's squares do not
    survive beyond about 1e+-19)."""
    xp = get_xp(maps)
    unit, scale = _unit_basis(basis)
    flat = maps.reshape(maps.shape[0], -1)
    receiver = xp.asarray(unit) @ flat
    rss = xp.sqrt((receiver.real ** 2 + receiver.imag ** 2).sum(axis=0))
    inverse = xp.where(rss > 0, 1.0 / xp.where(rss > 0, rss, 1), 0).astype(np.float32)
    return (flat * inverse).reshape(maps.shape), scale
