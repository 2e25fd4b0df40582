"""Joint reconstruction of all frames of a time series with temporal (and spatial) sparsity.

Frames ``x = (x_0, ..., x_{T-1})`` (shape ``(T, *matrix)``) solve one problem

    min_x  sum_t ||W_t^(1/2) (A_t x_t - d_t)||^2 + lam_t ||D_t x||_1 + lam_s R_s(x)

with ``D_t`` the forward differences along time, ``(D_t x)_t = x_{t+1} - x_t`` (shape ``(T-1, *matrix)``,
no wrap-around), ``||.||_1`` the sum of complex moduli (as BART's ``pics -R T``), and ``R_s`` an optional
spatial regularizer of every frame (total variation or l1-wavelets, :func:`mri_recon.solvers.sparse.sparsity_of`).
The temporal term is any of :data:`~.temporal_terms.TEMPORAL_TERMS` (``D_t`` and the l1 norm for ``tv``; the
frames themselves and a nuclear norm for the low-rank terms): each term's z-update and dual projection are its
:class:`~.admm.Sparsity`'s (:meth:`~.admm.Sparsity.shrink`, :meth:`~.admm.Sparsity.project`).
The data term's normal operator is block diagonal: one Toeplitz normal operator per frame
(:class:`SeriesNormal`, each from :func:`mri_recon.operators.toeplitz.normal_operator`, the fused GPU one on a GPU).

Two solvers, both NumPy and CuPy (every step array operations or the existing kernels: ``prox.cu`` for the
thresholds, ``tv.cu`` for spatial TV, ``cg.cu`` for ADMM's x-update):

- :func:`joint_admm`: ADMM with one split ``z_j = K_j x`` per term, scaled duals, one penalty ``2 rho``;
  the x-update is ``inner_iterations`` warm-started CG steps on ``N + rho sum_j K_j^H K_j`` (:class:`~.cg.WarmCg`).
- :func:`joint_pdhg`: the primal-dual method of Condat and Vu with the data term linearized (one normal
  operator product per iteration, no inner solve); steps from ``||N||`` (power iteration,
  :func:`~.power.operator_norm`) and ``||K_j||^2``.

Both report the objective relative to its value at ``x = 0`` (``d^H W d``): ADMM's from the x-update's carried
CG residual (:func:`~.admm.carried_objective`, no operator product), the primal-dual method's with one product.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import fft
from ..arrays.backend import get_xp
from ..errors import InvalidDataError
from ..operators.replay import capture_keeping
from .admm import Callback, Sparsity, carried_objective, objective
from .cg import WarmCg, inner
from .power import operator_norm
from .temporal_terms import time_difference, time_difference_adjoint

__all__ = ["ITERATIONS_DEFAULT", "RHO_DEFAULT", "BatchedSeriesNormal",
           "SeriesNormal", "Term", "joint_admm", "joint_pdhg", "operator_norm", "series_objective", "time_difference",
           "time_difference_adjoint"]

RHO_DEFAULT = 0.5
"""ADMM's penalty relative to the normal operators' peak (docs/temporal.md)."""
ITERATIONS_DEFAULT = 200
"""Iterations of a joint solve when none are given: where it has converged on the beating phantom
(docs/temporal.md)."""


@dataclass
class Term:
    """One regularizer ``lam R(K x)``: its :class:`~mri_recon.solvers.admm.Sparsity`, its absolute weight and
    a bound on ``||K||^2`` (for the primal-dual steps)."""

    sparsity: Sparsity
    lam: float
    norm_squared: float


class SeriesNormal:
    """``x -> (N_0 x_0, ..., N_{T-1} x_{T-1}) + shift x``: the block-diagonal normal operator of all frames.

    ``normals`` are the frames' operators (:func:`~mri_recon.operators.toeplitz.normal_operator`); when each
    writes into a given array (the fused GPU one), so does this (``apply_into``), and ADMM's device CG uses it
    without allocating. ``gram`` (optional, ``(x, out, rho) -> out += rho sum_j K_j^H K_j x`` in place) adds
    the penalty's part.
    """

    hermitian = True

    def __init__(self, normals: Sequence[Any], rho: float = 0.0,
                 gram: Callable[[Any, Any, float], None] | None = None) -> None:
        self.normals, self.rho, self.gram = list(normals), float(rho), gram
        self.writes_into = all(getattr(op, "writes_into", False) for op in self.normals)

    def with_penalty(self, rho: float, gram: Callable[[Any, Any, float], None]) -> SeriesNormal:
        """The same operator plus ``rho sum_j K_j^H K_j x`` added by ``gram`` (ADMM's x-update)."""
        return SeriesNormal(self.normals, rho, gram)

    def data(self, x: Any) -> Any:
        """``N x`` without the penalty."""
        out = get_xp(x).empty_like(x)
        self._data_into(x, out)
        return out

    def _data_into(self, x: Any, out: Any) -> None:
        for t, op in enumerate(self.normals):
            if getattr(op, "writes_into", False):
                op.apply_into(x[t], out[t])
            else:
                out[t] = op(x[t])

    def apply_into(self, x: Any, out: Any) -> None:
        self._data_into(x, out)
        if self.rho and self.gram is not None:
            self.gram(x, out, self.rho)

    def __call__(self, x: Any) -> Any:
        out = get_xp(x).empty_like(x)
        self.apply_into(x, out)
        return out


class BatchedSeriesNormal(SeriesNormal):
    """The block-diagonal normal operator of :class:`SeriesNormal` with all frames in one pass per batch of
    ``frame_batch`` frames: ``S_c x_t`` for every frame and coil, one batched zero-padded FFT, the frames'
    spectra, one inverse FFT, crop, ``sum_c conj(S_c)``, plus ``lam x``. The same products as one
    :func:`~mri_recon.operators.toeplitz.normal_operator` per frame, in a few launches per application
    whatever the number of frames. On a GPU the steps are fused kernels writing into kept buffers
    (:class:`~mri_recon.operators.normal.gpu_toeplitz.FusedSeriesNormal`); NumPy runs them as array operations
    (the reference its test compares with).

    ``spectra``: ``(T, *grid)`` kernel spectra (:func:`~mri_recon.operators.toeplitz.kernel_spectrum`; with
    ``fused`` and ``frame_batch`` given, ``None`` will do); ``maps``: ``(C, *matrix)``.
    """

    def __init__(self, spectra: Any, maps: Any, lam: float = 0.0, frame_batch: int | None = None,
                 rho: float = 0.0, gram: Callable[[Any, Any, float], None] | None = None,
                 fused: Any = None) -> None:
        super().__init__([], rho, gram)
        self.maps, self.lam = maps, float(lam)
        self.batch = len(spectra) if frame_batch is None else max(1, int(frame_batch))
        self.writes_into = True
        if fused is None and get_xp(maps) is not np:
            from ..operators.normal.gpu_toeplitz import FusedSeriesNormal  # noqa: PLC0415 - GPU only

            fused = FusedSeriesNormal(spectra, maps, self.lam, self.batch)
        self.fused = fused
        self.spectra = spectra if fused is None else None  # the fused operator keeps its own scaled copy

    def with_penalty(self, rho: float, gram: Callable[[Any, Any, float], None]) -> BatchedSeriesNormal:
        return BatchedSeriesNormal(self.spectra, self.maps, self.lam, self.batch, rho, gram, self.fused)

    def _data_into(self, x: Any, out: Any) -> None:
        if self.fused is not None:
            self.fused.apply_into(x, out)
            return
        nd = self.maps.ndim - 1
        axes, grid = tuple(range(-nd, 0)), tuple(self.spectra.shape[1:])
        crop = (Ellipsis, *(slice(0, n) for n in self.maps.shape[1:]))
        for start in range(0, x.shape[0], self.batch):
            part = slice(start, start + self.batch)
            spectrum = fft.fftn(self.maps[None] * x[part, None], axes, shape=grid, overwrite=True)
            spectrum *= self.spectra[part, None]
            images = fft.fftn(spectrum, axes, inverse=True, overwrite=True)[crop]
            out[part] = (np.conj(self.maps)[None] * images).sum(axis=1)
            if self.lam:
                out[part] += self.lam * x[part]


def series_objective(normal: SeriesNormal, x: Any, rhs: Any, data_energy: float, terms: Sequence[Term]) -> float:
    """``Re<x, N x> - 2 Re<x, b> + d^H W d + sum_j lam_j R_j(K_j x)`` (float64 inner products)."""
    penalty = sum(term.lam * term.sparsity.norm(term.sparsity.forward(x)) for term in terms)
    return objective(x, normal.data(x), rhs, data_energy, 1.0, penalty)


def _gram(terms: Sequence[Term]) -> Callable[[Any, Any, float], None]:
    """``(x, out, rho) -> out += rho sum_j K_j^H K_j x`` in place: one term's own
    :meth:`~.admm.Sparsity.add_gram` (one kernel where it has one), several terms' products summed first."""
    if len(terms) == 1:
        return terms[0].sparsity.add_gram

    def gram(x: Any, out: Any, rho: float) -> None:
        total = terms[0].sparsity.gram(x)
        for term in terms[1:]:
            total = total + term.sparsity.gram(x)
        out += rho * total
    return gram


def _series(normals: Any) -> SeriesNormal:
    """``normals`` as one :class:`SeriesNormal`: the frames' operators, or one already (batched, subspace)."""
    return normals if isinstance(normals, SeriesNormal) else SeriesNormal(normals)


def _check(iterations: int, terms: Sequence[Term]) -> None:
    if iterations < 1:
        raise InvalidDataError(f"iterations must be >= 1, found {iterations}")
    if not terms:
        raise InvalidDataError("a joint reconstruction needs at least one regularizer term")


def joint_admm(normals: Sequence[Any], rhs: Any, terms: Sequence[Term], *, rho: float, iterations: int,
               inner_iterations: int, data_energy: float, callback: Callback | None = None,
               check_every: int = 10) -> tuple[Any, tuple[float, ...]]:
    """ADMM over all frames (see the module docstring). ``normals``: one normal operator per frame, or a
    :class:`SeriesNormal` (:class:`BatchedSeriesNormal`; a subspace's, on coefficient images); ``rhs`` is
    ``(T, *matrix)`` (``b_t = A_t^H W_t d_t``); ``rho`` the absolute penalty. Returns the frames and the
    relative objective (1 first, then one per check)."""
    _check(iterations, terms)
    if not rho > 0 or not math.isfinite(rho):
        raise InvalidDataError(f"rho must be a positive finite number, found {rho}")
    xp = get_xp(rhs)
    x = xp.zeros_like(rhs)
    if not inner(rhs, rhs).real > 0:
        return x, (1.0,)
    operator = _series(normals).with_penalty(rho, _gram(terms))
    z = [xp.zeros(t.sparsity.shape, dtype=rhs.dtype) for t in terms]
    u = [xp.zeros_like(v) for v in z]
    energy = data_energy if data_energy > 0 else 1.0
    solve = WarmCg(operator, rhs, inner_iterations)
    # r = b - A x carried from one x-update to the next; previous holds this iteration's b
    history, r, previous = [1.0], rhs.copy(), rhs.copy()

    def x_update(first: bool) -> list[Any]:
        """The new right-hand side into ``r`` and ``previous``, CG steps on x; returns the ``K_j x``."""
        if not first:
            b = rhs
            for term, zj, uj in zip(terms, z, u):
                b = term.sparsity.adjoint_rhs(b, zj - uj, rho)
            xp.add(r, b, out=r)
            xp.subtract(r, previous, out=r)
            previous[...] = b
        solve(x, r)
        return [term.sparsity.forward(x) for term in terms]

    def shrink(kxs: list[Any]) -> None:
        for term, kx, zj, uj in zip(terms, kxs, z, u):
            term.sparsity.shrink(kx, uj, zj, term.lam / (2.0 * rho))

    replay = _IterationReplay(xp, lambda: shrink(x_update(False)), all(t.sparsity.replayable for t in terms))
    for k in range(1, iterations + 1):
        checked = k % check_every == 0 or k == iterations
        if k > 2 and not checked and replay.run():
            continue
        kxs = x_update(k == 1)
        if checked:  # before the shrinkage, which may overwrite K_j x
            penalty = sum(term.lam * term.sparsity.norm(kx) for term, kx in zip(terms, kxs))
            history.append(carried_objective(x, previous, r, rhs, data_energy, rho, kxs, penalty) / energy)
        shrink(kxs)
        if checked and callback is not None:
            callback(k, x, history[-1])
    return x, tuple(history)


class _IterationReplay:
    """An ADMM iteration without a check, captured once as a CUDA graph on a GPU and replayed
    (:func:`~mri_recon.operators.replay.capture_keeping`): one launch instead of a few dozen. :meth:`run` queues
    one iteration and says so, or returns False (on the CPU, or where capture was refused) for the caller to
    run it as it is."""

    def __init__(self, xp: Any, iteration: Callable[[], None], replayable: bool) -> None:
        self.xp, self.iteration = xp, iteration
        self.kept: Any = None
        self.refused = xp is np or not replayable  # e.g. LLR's random shifts, drawn on the host per iteration

    def run(self) -> bool:
        if self.refused:
            return False
        if self.kept is None:
            self.kept = capture_keeping(self.xp, self.iteration)
            self.refused = self.kept is None
            if self.refused:
                return False
        self.kept.launch(self.xp)
        return True


def joint_pdhg(normals: Sequence[Any], rhs: Any, terms: Sequence[Term], *, iterations: int, data_energy: float,
               lipschitz: float | None = None, callback: Callback | None = None,
               check_every: int = 10) -> tuple[Any, tuple[float, ...]]:
    """Condat-Vu primal-dual iterations over all frames (see the module docstring):

        x+ = x - tau (2 (N x - b) + sum_j K_j^H y_j),   y_j = proj_{lam_j}(y_j + sigma K_j (2 x+ - x))

    with ``L = 2 ||N||`` (``lipschitz``; None: power iteration), ``tau = 1 / L`` and
    ``sigma = L / (2 sum_j ||K_j||^2)``, which meets ``1 / tau - sigma ||K||^2 >= L / 2``."""
    _check(iterations, terms)
    xp = get_xp(rhs)
    x = xp.zeros_like(rhs)
    if not inner(rhs, rhs).real > 0:
        return x, (1.0,)
    operator = _series(normals)
    big = 2.0 * operator_norm(operator, rhs) if lipschitz is None else float(lipschitz)
    tau, sigma = 1.0 / big, big / (2.0 * sum(t.norm_squared for t in terms))
    y = [xp.zeros(t.sparsity.shape, dtype=rhs.dtype) for t in terms]
    energy = data_energy if data_energy > 0 else 1.0
    history = [1.0]
    for k in range(1, iterations + 1):
        step = 2.0 * (operator.data(x) - rhs)
        for term, yj in zip(terms, y):
            step = term.sparsity.adjoint_rhs(step, yj, 1.0)
        new = x - tau * step
        extrapolated = 2.0 * new - x
        for term, yj in zip(terms, y):
            yj += sigma * term.sparsity.forward(extrapolated)
            term.sparsity.project(yj, term.lam)
        x = new
        if k % check_every == 0 or k == iterations:
            history.append(series_objective(operator, x, rhs, data_energy, terms) / energy)
            if callback is not None:
                callback(k, x, history[-1])
    return x, tuple(history)

