"""Batch reconstruction: many scans, one output each, in this process or on a Dask cluster.

:func:`reconstruct_many` is the entry point (``mri-recon reconstruct A.h5 B.h5 ... -o OUTDIR``). Dask
(``pip install 'mri-recon[batch]'``) is imported only when a cluster is used; this package imports none of it.
"""

from __future__ import annotations

from ..settings import ReconSettings
from .inputs import expand_inputs, output_name
from .runner import reconstruct_many
from .summary import BatchReport
from .task import ScanOutcome

__all__ = ["BatchReport", "ReconSettings", "ScanOutcome", "expand_inputs", "output_name", "reconstruct_many"]
