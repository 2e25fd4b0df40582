"""Safe output files: write to a temporary file beside the target, then rename over it.

A crash or an error leaves no partial output, and an input file is never overwritten.

Temporary files are named ``.mri-recon.HOST.PID.RANDOM.tmp`` (at most 47 characters, whatever the target's
name, so that any target name the file system accepts can be written). ``HOST`` is a short hash of the host
name and the PID namespace, ``PID`` the writer's process id. A writer killed before its rename (SIGKILL,
power loss) leaves its temporary file behind; the next write into the same folder removes the stale ones:
those of this host whose writer is gone, and any of ours older than :data:`STALE_AGE_S`. Files written by
earlier versions (``.TARGET.XXXXXXXX.tmp``, from :func:`tempfile.mkstemp`) are removed after the same age.
Nothing else is ever touched.

An error while writing (a full disk, a quota, a file size limit, a read-only file system, a denied
permission) is one :class:`~mri_recon.errors.OutputError` naming the cause and the target (``no space left
on device writing out.h5 (...); nothing was written``); the temporary file is removed and an earlier file
at the target is left as it was. :func:`write_files` checks the free space against the bytes to write before
it writes any; HDF5 files are built in memory (:func:`memory_output`) so that the HDF5 library never meets a
failing write: a file whose close fails on a full disk leaves that library in a state that crashes the
process when it exits.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ..errors import OutputError

PREFIX = ".mri-recon."
STALE_AGE_S = 24 * 3600.0
"""Age (seconds since the last write) after which any temporary file of ours is taken as abandoned."""
NAME_MAX = 255
"""Longest file name (bytes) assumed when the file system does not say."""
PATH_MAX = 4096
"""Longest path (bytes, with its final NUL) the system accepts when it does not say (Linux's)."""
_TEMP = re.compile(r"^\.mri-recon\.([0-9a-f]{8})\.([0-9]{1,10})\.([0-9a-f]{12})\.tmp$")
_LEGACY = re.compile(r"^\.(.+)\.[a-z0-9_]{8}\.tmp$")
CAUSES = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
          errno.EFBIG: "file too large (over the file system's or this process's file size limit)",
          errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
          errno.EPERM: "operation not permitted", errno.ENAMETOOLONG: "file name too long",
          errno.EISDIR: "is a directory", errno.EIO: "input/output error"}
"""The words of the OS errors most often met when writing (others: the system's own words)."""


def _host_token() -> str:
    """8 hex digits naming this host and PID namespace: a PID means something only within both."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}|{namespace}".encode()).hexdigest()[:8]


TEMP_NAME_MAX = 47
"""Longest name of a temporary file (:func:`temp_name`)."""


def temp_name() -> str:
    """A fresh temporary file name of this process (``.mri-recon.HOST.PID.RANDOM.tmp``, 47 characters at most)."""
    return f"{PREFIX}{_host_token()}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists but belongs to someone else, or cannot be asked: keep the file
    return True


def is_stale(name: str, age_s: float, *, host: str | None = None) -> bool:
    """True when ``name`` is a temporary file of ours whose writer is gone or that is older than
    :data:`STALE_AGE_S` (``age_s``: seconds since it was last modified).

    Parameters
    ----------
    name
        A file name (no folder).
    age_s
        Seconds since the file's last modification.
    host
        This host's token (default: computed).
    """
    match = _TEMP.match(name)
    if match is None:
        return bool(_LEGACY.match(name)) and age_s > STALE_AGE_S
    if age_s > STALE_AGE_S:
        return True
    host = _host_token() if host is None else host
    return match.group(1) == host and int(match.group(2)) != os.getpid() and not _pid_alive(int(match.group(2)))


def clean_stale(folder: str | os.PathLike, *, target_name: str | None = None) -> list[Path]:
    """Remove our abandoned temporary files from ``folder``; returns those removed.

    Only names of our temporary-file pattern are considered (see the module docstring); files of earlier
    versions (``.TARGET.XXXXXXXX.tmp``) only when ``target_name`` is TARGET or ends with ``.psf`` (a PSF
    cache entry). Errors (a file removed meanwhile, a read-only folder) are ignored.
    """
    removed: list[Path] = []
    host, now = _host_token(), time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not name.endswith(".tmp") or not name.startswith("."):
            continue
        legacy = _LEGACY.match(name) if not name.startswith(PREFIX) else None
        if legacy is not None and legacy.group(1) != target_name and not legacy.group(1).endswith(".psf"):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or not is_stale(name, now - info.st_mtime, host=host):
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when ``a`` and ``b`` name the same existing file (or the same resolved path): ``a in FileSet([b])``."""
    return a in FileSet([b])


class FileSet:
    """Files to protect from being overwritten, checked many times at once (a batch's inputs against each of its
    outputs: one look at each input instead of one per input and output). A path is in the set when it is an
    existing file of the set (same device and inode) or resolves to one of the set's paths. A BART file
    stands for its pair: ``ksp``, ``ksp.cfl`` and ``ksp.hdr`` each put all three in the set."""

    def __init__(self, paths: Iterable[str | os.PathLike]) -> None:
        self._ids: set[tuple[int, int]] = set()
        self._paths: set[str] = set()
        for path in (member for given in paths for member in _with_pair(given)):
            with contextlib.suppress(OSError):
                info = os.stat(path)
                self._ids.add((info.st_dev, info.st_ino))
            self._paths.add(_resolved(path))

    def __contains__(self, path: str | os.PathLike) -> bool:
        try:
            info = os.stat(path)
        except OSError:
            info = None
        if info is not None and (info.st_dev, info.st_ino) in self._ids:
            return True
        return _resolved(path) in self._paths


def _with_pair(path: str | os.PathLike) -> list[str | os.PathLike]:
    """``path``, and for a BART name (``.cfl``, ``.hdr``, or a stem whose ``.cfl`` or ``.hdr`` exists) its
    stem, header and data file."""
    text = os.fspath(path)
    stem, suffix = os.path.splitext(text)
    if suffix not in (".cfl", ".hdr"):
        if not (os.path.exists(text + ".cfl") or os.path.exists(text + ".hdr")):
            return [path]
        stem = text
    return [path, stem, stem + ".cfl", stem + ".hdr"]


def _resolved(path: str | os.PathLike) -> str:
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):
        return os.path.abspath(path)


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return NAME_MAX


def _path_max() -> int:
    try:
        return int(os.pathconf("/", "PC_PATH_MAX"))
    except (OSError, ValueError, AttributeError):
        return PATH_MAX


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except OSError:  # missing, or a path the system cannot look up (too long, a loop of links)
        return False


def _why_not_writable(folder: Path) -> str:
    with contextlib.suppress(OSError, AttributeError):
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return CAUSES[errno.EROFS]
    return CAUSES[errno.EACCES]


def check_output(path: str | os.PathLike, *, protect: tuple[str | os.PathLike, ...] | FileSet = ()) -> Path:
    """Check that ``path`` can be written without replacing a protected input (``protect``: paths, or a
    :class:`FileSet` of many); returns its folder.

    Raises
    ------
    OutputError
        ``path`` names a protected file, a directory or an existing non-regular file (a device such as
        ``/dev/null``, a FIFO, a socket), its name is longer than the file system allows, or its folder is
        missing or not writable, or the path is longer than the system allows.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    length = len(os.fsencode(target.name))
    if not target.name or target.name in (".", ".."):
        raise OutputError(f"{target}: output path names no file")
    longest = _path_max() - 1  # without the final NUL
    size = len(os.fsencode(str(target)))
    if size > longest or len(os.fsencode(str(folder))) + 1 + TEMP_NAME_MAX > longest:
        raise OutputError(f"{str(target)[:80]}...: output path is {size} bytes long; the system allows at most "
                          f"{longest} (and the temporary file beside it needs {TEMP_NAME_MAX + 1} of them)")
    limit = _name_max(folder) if _is_dir(folder) else NAME_MAX
    if length > limit:
        raise OutputError(f"{str(target)[:80]}...: output file name is {length} bytes long; the file system "
                          f"allows at most {limit}")
    if target in (protect if isinstance(protect, FileSet) else FileSet(protect)):
        raise OutputError(f"{target}: output would overwrite the input file; choose another path")
    try:
        info = target.stat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise write_error(target, exc) from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise OutputError(f"{target}: output path is a directory")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise OutputError(f"{target}: exists and is not a regular file (a device, FIFO or socket); "
                          f"mri-recon writes a new file and renames it into place: choose a file path")
    if not _is_dir(folder):
        raise OutputError(f"{target}: output folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"{target}: output folder {folder} is not writable ({_why_not_writable(folder)}); "
                          f"nothing was written")
    return folder


def write_error(target: str | os.PathLike, exc: OSError) -> OutputError:
    """The one-line error of a failed write of ``target``: its cause (:data:`CAUSES`) and that nothing was
    written."""
    cause = CAUSES.get(exc.errno) or exc.strerror or str(exc).splitlines()[0]
    return OutputError(f"{cause} writing {target}; nothing was written")


def free_bytes(folder: str | os.PathLike) -> int | None:
    """Bytes this process may still write in ``folder``'s file system (None when it does not say)."""
    try:
        info = os.statvfs(folder)
    except (OSError, AttributeError):
        return None
    blocks = info.f_bfree if os.geteuid() == 0 else info.f_bavail  # root may use the reserved blocks
    return int(blocks) * int(info.f_frsize)


def check_space(target: str | os.PathLike, folder: str | os.PathLike, size: int) -> None:
    """Refuse to write ``size`` bytes for ``target`` into ``folder`` when its file system has less free.

    Raises
    ------
    OutputError
        Fewer than ``size`` bytes are free.
    """
    free = free_bytes(folder)
    if free is not None and size > free:
        raise OutputError(f"no space left on device writing {target} ({size} bytes to write, {free} free in "
                          f"{folder}); nothing was written")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *,
                  protect: tuple[str | os.PathLike, ...] | FileSet = ()) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success flush it to the disk and rename it to ``path``.

    ``protect`` lists input files that must never be replaced: naming one as ``path`` raises
    :class:`OutputError`. On any exception the temporary file is removed and ``path`` is untouched; an
    :class:`OSError` of the block, the flush or the rename becomes one :class:`OutputError` naming its cause
    (:func:`write_error`). Abandoned temporary files of earlier writers in the same folder are removed first
    (:func:`clean_stale`).
    """
    target = Path(path)
    folder = check_output(target, protect=protect)
    clean_stale(folder, target_name=target.name)
    tmp = folder / temp_name()
    umask = os.umask(0)
    os.umask(umask)
    try:
        # O_EXCL: a fresh file, never an existing one; the usual permissions of a new file (mkstemp's are 0600)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 & ~umask)
    except OSError as exc:
        raise write_error(target, exc) from None
    os.close(fd)
    try:
        try:
            yield tmp
            _flush(tmp)
            os.replace(tmp, target)
        except OSError as exc:
            raise write_error(target, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _flush(path: Path) -> None:
    """Make the file's data reach the disk now, so that a write the file system reports late (network file
    systems, delayed allocation) fails here, before the rename, and not after."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(path: Path, data: bytes | memoryview) -> None:
    """Write ``data`` to ``path`` and flush it to the disk (a late error is met here, before any rename)."""
    view = memoryview(data).cast("B")
    with open(path, "wb", buffering=0) as f:
        while view:
            view = view[f.write(view[: 1 << 26]):]
        os.fsync(f.fileno())


def write_file(path: str | os.PathLike, data: bytes | memoryview, *,
               protect: tuple[str | os.PathLike, ...] | FileSet = ()) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`write_files` of one file); returns ``path``.

    Raises
    ------
    OutputError
        See :func:`check_output`; too little free space (:func:`check_space`), or a failed write
        (:func:`write_error`): nothing is written then, and an earlier file at ``path`` is unchanged.
    """
    return write_files([(path, data)], protect=protect)[0]


def write_files(items: Sequence[tuple[str | os.PathLike, bytes | memoryview]], *,
                protect: tuple[str | os.PathLike, ...] | FileSet = ()) -> list[Path]:
    """Write each ``(path, data)`` atomically, all or none: the free space of each folder is checked against
    the bytes it is to get, every file is written to its temporary file, and only then are they renamed.

    Raises
    ------
    OutputError
        As for :func:`write_file`; a failure leaves none of them written (a failure of a rename itself, after
        the writes, leaves those renamed before it).
    """
    protected = protect if isinstance(protect, FileSet) else FileSet(protect)
    needed: dict[Path, tuple[str | os.PathLike, int]] = {}  # folder: (its first target, bytes to write there)
    for path, data in items:
        folder = check_output(path, protect=protected)
        first, size = needed.get(folder, (path, 0))
        needed[folder] = (first, size + memoryview(data).nbytes)
    for folder, (first, size) in needed.items():
        check_space(first, folder, size)
    with contextlib.ExitStack() as stack:
        for path, data in items:
            _write_all(stack.enter_context(atomic_output(path, protect=protected)), data)
    return [Path(p) for p, _ in items]


@contextlib.contextmanager
def memory_output(path: str | os.PathLike, *,
                  protect: tuple[str | os.PathLike, ...] | FileSet = ()) -> Iterator[io.BytesIO]:
    """Yield an in-memory file to build an HDF5 file in (``h5py.File(buffer, "w")``, or an
    ``ismrmrd.Dataset``; closed within the block); on success its bytes are written by :func:`write_file`.

    The HDF5 library then never writes to the disk itself: a full disk is met by :func:`write_file`, one
    clear error, instead of a failed close of the HDF5 file (a traceback, and a crash when the process exits).
    The output is checked first (:func:`check_output`), before the file is built.
    """
    check_output(path, protect=protect)
    buffer = io.BytesIO()
    yield buffer
    with buffer.getbuffer() as view:
        write_file(path, view, protect=protect)
