"""The reconstruction the CLI runs, as one call: :func:`mri_recon.prepare_scan`, then the solver.

``mri_recon.reconstruct(mri_recon.load_scan(path))`` gives the image ``mri-recon reconstruct path`` writes,
bit for bit (same defaults: prewhitening with the scan's noise, its density weights, its coil maps or Walsh
estimates, 30 CG iterations, the regularizer's default ``lam``: 1e-3 for l2). ``prepare=False``
reconstructs the scan exactly as given (:func:`mri_recon.pipeline.reconstruct`, the solver alone).
"""

from __future__ import annotations

from typing import Any

from . import pipeline
from .backend import Device
from .errors import InvalidDataError
from .operators.engines import Encoding
from .planner import Plan
from .prep import coil_map_method, prepare_scan
from .prep.maps_stage import CoilMapEstimate
from .prep_memory import preparation_of
from .result import Result
from .scan import Scan


def prepare_and_reconstruct(scan: Scan, *, prewhiten: bool = True, dcf: str = "auto", coil_maps: str = "auto",
                            field_map: str = "correct", **options: Any) -> tuple[Scan, dict[str, Any], Result]:
    """``(prepared scan, preparation record, result)``: :func:`~mri_recon.prep.prepare_scan` with these
    choices, then :func:`mri_recon.pipeline.reconstruct` with ``options`` and the coil-map estimation and
    receiver basis the preparation asks for."""
    taken = sorted({"estimate_maps", "maps_basis"} & set(options))
    if taken:
        raise InvalidDataError(f"{' and '.join(taken)} come from the preparation (coil_maps=...); pass them to "
                               f"mri_recon.pipeline.reconstruct, or reconstruct(..., prepare=False)")
    # the memory of the whole run, preparation included, is checked before anything is prepared
    plan_prepared(scan, prewhiten=prewhiten, dcf=dcf, coil_maps=coil_maps,
                  **{name: options[name] for name in ("device", "method", "iterations") if name in options})
    ready, record = prepare_scan(scan, prewhiten=prewhiten, dcf=dcf, coil_maps=coil_maps, field_map=field_map)
    maps = CoilMapEstimate.take(record)  # the coil-map stage, run by the pipeline on the uploaded data
    result = pipeline.reconstruct(ready, estimate_maps=maps.method, maps_basis=maps.basis, **options)
    return ready, record, result


def reconstruct(scan: Scan, *, prepare: bool = True, prewhiten: bool = True, dcf: str = "auto",
                coil_maps: str = "auto", field_map: str = "correct", **options: Any) -> Result:
    """Reconstruct ``scan`` as the CLI does.

    Parameters
    ----------
    scan
        A :class:`~mri_recon.scan.Scan` (``mri_recon.load_scan(path)``, ``simulate_scan(...)``).
    prepare
        True: prewhiten, choose density weights and coil maps like ``mri-recon reconstruct`` (the choices
        below, see :func:`mri_recon.prepare_scan`); False: solve with the scan exactly as given.
    prewhiten, dcf, coil_maps, field_map
        The preparation's choices (CLI: ``--no-prewhiten``, ``--dcf``, ``--coil-maps``, ``--no-field-map``).
    options
        The solver's settings, :func:`mri_recon.pipeline.reconstruct`: ``iterations``, ``lam``, ``tol``,
        ``device``, ``method``, ``filter_sigma``, ``progress``, ``psf_cache``, ...

    Returns
    -------
    Result
        The image and the run's settings (:func:`prepare_and_reconstruct` also returns what the
        preparation did).
    """
    if not prepare:
        return pipeline.reconstruct(scan, **options)
    return prepare_and_reconstruct(scan, prewhiten=prewhiten, dcf=dcf, coil_maps=coil_maps,
                                   field_map=field_map, **options)[2]


def plan_prepared(scan: Scan, *, prewhiten: bool = True, dcf: str = "auto", coil_maps: str = "auto",
                  device: str | int | Device | None = "auto", method: str = "auto",
                  iterations: int = 30) -> tuple[Device, type[Encoding], Plan]:
    """:func:`mri_recon.pipeline.plan_reconstruction` of ``scan`` as :func:`mri_recon.prepare_scan` with these
    choices will prepare it, the preparation's stages included (prewhitening, density weights, coil-map estimate): what
    :func:`mri_recon.reconstruct` checks before it prepares anything, and ``mri-recon info`` reports."""
    maps = coil_map_method(scan, coil_maps)
    estimate = maps if maps in ("walsh", "espirit") else None
    preparation = preparation_of(scan, prewhiten=prewhiten, dcf=dcf, estimate_maps=estimate)
    sense = maps in ("file", "walsh", "espirit")
    return pipeline.plan_reconstruction(scan, device, method, iterations, sense, preparation)
