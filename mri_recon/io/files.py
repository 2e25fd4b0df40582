"""Safe output files: write to a temporary file beside the target, then rename over it.

A crash or an error leaves no partial output, and an input file is never overwritten.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import OutputError


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when ``a`` and ``b`` name the same existing file (or the same resolved path)."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.exists() and pb.exists():
            return pa.samefile(pb)
    except OSError:
        pass
    return pa.resolve() == pb.resolve()


def check_output(path: str | os.PathLike, *, protect: tuple[str | os.PathLike, ...] = ()) -> Path:
    """Check that ``path`` can be written without replacing a protected input; returns its folder.

    Raises :class:`OutputError` when ``path`` names a protected file or a directory, or when its folder is
    missing or not writable.
    """
    target = Path(path)
    for item in protect:
        if same_file(target, item):
            raise OutputError(f"{target}: output would overwrite the input file; choose another path")
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise OutputError(f"{target}: output path is a directory")
    if not folder.is_dir():
        raise OutputError(f"{target}: output folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"{target}: output folder {folder} is not writable")
    return folder


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, protect: tuple[str | os.PathLike, ...] = ()) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success rename it to ``path``.

    ``protect`` lists input files that must never be replaced: naming one as ``path`` raises
    :class:`OutputError`. On any exception the temporary file is removed and ``path`` is untouched.
    """
    target = Path(path)
    folder = check_output(target, protect=protect)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise OutputError(f"{target}: cannot create a file in {folder} ({exc.strerror})") from exc
    os.close(fd)
    tmp = Path(tmp_name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; an output file gets the usual permissions
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
