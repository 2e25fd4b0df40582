"""Coil compression: the receivers replaced by N virtual coils, the principal components of the k-space centre.

Two methods, chosen by ``coil_compress_method=`` (``--coil-compress-method``) from the registry
:mod:`.compress_methods`: ``"svd"`` (the default, described here) and ``"geometric"``, one matrix per readout
position of a Cartesian scan (:mod:`.geometric`, BART's ``cc -G``). Both give a :class:`Compression` (the scan,
its k-space, maps and noise compressed, the receiver basis and the record).

``coil_compress=N`` (``--coil-compress N``) projects the prewhitened k-space ``(C, M)`` onto the N eigenvectors
with the largest eigenvalues of the central samples' ``C x C`` Gram matrix (principal components of the
receivers: Buehrer et al. 2007, Huang et al. 2008; BART's ``cc -S``): a matrix ``A`` ``(N, C)`` with
orthonormal rows, and ``d' = A d``. The scan's coil maps go with it (``S' = A S``, so that SENSE with the
compressed maps is exact in the compressed subspace: ``A d = F (A S) x``) and so does its noise (white after
prewhitening; ``A A^H = I`` keeps it white). The receiver basis in which estimated maps and
root-sum-of-squares images are normalized (:class:`~.maps_stage.CoilMapEstimate`) becomes ``L A^H``, which
takes virtual channels back to the receiver's. Everything after (density weights, coil-map estimation, the
solve) runs on the N virtual coils.

``"auto"`` keeps the fewest virtual coils that hold :data:`AUTO_ENERGY` of the centre's energy (the sum of the
Gram matrix's eigenvalues). ``N`` at or above the scan's coil count compresses nothing (recorded so).

The centre is the samples with ``|k|`` below :data:`CENTRE_RADIUS` cycles per field of view (the 24-wide
calibration region of BART's ``cc``), at least :data:`MIN_PER_COIL` per coil and at most
:data:`MAX_SAMPLES`, the samples nearest ``k = 0`` in both cases. The matrix is computed in float64 from the
scan's own k-space and the whitening matrix (the Gram matrix in complex128, which holds the products of any
complex64 data), the Gram divided by a power of two near its largest entry
(:func:`mri_recon.checks.scaling.unit_scale`), so that N and ``A`` do not depend on the data's scale. The
host preparation and a device preparation that compresses on the way up (:mod:`mri_recon.prep.device`) take
the Gram matrix from the host's k-space and compress with the same matrix; one that compresses after the upload
takes it from the uploaded k-space, on the device (the same centre samples, the same matrix to float64
rounding). Whitening
and compression are then one product ``(A W) d`` (:meth:`CoilCompression.apply`, NumPy or CuPy, where the
data are): an ``N x C`` matrix instead of the ``C x C`` whitening followed by ``A``.

ESPIRiT-based compression (``cc -E``) is not implemented: its names are refused.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..arrays.backend import cpu_threads, get_xp, to_host
from ..checks.scaling import unit_scale
from ..checks.validation import samples_within, squared_radii
from ..errors import InvalidDataError
from ..scan import Scan

CHOICES = ("none", "auto")
"""The named values of ``coil_compress=``; else a number of virtual coils N >= 1."""
AUTO_ENERGY = 0.99
"""``"auto"``: the share of the centre's energy the virtual coils keep (the fewest that hold it)."""
CENTRE_RADIUS = 12.0
"""Cycles per field of view: the centre whose samples give the compression matrix."""
MIN_PER_COIL = 4
"""The fewest centre samples per coil; a sparser centre is widened to the samples nearest ``k = 0``."""
MAX_SAMPLES = 16384
"""The most centre samples used (the nearest ``k = 0``): the Gram matrix costs ``C^2`` per sample, and on a GPU
the data wait for the matrix before they are compressed. Sixteen thousand samples estimate a Gram matrix of
up to 128 receivers many times over."""
GRAM_BLOCK = 4096
"""Centre samples per block of the Gram matrix: the blocks are gathered and multiplied on up to
:data:`GRAM_THREADS` threads (one BLAS thread each, as the preparation runs) and summed in order, so the matrix
has the same bits with any number of threads."""
GRAM_THREADS = 4
"""The most threads computing the Gram matrix's blocks (at most the CPUs this process may use)."""
NOT_IMPLEMENTED = {"ecc": "ESPIRiT-based compression (ECC, bart cc -E)"}
"""Variants of the peers' that are named but not implemented: refused with what they are."""
FORMS = "none, auto or a number of virtual coils N >= 1"


def parse_coil_compress(value: Any) -> str | int:
    """``"none"``, ``"auto"`` or the number of virtual coils (an ``int`` >= 1, or its text) of
    ``coil_compress=``; anything else raises :class:`~mri_recon.errors.InvalidDataError` naming the option."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in CHOICES:
            return text
        variant = text.split(":")[0]
        if variant in NOT_IMPLEMENTED:
            raise InvalidDataError(f"coil_compress {value!r}: {NOT_IMPLEMENTED[variant]} is not implemented; use "
                                   f"a number of virtual coils or auto (with coil_compress_method)")
        if text.isdecimal():
            value = int(text)
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= 1:
        return int(value)
    raise InvalidDataError(f"coil_compress must be {FORMS}, found {value!r}")


def wanted(choice: Any) -> bool:
    """Whether ``coil_compress=choice`` asks for compression (anything but ``"none"``; a bad value raises)."""
    return isinstance(choice, Compression) or parse_coil_compress(choice) != "none"


def planned_coils(choice: Any, coils: int) -> int:
    """The coils a reconstruction of ``coils`` receivers runs on after ``coil_compress=choice``, as known before
    the data are read: N for a number below ``coils``, else ``coils`` (``"auto"`` decides from the data)."""
    chosen = choice.virtual if isinstance(choice, Compression) else parse_coil_compress(choice)
    return min(chosen, coils) if isinstance(chosen, int) else coils


class Compression:
    """The face every coil compression shows (:class:`CoilCompression`, :class:`.geometric.GeometricCompression`):
    :attr:`coils` to :attr:`virtual` coils; the scan, its k-space, maps and noise compressed (whitened first by a
    given matrix), the receiver basis of the virtual coils and the record."""

    method: ClassVar[str]
    coils: int
    virtual: int

    @property
    def compresses(self) -> bool:
        raise NotImplementedError

    def product(self, whitening: Any = None) -> np.ndarray | None:
        """The one complex128 ``(N, C)`` matrix that whitens (by ``whitening``, when given) and compresses every
        sample alike, which can be applied to the data on their way to the device; None where the compression
        is not one matrix (or compresses nothing)."""
        return None

    def kspace(self, data: Any, trajectory: Any = None, whitening: Any = None) -> Any:
        raise NotImplementedError

    def maps(self, maps: Any, whitening: Any = None) -> Any:
        raise NotImplementedError

    def noise(self, noise: Any, whitening: Any = None) -> Any:
        raise NotImplementedError

    def scan(self, scan: Scan, whitening: Any = None) -> Scan:
        raise NotImplementedError

    def basis(self, basis: Any) -> Any:
        raise NotImplementedError

    def record(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class CoilCompression(Compression):
    """What compressing a scan's receivers does: from :attr:`coils` to :attr:`virtual` coils by :attr:`matrix`."""

    method: ClassVar[str] = "svd"
    coils: int
    """C, the receivers."""
    virtual: int
    """N <= C, the virtual coils (C: nothing compressed)."""
    matrix: np.ndarray | None = None
    """complex128 ``(N, C)`` with orthonormal rows (virtual = matrix @ receivers); None when N = C."""
    energy: float = 1.0
    """The share of the centre's energy the virtual coils hold."""
    samples: int = 0
    """The centre samples the matrix comes from (0: none were needed)."""
    asked: str | int = "none"
    """The ``coil_compress`` choice that gave it."""

    @property
    def compresses(self) -> bool:
        return self.matrix is not None

    def product(self, whitening: Any = None) -> np.ndarray | None:
        """``matrix @ whitening`` (``matrix`` without a whitening), or None when nothing is compressed."""
        if not self.compresses:
            return None
        return self.matrix if whitening is None else self.matrix @ np.asarray(whitening, dtype=np.complex128)

    def apply(self, data: Any, whitening: Any = None) -> Any:
        """``matrix @ whitening @ data`` over the leading (coil) axis of ``data`` ``(C, ...)`` (NumPy or CuPy), as
        one product in ``data``'s precision: ``(N, ...)``; ``data`` itself when nothing is compressed (and
        nothing whitened)."""
        matrix = self.product(whitening)
        if matrix is None and whitening is None:
            return data
        if matrix is None:
            matrix = np.asarray(whitening, dtype=np.complex128)
        flat = data.reshape(data.shape[0], -1)
        product = get_xp(data).asarray(matrix.astype(flat.dtype)) @ flat
        return product.reshape(matrix.shape[0], *data.shape[1:])

    def kspace(self, data: Any, trajectory: Any = None, whitening: Any = None) -> Any:
        """k-space ``(C, M)`` compressed (:meth:`apply`; the trajectory does not matter here)."""
        return self.apply(data, whitening)

    def maps(self, maps: Any, whitening: Any = None) -> Any:
        """Coil maps ``(C, ...)`` compressed (:meth:`apply`)."""
        return self.apply(maps, whitening)

    def noise(self, noise: Any, whitening: Any = None) -> Any:
        """Noise samples ``(C, K)`` compressed (:meth:`apply`)."""
        return self.apply(noise, whitening)

    def scan(self, scan: Scan, whitening: Any = None) -> Scan:
        """``scan`` with its k-space, noise and coil maps whitened by ``whitening`` (when given) and compressed,
        in one product each (:meth:`apply`)."""
        arrays = {name: self.apply(getattr(scan, name), whitening) for name in ("kspace", "noise", "coil_maps")
                  if getattr(scan, name) is not None}
        return scan.replace(**arrays)

    def basis(self, basis: Any) -> Any:
        """The receiver basis of the virtual coils: ``basis @ matrix^H`` (``(C, N)``: virtual channels back to the
        receiver's), or ``basis`` itself (None without prewhitening: ``matrix^H`` keeps root-sum-of-squares)."""
        if basis is None or not self.compresses:
            return basis
        return np.asarray(basis) @ self.matrix.conj().T

    def record(self) -> dict[str, Any]:
        """The preparation record's entries: ``coil_compress`` (N), ``coil_compress_method``,
        ``coil_compress_energy`` and ``coil_compress_note`` (one sentence)."""
        if not self.compresses:
            note = (f"{self.coils} coil(s) not compressed (coil_compress {self.asked} keeps them all)")
        else:
            note = (f"{self.coils} coils compressed to {self.virtual} virtual coils (coil_compress {self.asked}: "
                    f"{self.energy:.2%} of the energy of the {self.samples} centre samples)")
        return {"coil_compress": self.virtual, "coil_compress_method": self.method,
                "coil_compress_energy": float(self.energy), "coil_compress_note": note}


def centre_samples(trajectory: np.ndarray, coils: int) -> np.ndarray:
    """Indices of the samples the compression matrix is computed from (see the module docstring)."""
    least = min(len(trajectory), MIN_PER_COIL * coils)
    inside = samples_within(trajectory, CENTRE_RADIUS)
    if len(inside) < least:
        return np.sort(np.argpartition(squared_radii(trajectory), least - 1)[:least])
    if len(inside) > MAX_SAMPLES:
        nearest = np.argpartition(squared_radii(trajectory[inside]), MAX_SAMPLES - 1)[:MAX_SAMPLES]
        return np.sort(inside[nearest])
    return inside


def centre_energies(kspace: Any, trajectory: np.ndarray, whitening: np.ndarray | None = None,
                    source: str = "<memory>", index: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """``(eigenvalues, eigenvectors, samples)`` of the Gram matrix of the (whitened) centre samples, largest
    first: float64 ``(C,)`` and complex128 ``(C, C)`` (columns), on the host, the Gram divided by a power of
    two near its largest entry first (exact: the eigenvectors of data of any scale are the same). ``kspace``
    may be on a device (:func:`centre_gram`); ``index``: the centre's samples (:func:`centre_samples`), when
    already known.

    Raises
    ------
    InvalidDataError
        The centre's samples are all zero (the eigenvectors would be arbitrary).
    """
    index = centre_samples(trajectory, kspace.shape[0]) if index is None else index
    gram = centre_gram(kspace, index)
    if whitening is not None:
        whitening = np.asarray(whitening, dtype=np.complex128)
        gram = whitening @ gram @ whitening.conj().T  # the whitened samples' Gram, without whitening them
    gram, _ = unit_scale(gram)
    if not np.any(gram.diagonal().real):
        raise InvalidDataError(f"{source}: the {len(index)} k-space samples nearest the centre are all zero; coil "
                               f"compression needs signal there (reconstruct without --coil-compress)")
    values, vectors = np.linalg.eigh(gram)
    return np.clip(values[::-1], 0.0, None), vectors[:, ::-1], len(index)


def centre_gram(kspace: Any, index: np.ndarray) -> np.ndarray:
    """The complex128 Gram matrix ``K K^H`` of the samples ``index`` of k-space ``(C, M)``, on the host: of host
    k-space block by block of :data:`GRAM_BLOCK` samples (see there); of k-space on a device, there, as one
    complex128 product (the same matrix to float64 rounding), only the ``C x C`` result coming back."""
    xp = get_xp(kspace)
    if xp is not np:
        centre = kspace[:, xp.asarray(index)].astype(xp.complex128)
        return to_host(centre @ centre.conj().T)
    blocks = [index[start:start + GRAM_BLOCK] for start in range(0, len(index), GRAM_BLOCK)] or [index]

    def gram(block: np.ndarray) -> np.ndarray:
        centre = kspace[:, block].astype(np.complex128)
        return centre @ centre.conj().T

    threads = min(GRAM_THREADS, cpu_threads(), len(blocks))
    if threads < 2:
        parts = [gram(block) for block in blocks]
    else:
        with ThreadPoolExecutor(threads, thread_name_prefix="mri-recon-gram") as pool:
            parts = list(pool.map(gram, blocks))
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def auto_virtual(values: np.ndarray) -> int:
    """``"auto"``'s virtual coils: the fewest of the eigenvalues ``values`` (largest first) that hold
    :data:`AUTO_ENERGY` of their sum."""
    return min(len(values), int(np.searchsorted(np.cumsum(values) / values.sum(), AUTO_ENERGY)) + 1)


def compression_of(kspace: Any, trajectory: np.ndarray, choice: Any, whitening: np.ndarray | None = None,
                   source: str = "<memory>", index: np.ndarray | None = None) -> CoilCompression | None:
    """The :class:`CoilCompression` of k-space ``(C, M)`` (on the host, or on a device: :func:`centre_gram`) and
    host trajectory ``(M, D)`` for ``choice`` (:func:`parse_coil_compress`, or a :class:`CoilCompression`
    computed before: checked against the coils), with the data whitened by ``whitening`` ``(C, C)`` first; None
    for ``"none"``. ``index``: the centre's samples, when already known (:func:`centre_samples`)."""
    coils = kspace.shape[0]
    if isinstance(choice, CoilCompression):
        if choice.coils != coils:
            raise InvalidDataError(f"{source}: a coil compression of {choice.coils} coils cannot compress "
                                   f"{coils} coils")
        return choice
    chosen = parse_coil_compress(choice)
    if chosen == "none":
        return None
    if isinstance(chosen, int) and chosen >= coils:
        return CoilCompression(coils, coils, asked=chosen)
    values, vectors, samples = centre_energies(kspace, trajectory, whitening, source, index)
    shares = np.cumsum(values) / values.sum()
    virtual = chosen if isinstance(chosen, int) else auto_virtual(values)
    if virtual >= coils:
        return CoilCompression(coils, coils, energy=1.0, samples=samples, asked=chosen)
    matrix = np.ascontiguousarray(vectors[:, :virtual].conj().T)
    return CoilCompression(coils, virtual, matrix, float(shares[virtual - 1]), samples, chosen)
