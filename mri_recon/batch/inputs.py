"""The scans of a batch run: paths, folders and glob patterns expanded to files, and their output names.

A folder stands for its scan files (``*.h5``, ``*.hdf5``, ``*.mrd``, Siemens ``*.dat``; not recursive; hidden
files and the outputs of earlier runs, ``*.recon.*``, left out); a pattern (``*``, ``?``, ``[``) for the files
it matches. Files are taken in the order given, each pattern's and folder's in sorted order, each file once.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import OutputError, ScanFileError
from ..io.readers import input_suffixes, scan_suffixes
from ..io.writers import OUTPUTS, output_suffixes


def _is_scan_name(name: str) -> bool:
    """Whether a folder's file ``name`` is a scan: it ends as the input formats' files do
    (:func:`~mri_recon.io.readers.scan_suffixes`: ``.dat``, ``.h5``, ``.hdf5``, ``.mrd``), and is no output."""
    return not name.startswith(".") and ".recon." not in name and name.endswith(scan_suffixes())


def expand_inputs(items: Sequence[str | os.PathLike]) -> list[Path]:
    """The scan files that ``items`` (files, folders, glob patterns) name, each once, in order.

    Raises
    ------
    ScanFileError
        An item is neither a file, a folder nor a pattern matching a file; a folder holds no scan file;
        nothing was given.
    """
    if isinstance(items, (str, os.PathLike)):
        items = [items]
    found: list[Path] = []
    for item in items:
        path = Path(item)
        try:
            path.exists()
        except OSError as exc:  # a name too long, a loop of links, ...
            raise ScanFileError(f"{str(path)[:200]}: cannot be opened ({exc.strerror})") from exc
        if path.is_dir():
            names = sorted(e.name for e in os.scandir(path) if e.is_file() and _is_scan_name(e.name))
            if not names:
                endings = ", ".join("*" + s for s in scan_suffixes())
                raise ScanFileError(f"{path}: folder holds no scan file ({endings})")
            found += [path / name for name in names]
        elif path.is_file():
            found.append(path)
        elif any(c in str(item) for c in "*?["):
            matched = sorted(Path(p) for p in glob.glob(str(item)) if Path(p).is_file())
            if not matched:
                raise ScanFileError(f"{item}: pattern matches no file")
            found += matched
        else:
            raise ScanFileError(f"{path}: no such file or folder")
    unique: dict[str, Path] = {}
    for path in found:
        unique.setdefault(os.path.realpath(path), path)
    if not unique:
        raise ScanFileError("no scan file given")
    return list(unique.values())


def output_name(scan: str | os.PathLike, format: str | None = None) -> str:
    """The default output name of ``scan``: its name without ``.mrd.h5`` / ``.h5`` / ``.hdf5`` / ``.mrd``, then
    ``.recon.h5`` (``.recon.nii.gz`` for NIfTI, ``.recon.mrd.h5`` for MRD images)."""
    name = Path(scan).name
    for suffix in input_suffixes():
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return f"{name}.recon{OUTPUTS[format or 'hdf5'].default_suffix}"


def names_a_file(out: str | os.PathLike) -> bool:
    """Whether ``-o out`` names one output file: it ends in an output file's ending
    (:func:`~mri_recon.io.writers.output_suffixes`) and is no existing folder."""
    return str(out).lower().endswith(output_suffixes()) and not Path(out).is_dir()


def output_paths(inputs: Sequence[Path], out_dir: str | os.PathLike | None, format: str | None) -> list[Path]:
    """One output per input: ``out_dir / output_name(input)``, or beside the input when ``out_dir`` is None;
    for a single input, ``out_dir`` itself when it names a file (:func:`names_a_file`).

    Raises
    ------
    OutputError
        Two inputs would write the same output (same name in different folders), ``out_dir`` is a file, or
        it names a file (``one.h5``) while there are several inputs.
    """
    if out_dir is not None and names_a_file(out_dir):
        if len(inputs) == 1:
            return [Path(out_dir)]
        raise OutputError(f"-o {out_dir} names one output file, and the batch has {len(inputs)} scans, one output "
                          f"each: give a folder (a name without a file ending such as .h5), or a single scan")
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise OutputError(f"{out_dir}: with several scans -o names a folder, and this is a file")
    outputs = [(Path(out_dir) if out_dir is not None else p.parent) / output_name(p, format) for p in inputs]
    seen: dict[str, Path] = {}
    for scan, out in zip(inputs, outputs):
        other = seen.setdefault(os.path.realpath(out), scan)
        if other is not scan:
            raise OutputError(f"{other} and {scan} would both be written to {out}; rename one or give them "
                              f"separate runs")
    return outputs
