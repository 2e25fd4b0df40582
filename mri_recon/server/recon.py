"""One image group of a stream reconstructed exactly as ``mri-recon reconstruct`` reconstructs a file.

The received XML header (verbatim), noise acquisitions and the group's acquisitions are written as an
ISMRMRD file in a private spool folder (the ``ismrmrd`` package's record layout, as in a scanner's file),
read back by :func:`mri_recon.load_scans`, prepared and reconstructed by
:func:`mri_recon.api.prepare_and_reconstruct` with the connection's :class:`~mri_recon.settings.ReconSettings`
(as :func:`mri_recon.api.reconstruct_file` does for ``reconstruct``), and turned into MRD image records by
:func:`mri_recon.io.mrd_image.mrd_image` with the file output's meta (:func:`mri_recon.io.mrd_image.image_meta`).
The file is removed as soon as it is read. The reader and the pipeline are thus those of a file on disk,
which is what makes the images equal bit for bit.

Reconstructions take turns on one device: a GPU through :func:`mri_recon.pipeline.gpu_lock`, the CPU
through one lock of this process (several at once would only share the cores).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..api import prepare_and_reconstruct
from ..backend import Device
from ..errors import MriReconError
from ..io import load_scans
from ..io.mrd_image import image_meta, mrd_image
from ..io.outputs import result_geometries
from ..pipeline import gpu_lock
from ..settings import ReconSettings

log = logging.getLogger(__name__)
_CPU_LOCK = threading.Lock()
HDF5_LOCK = threading.Lock()
"""Held around the HDF5 reads and writes of server threads: the ``ismrmrd`` package's files (h5py's ``stdio``
driver, records of variable length) crash the process when threads read them at once."""


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


def _ismrmrd():
    import ismrmrd  # noqa: PLC0415 - a dependency, imported on use

    return ismrmrd


def write_raw(path: Path, header_xml: bytes, acquisitions: Iterable[Any]) -> None:
    """An ISMRMRD file of ``header_xml`` (stored verbatim) and ``acquisitions`` (``ismrmrd.Acquisition``)."""
    mr = _ismrmrd()
    records = np.array([mr.file.Acquisitions.to_numpy(a) for a in acquisitions], dtype=mr.hdf5.acquisition_dtype)
    with h5py.File(path, "w") as f:
        group = f.create_group("dataset")
        xml = group.create_dataset("xml", shape=(1,), dtype=h5py.special_dtype(vlen=bytes))
        xml[0] = header_xml
        group.create_dataset("data", data=records, maxshape=(None,), chunks=True)


class Reconstructor:
    """Reconstructs image groups on one device, one at a time, with a PSF cache shared by every connection.

    Parameters
    ----------
    device
        The resolved device.
    psf_cache
        A :class:`mri_recon.io.cache.PsfCache`, or ``None``.
    spool
        Folder for the short-lived group files (default: a private temporary folder, removed by :meth:`close`).
    """

    def __init__(self, device: Device, psf_cache: Any = None, spool: str | os.PathLike | None = None) -> None:
        self.device = device
        self.psf_cache = psf_cache
        self._own_spool = spool is None
        self.spool = Path(tempfile.mkdtemp(prefix="mri-recon-serve-") if spool is None else spool)
        self._count = 0
        self._guard = threading.Lock()

    def close(self) -> None:
        """Remove the private spool folder."""
        if self._own_spool:
            shutil.rmtree(self.spool, ignore_errors=True)

    def _path(self) -> Path:
        with self._guard:
            self._count += 1
            return self.spool / f"group-{os.getpid()}-{self._count}.mrd.h5"

    def load(self, header_xml: bytes, acquisitions: list[Any], settings: ReconSettings) -> list[tuple[dict, Any]]:
        """The group's scans as :func:`mri_recon.load_scans` reads them from a file of these acquisitions."""
        path = self._path()
        try:
            with HDF5_LOCK:
                write_raw(path, header_xml, acquisitions)
                return load_scans(path, **settings.reader_keywords())
        except MriReconError as exc:  # the message names the stream, not the spool file
            raise type(exc)(str(exc).replace(str(path), "the stream")) from None
        finally:
            path.unlink(missing_ok=True)

    def reconstruct(self, scans: list[tuple[dict, Any]], settings: ReconSettings) -> Reconstructed:
        """Prepare and reconstruct each scan as ``mri-recon reconstruct`` does, holding the device's lock."""
        queued = time.perf_counter()
        cache = self.psf_cache if settings.cache else None
        with device_lock(self.device):
            started = time.perf_counter()
            results = []
            for key, scan in scans:
                ready, record, result = prepare_and_reconstruct(scan, settings, device=self.device,
                                                                psf_cache=cache)
                results.append((key, ready, record, result))
        return Reconstructed(results, started - queued, time.perf_counter() - started)


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
