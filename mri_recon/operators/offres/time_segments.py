"""Time segmentation of the off-resonance encoding (Sutton, Noll and Fessler, IEEE TMI 2003).

The phase factor of sample m at voxel n is approximated by L segments,

    exp(-i 2 pi f_n t_m) ~= sum_l b_{m l} exp(-i 2 pi f_n tau_l),

with segment times ``tau_l`` at the centres of L equal parts of ``[min t, max t]`` and least-squares
interpolators ``b``: for each sample time, the b that minimizes the squared error over the field map's values
(a histogram of :data:`HISTOGRAM_BINS` bins weighted by voxel counts). Then

    A x ~= sum_l diag(b_l) F (c_l * x),    c_l = exp(-i 2 pi f tau_l),

L plain encodings (any engine: FINUFFT, the GPU NUFFT, the exact kernels), and the normal operator is a sum of
Toeplitz convolutions ``sum_{l,l'} conj(c_l) T_{l l'} (c_l' x)`` whose kernels are the PSFs of the complex
weights ``conj(b_l) w b_l'``; ``T_{l' l}`` is the adjoint of ``T_{l l'}``, so L (L + 1) / 2 PSFs suffice.

Error. :func:`interpolation_error` is the root-mean-square error of the approximated phase factors over every
sample and every voxel of the field map (the phase factors have modulus 1, so it is relative);
:func:`choose_segments` takes the smallest L whose error is at most the tolerance (default
:data:`DEFAULT_TOL`). The encoding's relative error against the exact one on an image is of that size
(tests/test_offres.py checks it against the exact sum).

Fit. :class:`SegmentFit` solves the least-squares problem at the Chebyshev points of the readout (about 50)
instead of at each of the U distinct sample times, and interpolates: the interpolators and the squared error
are exponential sums in t whose interpolants at those points equal them to far below rounding (see the
class). One fit serves the search over L and the chosen L's interpolators; times that repeat per readout are
made unique on one readout.

The operators of the approximation (:class:`~.segmented.TimeSegmentedEncoding`, its normal operators) live in
:mod:`.segmented`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...arrays.backend import get_xp
from ...errors import InvalidDataError

DEFAULT_TOL = 1e-3
"""Default bound on :func:`interpolation_error` when L is chosen automatically."""
MAX_SEGMENTS = 64
"""Most segments :func:`choose_segments` tries."""
HISTOGRAM_BINS = 256
"""Bins of the field-map histogram the interpolators are fitted on."""
RIDGE = 1e-8
"""Ridge weight of the least-squares fit, relative to the histogram's total weight. Plain least squares gives
interpolators with |b| in the hundreds once L exceeds what the field map needs (the segment phases become
nearly collinear), and float32 operators cannot carry that cancellation; the ridge keeps |b| below about 15
(spiral, +-150 Hz, 16 ms: L = 8 to 30) and leaves the error unchanged down to about 1e-4 (floor near 1e-5)."""


def _histogram(field_map: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Field values (bin centres, Hz) and their voxel counts; every value exactly when there are few."""
    f = np.asarray(field_map, dtype=np.float64).reshape(-1)
    values, counts = np.unique(f, return_counts=True)
    if len(values) <= HISTOGRAM_BINS:
        return values, counts.astype(np.float64)
    counts, edges = np.histogram(f, bins=HISTOGRAM_BINS)
    keep = counts > 0
    return (0.5 * (edges[:-1] + edges[1:]))[keep], counts[keep].astype(np.float64)


def _unique_times(times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``np.unique(times)`` with ``return_inverse`` and ``return_counts`` (float64), and the repeat count R.

    When the M times are R copies of their first M / R (every readout sampled at the same times, the usual
    case: ``readout_times``), the unique times come from one copy: the inverse returned is that copy's
    (length M / R) and the counts are R times its counts. Otherwise R = 1 and the inverse has length M."""
    t = np.asarray(times).reshape(-1)
    repeats = np.flatnonzero(t[1:] == t[0])
    period = int(repeats[0]) + 1 if len(repeats) else len(t)
    if period == len(t) or len(t) % period or not (t.reshape(-1, period) == t[:period]).all():
        period = len(t)
    unique, inverse, counts = np.unique(t[:period].astype(np.float64), return_inverse=True, return_counts=True)
    copies = len(t) // period
    return unique, inverse.reshape(-1), counts * copies, copies


def segment_times(times: np.ndarray, segments: int) -> np.ndarray:
    """``tau_l``: the centres of ``segments`` equal parts of ``[min t, max t]`` (s)."""
    t = np.asarray(times, dtype=np.float64)
    low, high = float(t.min()), float(t.max())
    return low + (np.arange(segments) + 0.5) * (high - low) / segments


def segment_phases(field_map: np.ndarray, tau: np.ndarray, dtype: Any = np.complex64) -> np.ndarray:
    """``c_l = exp(-i 2 pi f tau_l)``, ``(L, *matrix)`` of ``dtype``, on the field map's device.

    For equally spaced ``tau`` (:func:`segment_times`) two exponentials of the map and the recurrence
    ``c_{l+1} = c_l exp(-i 2 pi f (tau_1 - tau_0))`` in float64: L - 1 products of unit factors drift by about
    L rounding errors of float64, far below complex64's. Otherwise one exponential per segment."""
    xp = get_xp(field_map)
    if xp is not np:  # one float64 exponential per segment and voxel: microseconds on a GPU
        f = field_map.astype(np.float64)
        times = xp.asarray(np.asarray(tau, dtype=np.float64).reshape(-1, *([1] * f.ndim)))
        return xp.exp(-2j * np.pi * times * f[None]).astype(dtype)
    f = np.asarray(field_map, dtype=np.float64)
    tau = np.asarray(tau, dtype=np.float64).reshape(-1)
    out = np.empty((len(tau), *f.shape), dtype=dtype)
    steps = np.diff(tau)
    if len(tau) < 3 or not np.allclose(steps, steps[0], rtol=1e-12, atol=0):
        for index, time in enumerate(tau):
            out[index] = np.exp(-2j * np.pi * time * f)
        return out
    phase = np.exp(-2j * np.pi * tau[0] * f)
    step = np.exp(-2j * np.pi * steps[0] * f)
    out[0] = phase
    for index in range(1, len(tau)):
        phase *= step
        out[index] = phase
    return out


CHEBYSHEV_TAIL = 1e-20
"""Bound on the Chebyshev interpolation error of the fit, relative to the sum of the moduli of an exponential
sum's coefficients (:func:`_chebyshev_points`); far below the rounding of the fit's own products."""
LAGRANGE_COLUMNS = 16384
"""Unique times per block of Lagrange polynomials (n x 16384 float64: 6.5 MB at n = 50)."""


def _chebyshev_points(omega: float) -> int:
    """The fewest Chebyshev points n whose interpolant of ``exp(i w x)`` on [-1, 1] errs by at most
    :data:`CHEBYSHEV_TAIL` for every ``|w| <= omega``.

    ``exp(i w x) = sum_m eps_m i^m J_m(w) T_m(x)``, and the interpolant at the n points of the second kind errs
    by at most twice the coefficients it misses, ``4 sum_{m >= n} |J_m(w)|``; with ``|J_m(w)| <= (w/2)^m / m!``,
    whose terms at least halve beyond ``m = w``, that is at most ``8 (omega/2)^n / n!``."""
    n = max(2, math.ceil(omega) + 1)
    if omega <= 0:
        return n
    limit = math.log(CHEBYSHEV_TAIL / 8)
    while n * math.log(omega / 2) - math.lgamma(n + 1) > limit:
        n += 1
    return n


def _barycentric(nodes: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``(n, len(x))``: the Lagrange polynomials of the Chebyshev points of the second kind
    ``nodes = cos(pi j / (n - 1))`` at ``x`` in [-1, 1], by the barycentric formula of the second kind (weights
    ``(-1)^j``, halved at the ends; forward stable at these points). A point on a node takes that node's
    value."""
    j = np.arange(len(nodes))
    weights = np.where(j % 2, -1.0, 1.0)
    weights[[0, -1]] *= 0.5
    difference = x[None, :] - nodes[:, None]
    on_node = difference == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        lagrange = weights[:, None] / difference
        lagrange /= lagrange.sum(axis=0)
    hit = on_node.any(axis=0)
    if hit.any():
        lagrange[:, hit] = on_node[:, hit]
    return lagrange


class SegmentFit:
    """The least-squares fit of the segment interpolators for one field map and set of sample times, made once
    for the search over L and for the interpolators of the chosen L.

    With the field histogram (values ``f_k``, weights ``w_k``), ``T_k(t) = sqrt(w_k) exp(-i 2 pi f_k t)`` and
    the basis ``A_{k l} = sqrt(w_k) exp(-i 2 pi f_k tau_l)``, the interpolators of time t are

        b(t) = (A^H A + ridge sum(w) I)^{-1} A^H T(t)

    (the normal equations of the least-squares problem stacked with the ridge rows), and the squared error of
    time t is ``r(t) = |T(t) - A b(t)|^2``. Both are exponential sums in t: b with the frequencies f_k, r with
    the differences f_k - f_k'. Over ``[min t, max t]`` (b demodulated by the middle field value) their
    Chebyshev interpolants at n points (:func:`_chebyshev_points` of ``pi range(f) range(t)``, the phase spread
    of r: 50 points for 300 Hz over 16 ms) equal them to :data:`CHEBYSHEV_TAIL` times the sums of their
    coefficients' moduli (at most ``sum(w)`` for ``A^H T``, whose rounding is ``K`` rounding errors of it).
    So the fit is solved at the n points only (the K x n matrix T, evaluated directly); the interpolators at
    the U unique sample times are the interpolant (one real product ``(2 L, n) x (n, U)``); and the error's
    sum over the samples is the quadrature ``sum_u m_u r(t_u) = sum_j q_j r(s_j)`` with ``q_j = sum_u m_u
    l_j(t_u)`` (m_u: the multiplicity of time u, l_j the Lagrange polynomials), r evaluated directly at the
    points (no cancellation of ``|T|^2`` against ``|A b|^2``). With U <= n the points are the unique times.
    The K x U phase matrix is never formed.

    Conditioning: the normal equations have a condition number up to about ``1 / ridge``, so b itself is
    determined only to about 1e-10 .. 1e-7 relative in float64, whatever the order of evaluation; the fitted
    phase factors ``A b`` to about 1e-12, and the error, a misfit 1e3 .. 1e4 times below them, to about 1e-8.
    """

    def __init__(self, field_map: np.ndarray, times: np.ndarray) -> None:
        self.f, self.weight = _histogram(field_map)
        self.root = np.sqrt(self.weight)[:, None]
        self.total = float(self.weight.sum())
        self.samples = int(np.size(times))
        self.unique, self.inverse, self.counts, self.copies = _unique_times(times)
        self.field_range = float(np.ptp(field_map))
        self.time_range = float(np.ptp(np.asarray(times).reshape(-1)[:self.samples // self.copies]))
        low, high = float(self.unique[0]), float(self.unique[-1])
        self.span = np.array([low, high])
        self.centre_f = 0.5 * (float(self.f[0]) + float(self.f[-1]))
        n = _chebyshev_points(math.pi * float(self.f[-1] - self.f[0]) * (high - low))
        self._whole: tuple[slice, np.ndarray] | None = None  # the Lagrange polynomials, when one block
        if n >= len(self.unique):
            self.nodes = None
            self.points, self.quadrature = self.unique, self.counts.astype(np.float64)
        else:
            self.middle, self.half = 0.5 * (low + high), 0.5 * (high - low)
            self.nodes = np.cos(np.pi * np.arange(n) / (n - 1))
            self.points = self.middle + self.half * self.nodes
            self.quadrature = np.zeros(n)
            for part, lagrange in self._lagrange():
                self.quadrature += lagrange @ self.counts[part].astype(np.float64)
        self.target = self.root * np.exp(-2j * np.pi * np.outer(self.f, self.points))  # (K, n)

    def _lagrange(self):
        """``(slice, l)``: the Lagrange polynomials ``l`` ``(n, len)`` of the points at the unique times of the
        slice, :data:`LAGRANGE_COLUMNS` times at a time (kept when one slice holds them all)."""
        if self._whole is not None:
            yield self._whole
            return
        count = len(self.unique)
        for start in range(0, count, LAGRANGE_COLUMNS):
            part = slice(start, min(count, start + LAGRANGE_COLUMNS))
            lagrange = _barycentric(self.nodes, (self.unique[part] - self.middle) / self.half)
            if count <= LAGRANGE_COLUMNS:
                self._whole = (part, lagrange)
            yield part, lagrange

    def solve(self, segments: int, ridge: float) -> tuple[np.ndarray, np.ndarray, float]:
        """``(b, tau, error)`` with ``b`` of shape ``(L, n)``: the interpolators at the fit's points."""
        tau = segment_times(self.span, segments)
        basis = self.root * np.exp(-2j * np.pi * np.outer(self.f, tau))  # (K, L)
        gram = basis.conj().T @ basis
        b = np.linalg.solve(gram + ridge * self.total * np.eye(segments), basis.conj().T @ self.target)
        residual = np.sum(np.abs(self.target - basis @ b) ** 2, axis=0)  # r at the points
        error = math.sqrt(max(0.0, float(self.quadrature @ residual)) / (self.total * self.samples))
        return b, tau, error

    def choose(self, tol: float, ridge: float) -> int:
        """The smallest L whose error is at most ``tol`` (:func:`choose_segments`)."""
        if not 0 < tol < 1:
            raise InvalidDataError(f"the segmentation tolerance must lie in (0, 1), found {tol}")

        def fits(count: int) -> bool:
            return self.solve(count, ridge)[2] <= tol

        segments = min(MAX_SEGMENTS, max(1, int(np.ceil(self.field_range * self.time_range))))
        if fits(segments):
            while segments > 1 and fits(segments - 1):
                segments -= 1
            return segments
        while segments < MAX_SEGMENTS:
            segments += 1
            if fits(segments):
                return segments
        raise InvalidDataError(f"time segmentation needs more than {MAX_SEGMENTS} segments to reach the "
                               f"tolerance {tol:g} (field map range {self.field_range:.4g} Hz x readout "
                               f"{self.time_range:.4g} s); use the exact correction")

    def interpolators(self, segments: int, ridge: float,
                      dtype: Any = np.complex128) -> tuple[np.ndarray, np.ndarray, float]:
        """``(b, tau, error)`` with ``b`` of shape ``(M, L)`` and ``dtype``: the interpolator of every sample."""
        table, index, tau, error = self.interpolator_table(segments, ridge, dtype)
        return table[index], tau, error

    def interpolator_table(self, segments: int, ridge: float,
                           dtype: Any = np.complex128) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """``(table, index, tau, error)``: the interpolators of the distinct times, ``table`` ``(U, L)`` of
        ``dtype``, and each sample's row, ``index`` int32 ``(M,)``; ``table[index]`` is :meth:`interpolators`'
        ``b`` (made where it is used: on a GPU the table and the index are a tenth of its size to upload)."""
        b, tau, error = self.solve(_segments(segments), ridge)
        if self.nodes is not None:  # demodulated, interpolated, modulated again
            b = b * np.exp(2j * np.pi * self.centre_f * self.points)
            stacked = np.concatenate([b.real, b.imag])
            parts = np.empty((len(stacked), len(self.unique)))
            for part, lagrange in self._lagrange():
                parts[:, part] = stacked @ lagrange
            b = (parts[:segments] + 1j * parts[segments:]) * np.exp(-2j * np.pi * self.centre_f * self.unique)
        index = self.inverse.reshape(-1).astype(np.int32)  # (M / R,)
        if self.copies > 1:
            index = np.tile(index, self.copies)
        return np.ascontiguousarray(b.T.astype(dtype, copy=False)), index, tau, error


def interpolators(field_map: np.ndarray, times: np.ndarray, segments: int,
                  ridge: float = RIDGE) -> tuple[np.ndarray, np.ndarray, float]:
    """Least-squares interpolators of L = ``segments`` segments, with the ridge ``ridge * sum(weights) |b|^2``
    added to the squared error (0: plain least squares, for float64 use).

    Returns
    -------
    b
        complex128 ``(M, L)``: the interpolator of each sample.
    tau
        float64 ``(L,)``: the segment times (s).
    error
        The root-mean-square error of the approximated phase factors (:func:`interpolation_error`).
    """
    return SegmentFit(field_map, times).interpolators(_segments(segments), ridge)


def _segments(segments: int) -> int:
    if int(segments) < 1:
        raise InvalidDataError(f"segments must be a positive integer, found {segments}")
    return int(segments)


def interpolation_error(field_map: np.ndarray, times: np.ndarray, segments: int, ridge: float = RIDGE) -> float:
    """RMS over samples and voxels of ``|exp(-i 2 pi f t) - sum_l b_l exp(-i 2 pi f tau_l)|``."""
    return SegmentFit(field_map, times).solve(_segments(segments), ridge)[2]


def choose_segments(field_map: np.ndarray, times: np.ndarray, tol: float = DEFAULT_TOL, ridge: float = RIDGE) -> int:
    """The smallest L whose :func:`interpolation_error` is at most ``tol``.

    The search starts near ``range(f) * range(t)`` (the phase spread in turns, which sets L: Sutton et al.)
    and moves by one; one :class:`SegmentFit` serves every L. Raises
    :class:`InvalidDataError` when :data:`MAX_SEGMENTS` do not reach ``tol``.
    """
    return SegmentFit(field_map, times).choose(tol, ridge)
