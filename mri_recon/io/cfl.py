"""BART's ``.cfl`` / ``.hdr`` files: a flat complex64 array (column-major) and a text header of its dimensions.

Format (BART ``src/misc/io.c``, ``python/cfl.py``)
--------------------------------------------------
``NAME.hdr`` is text: a line ``# Dimensions`` followed by one line of integers, the sizes of up to 16
dimensions (missing trailing ones are 1); other ``# Keyword`` sections (``Command``, ``Files``, ``Creator``)
are ignored. ``NAME.cfl`` holds ``prod(dims)`` little-endian complex64 values in Fortran order (dimension 0
fastest). A ``# Data`` section names another data file: that file is read only with
``allow_external=True`` (like the HDF5 inputs' external storage), else it is refused.

Reading maps the data file (``numpy.memmap``, read only); nothing in a header is evaluated. Writing builds
both files in memory and writes them atomically, all or none (:func:`mri_recon.io.files.write_files`).

A path names a pair by its data file (``x.cfl``), its header (``x.hdr``) or BART's way, the common stem
(``x``) when no file of that name exists.

BART's dimensions
-----------------
0 READ, 1 PHS1, 2 PHS2, 3 COIL, 4 MAPS, 5 TE, 6 COEFF, 7 COEFF2, 8 ITER, 9 CSHIFT, 10 TIME, 11 TIME2,
12 LEVEL, 13 SLICE, 14 AVG, 15 BATCH. mri-recon's image indices map onto :data:`STACK_DIMS`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._version import __version__
from ..errors import ExternalDataError, ScanFileError, SchemaError, printable
from .files import FileSet, write_files

DIMS = 16
"""BART's number of dimensions (``DIMS`` in ``src/misc/mri.h``)."""
COIL_DIM, MAPS_DIM = 3, 4
STACK_DIMS = {"contrast": 5, "repetition": 10, "phase": 11, "slice": 13, "set": 15}
"""The BART dimension of each MRD image index: TE, TIME, TIME2, SLICE and BATCH (an irregular stack,
``"image"``, is written on BATCH too)."""
DIM_NAMES = ("READ", "PHS1", "PHS2", "COIL", "MAPS", "TE", "COEFF", "COEFF2", "ITER", "CSHIFT", "TIME",
             "TIME2", "LEVEL", "SLICE", "AVG", "BATCH")
MAX_HEADER = 1 << 16
"""Longest header read (bytes); BART's own are under 4 KiB."""
MAX_DIMS_LINE = 64
"""Most sizes a ``# Dimensions`` line may hold (BART accepts trailing ones beyond 16)."""
_SUFFIXES = (".cfl", ".hdr")
_KEYWORD = re.compile(r"^# ?(\S+)\s*$")


def is_cfl_name(path: str | os.PathLike) -> bool:
    """True for ``x.cfl`` or ``x.hdr`` (any case), or for a stem ``x`` that is no file while ``x.hdr`` is."""
    text = str(path)
    if text.lower().endswith(_SUFFIXES):
        return True
    return not os.path.lexists(text) and os.path.isfile(text + ".hdr")


MAX_FILE_BYTES = 2**62
"""The most data a header may declare (complex64 values times 8 bytes): beyond it no file is that large, and
the product would overflow the 64-bit sizes of NumPy and the memory map."""


def cfl_pair(path: str | os.PathLike) -> tuple[Path, Path]:
    """``(header, data)`` paths of the pair that ``path`` names (see the module docstring)."""
    text = str(path)
    stem = text[:-4] if text.lower().endswith(_SUFFIXES) else text
    suffix = text[-4:] if text.lower().endswith(_SUFFIXES) else ".cfl"
    data = ".CFL" if suffix.isupper() else ".cfl"
    return Path(stem + (".HDR" if suffix.isupper() else ".hdr")), Path(stem + data)


def _read_text(header: Path) -> str:
    shown = printable(header)
    named = Path(str(header)[:-4])  # the name given, when it was not NAME.cfl or NAME.hdr
    if not header.exists() and named.suffix and named.is_file():
        raise ScanFileError(f"{printable(named)}: not a BART file (BART's are a NAME.cfl / NAME.hdr pair; there "
                            f"is no {header.name})")
    if not header.is_file():
        raise ScanFileError(f"{shown}: no such BART header (a .cfl file needs its .hdr beside it)"
                            if not header.exists() else f"{shown}: is not a regular file")
    try:
        with open(header, "rb") as f:
            raw = f.read(MAX_HEADER + 1)
    except OSError as exc:
        raise ScanFileError(f"{shown}: cannot be opened ({exc.strerror})") from exc
    if len(raw) > MAX_HEADER:
        raise SchemaError(f"{shown}: BART header longer than {MAX_HEADER} bytes; expected a short text file")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise SchemaError(f"{shown}: BART header is not ASCII text") from None


def read_header(header: str | os.PathLike) -> tuple[tuple[int, ...], str | None]:
    """The sizes of all :data:`DIMS` dimensions (trailing ones filled with 1) and the ``# Data`` file, if any.

    Raises
    ------
    SchemaError
        No ``# Dimensions`` section (or two), sizes that are not positive integers, more than 16 dimensions
        of size above 1, a header that is not short ASCII text.
    """
    header = Path(header)
    shown = printable(header)
    lines = _read_text(header).splitlines()
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
        match = _KEYWORD.match(line) if line.startswith("#") else None
        if match is not None:
            current = match.group(1)
            if current in sections and current in ("Dimensions", "Data"):
                raise SchemaError(f"{shown}: BART header has two '# {printable(current)}' sections")
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line)
    if not sections.get("Dimensions"):
        raise SchemaError(f"{shown}: BART header has no '# Dimensions' line followed by the sizes")
    words = sections["Dimensions"][0].split()
    if not words or len(words) > MAX_DIMS_LINE or not all(w.isdigit() for w in words):
        raise SchemaError(f"{shown}: BART dimensions {printable(sections['Dimensions'][0][:120])!r} are not "
                          f"1 to {MAX_DIMS_LINE} positive integers")
    sizes = [int(w) for w in words]
    if any(n < 1 for n in sizes) or any(n != 1 for n in sizes[DIMS:]):
        raise SchemaError(f"{shown}: BART dimensions {sizes} must be positive, with at most {DIMS} of them above 1")
    sizes = (sizes + [1] * DIMS)[:DIMS]
    if math.prod(sizes) * 8 > MAX_FILE_BYTES:  # Python's integers: no int64 to overflow
        raise SchemaError(f"{shown}: BART dimensions {printable(' '.join(words)[:120])} declare "
                          f"{math.prod(sizes) * 8:.3g} bytes of data, more than any file holds")
    data = sections.get("Data")
    return tuple(sizes), (data[0].strip() if data else None)


def read_cfl(path: str | os.PathLike, *, allow_external: bool = False) -> np.ndarray:
    """The array of a BART pair, shape :data:`DIMS` sizes, complex64, Fortran order, memory-mapped read only.

    Raises
    ------
    ScanFileError
        A missing header or data file, or one that cannot be opened.
    SchemaError
        A malformed header (:func:`read_header`), or a data file whose size is not the header's
        ``prod(dims) * 8`` bytes.
    ExternalDataError
        The header names another data file (``# Data``) and ``allow_external`` is False.
    """
    header, data = cfl_pair(path)
    dims, other = read_header(header)
    if other is not None:
        if not allow_external:
            raise ExternalDataError(f"{printable(header)}: BART header names the data file "
                                    f"{printable(other[:200])!r} ('# Data'); reading another file is refused "
                                    f"unless --allow-external-data (allow_external=True)")
        data = Path(other)
    shown = printable(data)
    if not data.is_file():
        raise ScanFileError(f"{shown}: no such BART data file" if not data.exists()
                            else f"{shown}: is not a regular file")
    expected = math.prod(dims) * 8
    size = data.stat().st_size
    if size != expected:
        raise SchemaError(f"{shown}: holds {size} bytes but the header's dimensions {list(trimmed(dims))} need "
                          f"{expected} (complex64)")
    try:
        return np.memmap(data, dtype="<c8", mode="r", shape=dims, order="F")
    except OSError as exc:
        raise ScanFileError(f"{shown}: cannot be read ({exc.strerror})") from exc


def trimmed(dims: Sequence[int]) -> tuple[int, ...]:
    """``dims`` without trailing ones (at least one size)."""
    dims = list(dims)
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return tuple(dims)


def header_text(dims: Sequence[int]) -> str:
    """The header BART writes for an array of these sizes (padded to :data:`DIMS`), with mri-recon as creator."""
    sizes = (list(dims) + [1] * DIMS)[:max(DIMS, len(dims))]
    return "# Dimensions\n" + " ".join(str(int(n)) for n in sizes) + " \n" + f"# Creator\nmri-recon {__version__}\n"


def write_cfl(path: str | os.PathLike, array: np.ndarray, *,
              protect: tuple[str | os.PathLike, ...] | FileSet = ()) -> list[Path]:
    """Write ``array`` (any shape up to 16 dimensions, cast to complex64) as a BART pair, atomically.

    Returns the header and data paths. Raises :class:`~mri_recon.errors.OutputError` as
    :func:`~mri_recon.io.files.write_files` does, or when ``array`` has more than :data:`DIMS` axes.
    """
    from ..errors import OutputError  # noqa: PLC0415 - kept beside its one use

    array = np.asarray(array)
    if array.ndim > DIMS:
        raise OutputError(f"{path}: BART files hold at most {DIMS} dimensions, the array has {array.ndim}")
    header, data = cfl_pair(path)
    values = np.asfortranarray(array, dtype=np.complex64)
    payload = values.reshape(-1, order="F").view(np.uint8)
    return write_files([(header, header_text(array.shape).encode("ascii")), (data, payload)], protect=protect)
