"""The settings of one reconstruction as :func:`mri_recon.pipeline.reconstruct` received them, checked once
before any work (:meth:`Options.of`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..backend import Device
from ..errors import InvalidDataError
from ..io.cache import PsfCache
from ..operators.engines.registry import sampling_of
from ..operators.offres.setup import CORRECTIONS
from ..prep.maps_stage import CoilMapEstimate
from ..scan import Scan
from ..solvers import temporal as joint_solvers
from ..solvers.regularizers import regularizer as find_regularizer
from ..solvers.sparse import check_sparse, resolve_lam
from ..solvers.temporal_terms import TemporalTerm, temporal_term
from ..validation import check_field_map_pair


@dataclass(frozen=True)
class Options:
    """The solver's settings, the keywords of :func:`mri_recon.pipeline.reconstruct` (checked, defaults
    resolved)."""

    iterations: int
    """Most CG iterations."""
    tol: float
    """Stop when the relative residual is at most this."""
    lam: float
    """Dimensionless weight. l2: Tikhonov's, relative to the largest diagonal entry of the normal operator
    (``max_n sum_c |S_c(n)|^2 * sum(w)``; ``sum(w)`` without maps): see the module docstring; tv and wavelet:
    relative to ``max |A^H W d|``. None: the regularizer's default for a scan with or without weights
    (:data:`mri_recon.solvers.sparse.LAM_DEFAULTS`: 1e-3 for l2), recorded in ``parameters["lam"]``."""
    filter_sigma: float | None
    """Width in voxels of a Gaussian post-filter (:func:`mri_recon.filters.smooth`); None: no filter."""
    device: str | int | Device | None
    """``"auto" | "cpu" | "gpu" | "gpu:N"`` or a :class:`~mri_recon.backend.Device`."""
    progress: Any
    """None, or a callable ``progress(stage, iteration, total, residual)``: called with ``(stage, None, None,
    None)`` when a stage ends (in the order of ``STAGES``, skipping stages not run) and with ``("iterations", k,
    iterations, residual_k)`` after CG iteration k. On the GPU the iteration calls come in batches at the
    solver's residual checks (no extra read-back). ``True`` prints those events on stderr
    (:func:`print_progress`); ``False`` is None. Without it the library prints nothing: stage timings and
    iterations are ``logging`` records of ``mri_recon.pipeline`` at INFO and DEBUG."""
    method: str
    """``"auto" | "exact" | "nufft"`` for F^H and the PSF (see :func:`mri_recon.operators.choose_engine`: on a
    GPU, ``"auto"`` picks the exact kernels or the GPU NUFFT by predicted time). The engine used is
    ``Result.parameters["method"]``."""
    psf: Any
    """The PSF of this trajectory, the scan's weights and this matrix, computed before by :func:`mri_recon.psf`
    (``psf(scan.trajectory, scan.matrix, scan.weights)``), of shape ``2 * matrix``; None computes it (or takes
    it from ``psf_cache``)."""
    psf_cache: PsfCache | None
    """A :class:`mri_recon.io.cache.PsfCache`: for the exact engines the PSF is read from it when an entry for
    this trajectory, these weights, this matrix, this engine and this mri-recon version exists and passes the
    cache's checks (its own, intact, bound to its key: :mod:`mri_recon.io.cache`), else computed and stored in
    it; a refused entry is logged as a warning and never changes the image. The GPU NUFFT does not use the disk
    (it computes a PSF faster than a read). On a GPU, with or without a cache, :mod:`mri_recon.operators.memo`
    keeps the last trajectory's encoding and spectrum on the device, and a scan with a bit-identical trajectory
    and weights reuses them (``parameters["psf"] == "memory"``; ``MRI_RECON_MEMO_MAX=0`` turns it off)."""
    maps: CoilMapEstimate
    """The coil-map stage: ``"walsh"`` or ``"espirit"``: estimate coil maps from the k-space centre on the
    device, from the data already uploaded (:func:`mri_recon.prep.coilmaps.coil_maps_from_kspace`), instead of
    using ``scan.coil_maps``; None uses the scan's maps (or none). ``maps_basis``: With prewhitened data and no
    maps from the file: the ``(C, C)`` Cholesky factor of the noise covariance
    (:func:`mri_recon.prep.noise.receiver_basis`). Estimated maps are then normalized in the receiver's
    channels, and per-coil images are combined there, like a reconstruction with maps from a file, so the image
    has the same scale whichever maps (or none) are used."""
    regularizer: str
    """``"l2"`` (CG), ``"tv"`` or ``"wavelet"`` (:mod:`mri_recon.solvers.sparse`, whose ``rho``,
    ``inner_iterations``, ``anisotropic`` and ``solver`` it takes; ``iterations`` are then outer)."""
    sparse: dict[str, Any] = field(default_factory=dict)
    """The tv / wavelet solver's keyword arguments (:func:`~mri_recon.solvers.sparse.check_sparse`); empty
    for l2 (plain CG)."""
    field_map_correction: str = "auto"
    segments: int | None = None
    """With a ``field_map`` (and ``times``) in the scan: ``"exact"``, ``"segmented"`` (L = ``segments``, None:
    chosen for interpolation error <= 1e-3) or ``"auto"`` (:mod:`mri_recon.operators.offres.setup`).
    ``Result.parameters["field_map_correction"]`` records ``"exact"``, ``"time-segmented (L=..)"`` or
    ``"none"``. Not with ``regularizer="tv" | "wavelet"``."""
    temporal: TemporalTerm = temporal_term("none")
    """A time series' temporal term (:mod:`mri_recon.solvers.temporal_terms`); ``"none"`` reconstructs each
    frame as a single image."""
    temporal_lam: float = 0.0
    """Its weight relative to ``max |A^H W d|`` over all frames."""
    joint: dict[str, Any] = field(default_factory=dict)
    """With a temporal term: the joint solver's settings (``solver``: ``"admm"`` or ``"pdhg"``; ADMM's
    ``rho`` relative to the normal operators' peak and ``inner_iterations``; ``anisotropic``); else empty."""

    @classmethod
    def of(cls, scan: Scan, *, iterations: int, tol: float, lam: float | None, filter_sigma: float | None,
           device: Any, progress: Any, method: str, psf: Any, psf_cache: PsfCache | None,
           estimate_maps: str | None, maps_basis: Any, regularizer: str, rho: float | None,
           inner_iterations: int | None, anisotropic: bool, solver: str | None, field_map_correction: str,
           segments: int | None, temporal: str = "none", temporal_lam: float | None = None,
           temporal_solver: str = "admm", series: bool = False) -> Options:
        """The checked settings for ``scan`` (a time series' first frame with the series' maps when ``series``);
        :class:`~mri_recon.errors.InvalidDataError` naming the first setting that does not apply."""
        weighted = scan.weights is not None
        term = _check_temporal(temporal, temporal_lam, temporal_solver, series)
        if term.joint:
            joint = _check_joint(regularizer, rho, inner_iterations, anisotropic, solver, temporal_solver)
            lam = 0.0 if lam is None and not find_regularizer(regularizer).sparse else \
                resolve_lam(regularizer, lam, weighted=weighted)
            find_regularizer(regularizer).check(tuple(scan.matrix))
            sparse = {}
        else:
            joint, lam = {}, resolve_lam(regularizer, lam, weighted=weighted)
            sparse = check_sparse(regularizer, rho, inner_iterations, anisotropic, solver, weighted, scan.matrix)
        t_lam = term.lam_default if temporal_lam is None else _weight("temporal_lam", temporal_lam)
        maps = CoilMapEstimate(estimate_maps, maps_basis, sampling_of(scan))
        maps.check(scan)
        _check_field_map(scan, field_map_correction, segments, sparse, regularizer)
        if scan.field_map is not None and psf is not None:
            raise InvalidDataError("a PSF applies to the model without off-resonance; with a field map leave psf=None")
        if series and scan.coil_maps is None and maps.method is None:
            raise InvalidDataError(f"{scan.source}: a time series is reconstructed with coil maps: the series' "
                                   f"own, or estimate_maps (walsh or espirit)")
        if series and psf is not None:
            raise InvalidDataError("a PSF belongs to one trajectory; the frames of a time series have one each "
                                   "(leave psf=None, or use a psf_cache)")
        return cls(iterations, tol, lam, filter_sigma, device, progress, method, psf, psf_cache, maps, regularizer,
                   sparse, field_map_correction, segments, term, t_lam, joint)


def _weight(name: str, value: float) -> float:
    """A relative weight: a finite number >= 0."""
    if not (math.isfinite(value) and value >= 0):
        raise InvalidDataError(f"{name} must be a finite number >= 0, found {value}")
    return float(value)


def _check_temporal(temporal: str, temporal_lam: float | None, temporal_solver: str, series: bool) -> TemporalTerm:
    """The temporal term, refused on a single scan; its weight and solver refused without one."""
    term = temporal_term(temporal)
    if term.joint and not series:
        raise InvalidDataError(f"temporal {temporal!r} applies to a time series (mri_recon.load_series, or the "
                               f"command line's --temporal-axis / --spokes-per-frame), not to one scan")
    if temporal_solver not in joint_solvers.SOLVERS:
        raise InvalidDataError(f"temporal_solver must be one of {', '.join(joint_solvers.SOLVERS)}, found "
                               f"{temporal_solver!r}")
    if not term.joint and (temporal_lam is not None or temporal_solver != joint_solvers.SOLVERS[0]):
        raise InvalidDataError("temporal_lam and temporal_solver apply to a joint time series (a temporal term "
                               "such as temporal='tv')")
    return term


def _check_joint(regularizer: str, rho: float | None, inner_iterations: int | None, anisotropic: bool,
                 solver: str | None, temporal_solver: str) -> dict[str, Any]:
    """The joint solver's settings: ``solver`` is refused (the joint solve runs ``temporal_solver``), ``rho``
    and ``inner_iterations`` are ADMM's, ``anisotropic`` the spatial regularizer's."""
    if solver is not None:
        raise InvalidDataError(f"solver {solver!r}: a time series with a temporal term is solved jointly by "
                               f"temporal_solver (admm or pdhg); leave solver unset")
    admm = temporal_solver == "admm"
    if not admm and (rho is not None or inner_iterations is not None):
        raise InvalidDataError("rho and inner_iterations are ADMM's; the joint solve runs pdhg (choose "
                               "temporal_solver 'admm' to set them)")
    if rho is not None and not (math.isfinite(rho) and rho > 0):
        raise InvalidDataError(f"rho must be a positive finite number, found {rho}")
    if inner_iterations is not None and int(inner_iterations) < 1:
        raise InvalidDataError(f"inner_iterations must be >= 1, found {inner_iterations}")
    if anisotropic and not find_regularizer(regularizer).anisotropic:
        raise InvalidDataError("anisotropic applies to total variation only")
    return {"solver": temporal_solver, "anisotropic": bool(anisotropic),
            "rho": (joint_solvers.RHO_DEFAULT if rho is None else float(rho)) if admm else None,
            "inner_iterations": (1 if inner_iterations is None else int(inner_iterations)) if admm else None}


def _check_field_map(scan: Scan, correction: str, segments: int | None, sparse: dict[str, Any],
                     regularizer: str) -> None:
    """The field map and times as a pair, a known correction, segments only with a field map, l2 only."""
    check_field_map_pair(scan.field_map, scan.times, scan.source)
    if correction not in CORRECTIONS:
        raise InvalidDataError(f"unknown field-map correction {correction!r}: expected one of "
                               f"{', '.join(CORRECTIONS)}")
    if segments is not None and scan.field_map is None:
        raise InvalidDataError(f"{scan.source}: segments (L = {segments}) apply to off-resonance correction, and "
                               f"the scan has no field map")
    if scan.field_map is not None and sparse:
        raise InvalidDataError(f"{scan.source}: off-resonance correction runs with the l2 regularizer only, not "
                               f"{regularizer}; reconstruct with l2, or drop the field map on purpose (--no-field-map)")
