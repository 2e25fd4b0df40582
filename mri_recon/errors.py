"""Exception hierarchy of mri-recon.

The library raises these and never prints or exits; the command-line interface turns them into one-line
messages. Every message names what was expected and what was found; text taken from a file goes through
:func:`printable` first; lists of names go through :func:`listed`.
"""

from __future__ import annotations

from collections.abc import Iterable


class MriReconError(Exception):
    """Base class of every error mri-recon raises on purpose."""


class ScanFileError(MriReconError):
    """The scan file cannot be opened or is not HDF5 (missing, a directory, corrupt)."""


class SchemaError(MriReconError):
    """A dataset or attribute is missing, or has the wrong dtype, rank or shape."""


class ExternalDataError(SchemaError):
    """The file reaches outside itself (an external link, external raw storage, a virtual dataset) without the
    opt-in, or a file it reaches with the opt-in is missing or too short."""


class InvalidDataError(MriReconError):
    """Values are unusable: NaN or Inf, empty arrays, non-positive or absurd sizes."""


class TrajectoryUnitsError(MriReconError):
    """The trajectory extent does not fit the matrix (most often: wrong units)."""


class DeviceError(MriReconError):
    """The requested compute device is unavailable (no CuPy, no GPU, bad index)."""


class ResourceError(MriReconError):
    """The problem does not fit in host or device memory."""


class FilterError(MriReconError):
    """A convolution filter is invalid (even size, too large for constant memory, wrong rank)."""


class OutputError(MriReconError):
    """An output file cannot be written (unwritable path, would overwrite the input)."""


class KernelError(MriReconError):
    """A CUDA kernel failed to compile, or a constant-memory upload does not fit."""


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(value: object) -> str:
    """``str(value)`` with every non-printable character escaped (``\\x1b``, ``\\n``, ``\\u202e``, ...).

    Strings from files (group and dataset names, header text, attribute values) pass through this before they
    reach a message, so a name holding a terminal escape sequence shows as text instead of acting on the
    terminal. A printable string comes back unchanged.
    """
    text = str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _NAMED.get(ch) or _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def listed(names: Iterable[object], last: str = "or", quote: bool = False) -> str:
    """Names in a message: ``"a, b or c"`` (``last="and"``: ``"a, b and c"``; ``quote``: each as ``repr``
    writes it), so that a message listing a registry's names follows the registry."""
    shown = [repr(n) if quote else str(n) for n in names]
    return ", ".join(shown) if len(shown) < 2 else f"{', '.join(shown[:-1])} {last} {shown[-1]}"
