"""The solve stage: each frame alone (CG, or ADMM / FISTA for a sparse regularizer), or every frame of a time
series together when a temporal term joins them (:mod:`mri_recon.solvers.temporal`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays.backend import get_xp
from ..settings import solver_options
from ..solvers.cg import cg
from ..solvers.registry import solver
from ..solvers.regularizers import regularizer as find_regularizer
from ..solvers.sparse import solve_regularized
from ..solvers.temporal import BatchedSeriesNormal, Term
from .options import Options
from .state import State


def solve(options: Options, state: State) -> None:
    """Solve for the image (or the frames): jointly with a temporal term, else frame by frame."""
    if options.temporal.joint:
        state.x, state.residuals, state.extra = _solve_joint(options, state)
        return
    solved = [_solve_frame(options, state, t) for t in range(len(state.data))]
    if state.series is None:
        state.x, state.residuals, state.extra = solved[0]
        return
    state.x = get_xp(state.rhs).stack([x for x, _, _ in solved])
    state.residuals = _worst([residuals for _, residuals, _ in solved])
    state.extra = dict(solved[0][2])
    if "lam_abs" in state.extra:
        state.extra["lam_abs"] = max(extra["lam_abs"] for _, _, extra in solved)


def _worst(histories: list[tuple[float, ...]]) -> tuple[float, ...]:
    """The largest value of any frame at each step (a frame that stopped early keeps its last value)."""
    length = max(len(h) for h in histories)
    padded = np.array([list(h) + [h[-1]] * (length - len(h)) for h in histories])
    return tuple(float(v) for v in padded.max(axis=0))


def _solve_frame(options: Options, state: State, t: int) -> tuple[Any, tuple[float, ...], dict[str, Any]]:
    """Frame ``t`` as a single image: CG on its normal operator (l2), or ADMM / FISTA for a sparse regularizer
    on the engine's Toeplitz operators."""
    callback = state.clock.callback() if len(state.data) == 1 else None
    rhs = state.rhs if state.series is None else state.rhs[t]
    normal = state.normals[t]
    if options.sparse:
        encoding, spectrum, maps, batch = state.encoded[t].encoding, normal.spectrum, state.maps, \
            state.budget.coil_batch
        return solve_regularized(
            spectrum, maps, rhs, options.lam, state.peaks[t], state.energies[t], options.iterations, batch, callback,
            normal=lambda lam: encoding.toeplitz_normal(spectrum, maps, lam, batch), **options.sparse,
            **solver_options(options.settings))
    operator = normal.operator or state.encoded[t].encoding.normal(
        state.data[t].w, state.maps, options.lam * state.peaks[t], coil_batch=state.budget.coil_batch,
        spectrum=normal.spectrum)
    x, residuals = cg(operator, rhs, max_iterations=options.iterations, tolerance=options.tol,
                      callback=callback, **solver_options(options.settings))
    return x, residuals, {"regularizer": options.regularizer,
                          "solver": find_regularizer(options.regularizer).default_solver}


def _terms(options: Options, state: State, scale_b: float) -> list[Term]:
    """The temporal term and, for a sparse regularizer, the spatial one, with absolute weights."""
    shape, ndim = tuple(state.rhs.shape), len(state.scan.matrix)
    terms = [Term(options.temporal.sparsity(shape), options.temporal_lam * scale_b, options.temporal.norm_squared)]
    spatial = find_regularizer(options.regularizer)
    if spatial.sparse:
        sparsity, _ = spatial.sparsity(shape, ndim, anisotropic=options.joint["anisotropic"])
        terms.append(Term(sparsity, options.lam * scale_b, spatial.norm_squared(ndim)))
    return terms


def _normals(options: Options, state: State, tikhonov: float) -> Any:
    """The frames' normal operators: on a GPU all frames in one
    :class:`~mri_recon.solvers.temporal.BatchedSeriesNormal` (a few launches per product whatever the number of
    frames), else each frame's engine Toeplitz operator."""
    if state.device.is_gpu:
        xp = get_xp(state.rhs)
        return BatchedSeriesNormal(xp.stack([n.spectrum for n in state.normals]), state.maps, tikhonov)
    return [e.encoding.normal(d.w, state.maps, tikhonov, coil_batch=state.budget.coil_batch, spectrum=n.spectrum)
            for d, e, n in zip(state.data, state.encoded, state.normals)]


def _solve_joint(options: Options, state: State) -> tuple[Any, tuple[float, ...], dict[str, Any]]:
    """Every frame in one problem: ``lam_t`` and a sparse ``lam`` relative to ``max |A^H W d|`` over all frames,
    Tikhonov's (l2) and ``rho`` relative to the largest peak of the frames' normal operators."""
    xp, settings = get_xp(state.rhs), options.joint
    scale_b, peak = float(xp.abs(state.rhs).max()), max(state.peaks)
    sparse = find_regularizer(options.regularizer).sparse
    normals = _normals(options, state, 0.0 if sparse else options.lam * peak)
    terms, energy = _terms(options, state, scale_b), sum(state.energies)
    common = {"iterations": options.iterations, "data_energy": energy, "callback": state.clock.callback(),
              **solver_options(options.settings)}
    rho = None if settings["rho"] is None else settings["rho"] * peak
    x, history = solver(settings["solver"]).joint(normals, state.rhs, terms, rho=rho,
                                                  inner_iterations=settings["inner_iterations"], **common)
    extra = {"regularizer": options.regularizer, "temporal": options.temporal.name,
             "temporal_lam": options.temporal_lam, "objective": float(history[-1]),
             **settings, **({"lam_abs": options.lam * scale_b} if sparse else {})}
    return x, history, extra
