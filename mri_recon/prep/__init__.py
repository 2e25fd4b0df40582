"""Getting a scan ready for :func:`mri_recon.reconstruct`: prewhitening, density compensation, coil maps.

The order matters and is fixed here: the gradient-delay correction of the trajectory before anything uses it
(:mod:`mri_recon.prep.gradient_delay`), prewhiten (maps and data must live in the whitened coil basis), compress
the coils when asked (:mod:`mri_recon.prep.compress`: principal components of the whitened receivers), then
choose the density weights (the coil-map estimate uses them), then the coil maps.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..arrays.backend import blas_on_one_thread
from ..checks.validation import check_field_map_pair, trajectory_extent
from ..errors import InvalidDataError, SchemaError
from ..operators.engines.registry import sampling_of
from ..scan import Scan
from .maps_methods import COIL_MAPS, chosen_method, method_of, without_file_maps
from .maps_stage import CoilMapEstimate

log = logging.getLogger("mri_recon.prep")

DCF_CHOICES = ("auto", "none", "ramp", "pipe", "file")
FIELD_MAP_CHOICES = ("correct", "ignore")
"""What to do with a scan's ``field_map`` / ``times``: keep them for off-resonance correction, or drop them."""


@blas_on_one_thread
def prepare_scan(scan: Scan, *, prewhiten: bool = True, dcf: str = "auto", coil_maps: str = "auto",
                 field_map: str = "correct", gradient_delay="none",
                 coil_compress: Any = "none", coil_compress_method: str = "svd") -> tuple[Scan, dict[str, Any]]:
    """Return the scan to reconstruct and a record of what was done to it.

    Estimated coil maps are not computed here: the coil-map stage (:class:`~.maps_stage.CoilMapEstimate`,
    read back from the record by :meth:`~.maps_stage.CoilMapEstimate.take`) runs in the pipeline on the data
    it has already uploaded. ``record["estimate_maps"]`` names its method and ``record["maps_basis"]`` (with
    prewhitening, unless the maps come from the file) is the noise's Cholesky factor, so that estimated maps,
    and coil images combined by root-sum-of-squares, have the scale of a reconstruction with whitened file
    maps.

    Parameters
    ----------
    prewhiten
        Whiten data (and coil maps) with the noise covariance when the scan carries ``noise``.
    dcf
        ``"auto"``: the scan's ``weights`` if present, else none; ``"none"``; ``"ramp"`` (analytic radial
        ramp); ``"pipe"`` (iterative Pipe-Menon); ``"file"``: the scan's ``weights``, required.
    coil_maps
        ``"auto"``: the scan's maps if present, else Walsh estimates for several coils; ``"file"``: the
        scan's maps, required; ``"walsh"`` / ``"espirit"``: estimated from the k-space centre; ``"nlinv"``:
        estimated with the image from all samples (:mod:`mri_recon.prep.nlinv`); ``"rss"``: no maps, each coil
        solved alone and combined by root-sum-of-squares.
    field_map
        ``"correct"`` (default): keep ``field_map`` and ``times`` for :func:`mri_recon.reconstruct` to correct
        off-resonance; one without the other raises :class:`~mri_recon.errors.InvalidDataError`.
        ``"ignore"``: drop both on purpose (recorded as ``record["field_map"] = "ignored"`` and, through the
        scan's attributes, as the reconstruction's ``field_map_correction = "ignored"``).
    gradient_delay
        ``"none"`` (default), ``"auto"``, ``"ring"`` or delays ``(X, Y[, Z])`` in samples: the trajectory
        corrected first (:func:`mri_recon.prep.gradient_delay.correct_gradient_delay`, its record entries).
    coil_compress
        ``"none"`` (default), ``"auto"`` or a number of virtual coils N: after prewhitening, the k-space, noise
        and coil maps compressed to the principal components of the k-space centre
        (:mod:`mri_recon.prep.compress`; record entries ``coil_compress``, ``coil_compress_energy``,
        ``coil_compress_note``), and everything after run on them. A
        :class:`~mri_recon.prep.compress.CoilCompression` computed before is applied as it is (the frames of a
        time series share their averaged data's).
    coil_compress_method
        ``"svd"`` (default: one matrix from the k-space centre) or ``"geometric"`` (Cartesian scans: one matrix
        per readout position, :mod:`mri_recon.prep.geometric`), :data:`mri_recon.prep.compress.COMPRESSION_METHODS`;
        another than the default without ``coil_compress`` is refused.

    Raises
    ------
    InvalidDataError
        An unknown choice, a field map without times (or times without a field map) with
        ``field_map="correct"``, density weights that come out all zero, coil compression of a scan whose
        k-space centre is all zero, or a compression method the scan does not allow.
    SchemaError
        ``dcf="file"`` or ``coil_maps="file"`` without the dataset.
    """
    check_choices(dcf, coil_maps, field_map)
    from .gradient_delay import correct_gradient_delay

    (scan,), delays = correct_gradient_delay(scan, gradient_delay)  # before anything uses the trajectory
    record: dict[str, Any] = {"prewhitened": False, **delays}
    record.update(reader_record(scan))
    record.update(extent_record(scan))
    scan = _field_map_step(scan, field_map, record)
    scan, basis = _whiten_step(scan, prewhiten, (coil_compress, coil_compress_method), record)
    scan = _dcf_step(scan, dcf, record)
    scan, maps = _maps_step(scan, coil_maps, basis, record)
    record.update(maps.record())
    return scan, record


def reader_record(scan: Scan) -> dict[str, Any]:
    """What the reader did that the preparation record repeats: Cartesian input's ``partial_fourier`` and
    ``readout_oversampling_removed`` (:mod:`mri_recon.io.cartesian`)."""
    return {name: scan.attrs[name] for name in ("partial_fourier", "readout_oversampling_removed")
            if name in scan.attrs}


BEYOND_NYQUIST = 1.1
"""A trajectory reaching past this many times the Nyquist extent ``matrix / 2`` on some axis is warned about
(past 2x it is refused, :func:`mri_recon.checks.validation.check_trajectory_units`)."""


def extent_record(scan: Scan) -> dict[str, Any]:
    """A warning (logged, and recorded as ``trajectory_beyond_nyquist``) for a trajectory that reaches well past
    the frequencies the matrix holds: frequencies the image cannot represent, most often a trajectory scaled
    for another matrix or for readout oversampling."""
    reach = trajectory_extent(scan.trajectory) / (np.asarray(scan.matrix, dtype=np.float64) / 2)
    axis = int(np.argmax(reach))
    if reach[axis] <= BEYOND_NYQUIST:
        return {}
    note = (f"{scan.source}: the trajectory reaches {reach[axis]:.2f}x the Nyquist extent on axis {axis} "
            f"(|k| up to {reach[axis] * scan.matrix[axis] / 2:.4g} for a matrix of {scan.matrix[axis]}): the image "
            f"cannot hold those frequencies; is it scaled for a larger matrix or for readout oversampling?")
    log.warning("%s", note)
    return {"trajectory_beyond_nyquist": note}


def check_choices(dcf: str, coil_maps: str, field_map: str) -> None:
    if dcf not in DCF_CHOICES:
        raise InvalidDataError(f"unknown density compensation {dcf!r}: expected one of {', '.join(DCF_CHOICES)}")
    method_of(coil_maps)
    if field_map not in FIELD_MAP_CHOICES:
        raise InvalidDataError(f"unknown field-map choice {field_map!r}: expected 'correct' or 'ignore'")


def _field_map_step(scan: Scan, field_map: str, record: dict[str, Any]) -> Scan:
    """Keep the field map and times (checked as a pair) or drop both on purpose."""
    if field_map == "correct":
        check_field_map_pair(scan.field_map, scan.times, scan.source)
    elif scan.field_map is not None or scan.times is not None:
        record["field_map"] = "ignored"
        scan = scan.replace(field_map=None, times=None, attrs={**scan.attrs, "field_map_correction": "ignored"})
    return scan


def _whiten_step(scan: Scan, prewhiten: bool, compress: tuple[Any, str], record: dict[str, Any]) -> tuple[Scan, Any]:
    """Prewhiten with the scan's noise and, when asked (``compress``: the choice and the method), compress the
    coils (:mod:`.compress`: the matrix ``A`` from the scan as it is and the whitening matrix ``W``), in one
    product ``A W``; the receiver basis of the result (the noise's Cholesky factor, then of the virtual coils),
    or None."""
    whiten = prewhiten and scan.noise is not None
    if whiten:
        from .noise import prewhiten_with_basis, whitening_and_basis

        record["prewhitened"] = True
    from .compress import wanted
    from .compress_methods import check_method, compression_for

    coil_compress, method = compress
    check_method(coil_compress, method)
    if not wanted(coil_compress):  # bit for bit as without the option
        return prewhiten_with_basis(scan) if whiten else (scan, None)

    w, basis = whitening_and_basis(scan) if whiten else (None, None)
    compression = compression_for(scan, coil_compress, method, w)
    record.update(compression.record())
    if not compression.compresses:
        return prewhiten_with_basis(scan) if whiten else (scan, None)
    attrs = {**scan.attrs, "prewhitened": True} if whiten else scan.attrs
    return compression.scan(scan, w).replace(attrs=attrs), compression.basis(basis)


def _dcf_step(scan: Scan, dcf: str, record: dict[str, Any]) -> Scan:
    """The density weights of the choice ``dcf``."""
    if dcf == "file" and scan.weights is None:
        raise SchemaError(f"{scan.source}: --dcf file needs a 'weights' dataset, and the scan has none")
    if dcf in ("ramp", "pipe"):
        from . import dcf as dcf_module

        compute = dcf_module.ramp if dcf == "ramp" else dcf_module.pipe_menon
        weights = np.asarray(compute(scan.trajectory, scan.matrix))
        if not np.any(weights > 0):
            raise InvalidDataError(f"{scan.source}: density compensation '{dcf}' gave all-zero weights (are "
                                   f"all samples at k = 0?); the image would be zero")
        scan = scan.replace(weights=weights)
    elif dcf == "none":
        scan = scan.replace(weights=None)
    record["dcf"] = dcf if dcf != "auto" else ("file" if scan.weights is not None else "none")
    return scan


def _maps_step(scan: Scan, coil_maps: str, basis: Any, record: dict[str, Any]) -> tuple[Scan, CoilMapEstimate]:
    """The coil-map choice: the file's maps kept, or dropped for an estimate (run later, on the device, by
    :class:`~.maps_stage.CoilMapEstimate`) or for per-coil images."""
    name = coil_map_method(scan, coil_maps)
    method = COIL_MAPS[name]
    if method.file and scan.coil_maps is None:
        raise missing_maps(scan, name)
    if not method.file:
        scan = scan.replace(coil_maps=None)
    record["coil_maps"] = name
    estimate = name if method.estimated else None
    return scan, CoilMapEstimate(estimate, None if method.file else basis)  # file maps: whitened with the data


def missing_maps(scan: Scan, name: str) -> SchemaError:
    """The error of a method that takes the file's maps (``name``) for a scan without them."""
    return SchemaError(f"{scan.source}: --coil-maps {name} needs a 'coil_maps' dataset, and the scan has none "
                       f"(use {without_file_maps()})")


def coil_map_method(scan: Scan, coil_maps: str = "auto", coils: int | None = None) -> str:
    """The coil-map method :func:`prepare_scan` uses: ``coil_maps`` itself, or for ``"auto"`` the file's maps,
    an estimate (Walsh; ESPIRiT from a Cartesian scan's ACS, as ecalib) for several coils, or ``"none"`` for
    one coil (:func:`.maps_methods.chosen_method`). ``coils``: the coils after compression (default the
    scan's)."""
    coils = scan.n_coils if coils is None else coils
    return chosen_method(coil_maps, scan.coil_maps is not None, coils, sampling_of(scan))
