"""The least-squares fit shared by the gradient-delay estimators, and the evidence it gives for its result.

Each estimator (:mod:`~mri_recon.prep.ring`, :mod:`~mri_recon.prep.adaptive`) turns the data into linear
equations in the delay tensor's parameters (:func:`~mri_recon.prep.delay.parameters_of`), each equation
belonging to one spoke. :func:`solve` fits them robustly and fits the even and the odd spokes' equations
again on their own: how far those two halves of the scan disagree (:attr:`DelayEstimate.halves`) is the
data's own measure of how far the estimate can be trusted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidDataError
from .delay import Readouts, parameters_of, radial_readouts, readout_length, tensor_of

MIN_SPOKES = {"radial": 8, "stack-of-stars": 8, "kooshball": 64}
"""Spokes (per partition for a stack of stars) an estimate needs: below these it is not trusted (2D:
6 golden-angle spokes still give 0.01 samples at SNR 3, docs/gradient_delay.md)."""
_PARTITIONS = 3


@dataclass(frozen=True)
class Equations:
    """Linear equations ``rows @ parameters = rhs`` of one estimator."""

    rows: np.ndarray
    """``(E, P)`` float64 coefficients of the tensor's parameters."""
    rhs: np.ndarray
    """``(E,)`` float64 right-hand sides, samples."""
    split: np.ndarray
    """``(E,)`` integers: equations of the same value come from the same spokes and fall into the same half
    of the scan (the even or the odd values) in :attr:`DelayEstimate.halves`."""

    @staticmethod
    def joined(parts: list[Equations]) -> Equations:
        """One system of several scans' or partitions' equations (split values kept distinct per part)."""
        offset, split = 0, []
        for part in parts:
            split.append(part.split + offset)
            offset += int(part.split.max(initial=-1)) + 1
        return Equations(np.concatenate([p.rows for p in parts]), np.concatenate([p.rhs for p in parts]),
                         np.concatenate(split))


@dataclass(frozen=True)
class DelayEstimate:
    """A gradient-delay estimate and the figures that say how well the data support it."""

    method: str
    """The estimator: ``"ring"`` or ``"opposed"``."""
    tensor: np.ndarray
    """``(2, 2)`` or ``(3, 3)`` delay tensor in samples (:mod:`mri_recon.prep.delay`)."""
    std: np.ndarray
    """Standard errors of :attr:`parameters` (least squares, as if every equation were independent: RING's two
    equations of a pair share its noise, so these are lower bounds), samples."""
    spokes: int
    """Spokes of the scan (or frames, or partitions) estimated from."""
    equations: int
    """Equations kept after the outliers were dropped."""
    rms: float
    """RMS residual of the equations kept, samples."""
    halves: float
    """Largest difference between the parameters fitted to the even and to the odd spokes alone, samples
    (``inf`` when a half cannot determine them). RING's pairs that join an even and an odd spoke sit in the
    half of their first spoke, so the halves share some spokes' data: the figure catches an estimate that
    does not hold together, not a bias both halves share."""

    @property
    def parameters(self) -> list[float]:
        return parameters_of(self.tensor)


def coefficients(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Rows of ``x . S w`` in the parameters of :func:`~mri_recon.prep.delay.parameters_of` ``(E, P)``."""
    plane = x.shape[1]
    pairs = [(0, 1)] if plane == 2 else [(0, 1), (0, 2), (1, 2)]
    diagonal = [x[:, d] * w[:, d] for d in range(plane)]
    off = [x[:, p] * w[:, q] + x[:, q] * w[:, p] for p, q in pairs]
    return np.stack(diagonal + off, axis=1)


def solve(equations: Equations, plane: int, method: str, spokes: int) -> DelayEstimate:
    """Least squares, refitted once without the equations whose residual exceeds 5 robust deviations, and
    the two halves' fits of the equations kept."""
    rows, rhs = equations.rows, equations.rhs
    params, keep = _robust(rows, rhs)
    residual = rows @ params - rhs
    kept = residual[keep]
    dof = max(int(keep.sum()) - rows.shape[1], 1)
    cov = np.linalg.pinv(rows[keep].T @ rows[keep]) * float(kept @ kept) / dof
    halves = _halves(rows, rhs, keep, equations.split % 2 == 0)
    return DelayEstimate(method, tensor_of(params, plane), np.sqrt(np.clip(np.diag(cov), 0, None)), spokes,
                         int(keep.sum()),
                         float(np.sqrt(np.mean(kept**2))) if len(kept) else 0.0, halves)


def _robust(rows: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(parameters, equations kept)``: a least-squares fit, the equations within 5 robust deviations of it,
    and the fit of those."""
    params, *_ = np.linalg.lstsq(rows, rhs, rcond=None)
    residual = rows @ params - rhs
    spread = 1.4826 * np.median(np.abs(residual - np.median(residual)))
    keep = np.abs(residual) <= max(5 * spread, 1e-3)
    params, *_ = np.linalg.lstsq(rows[keep], rhs[keep], rcond=None)
    return params, keep


def _halves(rows: np.ndarray, rhs: np.ndarray, keep: np.ndarray, even: np.ndarray) -> float:
    """Largest parameter difference between the fits of the kept equations of even and of odd spokes."""
    fits = []
    for half in (keep & even, keep & ~even):
        if half.sum() < rows.shape[1] or np.linalg.matrix_rank(rows[half], tol=1e-6) < rows.shape[1]:
            return float("inf")
        fits.append(np.linalg.lstsq(rows[half], rhs[half], rcond=None)[0])
    return float(np.max(np.abs(fits[0] - fits[1])))


@dataclass(frozen=True)
class Group:
    """Spokes estimated together: one scan's (a stack of stars: one central partition's)."""

    kspace: np.ndarray
    """The scan's ``(C, M)`` k-space."""
    readouts: Readouts
    chosen: np.ndarray
    """Readout indices of the group."""


def spoke_groups(scans, method: str, margin: float, max_spokes: int = 2048) -> list[Group]:
    """The groups of one scan or the frames of one acquisition (one kind), each with at least
    :data:`MIN_SPOKES` spokes through the centre and k = 0 at least ``margin`` samples from either end;
    else :class:`InvalidDataError` naming ``method``. At most ``max_spokes`` per group (evenly chosen)."""
    scans = [scans] if not isinstance(scans, (list, tuple)) else list(scans)
    if not scans:
        raise InvalidDataError("a gradient-delay estimate needs at least one scan, found none")
    groups, kinds = [], set()
    for scan in scans:
        readouts = radial_readouts(scan.trajectory, readout_length(scan))
        kinds.add(readouts.kind)
        if len(kinds) > 1:
            raise InvalidDataError(f"one gradient-delay estimate needs scans of one kind, found {sorted(kinds)}")
        if np.any(readouts.centre < margin) or np.any(readouts.centre > readouts.samples - 1 - margin):
            raise InvalidDataError(f"{method} needs spokes through the centre with k = 0 at least {margin:g} "
                                   f"samples from either end; these readouts start or end at the centre "
                                   f"(centre-out)")
        for chosen in estimated_groups(readouts, max_spokes):
            if len(chosen) < MIN_SPOKES[readouts.kind]:
                raise InvalidDataError(f"{method} needs at least {MIN_SPOKES[readouts.kind]} spokes for a "
                                       f"{readouts.kind} scan, found {len(chosen)}")
            groups.append(Group(scan.kspace, readouts, chosen))
    return groups


def estimated_groups(readouts: Readouts, max_spokes: int = 2**31) -> list[np.ndarray]:
    """Readout indices estimated together: all (a stack of stars: each of its central partitions), at most
    ``max_spokes`` each (evenly chosen)."""
    if readouts.partition is None:
        groups = [np.arange(readouts.count)]
    else:
        kz = np.round(readouts.partition, 6)
        values = np.unique(kz)
        central = values[np.argsort(np.abs(values), kind="stable")[:_PARTITIONS]]
        groups = [np.flatnonzero(kz == v) for v in central]
    return [g if len(g) <= max_spokes else g[np.linspace(0, len(g) - 1, max_spokes).astype(int)] for g in groups]
