"""The PSF cache's files: the entry format, and reading a file of a folder that someone else may have written to.

An entry (format 2) is a fixed header followed by the PSF, all little-endian:

=========  =========  ===============================================================================
bytes      field      content
=========  =========  ===============================================================================
16         magic      ``MRIRECON-PSF-2\\n\\0``
128        key        the key the entry was computed for (ASCII, zero-padded): for the pipeline,
                      :func:`mri_recon.io.cache.psf_key`'s SHA-256 of trajectory, weights, matrix,
                      engine and mri-recon version
4          ndim       uint32, 1 to 8
4          dtype      uint32, 1 = complex64
64         shape      8 uint64 (unused ones 0)
32         checksum   SHA-256 of the 216 bytes before it and of the payload
any        payload    ``prod(shape) * 8`` bytes, complex64, C order
=========  =========  ===============================================================================

A file is read only when it is a regular file (``lstat``, then opened with ``O_NOFOLLOW | O_NONBLOCK`` and
checked again with ``fstat``: a symlink, FIFO or device is never opened for reading), owned by this user,
writable by nobody else and exactly as large as the entry asked for; then its key, shape and checksum must
match. Nothing read is unpickled or evaluated: the payload is taken with :func:`numpy.frombuffer`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import re
import stat
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..errors import InvalidDataError

MAGIC = b"MRIRECON-PSF-2\n\0"
MAGIC_V1 = b"MRIRECON-PSF-1\n"
"""Entries of format 1, not bound to their key (never read any more; eviction and ``clear`` remove them)."""
KEY = re.compile(r"^[0-9A-Za-z_-]{1,128}$")
_FIELDS = struct.Struct("<16s128sII8Q")
HEADER_BYTES = _FIELDS.size + 32
_COMPLEX64 = 1
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


class EntryRefused(Exception):
    """A file that is not a usable entry; the message says why (raised and caught inside :mod:`mri_recon.io`)."""


def check_key(key: str) -> str:
    """``key``, when it is a plain file name stem (1-128 letters, digits, ``-`` or ``_``)."""
    if not isinstance(key, str) or not KEY.match(key):
        raise InvalidDataError(f"a PSF cache key is 1-128 letters, digits, '-' or '_', found {key!r:.80}")
    return key


def entry_bytes(shape: tuple[int, ...]) -> int:
    """Size in bytes of the entry of a PSF of ``shape``."""
    return HEADER_BYTES + math.prod(int(n) for n in shape) * 8  # Python integers: no overflow


def _uid() -> int | None:
    getuid = getattr(os, "getuid", None)
    return getuid() if getuid is not None else None


def trust_problem(info: os.stat_result, what: str) -> str | None:
    """Why a file or folder with ``lstat``/``fstat`` result ``info`` cannot be trusted (someone else owns it or
    may write it), or None."""
    uid = _uid()
    if uid is not None and info.st_uid != uid:
        return f"{what} is owned by uid {info.st_uid}, not by this user (uid {uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def folder_problem(directory: Path) -> str | None:
    """Why the cache folder cannot be used (not a folder, someone else's or writable by others), or None."""
    try:
        info = os.stat(directory)  # a symlink to a folder of this user's is fine: its target is checked
    except OSError as exc:
        return f"the folder cannot be read ({exc.strerror})"
    if not stat.S_ISDIR(info.st_mode):
        return "the path is not a folder"
    return trust_problem(info, "the folder")


@contextlib.contextmanager
def open_regular(path: Path, size: int | None = None) -> Iterator[tuple[int, os.stat_result]]:
    """A read-only descriptor of ``path`` when it is a regular file of this user's that nobody else may write
    (of ``size`` bytes when given); raises :class:`EntryRefused` (or ``FileNotFoundError``) otherwise."""
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise EntryRefused("not a regular file (a symlink, FIFO, device or folder)")
    try:
        fd = os.open(path, _OPEN_FLAGS)  # O_NOFOLLOW: a symlink swapped in meanwhile is not followed
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise EntryRefused(f"cannot be opened ({exc.strerror})") from exc
    try:
        info = os.fstat(fd)  # a complete entry renamed into place meanwhile is as good as the one seen
        if not stat.S_ISREG(info.st_mode):
            raise EntryRefused("not a regular file (swapped while it was opened)")
        problem = trust_problem(info, "the entry")
        if problem is not None:
            raise EntryRefused(problem)
        if size is not None and info.st_size != size:
            raise EntryRefused(f"{info.st_size} bytes long, expected {size}")
        yield fd, info
    finally:
        os.close(fd)


def _read_exactly(fd: int, size: int, offset: int = 0) -> bytearray:
    """``size`` bytes of ``fd`` from ``offset`` (fewer when the file ends first), read straight into one buffer."""
    buffer = bytearray(size)
    view, done = memoryview(buffer), 0
    os.lseek(fd, offset, os.SEEK_SET)
    with io.FileIO(fd, "rb", closefd=False) as f:
        while done < size:
            count = f.readinto(view[done:])
            if not count:
                return buffer[:done]
            done += count
    return buffer


def header(key: str, shape: tuple[int, ...], payload: memoryview) -> bytes:
    """The header of the entry of ``key`` holding ``payload`` (complex64 bytes of an array of ``shape``)."""
    if not 1 <= len(shape) <= 8:
        raise InvalidDataError(f"a cached PSF has 1 to 8 dimensions, found {len(shape)}")
    fields = _FIELDS.pack(MAGIC, check_key(key).encode("ascii"), len(shape), _COMPLEX64,
                          *(tuple(shape) + (0,) * (8 - len(shape))))
    digest = hashlib.sha256(fields)
    digest.update(payload)
    return fields + digest.digest()


def read_entry(path: Path, key: str, shape: tuple[int, ...]) -> np.ndarray:
    """The PSF in the entry at ``path`` (read-only), when it is the entry of ``key`` with ``shape``; raises
    :class:`EntryRefused` saying why not (``FileNotFoundError`` when there is none)."""
    size = entry_bytes(shape)
    with open_regular(path, size) as (fd, _):
        blob = _read_exactly(fd, size)
    if len(blob) != size:
        raise EntryRefused(f"ends after {len(blob)} bytes, expected {size}")
    view = memoryview(blob)
    magic, stored, ndim, dtype, *dims = _FIELDS.unpack_from(blob)
    if magic != MAGIC:
        raise EntryRefused("not an entry of this format")
    stored = stored.rstrip(b"\0").decode("ascii", "replace")
    if stored != key:
        raise EntryRefused(f"the entry of another key ({stored[:128]!r})")
    if dtype != _COMPLEX64 or tuple(dims[:ndim]) != tuple(shape) or any(dims[ndim:]):
        raise EntryRefused(f"holds dtype code {dtype} and shape {tuple(dims[:ndim])}, expected complex64 {shape}")
    digest = hashlib.sha256(view[:_FIELDS.size])
    digest.update(view[HEADER_BYTES:])
    if digest.digest() != bytes(view[_FIELDS.size:HEADER_BYTES]):
        raise EntryRefused("its checksum does not match its content")
    array = np.frombuffer(blob, dtype=np.complex64, offset=HEADER_BYTES).reshape(shape)
    array.flags.writeable = False
    return array


def own_entry(path: Path) -> os.stat_result | None:
    """``lstat`` of ``path`` when it is an entry this cache wrote (format 2, or format 1 of earlier versions: a
    regular file of this user's whose header is consistent with its name and size), else None. Only the header
    is read."""
    try:
        with open_regular(path) as (fd, info):
            head = bytes(_read_exactly(fd, HEADER_BYTES))
    except (OSError, EntryRefused):
        return None
    if head.startswith(MAGIC) and len(head) == HEADER_BYTES:
        _, stored, ndim, dtype, *dims = _FIELDS.unpack_from(head)
        shape = tuple(dims[:ndim])
        consistent = (stored.rstrip(b"\0") == path.stem.encode() and dtype == _COMPLEX64 and 1 <= ndim <= 8
                      and info.st_size == entry_bytes(shape))
        return info if consistent else None
    if head.startswith(MAGIC_V1):
        return info if _v1_consistent(path, head, info.st_size) else None
    return None


def _v1_consistent(path: Path, head: bytes, size: int) -> bool:
    """Whether a format-1 entry's JSON header (shape, complex64) accounts for its size (header read whole)."""
    start = len(MAGIC_V1) + 4
    if len(head) < start:
        return False
    length = int.from_bytes(head[len(MAGIC_V1):start], "little")
    if length > 4096:
        return False
    try:
        with open_regular(path) as (fd, _):
            text = bytes(_read_exactly(fd, length, start))
        fields = json.loads(text)
        count = math.prod(int(n) for n in fields["shape"])
    except (OSError, EntryRefused, ValueError, TypeError, KeyError, RecursionError):
        return False
    return fields.get("dtype") == "complex64" and size == start + length + 8 * count


def own_lock(path: Path) -> bool:
    """Whether ``path`` is a lock file of this cache: ``KEY.psf.lock`` (``KEY.lock``, a 64-digit key, in
    earlier versions), an empty regular file of this user's."""
    name = path.name
    if name.endswith(".psf.lock"):
        stem = name[:-len(".psf.lock")]
    elif name.endswith(".lock") and re.fullmatch(r"[0-9a-f]{64}\.lock", name):
        stem = name[:-len(".lock")]
    else:
        return False
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (bool(KEY.match(stem)) and stat.S_ISREG(info.st_mode) and info.st_size == 0
            and trust_problem(info, "") is None)
