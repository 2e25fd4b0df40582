"""CuPy's own kernels, precompiled: entries of CuPy's kernel cache shipped in the bundle and copied into it.

A GPU reconstruction makes CuPy compile about 40 kernels of its own (elementwise operations, reductions, CUB
passes) on first use. ``cupy_kernels.json`` (beside this module) records those compile requests;
``scripts/build_kernels.py`` hands each, for every architecture of :data:`ARCHS`, to CuPy's own
compile-with-cache function (no GPU needed) and keeps what CuPy would have written to its disk cache: the file
name CuPy computed and the file's bytes (SHA-1 of the payload, then the CUBIN). They lie in ``bundle/cupy/``,
``sm_<arch>/<name>.cubin``, listed in ``bundle/cupy/manifest.json`` with their SHA-256.

CuPy's file name is the SHA-1 of a key holding the source, the options (with the absolute include folders of
CuPy and of CUDA), the architecture, the NVRTC version, the first lines of NVRTC's PTX of an empty file (its
build id) and ``CUPY_CACHE_KEY`` (a checksum of CuPy's headers). So before the first GPU work of a process,
:func:`install` recomputes that name for *this* installation with CuPy's own key functions, and copies an entry
into CuPy's cache folder under it only when everything the binary depends on is what it was at the build:

- ``MRI_RECON_PRECOMPILED`` and ``MRI_RECON_CUPY_BUNDLE`` are not ``0``, CuPy's disk cache is on (its default
  disk backend, no ``CUPY_CACHE_IN_MEMORY``, no ``CUPY_CUDA_COMPILE_WITH_DEBUG``);
- the CuPy version, ``CUPY_CACHE_KEY``, the NVRTC version and its build id (the hash of that empty PTX's header,
  per architecture: NVRTC 13 names another NVVM for ``sm_100`` and later) are the build's, and the entry's
  architecture and target (``-arch=sm_90``) are what CuPy uses for this device;
- the options are the build's once CuPy's include folder is written ``{cupy}`` (its content is covered by the
  CuPy version and ``CUPY_CACHE_KEY``) and every other include folder (CUDA's) is replaced by a SHA-256 of the
  headers at its top level (a CUDA of another release has other headers, and then nothing is installed);
- the recorded source still hashes to the entry's, and the file's SHA-256 is the manifest's;
- no file of that name is in the cache yet (a user's file is never replaced: a temporary file is hard-linked
  to the name, which fails when the name exists).

CuPy then finds each kernel in its cache and loads it instead of compiling. Every refusal is logged at DEBUG.
This uses CuPy's private compiler functions (``_get_arch``, ``_preprocess``, ``_hash_hexdigest``, ...); a CuPy
without them installs nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
import threading
from pathlib import Path

from . import cupy_kernels
from .bundle import BUNDLE_DIR, enabled

log = logging.getLogger(__name__)

CUPY_DIR = BUNDLE_DIR / "cupy"
MANIFEST = "manifest.json"
FORMAT = 1
ARCHS = ("80", "90", "100", "120")
ENV_SWITCH = "MRI_RECON_CUPY_BUNDLE"
"""``0`` turns off the CuPy part alone (``MRI_RECON_PRECOMPILED=0`` turns off the whole bundle)."""
_HEADER_SUFFIXES = (".h", ".hpp", ".cuh")
_INSTALLED: set[tuple[str, int]] = set()
_LOCK = threading.Lock()


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def source_sha256(request: dict) -> str:
    """SHA-256 of a request's source and extra source (both are in CuPy's key)."""
    return sha256(f"{request['source']}\0{request.get('extra_source')}")


@functools.cache
def header_fingerprint(folder: str) -> str:
    """SHA-256 of the names and texts of the headers at the top level of ``folder`` ("missing" if none)."""
    digest = hashlib.sha256()
    try:
        names = sorted(p.name for p in Path(folder).iterdir() if p.suffix in _HEADER_SUFFIXES and p.is_file())
    except OSError:
        return "missing"
    for name in names:
        digest.update(name.encode() + b"\0" + (Path(folder) / name).read_bytes() + b"\0")
    return digest.hexdigest()


def cupy_include_root() -> str:
    import cupy

    return os.path.join(os.path.dirname(cupy.__file__), "_core", "include")


def template(options: tuple[str, ...], cupy_root: str) -> list[str]:
    """``options`` without this installation's paths: CuPy's include folder as ``{cupy}``, any other include
    folder as ``{<header_fingerprint>}``."""
    out = []
    for option in options:
        if option.startswith("-I"):
            folder = option[2:]
            if folder == cupy_root or folder.startswith(cupy_root + os.sep):
                option = "-I{cupy}" + folder[len(cupy_root):].replace(os.sep, "/")
            else:
                option = "-I{" + header_fingerprint(folder) + "}"
        out.append(option)
    return out


def cupy_options(assemble, request: dict) -> tuple[str, ...]:
    """The options ``_compile_with_cache_cuda`` puts in its key for a recorded request: CuPy's assembly of the
    recorded options, then ``-ftz=true`` (and ``-DCUPY_USE_JITIFY`` for a jitify request), as CuPy adds them."""
    options = tuple(assemble(tuple(request["options"]))) + ("-ftz=true",)
    if request.get("jitify") and "-DCUPY_USE_JITIFY" not in options:
        options += ("-DCUPY_USE_JITIFY",)
    return options


def cupy_name(compiler, request: dict, options: tuple[str, ...], arch: str) -> tuple[str, str]:
    """``(file name, preprocess header)`` CuPy's ``_compile_with_cache_cuda`` gives ``request`` with ``options``
    (:func:`cupy_options`) for ``arch``: its key, rebuilt from CuPy's own parts. The header of NVRTC's PTX of an
    empty file is taken from (and left in) CuPy's own per-process cache of it, so CuPy does not compute it twice."""
    backend = request.get("backend") or "nvrtc"
    env = (arch, options, compiler._get_nvrtc_version(), backend) + compiler._get_arch_for_options_for_nvrtc(arch)
    base = compiler._empty_file_preprocess_cache.get(env)
    if base is None:
        base = compiler._preprocess("", options, arch, backend)
        compiler._empty_file_preprocess_cache[env] = base
    key = f"{env} {base} {request['source']} {request.get('extra_source')} {compiler._get_cupy_cache_key()}"
    if request.get("name_expressions"):
        key += f" ne{int(compiler._cache_payload_version)} "
        key += "\0".join(sorted(request["name_expressions"]))
    return compiler._hash_hexdigest(key.encode("utf-8")) + ".cubin", base


def nvrtc_version(compiler) -> str:
    major, minor = compiler._get_nvrtc_version()
    return f"{major}.{minor}"


def read_manifest(directory: Path) -> dict | None:
    try:
        manifest = json.loads((Path(directory) / MANIFEST).read_text())
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ValueError(f"not a manifest of format {FORMAT}")
        return manifest
    except FileNotFoundError:
        log.debug("no precompiled CuPy kernels at %s", directory)
    except (OSError, ValueError) as exc:
        log.debug("precompiled CuPy kernels at %s not used: %s", directory, exc)
    return None


def cache_dir(compiler) -> Path | None:
    """CuPy's kernel cache folder (``CUPY_CACHE_DIR`` or ``~/.cupy/kernel_cache``, as CuPy's disk backend read
    it), or None when CuPy does not write kernels to disk."""
    from cupy.cuda._compiler_cache import DiskKernelCacheBackend

    if os.environ.get("CUPY_CACHE_IN_MEMORY", "").strip() not in ("", "0"):
        return None
    if os.environ.get("CUPY_CUDA_COMPILE_WITH_DEBUG", "").strip() not in ("", "0"):
        return None  # other options, other keys
    backend = getattr(compiler, "_kernel_cache_backend", None)
    if type(backend) is not DiskKernelCacheBackend:
        return None  # a custom backend: its storage is not ours to fill
    return Path(backend._cache_dir)


def _place(data: bytes, target: Path) -> bool:
    """Write ``data`` as ``target`` without ever replacing a file there: a temporary file in the same folder,
    hard-linked to the name (fails when it exists), then removed. True when written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".mri-recon-", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.link(temporary, target)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(temporary)


def _refused(why: str, entry: dict) -> None:
    log.debug("precompiled CuPy kernel %s not installed: %s", entry.get("file"), why)


def _matches(compiler, assemble, manifest: dict, entry: dict, request: dict, arch: str, root: str) -> str | None:
    """CuPy's file name for ``entry`` in this installation, or None (logged) when it must not be installed."""
    if source_sha256(request) != entry.get("source_sha256"):
        return _refused("the recorded source differs from the build's", entry)
    options = cupy_options(assemble, request)
    if template(options, root) != entry.get("options"):
        return _refused("other options or include headers than the build's", entry)
    if list(compiler._get_arch_for_options_for_nvrtc(arch)) != entry.get("target"):
        return _refused("CuPy compiles another target here", entry)
    name, base = cupy_name(compiler, request, options, arch)
    if sha256(base) != (manifest.get("nvrtc_build") or {}).get(arch):
        return _refused("built by another NVRTC build", entry)
    return name


def install_arch(arch: str, target_dir: Path, directory: Path = CUPY_DIR,
                 record: Path = cupy_kernels.RECORD_FILE) -> list[str]:
    """Copy every entry of the bundle at ``directory`` built for ``arch`` that holds for this installation (see
    the module's docstring) into ``target_dir`` (CuPy's cache folder); the names written."""
    import cupy
    from cupy._core.core import assemble_cupy_compiler_options as assemble
    from cupy.cuda import compiler

    manifest = read_manifest(directory)
    if manifest is None:
        return []
    version, requests = cupy_kernels.recorded(record)  # 9 MB of JSON: read only when there is a bundle
    this = {"cupy": cupy.__version__, "nvrtc": nvrtc_version(compiler),
            "cupy_cache_key": compiler._get_cupy_cache_key()}
    if version != this["cupy"]:
        log.debug("CuPy kernel record of CuPy %s not used with CuPy %s", version, this["cupy"])
        return []
    foreign = {k: manifest.get(k) for k, v in this.items() if manifest.get(k) != v}
    if foreign:
        log.debug("precompiled CuPy kernels not used: built for %s, this is %s", foreign, this)
        return []
    written, root = [], cupy_include_root()
    for entry in manifest.get("entries", []):
        index = entry.get("request")
        if entry.get("arch") != arch or not isinstance(index, int) or not 0 <= index < len(requests):
            continue
        name = _matches(compiler, assemble, manifest, entry, requests[index], arch, root)
        if name is None or (target_dir / name).exists():
            continue
        file = str(entry.get("file", ""))
        path = Path(directory) / file
        if ".." in file.split("/") or not path.is_file():
            log.debug("precompiled CuPy kernel %r is missing", file)
            continue
        data = path.read_bytes()
        if sha256(data) != entry.get("sha256"):
            log.debug("precompiled CuPy kernel %s refused: its SHA-256 differs from the manifest's", file)
            continue
        if _place(data, target_dir / name):
            written.append(name)
    log.debug("%d precompiled CuPy kernel(s) for sm_%s installed in %s", len(written), arch, target_dir)
    return written


def install(cupy, device_index: int, directory: Path | None = None, record: Path | None = None) -> list[str]:
    """Once per process, cache folder and device: :func:`install_arch` for the architecture CuPy compiles for on
    device ``device_index``, into CuPy's cache folder (nothing when switched off or the cache is not on disk);
    any error is logged at DEBUG (CuPy then compiles on use, as without the bundle)."""
    if not enabled() or os.environ.get(ENV_SWITCH, "1").strip() == "0":
        return []
    try:
        from cupy.cuda import compiler

        target_dir = cache_dir(compiler)
        if target_dir is None:
            return []
        with _LOCK:
            key = (str(target_dir), int(device_index))
            if key in _INSTALLED:
                return []
            _INSTALLED.add(key)
        with cupy.cuda.Device(device_index):
            return install_arch(str(compiler._get_arch()), target_dir, directory or CUPY_DIR,
                                record or cupy_kernels.RECORD_FILE)
    except Exception as exc:  # noqa: BLE001 - a failed installation costs nothing: CuPy compiles on use
        log.debug("precompiled CuPy kernels not installed: %s", exc)
        return []
