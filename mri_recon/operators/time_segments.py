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
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..backend import get_xp
from ..errors import InvalidDataError
from .base import LinearOperator, SenseNormal
from .toeplitz import _cropped_ifft, _padded_fft, kernel_spectrum

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


def segment_times(times: np.ndarray, segments: int) -> np.ndarray:
    """``tau_l``: the centres of ``segments`` equal parts of ``[min t, max t]`` (s)."""
    t = np.asarray(times, dtype=np.float64)
    low, high = float(t.min()), float(t.max())
    return low + (np.arange(segments) + 0.5) * (high - low) / segments


class _Fit:
    """What every L's fit shares: the field map's histogram, the unique sample times and their phase factors
    (weighted by the square roots of the voxel counts), made once for the search over L."""

    def __init__(self, field_map: np.ndarray, times: np.ndarray) -> None:
        self.f, self.weight = _histogram(field_map)
        self.t = np.asarray(times, dtype=np.float64)
        self.unique, self.inverse, self.counts = np.unique(self.t, return_inverse=True, return_counts=True)
        self.root = np.sqrt(self.weight)[:, None]
        self.target = self.root * np.exp(-2j * np.pi * np.outer(self.f, self.unique))  # (K, U)
        self.energy = np.sum(np.abs(self.target) ** 2, axis=0)  # (U,)

    def solve(self, segments: int, ridge: float) -> tuple[np.ndarray, np.ndarray, float]:
        """``(b, tau, error)`` with ``b`` of shape ``(L, U)``: one interpolator per unique time.

        The ridge-regularized normal equations ``(A^H A + ridge sum(w) I) b = A^H T`` (L x L, the same
        solution as the least-squares problem stacked with the ridge rows, at a fraction of its cost), and the
        squared residual ``|T - A b|^2`` of each time from ``A^H A`` and ``A^H T`` (no K x U product)."""
        tau = segment_times(self.t, segments)
        basis = self.root * np.exp(-2j * np.pi * np.outer(self.f, tau))  # (K, L)
        gram = basis.conj().T @ basis  # (L, L)
        projected = basis.conj().T @ self.target  # (L, U)
        b = np.linalg.solve(gram + ridge * self.weight.sum() * np.eye(segments), projected)
        residual = self.energy - 2.0 * np.sum((b.conj() * projected).real, axis=0) + np.sum(
            (b.conj() * (gram @ b)).real, axis=0)
        residual = np.maximum(residual, 0.0)  # rounding can leave a tiny negative value at a perfect fit
        error = float(np.sqrt(np.sum(residual * self.counts) / (self.weight.sum() * len(self.t))))
        return b, tau, error


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
    segments = _segments(segments)
    fit = _Fit(field_map, times)
    b, tau, error = fit.solve(segments, ridge)
    return np.ascontiguousarray(b.T[fit.inverse.reshape(-1)]), tau, error


def _segments(segments: int) -> int:
    if int(segments) < 1:
        raise InvalidDataError(f"segments must be a positive integer, found {segments}")
    return int(segments)


def interpolation_error(field_map: np.ndarray, times: np.ndarray, segments: int, ridge: float = RIDGE) -> float:
    """RMS over samples and voxels of ``|exp(-i 2 pi f t) - sum_l b_l exp(-i 2 pi f tau_l)|``."""
    return _Fit(field_map, times).solve(_segments(segments), ridge)[2]


def choose_segments(field_map: np.ndarray, times: np.ndarray, tol: float = DEFAULT_TOL, ridge: float = RIDGE) -> int:
    """The smallest L whose :func:`interpolation_error` is at most ``tol``.

    The search starts near ``range(f) * range(t)`` (the phase spread in turns, which sets L: Sutton et al.)
    and moves by one; the histogram and the sample times' phase factors are made once for all L. Raises
    :class:`InvalidDataError` when :data:`MAX_SEGMENTS` do not reach ``tol``.
    """
    if not 0 < tol < 1:
        raise InvalidDataError(f"the segmentation tolerance must lie in (0, 1), found {tol}")
    fit = _Fit(field_map, times)

    def fits(count: int) -> bool:
        return fit.solve(count, ridge)[2] <= tol

    spread = float(np.ptp(field_map)) * float(np.ptp(times))
    segments = min(MAX_SEGMENTS, max(1, int(np.ceil(spread))))
    if fits(segments):
        while segments > 1 and fits(segments - 1):
            segments -= 1
        return segments
    while segments < MAX_SEGMENTS:
        segments += 1
        if fits(segments):
            return segments
    raise InvalidDataError(f"time segmentation needs more than {MAX_SEGMENTS} segments to reach the tolerance "
                           f"{tol:g} (field map range {np.ptp(field_map):.4g} Hz x readout {np.ptp(times):.4g} s); "
                           f"use the exact correction")


class TimeSegmentedEncoding(LinearOperator):
    """``A x = sum_l b_l * F(c_l * x)``: the off-resonance encoding through L plain encodings.

    Parameters
    ----------
    base
        A plain encoding (:class:`~mri_recon.operators.encoding.Encoding`) of the trajectory and matrix.
    b
        complex ``(M, L)`` interpolators (:func:`interpolators`), on the base's device.
    phases
        complex ``(L, *matrix)``: ``c_l = exp(-i 2 pi f tau_l)``, same device.
    """

    def __init__(self, base: Any, b: Any, phases: Any) -> None:
        super().__init__(base.ishape, base.oshape)
        self.base, self.b, self.phases = base, b, phases
        self.name, self.matrix = base.name, base.matrix

    @property
    def segments(self) -> int:
        return int(self.phases.shape[0])

    def batched(self, batch: int) -> TimeSegmentedEncoding:
        """The same operator for ``batch`` images at once."""
        if batch == self.ishape[0]:
            return self
        return TimeSegmentedEncoding(self.base.batched(batch), self.b, self.phases)

    def _apply(self, x: Any) -> Any:
        out = None
        for seg in range(self.segments):
            y = self.base(x * self.phases[seg]) * self.b[:, seg]
            out = y if out is None else out + y
        return out

    def _adjoint(self, y: Any) -> Any:
        xp = get_xp(y)
        out = None
        for seg in range(self.segments):
            x = self.base.H(y * xp.conj(self.b[:, seg])) * xp.conj(self.phases[seg])
            out = x if out is None else out + x
        return out


def segment_spectra(encoding: TimeSegmentedEncoding, weights: Any) -> dict[tuple[int, int], Any]:
    """Spectra of the Toeplitz kernels ``T_{l l'}`` for ``l <= l'``: the PSFs of the weights
    ``conj(b_l) w b_l'`` on the 2x grid (one batched F^H of the base engine), Fourier transformed."""
    xp = get_xp(weights)
    base, b = encoding.base, encoding.b
    pairs = [(i, j) for i in range(encoding.segments) for j in range(i, encoding.segments)]
    data = xp.stack([xp.conj(b[:, i]) * weights * b[:, j] for i, j in pairs]).astype(np.complex64)
    big = tuple(2 * n for n in base.matrix)
    psfs = type(base)(2 * base.trajectory, big, len(pairs))._adjoint(data)
    return {pair: kernel_spectrum(psfs[index]) for index, pair in enumerate(pairs)}


class SegmentedNormal(SenseNormal):
    """The CG operator ``x -> sum_c conj(S_c) sum_{l,l'} conj(c_l) T_{l l'}(c_l' S_c x) + lam x`` (Hermitian).

    Without maps ``x`` holds one image per coil (any leading axes). Coils go through the 2x-grid FFTs
    ``coil_batch`` at a time; each costs 2 L FFTs per iteration, and the L x L kernels are applied at every
    frequency of the 2x grid as one batched matrix product (kernels stored as ``(frequencies, L, L)``).
    """

    def __init__(self, spectra: dict[tuple[int, int], Any], phases: Any, *, coil_maps: Any = None,
                 lam: float = 0.0, coil_batch: int | None = None) -> None:
        matrix = tuple(phases.shape[1:])
        super().__init__(matrix, matrix)
        xp = get_xp(phases)
        segments = int(phases.shape[0])
        self.big = tuple(int(n) for n in next(iter(spectra.values())).shape)
        kernels = xp.empty((segments, segments, math.prod(self.big)), dtype=np.complex64)
        for (i, j), spectrum in spectra.items():  # T_{l' l} is the adjoint of T_{l l'}: conjugate spectrum
            kernels[i, j] = spectrum.reshape(-1)
            kernels[j, i] = xp.conj(spectrum.reshape(-1))
        self.kernels = xp.ascontiguousarray(kernels.transpose(2, 0, 1))  # (P, L, L)
        self.phases, self.maps, self.lam = phases, coil_maps, float(lam)
        self.coil_batch = coil_batch

    def _normal(self, z: Any) -> Any:
        """``sum_{l,l'} conj(c_l) T_{l l'}(c_l' z)`` for a batch of images ``z`` ``(B, *matrix)``."""
        xp = get_xp(z)
        ndim = self.phases.ndim - 1
        segments, batch = int(self.phases.shape[0]), int(z.shape[0])
        axes = tuple(range(2, 2 + ndim))
        spectra = _padded_fft(z[None] * self.phases[:, None], self.big, axes).reshape(segments, batch, -1)
        if xp is np:  # NumPy's stacked matmul of small matrices is 2.5x slower than einsum here (2 cores)
            mixed = np.einsum("pij,jbp->ibp", self.kernels, spectra, optimize=True)
        else:  # one batched GEMM (cuBLAS) over the frequencies
            mixed = xp.ascontiguousarray(xp.matmul(self.kernels, spectra.transpose(2, 0, 1)).transpose(1, 2, 0))
        mixed = mixed.reshape(segments, batch, *self.big)                                # (L, B, *big)
        images = _cropped_ifft(mixed, self.ishape, axes)                                 # (L, B, *matrix)
        return (images * xp.conj(self.phases[:, None])).sum(axis=0)

    def _apply(self, x: Any) -> Any:
        return super()._apply(x).astype(np.complex64, copy=False)
