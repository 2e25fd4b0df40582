"""On-disk cache of Toeplitz point-spread functions.

The PSF depends only on the trajectory, the density weights and the matrix, so it is stored under
:func:`psf_key`, a SHA-256 of exactly those bytes, of the engine that computed it and of the mri-recon version.
Entries are written to a temporary file and renamed, so a crash never leaves a half-written entry under a
valid name.

What is trusted (the format and the checks: :mod:`mri_recon.io.cache_entry`): the folder is used only when it
belongs to this user and nobody else may write it (a new one is created with mode 0700; entries are written
0600). An entry is read only when it is a regular file (never through a symlink, never a FIFO or device) of
this user's that nobody else may write, exactly as large as the requested shape needs, holding the key it
is read for and a matching SHA-256 of its header and content. Anything else is refused with a logged warning
and the PSF is computed again (and the file under that entry's name replaced by the new entry): a file
planted or copied under an entry's name never changes an image. A folder that others may write is not used
at all (one warning; PSFs are computed, nothing is stored).

Default folder: ``$MRI_RECON_CACHE_DIR``, else ``$XDG_CACHE_HOME/mri-recon/psf``, else
``~/.cache/mri-recon/psf``.

Size cap: ``$MRI_RECON_CACHE_MAX`` bytes (default 8 GiB). After each store, the least recently used entries
(oldest modification time; a hit touches its entry) are removed until the folder's entries fit; an entry
larger than the cap is not kept. ``mri-recon cache info`` and ``mri-recon cache clear`` show and empty it.
Eviction and ``clear`` touch only the cache's own files: entries whose header checks out against their name
and size (this format's, or an earlier version's), empty lock files of this user's named ``KEY.psf.lock``,
and abandoned temporary files of mri-recon's own pattern; any other file in the folder stays.

Concurrent processes (the workers of a batch run) share one folder safely. Readers only ever see complete
entries (a rename is atomic, and every entry is checksummed). :meth:`PsfCache.fill` computes a missing entry
once: the process that computes it holds an exclusive lock on ``KEY.psf.lock`` (``fcntl.flock``; a lock is
released by the kernel when its process dies, even by SIGKILL), and the others wait for that lock, then read
the entry. Every process that held the lock and got the entry removes the lock file on its way out when it
is still the one it locked, so none is left after a fill; only a holder that fails (an error, a kill) leaves
it, for the next fill of that key to lock, use and remove (``clear`` removes it too). Where ``flock`` does not
work (some network file systems, Windows) several processes may compute the same entry; the last rename wins
and every version is complete, so nothing is corrupted.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._version import __version__
from ..arrays.backend import to_host
from ..errors import InvalidDataError, OutputError, printable
from .cache_entry import EntryRefused, check_key, folder_problem, header, own_entry, own_lock, read_entry, trust_problem
from .files import atomic_output, clean_stale

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, duplicate work possible, corruption not
    fcntl = None

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
DEFAULT_MAX_BYTES = 8 * 2**30
"""The cache's size cap without ``$MRI_RECON_CACHE_MAX``: 8 GiB (a 256^3 entry is about 1 GiB)."""


def max_bytes_from_env() -> int:
    """The size cap in bytes: ``$MRI_RECON_CACHE_MAX`` (a non-negative integer), else :data:`DEFAULT_MAX_BYTES`."""
    text = os.environ.get("MRI_RECON_CACHE_MAX", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidDataError(f"MRI_RECON_CACHE_MAX must be a whole number of bytes >= 0, found {text!r}")
    return value


@dataclass(frozen=True)
class CacheInfo:
    """What a cache folder holds."""

    directory: Path
    """The folder."""
    entries: int
    """Number of the cache's own entries (``*.psf`` files whose header it verified)."""
    total_bytes: int
    """Their total size in bytes."""
    max_bytes: int
    """The size cap in bytes."""
    problem: str | None = None
    """Why the folder is not used (someone else's, or writable by others), or None."""


def default_cache_dir() -> Path:
    if os.environ.get("MRI_RECON_CACHE_DIR"):
        return Path(os.environ["MRI_RECON_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mri-recon" / "psf"


def psf_key(trajectory: np.ndarray, weights: np.ndarray | None, matrix: tuple[int, ...],
            engine: str = "", version: str = __version__) -> str:
    """SHA-256 of the PSF's inputs (trajectory and weights as float32, matrix as int64), of the engine
    that computes it (``"exact"``, ``"nufft"``, ``"gpu"``: a cache hit gives that engine's bits) and of the
    mri-recon ``version`` that computes it (another version computes its own entries)."""
    digest = hashlib.sha256()
    digest.update(b"psf-v%d" % FORMAT_VERSION)
    digest.update(b"mri-recon:" + version.encode() + b"\0")
    digest.update(b"engine:" + engine.encode() + b"\0")
    digest.update(np.asarray(matrix, dtype=np.int64).tobytes())
    traj = np.ascontiguousarray(to_host(trajectory), dtype=np.float32)  # NumPy or CuPy
    digest.update(np.asarray(traj.shape, dtype=np.int64).tobytes())
    # memoryviews, not copies: hashlib then hashes large buffers without holding the GIL, so a lookup on
    # a helper thread does not stall the thread that feeds the GPU
    digest.update(memoryview(traj).cast("B"))
    if weights is None:
        digest.update(b"no-weights")
    else:
        digest.update(memoryview(np.ascontiguousarray(to_host(weights), dtype=np.float32)).cast("B"))
    return digest.hexdigest()


class PsfCache:
    """A folder of PSF entries, one file per key."""

    def __init__(self, directory: str | os.PathLike | None = None, max_bytes: int | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.max_bytes = max_bytes_from_env() if max_bytes is None else int(max_bytes)
        if self.max_bytes < 0:
            raise InvalidDataError(f"the cache's max_bytes must be >= 0, found {self.max_bytes}")
        self._warned: set[str] = set()

    def path(self, key: str) -> Path:
        """The entry file of ``key`` (1-128 letters, digits, ``-`` or ``_``; :func:`psf_key` gives 64 hex digits)."""
        return self.directory / f"{check_key(key)}.psf"

    def _lock_path(self, key: str) -> Path:
        return self.directory / f"{check_key(key)}.psf.lock"

    def _usable(self, create: bool = False) -> bool:
        """Whether the folder may be used: it exists (created with mode 0700 when ``create``), belongs to this
        user and nobody else may write it. A refused folder is logged once per cache object."""
        if not os.path.isdir(self.directory):
            if not create:
                return False
            with contextlib.suppress(OSError):
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = folder_problem(self.directory)
        if problem is not None and problem not in self._warned:
            self._warned.add(problem)
            log.warning("PSF cache folder %s not used: %s; PSFs are computed and not stored (use a folder of "
                        "your own that only you may write: chmod 700, or another --cache-dir)",
                        ascii(str(self.directory)), problem)
        return problem is None

    def load(self, key: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """The cached PSF for ``key`` with ``shape`` (read-only), or None: absent, or refused (logged as a
        warning, and the file under the entry's name removed: the recomputed entry takes its place)."""
        path = self.path(key)
        if not self._usable():
            return None
        try:
            array = read_entry(path, key, tuple(shape))
        except FileNotFoundError:
            return None
        except (OSError, EntryRefused) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            log.warning("PSF cache entry %s refused (%s); the PSF is computed again", ascii(str(path)), reason)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        with contextlib.suppress(OSError, NotImplementedError):
            os.utime(path, follow_symlinks=False)  # recently used: evicted last
        return array

    def store(self, key: str, psf: np.ndarray) -> Path | None:
        """Write ``psf`` under ``key`` (mode 0600); returns the path, or None when the folder is not usable or
        not writable."""
        path = self.path(key)
        psf = np.ascontiguousarray(psf, dtype=np.complex64)
        payload = memoryview(psf.reshape(-1).view(np.uint8))
        head = header(key, psf.shape, payload)
        if not self._usable(create=True):
            return None
        try:
            with atomic_output(path) as tmp:
                os.chmod(tmp, 0o600)
                with open(os.open(tmp, os.O_WRONLY | os.O_TRUNC | _NOFOLLOW), "wb") as f:
                    f.write(head)
                    f.write(payload)
        except Exception:  # noqa: BLE001 - a cache that cannot be written is not an error
            return None
        self.evict()
        return path if path.exists() else None

    def _open_lock(self, key: str) -> int | None:
        """A descriptor of ``KEY.psf.lock`` (created 0600), or None when the folder or the file cannot be used."""
        if not self._usable(create=True):
            return None
        try:
            fd = os.open(self._lock_path(key), os.O_RDWR | os.O_CREAT | _NOFOLLOW | _NONBLOCK, 0o600)
        except OSError:
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or trust_problem(info, "the lock file") is not None:
            os.close(fd)
            return None
        return fd

    def _remove_lock_file(self, key: str, fd: int) -> None:
        """Remove the lock file while its lock is held, when the name still refers to the file locked (a
        newer lock file, created after this one was removed, may be held by another process)."""
        with contextlib.suppress(OSError):
            held, named = os.fstat(fd), os.lstat(self._lock_path(key))
            if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
                self._lock_path(key).unlink()

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[bool]:
        """Hold the exclusive lock of ``key`` (``KEY.psf.lock`` in the folder) for the block; yields whether the
        lock is held (False when the folder cannot be used or the file system has no ``flock``). When the block
        ends without an error, the lock file is removed (it stays after an error, for the next one to lock)."""
        fd = self._open_lock(key)
        held = False
        try:
            if fd is not None and fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    held = True
                except OSError:
                    held = False
            yield held
            if fd is not None:  # held, or no flock here (then nobody holds it)
                self._remove_lock_file(key, fd)
        finally:
            if fd is not None:
                os.close(fd)  # releases the lock

    def fill(self, key: str, shape: tuple[int, ...],
             compute: Callable[[], np.ndarray]) -> tuple[np.ndarray, str]:
        """The entry of ``key``, computed by ``compute()`` (a host array of ``shape``) and stored when it is
        absent, by one process at a time: a process that finds the key being computed waits for it and reads
        the result. Returns ``(psf, "hit" | "miss")``; ``"miss"`` means this call computed it."""
        with self.locked(key) as held:
            found = self.load(key, shape)
            if found is not None:
                log.debug("PSF %s: read under its lock", key[:12])
                return found, "hit"
            if not held:
                log.debug("PSF %s: computed without a lock", key[:12])
            psf = np.asarray(compute())
            self.store(key, psf)
            return psf, "miss"

    def _entries(self) -> list[tuple[float, int, Path]]:
        """``(modification time, bytes, path)`` of every entry of this cache's, oldest first."""
        found = []
        with contextlib.suppress(OSError), os.scandir(self.directory) as listing:
            for item in listing:
                info = own_entry(Path(item.path)) if item.name.endswith(".psf") else None
                if info is not None:
                    found.append((info.st_mtime, info.st_size, Path(item.path)))
        return sorted(found)

    def evict(self) -> list[Path]:
        """Remove the least recently used entries until the rest fit ``max_bytes``; returns those removed."""
        entries = self._entries()
        total = sum(size for _, size, _ in entries)
        removed = []
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
            total -= size
        return removed

    def info(self) -> CacheInfo:
        """The folder, its number of entries and their total size, and why the folder is refused (if it is)."""
        entries = self._entries()
        problem = folder_problem(self.directory) if os.path.exists(self.directory) else None
        return CacheInfo(self.directory, len(entries), sum(size for _, size, _ in entries), self.max_bytes,
                         problem)

    def clear(self) -> list[Path]:
        """Remove the cache's own files: its entries, its abandoned lock files and its abandoned temporary
        files; any other file stays. Returns what was removed; a missing folder holds nothing. Raises
        :class:`~mri_recon.errors.OutputError` when the cache's path is not a folder."""
        if os.path.lexists(self.directory) and not os.path.isdir(self.directory):
            raise OutputError(f"{printable(self.directory)}: is not a folder, so it holds no PSF cache; nothing "
                              f"was removed")
        removed, locks = [], []
        with contextlib.suppress(OSError), os.scandir(self.directory) as listing:
            locks = [Path(item.path) for item in listing if own_lock(Path(item.path))]
        for path in [path for _, _, path in self._entries()] + locks:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
        return removed + clean_stale(self.directory, target_name="entry.psf")
