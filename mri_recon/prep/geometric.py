"""Geometric coil compression of Cartesian scans (GCC: Zhang, Pauly, Vasanawala and Lustig, MRM 2013; BART's
``cc -G``): one compression matrix per readout position.

Along a fully sampled readout the inverse FFT takes k-space to the hybrid space ``(x, ky[, kz])``, where ``x`` is
the image's readout position: there the coils' sensitivities at ``x`` alone mix the data, so a matrix ``A(x)``
``(N, C)`` per position compresses better than one for the whole image (the SVD variant, :mod:`.compress`).

- The readout is the image's first axis (trajectory column 0): MRD Cartesian readouts
  (:mod:`mri_recon.io.cartesian`) and BART's dimension 0 lie there. Every phase-encode line must hold all
  ``matrix[0]`` readout frequencies (repeated lines, e.g. averages, are lines of their own):
  :func:`readout_lines` refuses anything else, naming ``coil_compress_method``.
- The calibration data are the largest fully sampled centred box of at most :data:`CALIBRATION` frequencies per
  axis (:func:`~.cartesian_maps.acs_region`; BART's ``cc -r 24``), whitened, zero-filled along the readout to
  ``matrix[0]`` and inverse transformed there (as BART's ``gcc``): per position ``x`` the ``C x P`` matrix of
  its ``P`` phase-encode calibration samples. ``A(x)`` is the conjugate transpose of the Gram matrix's N
  leading eigenvectors (float64, the box divided by a power of two near its largest value first: no
  dependence on the data's scale).
- Alignment (Zhang's): from ``x = 0`` up, ``A(x)`` is replaced by ``P A(x)`` with ``P`` the unitary closest to
  ``A(x-1) A(x)^H`` (orthogonal Procrustes, BART's ``align_ro``), so that the virtual coils vary smoothly
  along ``x`` (estimated coil maps of the virtual coils need that). The row space at each ``x`` is unchanged.
- ``"auto"``: the N that ``svd`` compression chooses for the same scan (the fewest principal components of the
  k-space centre that hold :data:`.AUTO_ENERGY` of its energy). Per readout position the energy is
  concentrated in fewer components than over the whole centre, so the same threshold applied per position
  keeps too few coils to image with (docs/benchmarks.md, "Coil compression"). N larger than the ``P``
  calibration samples per position is refused (the virtual coils beyond ``P`` would be arbitrary directions).
- Refused with a field map to correct: the phase that off-resonance adds during the readout makes the
  compression along it inexact (SVD compression, which mixes coils only, stays exact).
- Application (:meth:`GeometricCompression.kspace`, NumPy or CuPy, where the data are): the readouts gathered as
  lines, inverse FFT along them, ``(A(x) W) h(x)`` per position with the whitening ``W``, FFT back, in the
  samples' own order. Coil maps are image-space arrays, ``S'(x, ...) = A(x) W S(x, ...)`` along their first
  image axis (SENSE stays exact: the compressed data are the compressed maps' model). Noise samples carry no
  readout position: whitened they are white, and any orthonormal rows keep them white, so they are compressed
  with the matrix of the readout centre; unwhitened (``prewhiten=False``) they are dropped, since their
  compressed covariance would depend on the position. The receiver basis becomes ``L A(x)^H`` per position
  (:meth:`GeometricCompression.basis`, shape ``(X, C, N)``), which :mod:`.maps_stage` applies per readout position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..arrays import fft
from ..arrays.backend import get_xp
from ..checks.scaling import unit_scale
from ..errors import InvalidDataError
from ..operators.engines.cartesian import INTEGER_TOLERANCE, off_grid
from ..scan import Scan
from .compress import Compression, auto_virtual, centre_energies

CALIBRATION = 24
"""The widest calibration box per axis, frequencies (BART ``cc``'s default ``-r 24``)."""
LINE_BYTES = 1 << 24
"""The gathered readouts compressed at once hold about this many bytes (the peak's bound beyond the data)."""
OPTION = "coil_compress_method geometric (GCC)"


@dataclass(frozen=True)
class ReadoutLines:
    """A Cartesian scan's samples as complete readouts along image axis 0."""

    order: np.ndarray
    """int64 ``(lines * readout,)``: sample indices, line after line, each line's readout frequencies
    ``-(readout // 2), ...`` in order."""
    readout: int
    """The readout's length ``matrix[0]``."""

    @property
    def lines(self) -> int:
        return len(self.order) // self.readout


def readout_lines(trajectory: np.ndarray, readout: int, source: str = "<memory>") -> ReadoutLines:
    """The samples of ``trajectory`` ``(M, D)`` (host) as complete readouts of ``readout`` frequencies along
    axis 0 (see the module docstring).

    Raises
    ------
    InvalidDataError
        Samples off the integer grid, or a phase-encode line without every readout frequency.
    """
    rounded, far = off_grid(np.asarray(trajectory))
    if far > INTEGER_TOLERANCE:
        raise InvalidDataError(f"{source}: {OPTION} takes samples on integer frequencies (Cartesian k-space); a "
                               f"sample lies {far:.4g} cycles from the nearest")
    index = rounded.astype(np.int64)
    position = index[:, 0] + readout // 2
    phase = np.unique(index[:, 1:], axis=0, return_inverse=True)[1].reshape(-1)
    inside = bool(np.all((position >= 0) & (position < readout)))
    key = phase * readout + position
    first = np.argsort(key, kind="stable")
    starts = np.r_[0, np.flatnonzero(np.diff(key[first])) + 1]
    copy = np.empty(len(key), dtype=np.int64)  # 0, 1, ...: which repetition of its frequency a sample is
    copy[first] = np.arange(len(key)) - np.repeat(starts, np.diff(np.r_[starts, len(key)]))
    order = np.lexsort((position, copy, phase))  # line (phase, copy) after line, the readout in order
    complete = inside and len(order) % readout == 0
    if complete:
        line = (phase[order] * (int(copy.max()) + 1) + copy[order]).reshape(-1, readout)
        complete = bool(np.all(position[order].reshape(-1, readout) == np.arange(readout))
                        and np.all(line == line[:, :1]))
    if not complete:
        raise InvalidDataError(f"{source}: {OPTION} needs every phase-encode line to hold all {readout} readout "
                               f"frequencies along the first image axis (the readout); this scan's readouts are "
                               f"not complete (partial echo, readout undersampling or a non-Cartesian layout): "
                               f"use coil_compress_method svd")
    return ReadoutLines(order, readout)


def _fft(xp: Any, data: Any, inverse: bool) -> Any:
    """The centred unitary FFT along the last axis (index ``j`` at frequency, or position, ``j - n // 2``) in the
    data's precision: the readout's k-space to its image positions (``inverse``) and back."""
    shifted = fft.fftn(xp.fft.ifftshift(data, axes=-1), (-1,), inverse=inverse, norm="ortho")
    return xp.fft.fftshift(shifted, axes=-1)


def per_position(matrices: Any, data: Any) -> Any:
    """``matrices[x] @ data[:, ..., x]``: ``(X, N, C)`` applied to ``(C, L, X)`` (positions last), ``(N, L, X)``."""
    xp = get_xp(data)
    out = xp.matmul(matrices, data.transpose(2, 0, 1))  # (X, N, L)
    return out.transpose(1, 2, 0)


def calibration_hybrid(kspace: np.ndarray, trajectory: np.ndarray, matrix: tuple[int, ...],
                       whitening: np.ndarray | None, source: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """complex128 ``(X, C, P)``: the whitened calibration box (scale-free) in hybrid space, per readout position
    its ``P`` phase-encode samples; and the box's size."""
    from .cartesian_maps import acs_region  # noqa: PLC0415 - its estimators load on use

    try:
        region = acs_region(kspace, trajectory, matrix, CALIBRATION, least=1)
    except InvalidDataError:
        raise InvalidDataError(f"{source}: {OPTION} needs a sampled k-space centre (the k = 0 readout line); "
                               f"this scan has none: use coil_compress_method svd") from None
    coils, box = region.shape[0], tuple(region.shape[1:])
    region = region.astype(np.complex128).reshape(coils, -1)
    if whitening is not None:
        region = np.asarray(whitening, dtype=np.complex128) @ region
    region, _ = unit_scale(region)
    if not np.any(region):
        raise InvalidDataError(f"{source}: the {'x'.join(map(str, box))} calibration region is all zero; coil "
                               f"compression needs signal there (reconstruct without --coil-compress)")
    n0 = int(matrix[0])
    padded = np.zeros((coils, n0, int(np.prod(box[1:], dtype=np.int64))), dtype=np.complex128)
    start = n0 // 2 - box[0] // 2
    padded[:, start:start + box[0]] = region.reshape(coils, box[0], -1)
    hybrid = _fft(np, padded.transpose(0, 2, 1), inverse=True)  # (C, P, X)
    return np.ascontiguousarray(hybrid.transpose(2, 0, 1)), box


def aligned(matrices: np.ndarray) -> np.ndarray:
    """``(X, N, C)`` matrices with orthonormal rows rotated, from ``x = 1`` up, by the unitary ``P`` closest to
    ``A(x-1) A(x)^H`` (orthogonal Procrustes: ``P = V U^H`` for ``A(x) A(x-1)^H = U S V^H``)."""
    out = np.array(matrices, dtype=np.complex128)
    for x in range(1, len(out)):
        u, _, vh = np.linalg.svd(out[x] @ out[x - 1].conj().T)
        out[x] = (u @ vh).conj().T @ out[x]
    return out


@dataclass(frozen=True)
class GeometricCompression(Compression):
    """What compressing a Cartesian scan's receivers per readout position does (see the module docstring)."""

    method: ClassVar[str] = "geometric"
    coils: int
    """C, the receivers."""
    virtual: int
    """N <= C, the virtual coils (C: nothing compressed)."""
    matrices: np.ndarray | None = None
    """complex128 ``(X, N, C)``, aligned, orthonormal rows, ``X = matrix[0]``; None when N = C."""
    energy: float = 1.0
    """The share of the calibration energy (summed over the readout positions) the virtual coils hold."""
    samples: int = 0
    """P, the calibration samples per readout position."""
    box: tuple[int, ...] = ()
    """The calibration box (frequencies per axis)."""
    asked: str | int = "none"
    """The ``coil_compress`` choice that gave it."""
    source: str = "<memory>"
    """The scan it was computed from (named in the refusals of :meth:`kspace`)."""

    @property
    def compresses(self) -> bool:
        return self.matrices is not None

    def combined(self, whitening: Any = None) -> np.ndarray:
        """``A(x) W``: ``(X, N, C)`` complex128."""
        if whitening is None:
            return self.matrices
        return self.matrices @ np.asarray(whitening, dtype=np.complex128)

    def kspace(self, data: Any, trajectory: np.ndarray, whitening: Any = None) -> Any:
        """k-space ``(C, M)`` (NumPy or CuPy) whitened and compressed per readout position, ``(N, M)`` in the
        data's precision and the samples' order; ``trajectory`` (host) places the samples."""
        lines = readout_lines(trajectory, len(self.matrices), self.source)
        xp = get_xp(data)
        combined = xp.asarray(self.combined(whitening).astype(data.dtype))
        order = xp.asarray(lines.order)
        out = xp.empty((self.virtual, data.shape[1]), dtype=data.dtype)
        step = max(1, LINE_BYTES // (data.itemsize * data.shape[0] * lines.readout))
        for first in range(0, lines.lines, step):
            taken = order[first * lines.readout:(first + step) * lines.readout]
            block = data[:, taken].reshape(data.shape[0], -1, lines.readout)
            hybrid = per_position(combined, _fft(xp, block, inverse=True))
            out[:, taken] = _fft(xp, hybrid, inverse=False).reshape(self.virtual, -1)
        return out

    def maps(self, maps: Any, whitening: Any = None) -> Any:
        """Coil maps ``(C, X, ...)`` compressed along their first image axis: ``(N, X, ...)``."""
        xp = get_xp(maps)
        combined = xp.asarray(self.combined(whitening).astype(maps.dtype))
        flat = maps.reshape(maps.shape[0], maps.shape[1], -1).transpose(0, 2, 1)  # (C, R, X)
        out = per_position(combined, flat).transpose(0, 2, 1)
        return xp.ascontiguousarray(out).reshape(self.virtual, *maps.shape[1:])

    def noise(self, noise: Any, whitening: Any = None) -> Any:
        """Whitened noise samples ``(C, K)`` compressed with the readout centre's matrix (see the module
        docstring); None without ``whitening``: the compressed noise's covariance ``A(x) Psi A(x)^H`` then
        depends on the readout position, which noise samples do not have, so no samples describe it."""
        if whitening is None:
            return None
        xp = get_xp(noise)
        centre = self.combined(whitening)[len(self.matrices) // 2]
        return xp.asarray(centre.astype(noise.dtype)) @ noise

    def scan(self, scan: Scan, whitening: Any = None) -> Scan:
        """``scan`` with its k-space, noise and coil maps whitened (when ``whitening`` is given) and compressed."""
        arrays = {"kspace": self.kspace(scan.kspace, scan.trajectory, whitening)}
        if scan.noise is not None:
            arrays["noise"] = self.noise(scan.noise, whitening)  # None unwhitened (dropped: see noise)
        if scan.coil_maps is not None:
            arrays["coil_maps"] = self.maps(scan.coil_maps, whitening)
        return scan.replace(**arrays)

    def basis(self, basis: Any) -> Any:
        """The receiver basis of the virtual coils per readout position: ``basis @ A(x)^H`` ``(X, C, N)``, or
        ``basis`` itself (None: ``A(x)^H`` keeps root-sum-of-squares at every position)."""
        if basis is None or not self.compresses:
            return basis
        return np.asarray(basis, dtype=np.complex128) @ self.matrices.conj().transpose(0, 2, 1)

    def record(self) -> dict[str, Any]:
        """The preparation record's entries (those of :meth:`.compress.CoilCompression.record`)."""
        if not self.compresses:
            note = f"{self.coils} coil(s) not compressed (coil_compress {self.asked} keeps them all)"
        else:
            note = (f"{self.coils} coils compressed to {self.virtual} virtual coils per readout position "
                    f"(coil_compress {self.asked}, geometric: {self.energy:.2%} of the energy of the "
                    f"{'x'.join(map(str, self.box))} calibration region)")
        return {"coil_compress": self.virtual, "coil_compress_method": self.method,
                "coil_compress_energy": float(self.energy), "coil_compress_note": note}


def _check_echo(scan: Scan, lines: ReadoutLines) -> None:
    """Refuse readout frequencies that are zero in every coil of every line: a partial echo zero-filled by the
    reader, which compression per readout position would fill with values no coil measured."""
    measured = np.any(scan.kspace != 0, axis=0)[lines.order].reshape(lines.lines, lines.readout)
    silent = ~measured.any(axis=0)
    if np.any(silent):
        k = np.flatnonzero(silent) - lines.readout // 2
        raise InvalidDataError(f"{scan.source}: {OPTION} needs fully sampled readouts, and readout frequencies "
                               f"k = {int(k.min())}..{int(k.max())} are zero in every line and coil (a partial "
                               f"echo, zero-filled): use coil_compress_method svd")


def _svd_choice(scan: Scan, whitening: np.ndarray | None) -> int:
    """The number of virtual coils that ``svd`` compression's ``"auto"`` keeps for ``scan``."""
    return auto_virtual(centre_energies(scan.kspace, scan.trajectory, whitening, scan.source)[0])


def geometric_working(coils: int, samples: int) -> int:
    """Bytes :meth:`GeometricCompression.kspace` holds beyond its output: a block of lines of the ``coils``
    receivers (at most :data:`LINE_BYTES`, complex64) and its transform, then the compressed block (no larger)
    and its transform."""
    return 4 * min(LINE_BYTES, coils * samples * 8)


def geometric_compression(scan: Scan, chosen: str | int, whitening: np.ndarray | None = None) -> GeometricCompression:
    """The :class:`GeometricCompression` of the host ``scan`` for ``chosen`` (``"auto"`` or N; parsed), its
    data whitened by ``whitening`` first.

    Raises
    ------
    InvalidDataError
        Incomplete readouts (:func:`readout_lines`), no sampled centre, a silent calibration region, or N above
        the calibration samples per readout position.
    """
    coils = scan.n_coils
    if scan.field_map is not None:
        raise InvalidDataError(f"{scan.source}: {OPTION} compresses between FFTs along the readout, which the "
                               f"phase of off-resonance during the readout breaks; with the field map corrected "
                               f"use coil_compress_method svd (or field_map 'ignore')")
    _check_echo(scan, readout_lines(scan.trajectory, scan.matrix[0], scan.source))
    if isinstance(chosen, int) and chosen >= coils:
        return GeometricCompression(coils, coils, asked=chosen, source=scan.source)
    hybrid, box = calibration_hybrid(scan.kspace, scan.trajectory, scan.matrix, whitening, scan.source)
    values, vectors = np.linalg.eigh(hybrid @ hybrid.conj().transpose(0, 2, 1))  # (X, C), (X, C, C) ascending
    values, vectors = np.clip(values[:, ::-1], 0.0, None), vectors[:, :, ::-1]
    shares = np.cumsum(values.sum(axis=0)) / values.sum()
    virtual = chosen if isinstance(chosen, int) else _svd_choice(scan, whitening)
    virtual, samples = min(virtual, coils), hybrid.shape[2]
    if virtual >= coils:
        return GeometricCompression(coils, coils, energy=1.0, samples=samples, box=box, asked=chosen,
                                    source=scan.source)
    if virtual > samples:
        raise InvalidDataError(f"{scan.source}: coil_compress {chosen} with {OPTION}: the {'x'.join(map(str, box))} "
                               f"calibration region holds {samples} phase-encode samples per readout position, "
                               f"fewer than {virtual} virtual coils; compress to at most {samples}, or use "
                               f"coil_compress_method svd")
    matrices = aligned(vectors[:, :, :virtual].conj().transpose(0, 2, 1))
    return GeometricCompression(coils, virtual, matrices, float(shares[virtual - 1]), samples, box, chosen, scan.source)
