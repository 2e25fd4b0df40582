"""One scan of a batch: its settings, the work a worker does for it, and what came of it.

:func:`run_scan` runs in a worker process (or in the calling process without Dask): the same steps as the
single-scan command (:func:`mri_recon.api.reconstruct_file`: load, prepare, reconstruct every image, write
atomically), then the completion record.
It never raises for a bad scan: the failure is returned as a :class:`ScanOutcome` with a one-line reason, so
the other scans go on.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import MriReconError
from ..settings import ReconSettings
from .record import write_record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScanTask:
    """One scan file to reconstruct into one output."""

    input: Path
    output: Path
    settings: ReconSettings


@dataclass(frozen=True)
class ScanOutcome:
    """What came of one scan of a batch."""

    input: str
    output: str
    status: str
    """``"done"``, ``"skipped"`` (complete from an earlier run) or ``"failed"``."""
    reason: str = ""
    """One line: why it failed or was skipped, or a note (``"rescheduled: a worker holding it died (1x)"``)."""
    images: int = 0
    iterations: int = 0
    """CG iterations of all its images."""
    final_residual: float | None = None
    """The largest final residual of its images."""
    engine: str = ""
    device: str = ""
    psf: str = ""
    """Where the PSF came from, per image (``"hit"``, ``"miss"`` = computed and stored, ...)."""
    seconds: float = 0.0
    """Wall time of the task in its worker."""
    worker: str = ""
    """``HOST:PID`` of the process that ran it (that wrote it, for a scan split into parts)."""
    parts: int = 1
    """Tasks its images were reconstructed in (more than one: an MRD file split over several workers)."""

    def with_note(self, note: str) -> ScanOutcome:
        return dataclasses.replace(self, reason="; ".join(r for r in (self.reason, note) if r))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    text = text[0] if text else ""
    return text if isinstance(exc, MriReconError) else f"{type(exc).__name__}: {text}".rstrip(": ")


def run_scan(task: ScanTask) -> ScanOutcome:
    """Reconstruct ``task.input`` into ``task.output`` and record it as complete (in a worker)."""
    from ..api import reconstruct_file  # noqa: PLC0415 - the reconstruction loads in the worker

    started = time.perf_counter()
    try:
        done = reconstruct_file(task.input, task.output, task.settings)
        outcome = record_images(task, done.results, done.written)
    except Exception as exc:  # noqa: BLE001 - one bad scan must not stop the others: reported, not raised
        return failed(task, exc, started)
    return dataclasses.replace(outcome, seconds=time.perf_counter() - started, worker=here())


def here() -> str:
    """``HOST:PID`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def failed(task: ScanTask, exc: BaseException, started: float) -> ScanOutcome:
    """The outcome of a scan that raised ``exc`` (logged as a warning)."""
    log.warning("%s: failed: %s", task.input, _one_line(exc))
    return ScanOutcome(str(task.input), str(task.output), "failed", _one_line(exc),
                       seconds=time.perf_counter() - started, worker=here())


def reconstruct_images(task: ScanTask, keys: list[dict]) -> list[tuple]:
    """``(key, scan, record, result)`` of the images of ``task.input`` with the given ``keys`` (a part of an
    MRD file's images), in file order; nothing written."""
    from ..api import reconstruct_file  # noqa: PLC0415 - the reconstruction loads in the worker

    return reconstruct_file(task.input, None, task.settings, keys=keys).results


def write_images(task: ScanTask, results: list[tuple], parts: int = 1) -> ScanOutcome:
    """Write the images ``results`` (in file order) to ``task.output`` and its completion record."""
    from ..api import write_images as write  # noqa: PLC0415 - the writers load in the worker

    return record_images(task, results, write(task.output, results, task.input, task.settings), parts)


def record_images(task: ScanTask, results: list[tuple], written: list[Path], parts: int = 1) -> ScanOutcome:
    """The outcome of the images ``results`` written to ``written``, recorded as complete beside the output."""
    rs = [r for *_, r in results]
    outcome = ScanOutcome(str(task.input), str(task.output), "done", images=len(rs),
                          iterations=sum(r.iterations for r in rs),
                          final_residual=max(float(r.residuals[-1]) for r in rs),
                          engine=str(rs[-1].parameters.get("method")), device=rs[-1].device,
                          psf=",".join(sorted({str(r.parameters.get("psf")) for r in rs})), parts=parts)
    write_record(task.output, task.input, task.settings.record(),
                 {k: v for k, v in dataclasses.asdict(outcome).items() if k not in ("input", "output", "status")},
                 files=written)
    return outcome
