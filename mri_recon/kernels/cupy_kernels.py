"""CuPy's own kernels built ahead, on threads: the compile requests a reconstruction makes of CuPy, replayed.

A GPU reconstruction also makes CuPy compile about 40 kernels of its own (elementwise operations, reductions,
CUB passes), one after the other, on first use: most of a cold start once mri-recon's modules come from the
bundle. They cannot be precompiled with the package: CuPy generates their sources at run time, and its cache key
covers its version, the NVRTC version and the device's architecture. But with one CuPy version the sources are
the same on every machine, so ``cupy_kernels.json`` (beside this module, written on a GPU by
``scripts/record_cupy_kernels.py``) lists them: the source, the options before CuPy adds its include folders
and the other arguments of CuPy's compile call, in the order the reconstruction first needed them. On the first
:func:`mri_recon.kernels.prefetch` of a process and device, :func:`prefetch_cupy` hands each request to CuPy's
own compile-and-cache function on the loader's thread pool. CuPy compiles it (NVRTC releases the GIL, so they
build side by side) and writes it to its disk cache under its own key; when the reconstruction reaches that
operation, CuPy finds the binary there instead of compiling. Nothing is loaded that CuPy itself would not have
built: a request is only a faster way to ask CuPy for what it will ask for anyway, and one whose source differs
from what this CuPy generates is a cache entry never read.

The list is used only with the CuPy version that recorded it, with CuPy's disk cache on, and while neither
``MRI_RECON_PRECOMPILED`` nor ``MRI_RECON_CUPY_PREFETCH`` is ``0``; any error is logged at DEBUG and ignored
(CuPy compiles on use as before).
This uses CuPy's private ``cupy.cuda.compiler._compile_module_with_cache`` and
``cupy._core.core.assemble_cupy_compiler_options``; a CuPy without them simply gets no prefetch.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

from .sources import KERNEL_DIR

log = logging.getLogger(__name__)

RECORD_FILE = KERNEL_DIR / "cupy_kernels.json"
FORMAT = 1
ENV_SWITCH = "MRI_RECON_CUPY_PREFETCH"
"""``0`` turns this prefetch off alone (``MRI_RECON_PRECOMPILED=0`` turns it off with the bundle)."""
ARGUMENTS = ("extra_source", "backend", "enable_cooperative_groups", "name_expressions", "jitify")
"""Arguments of CuPy's compile call kept with each request (``arch`` is the device's, ``log_stream`` none)."""
_STARTED: set[int] = set()
_STARTED_LOCK = threading.Lock()


def user_options(assemble, options: tuple[str, ...]) -> list[str] | None:
    """The options a request was made with before CuPy added its include folders (``assemble`` is
    ``assemble_cupy_compiler_options``): ``options`` without the prefix and suffix that ``assemble`` puts
    around a probe option, checked by assembling the result again; None when no split reproduces ``options``
    (the request is then not recorded)."""
    marker = "-D__MRI_RECON_PROBE__"
    probe = list(assemble((marker,)))
    at = probe.index(marker)
    prefix, suffix = probe[:at], probe[at + 1:]
    options = tuple(options)
    if tuple(options[:len(prefix)]) != tuple(prefix):
        return None
    rest = list(options[len(prefix):])
    for drop in range(len(suffix) + 1):  # CuPy leaves out what the options already hold (e.g. --std=...)
        for tail in {tuple(suffix[:i] + suffix[i + drop:]) for i in range(len(suffix) - drop + 1)}:
            if len(rest) >= len(tail) and tuple(rest[len(rest) - len(tail):]) == tail:
                user = rest[:len(rest) - len(tail)]
                if tuple(assemble(tuple(user))) == options:
                    return user
    return None


@contextlib.contextmanager
def recording(compiler, assemble) -> Iterator[list[dict]]:
    """Within the block, every CuPy compile request other than mri-recon's own modules is appended (once) to
    the list yielded; used by ``scripts/record_cupy_kernels.py`` on a GPU."""
    requests: list[dict] = []
    seen: set[str] = set()
    real = compiler._compile_module_with_cache

    def record(source, options=(), **kwargs):
        if "mri_recon_" not in source:
            user = user_options(assemble, tuple(options))
            request = {"source": source, "options": user, **{k: kwargs.get(k) for k in ARGUMENTS}}
            if isinstance(request["name_expressions"], tuple):
                request["name_expressions"] = list(request["name_expressions"])
            text = json.dumps(request, sort_keys=True)
            if user is not None and text not in seen:
                seen.add(text)
                requests.append(request)
        return real(source, options, **kwargs)

    compiler._compile_module_with_cache = record
    try:
        yield requests
    finally:
        compiler._compile_module_with_cache = real


@functools.cache
def recorded(path: Path = RECORD_FILE) -> tuple[str, tuple[dict, ...]]:
    """``(cupy_version, requests)`` of the record file; ``("", ())`` when there is none or it is unreadable."""
    try:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a record of format {FORMAT}")
        return str(data["cupy"]), tuple(dict(r) for r in data["requests"])
    except FileNotFoundError:
        return "", ()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.debug("CuPy kernel record %s not used: %s", path, exc)
        return "", ()


def _compile(cupy, compiler, assemble, request: dict, device_index: int) -> None:
    kwargs = {k: request.get(k) for k in ARGUMENTS}
    if kwargs["name_expressions"] is not None:
        kwargs["name_expressions"] = tuple(kwargs["name_expressions"])
    kwargs["backend"] = kwargs["backend"] or "nvrtc"
    kwargs["enable_cooperative_groups"] = bool(kwargs["enable_cooperative_groups"])
    kwargs["jitify"] = bool(kwargs["jitify"])
    try:
        with cupy.cuda.Device(device_index):
            compiler._compile_module_with_cache(request["source"], tuple(assemble(tuple(request["options"]))),
                                                **kwargs)
    except Exception as exc:  # noqa: BLE001 - a failed prefetch costs nothing: CuPy compiles on use
        log.debug("CuPy kernel prefetch failed: %s", exc)


def prefetch_cupy(cupy, device_index: int, pool, record: Path = RECORD_FILE) -> list[Future]:
    """Submit every recorded request to ``pool`` once per process and device (see the module's docstring);
    the futures of this call (none when it is not the first, or the record does not apply)."""
    version, requests = recorded(record)
    switched_off = any(os.environ.get(name, "1").strip() == "0" for name in ("MRI_RECON_PRECOMPILED", ENV_SWITCH))
    if not requests or switched_off:
        return []
    if version != getattr(cupy, "__version__", None):
        log.debug("CuPy kernel record of CuPy %s not used with CuPy %s", version, getattr(cupy, "__version__", "?"))
        return []
    if os.environ.get("CUPY_CACHE_IN_MEMORY", "0").strip() not in ("", "0"):
        return []  # nothing would reach the disk cache for the reconstruction to find
    try:
        from cupy._core.core import assemble_cupy_compiler_options as assemble
        from cupy.cuda import compiler
    except ImportError as exc:
        log.debug("CuPy kernel prefetch unavailable: %s", exc)
        return []
    if not hasattr(compiler, "_compile_module_with_cache"):
        return []
    with _STARTED_LOCK:
        if device_index in _STARTED:
            return []
        _STARTED.add(device_index)
    return [pool.submit(_compile, cupy, compiler, assemble, request, device_index) for request in requests]
