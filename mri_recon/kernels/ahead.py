"""Compile recorded CuPy kernels into CuPy's kernel cache, for one architecture, with no GPU: the worker process
of :mod:`mri_recon.kernels.warmup`.

Run as a script (``python ahead.py ARCH CACHE_DIR RECORD INDEX...``): it imports CuPy and nothing of mri-recon.
Each request of ``RECORD`` (``cupy_kernels.json``) at the given indices goes to CuPy's own
``_compile_with_cache_cuda`` with the architecture given, so CuPy computes its own key and file name and its
own disk backend writes the entry, exactly as a first use would. The backend is wrapped so that CuPy stops once
the entry is on disk (found or written), before it would load the binary on a device. Exit status 0 when every
request is in the cache, 1 otherwise (the kernels missing are then compiled by CuPy on first use).
"""

from __future__ import annotations

import json
import sys

FORMAT = 2
"""The record's format: ``{"format", "cupy", "texts", "requests"}``, each request's ``source`` and
``extra_source`` an index into ``texts`` (or None): the generated sources share long headers, kept once."""
TEXTS = ("source", "extra_source")


def pack(cupy_version: str, requests: list[dict]) -> dict:
    """The record of ``requests`` (full texts) for CuPy ``cupy_version``: each distinct text stored once."""
    texts: list[str] = []
    index: dict[str, int] = {}
    packed = []
    for request in requests:
        entry = dict(request)
        for name in TEXTS:
            text = request.get(name)
            if text is not None:
                entry[name] = index.setdefault(text, len(texts))
                if entry[name] == len(texts):
                    texts.append(text)
        packed.append(entry)
    return {"format": FORMAT, "cupy": cupy_version, "texts": texts, "requests": packed}


def unpack(data: dict) -> tuple[str, list[dict]]:
    """``(cupy_version, requests)`` with their full texts, from a record :func:`pack` made (ValueError when
    it is not one)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("texts"), list):
        raise ValueError(f"not a CuPy kernel record of format {FORMAT}")
    texts, requests = data["texts"], []
    for entry in data["requests"]:
        request = dict(entry)
        for name in TEXTS:
            if request.get(name) is not None:
                request[name] = texts[int(request[name])]
        requests.append(request)
    return str(data["cupy"]), requests


def read_record(path: str) -> tuple[str, list[dict]]:
    """:func:`unpack` of the record file at ``path``."""
    with open(path, encoding="utf-8") as stream:
        return unpack(json.load(stream))


class Stored(Exception):  # noqa: N818 - not an error: how CuPy is stopped once an entry is in its cache
    pass


def arch_options(compiler, arch: str) -> tuple[str, str]:
    """CuPy's ``_get_arch_for_options_for_nvrtc(arch)`` as CuPy 14 computes it, without its per-device memo
    (which asks the driver for the current device)."""
    if not compiler._use_ptx and int(arch) <= int(compiler._get_max_compute_capability()):
        return f"-arch=sm_{arch}", "cubin"
    return f"-arch=compute_{arch}", "ptx"


def backend_for(cache_dir: str):
    """CuPy's disk backend on ``cache_dir``, raising :class:`Stored` once an entry is found or saved."""
    from cupy.cuda._compiler_cache import DiskKernelCacheBackend

    class Ahead(DiskKernelCacheBackend):
        def load(self, name):
            if super().load(name) is not None:
                raise Stored(name)
            return None

        def save(self, name, cubin, source):
            super().save(name, cubin, source)
            raise Stored(name)

    return Ahead(cache_dir)


def compile_request(compiler, assemble, request: dict, arch: str) -> bool:
    """Put one recorded request in the cache; False (and a line on stderr) when CuPy could not compile it."""
    names = tuple(request["name_expressions"]) if request.get("name_expressions") else None
    try:
        compiler._compile_with_cache_cuda(source=request["source"], options=tuple(assemble(tuple(request["options"]))),
                                          arch=arch, extra_source=request.get("extra_source"),
                                          backend=request.get("backend") or "nvrtc",
                                          enable_cooperative_groups=bool(request.get("enable_cooperative_groups")),
                                          name_expressions=names, jitify=bool(request.get("jitify")))
    except Stored:
        return True
    except Exception as exc:  # noqa: BLE001 - reported; CuPy compiles this kernel on first use instead
        print(f"mri-recon warm-up: a CuPy kernel did not compile ahead: {type(exc).__name__}: {exc}"[:500],
              file=sys.stderr)
        return False
    return False  # CuPy returned without touching its cache: nothing to count on


def main(argv: list[str]) -> int:
    arch, cache_dir, record = argv[:3]
    indices = [int(i) for i in argv[3:]]
    from cupy._core.core import assemble_cupy_compiler_options as assemble
    from cupy.cuda import compiler

    requests = read_record(record)[1]
    compiler._set_kernel_cache_backend(backend_for(cache_dir))
    compiler._get_arch_for_options_for_nvrtc = lambda arch=arch: arch_options(compiler, arch)
    done = [compile_request(compiler, assemble, requests[i], arch) for i in indices]
    return 0 if all(done) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
