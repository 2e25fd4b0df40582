"""Iterative reconstruction: CG-SENSE with coil maps, per-coil Tikhonov least squares without.

One pipeline for the CPU and the GPU: resolve the device, check memory, upload once, form the right-hand side
``b = sum_c conj(S_c) F^H (W d_c)``, compute the Toeplitz PSF once, run CG on the normal operator
``A x = sum_c conj(S_c) F^H W F (S_c x) + lam_abs x`` (no sample is touched inside the loop), post-filter,
download once. Every stage is timed by one :class:`_Clock`.

The regularization weight ``lam`` is dimensionless: the absolute weight is ``lam_abs = lam * sum(w)``, the
peak of the PSF (the diagonal of F^H W F), so scaling the data scales the image and changes nothing else.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .backend import Device, device_memory, get_xp, synchronize, to_device, to_host
from .errors import InvalidDataError, SchemaError
from .io.cache import PsfCache, psf_key
from .operators import apply_adjoint, apply_psf, resolve
from .operators.toeplitz import kernel_spectrum, normal_operator
from .planner import Plan, host_memory_available, plan
from .scan import Scan
from .solvers.cg import cg

STAGES = ("upload", "coil_maps", "fhd", "psf", "iterations", "filter", "download")


@dataclass(frozen=True)
class Result:
    """The outcome of :func:`reconstruct`."""

    image: np.ndarray
    """complex64 ``matrix``: the reconstructed image (real-valued for ``combine == "rss"``)."""
    residuals: tuple[float, ...]
    """Relative CG residuals ``||b - A x|| / ||b||``; the first is that of the zero initial guess."""
    iterations: int
    """CG iterations run (``len(residuals) - 1``)."""
    timings: Mapping[str, float]
    """Seconds per stage: upload, fhd, psf, iterations, filter, download (device synchronized)."""
    device: str
    """Where it ran: ``"cpu"`` or ``"gpu:N"``."""
    parameters: Mapping[str, Any]
    """The settings used (scalars and strings), including the absolute Tikhonov weight ``lam_abs``."""
    combine: str
    """``"sense"`` (coil maps), ``"rss"`` (per-coil images, root-sum-of-squares) or ``"single"``."""


class _Clock:
    """Times the pipeline's stages (synchronizing the device) and reports progress on stderr."""

    def __init__(self, device: Device, progress: bool, iterations: int) -> None:
        self.device = device
        self.progress = progress
        self.iterations = iterations
        self.timings = dict.fromkeys(STAGES, 0.0)
        self._start = time.perf_counter()

    def say(self, line: str) -> None:
        if self.progress:
            print(line, file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self._start = time.perf_counter()
        yield
        synchronize(self.device)
        self.timings[name] += time.perf_counter() - self._start
        self.say(f"{name:<10}  {self.timings[name]:.3f} s")

    def iteration(self, iteration: int, x: Any, residual: float) -> None:
        """CG callback: one progress line per iteration."""
        del x
        self.say(f"iteration {iteration}/{self.iterations}  residual {residual:.1e}  "
                 f"{time.perf_counter() - self._start:.2f} s")


def memory_plan(scan: Scan, device: Device, iterations: int, sense: bool | None = None) -> Plan:
    """Check that the reconstruction fits the memory of ``device`` before anything is allocated.

    Uses :func:`mri_recon.planner.plan` with the host's available memory (CPU) or the GPU's free memory;
    raises :class:`~mri_recon.errors.ResourceError` naming the bytes needed and available. The plan's
    ``coil_batch`` bounds how many coils go through the Toeplitz FFTs at once.
    """
    if device.is_gpu:
        available, what = device_memory(device)[0], f"GPU memory ({device})"
    else:
        available, what = host_memory_available(), "host memory"
    sense = scan.coil_maps is not None if sense is None else sense
    return plan(scan.matrix, scan.n_coils, scan.n_samples, sense=sense,
                iterations=iterations, available_bytes=available, gpu=device.is_gpu, what=what)


def _rhs(engine: str, kspace: Any, trajectory: Any, weights: Any, maps: Any, matrix: tuple[int, ...],
         coil_batch: int) -> Any:
    """``sum_c conj(S_c) F^H (W d_c)`` (shape ``matrix``), or ``F^H (W d)`` per coil without maps."""
    xp = get_xp(kspace)
    weighted = kspace * weights
    if maps is None:
        return apply_adjoint(engine, weighted, trajectory, matrix)
    out = xp.zeros(matrix, dtype=np.complex64)
    for start in range(0, kspace.shape[0], coil_batch):
        part = slice(start, start + coil_batch)
        images = apply_adjoint(engine, weighted[part], trajectory, matrix)
        images *= xp.conj(maps[part])
        out += images.sum(axis=0)
    return out


def _point_spread(engine: str, trajectory: Any, weights: Any, matrix: tuple[int, ...], given: Any,
                  device: Device) -> Any:
    """The PSF on the 2x grid: ``given`` (a cached one, checked and uploaded) or computed now."""
    if given is None:
        return apply_psf(engine, trajectory, weights, matrix)
    shape = tuple(2 * n for n in matrix)
    if tuple(given.shape) != shape:
        raise SchemaError(f"psf must have shape {shape} (twice the matrix {list(matrix)}), "
                          f"found {tuple(given.shape)}")
    return to_device(given, device).astype(np.complex64, copy=False)


def _lookup_psf(psf_cache: PsfCache, scan: Scan) -> tuple[str, np.ndarray | None]:
    """The cache key of the scan's PSF and the cached PSF (None when absent or invalid)."""
    key = psf_key(scan.trajectory, scan.weights, scan.matrix)
    return key, psf_cache.load(key, tuple(2 * n for n in scan.matrix))


def _combine(x: Any, combine: str) -> Any:
    if combine == "rss":
        xp = get_xp(x)
        return xp.sqrt((x.real**2 + x.imag**2).sum(axis=0)).astype(np.complex64)
    if combine == "single":
        return x[0]
    return x


def reconstruct(scan: Scan, *, iterations: int = 30, tol: float = 1e-6, lam: float = 1e-3,
                filter_sigma: float | None = None, device: str | int | Device | None = "auto",
                progress: bool = True, method: str = "auto", psf: Any = None,
                psf_cache: PsfCache | None = None, estimate_maps: str | None = None) -> Result:
    """Reconstruct ``scan`` by conjugate gradients on the Toeplitz normal equations.

    Parameters
    ----------
    scan
        The validated scan; ``scan.weights`` (density compensation) are W, ones when absent.
    iterations
        Most CG iterations.
    tol
        Stop when the relative residual is at most this.
    lam
        Dimensionless Tikhonov weight relative to the PSF peak ``sum(w)``; ``lam_abs = lam * sum(w)``.
    filter_sigma
        Width in voxels of a Gaussian post-filter (:func:`mri_recon.filters.smooth`); None: no filter.
    device
        ``"auto" | "cpu" | "gpu" | "gpu:N"`` or a :class:`~mri_recon.backend.Device`.
    progress
        Print one line per stage and per iteration on stderr.
    method
        ``"auto" | "exact" | "nufft"`` for F^H and the PSF (see :mod:`mri_recon.operators`).
    psf
        A PSF computed before (e.g. from :class:`mri_recon.cache.PsfCache`) for this trajectory, these
        weights and this matrix, of shape ``2 * matrix``; None computes it.
    estimate_maps
        ``"walsh"`` or ``"espirit"``: estimate coil maps from the k-space centre on the device, from the
        data already uploaded (:func:`mri_recon.coilmaps.coil_maps_from_kspace`), instead of using
        ``scan.coil_maps``; None uses the scan's maps (or none).
    psf_cache
        A :class:`mri_recon.cache.PsfCache`: the PSF is read from it when an entry for this trajectory,
        these weights and this matrix exists (and is intact), else computed and stored in it.

    Returns
    -------
    Result
        The image (complex64 ``matrix``), residuals, timings and the settings used.
    """
    if lam < 0:
        raise InvalidDataError(f"lam must be >= 0, found {lam}")
    dev, engine = resolve(device, method)
    matrix = scan.matrix
    if estimate_maps not in (None, "walsh", "espirit"):
        raise InvalidDataError(f"estimate_maps must be None, 'walsh' or 'espirit', found {estimate_maps!r}")
    sense = scan.coil_maps is not None or estimate_maps is not None
    combine = "sense" if sense else ("rss" if scan.n_coils > 1 else "single")
    weights = scan.weights if scan.weights is not None else np.ones(scan.n_samples, dtype=np.float32)
    peak = float(np.sum(weights, dtype=np.float64))
    lam_abs = lam * peak
    budget = memory_plan(scan, dev, iterations, sense)
    clock = _Clock(dev, progress, iterations)
    with contextlib.ExitStack() as stack:
        stack.enter_context(dev.use())
        with clock.stage("upload"):
            kspace = to_device(scan.kspace, dev)
            trajectory = to_device(scan.trajectory, dev)
            w = to_device(weights, dev)
            maps = to_device(scan.coil_maps, dev) if sense and estimate_maps is None else None
        lookup = None
        if psf is None and psf_cache is not None:
            # Hashing the trajectory and reading the entry are host work: done on a thread while the device
            # computes F^H d (hashlib and file reads release the GIL).
            lookup = stack.enter_context(ThreadPoolExecutor(1)).submit(_lookup_psf, psf_cache, scan)
        if estimate_maps is not None:
            with clock.stage("coil_maps"):
                from .prep.coilmaps import coil_maps_from_kspace  # noqa: PLC0415 - only when estimating

                maps = coil_maps_from_kspace(kspace, trajectory, matrix, estimate_maps,
                                             weights=w if scan.weights is not None else None, device=dev)
                maps = maps.astype(np.complex64, copy=False)
        with clock.stage("fhd"):
            rhs = _rhs(engine, kspace, trajectory, w, maps, matrix, budget.coil_batch)
        with clock.stage("psf"):
            key = cache_state = None
            if lookup is not None:
                key, psf = lookup.result()
                cache_state = "hit" if psf is not None else "miss"
            point_spread = _point_spread(engine, trajectory, w, matrix, psf, dev)
            if cache_state == "miss":
                psf_cache.store(key, to_host(point_spread))
            spectrum = kernel_spectrum(point_spread)
            del point_spread
        with clock.stage("iterations"):
            operator = normal_operator(spectrum, coil_maps=maps, lam=lam_abs, coil_batch=budget.coil_batch)
            x, residuals = cg(operator, rhs, max_iterations=iterations, tolerance=tol,
                              callback=clock.iteration if progress else None)
            image = _combine(x, combine)
        if filter_sigma is not None:
            with clock.stage("filter"):
                from .filters import smooth  # noqa: PLC0415 - written beside this module, loaded on use

                image = smooth(image, filter_sigma, device=dev)
        with clock.stage("download"):
            host = np.ascontiguousarray(to_host(image), dtype=np.complex64)
    parameters = {"iterations": int(iterations), "tol": float(tol), "lam": float(lam), "lam_abs": lam_abs,
                  "filter_sigma": None if filter_sigma is None else float(filter_sigma), "method": engine,
                  "weights": "scan" if scan.weights is not None else "ones",
                  "psf": cache_state or ("given" if psf is not None else "computed"),
                  "coil_batch": int(budget.coil_batch), "coil_maps": estimate_maps or ("scan" if sense else "none")}
    return Result(image=host, residuals=residuals, iterations=len(residuals) - 1, timings=dict(clock.timings),
                  device=str(dev), parameters=parameters, combine=combine)
