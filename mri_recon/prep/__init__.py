"""Getting a scan ready for :func:`mri_recon.reconstruct`: prewhitening, density compensation, coil maps.

The order matters and is fixed here: prewhiten first (maps and data must live in the whitened coil basis),
then choose the density weights (the coil-map estimate uses them), then the coil maps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import blas_on_one_thread
from ..errors import InvalidDataError, SchemaError
from ..scan import Scan
from ..validation import check_field_map_pair

DCF_CHOICES = ("auto", "none", "ramp", "pipe", "file")
COIL_MAP_CHOICES = ("auto", "file", "walsh", "espirit", "rss")
FIELD_MAP_CHOICES = ("correct", "ignore")
"""What to do with a scan's ``field_map`` / ``times``: keep them for off-resonance correction, or drop them."""


@blas_on_one_thread
def prepare_scan(scan: Scan, *, prewhiten: bool = True, dcf: str = "auto", coil_maps: str = "auto",
                 field_map: str = "correct") -> tuple[Scan, dict[str, Any]]:
    """Return the scan to reconstruct and a record of what was done to it.

    Estimated coil maps are not computed here: ``record["estimate_maps"]`` names the method, for
    :func:`mri_recon.reconstruct` (``estimate_maps=``) to run on the data it has already uploaded, and
    ``record["maps_basis"]`` (with prewhitening, unless the maps come from the file) the noise's Cholesky
    factor for its ``maps_basis=``, so that estimated maps, and coil images combined by root-sum-of-squares,
    have the scale of a reconstruction with whitened file maps.

    Parameters
    ----------
    prewhiten
        Whiten data (and coil maps) with the noise covariance when the scan carries ``noise``.
    dcf
        ``"auto"``: the scan's ``weights`` if present, else none; ``"none"``; ``"ramp"`` (analytic radial
        ramp); ``"pipe"`` (iterative Pipe-Menon); ``"file"``: the scan's ``weights``, required.
    coil_maps
        ``"auto"``: the scan's maps if present, else Walsh estimates for several coils; ``"file"``: the
        scan's maps, required; ``"walsh"`` / ``"espirit"``: estimated from the k-space centre; ``"rss"``: no
        maps, each coil solved alone and combined by root-sum-of-squares.
    field_map
        ``"correct"`` (default): keep ``field_map`` and ``times`` for :func:`mri_recon.reconstruct` to correct
        off-resonance; one without the other raises :class:`~mri_recon.errors.InvalidDataError`.
        ``"ignore"``: drop both on purpose (recorded as ``record["field_map"] = "ignored"`` and, through the
        scan's attributes, as the reconstruction's ``field_map_correction = "ignored"``).

    Raises
    ------
    InvalidDataError
        An unknown choice, a field map without times (or times without a field map) with
        ``field_map="correct"``, or density weights that come out all zero.
    SchemaError
        ``dcf="file"`` or ``coil_maps="file"`` without the dataset.
    """
    if dcf not in DCF_CHOICES:
        raise InvalidDataError(f"unknown density compensation {dcf!r}: expected one of {', '.join(DCF_CHOICES)}")
    if coil_maps not in COIL_MAP_CHOICES:
        raise InvalidDataError(f"unknown coil-map choice {coil_maps!r}: expected one of "
                               f"{', '.join(COIL_MAP_CHOICES)}")
    if field_map not in FIELD_MAP_CHOICES:
        raise InvalidDataError(f"unknown field-map choice {field_map!r}: expected 'correct' or 'ignore'")
    record: dict[str, Any] = {"prewhitened": False}
    record.update({name: scan.attrs[name] for name in ("partial_fourier", "readout_oversampling_removed")
                   if name in scan.attrs})  # Cartesian input says what was done (mri_recon.io.cartesian)
    basis = None
    if field_map == "correct":
        check_field_map_pair(scan.field_map, scan.times, scan.source)
    elif scan.field_map is not None or scan.times is not None:
        record["field_map"] = "ignored"
        scan = scan.replace(field_map=None, times=None, attrs={**scan.attrs, "field_map_correction": "ignored"})
    if prewhiten and scan.noise is not None:
        from .noise import prewhiten as whiten
        from .noise import receiver_basis

        scan, basis = whiten(scan), receiver_basis(scan.noise)
        record["prewhitened"] = True

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

    method = coil_map_method(scan, coil_maps)
    if method == "file" and scan.coil_maps is None:
        raise SchemaError(f"{scan.source}: --coil-maps file needs a 'coil_maps' dataset, and the scan has none "
                          f"(use walsh, espirit or rss)")
    if method in ("walsh", "espirit", "rss", "none"):
        scan = scan.replace(coil_maps=None)
    record["coil_maps"] = method
    record["estimate_maps"] = method if method in ("walsh", "espirit") else None
    record["maps_basis"] = basis if method != "file" else None  # file maps were whitened with the data
    return scan, record


def coil_map_method(scan: Scan, coil_maps: str = "auto") -> str:
    """The coil-map choice :func:`prepare_scan` makes: ``coil_maps`` itself, or for ``"auto"`` ``"file"``
    (the scan has maps), ``"walsh"`` (several coils) or ``"none"`` (one coil)."""
    if coil_maps != "auto":
        return coil_maps
    several = "espirit" if scan.attrs.get("sampling") == "cartesian" else "walsh"  # Cartesian: ACS, as ecalib
    return "file" if scan.coil_maps is not None else (several if scan.n_coils > 1 else "none")
