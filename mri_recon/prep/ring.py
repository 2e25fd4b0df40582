"""RING: gradient delays estimated from the radial intersections of spokes (Rosenzweig, Holme, Uecker, MRM 2019).

Two nominal spokes cross at k = 0. Delayed by ``S`` (:mod:`mri_recon.prep.delay`), spoke i runs through
``a dk_i + S dk_i``: the point the two spokes really share is found where their data agree, at offsets
``(a, b)`` from their nominal centres, and ``a dk_i + S dk_i = b dk_j + S dk_j`` is linear in ``S``. Every
spoke is paired with its most nearly orthogonal partners; the offsets of each pair come from a coarse search
of the summed squared difference over all coils (each readout interpolated exactly through its band-limited
Fourier series, the projection cropped to the field of view plus 20 %, as BART's crop 0.6 at oversampling 2),
refined by Gauss-Newton; ``S`` is the least-squares solution of all pairs' equations, refitted once without
the pairs whose residual is an outlier.

Stack of stars: each of the central partitions is a 2D radial scan of its own, their equations pooled.
3D kooshball (BART issue #259): delayed 3D spokes are skew lines and no longer meet; a pair's data agree
best near their closest approach, whose two conditions (the gap orthogonal to both spokes) are the 3D
equations used. This is exact in 2D and approximate in 3D (docs/gradient_delay.md measures it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidDataError
from .delay import Readouts, parameters_of, radial_readouts, readout_length, tensor_of

MIN_SPOKES = {"radial": 8, "stack-of-stars": 8, "kooshball": 64}
"""Spokes (per partition for a stack of stars) RING needs: below these the estimate is not trusted (2D:
6 golden-angle spokes still give 0.01 samples at SNR 3, docs/gradient_delay.md)."""
_PARTITIONS = 3
_GRID = 0.125


@dataclass(frozen=True)
class DelayEstimate:
    tensor: np.ndarray
    """``(2, 2)`` or ``(3, 3)`` delay tensor in samples (:mod:`mri_recon.prep.delay`)."""
    std: np.ndarray
    """Standard errors of :attr:`parameters` (least squares), samples."""
    spokes: int
    pairs: int
    rms: float
    """RMS residual of the pairs' equations kept, samples."""

    @property
    def parameters(self) -> list[float]:
        return parameters_of(self.tensor)


def estimate_delay(scans, *, partners: int = 2, radius: float = 2.5, window: int | None = None,
                   max_spokes: int = 2048) -> DelayEstimate:
    """One gradient-delay estimate from one scan or a list of scans of the same acquisition (frames):
    the pairs of every scan (within a scan only) pooled into one fit.

    ``partners``: intersecting spokes per spoke; ``radius``: the offsets searched, in samples on each side of
    a spoke's centre; ``window``: pair only spokes at most this many readouts apart (a moving object);
    ``max_spokes``: spokes used per scan (evenly chosen). Raises :class:`InvalidDataError` for a scan that is
    not radial or has too few spokes.
    """
    scans = [scans] if not isinstance(scans, (list, tuple)) else list(scans)
    if not scans:
        raise InvalidDataError("a gradient-delay estimate needs at least one scan, found none")
    groups, spokes, kinds = [], 0, set()
    for scan in scans:
        readouts = radial_readouts(scan.trajectory, readout_length(scan))
        kinds.add(readouts.kind)
        if len(kinds) > 1:
            raise InvalidDataError(f"one gradient-delay estimate needs scans of one kind, found {sorted(kinds)}")
        margin = radius + 2
        if np.any(readouts.centre < margin) or np.any(readouts.centre > readouts.samples - 1 - margin):
            raise InvalidDataError(f"RING needs spokes through the centre with k = 0 at least {margin:g} samples "
                                   f"from either end; these readouts start or end at the centre (centre-out)")
        for chosen in _groups(readouts, max_spokes):
            if len(chosen) < MIN_SPOKES[readouts.kind]:
                raise InvalidDataError(f"RING needs at least {MIN_SPOKES[readouts.kind]} spokes for a "
                                       f"{readouts.kind} scan, found {len(chosen)}")
            groups.append((readouts, chosen, _fourier(scan.kspace, readouts, chosen)))
            spokes += len(chosen)
    plane, found = groups[0][0].plane, None
    for _ in range(3 if plane == 3 else 1):  # 3D: twice more, pairing spokes whose lines the last fit says meet
        rows, rhs = [], []
        for readouts, chosen, series in groups:
            steps = readouts.steps[chosen]
            pairs = _pairs(steps, partners, window, None if found is None else found.tensor)
            offsets = _offsets(series, pairs, readouts.samples, radius)
            a, b = _equations(steps[:, :plane], pairs, offsets)
            rows.append(a)
            rhs.append(b)
        found = _solve(np.concatenate(rows), np.concatenate(rhs), plane, spokes)
    return found


def _groups(readouts: Readouts, max_spokes: int) -> list[np.ndarray]:
    """Readout indices estimated together: all (a stack of stars: each of its central partitions)."""
    if readouts.partition is None:
        groups = [np.arange(readouts.count)]
    else:
        kz = np.round(readouts.partition, 6)
        values = np.unique(kz)
        central = values[np.argsort(np.abs(values), kind="stable")[:_PARTITIONS]]
        groups = [np.flatnonzero(kz == v) for v in central]
    return [g if len(g) <= max_spokes else g[np.linspace(0, len(g) - 1, max_spokes).astype(int)] for g in groups]


def _fourier(kspace, readouts: Readouts, chosen: np.ndarray) -> np.ndarray:
    """``(R, C, S)`` complex64 coefficients p[u] with ``y(c + a) = sum_u p[u] exp(2 pi i u a / S)`` (u = -S/2..),
    zero beyond the field of view plus 20 %."""
    samples = readouts.samples
    data = np.asarray(kspace).reshape(kspace.shape[0], readouts.count, samples)[:, chosen]
    data = np.transpose(data, (1, 0, 2)).astype(np.complex64)
    u = np.arange(samples) - samples // 2
    spectrum = np.fft.fftshift(np.fft.fft(data, axis=2), axes=2) / np.float32(samples)
    centre = readouts.centre[chosen]
    series = spectrum * np.exp(2j * np.pi * u[None, None, :] * centre[:, None, None] / samples).astype(np.complex64)
    reach = 0.6 * np.abs(readouts.steps[chosen]).sum(axis=1) * samples  # |u| of the object, +20 %
    return series * (np.abs(u)[None, :] <= reach[:, None])[:, None, :]


def _pairs(steps: np.ndarray, partners: int, window: int | None, tensor: np.ndarray | None = None) -> np.ndarray:
    """``(P, 2)`` pairs: every spoke with its ``partners`` most nearly orthogonal spokes, each pair once.

    With a first estimate ``tensor`` (3D), the partners are instead those at least 60 degrees away whose
    delayed lines come closest to meeting (the gap ``S (u - v)`` across both spokes' plane)."""
    n = steps / np.linalg.norm(steps, axis=1, keepdims=True)
    closeness = np.abs(n @ n.T)
    np.fill_diagonal(closeness, np.inf)
    if window is not None:
        index = np.arange(len(n))
        closeness[np.abs(index[:, None] - index[None, :]) > window] = np.inf
    score = closeness
    if tensor is not None:  # gap = (n_i x n_j) . (S n_i - S n_j) / |n_i x n_j|, as triple products
        moved = n @ tensor.T  # S n of each spoke, samples
        triple = np.cross(moved, n) @ n.T - n @ np.cross(n, moved).T
        gap = np.abs(triple) / np.sqrt(np.clip(1 - np.minimum(closeness, 1) ** 2, 1e-12, None))
        score = np.where(closeness < 0.5, gap, np.inf)
    best = np.argsort(score, axis=1, kind="stable")[:, :partners]
    pairs = np.stack([np.repeat(np.arange(len(n)), best.shape[1]), best.ravel()], axis=1)
    pairs = pairs[np.isfinite(score[pairs[:, 0], pairs[:, 1]]) & (closeness[pairs[:, 0], pairs[:, 1]] < 0.9)]
    return np.unique(np.sort(pairs, axis=1), axis=0)


def _values(series: np.ndarray, offsets: np.ndarray, samples: int, derivative: bool = False) -> np.ndarray:
    """``y(c + a)`` (or ``y'``) of readouts ``series`` ``(P, C, S)`` at offsets ``(P,)`` -> ``(P, C)``."""
    u = np.arange(series.shape[2]) - samples // 2
    phase = np.exp(2j * np.pi * u[None, :] * offsets[:, None] / samples)
    if derivative:
        phase = phase * (2j * np.pi * u[None, :] / samples)
    return np.einsum("pcu,pu->pc", series, phase.astype(series.dtype))


def _offsets(series: np.ndarray, pairs: np.ndarray, samples: int, radius: float) -> np.ndarray:
    """``(P, 2)`` offsets (samples) where each pair's data agree best: grid search, then Gauss-Newton."""
    grid = np.arange(-radius, radius + _GRID / 2, _GRID)
    u = np.arange(samples) - samples // 2
    shifts = np.exp(2j * np.pi * u[:, None] * grid[None, :] / samples).astype(series.dtype)
    table = np.einsum("rcu,ug->rcg", series, shifts)
    power = np.sum(np.abs(table) ** 2, axis=1)  # (R, G)
    first, second = pairs[:, 0], pairs[:, 1]
    cross = np.einsum("pcg,pch->pgh", np.conj(table[first]), table[second]).real
    misfit = power[first][:, :, None] + power[second][:, None, :] - 2 * cross
    flat = np.argmin(misfit.reshape(len(pairs), -1), axis=1)
    a, b = grid[flat // len(grid)], grid[flat % len(grid)]
    one, other = series[first], series[second]
    for _ in range(8):
        ya, yb = _values(one, a, samples), _values(other, b, samples)
        da, db = _values(one, a, samples, True), _values(other, b, samples, True)
        r = ya - yb
        jac = np.stack([da, -db], axis=2)  # (P, C, 2)
        normal = np.einsum("pci,pcj->pij", np.conj(jac), jac).real + 1e-12 * np.eye(2)
        grad = np.einsum("pci,pc->pi", np.conj(jac), r).real
        step = np.linalg.solve(normal, grad[:, :, None])[:, :, 0]
        step = np.clip(step, -_GRID, _GRID)
        a, b = np.clip(a - step[:, 0], -radius, radius), np.clip(b - step[:, 1], -radius, radius)
    return np.stack([a, b], axis=1)


def _coefficients(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Row of ``x . S w`` in the parameters of :func:`~mri_recon.prep.delay.parameters_of` ``(P, n)``."""
    plane = x.shape[1]
    pairs = [(0, 1)] if plane == 2 else [(0, 1), (0, 2), (1, 2)]
    diagonal = [x[:, d] * w[:, d] for d in range(plane)]
    off = [x[:, p] * w[:, q] + x[:, q] * w[:, p] for p, q in pairs]
    return np.stack(diagonal + off, axis=1)


def _equations(steps: np.ndarray, pairs: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and right-hand sides, 2 per pair: ``x . S (u - v) = x . (b v - a u)`` for x = u, v, divided
    by ``|u| |v|`` (samples)."""
    u, v = steps[pairs[:, 0]], steps[pairs[:, 1]]
    a, b = offsets[:, :1], offsets[:, 1:]
    gap = b * v - a * u
    scale = (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1))[:, None]
    rows = [_coefficients(x, u - v) / scale for x in (u, v)]
    rhs = [np.sum(x * gap, axis=1) / scale[:, 0] for x in (u, v)]
    return np.concatenate(rows), np.concatenate(rhs)


def _solve(rows: np.ndarray, rhs: np.ndarray, plane: int, spokes: int) -> DelayEstimate:
    """Least squares, refitted once without the pairs whose residual exceeds 5 robust deviations."""
    keep = np.ones(len(rhs), dtype=bool)
    for _ in range(2):
        params, *_ = np.linalg.lstsq(rows[keep], rhs[keep], rcond=None)
        residual = rows @ params - rhs
        spread = 1.4826 * np.median(np.abs(residual[keep] - np.median(residual[keep])))
        keep = np.abs(residual) <= max(5 * spread, 1e-3)
    kept = residual[keep]
    dof = max(int(keep.sum()) - rows.shape[1], 1)
    cov = np.linalg.pinv(rows[keep].T @ rows[keep]) * float(kept @ kept) / dof
    return DelayEstimate(tensor_of(params, plane), np.sqrt(np.clip(np.diag(cov), 0, None)), spokes,
                         int(keep.sum()) // 2, float(np.sqrt(np.mean(kept**2))) if len(kept) else 0.0)
