"""CuPy's own kernels compiled ahead, on worker processes, the first time a GPU reconstruction runs.

A GPU reconstruction makes CuPy compile about 40 small kernels of its own (elementwise operations, reductions,
CUB passes) on first use, one after the other on the calling thread: 6.8 s of an 8.5 s first run on the H200,
against 2.1 s warm. NVRTC does not speed up on threads of one process (54 compiles on threads took longer than
one after another), but it does on processes. So the first :func:`ensure` of a process for a CuPy cache folder
and a device architecture, when that folder has no warm-up mark for this CuPy, NVRTC and record, starts worker
processes (:mod:`mri_recon.kernels.ahead`, which imports only CuPy) that hand the recorded compile requests
(``cupy_kernels.json``, :mod:`mri_recon.kernels.cupy_kernels`) to CuPy's own compile-with-cache function for
this device's architecture. CuPy computes its own key and writes its own cache entry, exactly what a first use
would write, so nothing precompiled elsewhere is ever loaded. :func:`ensure` waits for the workers, then CuPy
finds each kernel in its cache. Once every request is in the cache the mark is written, and later processes pay
one ``stat``.

Nothing is started when ``MRI_RECON_WARMUP=0``, when CuPy keeps its kernels in memory or in a backend of its
own, when the record is of another CuPy version, or on a machine with one CPU. A lock file in the cache folder
keeps two processes (batch workers on one node) from warming the same folder at once: the second waits for the
first and then finds the mark. A worker that fails or outlasts :data:`TIMEOUT_S` costs nothing but time: CuPy
compiles what is missing on first use, as without the warm-up.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import ahead, cupy_kernels

log = logging.getLogger(__name__)

ENV_SWITCH = "MRI_RECON_WARMUP"
TIMEOUT_S = 120.0
MAX_WORKERS = 16
_LOCK = threading.Lock()


def cache_dir(compiler) -> Path | None:
    """CuPy's kernel cache folder as its disk backend uses it, or None when CuPy does not keep kernels on disk
    (``CUPY_CACHE_IN_MEMORY``, a backend of its own) or compiles them with debug options."""
    from cupy.cuda._compiler_cache import DiskKernelCacheBackend

    if os.environ.get("CUPY_CACHE_IN_MEMORY", "").strip() not in ("", "0"):
        return None
    backend = getattr(compiler, "_kernel_cache_backend", None)
    if type(backend) is not DiskKernelCacheBackend:
        return None
    return Path(backend._cache_dir)


def mark_name(compiler, cupy_version: str, arch: str, record: Path) -> str:
    """The warm-up mark of this CuPy (version and header checksum), NVRTC, architecture and record file."""
    stat = record.stat()
    text = "\0".join([cupy_version, str(compiler._get_nvrtc_version()), arch, compiler._get_cupy_cache_key(),
                      str(stat.st_size), str(int(stat.st_mtime))])
    return f"mri-recon-warmup-{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def workers(count: int) -> int:
    """Worker processes for ``count`` requests: one per CPU, at most :data:`MAX_WORKERS`; none with one CPU
    (a single worker would only compile what the caller compiles, one after another)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return 0 if cpus < 2 else min(MAX_WORKERS, cpus, count)


RUN_SCRIPT = ("import runpy, sys; del sys.path[0]; sys.argv = sys.argv[1:]; "
              "runpy.run_path(sys.argv[0], run_name='__main__')")
"""How a worker runs :mod:`ahead`: as a script, without importing mri-recon, and without its own folder (or the
current one) on ``sys.path``."""


class Warmup:
    """Worker processes compiling the recorded requests for one architecture into one cache folder, holding
    the folder's lock (:class:`FolderLock`) until :meth:`finish`."""

    def __init__(self, arch: str, target: Path, mark: Path, count: int, lock):
        self.arch, self.target, self.mark, self.lock = arch, target, mark, lock
        self.jobs, self.started = workers(count), time.perf_counter()
        script, record = Path(ahead.__file__), str(cupy_kernels.RECORD_FILE)
        self.procs: list[subprocess.Popen] = []
        # dealt round-robin in the record's order (the order of first use), so the first needed come first
        try:
            for start in range(self.jobs):
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-c", RUN_SCRIPT, str(script), arch, str(target), record,
                     *map(str, range(start, count, self.jobs))],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        except BaseException:  # the lock is not left held by a warm-up that never runs (a later wait would hang)
            for proc in self.procs:
                proc.kill()
                proc.communicate()
            lock.close()
            raise

    def finish(self) -> bool:
        """Wait for the workers (killed past :data:`TIMEOUT_S`), write the mark when all succeeded, release the
        lock; True when every request is in the cache."""
        ok = True
        try:
            for proc in self.procs:
                try:
                    _, err = proc.communicate(timeout=max(0.1, self.started + TIMEOUT_S - time.perf_counter()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    _, err = proc.communicate()
                if proc.returncode != 0:
                    ok = False
                    log.debug("warm-up worker exited with %s: %s", proc.returncode,
                              err.decode(errors="replace")[-500:])
            log.info("CuPy's kernels compiled ahead for sm_%s in %.1f s on %d processes%s", self.arch,
                     time.perf_counter() - self.started, self.jobs, "" if ok else " (some left to first use)")
            if ok:
                self.mark.touch()
        finally:
            self.lock.close()
        return ok


class FolderLock:
    """An exclusive ``flock`` on the warm-up lock file of a folder (always granted where ``fcntl`` is missing)."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.handle = open(folder / ".mri-recon-warmup.lock", "a+b")  # noqa: SIM115 - held until close()

    def acquire(self, wait: bool) -> bool:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on Linux
            return True
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            return True
        except BlockingIOError:
            return False

    def close(self) -> None:
        self.handle.close()  # closing the file releases its lock


_RUNNING: dict[tuple[str, str], Warmup] = {}
_SETTLED: dict[tuple[str, str], bool] = {}
"""What :func:`ensure` found for each ``(cache folder, arch)`` of this process: True when the cache was warm."""


def where(cupy, device_index: int):
    """``(compiler, cache folder, arch, mark)`` for device ``device_index``, or None when no warm-up applies
    (switched off, no disk cache, debug compiles, a record of another CuPy version)."""
    if os.environ.get(ENV_SWITCH, "1").strip() == "0":
        return None
    from cupy.cuda import compiler

    target = cache_dir(compiler)
    if target is None or os.environ.get("CUPY_CUDA_COMPILE_WITH_DEBUG", "").strip() not in ("", "0"):
        return None
    with cupy.cuda.Device(device_index):
        arch = str(compiler._get_arch())
    return compiler, target, arch, target / mark_name(compiler, cupy.__version__, arch, cupy_kernels.RECORD_FILE)


def begin(cupy, device_index: int, wait: bool) -> tuple[tuple[str, str] | None, Warmup | None]:
    """Start the warm-up of this device's architecture unless its cache is marked warm, another call of this
    process settled or started it, or (``wait`` False) another process holds the folder's lock."""
    found = where(cupy, device_index)
    if found is None:
        return None, None
    compiler, target, arch, mark = found
    key = (str(target), arch)
    if key in _SETTLED or key in _RUNNING or mark.exists():  # a warm cache: one stat, the record is not read
        return key, _RUNNING.get(key)
    version, requests = cupy_kernels.recorded(cupy_kernels.RECORD_FILE)
    if version != cupy.__version__ or not requests:
        log.debug("no warm-up: the CuPy kernel record is of CuPy %s, this is %s", version or "nothing",
                  cupy.__version__)
        return None, None
    lock = FolderLock(target)
    if not lock.acquire(wait):  # another process is warming this folder: ensure() waits for it
        lock.close()
        return key, None
    if mark.exists() or workers(len(requests)) == 0:  # warmed while this one waited, or one CPU only
        lock.close()
        return key, None
    _RUNNING[key] = Warmup(arch, target, mark, len(requests), lock)
    return key, _RUNNING[key]


def start(cupy, device_index: int) -> None:
    """Start the warm-up for device ``device_index`` and return at once (the CLI calls it before it reads the
    scan, so the workers run while the file is read); :func:`ensure` later waits for it."""
    try:
        with _LOCK:
            begin(cupy, device_index, wait=False)
    except Exception as exc:  # noqa: BLE001 - a failed warm-up costs nothing: CuPy compiles on first use
        log.debug("CuPy's kernels not compiled ahead: %s", exc)


def ensure(cupy, device_index: int) -> bool:
    """Before the first GPU work of a process on device ``device_index``: the warm-up started by
    :func:`start`, or one started now, waited for (see the module's docstring). True when the cache holds
    every recorded kernel. Any error is logged at DEBUG; CuPy then compiles on first use."""
    try:
        with _LOCK:  # threads of this process wait for the one warming
            key, running = begin(cupy, device_index, wait=True)
            if key is None:
                return False
            if key in _SETTLED:
                return _SETTLED[key]
            # no worker of this process: the cache is warm, or another process warmed it (begin waited for its
            # lock), or it is left to first use (one CPU, a failed warm-up elsewhere while this one waited)
            ok = running.finish() if running is not None else where(cupy, device_index)[3].exists()
            _RUNNING.pop(key, None)
            _SETTLED[key] = ok
            return ok
    except Exception as exc:  # noqa: BLE001 - a failed warm-up costs nothing: CuPy compiles on first use
        log.debug("CuPy's kernels not compiled ahead: %s", exc)
        return False
