"""On-disk cache of Toeplitz point-spread functions.

The PSF depends only on the trajectory, the density weights and the matrix, so it is stored under a
SHA-256 of exactly those bytes. Each entry carries its shape, dtype and a checksum of its payload; an entry
that is truncated, corrupt or of the wrong shape is deleted and recomputed, never used. Entries are written
to a temporary file and renamed, so a crash never leaves a half-written entry under a valid name.

Default folder: ``$MRI_RECON_CACHE_DIR``, else ``$XDG_CACHE_HOME/mri-recon/psf``, else
``~/.cache/mri-recon/psf``.

Size cap: ``$MRI_RECON_CACHE_MAX`` bytes (default 8 GiB). After each store, the least recently used entries
(oldest modification time; a hit touches its entry) are removed until the folder's entries fit; an entry
larger than the cap is not kept. ``mri-recon cache info`` and ``mri-recon cache clear`` show and empty it.

Concurrent processes (the workers of a batch run) share one folder safely. Readers only ever see complete
entries (a rename is atomic, and every entry is checksummed). :meth:`PsfCache.fill` computes a missing entry
once: the process that computes it holds an exclusive lock on ``KEY.lock`` (``fcntl.flock``; a lock is
released by the kernel when its process dies, even by SIGKILL), and the others wait for that lock, then read
the entry; the lock file is removed once the entry is stored (one left by a killed process is reused, and
``clear`` removes it). Where ``flock`` does not work (some network file systems, Windows) several processes
may compute the same entry; the last rename wins and every version is complete, so nothing is corrupted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InvalidDataError
from .files import clean_stale, write_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, duplicate work possible, corruption not
    fcntl = None

log = logging.getLogger(__name__)

MAGIC = b"MRIRECON-PSF-1\n"
FORMAT_VERSION = 1
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
    """Number of ``*.psf`` entries."""
    total_bytes: int
    """Their total size in bytes."""
    max_bytes: int
    """The size cap in bytes."""


def default_cache_dir() -> Path:
    if os.environ.get("MRI_RECON_CACHE_DIR"):
        return Path(os.environ["MRI_RECON_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mri-recon" / "psf"


def psf_key(trajectory: np.ndarray, weights: np.ndarray | None, matrix: tuple[int, ...],
            engine: str = "") -> str:
    """SHA-256 of the PSF's inputs (trajectory and weights as float32, matrix as int64) and of the engine
    that computes it (``"exact"``, ``"nufft"``, ``"gpu"``: a cache hit gives that engine's bits)."""
    digest = hashlib.sha256()
    digest.update(b"psf-v%d" % FORMAT_VERSION)
    digest.update(b"engine:" + engine.encode())
    digest.update(np.asarray(matrix, dtype=np.int64).tobytes())
    traj = np.ascontiguousarray(np.asarray(trajectory), dtype=np.float32)
    digest.update(np.asarray(traj.shape, dtype=np.int64).tobytes())
    # memoryviews, not copies: hashlib then hashes large buffers without holding the GIL, so a lookup on
    # a helper thread does not stall the thread that feeds the GPU
    digest.update(memoryview(traj).cast("B"))
    if weights is None:
        digest.update(b"no-weights")
    else:
        digest.update(memoryview(np.ascontiguousarray(np.asarray(weights), dtype=np.float32)).cast("B"))
    return digest.hexdigest()


class PsfCache:
    """A folder of PSF entries, one file per key."""

    def __init__(self, directory: str | os.PathLike | None = None, max_bytes: int | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.max_bytes = max_bytes_from_env() if max_bytes is None else int(max_bytes)
        if self.max_bytes < 0:
            raise InvalidDataError(f"the cache's max_bytes must be >= 0, found {self.max_bytes}")

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.psf"

    def load(self, key: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """The cached PSF for ``key`` with ``shape`` (read-only), or None (absent or invalid; invalid ones are
        removed)."""
        path = self.path(key)
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        array = _decode(blob, shape)
        with contextlib.suppress(OSError):
            if array is None:
                path.unlink()
            else:
                os.utime(path)  # recently used: evicted last
        return array

    def store(self, key: str, psf: np.ndarray) -> Path | None:
        """Write ``psf`` under ``key``; returns the path, or None when the folder is not writable."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_file(self.path(key), _encode(np.asarray(psf)))
        except Exception:  # noqa: BLE001 - a cache that cannot be written is not an error
            return None
        self.evict()
        return self.path(key) if self.path(key).exists() else None

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[bool]:
        """Hold the exclusive lock of ``key`` (``KEY.lock`` in the folder) for the block; yields whether the
        lock is held (False when the folder cannot be written or the file system has no ``flock``)."""
        fd = None
        with contextlib.suppress(OSError):
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.directory / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        held = False
        try:
            if fd is not None and fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    held = True
                except OSError:
                    held = False
            yield held
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
                log.debug("PSF %s: read after waiting for its lock", key[:12])
                return found, "hit"
            if not held:
                log.debug("PSF %s: computed without a lock (no flock here)", key[:12])
            psf = np.asarray(compute())
            self.store(key, psf)
            # The entry exists now, so the lock has done its job: removed while held (a process still waiting
            # on it reads the entry; a newcomer finds the entry before it would lock)
            with contextlib.suppress(OSError):
                (self.directory / f"{key}.lock").unlink()
            return psf, "miss"

    def _entries(self) -> list[tuple[float, int, Path]]:
        """``(modification time, bytes, path)`` of every entry, oldest first."""
        found = []
        for path in self.directory.glob("*.psf"):
            with contextlib.suppress(OSError):
                info = path.stat()
                found.append((info.st_mtime, info.st_size, path))
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
        """The folder, its number of entries and their total size."""
        entries = self._entries()
        return CacheInfo(self.directory, len(entries), sum(size for _, size, _ in entries), self.max_bytes)

    def clear(self) -> list[Path]:
        """Remove every entry (``*.psf``), the lock files (``*.lock``) and our abandoned temporary files; other
        files stay. Returns what was removed."""
        removed = []
        locks = [(0.0, 0, path) for path in self.directory.glob("*.lock")]
        for _, _, path in self._entries() + locks:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
        return removed + clean_stale(self.directory, target_name="entry.psf")


def _encode(psf: np.ndarray) -> bytes:
    payload = np.ascontiguousarray(psf, dtype=np.complex64).tobytes()
    header = json.dumps({"shape": list(psf.shape), "dtype": "complex64",
                         "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    return MAGIC + len(header).to_bytes(4, "little") + header + payload


def _decode(blob: bytes, shape: tuple[int, ...]) -> np.ndarray | None:
    """The entry's array (read-only, sharing ``blob``'s memory), or None when anything does not check out."""
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 4:
        return None
    start = len(MAGIC) + 4
    size = int.from_bytes(blob[len(MAGIC):start], "little")
    try:
        header = json.loads(blob[start:start + size])
    except ValueError:
        return None
    payload = memoryview(blob)[start + size:]
    if (not isinstance(header, dict) or header.get("dtype") != "complex64"
            or tuple(header.get("shape", ())) != tuple(shape)
            or len(payload) != int(np.prod(shape)) * 8
            or hashlib.sha256(payload).hexdigest() != header.get("sha256")):
        return None
    return np.frombuffer(payload, dtype=np.complex64).reshape(shape)
