"""A small PNG writer for magnitude previews (8-bit grayscale), using only zlib.

A 2-D image is shown as it is (array axis 0 across, axis 1 down). A 3-D image, or a stack of 2-D images,
is a montage: its slices along the last axis (or the images of the stack) tiled in a grid, row by row, in
order. A stack of 3-D images shows the middle slice (last axis) of each image. One brightness scale (the
99.5th percentile of the whole montage) is used for every tile.
"""

from __future__ import annotations

import math
import os
import struct
import zlib

import numpy as np

from ..errors import OutputError
from .files import atomic_output


def check_png_name(path: str | os.PathLike) -> None:
    """Refuse a preview path whose name does not end in ``.png`` (a PNG under another name misleads).

    Raises
    ------
    OutputError
        The name has another extension, or none.
    """
    if not str(path).lower().endswith(".png"):
        raise OutputError(f"{path}: the preview is a PNG image; name it with the extension .png")


def _tiles(mag: np.ndarray, stacked: bool) -> tuple[list[np.ndarray], str]:
    """2-D tiles (rows = image axis 1) and what they show."""
    if stacked and mag.ndim == 3:
        return [t.T for t in mag], f"montage of the {mag.shape[0]} images of the stack"
    if stacked and mag.ndim == 4:
        middle = mag.shape[-1] // 2
        return [t[:, :, middle].T for t in mag], \
            f"montage of the {mag.shape[0]} images of the stack, slice {middle} of axis 2 of each"
    if not stacked and mag.ndim == 3:
        return [mag[:, :, k].T for k in range(mag.shape[2])], f"montage of the {mag.shape[2]} slices along axis 2"
    if not stacked and mag.ndim == 2:
        return [mag.T], "the image"
    kind = "a stack of 2-D or 3-D images" if stacked else "a 2-D or 3-D image"
    raise ValueError(f"preview needs {kind}, got shape {mag.shape}")


def montage(image: np.ndarray, *, stacked: bool = False) -> tuple[np.ndarray, str]:
    """8-bit magnitude preview and a sentence saying what it shows.

    Parameters
    ----------
    image
        A 2-D or 3-D image, or (``stacked``) several on a leading axis.
    stacked
        ``image``'s first axis is a stack of images.

    Returns
    -------
    pixels, description
        uint8 ``(rows, columns)``: tiles in a grid of ``ceil(sqrt(n))`` columns, unused tiles black; scaled
        to the 99.5th percentile so a few bright voxels do not darken the picture.
    """
    tiles, what = _tiles(np.abs(np.asarray(image)), stacked)
    height, width = tiles[0].shape
    columns = math.ceil(math.sqrt(len(tiles)))
    rows = math.ceil(len(tiles) / columns)
    mag = np.zeros((rows * height, columns * width))
    for n, tile in enumerate(tiles):
        r, c = divmod(n, columns)
        mag[r * height:(r + 1) * height, c * width:(c + 1) * width] = tile
    if len(tiles) > 1:
        what += f" ({rows} x {columns} grid, row by row)"
    top = float(np.percentile(mag, 99.5)) if mag.size else 0.0
    scaled = np.zeros(mag.shape) if top <= 0 else np.clip(mag / top, 0.0, 1.0)
    return np.round(scaled * 255).astype(np.uint8), what


def preview(image: np.ndarray) -> np.ndarray:
    """8-bit magnitude preview of one 2-D or 3-D image (:func:`montage` without the description)."""
    return montage(image)[0]


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


def write_png(path: str | os.PathLike, image: np.ndarray, *, stacked: bool = False, protect: tuple = ()) -> str:
    """Write the magnitude preview (:func:`montage`) of ``image`` to ``path`` atomically; returns what it
    shows.

    Raises
    ------
    OutputError
        ``path`` does not end in ``.png`` (:func:`check_png_name`), or cannot be written.
    """
    check_png_name(path)
    pixels, what = montage(image, stacked=stacked)
    data = encode_png(pixels)
    with atomic_output(path, protect=protect) as tmp:
        tmp.write_bytes(data)
    return what
