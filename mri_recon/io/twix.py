"""Siemens raw data (twix ``.dat``, VB and VD/VE) through ``twixtools`` (the ``twix`` extra).

What is read
------------
- The last measurement of a multi-RAID file (the earlier ones are adjustments); its image scans
  (``is_image_scan``) are the data and its ``NOISEADJSCAN`` readouts the noise (``Scan.noise``, for
  prewhitening; taken from an earlier measurement with the same channels when the last has none).
  Phase-correction, navigator and other non-image readouts are skipped.
- Cartesian sequences (``sKSpace.ucTrajectory`` 1): each readout is a line at ``k = cLin - CenterLin``
  (and, in 3-D, partition ``cPar - CenterPar``), readout sample ``i`` at ``k = i - CenterCol`` on the readout
  grid ``lBaseResolution x flReadoutOSFactor``; oversampling removed and partial Fourier zero-filled as for MRD
  (:mod:`mri_recon.io.cartesian`). The matrix is ``lBaseResolution`` x ``iPEFTLength`` (x ``iPARFTLength``).
- Radial sequences (``ucTrajectory`` 2): spoke ``cLin`` of ``lRadialViews`` at angle ``pi cLin / lRadialViews``
  (uniform over 180 degrees), samples at ``(i - CenterCol) / flReadoutOSFactor`` cycles per FOV; with partitions
  (3-D) a stack of stars, ``kz = cPar - CenterPar``. The matrix is ``lBaseResolution`` square.
- ``cSlc``, ``cEco``, ``cPhs``, ``cSet``, ``cRep`` are the images' slice, contrast, phase, set and repetition;
  averages and segments are pooled.

Not supported (one-line :class:`~mri_recon.errors.InvalidDataError`): spiral and PROPELLER trajectories,
EPI and other reversed readouts (``REFLECT``), readouts of different lengths or channel counts.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import InvalidDataError, SchemaError, printable
from ..scan import Scan
from .cartesian import cartesian_readouts
from .inputs import InputFormat, Probe
from .stack import DIMENSIONS, select

_COUNTERS = {"slice": "cSlc", "contrast": "cEco", "phase": "cPhs", "set": "cSet", "repetition": "cRep"}
TRAJECTORIES = {1: "cartesian", 2: "radial", 4: "spiral", 8: "propeller"}
"""``sKSpace.ucTrajectory`` values of the Siemens protocol."""


def _twixtools():
    try:
        import twixtools  # noqa: PLC0415 - the optional 'twix' extra
    except ImportError as exc:
        raise InvalidDataError(f"reading Siemens .dat files needs the 'twixtools' package ({exc}); install the "
                               f"extra: pip install 'mri-recon[twix]'") from exc
    return twixtools


def _read(src: str) -> list[dict]:
    twixtools = _twixtools()
    _regular(src)
    try:
        with _READING, _guarded_blocks(twixtools), contextlib.redirect_stdout(io.StringIO()):  # it prints warnings
            measurements = twixtools.read_twix(src, verbose=False, parse_pmu=False, parse_geometry=False)
    except Exception as exc:  # twixtools raises assorted errors on files that are not twix
        raise SchemaError(printable(f"{src}: not a readable Siemens twix file ({' '.join(str(exc).split())})")) from exc
    if not measurements:
        raise SchemaError(f"{src}: the twix file holds no measurement")
    return measurements


_READING = threading.Lock()
"""One twix read at a time in a process while :func:`_guarded_blocks` stands in for twixtools' block class."""


def _regular(src: str) -> None:
    """Refuse what is not a regular file (a FIFO named ``x.dat`` would block the read forever)."""
    try:
        info = os.stat(src)
    except OSError as exc:
        raise SchemaError(f"{printable(src)}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise SchemaError(f"{printable(src)}: is not a regular file; expected a Siemens .dat file")


@contextlib.contextmanager
def _guarded_blocks(twixtools: Any) -> Iterator[None]:
    """twixtools' measurement-block class, refusing a block whose DMA length is 0 while a read runs: twixtools
    steps from block to block by that length, so such a block (a SYNCDATA or ACQEND header saying 0) made it
    read the same block forever, its memory growing."""
    base = twixtools.mdb.Mdb

    class Checked(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if int(self.dma_len) <= 0:
                raise SchemaError("a measurement block declares a DMA length of 0 (a corrupt or hostile file)")

    twixtools.mdb.Mdb = Checked
    try:
        yield
    finally:
        twixtools.mdb.Mdb = base


MAX_SIZE = 8192
"""The largest base resolution, phase-encoding lines or partitions taken from a protocol (they size the
image)."""


def _protocol(src: str, hdr: dict) -> dict[str, Any]:
    """Trajectory kind, matrix, FOV and readout oversampling from the measurement's protocol."""
    try:
        yaps, meas = hdr["MeasYaps"], hdr["Meas"]
        kspace, first = yaps["sKSpace"], yaps["sSliceArray"]["asSlice"][0]
        base = int(kspace["lBaseResolution"])
        oversampling = float(meas.get("flReadoutOSFactor", 1.0))
        three_d = int(kspace.get("ucDimension", 2)) == 4
        fov = [float(first["dReadoutFOV"]), float(first["dPhaseFOV"]), float(first["dThickness"])]
        kind = TRAJECTORIES.get(int(kspace.get("ucTrajectory", 1)), f"code {kspace.get('ucTrajectory')}")
        lines = int(meas.get("iPEFTLength", kspace.get("lPhaseEncodingLines", base)))
        partitions = int(meas.get("iPARFTLength", kspace.get("lPartitions", 1)))
        views = int(kspace.get("lRadialViews", 0))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise SchemaError(f"{src}: not a readable Siemens twix file: its protocol lacks {printable(str(exc))} "
                          f"(MeasYaps sKSpace / sSliceArray)") from exc
    for name, value, low in (("lBaseResolution", base, 1), ("lPhaseEncodingLines", lines, 0),
                             ("lPartitions", partitions, 0)):  # the sizes of the image; views size nothing
        if not low <= value <= MAX_SIZE:
            raise SchemaError(f"{src}: the protocol's {name} is {value}; expected {low} to {MAX_SIZE}")
    return {"kind": kind, "base": base, "oversampling": oversampling, "three_d": three_d and partitions > 1,
            "fov": fov, "lines": lines, "partitions": partitions, "views": views}


def _noise(measurements: list[dict], channels: int) -> np.ndarray | None:
    """``NOISEADJSCAN`` readouts ``(C, K)`` of the last measurement that has any with ``channels`` coils."""
    for measurement in reversed(measurements):
        parts = [mdb.data for mdb in measurement["mdb"] if mdb.is_flag_set("NOISEADJSCAN")
                 and mdb.data.shape[0] == channels]
        if parts:
            return np.concatenate(parts, axis=1).astype(np.complex64)
    return None


def _image_scans(src: str, mdbs: list) -> list:
    images = [mdb for mdb in mdbs if mdb.is_image_scan()]
    if not images:
        raise SchemaError(f"{src}: the last measurement holds no image scans")
    if any(mdb.is_flag_set("REFLECT") for mdb in images):
        raise InvalidDataError(f"{src}: reversed readouts (REFLECT: EPI or bipolar echoes) are not supported")
    for number, mdb in enumerate(images):
        declared = (int(mdb.mdh.UsedChannels), int(mdb.mdh.SamplesInScan))
        if mdb.data.shape != declared or 0 in declared:  # a block read past the end has a header of zeros
            raise SchemaError(f"{src}: truncated: image readout {number + 1} of {len(images)} holds "
                              f"{mdb.data.shape} (channels, samples) where {images[0].data.shape} were expected "
                              f"(a file cut short?)")
    shapes = {mdb.data.shape for mdb in images}
    if len(shapes) > 1:
        raise InvalidDataError(f"{src}: image readouts of different shapes {sorted(shapes)} (channels, samples); "
                               f"expected one readout length and one coil set")
    return images


def _radial(src: str, images: list, prot: dict) -> tuple[list, np.ndarray, tuple[int, ...], dict]:
    """Spokes at ``pi cLin / lRadialViews``; kz from the partition counter in 3-D."""
    if prot["views"] < 1:
        raise SchemaError(f"{src}: a radial protocol without lRadialViews (the number of spokes)")
    n = images[0].data.shape[1]
    radius = (np.arange(n)[None, :] - np.array([m.mdh.CenterCol for m in images])[:, None]) / prot["oversampling"]
    angle = np.pi * np.array([m.cLin for m in images], dtype=np.float64) / prot["views"]
    columns = [radius * np.cos(angle)[:, None], radius * np.sin(angle)[:, None]]
    matrix: tuple[int, ...] = (prot["base"], prot["base"])
    if prot["three_d"]:
        kz = np.array([m.cPar - m.mdh.CenterPar for m in images], dtype=np.float64)
        columns.append(np.broadcast_to(kz[:, None], radius.shape))
        matrix = (*matrix, prot["partitions"])
    trajectory = np.stack(columns, axis=2).astype(np.float32)
    return [m.data for m in images], trajectory, matrix, {"traj_units": "cycles-per-fov (from the protocol)"}


def _cartesian(src: str, images: list, prot: dict) -> tuple[list, np.ndarray, tuple[int, ...], dict]:
    matrix = (prot["base"], prot["lines"], *((prot["partitions"],) if prot["three_d"] else ()))
    encoded = np.array([round(prot["base"] * prot["oversampling"]), *matrix[1:]], dtype=np.float64)
    geometry = {"ndim": len(matrix), "matrix": matrix, "encoded": encoded,
                "scale": np.array([matrix[0] / encoded[0], *[1.0] * (len(matrix) - 1)]),
                "fov_mm": prot["fov"][:len(matrix)], "encoded_fov_mm": prot["fov"][:len(matrix)]}
    acq = {"data": [m.data for m in images], "reverse": np.zeros(len(images), dtype=bool), "ref": 0,
           "steps": [np.array([m.cLin for m in images]), np.array([m.cPar for m in images])],
           "centres": [np.array([m.mdh.CenterLin for m in images]), np.array([m.mdh.CenterPar for m in images])],
           "centre_sample": np.array([m.mdh.CenterCol for m in images], dtype=np.int64)}
    if not prot["three_d"] and np.any(acq["steps"][1] != acq["steps"][1][0]):
        raise InvalidDataError(f"{src}: a 2-D protocol with several partitions (cPar); expected a 3-D protocol")
    if not prot["three_d"]:
        acq["steps"][1] = np.zeros(len(images), dtype=np.int64)
    data, trajectory, attrs = cartesian_readouts(src, None, acq, geometry)
    return data, trajectory, matrix, attrs


def load_twix_all(path: str | os.PathLike, *, slice: int | None = None, contrast: int | None = None,
                  phase: int | None = None, set: int | None = None, repetition: int | None = None,
                  **ignored: Any) -> list[tuple[dict, Scan]]:
    """Every image of a Siemens twix file as ``(key, Scan)`` pairs (see the module docstring).

    ``slice`` .. ``repetition`` keep only the images with that index; MRD-only options (``traj_units``,
    ``space``, ``dataset``, ``allow_external``) do not apply and are ignored.

    Raises
    ------
    SchemaError
        Not a twix file, no image scans, a protocol without its matrix.
    InvalidDataError
        A trajectory or readout kind that is not supported, or ``twixtools`` not installed.
    """
    src = str(path)
    measurements = _read(src)
    last = measurements[-1]
    prot = _protocol(src, last["hdr"])
    if prot["kind"] not in ("cartesian", "radial"):
        raise InvalidDataError(f"{src}: {prot['kind']} trajectories are not supported (Cartesian and radial are)")
    images = _image_scans(src, last["mdb"])
    data, trajectory, matrix, extra = (_radial if prot["kind"] == "radial" else _cartesian)(src, images, prot)
    noise = _noise(measurements, images[0].data.shape[0])
    index = np.array([[getattr(m, _COUNTERS[name]) for name in DIMENSIONS] for m in images], dtype=np.int64)
    every = [dict(zip(DIMENSIONS, values)) for values in sorted({tuple(row) for row in index.tolist()})]
    chosen = {"slice": slice, "contrast": contrast, "phase": phase, "set": set, "repetition": repetition}
    out = []
    for key in (every[i] for i in select(every, src, **chosen)):
        rows = np.flatnonzero(np.all(index == [key[name] for name in DIMENSIONS], axis=1))
        attrs = {"source_format": "twix", "measurements": len(measurements), "trajectory_type": prot["kind"],
                 **key, "fov_mm": prot["fov"][:len(matrix)], "samples_per_readout": int(trajectory.shape[1]),
                 "voxel_size_mm": [f / n for f, n in zip(prot["fov"], (*matrix, 1))][:3], **extra}
        out.append((key, Scan(kspace=np.concatenate([data[i] for i in rows], axis=1).astype(np.complex64),
                              trajectory=np.ascontiguousarray(trajectory[rows]).reshape(-1, len(matrix)),
                              matrix=matrix, noise=noise, attrs=attrs, source=src)))
    return out


def is_twix(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a Siemens raw data file (by its ``.dat`` extension)."""
    return str(path).lower().endswith(".dat")


def load_twix(path: str | os.PathLike, **options: Any) -> Scan:
    """The one image of a twix file that ``options`` (``slice=`` .. ``repetition=``) leave; SchemaError when
    several are left."""
    scans = load_twix_all(path, **options)
    if len(scans) > 1:
        raise SchemaError(f"{printable(str(path))}: holds several images; choose one with slice=, contrast=, "
                          f"phase=, set=, repetition=")
    return scans[0][1]


def _claims(probe: Probe) -> bool:
    return is_twix(probe.path)


INPUT = InputFormat("twix", (".dat",), _claims,
                    lambda probe, **options: load_twix_all(probe.path, **options),
                    lambda probe, **options: load_twix(probe.path, **options))
"""Siemens twix (``.dat``) raw-data input, recognised by its name (the 'twix' extra)."""
