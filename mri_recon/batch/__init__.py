"""Batch reconstruction: many scans, one output each, in this process or on a Dask cluster.

:func:`reconstruct_many` is the entry point (``mri-recon reconstruct A.h5 B.h5 ... -o OUTDIR``). Dask
(``pip install 'mri-recon[batch]'``) is imported only when a cluster is used; this package imports none of it.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "BatchReport": "summary",
    "ReconSettings": "..settings",
    "ScanOutcome": "task",
    "expand_inputs": "inputs",
    "output_name": "inputs",
    "reconstruct_many": "runner",
}
"""Each public name and its module, imported on first use (a single scan's ``mri-recon reconstruct`` names its
output through :mod:`.inputs` without loading the runner)."""

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        module = _LAZY[name]
        return getattr(importlib.import_module(module if module.startswith("..") else f".{module}", __name__), name)
    raise AttributeError(f"module 'mri_recon.batch' has no attribute {name!r}")
