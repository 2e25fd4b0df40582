"""``reconstruct_many``: many scans, one output each, on a Dask cluster or in this process.

Nothing is lost: every output is written atomically and then recorded as complete (:mod:`.record`); a scan
that fails is reported with a one-line reason while the others go on; a task whose worker dies is run again
on another worker by the Dask scheduler (up to ``distributed.scheduler.allowed-failures`` deaths, default 3);
a rerun skips complete outputs unless ``overwrite``.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidDataError
from ..io.files import FileSet, check_output
from ..io.writers import OUTPUTS
from ..settings import ReconSettings, refuse_series_options
from .inputs import expand_inputs, output_paths
from .predict import decide
from .record import complete
from .summary import BatchReport
from .task import ScanOutcome, ScanTask, run_scan

log = logging.getLogger(__name__)

Progress = Callable[[str, Any], None]
"""``progress(event, value)``: ``("cluster", Cluster)`` when the workers are ready, ``("planned", (to run,
skipped))`` before the first scan, ``("scan", ScanOutcome)`` as each scan ends."""


def plan_tasks(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike | None, settings: ReconSettings, *,
               overwrite: bool = False) -> tuple[list[ScanTask], list[ScanOutcome], list[str]]:
    """The tasks to run, the scans skipped as complete, and every input (absolute, in order); the outputs are
    checked first.

    Raises
    ------
    ScanFileError, OutputError
        An input that does not exist, an output that cannot be written or that names an input.
    """
    inputs = [p.absolute() for p in expand_inputs(paths)]
    out_dir = None if out_dir is None else Path(out_dir).absolute()
    outputs = output_paths(inputs, out_dir, settings.format)
    if out_dir is not None and outputs[0].parent == out_dir and not out_dir.exists():  # a folder of outputs
        out_dir.mkdir(parents=True, exist_ok=True)
    tasks, skipped = [], []
    protected = FileSet(inputs)  # one look at each input, not one per input and output
    check = OUTPUTS[settings.format].check if settings.format in OUTPUTS else check_output  # DICOM: a folder
    for scan, output in zip(inputs, outputs):
        check(output, protect=protected)
        why = None if overwrite else complete(output, scan, settings.record())
        if why is None and not overwrite:
            skipped.append(ScanOutcome(str(scan), str(output), "skipped", "complete from an earlier run"))
        else:
            tasks.append(ScanTask(scan, output, settings))
    return tasks, skipped, [str(p) for p in inputs]


def reconstruct_many(paths: Sequence[str | os.PathLike] | str | os.PathLike, out_dir: str | os.PathLike | None,
                     client: Any = None, *, workers: int | None = None, scheduler: str | None = None,
                     tls: Mapping[str, str | None] | None = None, dashboard: bool = False, overwrite: bool = False,
                     progress: Progress | None = None, **options: Any) -> BatchReport:
    """Reconstruct many scans, one output per scan file, and report every scan's outcome.

    Parameters
    ----------
    paths
        Scan files, folders (their ``*.h5``, ``*.hdf5``, ``*.mrd`` files) or glob patterns.
    out_dir
        Folder of the outputs (created when missing), each named after its input (``a.h5`` -> ``a.recon.h5``);
        None: beside each input. For a single scan, a name with an output file's ending (``one.h5``,
        ``one.nii.gz``) is the output file itself; with several scans such a name is refused.
    client
        A :class:`distributed.Client` to run on. None: a local cluster when ``workers`` is given (``workers``
        CPU processes, or one worker per GPU for each of the first ``workers`` GPUs) and the predicted work
        pays for its start-up (:mod:`.predict`; else this process), a client of ``scheduler`` when that is
        given, else every scan in this process, one after the other (Dask is then not imported). The local
        cluster listens on 127.0.0.1 with TLS (:mod:`.security`) and is kept for later calls with the same
        ``workers`` and ``dashboard`` in this process.
    workers, scheduler
        See ``client``; ``workers`` must be >= 1; ``scheduler`` is ``tcp://HOST:PORT`` or ``tls://HOST:PORT``.
    tls
        For a ``tls://`` scheduler: ``{"ca_file": ..., "cert": ..., "key": ...}`` (files); None: Dask's
        configuration (``distributed.comm.tls.*``).
    dashboard
        Serve the local cluster's Dask dashboard on 127.0.0.1 (needs ``bokeh``; the cluster is then started
        whatever the predicted work).
    overwrite
        Reconstruct also the scans whose output is complete (by default they are skipped).
    progress
        Optional callback, see :data:`Progress`.
    options
        The fields of :class:`~mri_recon.settings.ReconSettings` (``iterations``, ``lam``, ``regularizer``,
        ``method``, ``device``, ``format``, ``choice``, ...); an unknown one is refused, naming the valid ones.

    Returns
    -------
    BatchReport
        One :class:`ScanOutcome` per scan in input order (done, skipped or failed, with the reason), the wall
        time and where it ran. Failures are reported there, not raised.
    """
    opts = ReconSettings.from_keywords(options, "reconstruct_many")
    refuse_series_options(opts, "a batch")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise InvalidDataError(f"workers must be a whole number >= 1, found {workers!r}")
    if sum(x is not None for x in (client, workers, scheduler)) > 1:
        raise InvalidDataError("give one of client, workers (a local cluster) and scheduler")
    if dashboard and workers is None:
        raise InvalidDataError("dashboard serves a local cluster's dashboard: give workers too")
    started = time.perf_counter()
    tasks, skipped, order = plan_tasks(paths, out_dir, opts, overwrite=overwrite)
    notify = progress or (lambda event, value: None)
    cluster, where = _cluster(tasks, opts, client, workers, scheduler, tls, dashboard)
    if cluster is not None:
        notify("cluster", cluster)
    notify("planned", (len(tasks), len(skipped)))
    for outcome in skipped:
        notify("scan", outcome)
    try:
        done = _run_dask(cluster.client, tasks, notify) if cluster is not None else _run_here(tasks, notify)
    finally:
        if cluster is not None and not cluster.kept:
            cluster.close()
    rank = {name: i for i, name in enumerate(order)}
    outcomes = sorted(skipped + done, key=lambda o: rank[o.input])
    return BatchReport(outcomes, time.perf_counter() - started, where, cluster.dashboard if cluster else None)


def _cluster(tasks: list[ScanTask], opts: ReconSettings, client: Any, workers: int | None, scheduler: str | None,
             tls: Mapping[str, str | None] | None, dashboard: bool) -> tuple[Any, str]:
    """The cluster to run on (None: this process) and where the scans run, in words."""
    if client is None and workers is None and scheduler is None:
        return None, "this process"
    from .cluster import Cluster, connect, kept_local, shared_local, wants_gpu  # noqa: PLC0415 - imports Dask

    gpu = wants_gpu(opts.device)  # a device a cluster cannot serve: refused before any worker starts
    if client is not None:
        cluster = Cluster(client, "the given client", getattr(client, "dashboard_link", None))
    elif scheduler is not None:
        cluster = connect(scheduler, dict(tls) if tls else None)
    else:
        if not dashboard and kept_local(workers, opts.device) is None:
            decision = decide(tasks, workers, gpu)
            log.info("local cluster of %d worker(s) %s: %s", workers, "started" if decision.start else "not started",
                     decision.reason)
            if not decision.start:
                return None, f"this process ({decision.reason})"
        cluster = shared_local(workers, opts.device, dashboard)
    return cluster, cluster.kind


def _run_here(tasks: list[ScanTask], notify: Progress) -> list[ScanOutcome]:
    out = []
    for task in tasks:
        outcome = run_scan(task)
        notify("scan", outcome)
        out.append(outcome)
    return out


def _run_dask(client: Any, tasks: list[ScanTask], notify: Progress) -> list[ScanOutcome]:
    from distributed import as_completed  # noqa: PLC0415 - Dask only here

    from .split import plan_parts, run_part, write_parts

    run = uuid.uuid4().hex[:12]  # keys unique to this call: the scheduler may still hold an earlier call's
    threads = sum(client.nthreads().values()) if hasattr(client, "nthreads") else 1
    parts = plan_parts(tasks, threads)
    futures, keys = {}, {}
    for i, task in enumerate(tasks):
        name = f"mri-recon-scan-{i}-{task.input.name}-{run}"
        if i in parts:  # an MRD file's images over several workers, then one task writes the output
            pieces = [client.submit(run_part, task, part, key=f"mri-recon-part-{i}.{j}-{run}", pure=False)
                      for j, part in enumerate(parts[i])]
            future = client.submit(write_parts, task, *pieces, key=name, pure=False)
            keys[name] = [name] + [p.key for p in pieces]
        else:
            future = client.submit(run_scan, task, key=name, pure=False)
            keys[name] = [name]
        futures[future] = task
    results: dict[str, ScanOutcome] = {}
    for future in as_completed(list(futures)):
        task = futures[future]
        try:
            outcome = future.result()
        except Exception as exc:  # noqa: BLE001 - KilledWorker, a lost scheduler: reported per scan
            outcome = ScanOutcome(str(task.input), str(task.output), "failed", _lost(exc))
        results[future.key] = outcome
        notify("scan", outcome)
    deaths = _worker_deaths(client, [k for ks in keys.values() for k in ks])
    for key, outcome in results.items():
        count = sum(deaths.get(k, 0) for k in keys[key])
        if count and outcome.status == "done":
            results[key] = outcome.with_note(f"rescheduled: a worker holding it died ({count}x)")
    return [results[f.key] for f in futures]


def _lost(exc: BaseException) -> str:
    name = type(exc).__name__
    if name == "KilledWorker":
        return ("its worker died each time it ran it (distributed.scheduler.allowed-failures reached); the "
                "output was not written")
    text = str(exc).strip().splitlines()
    return f"{name}: {text[0] if text else ''}".rstrip(": ")


def _worker_deaths(client: Any, keys: list[str]) -> dict[str, int]:
    """How many workers died while holding each task, running it or holding it next in line (the scheduler's
    count of "suspicious" deaths; Dask runs such a task again on another worker)."""

    def probe(dask_scheduler, keys):
        return {k: int(dask_scheduler.tasks[k].suspicious) for k in keys if k in dask_scheduler.tasks}

    try:
        return client.run_on_scheduler(probe, keys=keys)
    except Exception:  # noqa: BLE001 - a scheduler that cannot be asked: no notes
        return {}
