"""The settings of one reconstruction, checked once before any work (:meth:`Options.of`): a view of its
:class:`~mri_recon.settings.ReconSettings`, with what follows from them resolved."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..checks.validation import check_field_map_pair
from ..errors import InvalidDataError, listed
from ..io.cache import PsfCache
from ..operators.engines.registry import sampling_of
from ..prep.maps_methods import estimated
from ..prep.maps_stage import CoilMapEstimate
from ..scan import Scan
from ..settings import ReconSettings
from ..solvers import temporal as joint_solvers
from ..solvers.registry import joint_names
from ..solvers.registry import solver as solver_of
from ..solvers.regularizers import regularizer as find_regularizer
from ..solvers.sparse import check_sparse, resolve_lam, sparse_names
from ..solvers.temporal_terms import TEMPORAL_TERMS, TemporalTerm, temporal_term


@dataclass(frozen=True)
class Options:
    """One checked view of a run's :class:`~mri_recon.settings.ReconSettings` (the ``solve`` and ``device``
    fields, each described there), with what follows from them resolved, and what the caller computed."""

    settings: ReconSettings
    lam: float
    """Dimensionless weight, resolved: ``settings.lam``, or the regularizer's default for a scan with or without
    weights (:data:`mri_recon.solvers.sparse.LAM_DEFAULTS`; 0 for l2 beside a temporal term). l2: Tikhonov's,
    relative to the largest diagonal entry of the normal operator (``max_n sum_c |S_c(n)|^2 * sum(w)``); sparse:
    relative to ``max |A^H W d|``."""
    maps: CoilMapEstimate
    """The coil-map stage: a method (``estimate_maps``: one of :func:`~mri_recon.prep.maps_methods.estimated`)
    estimates the maps on the device from the data already uploaded, instead of using the scan's; ``maps_basis``
    (prewhitened data, no maps from the file: the noise's Cholesky factor) normalizes estimated maps and combines
    per-coil images in the receiver's channels, so the image has the same scale whichever maps (or none) are used."""
    sparse: dict[str, Any] = field(default_factory=dict)
    """A sparse regularizer's solver keywords (:func:`~mri_recon.solvers.sparse.check_sparse`); empty for l2 and
    for a joint time series."""
    temporal: TemporalTerm = temporal_term("none")
    """A time series' temporal term (:mod:`mri_recon.solvers.temporal_terms`); ``"none"`` reconstructs each
    frame as a single image."""
    temporal_lam: float = 0.0
    """Its weight relative to ``max |A^H W d|`` over all frames."""
    joint: dict[str, Any] = field(default_factory=dict)
    """With a temporal term: the joint solver's settings (``solver``: ``"admm"`` or ``"pdhg"``; ADMM's
    ``rho`` relative to the normal operators' peak and ``inner_iterations``; ``anisotropic``); else empty."""
    progress: Any = None
    """None, or a callable ``progress(stage, iteration, total, value)``: called with ``(stage, None, None,
    None)`` when a stage ends (in the order of ``STAGES``, skipping stages not run) and with ``("iterations", k,
    iterations, value_k)`` after iteration k (on the GPU in batches at the solver's checks). ``True`` prints
    them on stderr (:func:`~mri_recon.progress.print_progress`); ``False`` is None. Without it the library
    prints nothing: stages and iterations are ``logging`` records of ``mri_recon.pipeline``."""
    psf: Any = None
    """The PSF of this trajectory, the scan's weights and this matrix (:func:`mri_recon.psf`), shape
    ``2 * matrix``; None computes it (or takes it from ``psf_cache``)."""
    psf_cache: PsfCache | None = None
    """A :class:`mri_recon.io.cache.PsfCache`: the exact engines' PSF is read from it when an entry for this
    trajectory, these weights, this matrix, this engine and this version passes the cache's checks, else
    computed and stored; a refused entry is logged and never changes the image. On a GPU the last trajectory's
    encoding and spectrum stay on the device (:mod:`mri_recon.operators.memo`; ``parameters["psf"] ==
    "memory"``; ``MRI_RECON_MEMO_MAX=0`` turns it off)."""

    @property
    def by_cg(self) -> bool:
        """CG solves to the tolerance: l2 frame by frame, or a subspace's coefficients with l2."""
        return not self.sparse and (not self.temporal.joint or self.temporal.subspace and not self.joint)

    @property
    def iterations(self) -> int:
        return self.settings.iterations

    @property
    def tol(self) -> float:
        return self.settings.tol

    @property
    def filter_sigma(self) -> float | None:
        return self.settings.filter_sigma

    @property
    def device(self) -> Any:
        return self.settings.device

    @property
    def method(self) -> str:
        return self.settings.method

    @property
    def regularizer(self) -> str:
        return self.settings.regularizer

    @classmethod
    def of(cls, scan: Scan, settings: ReconSettings, *, progress: Any = None, psf: Any = None,
           psf_cache: PsfCache | None = None, estimate_maps: str | None = None, maps_basis: Any = None,
           series: bool = False, frames: int = 1) -> Options:
        """The checked settings for ``scan`` (a time series' first frame with the series' maps when ``series``,
        of ``frames`` frames); :class:`~mri_recon.errors.InvalidDataError` naming the first setting that does
        not apply."""
        s = settings
        weighted, chosen = scan.weights is not None, find_regularizer(s.regularizer)
        _check_term_options(s, temporal_term(s.temporal))
        term = _check_temporal(s.temporal, s.temporal_lam, s.temporal_solver, series).configured(s, frames)
        if term.joint:
            joint = _check_quadratic(s) if term.subspace and not chosen.sparse else _check_joint(
                s.regularizer, s.rho, s.inner_iterations, s.anisotropic, s.solver, s.temporal_solver)
            lam = 0.0 if s.lam is None and not chosen.sparse else resolve_lam(s.regularizer, s.lam, weighted)
            chosen.check(tuple(scan.matrix))
            sparse = {}
        else:
            joint, lam = {}, resolve_lam(s.regularizer, s.lam, weighted=weighted)
            sparse = check_sparse(s.regularizer, s.rho, s.inner_iterations, s.anisotropic, s.solver, weighted,
                                  scan.matrix)
        t_lam = term.lam_default if s.temporal_lam is None else float(s.temporal_lam)
        maps = CoilMapEstimate(estimate_maps, maps_basis, sampling_of(scan))
        maps.check(scan)
        _check_field_map(scan, s.segments, sparse, s.regularizer)
        _check_given(scan, maps, psf, series)
        _check_filter(scan, s.filter_sigma)
        return cls(s, lam, maps, sparse, term, t_lam, joint, progress, psf, psf_cache)


def _check_given(scan: Scan, maps: CoilMapEstimate, psf: Any, series: bool) -> None:
    """A PSF only without a field map and for one scan; a time series with coil maps."""
    if scan.field_map is not None and psf is not None:
        raise InvalidDataError("a PSF applies to the model without off-resonance; with a field map leave psf=None")
    if series and scan.coil_maps is None and maps.method is None:
        raise InvalidDataError(f"{scan.source}: a time series is reconstructed with coil maps: the series' own, or "
                               f"estimate_maps ({listed(estimated())})")
    if series and psf is not None:
        raise InvalidDataError("a PSF belongs to one trajectory; the frames of a time series have one each (leave "
                               "psf=None, or use a psf_cache)")


def _check_filter(scan: Scan, sigma: float | None) -> None:
    """A post-filter no wider than the image: a larger ``sigma`` would only flatten it, slowly (its kernel spans
    ``8 sigma`` voxels), and is taken for a slip of the keyboard."""
    if sigma is not None and sigma > max(scan.matrix):
        raise InvalidDataError(f"{scan.source}: filter_sigma {sigma:g} voxels is wider than the image "
                               f"({'x'.join(map(str, scan.matrix))} voxels); a post-filter is a few voxels wide")


def _check_term_options(settings: ReconSettings, term: TemporalTerm) -> None:
    """The settings of one temporal term (:attr:`~mri_recon.solvers.temporal_terms.TemporalTerm.options`) refused
    with another."""
    for name in {option for other in TEMPORAL_TERMS.values() for option in other.options} - set(term.options):
        if getattr(settings, name) is not None:
            users = [t.name for t in TEMPORAL_TERMS.values() if name in t.options]
            raise InvalidDataError(f"{name} applies to temporal={' or '.join(map(repr, users))}, not "
                                   f"temporal={term.name!r}")


def _check_temporal(temporal: str, temporal_lam: float | None, temporal_solver: str, series: bool) -> TemporalTerm:
    """The temporal term, refused on a single scan; its weight and solver refused without one (their values are
    checked by the settings)."""
    term = temporal_term(temporal)
    if term.joint and not series:
        raise InvalidDataError(f"temporal {temporal!r} applies to a time series (mri_recon.load_series, or the "
                               f"command line's --temporal-axis / --spokes-per-frame), not to one scan")
    given = [name for name, set_ in (("temporal_lam", temporal_lam is not None),
                                     ("temporal_solver", temporal_solver != joint_names()[0])) if set_]
    if not term.joint and given:
        raise InvalidDataError(f"{' and '.join(given)} appl{'y' if len(given) > 1 else 'ies'} to a joint time "
                               f"series (a temporal term such as temporal='tv')")
    if term.subspace and temporal_lam is not None:
        raise InvalidDataError(f"temporal_lam: temporal={term.name!r} has no temporal penalty (the frames are "
                               f"confined to its basis; temporal_rank and temporal_basis choose it)")
    return term


def _check_quadratic(settings: ReconSettings) -> dict[str, Any]:
    """A subspace with l2 (or no) regularization is solved by CG: the joint solver's settings are refused."""
    s = settings
    given = [name for name, value in (("solver", s.solver), ("rho", s.rho), ("inner_iterations", s.inner_iterations))
             if value is not None]
    given += ["temporal_solver"] if s.temporal_solver != joint_names()[0] else []
    given += ["anisotropic"] if s.anisotropic else []
    if given:
        raise InvalidDataError(f"{', '.join(given)}: a subspace time series with the {s.regularizer} regularizer "
                               f"is solved by CG; these apply with a sparse spatial regularizer "
                               f"({listed(sparse_names(), quote=True)})")
    return {}


def _check_joint(regularizer: str, rho: float | None, inner_iterations: int | None, anisotropic: bool,
                 solver: str | None, temporal_solver: str) -> dict[str, Any]:
    """The joint solver's settings: ``solver`` is refused (the joint solve runs ``temporal_solver``), ``rho``
    and ``inner_iterations`` are ADMM's, ``anisotropic`` the spatial regularizer's (their ranges are checked by
    the settings)."""
    if solver is not None:
        raise InvalidDataError(f"solver {solver!r}: a time series with a temporal term is solved jointly by "
                               f"temporal_solver ({listed(joint_names())}); leave solver unset")
    admm = solver_of(temporal_solver).penalty
    if not admm and (rho is not None or inner_iterations is not None):
        with_penalty = [name for name in joint_names() if solver_of(name).penalty]
        raise InvalidDataError(f"rho and inner_iterations are ADMM's; the joint solve runs {temporal_solver} "
                               f"(choose temporal_solver {listed(with_penalty, quote=True)} to set them)")
    if anisotropic and not find_regularizer(regularizer).anisotropic:
        raise InvalidDataError("anisotropic applies to total variation only")
    return {"solver": temporal_solver, "anisotropic": bool(anisotropic),
            "rho": (joint_solvers.RHO_DEFAULT if rho is None else float(rho)) if admm else None,
            "inner_iterations": (1 if inner_iterations is None else int(inner_iterations)) if admm else None}


def _check_field_map(scan: Scan, segments: int | None, sparse: dict[str, Any], regularizer: str) -> None:
    """The field map and times as a pair, segments only with a field map, l2 only (the correction's name is
    checked by the settings)."""
    check_field_map_pair(scan.field_map, scan.times, scan.source)
    if segments is not None and scan.field_map is None:
        raise InvalidDataError(f"{scan.source}: segments (L = {segments}) apply to off-resonance correction, and "
                               f"the scan has no field map")
    if scan.field_map is not None and sparse:
        raise InvalidDataError(f"{scan.source}: off-resonance correction runs with the l2 regularizer only, not "
                               f"{regularizer}; reconstruct with l2, or drop the field map on purpose (--no-field-map)")


def check_frames(frames: tuple[Scan, ...], source: str) -> None:
    """A time series' frames: none with a field map (one correction per frame is not implemented), and every
    frame's density weights or none (the run's weight scale is shared, so a mixture would not be scale-free)."""
    if any(f.field_map is not None for f in frames):
        raise InvalidDataError(f"{source}: a time series is reconstructed without off-resonance correction; its "
                               f"frames carry field maps (drop them: field_map='ignore' in the preparation)")
    weighted = {f.weights is not None for f in frames}
    if len(weighted) > 1:
        raise InvalidDataError(f"{source}: some frames have density weights and others none; give every frame "
                               f"its weights, or none")
