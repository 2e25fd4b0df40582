"""Whether a local cluster pays for its start-up: the batch's work predicted from its scans' sizes.

Starting a local cluster (worker processes that import mri-recon, TLS handshakes) costs about
:data:`CLUSTER_START_S`; a batch of small scans is over sooner in this process. The work of each scan is
predicted by :func:`mri_recon.planning.planner.plan` from the sizes in its file (matrix, coils, samples; read from the
file's metadata, no data loaded), and ``W`` workers can save at most ``work * (1 - 1/W)`` of it. A cluster is
started only when that saving exceeds its start-up (a cluster already running costs nothing to reuse). A scan
whose sizes cannot be read without loading it (an MRD, twix or BART file) counts as large: the cluster asked
for is started. A file that cannot be read at all has no work: it fails at once, wherever it runs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..errors import MriReconError
from ..io.readers import reader_of
from ..planning.planner import plan
from .task import ScanTask

CLUSTER_START_S = 1.4
"""Seconds to start a local cluster of two CPU worker processes, connect to it and close it (TLS with a
temporary certificate), as timed on the development machine (docs/batch.md, "When a local cluster starts").
Slower hosts take longer: the figure decides only when a cluster is worth it."""


@dataclass(frozen=True)
class Decision:
    """Whether to start a local cluster, and why (one line, for the log and the summary)."""

    start: bool
    reason: str


def scan_seconds(task: ScanTask, gpu: bool) -> float | None:
    """The predicted reconstruction time of a schema-v1 scan (:func:`~mri_recon.planning.planner.plan`); 0 for a file
    that no reader takes or a malformed schema-v1 file (it fails at once: it has no work); None when the sizes
    of a readable scan cannot be read from its metadata (MRD, twix, BART)."""
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    try:
        reader, _ = reader_of(task.input, task.settings.allow_external)
    except (MriReconError, OSError):
        return 0.0
    if reader.name != "schema-v1":
        return None
    try:
        with h5py.File(task.input, "r") as f:
            matrix = tuple(int(n) for n in f.attrs["matrix"])
            shape = f["kspace"].shape
    except (OSError, KeyError, TypeError, ValueError):
        return 0.0
    if not matrix or not shape or any(n < 1 for n in matrix):
        return 0.0
    coils, samples = (1, shape[0]) if len(shape) == 1 else (shape[0], math.prod(shape[1:]))
    estimate = plan(matrix, coils, samples, sense=True, iterations=task.settings.iterations, available_bytes=None,
                    gpu=gpu, method=task.settings.method)  # the engine of that name on that device
    return estimate.estimated_seconds


def decide(tasks: list[ScanTask], workers: int, gpu: bool, start_s: float | None = None) -> Decision:
    """Whether a new local cluster of ``workers`` workers pays for its start-up ``start_s`` (default
    :data:`CLUSTER_START_S`) on ``tasks``."""
    start_s = CLUSTER_START_S if start_s is None else start_s
    parallel = min(workers, len(tasks))
    if parallel < 2:
        return Decision(False, f"{len(tasks)} scan(s) on {workers} worker(s) would run one at a time, as in this "
                               f"process")
    predicted = [scan_seconds(task, gpu) for task in tasks]
    if any(p is None for p in predicted):
        unknown = next(t.input for t, p in zip(tasks, predicted) if p is None)
        return Decision(True, f"the work of {os.path.basename(unknown)} cannot be predicted from its metadata: "
                              f"cluster started as asked")
    work = sum(predicted)
    saving = work * (1 - 1 / parallel)
    if saving > start_s:
        return Decision(True, f"predicted work {work:.2f} s: {parallel} workers save about {saving:.2f} s, more "
                              f"than a cluster's start-up ({start_s:.1f} s)")
    return Decision(False, f"predicted work {work:.2f} s: {parallel} workers would save about {saving:.2f} s, "
                           f"less than a cluster's start-up ({start_s:.1f} s)")
