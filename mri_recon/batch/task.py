"""One scan of a batch: its options, the work a worker does for it, and what came of it.

:func:`run_scan` runs in a worker process (or in the calling process without Dask): the same steps as the
single-scan command (load, prepare, reconstruct every image, write atomically), then the completion record.
It never raises for a bad scan: the failure is returned as a :class:`ScanOutcome` with a one-line reason, so
the other scans go on.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidDataError, MriReconError
from .record import write_record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconOptions:
    """The settings of every scan of a batch; the defaults are those of ``mri-recon reconstruct``."""

    iterations: int = 30
    """Most CG iterations."""
    lam: float | None = None
    """Regularization weight (relative, see :func:`mri_recon.pipeline.reconstruct`); None: the regularizer's
    default (:data:`mri_recon.solvers.sparse.LAM_DEFAULTS`)."""
    tol: float = 1e-6
    """CG stops at this relative residual."""
    filter_sigma: float | None = None
    """Gaussian post-filter width in voxels; None: none."""
    method: str = "auto"
    """``"auto" | "exact" | "nufft"``."""
    device: str = "auto"
    """``"auto" | "cpu" | "gpu"`` (in a GPU cluster every worker sees its own GPU as ``gpu:0``)."""
    coil_maps: str = "auto"
    dcf: str = "auto"
    prewhiten: bool = True
    field_map: str = "correct"
    """``"correct"`` or ``"ignore"`` (drop the scan's field map on purpose)."""
    traj_units: str = "auto"
    allow_external: bool = False
    """Read datasets and links that reach other files (``--allow-external-data``)."""
    choice: dict = field(default_factory=dict)
    """ISMRMRD image choice: ``slice``, ``contrast``, ``phase``, ``set``, ``repetition`` values."""
    format: str | None = None
    """Output format (``"hdf5" | "nifti" | "mrd"``; None: HDF5)."""
    complex_: bool = False
    magnitude: bool = False
    cache: bool = True
    """Use the PSF cache."""
    cache_dir: str | None = None
    """The PSF cache folder (None: the default one, shared by the workers of one host)."""
    solver: dict = field(default_factory=dict)
    """Further settings of :func:`mri_recon.pipeline.reconstruct`: the regularized solvers' (``regularizer``,
    ``rho``, ``inner_iterations``, ``anisotropic``, ``solver``) and the off-resonance correction's."""

    def __post_init__(self) -> None:
        if not (isinstance(self.iterations, int) and self.iterations >= 1):
            raise InvalidDataError(f"iterations must be a whole number >= 1, found {self.iterations!r}")
        for name in ("lam", "tol"):
            value = getattr(self, name)
            if value is None and name == "lam":
                continue
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise InvalidDataError(f"{name} must be a finite number >= 0, found {value!r}")
        if self.method not in ("auto", "exact", "nufft"):
            raise InvalidDataError(f"method must be 'auto', 'exact' or 'nufft', found {self.method!r}")
        if self.field_map not in ("correct", "ignore"):
            raise InvalidDataError(f"field_map must be 'correct' or 'ignore', found {self.field_map!r}")
        unknown = set(self.choice) - {"slice", "contrast", "phase", "set", "repetition"}
        if unknown:
            raise InvalidDataError(f"choice takes slice, contrast, phase, set, repetition; found {sorted(unknown)}")

    def settings(self) -> dict[str, Any]:
        """What the output depends on (recorded in the completion record; not the device or the cache)."""
        from ..solvers.sparse import resolve_lam  # noqa: PLC0415 - the solvers load with the reconstruction

        skip = ("device", "cache", "cache_dir", "allow_external")  # allow_external: read or refused, same image
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}
        if self.lam is None:  # the default, as a number where it does not depend on the scan's weights (l2)
            try:
                regularizer = self.solver.get("regularizer", "l2")
                used = {resolve_lam(regularizer, None, weighted) for weighted in (True, False)}
            except InvalidDataError:  # an unknown regularizer fails when the scan is reconstructed
                used = set()
            out["lam"] = used.pop() if len(used) == 1 else None
        return {**out, "format": self.format or "hdf5"}


@dataclass(frozen=True)
class ScanTask:
    """One scan file to reconstruct into one output."""

    input: Path
    output: Path
    options: ReconOptions


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
    started = time.perf_counter()
    try:
        done = write_images(task, reconstruct_images(task))
    except Exception as exc:  # noqa: BLE001 - one bad scan must not stop the others: reported, not raised
        return failed(task, exc, started)
    return dataclasses.replace(done, seconds=time.perf_counter() - started, worker=here())


def here() -> str:
    """``HOST:PID`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def failed(task: ScanTask, exc: BaseException, started: float) -> ScanOutcome:
    """The outcome of a scan that raised ``exc`` (logged as a warning)."""
    log.warning("%s: failed: %s", task.input, _one_line(exc))
    return ScanOutcome(str(task.input), str(task.output), "failed", _one_line(exc),
                       seconds=time.perf_counter() - started, worker=here())


def reconstruct_images(task: ScanTask, keys: list[dict] | None = None) -> list[tuple]:
    """``(key, scan, record, result)`` of every image of ``task.input`` (that ``task.options.choice``
    keeps), or of those with the given ``keys`` (a part of an MRD file's images), in file order."""
    from ..api import prepare_and_reconstruct
    from ..io import load_scans
    from ..io.cache import PsfCache

    opts = task.options
    picked = {k: v for k, v in opts.choice.items() if v is not None}
    cache = PsfCache(opts.cache_dir) if opts.cache else None
    results = []
    for key, loaded in load_scans(task.input, traj_units=opts.traj_units, allow_external=opts.allow_external,
                                  **picked):
        if keys is not None and key not in keys:
            continue
        results.append((key, *prepare_and_reconstruct(
            loaded, prewhiten=opts.prewhiten, dcf=opts.dcf, coil_maps=opts.coil_maps, field_map=opts.field_map,
            iterations=opts.iterations, tol=opts.tol, lam=opts.lam, filter_sigma=opts.filter_sigma,
            device=opts.device, method=opts.method, psf_cache=cache, **opts.solver)))
    return results


def write_images(task: ScanTask, results: list[tuple], parts: int = 1) -> ScanOutcome:
    """Write the images ``results`` (in file order) to ``task.output`` and its completion record."""
    from ..result import write_result

    opts = task.options
    written = write_result(task.output, results, task.input, format=opts.format, complex_=opts.complex_,
                           magnitude=opts.magnitude)
    rs = [r for *_, r in results]
    outcome = ScanOutcome(str(task.input), str(task.output), "done", images=len(rs),
                          iterations=sum(r.iterations for r in rs),
                          final_residual=max(float(r.residuals[-1]) for r in rs),
                          engine=str(rs[-1].parameters.get("method")), device=rs[-1].device,
                          psf=",".join(sorted({str(r.parameters.get("psf")) for r in rs})), parts=parts)
    write_record(task.output, task.input, opts.settings(),
                 {k: v for k, v in dataclasses.asdict(outcome).items() if k not in ("input", "output", "status")},
                 files=written)
    return outcome
