"""A small PNG writer for magnitude previews (8-bit grayscale), using only zlib.

3-D images are shown as their three central orthogonal slices side by side.
"""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np

from .files import atomic_output


def preview(image: np.ndarray) -> np.ndarray:
    """8-bit magnitude preview: 2-D as is, 3-D as the central slices side by side; scaled to the 99.5th
    percentile so a few bright voxels do not darken the picture."""
    mag = np.abs(np.asarray(image))
    # Array axis 0 is x: show x across and y down (rows are the second axis).
    if mag.ndim == 3:
        nx, ny, nz = mag.shape
        planes = [mag[:, :, nz // 2].T, mag[:, ny // 2, :].T, mag[nx // 2, :, :].T]
        height = max(p.shape[0] for p in planes)
        planes = [np.pad(p, ((0, height - p.shape[0]), (0, 0))) for p in planes]
        mag = np.concatenate(planes, axis=1)
    elif mag.ndim == 2:
        mag = mag.T
    else:
        raise ValueError(f"preview needs a 2-D or 3-D image, got shape {mag.shape}")
    top = float(np.percentile(mag, 99.5)) if mag.size else 0.0
    scaled = np.zeros(mag.shape) if top <= 0 else np.clip(mag / top, 0.0, 1.0)
    return np.round(scaled * 255).astype(np.uint8)


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def encode_png(pixels: np.ndarray) -> bytes:
    """PNG bytes of a 2-D uint8 array (grayscale)."""
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    height, width = pixels.shape
    raw = b"".join(b"\x00" + pixels[row].tobytes() for row in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 6))
            + _chunk(b"IEND", b""))


def write_png(path: str | os.PathLike, image: np.ndarray, *, protect: tuple = ()) -> None:
    """Write the magnitude preview of ``image`` to ``path`` (atomically)."""
    data = encode_png(preview(image))
    with atomic_output(path, protect=protect) as tmp:
        tmp.write_bytes(data)
