"""Where the scans of a batch run: a local Dask cluster (processes on the CPU, one worker per GPU) or an
existing cluster given by its scheduler's address.

On the CPU: :class:`distributed.LocalCluster` with ``workers`` worker processes (one scan each at a time,
``cores // workers`` threads each). On GPUs: one worker per visible GPU (or the first ``workers`` of them),
each pinned by ``CUDA_VISIBLE_DEVICES`` so that it sees its GPU as device 0: through
:class:`dask_cuda.LocalCUDACluster` when ``dask-cuda`` is installed, else through a
:class:`distributed.SpecCluster` of nannies, each started with its own ``CUDA_VISIBLE_DEVICES`` (the same
pinning, without dask-cuda's extras). The log says which was used.

Every local cluster listens on ``127.0.0.1`` only and admits only connections holding its own temporary TLS
certificate (:mod:`.security`); its dashboard is served (on ``127.0.0.1``) only when asked for and ``bokeh``
is installed. One local cluster is kept per process and reused by later batches that ask for the same
workers (:func:`shared_local`), and closed when the process exits.
Dask is imported here, on use, never by the single-scan path.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from ..arrays.backend import THREADS_ENV, cpu_threads, gpu_available, gpu_count
from ..errors import DeviceError, InvalidDataError
from .security import HEALTH_ONLY, LOOPBACK, check_scheduler, dashboard_served, local_security, scheduler_security

log = logging.getLogger(__name__)

WORKER_SATURATION = 1.0
"""Dask's ``distributed.scheduler.worker-saturation`` in a local cluster: scans sent to a worker per thread
before it asks for more (see :func:`local_config`)."""
GPU_AFFINITY = True
"""Whether the pinned nannies' GPU workers run on the CPUs local to their GPU, as dask-cuda's do."""
CONNECT_TIMEOUT = "20s"
"""How long :func:`connect` tries to reach a scheduler."""
NANNY_ENVIRON = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_")
"""Variables Dask's nannies set in their workers by default; those of a local cluster of ours do not."""


@dataclass
class Cluster:
    """A Dask client and what it runs on."""

    client: Any
    """The :class:`distributed.Client`."""
    kind: str
    """In words: ``"LocalCluster, 2 worker processes (CPU)"``, ``"LocalCUDACluster, GPUs 0,1"``, ..."""
    dashboard: str | None
    """The dashboard's address (None when the scheduler serves none)."""
    gpus: list[str] = field(default_factory=list)
    """The GPUs given one worker each (their ``CUDA_VISIBLE_DEVICES`` values); empty on the CPU."""
    owned: Any = None
    """The local cluster started here (closed by :meth:`close`); None for a given client or scheduler."""
    connected: bool = False
    """Whether the client was made here for a scheduler (closed by :meth:`close`, the scheduler left running)."""
    kept: bool = False
    """Whether this is the process's kept local cluster (:func:`shared_local`), closed at exit, not after a batch."""

    def close(self) -> None:
        if self.owned is not None or self.connected:
            with contextlib.suppress(Exception):
                self.client.close()
        if self.owned is not None:
            with contextlib.suppress(Exception):
                self.owned.close()


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` values (its entries when it is set)."""
    count = gpu_count()
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return listed[:count]
    return [str(i) for i in range(count)]


def plan_gpu_workers(workers: int | None, visible: list[str]) -> list[str]:
    """The GPUs of a local GPU cluster: every visible one (``workers`` None), or the first ``workers``.

    Raises
    ------
    DeviceError
        No GPU is visible, or more workers are asked for than GPUs are visible.
    """
    if not visible:
        raise DeviceError("a GPU cluster needs a GPU, and none is visible (CuPy, driver, CUDA_VISIBLE_DEVICES)")
    if workers is not None and workers > len(visible):
        raise DeviceError(f"--workers {workers} asks for one GPU per worker, but {len(visible)} GPU(s) are "
                          f"visible ({','.join(visible)}); give --workers {len(visible)} or fewer, or --device cpu")
    return visible[: workers or len(visible)]


def wants_gpu(device: str) -> bool:
    """Whether a local cluster for ``device`` (``"auto" | "cpu" | "gpu"``) is one of GPU workers.

    Raises
    ------
    InvalidDataError
        ``device`` picks one GPU (``"gpu:N"``): in a cluster each worker has its own.
    """
    if device.startswith("gpu:"):
        raise InvalidDataError(f"--device {device} picks one GPU; in a cluster every worker uses its own GPU: "
                               f"give --device gpu (or auto), and CUDA_VISIBLE_DEVICES to choose the GPUs")
    if device not in ("auto", "cpu", "gpu"):
        raise InvalidDataError(f"device must be 'auto', 'cpu' or 'gpu' for a batch, found {device!r}")
    return device == "gpu" or (device == "auto" and gpu_available())


def _dashboard(client: Any) -> str | None:
    try:
        return client.dashboard_link
    except Exception:  # noqa: BLE001 - a scheduler without a dashboard
        return None


def _distributed():
    try:
        import distributed  # noqa: PLC0415 - the batch extra, imported on use
    except ImportError:
        raise InvalidDataError("several workers or a scheduler need Dask: pip install 'mri-recon[batch]'") from None
    return distributed


def connect(scheduler: str, tls: dict[str, str | None] | None = None) -> Cluster:
    """A client of the Dask scheduler at ``scheduler`` (``tcp://host:8786`` or ``tls://host:8786``), with
    ``tls`` = ``{"ca_file", "cert", "key"}`` files for a ``tls://`` one (else Dask's configuration's).

    Raises
    ------
    InvalidDataError
        A malformed address or incomplete credentials (:mod:`.security`).
    DeviceError
        The scheduler cannot be reached, or refuses the credentials.
    """
    distributed = _distributed()
    scheme, _ = check_scheduler(scheduler)
    security = scheduler_security(scheme, **(tls or {}))
    try:
        client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT, security=security)
    except Exception as exc:  # noqa: BLE001 - refused, timed out, a TLS handshake failed: one line
        text = str(exc).strip().splitlines()
        raise DeviceError(f"cannot reach the Dask scheduler at {scheduler}: "
                          f"{text[0] if text else type(exc).__name__}") from None
    count = len(client.scheduler_info().get("workers", {}))
    log.info("connected to the Dask scheduler at %s (%d worker(s))", scheduler, count)
    return Cluster(client, f"scheduler {scheduler}, {count} worker(s)", _remote_dashboard(client), connected=True)


def _remote_dashboard(client: Any) -> str | None:
    """The dashboard's address of a scheduler that serves its pages (``bokeh`` installed there), else None."""
    try:
        served = client.run_on_scheduler(dashboard_served)
    except Exception:  # noqa: BLE001 - a scheduler that cannot be asked: no address claimed
        return None
    return _dashboard(client) if served else None


def start_local(workers: int | None, device: str, dashboard: bool = False) -> Cluster:
    """A new local cluster for ``device``: ``workers`` CPU processes (default 1), or one worker per GPU; on
    ``127.0.0.1``, TLS with a temporary certificate, Dask's dashboard with ``dashboard`` (needs ``bokeh``).

    Raises
    ------
    DeviceError
        ``dashboard`` asked for without ``bokeh``; no certificate can be made (:func:`.local_security`); no
        GPU, or too few, for GPU workers.
    """
    distributed = _distributed()
    if dashboard and not dashboard_served():
        raise DeviceError("--dashboard: Dask's dashboard pages need the 'bokeh' package, which is not installed: "
                          "pip install bokeh (or leave out --dashboard)")
    security = local_security()
    gpus = plan_gpu_workers(workers, visible_gpus()) if wants_gpu(device) else None
    with local_config(worker_threads(len(gpus) if gpus is not None else (workers or 1), gpus is not None),
                      dashboard):
        return _start_local(distributed, workers or 1, gpus, security, dashboard)


_SHARED: dict[str, Any] = {}
"""The local cluster of this process (``"key"``, ``"cluster"``), reused by :func:`shared_local`."""


def _shared_key(workers: int | None, device: str, dashboard: bool) -> tuple:
    return workers, wants_gpu(device), dashboard


def kept_local(workers: int | None, device: str, dashboard: bool = False) -> Cluster | None:
    """This process's running local cluster if it has these settings (see :func:`shared_local`), else None."""
    kept = _SHARED.get("cluster")
    if kept is not None and _SHARED.get("key") == _shared_key(workers, device, dashboard) \
            and kept.client.status == "running":
        return kept
    return None


def shared_local(workers: int | None, device: str, dashboard: bool = False) -> Cluster:
    """This process's local cluster for these settings, started on first use.

    A later call with the same ``workers``, device kind and ``dashboard`` gets the same cluster (its workers
    warm, no start-up); other settings close it and start another. It is closed when the process exits
    (:func:`close_shared`).
    """
    kept = kept_local(workers, device, dashboard)
    if kept is not None:
        log.info("reusing this process's %s", kept.kind)
        return kept
    close_shared()
    cluster = start_local(workers, device, dashboard)
    cluster.kept = True
    _SHARED.update(key=_shared_key(workers, device, dashboard), cluster=cluster)
    atexit.unregister(close_shared)  # registered after Dask's own exit handlers, so that it runs before them
    atexit.register(close_shared)
    return cluster


def close_shared() -> None:
    """Close this process's local cluster (at exit, or before one of other settings starts)."""
    kept = _SHARED.pop("cluster", None)
    _SHARED.pop("key", None)
    if kept is not None:
        kept.close()


def worker_threads(workers: int, gpu: bool) -> dict[str, str]:
    """The thread settings of a local cluster's workers (environment variables, set before they start).

    CPU workers share the cores: each runs on ``cores // workers`` threads (FINUFFT's transforms and the FFTs
    through ``MRI_RECON_THREADS``, :func:`~mri_recon.arrays.backend.cpu_threads`; BLAS and OpenMP through their
    variables), so that ``workers`` processes do not oversubscribe the cores. Their images are bit-identical
    to a single run's: the CPU path gives the same bits for any thread count.

    GPU workers run their host work (loading, prewhitening, writing) on one thread each: two processes with
    their default threads each ran far slower than one alone (the idle threads of each process's pools spin on
    the cores the other needs), with one thread each they nearly double the scans per second of one, and one
    process alone is faster with one thread too (scripts/batch_probe.py; docs/batch.md).
    """
    share = "1" if gpu else str(max(1, cpu_threads() // max(1, workers)))
    return {name: share for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", THREADS_ENV)}


@contextlib.contextmanager
def local_config(threads: dict[str, str] | None = None, dashboard: bool = True):
    """Dask's configuration for a local cluster of ours (the scheduler and nannies read it when they start).

    One scan per worker at a time (``worker-saturation`` 1): no scan waits behind another on a busy worker
    while one is idle, and a worker's death reschedules only the scan it was running (when the scans form
    one group larger than twice the workers' threads; smaller batches go to the workers at once).

    The workers run in this process's environment, with their thread counts ``threads``
    (:func:`worker_threads`) set before they start (OpenBLAS reads its thread count when NumPy is imported),
    not Dask's nanny defaults (:data:`NANNY_ENVIRON`): ``OMP_NUM_THREADS=1`` and its kin would leave cores
    idle when there are fewer workers than cores, and ``MALLOC_TRIM_THRESHOLD_`` turns off glibc's dynamic mmap
    threshold, so that every large temporary array is mapped and zeroed afresh (CG iterations ran far slower in
    such a worker: docs/batch.md). A nanny takes a variable set in this process over its configuration, so
    ``threads`` are set here too while the cluster starts; it then sets them (and ``PYTHONHASHSEED``) in its
    own process, this one, before spawning its worker. The caller's values are restored on exit. (A nanny
    that later restarts a dead worker sets them in this process again.)

    Without ``dashboard`` the scheduler's and workers' HTTP servers (on loopback) serve ``/health`` only
    (:data:`~.security.HEALTH_ONLY`).
    """
    import dask  # noqa: PLC0415 - with distributed

    environ = {k: v for k, v in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items()
               if k not in NANNY_ENVIRON}
    environ.update(threads or {})
    saved = {name: os.environ.get(name) for name in (*environ, "PYTHONHASHSEED")}
    try:
        os.environ.update(threads or {})
        http = {} if dashboard else {"distributed.scheduler.http.routes": list(HEALTH_ONLY),
                                     "distributed.worker.http.routes": list(HEALTH_ONLY)}
        with dask.config.set({"distributed.scheduler.worker-saturation": WORKER_SATURATION,
                              "distributed.nanny.pre-spawn-environ": environ, **http}):
            yield
    finally:  # a nanny sets them in its own process (this one) before spawning its worker: undone here
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _served(dashboard: bool) -> dict[str, Any]:
    """The scheduler's HTTP options: the dashboard on loopback, or no dashboard (an HTTP server of
    ``/health`` alone, on a free loopback port)."""
    return {"dashboard": dashboard, "dashboard_address": f"{LOOPBACK}:{8787 if dashboard else 0}"}


def _start_local(distributed: Any, count: int, gpus: list[str] | None, security: Any,
                 dashboard: bool = False) -> Cluster:
    """``count`` CPU worker processes, or with ``gpus`` (:func:`plan_gpu_workers`) one worker per GPU, on
    loopback with ``security`` (TLS)."""
    quiet = {"silence_logs": logging.ERROR, "memory_limit": 0, "threads_per_worker": 1}
    guarded = {"host": LOOPBACK, "security": security, "protocol": "tls://", "scheduler_kwargs": _served(dashboard),
               "dashboard_address": _served(dashboard)["dashboard_address"]}
    if gpus is None:
        cluster = distributed.LocalCluster(n_workers=count, processes=True, **quiet, **guarded)
        kind = f"LocalCluster, {count} worker process(es) on the CPU"
        gpus = []
    else:
        cluster, kind = None, f"LocalCUDACluster, one worker per GPU ({','.join(gpus)})"
        try:
            from dask_cuda import LocalCUDACluster  # noqa: PLC0415 - the gpu extra, imported on use

            cluster = LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(gpus), n_workers=len(gpus), **quiet, **guarded)
        except Exception as exc:  # noqa: BLE001 - not installed, or a dependency missing at start: pin ourselves
            absent = isinstance(exc, ImportError) and exc.name == "dask_cuda"  # not installed: expected
            log.log(logging.INFO if absent else logging.WARNING, "dask-cuda is not usable (%s: %s): one nanny per "
                    "GPU pinned by CUDA_VISIBLE_DEVICES instead", type(exc).__name__, str(exc).split("\n")[0])
            cluster = _pinned_cluster(distributed, gpus, security, dashboard)
            kind = f"SpecCluster, one worker per GPU ({','.join(gpus)})"
    client = distributed.Client(cluster, security=security)
    link = _dashboard(client) if dashboard else None
    log.info("started %s on %s (TLS); dashboard %s", kind, LOOPBACK, link or "not served")
    return Cluster(client, kind, link, gpus, owned=cluster)


def _pinned_cluster(distributed: Any, gpus: list[str], security: Any, dashboard: bool = False) -> Any:
    """One nanny per GPU, each worker started with ``CUDA_VISIBLE_DEVICES`` = its GPU (device 0 inside) and,
    with :data:`GPU_AFFINITY`, moved to the CPUs next to it (:mod:`.affinity`); on loopback with
    ``security`` (TLS), as :class:`distributed.LocalCluster` would start them."""
    guarded = {"host": LOOPBACK, "security": security, "protocol": "tls://"}
    scheduler = {"cls": distributed.Scheduler, "options": {**guarded, **_served(dashboard)}}
    import dask  # noqa: PLC0415 - with distributed

    # the configured worker preloads (Nanny reads them only when given None) and ours after them
    preload = [*dask.config.get("distributed.worker.preload", []), "mri_recon.batch.affinity"] if GPU_AFFINITY \
        else None
    workers = {f"gpu-{gpu}": {"cls": distributed.Nanny, "options": {
        "nthreads": 1, "memory_limit": 0, "env": {"CUDA_VISIBLE_DEVICES": gpu}, "silence_logs": logging.ERROR,
        "preload": preload, **guarded}}
        for gpu in gpus}
    return distributed.SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.ERROR,
                                   security=security)
