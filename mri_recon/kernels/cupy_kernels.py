"""The compile requests a GPU reconstruction makes of CuPy for its own kernels: recorded, and read back.

A GPU reconstruction also makes CuPy compile about 40 kernels of its own (elementwise operations, reductions,
CUB passes) on first use. CuPy generates their sources at run time, but with one CuPy version they are the same
on every machine, so ``cupy_kernels.json`` (beside this module, written on a GPU by
``scripts/record_cupy_kernels.py``) lists them: the source, the options before CuPy adds its include folders
and the other arguments of CuPy's compile call, in the order the reconstruction first needed them.
:mod:`mri_recon.kernels.warmup` hands them to worker processes (:mod:`mri_recon.kernels.ahead`) that compile
them into CuPy's own cache before the first GPU work of a process. (Replaying the requests in-process on
threads made a cold start slower, some 50 NVRTC compiles contending for the CPU: NVRTC speeds up on processes,
not on threads; docs/benchmarks.md.)
This uses CuPy's private ``cupy.cuda.compiler._compile_module_with_cache`` (to record) and
``cupy._core.core.assemble_cupy_compiler_options``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Iterator
from pathlib import Path

from .ahead import FORMAT, pack, read_record
from .sources import KERNEL_DIR

log = logging.getLogger(__name__)

RECORD_FILE = KERNEL_DIR / "cupy_kernels.json"
ARGUMENTS = ("extra_source", "backend", "enable_cooperative_groups", "name_expressions", "jitify")
"""Arguments of CuPy's compile call kept with each request (``arch`` is the device's, ``log_stream`` none)."""


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
        version, requests = read_record(str(path))
        return version, tuple(requests)
    except FileNotFoundError:
        return "", ()
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        log.debug("CuPy kernel record %s not used: %s", path, exc)
        return "", ()


__all__ = ["FORMAT", "RECORD_FILE", "pack", "recorded", "recording", "user_options"]
