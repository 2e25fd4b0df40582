"""The warm-up of CuPy's own kernels without a GPU: the worker (kernels.ahead) compiles recorded requests for an
explicit architecture into CuPy's cache, under the names CuPy looks up; kernels.warmup starts, waits for and
marks it (workers, mark, lock, switch), here with its device query replaced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from mri_recon.kernels import cupy_kernels, warmup

ARCH = "90"
ROOT = Path(__file__).resolve().parents[1]
REAL_WHERE = warmup.where


@pytest.fixture(scope="module")
def record():
    """``(cupy version, requests)`` of the record, when CuPy and NVRTC are here to compile them."""
    pytest.importorskip("cupy")
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001 - any failure to load NVRTC means: nothing to compile with
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    version, requests = cupy_kernels.recorded()
    if len(requests) < 3:
        pytest.skip("no CuPy kernel record")
    return version, requests


def _ahead(cache: Path, record_file: Path, *indices: int) -> subprocess.CompletedProcess:
    """``ahead.main([ARCH, cache, record, indices...])`` in a fresh process (as the warm-up runs it)."""
    code = "import sys\nfrom mri_recon.kernels import ahead\nsys.exit(ahead.main(sys.argv[1:]))\n"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", code, ARCH, str(cache), str(record_file), *map(str, indices)],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def compiled(record, tmp_path_factory):
    """A cache folder holding requests 0 and 1 of the record, compiled for sm_90 by ``ahead``."""
    cache = tmp_path_factory.mktemp("ahead") / "cache"
    done = _ahead(cache, cupy_kernels.RECORD_FILE, 0, 1)
    assert done.returncode == 0, done.stderr
    return cache


def _entries(cache: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in cache.glob("*.cubin")}


def test_ahead_writes_one_entry_per_request_and_finds_them_again(compiled):
    first = _entries(compiled)
    assert len(first) == 2
    again = _ahead(compiled, cupy_kernels.RECORD_FILE, 0, 1)  # each found by CuPy's load: nothing compiled
    assert again.returncode == 0, again.stderr
    assert _entries(compiled) == first and not list(compiled.glob("*.cu"))


def test_ahead_reports_a_request_that_does_not_compile(record, tmp_path):
    broken = tmp_path / "record.json"
    request = dict(record[1][0], source=record[1][0]["source"] + "\nthis is not C++;\n")
    broken.write_text(json.dumps(cupy_kernels.pack(record[0], [request])))
    done = _ahead(tmp_path / "cache", broken, 0)
    assert done.returncode == 1 and "did not compile ahead" in done.stderr
    assert not list((tmp_path / "cache").glob("*.cubin"))


LOOKUP = """
import sys
from mri_recon.kernels.ahead import read_record
from cupy._core.core import assemble_cupy_compiler_options as assemble
from cupy.cuda import compiler
from cupy.cuda._compiler_cache import DiskKernelCacheBackend

class Found(Exception):
    pass

class Lookup(DiskKernelCacheBackend):  # CuPy's own disk backend on CUPY_CACHE_DIR, stopped at a hit
    def load(self, name):
        if super().load(name) is not None:
            raise Found(name)
        return None

    def save(self, name, cubin, source):
        raise SystemExit(f"CuPy compiled {name}: not found in the cache")

arch, record, index = sys.argv[1], sys.argv[2], int(sys.argv[3])
request = read_record(record)[1][index]
compiler._set_kernel_cache_backend(Lookup())
compiler._get_arch_for_options_for_nvrtc = lambda arch=arch: (
    (f"-arch=sm_{arch}", "cubin") if not compiler._use_ptx else (f"-arch=compute_{arch}", "ptx"))
names = tuple(request["name_expressions"]) if request.get("name_expressions") else None
try:
    compiler._compile_with_cache_cuda(request["source"], tuple(assemble(tuple(request["options"]))), arch,
                                      extra_source=request.get("extra_source"), backend=request["backend"],
                                      enable_cooperative_groups=bool(request.get("enable_cooperative_groups")),
                                      name_expressions=names, jitify=bool(request.get("jitify")))
except Found as found:
    print(found.args[0])
"""
"""CuPy's compile-with-cache call for request ``INDEX`` in a process of its own, with CuPy's disk backend on
``CUPY_CACHE_DIR``: prints the name it found, exits non-zero when it would compile."""


def test_entries_are_the_ones_cupy_looks_up(compiled):
    for index in (0, 1):
        done = subprocess.run([sys.executable, "-c", LOOKUP, ARCH, str(cupy_kernels.RECORD_FILE), str(index)],
                              env=dict(os.environ, CUPY_CACHE_DIR=str(compiled)), capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() in _entries(compiled), done.stdout


# --- kernels.warmup, with its device query (where) replaced -------------------------------------------------


@pytest.fixture
def folder(record, tmp_path, monkeypatch):
    """A cache folder of an "sm_90 device" for :mod:`warmup`, a record of request 2 alone, four CPUs, nothing
    settled in this process; returns the folder, the mark path and the stand-in CuPy."""
    target, mark = tmp_path / "cache", tmp_path / "cache" / "mri-recon-warmup-test"
    small = tmp_path / "record.json"
    small.write_text(json.dumps(cupy_kernels.pack(record[0], [record[1][2]])))
    monkeypatch.setattr(cupy_kernels, "RECORD_FILE", small)
    monkeypatch.setattr(warmup, "where", lambda cupy, index: (None, target, ARCH, mark))
    monkeypatch.setattr(warmup, "_SETTLED", {})
    monkeypatch.setattr(warmup, "_RUNNING", {})
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.delenv(warmup.ENV_SWITCH, raising=False)
    return target, mark, types.SimpleNamespace(__version__=record[0])


@pytest.fixture
def started(monkeypatch) -> list[list[str]]:
    """The command lines of the worker processes started (they still run)."""
    commands: list[list[str]] = []
    real = subprocess.Popen

    def popen(args, *rest, **kwargs):
        commands.append(list(args))
        return real(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return commands


def _worker(monkeypatch, tmp_path, body: str) -> None:
    """Workers that run ``body`` (a script) instead of kernels.ahead."""
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(body))
    monkeypatch.setattr(warmup, "ahead", types.SimpleNamespace(__file__=str(script)))


def _start(cupy) -> None:
    """The warm-up begun without waiting for it (as by a process whose work then stops before it waits)."""
    found = warmup.where(cupy, 0)
    if found is not None:
        warmup.begin(cupy, found, (str(found[1]), found[2]), wait=False)


def test_warm_up_compiles_marks_and_is_done_once(folder, started):
    target, mark, cupy = folder
    assert warmup.ensure(cupy, 0) is True
    assert mark.exists() and len(list(target.glob("*.cubin"))) == 1  # the record's one request, compiled
    assert len(started) == 1 and started[0][-4:] == [ARCH, str(target), str(cupy_kernels.RECORD_FILE), "0"]
    assert warmup.ensure(cupy, 0) is True and len(started) == 1  # settled in this process
    warmup._SETTLED.clear()  # a later process: the mark is found, no worker is started
    assert warmup.ensure(cupy, 0) is True and len(started) == 1


def test_a_failing_worker_leaves_no_mark(folder, started, monkeypatch, tmp_path):
    target, mark, cupy = folder
    _worker(monkeypatch, tmp_path, "import sys\nsys.exit(1)\n")
    _start(cupy)
    assert len(started) == 1
    assert warmup.ensure(cupy, 0) is False and not mark.exists()
    assert warmup.ensure(cupy, 0) is False and len(started) == 1  # not tried again in this process


def test_a_worker_past_the_timeout_is_killed(folder, started, monkeypatch, tmp_path):
    target, mark, cupy = folder
    _worker(monkeypatch, tmp_path, "import time\ntime.sleep(60)\n")
    monkeypatch.setattr(warmup, "TIMEOUT_S", 0.5)
    assert warmup.ensure(cupy, 0) is False and not mark.exists() and len(started) == 1


def test_switched_off_nothing_starts(folder, started, monkeypatch):
    monkeypatch.setattr(warmup, "where", REAL_WHERE)  # the switch is read before CuPy is asked anything
    monkeypatch.setenv(warmup.ENV_SWITCH, "0")
    cupy = folder[2]
    _start(cupy)
    assert warmup.ensure(cupy, 0) is False and started == [] and not folder[0].exists()


def test_workers_one_per_cpu(monkeypatch):
    for cpus, count, expected in ((1, 54, 0), (2, 54, 2), (4, 3, 3), (64, 54, warmup.MAX_WORKERS)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cpus: set(range(n)), raising=False)
        assert warmup.workers(count) == expected, (cpus, count)


def test_one_cpu_starts_nothing(folder, started, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    target, mark, cupy = folder
    assert warmup.ensure(cupy, 0) is False and started == [] and not mark.exists()


def test_the_folder_lock_keeps_a_second_process_out(folder, started, monkeypatch, tmp_path):
    target, mark, cupy = folder
    _worker(monkeypatch, tmp_path, "pass\n")
    held = warmup.FolderLock(target)  # another process warming this folder
    assert held.acquire(wait=False)
    _start(cupy)
    assert started == [] and warmup._RUNNING == {}
    held.close()
    _start(cupy)  # released: this process starts its own
    assert len(started) == 1 and warmup.ensure(cupy, 0) is True and mark.exists()


def test_the_lock_is_released_when_the_workers_end_without_ensure(folder, started, monkeypatch, tmp_path):
    """A process that started the warm-up and never reaches its GPU work (a failed read) holds the folder's lock
    only while its workers run: another process gets it then, and finds the mark."""
    target, mark, cupy = folder
    _worker(monkeypatch, tmp_path, "import time\ntime.sleep(0.5)\n")
    _start(cupy)
    assert len(started) == 1
    other = warmup.FolderLock(target)  # another process's view of the lock
    begun = time.monotonic()
    assert other.acquire(wait=True) and time.monotonic() - begun < 10
    other.close()
    assert mark.exists()


def test_a_wait_for_another_process_is_bounded(folder, monkeypatch):
    target, _, _ = folder
    held = warmup.FolderLock(target)
    assert held.acquire(wait=False)
    monkeypatch.setattr(warmup, "TIMEOUT_S", 0.3)
    waiting = warmup.FolderLock(target)
    begun = time.monotonic()
    assert waiting.acquire(wait=True) is False and 0.25 <= time.monotonic() - begun < 5
    waiting.close()
    held.close()


def test_cupy_waits_for_the_warm_up_only_before_a_kernel_of_its_own(monkeypatch):
    compiler = pytest.importorskip("cupy.cuda.compiler")
    compiled, waited = [], []
    monkeypatch.setattr(compiler, "_compile_module_with_cache", lambda source, *args, **kw: compiled.append(source))
    monkeypatch.setattr(warmup, "_HOOKED", [])
    monkeypatch.setattr(warmup, "ensure", lambda cupy, index: waited.append(index) or True)
    device = types.SimpleNamespace(id=3)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda: device))
    warmup.wait_before_compiling(fake)
    warmup.wait_before_compiling(fake)  # hooked once
    compiler._compile_module_with_cache('extern "C" __global__ void mri_recon_arith_scale() {}')
    assert waited == [] and len(compiled) == 1  # mri-recon's own modules never wait
    compiler._compile_module_with_cache("__global__ void cupy_copy() {}", ("-O3",))
    compiler._compile_module_with_cache("__global__ void cupy_sum() {}")
    assert waited == [3, 3] and len(compiled) == 3
