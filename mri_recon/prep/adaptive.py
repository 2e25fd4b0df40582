"""Gradient delays from opposed spokes: BART's default ``estdelay`` (Block and Uecker, ISMRM 2011, 2816;
the quadratic form of Moussavi et al., MRM 2014).

Two spokes of opposite direction measure the same projection of the object, one readout reversed. Delayed
by ``S`` (:mod:`mri_recon.prep.delay`), spoke i samples its line at ``(s - c_i + d_i) dk_i`` with
``d_i = n_i . S n_i`` (``n_i`` the unit direction), and its partner j, reversed, samples the same line at
``(r - (N - 1 - c_j) - d_i) dk_i``: the two sequences are one function on grids ``Delta = 2 d_i - c_i - c_j
+ N - 1`` samples apart. ``Delta`` is the slope of the phase of their cross-spectrum in the projection
domain, read from its lag-one product summed over the readout and the coils, which no constant phase of
either spoke changes. ``d_i = n_i . S n_i`` for every spoke is linear in ``S``: least squares gives the
symmetric tensor (each axis delay and the cross terms).

It needs spokes in both directions of a line (a full circle, or golden angle over 360 degrees): a spoke
whose most nearly opposed partner is more than :data:`MAX_ANGLE` degrees from opposed is not used.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidDataError
from .delay import Readouts
from .fit import DelayEstimate, Equations, coefficients, solve, spoke_groups

MAX_ANGLE = 6.0
"""Degrees: the largest angle between a spoke and the reverse of its partner that is still used."""
MIN_SPREAD = 0.2
"""The smallest ratio of the least to the largest singular value of the equations' rows accepted: below it
the spokes that have opposed partners point in too few directions to determine the tensor."""


def estimate_delay(scans, *, max_spokes: int = 2048) -> DelayEstimate:
    """One opposed-spoke estimate from one scan or the frames of one acquisition, every spoke's equation
    (partners within a scan or partition only) pooled into one fit (:func:`~mri_recon.prep.fit.solve`).
    Raises :class:`InvalidDataError` for a scan that is not radial, has too few spokes or no opposed pairs."""
    groups = spoke_groups(scans, "the opposed-spoke method", 1.0, max_spokes)
    parts = [opposed_equations(g.kspace, g.readouts, g.chosen) for g in groups]
    return solve(Equations.joined(parts), groups[0].readouts.plane, "opposed", sum(len(g.chosen) for g in groups))


def opposed_partners(readouts: Readouts, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(spokes, partners)``: indices into ``chosen`` of each spoke with an opposed partner and of that
    partner (the most nearly opposed spoke, within :data:`MAX_ANGLE` degrees); two spokes that are each
    other's partner appear once."""
    steps = readouts.steps[chosen][:, : readouts.plane]
    n = steps / np.linalg.norm(steps, axis=1, keepdims=True)
    cosine = n @ n.T
    partner = np.argmin(cosine, axis=1)
    index = np.arange(len(n))
    good = cosine[index, partner] <= -np.cos(np.radians(MAX_ANGLE))
    good &= ~((partner[partner] == index) & (index > partner))  # a mutual pair once: its one measurement
    return np.flatnonzero(good), partner[good]


def opposed_equations(kspace, readouts: Readouts, chosen: np.ndarray) -> Equations:
    """One equation ``n_i . S n_i = d_i`` for every spoke of ``chosen`` that has an opposed partner (a pair's
    two equations in one half). Raises :class:`InvalidDataError` when no spoke has one (a half circle)."""
    spokes, partners = opposed_partners(readouts, chosen)
    steps = readouts.steps[chosen][spokes][:, : readouts.plane]
    n = steps / np.linalg.norm(steps, axis=1, keepdims=True)
    rows = coefficients(n, n)
    singular = np.linalg.svd(rows, compute_uv=False)
    if len(rows) < rows.shape[1] or singular[-1] < MIN_SPREAD * singular[0]:
        raise InvalidDataError(f"only {len(spokes)} of {len(chosen)} spokes have an opposed partner within "
                               f"{MAX_ANGLE:g} degrees and they point in too few directions (the spokes cover "
                               f"half a circle); the opposed-spoke method needs spokes over the full circle")
    samples = readouts.samples
    data = np.asarray(kspace).reshape(kspace.shape[0], readouts.count, samples)[:, chosen]
    data = np.transpose(data, (1, 0, 2))  # (R, C, S)
    delta = _shifts(data[spokes], data[partners][:, :, ::-1])
    centre = readouts.centre[chosen]
    along = (delta + centre[spokes] + centre[partners] - (samples - 1)) / 2
    return Equations(rows, along, np.minimum(spokes, partners))


def _shifts(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """``(P,)`` shifts ``o_1 - o_2`` (samples) of readout pairs ``(P, C, S)`` that sample one function at
    ``r + o_1`` and ``r + o_2``: the phase of the lag-one product of their centred cross-spectrum."""
    samples = first.shape[2]
    one = np.fft.fftshift(np.fft.fft(first.astype(np.complex128), axis=2), axes=2)
    two = np.fft.fftshift(np.fft.fft(second.astype(np.complex128), axis=2), axes=2)
    cross = one * np.conj(two)  # |P|^2 exp(2 pi i x Delta / S), per coil
    lag = np.sum(cross[:, :, 1:] * np.conj(cross[:, :, :-1]), axis=(1, 2))
    return np.angle(lag) * samples / (2 * np.pi)
