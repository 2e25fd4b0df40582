"""RING: gradient delays estimated from the radial intersections of spokes (Rosenzweig, Holme, Uecker, MRM 2019).

Two nominal spokes cross at k = 0. Delayed by ``S`` (:mod:`mri_recon.prep.delay`), spoke i runs through
``a dk_i + S dk_i``: the point the two spokes really share is found where their data agree, at offsets
``(a, b)`` from their nominal centres, and ``a dk_i + S dk_i = b dk_j + S dk_j`` is linear in ``S``. Every
spoke is paired with its most nearly orthogonal partners; the offsets of each pair come from a coarse search
of the summed squared difference over all coils, up to one phase factor per pair (so that a phase that
differs from spoke to spoke does not move the intersection; :data:`FREE_PHASE_COILS`), each readout
interpolated exactly through its band-limited Fourier series, the projection cropped to the field of view
plus 20 % (as BART's crop 0.6 at oversampling 2), refined by Gauss-Newton in the offsets and the phase;
``S`` is the least-squares solution of all pairs' equations (:func:`mri_recon.prep.fit.solve`).

Stack of stars: each of the central partitions is a 2D radial scan of its own, their equations pooled.
3D kooshball (BART issue #259): delayed 3D spokes are skew lines and no longer meet; a pair's data agree
best near their closest approach, whose two conditions (the gap orthogonal to both spokes) are the 3D
equations used. This is exact in 2D and approximate in 3D (docs/gradient_delay.md measures it).
"""

from __future__ import annotations

import numpy as np

from .delay import Readouts
from .fit import DelayEstimate, Equations, coefficients, solve, spoke_groups

_GRID = 0.125
FREE_PHASE_COILS = 3
"""Coils from which each pair's data are compared up to a phase factor (a phase that changes from spoke to
spoke: B0 drift, eddy currents, RF). With one or two coils the coil profiles alone do not fix the point of
intersection, and the data are compared as they are (as BART's RING without ``-B``)."""


def estimate_delay(scans, *, partners: int = 2, radius: float = 2.5, window: int | None = None,
                   max_spokes: int = 2048) -> DelayEstimate:
    """One RING estimate from one scan or a list of scans of the same acquisition (frames): the pairs of
    every scan (within a scan only) pooled into one fit (:func:`~mri_recon.prep.fit.solve`).

    ``partners``: intersecting spokes per spoke; ``radius``: the offsets searched, in samples on each side of
    a spoke's centre; ``window``: pair only spokes at most this many readouts apart (a moving object);
    ``max_spokes``: spokes used per scan (evenly chosen). Raises :class:`InvalidDataError` for a scan that is
    not radial or has too few spokes.
    """
    groups = spoke_groups(scans, "RING", radius + 2, max_spokes)
    series = [_fourier(g.kspace, g.readouts, g.chosen) for g in groups]
    plane, found = groups[0].readouts.plane, None
    for _ in range(3 if plane == 3 else 1):  # 3D: twice more, pairing spokes whose lines the last fit says meet
        parts = []
        for group, values in zip(groups, series):
            steps = group.readouts.steps[group.chosen]
            pairs = _pairs(steps, partners, window, None if found is None else found.tensor)
            offsets = _offsets(values, pairs, group.readouts.samples, radius)
            parts.append(_equations(steps[:, :plane], pairs, offsets))
        found = solve(Equations.joined(parts), plane, "ring", sum(len(g.chosen) for g in groups))
    return found


def _fourier(kspace, readouts: Readouts, chosen: np.ndarray) -> np.ndarray:
    """``(R, C, S)`` complex64 coefficients p[u] with ``y(c + a) = sum_u p[u] exp(2 pi i u a / S)`` (u = -S/2..),
    zero beyond the field of view plus 20 %, scaled to unit RMS (the offsets do not depend on the data's scale)."""
    samples = readouts.samples
    data = np.asarray(kspace).reshape(kspace.shape[0], readouts.count, samples)[:, chosen]
    data = np.transpose(data, (1, 0, 2)).astype(np.complex64)
    u = np.arange(samples) - samples // 2
    spectrum = np.fft.fftshift(np.fft.fft(data, axis=2), axes=2) / np.float32(samples)
    centre = readouts.centre[chosen]
    series = spectrum * np.exp(2j * np.pi * u[None, None, :] * centre[:, None, None] / samples).astype(np.complex64)
    reach = 0.6 * np.abs(readouts.steps[chosen]).sum(axis=1) * samples  # |u| of the object, +20 %
    series = series * (np.abs(u)[None, :] <= reach[:, None])[:, None, :]
    rms = float(np.sqrt(np.mean(np.abs(series.astype(np.complex128)) ** 2)))
    return series / np.float32(rms) if rms > 0 else series  # unit scale: no overflow in the squares, and
    # the Gauss-Newton step's fixed damping means the same at every scale of the data


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
    """``(P, 2)`` offsets (samples) where each pair's data agree best up to one phase factor (at least
    :data:`FREE_PHASE_COILS` coils; fewer: exactly): grid search, then Gauss-Newton in the offsets and the
    phase."""
    free = series.shape[1] >= FREE_PHASE_COILS
    grid = np.arange(-radius, radius + _GRID / 2, _GRID)
    u = np.arange(samples) - samples // 2
    shifts = np.exp(2j * np.pi * u[:, None] * grid[None, :] / samples).astype(series.dtype)
    table = np.einsum("rcu,ug->rcg", series, shifts)
    power = np.sum(np.abs(table) ** 2, axis=1)  # (R, G)
    first, second = pairs[:, 0], pairs[:, 1]
    cross = np.einsum("pcg,pch->pgh", np.conj(table[first]), table[second])
    misfit = power[first][:, :, None] + power[second][:, None, :] - 2 * (np.abs(cross) if free else cross.real)
    flat = np.argmin(misfit.reshape(len(pairs), -1), axis=1)
    a, b = grid[flat // len(grid)], grid[flat % len(grid)]
    turn = np.exp(-1j * np.angle(cross.reshape(len(pairs), -1)[np.arange(len(pairs)), flat])) if free else 1.0
    one, other = series[first], series[second]
    for _ in range(8):
        a, b, turn = _gauss_newton(one, other, a, b, turn if free else None, samples, radius)
        turn = 1.0 if turn is None else turn
    return np.stack([a, b], axis=1)


def _gauss_newton(one, other, a, b, turn, samples: int, radius: float):
    """One step of ``min |y_1(a) - t y_2(b)|^2`` in ``a``, ``b`` and (``turn`` not None) the phase of ``t``."""
    factor = 1.0 if turn is None else turn[:, None]
    ya, yb = _values(one, a, samples), factor * _values(other, b, samples)
    da, db = _values(one, a, samples, True), factor * _values(other, b, samples, True)
    columns = [da, -db] + ([] if turn is None else [-1j * yb])
    jac = np.stack(columns, axis=2)  # (P, C, 2 or 3)
    normal = np.einsum("pci,pcj->pij", np.conj(jac), jac).real + 1e-12 * np.eye(len(columns))
    grad = np.einsum("pci,pc->pi", np.conj(jac), ya - yb).real
    step = np.linalg.solve(normal, grad[:, :, None])[:, :, 0]
    a = np.clip(a - np.clip(step[:, 0], -_GRID, _GRID), -radius, radius)
    b = np.clip(b - np.clip(step[:, 1], -_GRID, _GRID), -radius, radius)
    if turn is not None:
        turn = turn * np.exp(-1j * np.clip(step[:, 2], -0.5, 0.5))
    return a, b, turn


def _equations(steps: np.ndarray, pairs: np.ndarray, offsets: np.ndarray) -> Equations:
    """Two equations per pair: ``x . S (u - v) = x . (b v - a u)`` for x = u, v, divided by ``|u| |v|``
    (samples), both in the half of the pair's first spoke."""
    u, v = steps[pairs[:, 0]], steps[pairs[:, 1]]
    a, b = offsets[:, :1], offsets[:, 1:]
    gap = b * v - a * u
    scale = (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1))[:, None]
    rows = [coefficients(x, u - v) / scale for x in (u, v)]
    rhs = [np.sum(x * gap, axis=1) / scale[:, 0] for x in (u, v)]
    return Equations(np.concatenate(rows), np.concatenate(rhs), np.tile(pairs[:, 0], 2))
