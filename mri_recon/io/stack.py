"""The images of one MRD scan as named axes: which dimensions exist, choosing some, and the output layout.

An ISMRMRD file holds one image per combination of the acquisition headers' ``idx.slice``, ``idx.contrast``,
``idx.phase``, ``idx.set`` and ``idx.repetition`` (:data:`DIMENSIONS`, the fixed order of the output axes).
Each image is keyed by a dictionary of those five values. :func:`select` keeps the images that match a
choice; :func:`stack_layout` arranges a list of keys as a grid: one axis per dimension that takes more than
one value, in the order of :data:`DIMENSIONS`, with the images in C order (the last named axis fastest).
A set of images that is not a complete grid (e.g. slice 0 of repetition 0 and slice 1 of repetition 2 only)
keeps one axis, ``"image"``, in the order given.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import SchemaError

DIMENSIONS = ("slice", "contrast", "phase", "set", "repetition")
"""The MRD image dimensions mri-recon reconstructs separately, in the order of the output axes."""
IMAGE_AXES = ("x", "y", "z")
"""Names of the image's own axes (0, 1 and, for 3-D, 2) in the ``axes`` output attribute."""
_PLURAL = {"slice": "slices", "contrast": "contrasts", "phase": "phases", "set": "sets",
           "repetition": "repetitions"}


@dataclass(frozen=True)
class StackLayout:
    """How a list of images forms the leading axes of the output (see the module docstring)."""

    axes: tuple[str, ...]
    """Names of the leading axes: dimensions of :data:`DIMENSIONS`, ``("image",)``, or none (one image)."""
    shape: tuple[int, ...]
    """Their sizes; their product is the number of images."""

    def names(self, ndim: int) -> list[str]:
        """The names of every axis of the output image: the leading ones, then ``x``, ``y`` (and ``z``)."""
        return [*self.axes, *IMAGE_AXES[:ndim]]


def describe(keys: Sequence[Mapping[str, int]]) -> str:
    """``"slices [0, 1], contrasts [0], phases [0], sets [0], repetitions [0, 2]"``: the values present."""
    return ", ".join(f"{_PLURAL[name]} {sorted({int(k.get(name, 0)) for k in keys})}" for name in DIMENSIONS)


def select(keys: Sequence[Mapping[str, int]], source: str, **chosen: int | None) -> list[int]:
    """Positions of the keys that match every value in ``chosen`` (``None``: any value).

    Parameters
    ----------
    keys
        One dictionary of :data:`DIMENSIONS` values per image.
    source
        The file, named in the error.
    **chosen
        ``slice=``, ``contrast=``, ``phase=``, ``set=``, ``repetition=``.

    Raises
    ------
    SchemaError
        No image matches; the message names the values the file holds.
    """
    wanted = {name: int(value) for name, value in chosen.items() if value is not None}
    unknown = sorted(set(wanted) - set(DIMENSIONS))
    if unknown:
        raise SchemaError(f"{source}: unknown image dimension(s) {unknown}; expected {', '.join(DIMENSIONS)}")
    rows = [i for i, key in enumerate(keys) if all(int(key.get(n, 0)) == v for n, v in wanted.items())]
    if not rows:
        asked = ", ".join(f"{name} {wanted[name]}" for name in DIMENSIONS if name in wanted)
        raise SchemaError(f"{source}: no data for {asked} (file holds {describe(keys)})")
    return rows


def stack_layout(keys: Sequence[Mapping[str, int]]) -> StackLayout:
    """The leading output axes of the images with these keys, in the order given (see the module docstring)."""
    if len(keys) <= 1:
        return StackLayout((), ())
    values = {name: sorted({int(k.get(name, 0)) for k in keys}) for name in DIMENSIONS}
    names = tuple(name for name in DIMENSIONS if len(values[name]) > 1)
    grid = list(itertools.product(*(values[name] for name in names)))
    found = [tuple(int(k.get(name, 0)) for name in names) for k in keys]
    if names and found == grid:
        return StackLayout(names, tuple(len(values[name]) for name in names))
    return StackLayout(("image",), (len(keys),))
