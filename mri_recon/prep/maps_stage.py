"""The coil-map stage of the preparation: what it will do (:class:`CoilMapEstimate`, decided by
:func:`mri_recon.prep.prepare_scan`) and the estimation itself (:meth:`CoilMapEstimate.run`), which the pipeline
calls on the device with the k-space it has already uploaded. One owner: the choice, its checks, the
estimation and the normalization in the receiver's channels all live here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays.backend import Device, get_xp, to_host
from ..checks.scaling import unit_scale
from ..errors import InvalidDataError, listed
from ..scan import Scan
from .maps_methods import estimated, is_estimated


@dataclass(frozen=True)
class CoilMapEstimate:
    """Which coil maps a reconstruction estimates, and in which channels."""

    method: str | None = None
    """A method that estimates maps (:func:`.maps_methods.estimated`: ``"walsh"``, ``"espirit"``), run on
    the device from the k-space centre; None: the scan's maps (or none)."""
    basis: Any = None
    """With prewhitened data and no maps from the file: the ``(C, C)`` Cholesky factor L of the noise
    covariance (:func:`mri_recon.prep.noise.receiver_basis`; after coil compression ``(C, N)``, or ``(X, C, N)``
    per position along the first image axis after geometric compression: :func:`in_receivers`). Estimated maps
    are then normalized in the receiver's channels, and per-coil images are combined there, like a
    reconstruction with maps from a file, so the image has the same scale whichever maps (or none) are used."""
    sampling: str = "non-cartesian"
    """The scan's (:func:`~mri_recon.operators.engines.registry.sampling_of`): a Cartesian scan's maps come from
    its autocalibration region (:func:`~mri_recon.prep.cartesian_maps.cartesian_coil_maps`, as BART's
    ``ecalib``), any other's from the k-space centre (:func:`~mri_recon.prep.coilmaps.coil_maps_from_kspace`)."""

    @classmethod
    def take(cls, record: dict[str, Any]) -> CoilMapEstimate:
        """The estimate a preparation record asks for, its keys ``estimate_maps`` and ``maps_basis`` removed
        from ``record`` (what remains is the record of what was done)."""
        return cls(record.pop("estimate_maps"), record.pop("maps_basis"))

    def record(self) -> dict[str, Any]:
        """The preparation record's entries of this stage (:meth:`take` reads them back)."""
        return {"estimate_maps": self.method, "maps_basis": self.basis}

    def check(self, scan: Scan) -> None:
        """Refuse an unknown method, and a basis with the scan's own maps (they are whitened with the data)."""
        if not (self.method is None or is_estimated(self.method)):
            raise InvalidDataError(f"estimate_maps must be None, {listed(estimated(), quote=True)}, found "
                                   f"{self.method!r}")
        if self.basis is not None and scan.coil_maps is not None and self.method is None:
            raise InvalidDataError("maps_basis applies to estimated coil maps and to per-coil images, not to the "
                                   "scan's own coil maps (they are whitened with the data)")

    def run(self, kspace: Any, trajectory: Any, matrix: tuple[int, ...], weights: Any,
            device: Device) -> tuple[Any, float]:
        """``(maps, s)``: complex64 maps ``(C, *matrix)`` estimated on ``device`` from the uploaded data
        (the estimator of :attr:`sampling`; ``weights`` None: the scan has none), and the
        power of two ``s`` they are to be divided by (1 without a basis: :func:`normalize_in_basis`)."""
        if self.sampling == "cartesian":
            from .cartesian_maps import cartesian_coil_maps as estimate  # noqa: PLC0415 - only when estimating
        else:
            from .coilmaps import coil_maps_from_kspace as estimate  # noqa: PLC0415 - only when estimating
        maps = estimate(kspace, trajectory, matrix, self.method, weights=weights, device=device)
        maps = maps.astype(np.complex64, copy=False)
        if self.basis is None:
            return maps, 1.0
        return normalize_in_basis(maps, self.basis)


def unit_basis(basis: Any) -> tuple[Any, float]:
    """``(basis / s, s)`` as complex64 NumPy with ``s`` a power of two near the basis' largest entry
    (``(None, 1.0)`` without a basis): the receiver basis scales with the noise, by any factor."""
    if basis is None:
        return None, 1.0
    unit, scale = unit_scale(np.asarray(to_host(basis), dtype=np.complex128))
    return unit.astype(np.complex64), scale


def in_receivers(unit: Any, images: Any) -> Any:
    """Images ``(N, *matrix)`` (NumPy or CuPy) in the receiver's channels: ``unit @ images`` per voxel for a basis
    ``(C, N)``, or ``unit[x] @ images[:, x, ...]`` for one ``(X, C, N)`` that varies along the first image axis
    (geometric coil compression, :mod:`.geometric`): ``(C, *matrix)``."""
    xp = get_xp(images)
    unit = xp.asarray(unit)
    if unit.ndim == 2:
        return (unit @ images.reshape(images.shape[0], -1)).reshape(unit.shape[0], *images.shape[1:])
    rest = images.reshape(images.shape[0], images.shape[1], -1).transpose(1, 0, 2)  # (X, N, R)
    return xp.ascontiguousarray(xp.matmul(unit, rest).transpose(1, 0, 2)).reshape(unit.shape[1], *images.shape[1:])


def normalize_in_basis(maps: Any, basis: Any) -> tuple[Any, float]:
    """Estimated maps ``S`` (unit root-sum-of-squares in the channels they were estimated in) rescaled per
    voxel so that ``basis @ S`` has unit root-sum-of-squares: the convention of maps given in the receiver's
    channels and then whitened. ``basis`` is the ``(C, C)`` matrix taking whitened channels back to receiver
    channels (the Cholesky factor L of the noise covariance; per readout position: :func:`in_receivers`). Returns
    ``(S', s)``: the maps are ``S' / s``,
    ``s`` a power of two near L's largest entry (L scales with the noise, which float32's squares do not
    survive beyond about 1e+-19)."""
    xp = get_xp(maps)
    unit, scale = unit_basis(basis)
    receiver = in_receivers(unit, maps)
    rss = xp.sqrt((receiver.real ** 2 + receiver.imag ** 2).sum(axis=0))
    inverse = xp.where(rss > 0, 1.0 / xp.where(rss > 0, rss, 1), 0).astype(np.float32)
    return maps * inverse, scale
