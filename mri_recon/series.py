"""Time-resolved reconstruction: every frame of a :class:`~mri_recon.io.frames.TimeSeries` in one problem.

:func:`reconstruct_series` prepares the frames (prewhitening with the shared noise, each frame's own density
weights: its file weights, else Pipe-Menon of its trajectory, or the ``dcf`` choice), takes one set of coil
maps for all frames (the series' maps, else estimated once from the time-averaged data, all spokes), plans the
memory of all frames (:func:`plan_series`: refused before anything is allocated when it does not fit), then
per frame uploads the data, forms ``b_t = A_t^H W_t d_t`` and the Toeplitz spectrum, and solves

    min_x  sum_t ||W_t^(1/2)(A_t x_t - d_t)||^2 + lam_t ||D_t x||_1 + lam_s R_s(x)

by :mod:`mri_recon.solvers.temporal` (ADMM or primal-dual); ``temporal="none"`` with ``regularizer="l2"``
is frame-by-frame CG-SENSE.

Scale: as in :mod:`mri_recon.pipeline`, data, weights and maps are divided by powers of two near their
largest values; ``temporal_lam`` and ``lam`` (tv, wavelet) are relative to ``max |A^H W d|`` over all frames,
``rho`` and Tikhonov's ``lam`` (l2) to the largest diagonal entry of the frames' normal operators. Scaling
the data by any factor scales the frames by it and changes nothing else.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .backend import Device, blas_on_one_thread, device_memory, get_xp, host_memory_available, to_device, to_host
from .errors import InvalidDataError, ResourceError
from .io.frames import TimeSeries
from .operators.base import Sense
from .operators.engines import choose_engine
from .operators.normal.toeplitz import kernel_spectrum, normal_operator
from .planner import COMPLEX64, FLOAT32, HEADROOM, human_bytes, plan
from .prep import prepare_scan
from .scaling import largest, power_of_two, rescale, unit_scale
from .solvers.cg import cg
from .solvers.sparse import data_energy, resolve_lam, sparsity_of
from .solvers.temporal import SOLVERS, BatchedSeriesNormal, Term, joint_admm, joint_pdhg, time_term

__all__ = ["SeriesResult", "TEMPORAL", "TEMPORAL_LAM_DEFAULT", "plan_series", "prepare_series",
           "reconstruct_series"]

log = logging.getLogger(__name__)

TEMPORAL = ("tv", "none")
TEMPORAL_LAM_DEFAULT = 0.005
"""``temporal_lam`` when none is given: relative to ``max |A^H W d|``, the lowest NRMSE after 100 ADMM
iterations in ``scripts/bench_temporal.py`` (128^2 beating phantom, 8 coils, 21 spokes per frame, SNR 30; of
0.0025, 0.005, 0.01, 0.02, 0.04: docs/temporal.md)."""
RHO_DEFAULT = {"admm": 0.5}
"""ADMM's penalty relative to the normal operators' peak (docs/temporal.md)."""


@dataclass(frozen=True)
class SeriesResult:
    """The outcome of :func:`reconstruct_series`."""

    image: np.ndarray = field(repr=False)
    """complex64 ``(T, *matrix)``: the frames, time first."""
    history: tuple[float, ...]
    """Relative objective at the solver's checks (CG: the largest relative residual of any frame)."""
    iterations: int
    timings: dict[str, float]
    device: str
    parameters: dict[str, Any]
    labels: tuple[int, ...]
    """Each frame's repetition / phase, or its number."""
    axis: str
    frame_duration_s: float | None = None
    ground_truth: np.ndarray | None = field(default=None, repr=False)

    def nrmse(self) -> float | None:
        """``||image - truth|| / ||truth||`` over all frames, magnitudes (estimated maps carry a phase)."""
        if self.ground_truth is None:
            return None
        a, b = np.abs(self.image.astype(np.complex128)), np.abs(self.ground_truth.astype(np.complex128))
        return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))


def plan_series(series: TimeSeries, device: Device, *, iterations: int, terms: int, spatial_ndim: int = 0,
                method: str = "auto") -> dict[str, int]:
    """Bytes the joint reconstruction holds, by stage: one frame's F^H d / PSF stages
    (:func:`mri_recon.planner.plan`), plus what every frame keeps (its Toeplitz spectrum; on a GPU also
    three coil grids per frame: the batched normal operator's padded products, their FFT and the crop) and
    the solver's vectors over all frames (x, r, p, A p, b and the previous b, a split and a dual per temporal
    term and ``spatial_ndim`` of each per spatial term).

    Raises
    ------
    ResourceError
        The total does not fit the device's (or host's) memory; nothing has been allocated.
    """
    matrix, t, c = series.matrix, series.n_frames, series.n_coils
    n_vox, grid2 = math.prod(matrix), math.prod(matrix) * 2 ** len(matrix)
    frame = plan(matrix, c, series.samples_per_frame, sense=True, iterations=iterations, available_bytes=None,
                 gpu=device.is_gpu, method=method)
    per_frame = grid2 * COMPLEX64 * (1 + 3 * c if device.is_gpu else 1)  # GPU: all frames' coil grids at once
    vectors = 6 * t * n_vox * COMPLEX64
    splits = 3 * terms * t * n_vox * COMPLEX64 * max(1, spatial_ndim)
    data = sum(f.n_samples * (c * COMPLEX64 + (len(matrix) + 1) * FLOAT32) for f in series.frames)
    stages = {"frame": int(frame.peak_bytes), "iterations": int(t * per_frame + vectors + splits + data
                                                               + c * n_vox * COMPLEX64)}
    available = device_memory(device)[0] if device.is_gpu else host_memory_available()
    need = max(stages.values())
    if available is not None and need > available * HEADROOM:
        where = f"GPU memory ({device})" if device.is_gpu else "host memory"
        raise ResourceError(f"the time series needs {human_bytes(need)} of {where} ({t} frames, matrix "
                            f"{list(matrix)}, {c} coils) but {human_bytes(available)} are available; use fewer "
                            f"frames (--frames N) or coils")
    return stages


def prepare_series(series: TimeSeries, *, prewhiten: bool = True, dcf: str = "auto", coil_maps: str = "auto",
                   device: Device | str = "cpu") -> tuple[TimeSeries, dict[str, Any]]:
    """Prewhitened frames with their density weights and one set of coil maps (see the module docstring)."""
    if coil_maps == "rss":
        raise InvalidDataError("a time series is reconstructed with coil maps (file, walsh or espirit), not rss")
    averaged, record = prepare_scan(series.averaged(), prewhiten=prewhiten, dcf="none", coil_maps=coil_maps,
                                    field_map="ignore")
    maps = averaged.coil_maps
    if record["estimate_maps"] is not None:
        from .prep.coilmaps import estimate_coil_maps  # noqa: PLC0415 - only when estimating

        maps = estimate_coil_maps(averaged, record["estimate_maps"], device=device)
        if record["maps_basis"] is not None:
            maps = in_receiver_units(maps, record["maps_basis"])
    if maps is None:
        raise InvalidDataError(f"{series.source}: a single-coil time series needs coil maps (one coil: maps of ones)")
    frames = []
    for frame in series.frames:
        choice = dcf if dcf != "auto" else ("file" if frame.weights is not None else "pipe")
        ready, _ = prepare_scan(frame, prewhiten=prewhiten, dcf=choice, coil_maps="rss", field_map="ignore")
        frames.append(ready)
    used = {"prewhitened": record["prewhitened"], "coil_maps": record["coil_maps"], "dcf": dcf,
            "coil_maps_from": "time-averaged data (all frames)" if record["estimate_maps"] else "scan"}
    return series.replace_frames(frames, coil_maps=np.asarray(maps, dtype=np.complex64)), used


def in_receiver_units(maps: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Estimated maps ``S`` (whitened channels) rescaled per voxel so that ``basis @ S`` has unit
    root-sum-of-squares, as :func:`mri_recon.pipeline.reconstruct` does with ``maps_basis``: the frames then
    have the scale of a reconstruction with the receiver's maps, whatever the noise level (float64)."""
    flat = np.asarray(maps, dtype=np.complex128).reshape(maps.shape[0], -1)
    rss = np.sqrt((np.abs(np.asarray(basis, dtype=np.complex128) @ flat) ** 2).sum(axis=0))
    return (flat * np.where(rss > 0, 1.0 / np.where(rss > 0, rss, 1.0), 0.0)).reshape(maps.shape).astype(np.complex64)


def _upload(series: TimeSeries, dev: Device, engine: Any, coil_batch: int) -> dict[str, Any]:
    """Per frame on ``dev``: ``b_t`` and the Toeplitz spectrum, in scaled units; the scales and ``d^H W d``."""
    xp = get_xp(to_device(np.zeros(1, np.float32), dev))
    data_scale = power_of_two(max(largest(f.kspace) for f in series.frames)) or 1.0
    weight_scale = power_of_two(max(float(f.weights.max()) for f in series.frames))
    maps = to_device(series.coil_maps, dev)
    unit, maps_scale = unit_scale(maps)
    peak_rss = float(xp.max((xp.abs(unit) ** 2).sum(axis=0)))
    maps = (unit * np.float32(1.0 / power_of_two(math.sqrt(peak_rss)))).astype(np.complex64)
    maps_scale *= power_of_two(math.sqrt(peak_rss))
    rhs = xp.zeros((series.n_frames, *series.matrix), dtype=np.complex64)
    spectra, energy, peak = [], 0.0, 0.0
    rss = float(xp.max((xp.abs(maps) ** 2).sum(axis=0)))
    for t, frame in enumerate(series.frames):
        kspace, w = to_device(frame.kspace, dev), to_device((frame.weights / weight_scale).astype(np.float32), dev)
        encoding = engine(to_device(frame.trajectory, dev), series.matrix, series.n_coils)
        weighted = kspace * (w * np.float32(1.0 / data_scale))
        for start in range(0, series.n_coils, coil_batch):
            part = slice(start, start + coil_batch)
            rhs[t] += Sense(maps[part]).H(encoding.batched(weighted[part].shape[0]).H(weighted[part]))
        energy += data_energy(kspace, weighted, data_scale)
        spectra.append(kernel_spectrum(encoding.psf(w)))
        peak = max(peak, float(w.astype(np.float64).sum()) * rss)
    return {"rhs": rhs, "spectra": spectra, "maps": maps, "energy": energy, "peak": peak,
            "scale": data_scale * 1.0 / maps_scale, "weight_scale": weight_scale, "maps_scale": maps_scale}


def _terms(temporal: str, regularizer: str, shape: tuple[int, ...], ndim: int, lam_t: float, lam_s: float,
           anisotropic: bool) -> list[Term]:
    terms = [Term(time_term(shape), lam_t, 4.0)] if temporal == "tv" else []
    if regularizer in ("tv", "wavelet"):
        sparsity, _ = sparsity_of(regularizer, shape, ndim, anisotropic=anisotropic)
        terms.append(Term(sparsity, lam_s, 4.0 * ndim if regularizer == "tv" else 1.0))
    return terms


def _normals(up: dict[str, Any], lam: float, batched: bool) -> Any:
    """The frames' normal operators: one :func:`~mri_recon.operators.toeplitz.normal_operator` per frame, or
    on a GPU for the joint solvers all frames in one :class:`~mri_recon.solvers.temporal.BatchedSeriesNormal`
    (a few launches per product whatever the number of frames)."""
    if batched:
        xp = get_xp(up["maps"])
        return BatchedSeriesNormal(xp.stack(up["spectra"]), up["maps"], lam)
    return [normal_operator(s, coil_maps=up["maps"], lam=lam) for s in up["spectra"]]


def _frame_cg(normals: list, rhs: Any, iterations: int, tol: float) -> tuple[Any, tuple[float, ...]]:
    """Frame-by-frame CG; the history is the largest relative residual of any frame per iteration."""
    xp = get_xp(rhs)
    x, worst = xp.zeros_like(rhs), np.zeros(iterations + 1)
    for t, op in enumerate(normals):
        x[t], residuals = cg(op, rhs[t], max_iterations=iterations, tolerance=tol)
        worst[: len(residuals)] = np.maximum(worst[: len(residuals)], residuals)
    return x, tuple(float(v) for v in worst)


def _check_choices(temporal: str, regularizer: str, solver: str) -> None:
    if temporal not in TEMPORAL:
        raise InvalidDataError(f"temporal must be one of {', '.join(TEMPORAL)}, found {temporal!r}")
    if solver not in SOLVERS:
        raise InvalidDataError(f"temporal solver must be one of {', '.join(SOLVERS)}, found {solver!r}")
    resolve_lam(regularizer, None)  # refuses an unknown regularizer


TEMPORAL_ITERATIONS = 200
"""Iterations of a joint time-series solve when none are given (the library and the CLI): where it has
converged on the beating phantom (docs/temporal.md)."""


@blas_on_one_thread
def reconstruct_series(series: TimeSeries, *, temporal: str = "tv", temporal_lam: float | None = None,
                       regularizer: str = "l2", lam: float | None = None, solver: str = "admm",
                       iterations: int = TEMPORAL_ITERATIONS, rho: float | None = None, inner_iterations: int = 1,
                       anisotropic: bool = False, tol: float = 1e-6, device: str | int | Device | None = "auto",
                       method: str = "auto", prepare: bool = True, prewhiten: bool = True, dcf: str = "auto",
                       coil_maps: str = "auto", check_every: int = 10) -> SeriesResult:
    """Reconstruct every frame of ``series`` (see the module docstring).

    ``temporal``: ``"tv"`` (``temporal_lam ||D_t x||_1``) or ``"none"``; ``regularizer``: ``"l2"``
    (none, or Tikhonov with ``lam``), ``"tv"`` or ``"wavelet"`` in space; ``solver``: ``"admm"`` or
    ``"pdhg"``; ``iterations``: the solver's (CG's per frame for l2 without ``temporal``). ``prepare=False``
    uses the series as given (it must carry coil maps and every frame its weights).
    """
    _check_choices(temporal, regularizer, solver)
    lam_t = TEMPORAL_LAM_DEFAULT if temporal_lam is None else resolve_lam("tv", temporal_lam)
    # l2: Tikhonov's default (1e-3, as mri_recon.reconstruct) for frame-by-frame CG; none beside temporal TV
    lam_s = 0.0 if regularizer == "l2" and lam is None and temporal == "tv" else resolve_lam(regularizer, lam)
    dev, engine = choose_engine(device, method, problem=(series.matrix, series.samples_per_frame, series.n_coils))
    terms_count = (temporal == "tv") + (regularizer != "l2")
    plan_series(series, dev, iterations=iterations, terms=terms_count,
                spatial_ndim=len(series.matrix) if regularizer == "tv" else 0, method=engine.name)
    clock, record = {}, {}
    start = time.perf_counter()
    if prepare:
        series, record = prepare_series(series, prewhiten=prewhiten, dcf=dcf, coil_maps=coil_maps, device=dev)
    if series.coil_maps is None or any(f.weights is None for f in series.frames):
        raise InvalidDataError(f"{series.source}: prepare=False needs the series' coil maps and every frame's weights")
    clock["prepare"] = time.perf_counter() - start
    with dev.use():
        start = time.perf_counter()
        up = _upload(series, dev, engine, series.n_coils)
        clock["fhd_psf"] = time.perf_counter() - start
        rhs, peak = up["rhs"], up["peak"]
        scale_b = float(get_xp(rhs).abs(rhs).max())
        tikhonov = lam_s * peak if regularizer == "l2" else 0.0
        normals = _normals(up, tikhonov, dev.is_gpu and (temporal != "none" or regularizer != "l2"))
        terms = _terms(temporal, regularizer, tuple(rhs.shape), len(series.matrix), lam_t * scale_b,
                       lam_s * scale_b, anisotropic)
        start = time.perf_counter()
        if not terms:
            x, history = _frame_cg(normals, rhs, iterations, tol)
            used = "cg"
        elif solver == "admm":
            rho_rel = RHO_DEFAULT["admm"] if rho is None else float(rho)
            x, history = joint_admm(normals, rhs, terms, rho=rho_rel * peak, iterations=iterations,
                                    inner_iterations=inner_iterations, data_energy=up["energy"],
                                    check_every=check_every)
            used = "admm"
        else:
            x, history = joint_pdhg(normals, rhs, terms, iterations=iterations, data_energy=up["energy"],
                                    check_every=check_every)
            used = "pdhg"
        image = rescale(x, up["scale"])
        host = np.ascontiguousarray(to_host(image), dtype=np.complex64)
        clock["iterations"] = time.perf_counter() - start
    if not np.isfinite(host).all():
        raise InvalidDataError(f"{series.source}: the frames exceed the float32 range; scale the data down")
    parameters = {"temporal": temporal, "temporal_lam": lam_t, "regularizer": regularizer, "lam": lam_s,
                  "solver": used, "iterations": int(iterations), "method": engine.name,
                  "rho": (RHO_DEFAULT["admm"] if rho is None else float(rho)) if used == "admm" else None,
                  "frames": series.n_frames, "temporal_axis": series.axis,
                  "dropped_readouts": series.dropped_readouts, **record}
    return SeriesResult(image=host, history=tuple(history), iterations=int(iterations), timings=clock,
                        device=str(dev), parameters=parameters, labels=series.labels, axis=series.axis,
                        frame_duration_s=series.frame_duration_s, ground_truth=series.ground_truth)


def write_series(output: Any, result: SeriesResult, geometry: Any, *, format: str | None = None,
                 complex_: bool = False, magnitude: bool = False, header_xml: Any = None,
                 protect: tuple = ()) -> str:
    """Write ``result``'s frames to ``output`` in the format its name (or ``format``) chooses: HDF5 with a
    ``time`` axis, NIfTI 4D or MRD images (:mod:`mri_recon.io.series_files`); returns the format."""
    from .io import series_files  # noqa: PLC0415
    from .io.writers import output_format, output_values  # noqa: PLC0415

    chosen = output_format(output, format)
    values = output_values(chosen, complex_=complex_, magnitude=magnitude)
    if chosen == "nifti":
        series_files.write_series_nifti(output, result.image, geometry, frame_duration_s=result.frame_duration_s,
                                        complex_=complex_, protect=protect)
    elif chosen == "mrd":
        series_files.write_series_mrd(output, result.image, geometry, labels=result.labels, axis=result.axis,
                                      header_xml=header_xml, magnitude=values == "magnitude", protect=protect)
    else:
        series_files.write_series_hdf5(output, result.image, labels=result.labels, axis=result.axis,
                                       frame_duration_s=result.frame_duration_s, parameters=result.parameters,
                                       history=result.history, nrmse=result.nrmse(), protect=protect)
    return chosen
