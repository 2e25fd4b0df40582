"""Noise prewhitening: decorrelate the receive channels so that their noise is white with unit variance.

With noise samples ``n`` (C, K) the channel covariance is ``Psi = n n^H / K`` (the noise is taken as zero
mean, as receiver noise is). Its Cholesky factor ``Psi = L L^H`` gives the whitening matrix ``W = L^{-1}``:
``W Psi W^H = I``. Applying W to the k-space, to the coil maps (``S' = W S``) and to the noise itself leaves
the SENSE model ``d = F S x`` intact (``W d = F (W S) x``) while making least squares the maximum-likelihood
estimate. The whitened noise is white with unit variance per complex sample at the noise scan's dwell time;
a different imaging dwell time only scales the image, not its shape. Prewhitening twice is harmless: the
whitened noise's covariance is the identity, whose W is the identity.
"""

from __future__ import annotations

from typing import Any

from ..arrays.backend import get_xp
from ..errors import InvalidDataError, SchemaError
from ..scan import Scan

MAX_CONDITION = 1e8
"""Largest accepted ratio of the covariance's largest to smallest eigenvalue (beyond it: singular)."""


def noise_covariance(noise: Any) -> Any:
    """Channel noise covariance ``n n^H / K`` of noise samples ``(C, K)`` (NumPy or CuPy), complex128 (C, C).

    Raises
    ------
    SchemaError
        ``noise`` is not two-dimensional.
    InvalidDataError
        Fewer samples than channels (K < C): the estimate would be singular.
    """
    xp = get_xp(noise)
    if noise.ndim != 2:
        raise SchemaError(f"noise must have shape (C, K), found {tuple(noise.shape)}")
    n_coils, count = noise.shape
    if count < n_coils:
        raise InvalidDataError(f"too few noise samples: {count} per channel for {n_coils} channels; the "
                               f"covariance needs at least as many samples as channels (K >= C)")
    n = noise.astype(xp.complex128, copy=False)
    return (n @ n.conj().T) / count


def whitening_matrix(cov: Any) -> Any:
    """``W = L^{-1}`` with ``cov = L L^H`` (Cholesky), complex128 (C, C): ``W cov W^H = I``.

    Raises
    ------
    SchemaError
        ``cov`` is not square.
    InvalidDataError
        ``cov`` is not Hermitian positive definite, or is singular (condition number above
        :data:`MAX_CONDITION`, e.g. a dead or duplicated channel).
    """
    return _inverse_factor(_checked_factor(cov))


def _checked_factor(cov: Any) -> Any:
    """The Cholesky factor ``L`` of ``cov`` (symmetrized), with the errors of :func:`whitening_matrix`."""
    xp = get_xp(cov)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise SchemaError(f"noise covariance must be square (C, C), found {tuple(cov.shape)}")
    cov = cov.astype(xp.complex128, copy=False)
    cov = (cov + cov.conj().T) / 2
    eig = xp.linalg.eigvalsh(cov)
    small, large = float(eig[0]), float(eig[-1])
    if not large > 0 or small <= large / MAX_CONDITION:
        raise InvalidDataError(f"noise covariance is singular: eigenvalues from {small:.3g} to {large:.3g} "
                               f"(condition above {MAX_CONDITION:.0e}); a channel may be dead or duplicated")
    return xp.linalg.cholesky(cov)


def _inverse_factor(lower: Any) -> Any:
    xp = get_xp(lower)
    return xp.tril(xp.linalg.inv(lower))  # L^{-1} is lower triangular: drop rounding above the diagonal


def whitening_and_basis(scan: Scan) -> tuple[Any, Any]:
    """``(W, L)`` of the scan's noise from one covariance: :func:`whitening_matrix` and
    :func:`receiver_basis` (the same bits), with their errors prefixed by the scan's source."""
    try:
        lower = _checked_factor(noise_covariance(scan.noise))
    except InvalidDataError as exc:
        raise InvalidDataError(f"{scan.source}: {exc}") from exc
    return _inverse_factor(lower), lower


def apply_whitening(w: Any, data: Any) -> Any:
    """``W`` applied over the leading (channel) axis of complex ``data`` (C, ...), in ``data``'s precision.
    (:func:`mri_recon.prepare_scan` runs it on one BLAS thread, so its bits do not depend on the thread
    count.)"""
    flat = data.reshape(data.shape[0], -1)
    return (w.astype(flat.dtype) @ flat).reshape(data.shape)


def receiver_basis(noise: Any) -> Any:
    """The Cholesky factor ``L`` of the noise covariance (``W = L^{-1}``), complex128 ``(C, C)``.

    ``L`` takes whitened channels back to the receiver's: estimated coil maps are normalized with it
    (:func:`mri_recon.reconstruct`'s ``maps_basis``) so that they follow the convention of maps given in
    the receiver's channels and whitened.
    """
    xp = get_xp(noise)
    cov = noise_covariance(noise)
    return xp.linalg.cholesky((cov + cov.conj().T) / 2)


def prewhiten(scan: Scan) -> Scan:
    """A copy of ``scan`` with whitened k-space, coil maps (``S' = W S``) and noise.

    ``attrs["prewhitened"]`` is set. Raises :class:`InvalidDataError` when the scan has no noise (run
    without prewhitening instead), when it has too few noise samples or when their covariance is singular.
    """
    return prewhiten_with_basis(scan)[0]


def prewhiten_with_basis(scan: Scan) -> tuple[Scan, Any]:
    """:func:`prewhiten` and the receiver basis ``L`` (:func:`receiver_basis`), from one covariance."""
    if scan.noise is None:
        raise InvalidDataError(f"{scan.source}: no 'noise' dataset to prewhiten with; acquire noise-only "
                               f"samples or reconstruct without prewhitening")
    w, basis = whitening_and_basis(scan)
    maps = None if scan.coil_maps is None else apply_whitening(w, scan.coil_maps)
    white = scan.replace(kspace=apply_whitening(w, scan.kspace), noise=apply_whitening(w, scan.noise),
                         coil_maps=maps, attrs={**scan.attrs, "prewhitened": True})
    return white, basis
