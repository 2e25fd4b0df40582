"""Precompiled kernels: the bundle that ``scripts/build_kernels.py`` writes and the checks before one is loaded.

The bundle is a folder (``bundle/`` beside this module, package data) of xz-compressed CUBIN and PTX files and
``manifest.json``: the configurations of a default reconstruction are committed with the sources
(``scripts/build_kernels.py --defaults``), the rest of the registry is added before a release wheel is built
(docs/kernels.md). Every entry of the manifest records the kernel file,
its defines, the SHA-256 of its source with every ``#include "..."`` of this folder expanded in place, the exact
compile options, the target (``sm_80`` .. ``compute_120``), the NVRTC version that built it and the SHA-256 of
the binary. Its key is the SHA-256 of the first five (:func:`entry_key`).

A binary is used only when all of these hold, otherwise the loader compiles with NVRTC as before:

- ``MRI_RECON_PRECOMPILED`` is not ``0``;
- the manifest holds the key computed from *this* installation's source, options and a target that the device
  can run: a CUBIN of the device's major architecture and a minor one not above the device's (CUDA's binary
  compatibility: ``sm_80`` runs on 8.0, 8.6 and 8.9, never on 9.0), or else PTX of an architecture not above the
  device's (the driver translates it);
- the driver's CUDA major version is at least the one that built the binary, and for PTX the driver is at least
  as new as that NVRTC;
- the decompressed file's SHA-256 is the one recorded.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import logging
import lzma
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .sources import KERNEL_DIR, include_options, options

log = logging.getLogger(__name__)

BUNDLE_DIR = KERNEL_DIR / "bundle"
MANIFEST = "manifest.json"
FORMAT = 1
ENV_SWITCH = "MRI_RECON_PRECOMPILED"
TARGETS = ("sm_80", "sm_90", "sm_100", "sm_120", "compute_120")
"""CUBIN for the data-centre architectures (sm_80 Ampere, sm_90 Hopper, sm_100 Blackwell) and the newest
NVRTC 13 knows well (sm_120, consumer Blackwell), PTX of the newest for what comes after."""
CUPY_FLAGS = ("-ftz=true", "--device-as-default-execution-space")
"""What ``cupy.RawModule(code=...)`` adds to our options (CuPy 14): a bundled binary is built with them too, so
that it computes what the NVRTC path computes, bit for bit."""
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[^\n]*$', re.MULTILINE)


def expanded_source(filename: str, _seen: tuple[str, ...] = ()) -> str:
    """The text of ``filename`` with every ``#include "name"`` of the kernel folder replaced by that file's
    (expanded) text: what the compiler reads from this folder, so its hash changes with any header."""
    if filename in _seen:
        return ""  # a cycle: the header guards stop it in the compiler; the hash needs each text once
    text = (KERNEL_DIR / filename).read_text()

    def inline(match: re.Match) -> str:
        name = match.group(1)
        if not (KERNEL_DIR / name).is_file():
            return match.group(0)
        return expanded_source(name, (*_seen, filename))

    return _INCLUDE.sub(inline, text)


@functools.cache
def source_sha256(filename: str) -> str:
    """SHA-256 of :func:`expanded_source` (hex)."""
    return hashlib.sha256(expanded_source(filename).encode()).hexdigest()


def compile_options(defines: Mapping[str, Any] | None, target: str) -> list[str]:
    """The options a binary is built with, as recorded: ours (without the ``-I`` of the install folder, whose
    files the source hash covers), CuPy's :data:`CUPY_FLAGS` and ``-arch=target``."""
    headers = [opt for opt in include_options() if not opt.startswith("-I")]
    return [*options(defines), *headers, *CUPY_FLAGS, f"-arch={target}"]


def entry_key(filename: str, source_hash: str, opts: list[str], target: str, nvrtc: str) -> str:
    """The key of one binary: SHA-256 of its file name, source hash, options, target and NVRTC version."""
    text = json.dumps([filename, source_hash, list(opts), target, nvrtc], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def expected(filename: str, defines: Mapping[str, Any] | None, target: str, nvrtc: str) -> dict:
    """The manifest fields a binary of ``(filename, defines, target)`` built by NVRTC ``nvrtc`` must carry
    for this installation's sources."""
    opts = compile_options(defines, target)
    source_hash = source_sha256(filename)
    return {"key": entry_key(filename, source_hash, opts, target, nvrtc), "file": filename,
            "source_sha256": source_hash, "options": opts, "target": target}


def targets_for(capability: int, available: tuple[str, ...] = TARGETS) -> list[str]:
    """Targets of ``available`` that a device of ``capability`` (e.g. 90) runs, best first: CUBINs of its major
    version with the highest minor not above its own, then PTX of the highest architecture not above it."""
    major, minor = divmod(int(capability), 10)
    cubins, ptx = [], []
    for target in available:
        kind, arch = target.split("_")
        arch_major, arch_minor = divmod(int(arch), 10)
        if kind == "sm" and arch_major == major and arch_minor <= minor:
            cubins.append((int(arch), target))
        elif kind == "compute" and int(arch) <= int(capability):
            ptx.append((int(arch), target))
    return [t for _, t in sorted(cubins, reverse=True)] + [t for _, t in sorted(ptx, reverse=True)]


def driver_accepts(target: str, nvrtc: str, driver_version: int) -> bool:
    """Whether a driver reporting ``driver_version`` (``cudaDriverGetVersion``: 13020 is 13.2) loads a binary
    of ``target`` built by NVRTC ``nvrtc`` ("13.5"): a CUBIN needs a driver of that CUDA major version or a
    later one (minor-version compatibility within the major, backward compatibility across); PTX a driver at
    least as new as the NVRTC (an older one cannot translate a newer PTX ISA)."""
    major, minor = (int(part) for part in nvrtc.split(".")[:2])
    if target.startswith("compute_"):
        return driver_version >= major * 1000 + minor * 10
    return driver_version // 1000 >= major


class Bundle:
    """The manifest of one bundle folder and the verified reading of its binaries."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.nvrtc = ""
        self.entries: dict[str, dict] = {}
        path = self.directory / MANIFEST
        try:
            manifest = json.loads(path.read_text())
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                raise ValueError(f"not a manifest of format {FORMAT}")
            self.nvrtc = str(manifest["nvrtc"])
            self.entries = {str(e["key"]): e for e in manifest["entries"]}
        except FileNotFoundError:
            log.debug("no precompiled kernels at %s", self.directory)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.debug("precompiled kernels at %s not used: unreadable manifest (%s)", self.directory, exc)
            self.entries = {}

    def binary(self, filename: str, defines: Mapping[str, Any] | None, capability: int,
               driver_version: int) -> tuple[str, bytes] | None:
        """``(target, bytes)`` of the best verified binary of ``(filename, defines)`` for a device of
        ``capability`` under a driver of ``driver_version``; None (logged at DEBUG) when there is none."""
        if not self.entries:
            return None
        for target in targets_for(capability):
            want = expected(filename, defines, target, self.nvrtc)
            entry = self.entries.get(want["key"])
            if entry is None or any(entry.get(k) != v for k, v in want.items()):
                continue
            if not driver_accepts(target, self.nvrtc, driver_version):
                log.debug("%s %s: built by NVRTC %s, not for driver %d", filename, target, self.nvrtc, driver_version)
                continue
            data = self.read(entry)
            if data is not None:
                return target, data
        log.debug("%s %s: no precompiled binary for compute capability %s", filename, dict(defines or {}), capability)
        return None

    def read(self, entry: dict) -> bytes | None:
        """The decompressed binary of a manifest entry, or None when missing, unreadable or altered."""
        name = str(entry.get("binary", ""))
        path = self.directory / name
        if "/" in name or "\\" in name or not name or not path.is_file():
            log.debug("precompiled kernel %r is missing", name)
            return None
        try:
            data = lzma.decompress(path.read_bytes())
        except (OSError, lzma.LZMAError) as exc:
            log.debug("precompiled kernel %s unreadable: %s", name, exc)
            return None
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            log.debug("precompiled kernel %s refused: its SHA-256 differs from the manifest's", name)
            return None
        return data


def enabled() -> bool:
    """Whether precompiled kernels may be used (``MRI_RECON_PRECOMPILED=0`` turns them off)."""
    return os.environ.get(ENV_SWITCH, "1").strip() != "0"


_INSTALLED: list[Bundle] = []
_INSTALLED_LOCK = threading.Lock()


def installed() -> Bundle:
    """The bundle shipped with this installation (empty when none was built), its manifest read once even when
    the prefetch's threads all ask at the same moment."""
    with _INSTALLED_LOCK:
        if not _INSTALLED:
            _INSTALLED.append(Bundle(BUNDLE_DIR))
        return _INSTALLED[0]


_UNPACKED: list[Path] = []
_UNPACKED_LOCK = threading.Lock()


def _unpacked_dir() -> Path:
    """A private folder of this process for the decompressed binaries (``RawModule`` loads from a path),
    removed at exit."""
    with _UNPACKED_LOCK:
        if not _UNPACKED:
            folder = Path(tempfile.mkdtemp(prefix="mri-recon-kernels-"))
            atexit.register(shutil.rmtree, folder, True)
            _UNPACKED.append(folder)
        return _UNPACKED[0]


def load(cupy, filename: str, defines: Mapping[str, Any] | None, device_index: int):
    """A loaded ``cupy.RawModule`` of the verified bundled binary of ``(filename, defines)`` for device
    ``device_index`` (the current device), or None: switched off, no matching binary, or the driver refused it
    (each logged at DEBUG; the caller then compiles with NVRTC)."""
    if not enabled():
        return None
    device = cupy.cuda.Device(device_index)
    found = installed().binary(filename, defines, int(device.compute_capability),
                               int(cupy.cuda.runtime.driverGetVersion()))
    if found is None:
        return None
    target, data = found
    path = _unpacked_dir() / f"{hashlib.sha256(data).hexdigest()}.{'ptx' if target.startswith('compute') else 'cubin'}"
    if not path.is_file():
        partial = path.with_suffix(f".{threading.get_ident()}.part")
        partial.write_bytes(data)
        os.replace(partial, path)
    try:
        module = cupy.RawModule(path=str(path))
        module.compile()
    except Exception as exc:  # noqa: BLE001 - any load failure means: compile instead
        log.debug("precompiled %s (%s) not loaded: %s", filename, target, exc)
        return None
    log.debug("%s %s: precompiled %s", filename, dict(defines or {}), target)
    return module
