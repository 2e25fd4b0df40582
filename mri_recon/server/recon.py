"""One image group of a stream reconstructed exactly as ``mri-recon reconstruct`` reconstructs a file.

The received XML header (verbatim), noise acquisitions and the group's acquisitions are read by
:func:`mri_recon.io.mrd_stream.load_stream`: the ``ismrmrd`` package's records of them (the layout its files
hold) through the file reader's own code, so they give the scans a file of them gives, without writing one.
They are prepared and reconstructed by :func:`mri_recon.api.prepare_and_reconstruct` with the connection's
:class:`~mri_recon.settings.ReconSettings` (as :func:`mri_recon.api.reconstruct_file` does for
``reconstruct``), and turned into MRD image records by :func:`mri_recon.io.mrd_image.mrd_image` with the file
output's meta (:func:`mri_recon.io.mrd_image.image_meta`). The reader and the pipeline are thus those of a
file, which is what makes the images equal bit for bit.

Reconstructions take turns on one device: a GPU through :func:`mri_recon.pipeline.gpu_lock`, the CPU
through one lock of this process (several at once would only share the cores).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..api import prepare_and_reconstruct
from ..arrays.backend import Device
from ..io.ismrmrd import INPUT as ISMRMRD_INPUT
from ..io.mrd_image import image_meta, mrd_image
from ..io.mrd_stream import SOURCE, load_stream
from ..io.outputs import result_geometries
from ..io.readers import reader_options
from ..pipeline import gpu_lock
from ..settings import ReconSettings

log = logging.getLogger(__name__)
_CPU_LOCK = threading.Lock()


@dataclass(frozen=True)
class Reconstructed:
    """One group's images: ``(key, scan, record, result)`` per image, as the CLI collects them, and the seconds
    spent waiting for the device and reconstructing."""

    results: list[tuple[dict, Any, dict, Any]]
    waited_s: float
    seconds: float


def device_lock(device: Device):
    """The lock reconstructions on ``device`` take turns by."""
    return gpu_lock(device.index) if device.is_gpu else _CPU_LOCK


class Reconstructor:
    """Reconstructs image groups on one device, one at a time, with a PSF cache shared by every connection.

    Parameters
    ----------
    device
        The resolved device.
    psf_cache
        A :class:`mri_recon.io.cache.PsfCache`, or ``None``.
    """

    def __init__(self, device: Device, psf_cache: Any = None) -> None:
        self.device = device
        self.psf_cache = psf_cache

    def load(self, header_xml: bytes, acquisitions: list[Any], settings: ReconSettings) -> list[tuple[dict, Any]]:
        """The group's scans as :func:`mri_recon.load_scans` reads them from a file of these acquisitions."""
        options = reader_options(ISMRMRD_INPUT, SOURCE, settings.reader_keywords())
        return load_stream(header_xml, acquisitions, **options)

    def reconstruct(self, scans: list[tuple[dict, Any]], settings: ReconSettings,
                    cancelled: threading.Event | None = None) -> Reconstructed:
        """Prepare and reconstruct each scan as ``mri-recon reconstruct`` does, holding the device's lock;
        :class:`Cancelled` once ``cancelled`` is set (the client left), checked once the device is taken and
        at every stage and iteration after."""
        queued = time.perf_counter()
        cache = self.psf_cache if settings.cache else None
        progress = None if cancelled is None else functools.partial(_stop_if, cancelled)
        with device_lock(self.device):
            started = time.perf_counter()
            results = []
            for key, scan in scans:
                _stop_if(cancelled)
                ready, record, result = prepare_and_reconstruct(scan, settings, device=self.device,
                                                                psf_cache=cache, progress=progress)
                results.append((key, ready, record, result))
        return Reconstructed(results, started - queued, time.perf_counter() - started)


class Cancelled(Exception):
    """The client of a reconstruction left; the reconstruction stopped."""


def _stop_if(cancelled: threading.Event | None, *event: Any) -> None:
    """A progress callback: raise :class:`Cancelled` once ``cancelled`` is set."""
    del event
    if cancelled is not None and cancelled.is_set():
        raise Cancelled("the client left; its reconstruction was stopped")


def image_records(done: Reconstructed, first_index: int, magnitude: bool) -> list[Any]:
    """The MRD image records of a group, numbered from ``first_index`` (0 for the stream's first image)."""
    geometries = result_geometries(done.results)
    records = []
    for i, ((key, scan, _, result), geometry) in enumerate(zip(done.results, geometries)):
        image = np.asarray(result.image, dtype=np.complex64)
        records.append(mrd_image(image, geometry, key, first_index + i, magnitude=magnitude,
                                 meta=image_meta(image, scan, result)))
    return records


def describe_key(key: Mapping[str, int]) -> str:
    """``slice 0 contrast 0 ...``: an image group's indices, for the log."""
    return " ".join(f"{name} {value}" for name, value in key.items())
