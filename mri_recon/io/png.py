"""A small PNG writer for magnitude previews (8-bit grayscale), using only zlib.

Display convention: that of BART's ``toimg`` and of ``matplotlib.pyplot.imshow`` (its default
``origin="upper"``) for the same array: element ``[0, 0]`` is the top-left pixel, array axis 0 runs down the
rows (top to bottom) and axis 1 across the columns (left to right), so ``image[i, j]`` is the pixel of row
``i``, column ``j``. (``toimg`` writes a cfl's first dimension as the rows: its PNG row ``i``, column ``j``
is ``data[j * dims[0] + i]``, element ``(i, j)`` of the column-major array, which is ``image[i, j]`` of the
same array read into NumPy.) A slice of a 3-D image keeps the order of its two remaining axes: the earlier
runs down, the later across.

A 2-D image is shown as it is. A 3-D image, or a stack of 2-D images,
is a montage: its slices across one axis (the last by default, or a chosen one), or the images of the stack,
tiled in a grid, row by row, in order. A stack of 3-D images shows the middle slice across that axis of each
image. One brightness scale (the
99.5th percentile of the whole montage) is used for every tile.
"""

from __future__ import annotations

import math
import os
import struct
import zlib

import numpy as np

from ..errors import OutputError
from .files import write_file


def check_png_name(path: str | os.PathLike) -> None:
    """Refuse a preview path whose name does not end in ``.png`` (a PNG under another name misleads).

    Raises
    ------
    OutputError
        The name has another extension, or none.
    """
    if not str(path).lower().endswith(".png"):
        raise OutputError(f"{path}: the preview is a PNG image; name it with the extension .png")


def _plane(volume: np.ndarray, axis: int, index: int) -> np.ndarray:
    """The 2-D plane ``index`` of a 3-D volume across ``axis``, rows = the earlier of the two remaining axes."""
    return np.take(volume, index, axis=axis)


def _tiles(mag: np.ndarray, stacked: bool, axis: int) -> tuple[list[np.ndarray], str]:
    """2-D tiles (rows = the earlier image axis, as ``imshow`` shows an array) and what they show."""
    if stacked and mag.ndim == 3:
        return list(mag), f"montage of the {mag.shape[0]} images of the stack"
    if stacked and mag.ndim == 4:
        middle = mag.shape[axis + 1] // 2
        return [_plane(t, axis, middle) for t in mag], \
            f"montage of the {mag.shape[0]} images of the stack, slice {middle} of axis {axis} of each"
    if not stacked and mag.ndim == 3:
        count = mag.shape[axis]
        return [_plane(mag, axis, k) for k in range(count)], f"montage of the {count} slices along axis {axis}"
    if not stacked and mag.ndim == 2:
        return [mag], "the image"
    kind = "a stack of 2-D or 3-D images" if stacked else "a 2-D or 3-D image"
    raise ValueError(f"preview needs {kind}, got shape {mag.shape}")


def montage(image: np.ndarray, *, stacked: bool = False, axis: int = 2) -> tuple[np.ndarray, str]:
    """8-bit magnitude preview and a sentence saying what it shows.

    Parameters
    ----------
    image
        A 2-D or 3-D image, or (``stacked``) several on a leading axis.
    stacked
        ``image``'s first axis is a stack of images.
    axis
        For 3-D images, the axis the slices are taken across (0, 1 or 2; default 2, the last).

    Returns
    -------
    pixels, description
        uint8 ``(rows, columns)``: tiles in a grid of ``ceil(sqrt(n))`` columns, unused tiles black; scaled
        to the 99.5th percentile so a few bright voxels do not darken the picture.
    """
    if axis not in (0, 1, 2):
        raise OutputError(f"preview axis must be 0, 1 or 2, found {axis!r}")
    tiles, what = _tiles(np.abs(np.asarray(image)), stacked, axis)
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


def write_png(path: str | os.PathLike, image: np.ndarray, *, stacked: bool = False, axis: int = 2,
              protect: tuple = ()) -> str:
    """Write the magnitude preview (:func:`montage`) of ``image`` to ``path`` atomically; returns what it
    shows.

    Raises
    ------
    OutputError
        ``path`` does not end in ``.png`` (:func:`check_png_name`), or cannot be written.
    """
    check_png_name(path)
    pixels, what = montage(image, stacked=stacked, axis=axis)
    data = encode_png(pixels)
    write_file(path, data, protect=protect)
    return what
