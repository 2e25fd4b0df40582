"""CuPy's own kernels compiled ahead, on worker processes, the first time a GPU reconstruction asks CuPy for one.

A default GPU reconstruction asks none (its kernels are mri-recon's, ``kernels/arith.cu`` among them), but other
options (ramp or Pipe-Menon weights, Walsh or ESPIRiT maps, the sparse solvers, time series) make CuPy compile
small kernels of its own (elementwise operations, reductions, CUB passes) on first use, one after the other on
the calling thread, a CUB pass the longest (docs/kernels.md). NVRTC does not speed up on threads of one process
(compiles on threads took longer than one after another), but it does on processes. So CuPy's first
compile request of a process (:func:`wait_before_compiling`) calls :func:`ensure`; the first for a CuPy cache folder
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

import functools
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


@functools.cache
def mark_name(compiler, cupy_version: str, arch: str, record: Path) -> str:
    """The warm-up mark of this CuPy (version, header checksum, include folders, PTX or CUBIN), NVRTC,
    architecture and record file: two installations sharing one cache folder (two virtual environments) each
    warm their own entries, whose keys hold their own include folders. Computed once per process (every
    reconstruction asks for it)."""
    from cupy._core.core import assemble_cupy_compiler_options

    stat = record.stat()
    text = "\0".join([cupy_version, str(compiler._get_nvrtc_version()), arch, compiler._get_cupy_cache_key(),
                      " ".join(assemble_cupy_compiler_options(())), str(bool(compiler._use_ptx)),
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


RUN_SCRIPT = ("import runpy, sys\nif sys.path and sys.path[0] == '': del sys.path[0]\n"
              "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
"""How a worker runs :mod:`ahead`: as a script, without importing mri-recon, and without the current folder on
``sys.path`` (``-c`` puts it first unless ``PYTHONSAFEPATH`` is set)."""


class Warmup:
    """Worker processes compiling the recorded requests for one architecture into one cache folder, and a
    thread that waits for them (killed past :data:`TIMEOUT_S`), writes the mark when all succeeded and releases
    the folder's lock (:class:`FolderLock`): the lock is never held past the workers, whether or not this
    process ever calls :meth:`finish`."""

    def __init__(self, arch: str, target: Path, mark: Path, count: int, lock):
        self.arch, self.target, self.mark, self.lock = arch, target, mark, lock
        self.jobs, self.started, self.ok = workers(count), time.perf_counter(), False
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
        self._reaper = threading.Thread(target=self._reap, name="mri-recon-warmup", daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
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
            self.ok = ok
        finally:
            self.lock.close()

    def finish(self) -> bool:
        """Wait for the workers; True when every request is in the cache."""
        self._reaper.join()
        return self.ok


class FolderLock:
    """An exclusive ``flock`` on the warm-up lock file of a folder (always granted where ``fcntl`` is missing)."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.handle = open(folder / ".mri-recon-warmup.lock", "a+b")  # noqa: SIM115 - held until close()

    def acquire(self, wait: bool) -> bool:
        """The lock: at once, or (``wait``) within :data:`TIMEOUT_S`, the longest another process's warm-up
        holds it; False when not granted. A file system without locks (``ENOLCK``) grants it."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on Linux
            return True
        deadline = time.monotonic() + (TIMEOUT_S if wait else 0.0)
        while True:
            try:
                fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)
            except OSError:  # no locks here: two processes may warm one folder, each entry is still whole
                return True

    def close(self) -> None:
        self.handle.close()  # closing the file releases its lock


_RUNNING: dict[tuple[str, str], Warmup] = {}
_SETTLED: dict[tuple[str, str], bool] = {}
"""What :func:`ensure` found for each ``(cache folder, arch)`` of this process: True when the cache was warm."""
_KEY_LOCKS: dict[tuple[str, str], threading.Lock] = {}


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


def _key_lock(key: tuple[str, str]) -> threading.Lock:
    """The lock of one ``(cache folder, arch)``: threads of this process warming it take turns, others not."""
    with _LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def begin(cupy, found: tuple, key: tuple[str, str], wait: bool) -> Warmup | None:
    """The warm-up of ``key`` (``found`` is :func:`where`'s): the one running in this process, or one started
    now unless its cache is marked warm, the record is of another CuPy, one CPU is all there is, or another
    process holds the folder's lock (``wait``: until it is released, at most :data:`TIMEOUT_S`)."""
    _, target, arch, mark = found
    if key in _RUNNING:
        return _RUNNING[key]
    if mark.exists():  # a warm cache: one stat, the record is not read
        return None
    version, requests = cupy_kernels.recorded(cupy_kernels.RECORD_FILE)
    if version != cupy.__version__ or not requests:
        log.debug("no warm-up: the CuPy kernel record is of CuPy %s, this is %s", version or "nothing",
                  cupy.__version__)
        return None
    if workers(len(requests)) == 0:
        return None
    lock = FolderLock(target)
    if not lock.acquire(wait) or mark.exists():  # another process warms (or warmed) this folder
        lock.close()
        return None
    _RUNNING[key] = Warmup(arch, target, mark, len(requests), lock)
    return _RUNNING[key]


_HOOKED: list[bool] = []


def wait_before_compiling(cupy) -> None:
    """From now on in this process, CuPy waits for the warm-up of the current device (:func:`ensure`) before it
    compiles or loads a kernel of its own; mri-recon's modules (their source names ``mri_recon_``) do not
    wait. A run that asks nothing of CuPy's compiler (the 2-D reconstruction: every kernel of its own is in
    ``kernels/*.cu``) never waits for the workers, which then warm the cache for later runs."""
    from cupy.cuda import compiler

    with _LOCK:
        if _HOOKED:
            return
        real = compiler._compile_module_with_cache

        def compile_after_warm_up(source, options=(), **kwargs):
            if "mri_recon_" not in source:
                ensure(cupy, int(cupy.cuda.Device().id))
            return real(source, options, **kwargs)

        compiler._compile_module_with_cache = compile_after_warm_up
        _HOOKED.append(True)


def ensure(cupy, device_index: int) -> bool:
    """Before CuPy's first compile of a process on device ``device_index`` (:func:`wait_before_compiling`): the
    warm-up running in this process, or one started now, waited for (see the module's docstring). True when the
    cache holds every recorded kernel. Any error is logged at DEBUG and settles the device as not warm; CuPy then
    compiles on first use."""
    key = None
    try:
        found = where(cupy, device_index)
        if found is None:
            return False
        key = (str(found[1]), found[2])
        with _key_lock(key):  # threads of this process wait for the one warming
            if key in _SETTLED:
                return _SETTLED[key]
            running = begin(cupy, found, key, wait=True)
            # no worker of this process: the cache is warm, or another process warmed it (begin waited for its
            # lock), or it is left to first use (one CPU, a failed warm-up elsewhere while this one waited)
            ok = running.finish() if running is not None else found[3].exists()
            _RUNNING.pop(key, None)
            _SETTLED[key] = ok
            return ok
    except Exception as exc:  # noqa: BLE001 - a failed warm-up costs nothing: CuPy compiles on first use
        log.debug("CuPy's kernels not compiled ahead: %s", exc)
        if key is not None:
            _SETTLED[key] = False
        return False
