"""mri-recon: exact non-Cartesian MRI reconstruction on NVIDIA GPUs, with a NumPy twin.

Public API (stable)::

    load_scan, load_scans, save_scan, Scan schema-v1 HDF5 scans (and ISMRMRD input)
    prepare_scan                           prewhitening, density compensation, coil-map choice
    fhd, forward, psf                      F^H d, F and the Toeplitz PSF (NumPy or CuPy in and out); plans
                                           kept per trajectory (plan_cache_info, plan_cache_clear)
    EncodingOperator                       F planned once: op(x), op.H(y), op.normal(weights, maps, lam)
    reconstruct, Result                    CG-SENSE / Tikhonov reconstruction, prepared as the CLI does
                                           (prepare=False: the scan as given, mri_recon.pipeline.reconstruct)
    ReconSettings, reconstruct_file        every option of a reconstruction in one object; a file read,
                                           reconstructed and written as ``mri-recon reconstruct`` does
    reconstruct_many                       many scans, one output each, in this process or on Dask
    load_series                            time series, frames of a file: reconstruct(series, temporal="tv")
    simulate_series                        a beating phantom, exact k-space per frame
    convolve, smooth                       post-filter (correlation semantics)
    simulate_scan                          analytic phantom scans
    MriReconError                          base class of every error raised on purpose

The library prints nothing: it logs through :mod:`logging` (logger ``mri_recon`` and its children; stage
timings at INFO, CG iterations at DEBUG), silent unless the application configures logging.

The operators themselves (``LinearOperator``, the encoding engines, ``Sense``, Toeplitz) are in
:mod:`mri_recon.operators`; the layout is described in ``docs/architecture.md``.
"""

from __future__ import annotations

import importlib
import logging

from ._version import __version__
from .errors import MriReconError

logging.getLogger(__name__).addHandler(logging.NullHandler())

_LAZY = {
    "load_scan": "io",
    "load_scans": "io",
    "save_scan": "io",
    "Scan": "scan",
    "fhd": "operators",
    "forward": "operators",
    "psf": "operators",
    "EncodingOperator": "operators",
    "plan_cache_info": "operators",
    "plan_cache_clear": "operators",
    "fhd_offres": "operators",
    "forward_offres": "operators",
    "prepare_scan": "prep",
    "simulate_scan": "sim.simulate",
    "reconstruct": "api",
    "reconstruct_file": "api",
    "ReconSettings": "settings",
    "reconstruct_many": "batch",
    "load_series": "io.frames",
    "simulate_series": "sim.dynamic",
    "Result": "result",
    "convolve": "filters",
    "smooth": "filters",
}

__all__ = ["MriReconError", "__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'mri_recon' has no attribute {name!r}")
