"""The solve stage: each frame alone (CG, or ADMM / FISTA for a sparse regularizer), every frame of a time
series together when a temporal term joins them (:mod:`mri_recon.solvers.temporal`), or a subspace's
coefficient images (:mod:`mri_recon.solvers.subspace`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays.backend import get_xp
from ..progress import Clock
from ..settings import solver_options
from ..solvers.cg import cg
from ..solvers.registry import solver
from ..solvers.regularizers import regularizer as find_regularizer
from ..solvers.sparse import solve_regularized
from ..solvers.temporal import BatchedSeriesNormal, SeriesNormal, Term
from .options import Options
from .state import Encoded, FrameData, FrameNormal, Maps, Planned, RightHandSide, Solution, Uploaded, log


def solve(options: Options, planned: Planned, clock: Clock, uploaded: Uploaded, maps: Maps,
          encoded: tuple[Encoded, ...], rhs: RightHandSide, normals: tuple[FrameNormal, ...]) -> Solution:
    """Solve for the image (or the frames): in a subspace, jointly with a temporal term, else frame by frame; and
    the weight solved with in the data's units."""
    problem = _Problem(planned, uploaded.data, maps.array, encoded, rhs, normals)
    if options.temporal.subspace:
        x, residuals, extra = _solve_subspace(options, problem, clock)
    elif options.temporal.joint:
        x, residuals, extra = _solve_joint(options, problem, clock)
    else:
        x, residuals, extra = _solve_frames(options, problem, clock)
    lam_abs = extra.pop("lam_abs", None)
    return Solution(x, residuals, extra, _lam_abs(options, lam_abs, uploaded, maps, rhs.peaks))


@dataclass(frozen=True)
class _Problem:
    """What the solvers read: the plan, and per frame the data, encoding, normal operator and right-hand side."""

    planned: Planned
    data: tuple[FrameData, ...]
    maps: Any
    encoded: tuple[Encoded, ...]
    rhs: RightHandSide
    normals: tuple[FrameNormal, ...]


def _lam_abs(options: Options, lam_abs: float | None, uploaded: Uploaded, maps: Maps,
             peaks: tuple[float, ...]) -> float:
    """``lam`` in the data's units: Tikhonov's weight, or for a sparse regularizer (``lam_abs``, its solver's
    weight relative to ``max |A^H W d|`` in scaled units) ``max |A^H W d|`` times ``lam``."""
    if lam_abs is not None:
        return lam_abs * (uploaded.weight_scale * maps.scale * uploaded.data_scale)
    return options.lam * max(peaks) * uploaded.weight_scale * maps.scale ** 2


def _solve_frames(options: Options, problem: _Problem, clock: Clock) -> tuple[Any, Any, dict[str, Any]]:
    """Each frame as a single image; a time series' frames stacked, their worst residuals, the largest
    ``lam_abs``."""
    solved = [_solve_frame(options, problem, clock, t) for t in range(len(problem.data))]
    if problem.planned.series is None:
        x, residuals, extra = solved[0]
        return x, residuals, dict(extra)
    x = get_xp(problem.rhs.b).stack([x for x, _, _ in solved])
    extra = dict(solved[0][2])
    if "lam_abs" in extra:
        extra["lam_abs"] = max(extra["lam_abs"] for _, _, extra in solved)
    return x, _worst([residuals for _, residuals, _ in solved]), extra


def _worst(histories: list[tuple[float, ...]]) -> tuple[float, ...]:
    """The largest value of any frame at each step (a frame that stopped early keeps its last value)."""
    length = max(len(h) for h in histories)
    padded = np.array([list(h) + [h[-1]] * (length - len(h)) for h in histories])
    return tuple(float(v) for v in padded.max(axis=0))


def _solve_frame(options: Options, problem: _Problem, clock: Clock,
                 t: int) -> tuple[Any, tuple[float, ...], dict[str, Any]]:
    """Frame ``t`` as a single image: CG on its normal operator (l2), or ADMM / FISTA for a sparse regularizer
    on the engine's Toeplitz operators."""
    planned, maps, peak = problem.planned, problem.maps, problem.rhs.peaks[t]
    callback = clock.callback() if len(problem.data) == 1 else None
    rhs = problem.rhs.b if planned.series is None else problem.rhs.b[t]
    normal, encoding, batch = problem.normals[t], problem.encoded[t].encoding, planned.budget.coil_batch
    if options.sparse:
        spectrum = normal.spectrum
        return solve_regularized(
            spectrum, maps, rhs, options.lam, peak, problem.rhs.energies[t], options.iterations, batch, callback,
            normal=lambda lam: encoding.toeplitz_normal(spectrum, maps, lam, batch), **options.sparse,
            **solver_options(options.settings))
    operator = normal.operator or encoding.normal(problem.data[t].w, maps, options.lam * peak, coil_batch=batch,
                                                  spectrum=normal.spectrum)
    x, residuals = cg(operator, rhs, max_iterations=options.iterations, tolerance=options.tol,
                      callback=callback, **solver_options(options.settings))
    return x, residuals, {"regularizer": options.regularizer,
                          "solver": find_regularizer(options.regularizer).default_solver}


def _terms(options: Options, problem: _Problem, scale_b: float) -> list[Term]:
    """The temporal term and, for a sparse regularizer, the spatial one, with absolute weights."""
    shape = tuple(problem.rhs.b.shape)
    terms = [Term(options.temporal.sparsity(shape), options.temporal_lam * scale_b, options.temporal.norm_squared)]
    return terms + _spatial_terms(options, problem, shape, scale_b)


def _spatial_terms(options: Options, problem: _Problem, shape: tuple[int, ...], scale_b: float) -> list[Term]:
    """For a sparse regularizer its term on images of ``shape`` (frames or coefficients), else none."""
    ndim, spatial = len(problem.planned.scan.matrix), find_regularizer(options.regularizer)
    if not spatial.sparse:
        return []
    sparsity, _ = spatial.sparsity(shape, ndim, anisotropic=options.joint["anisotropic"])
    return [Term(sparsity, options.lam * scale_b, spatial.norm_squared(ndim))]


def _normals(problem: _Problem, tikhonov: float) -> Any:
    """The frames' normal operators: on a GPU all frames in one
    :class:`~mri_recon.solvers.temporal.BatchedSeriesNormal` (a few launches per product whatever the number of
    frames), else each frame's engine Toeplitz operator."""
    if problem.planned.device.is_gpu:
        xp = get_xp(problem.rhs.b)
        return BatchedSeriesNormal(xp.stack([n.spectrum for n in problem.normals]), problem.maps, tikhonov)
    batch = problem.planned.budget.coil_batch
    return [e.encoding.normal(d.w, problem.maps, tikhonov, coil_batch=batch, spectrum=n.spectrum)
            for d, e, n in zip(problem.data, problem.encoded, problem.normals)]


def _solve_joint(options: Options, problem: _Problem, clock: Clock) -> tuple[Any, Any, dict[str, Any]]:
    """Every frame in one problem: ``lam_t`` and a sparse ``lam`` relative to ``max |A^H W d|`` over all frames,
    Tikhonov's (l2) and ``rho`` relative to the largest peak of the frames' normal operators."""
    b, xp, settings = problem.rhs.b, get_xp(problem.rhs.b), options.joint
    scale_b, peak = float(xp.abs(b).max()), max(problem.rhs.peaks)
    sparse = find_regularizer(options.regularizer).sparse
    normals = _normals(problem, 0.0 if sparse else options.lam * peak)
    terms, energy = _terms(options, problem, scale_b), sum(problem.rhs.energies)
    common = {"iterations": options.iterations, "data_energy": energy, "callback": clock.callback(),
              **solver_options(options.settings)}
    rho = None if settings["rho"] is None else settings["rho"] * peak
    x, history = solver(settings["solver"]).joint(normals, b, terms, rho=rho,
                                                  inner_iterations=settings["inner_iterations"], **common)
    extra = {"regularizer": options.regularizer, "temporal": options.temporal.name,
             "temporal_lam": options.temporal_lam, "objective": float(history[-1]),
             **settings, **({"lam_abs": options.lam * scale_b} if sparse else {})}
    return x, history, extra


def _basis(options: Options, problem: _Problem) -> tuple[Any, dict[str, Any]]:
    """The subspace's basis on the device, in the frames' dtype, and what the result records of it: the given
    one, or estimated from the frames' k-space centres."""
    from ..prep.temporal_basis import estimate_basis  # noqa: PLC0415 - subspace only

    term, b = options.temporal, problem.rhs.b
    if term.basis is not None:
        basis, record = term.basis, {"temporal_basis": term.source}
    else:
        estimated = estimate_basis([d.kspace for d in problem.data], [d.trajectory for d in problem.data],
                                   problem.planned.scan.matrix, term.rank, device=problem.planned.device)
        basis = estimated.basis
        record = {"temporal_basis": estimated.source(), "temporal_basis_energy": estimated.energy}
    log.info("subspace: %d temporal basis functions, %s", basis.shape[1], record["temporal_basis"])
    return get_xp(b).asarray(basis.astype(b.dtype)), {"temporal_rank": int(basis.shape[1]), **record}


def _solve_subspace(options: Options, problem: _Problem, clock: Clock) -> tuple[Any, tuple[float, ...], dict[str, Any]]:
    """The coefficient images of the frames' subspace (:mod:`mri_recon.solvers.subspace`), and the frames they
    make: CG on ``Phi^H (N + mu I) Phi`` with l2 (Tikhonov's ``mu`` relative to the largest peak of the frames'
    normal operators), the joint solver with the spatial term on every coefficient image for a sparse one
    (its weight relative to ``max |A^H W d|`` over all frames)."""
    from ..solvers.subspace import SubspaceNormal, expand, project  # noqa: PLC0415 - subspace only

    basis, record = _basis(options, problem)
    sparse = find_regularizer(options.regularizer).sparse
    scale_b, peak = float(get_xp(problem.rhs.b).abs(problem.rhs.b).max()), max(problem.rhs.peaks)
    frames = _normals(problem, 0.0 if sparse else options.lam * peak)
    normal = SubspaceNormal(frames if isinstance(frames, SeriesNormal) else SeriesNormal(frames), basis)
    rhs = project(basis, problem.rhs.b)
    common = {"callback": clock.callback(), **solver_options(options.settings)}
    extra = {"regularizer": options.regularizer, "temporal": options.temporal.name, **record}
    if not sparse:
        c, history = cg(normal, rhs, max_iterations=options.iterations, tolerance=options.tol, **common)
        extra["solver"] = find_regularizer(options.regularizer).default_solver
    else:
        settings = options.joint
        terms = _spatial_terms(options, problem, tuple(rhs.shape), scale_b)
        rho = None if settings["rho"] is None else settings["rho"] * peak
        c, history = solver(settings["solver"]).joint(
            normal, rhs, terms, rho=rho, inner_iterations=settings["inner_iterations"],
            iterations=options.iterations, data_energy=sum(problem.rhs.energies), **common)
        extra.update(settings, objective=float(history[-1]), lam_abs=options.lam * scale_b)
    return expand(basis, c), history, extra
