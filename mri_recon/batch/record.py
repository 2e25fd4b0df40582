"""Completion records: what lets a rerun skip the outputs that are already complete.

After a scan's output is renamed into place, a record ``OUTPUT.done.json`` is written beside it (also
atomically): the settings of the run, the input's size and modification time, and the output's size and
SHA-256 (of each file, when NIfTI slices are written one file each). An output counts as complete when its
record exists, names the same settings and the same input (size and modification time unchanged), and every
recorded file's SHA-256 still matches. An output without a record
(a run killed between the two renames, or written by a single-scan run) is reconstructed again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._version import __version__
from ..io.files import write_file

SUFFIX = ".done.json"
"""Appended to an output's name to name its completion record."""
FORMAT = "mri-recon-batch-record-1"


def record_path(output: str | os.PathLike) -> Path:
    """The completion record of ``output``."""
    output = Path(output)
    return output.with_name(output.name + SUFFIX)


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (read in 4 MiB pieces)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(4 << 20):
            digest.update(piece)
    return digest.hexdigest()


def _input_state(path: str | os.PathLike) -> dict[str, int]:
    info = os.stat(path)
    return {"size": int(info.st_size), "mtime_ns": int(info.st_mtime_ns)}


def _file_state(path: Path, output: Path) -> dict[str, Any]:
    """A written file by its path from the output's folder (its name, or ``SERIES/IM00001.dcm`` for DICOM)."""
    name = os.path.relpath(path, output.parent)
    return {"name": name, "size": os.stat(path).st_size, "sha256": file_sha256(path)}


def write_record(output: str | os.PathLike, scan: str | os.PathLike, settings: Mapping[str, Any],
                 outcome: Mapping[str, Any], files: list[Path] | None = None) -> Path:
    """Write the completion record of ``output`` (reconstructed from ``scan`` with ``settings``); ``files``:
    the files written for it when they are not ``output`` itself (NIfTI slices that form no volume, one file
    each, beside it), each recorded with its size and SHA-256."""
    written = [Path(f) for f in files] if files else [Path(output)]
    record = {"format": FORMAT, "mri_recon_version": __version__, "input": str(scan), **{
        f"input_{k}": v for k, v in _input_state(scan).items()}, "settings": dict(settings),
        "output": Path(output).name, "files": [_file_state(f, Path(output)) for f in written], "outcome": dict(outcome)}
    target = record_path(output)
    write_file(target, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode(), protect=(scan,))
    return target


def complete(output: str | os.PathLike, scan: str | os.PathLike, settings: Mapping[str, Any]) -> str | None:
    """Why ``output`` must be (re)computed, or None when it is complete (see the module docstring)."""
    path = record_path(output)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return "no output" if not Path(output).is_file() else "no completion record"
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("files"), list):
        return "completion record unreadable"
    if json.loads(json.dumps(dict(settings))) != record.get("settings"):
        return "settings differ"
    state = _input_state(scan)
    if any(record.get(f"input_{k}") != v for k, v in state.items()):
        return "input changed"
    for entry in record["files"]:
        file = Path(output).parent / str(entry.get("name"))
        if not file.is_file():
            return "no output"
        if os.stat(file).st_size != entry.get("size") or file_sha256(file) != entry.get("sha256"):
            return "output checksum differs"
    return None
