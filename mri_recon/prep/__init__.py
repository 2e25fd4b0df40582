"""Getting a scan ready for :func:`mri_recon.reconstruct`: prewhitening, density compensation, coil maps.

The order matters and is fixed here: prewhiten first (maps and data must live in the whitened coil basis),
then choose the density weights (the coil-map estimate uses them), then the coil maps.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidDataError, SchemaError
from ..scan import Scan

DCF_CHOICES = ("auto", "none", "ramp", "pipe", "file")
COIL_MAP_CHOICES = ("auto", "file", "walsh", "espirit", "rss")


def prepare_scan(scan: Scan, *, prewhiten: bool = True, dcf: str = "auto",
                 coil_maps: str = "auto") -> tuple[Scan, dict[str, Any]]:
    """Return the scan to reconstruct and a record of what was done to it.

    Estimated coil maps are not computed here: ``record["estimate_maps"]`` names the method, for
    :func:`mri_recon.reconstruct` (``estimate_maps=``) to run on the data it has already uploaded, and
    ``record["maps_basis"]`` (with prewhitening) the noise's Cholesky factor for its ``maps_basis=``, so that
    estimated maps have the scale of whitened file maps.

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
    """
    if dcf not in DCF_CHOICES:
        raise InvalidDataError(f"unknown density compensation {dcf!r}: expected one of {', '.join(DCF_CHOICES)}")
    if coil_maps not in COIL_MAP_CHOICES:
        raise InvalidDataError(f"unknown coil-map choice {coil_maps!r}: expected one of "
                               f"{', '.join(COIL_MAP_CHOICES)}")
    record: dict[str, Any] = {"prewhitened": False}
    basis = None
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
        scan = scan.replace(weights=compute(scan.trajectory, scan.matrix))
    elif dcf == "none":
        scan = scan.replace(weights=None)
    record["dcf"] = dcf if dcf != "auto" else ("file" if scan.weights is not None else "none")

    method = coil_maps
    if method == "auto":
        method = "file" if scan.coil_maps is not None else ("walsh" if scan.n_coils > 1 else "none")
    if method == "file" and scan.coil_maps is None:
        raise SchemaError(f"{scan.source}: --coil-maps file needs a 'coil_maps' dataset, and the scan has none "
                          f"(use walsh, espirit or rss)")
    if method in ("walsh", "espirit", "rss", "none"):
        scan = scan.replace(coil_maps=None)
    record["coil_maps"] = method
    record["estimate_maps"] = method if method in ("walsh", "espirit") else None
    record["maps_basis"] = basis if record["estimate_maps"] else None
    return scan, record
