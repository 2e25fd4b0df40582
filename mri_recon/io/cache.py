"""On-disk cache of Toeplitz point-spread functions.

The PSF depends only on the trajectory, the density weights and the matrix, so it is stored under a
SHA-256 of exactly those bytes. Each entry carries its shape, dtype and a checksum of its payload; an entry
that is truncated, corrupt or of the wrong shape is deleted and recomputed, never used. Entries are written
to a temporary file and renamed, so a crash never leaves a half-written entry under a valid name.

Default folder: ``$MRI_RECON_CACHE_DIR``, else ``$XDG_CACHE_HOME/mri-recon/psf``, else
``~/.cache/mri-recon/psf``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from .files import atomic_output

MAGIC = b"MRIRECON-PSF-1\n"
FORMAT_VERSION = 1


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

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()

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
        if array is None:
            with contextlib.suppress(OSError):
                path.unlink()
        return array

    def store(self, key: str, psf: np.ndarray) -> Path | None:
        """Write ``psf`` under ``key``; returns the path, or None when the folder is not writable."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with atomic_output(self.path(key)) as tmp:
                tmp.write_bytes(_encode(np.asarray(psf)))
        except Exception:  # noqa: BLE001 - a cache that cannot be written is not an error
            return None
        return self.path(key)


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
