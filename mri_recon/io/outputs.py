"""What an output format is (:class:`OutputFormat`) and what every writer is given (:class:`ImageStack`).

A writer module defines one ``FORMAT = OutputFormat(...)`` and :mod:`mri_recon.io.writers` lists it; the
dispatcher there chooses the format by the output's name or by ``format=``, checks the value choices and calls
``FORMAT.write``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .files import check_output
from .geometry import Geometry, geometry_of
from .stack import StackLayout, stack_layout


def complex_values(complex_: bool, magnitude: bool) -> str:
    """What a format that holds the complex image writes (the choices are checked by the dispatcher)."""
    del complex_, magnitude
    return "complex"


@dataclass(frozen=True)
class OutputFormat:
    """One output format: its name, the file names that choose it, what it holds and its writer."""

    name: str
    """``--format NAME`` and ``format=NAME``."""
    label: str
    """The format in the result line: ``"HDF5"``, ``"NIfTI"``, ..."""
    suffixes: tuple[str, ...]
    """File name endings that choose it (any case), e.g. ``(".nii", ".nii.gz")``."""
    default_suffix: str
    """Appended to ``SCAN.recon`` for the default output name (``".nii.gz"``)."""
    write: Callable[..., list[Path]]
    """``write(output, stack, *, complex_, magnitude, protect)``: writes atomically, returns the files written."""
    values: Callable[[bool, bool], str] = complex_values
    """``values(complex_, magnitude)``: ``"complex"``, ``"magnitude"`` or ``"real and imaginary"``; raises
    :class:`~mri_recon.errors.OutputError` for a choice the format cannot hold."""
    shown: str = "{label}"
    """The result line's words, formatted with ``label`` and ``values`` (``"{label}, {values} images"``)."""
    title: str = ""
    """The format where the accepted names are listed (``"MRD images"``); empty: ``label``."""
    placed: str | None = None
    """How an image of unknown position is written, for the CLI's warning (``"affine has"``); None: the format
    records that the position is unknown (HDF5's ``geometry`` attribute)."""
    check: Callable[..., Any] = check_output
    """``check(output, *, protect)``: refuses, before any work, an output that cannot be written
    (:func:`mri_recon.io.files.check_output` for a file)."""
    folder: bool = False
    """The output is a folder (DICOM: one file per slice): no file name chooses it, ``--format`` does."""

    def describe(self, values: str) -> str:
        """The result line's words for this format holding ``values``."""
        return self.shown.format(label=self.label, values=values)

    def names(self, path: str | os.PathLike) -> bool:
        """Whether the name ``path`` chooses this format."""
        return str(path).lower().endswith(self.suffixes)


@dataclass(frozen=True)
class ImageStack:
    """The reconstructed images of one input file, as every writer receives them.

    ``results`` holds ``(key, scan, record, result)`` per image: the image's key (``{"slice": 0, ...}``, in
    the order of :func:`mri_recon.io.load_scans`), the scan as reconstructed, the preparation record of
    :func:`mri_recon.prep.prepare_scan` and the :class:`~mri_recon.result.Result`.
    """

    results: Sequence[tuple]
    source: str | os.PathLike
    """The input file (recorded, and never replaced)."""

    def check(self, values: Callable[[], Any]) -> None:
        """Refuse, before anything is written, keys that form no stack, then (``values()``) contradicting value
        choices, then malformed geometry."""
        _ = self.layout
        values()
        _ = self.geometries

    @property
    def keys(self) -> list[dict]:
        return [key for key, _, _, _ in self.results]

    @cached_property
    def layout(self) -> StackLayout:
        """The images' named leading axes (:func:`mri_recon.io.stack.stack_layout`)."""
        return stack_layout(self.keys)

    @cached_property
    def images(self) -> list[np.ndarray]:
        """Each image, complex64."""
        return [np.asarray(r.image, dtype=np.complex64) for _, _, _, r in self.results]

    @cached_property
    def image(self) -> np.ndarray:
        """The images as one array: ``(*layout.shape, *matrix)``, or the single image itself."""
        if len(self.images) == 1:
            return self.images[0]
        return np.stack(self.images).reshape(*self.layout.shape, *self.images[0].shape)

    @cached_property
    def geometries(self) -> list[Geometry]:
        """The :class:`~mri_recon.io.geometry.Geometry` of each image."""
        return result_geometries(self.results)


def result_geometries(results: Sequence[tuple]) -> list[Geometry]:
    """The :class:`~mri_recon.io.geometry.Geometry` of each ``(key, scan, record, result)`` image."""
    return [geometry_of(scan.matrix, scan.attrs, scan.source or "<memory>") for _, scan, _, _ in results]


def nrmse_vs_truth(image: np.ndarray, truth: np.ndarray, result: Any) -> tuple[str, float]:
    """``("complex" | "magnitude", ||image - truth|| / ||truth||)`` with no fitted scale.

    Complex only where the image's phase is the truth's: SENSE with the scan's own maps. Estimated maps carry
    an arbitrary phase per voxel and root-sum-of-squares images none, so those compare magnitudes.
    """
    if result.combine == "sense" and result.parameters.get("coil_maps") == "scan":
        kind, a, b = "complex", np.asarray(image, np.complex128), np.asarray(truth, np.complex128)
    else:
        kind, a, b = "magnitude", np.abs(np.asarray(image, np.complex128)), np.abs(np.asarray(truth, np.complex128))
    return kind, float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))
