"""NumPy output: the image stack as one .npy array (leading axes: stack.layout.axes).

The worked example of docs/architecture.md, "Where to add an output format": this file is
``mri_recon/io/npy_image.py`` with one entry, ``npy_image.FORMAT``, in ``OUTPUTS`` of
``mri_recon/io/writers.py``. ``tests/test_examples.py`` loads it there and writes with it.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from .files import write_file
from .outputs import ImageStack, OutputFormat


def npy_values(complex_: bool, magnitude: bool) -> str:
    """The magnitude, or the complex image with ``complex_``."""
    del magnitude
    return "complex" if complex_ else "magnitude"


def write_npy(output: str | os.PathLike, stack: ImageStack, *, complex_: bool = False,
              magnitude: bool = False, protect: tuple = ()) -> list[Path]:
    """Write every image of ``stack`` as one array (complex64, or its magnitude in float32) to ``output``."""
    del magnitude
    buffer = io.BytesIO()
    np.save(buffer, stack.image if complex_ else np.abs(stack.image), allow_pickle=False)
    write_file(output, buffer.getvalue(), protect=protect)
    return [Path(output)]


FORMAT = OutputFormat("npy", "NumPy", (".npy",), ".npy", write_npy, values=npy_values,
                      shown="{label}, {values}")
