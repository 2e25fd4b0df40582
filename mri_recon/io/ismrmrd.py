"""ISMRMRD (MRD) input and output for non-Cartesian raw data, through the ``ismrmrd`` package.

The ``ismrmrd`` package owns the format: files are opened with :class:`ismrmrd.File`, the XML header is
parsed against ``ismrmrd.xsd`` by :func:`ismrmrd.xsd.CreateFromDocument`, acquisitions are the package's
records (:data:`ismrmrd.hdf5.acquisition_dtype`) and flags are its ``ACQ_*`` constants (tested on the
header array at once, bit ``flag - 1`` as in :meth:`ismrmrd.Acquisition.is_flag_set`).

What is read
------------
- Imaging acquisitions carry a per-sample trajectory, ``trajectory_dimensions`` = D (2 for a 2-D matrix,
  3 for 3-D) or D + 1, where the trailing column is a density-compensation weight and becomes
  ``Scan.weights`` (the ISMRMRD convention, e.g. Gadgetron's spiral and radial data). A trailing column
  that is all zero is not taken as weights (they would give a zero image): it is a 2-D encoding's kz = 0
  written as 3-D coordinates, or an unset weight column, and is ignored (``Scan.attrs["trajectory_extra_column"]``
  says so). A trailing column with negative values is refused: it is neither weights nor the kz of a 2-D
  encoding. ``discard_pre`` / ``discard_post`` samples are dropped. Every imaging readout must
  keep the same number of samples and channels.
- ``ACQ_IS_NOISE_MEASUREMENT`` acquisitions become ``Scan.noise`` (C, K), shared by every slice.
- Skipped: pure calibration (``ACQ_IS_PARALLEL_CALIBRATION``), navigators (``ACQ_IS_NAVIGATION_DATA``),
  phase-correction, dummy-scan, feedback, surface-coil-correction and phase-stabilisation data.
  ``ACQ_IS_PARALLEL_CALIBRATION_AND_IMAGING`` readouts are imaging data that also calibrate: kept.
- Each combination of ``idx.slice``, ``idx.contrast``, ``idx.phase``, ``idx.set`` and ``idx.repetition``
  gives one :class:`Scan` (its five indices are in ``Scan.attrs``); averages and segments of one image are
  pooled.

Geometry and trajectory units
-----------------------------
The image is the header's ``reconSpace`` matrix (3-D when its z > 1). Axis d of the stored trajectory is
taken relative to the *encoded* space: in cycles per encoded field of view (``"cycles-per-fov"``, Nyquist
extent ``encodedMatrix_d / 2``) or normalized to ``[-0.5, 0.5]`` (``"normalized"``: cycles per encoded FOV
divided by ``encodedMatrix_d``). The physical frequency is ``k_enc / encodedFOV_d``, so in cycles per
*recon* field of view::

    k_d = k_enc_d * reconFOV_d / encodedFOV_d                      (cycles-per-fov)
    k_d = k_norm_d * encodedMatrix_d * reconFOV_d / encodedFOV_d   (normalized)

With readout oversampling (encoded FOV and matrix twice the recon ones along x) this halves the readout
axis: the oversampled readout reaches ``encodedMatrix_x / 2 = reconMatrix_x`` cycles per encoded FOV,
which is ``reconMatrix_x / 2`` cycles per recon FOV, the recon matrix's Nyquist extent; the image is then
reconstructed directly on the recon FOV (no crop needed: the exact operator evaluates only the recon
voxels). The model then assumes no signal outside the recon FOV; for an object that reaches beyond it,
``space="encoded"`` reconstructs the encoded matrix and FOV instead (crop afterwards).

``traj_units="auto"`` decides from the extent against the encoded matrix and records the choice in
``Scan.attrs["traj_units"]``; ambiguous or impossible extents raise
:class:`~mri_recon.errors.TrajectoryUnitsError`.

Where the image lies (``Scan.attrs``, see :mod:`mri_recon.io.geometry`): ``voxel_size_mm`` [3] is the image
space's field of view over its matrix (a 2-D image: z is the slice thickness); ``position_mm``, ``read_dir``,
``phase_dir`` and ``slice_dir`` [3 each, LPS] are those of the first readout of the slice and repetition
(left out when its directions are all zero, i.e. unset). Trajectory columns are read, phase and slice, so
image axes 0, 1, 2 run along ``read_dir``, ``phase_dir``, ``slice_dir``.

A file with several images is read whole by :func:`load_ismrmrd_all` (or the images chosen by their
indices); the reconstruction pipeline reconstructs each scan and arranges the images on named leading output
axes in the order slice, contrast, phase, set, repetition (:mod:`mri_recon.io.stack`).
:func:`load_ismrmrd` returns one of them and asks which when the choice leaves several.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from ..errors import InvalidDataError, SchemaError, printable
from ..scan import Scan
from .cartesian import STEPS, cartesian_readouts, partition_column
from .inputs import InputFormat
from .ismrmrd_encoding import SPACES, TRAJ_UNITS, detect_units, encoding_space, one_line, scale_trajectory
from .schema import _open, image_series, images_not_raw
from .stack import DIMENSIONS, describe, select

__all__ = ["SPACES", "TRAJ_UNITS", "detect_units", "load_ismrmrd", "load_ismrmrd_all"]

MAX_READOUT = 65535
"""``number_of_samples`` is a uint16 in the acquisition header."""


def _ismrmrd():
    try:
        import ismrmrd  # noqa: PLC0415 - a dependency of mri-recon, imported on first use
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise InvalidDataError(f"reading ISMRMRD files needs the 'ismrmrd' package, a dependency of mri-recon "
                               f"that cannot be imported ({exc}); reinstall it: pip install ismrmrd") from exc
    return ismrmrd


_SKIPPED = (
    "ACQ_IS_PARALLEL_CALIBRATION", "ACQ_IS_NAVIGATION_DATA", "ACQ_IS_PHASECORR_DATA", "ACQ_IS_DUMMYSCAN_DATA",
    "ACQ_IS_RTFEEDBACK_DATA", "ACQ_IS_HPFEEDBACK_DATA", "ACQ_IS_SURFACECOILCORRECTIONSCAN_DATA",
    "ACQ_IS_PHASE_STABILIZATION", "ACQ_IS_PHASE_STABILIZATION_REFERENCE",
)
"""Flags of acquisitions that are not imaging data (``ismrmrd`` constant names)."""


_ORIENTATION = {"position_mm": "position", "read_dir": "read_dir", "phase_dir": "phase_dir",
                "slice_dir": "slice_dir"}
"""``Scan.attrs`` names (see :mod:`mri_recon.io.geometry`) of the acquisition header's geometry fields."""


def _flag(flags: np.ndarray, flag: int) -> np.ndarray:
    """``is_flag_set`` on an array of header flags."""
    return (flags & np.uint64(1 << (flag - 1))) != 0


# --------------------------------------------------------------------------------------------------------
# Reading


def header_error(src: str, exc: Exception) -> SchemaError:
    """The error of an XML header the ``ismrmrd`` package's parser refused."""
    return SchemaError(printable(f"{src}: the ISMRMRD XML header does not follow ismrmrd.xsd: {one_line(exc)}"))


def _read(path: str | os.PathLike, dataset: str | None, allow_external: bool) -> tuple[Any, np.ndarray, str]:
    """Parsed XML header, the acquisition records and the dataset group name."""
    src = str(path)
    with _open(path, allow_external) as f:  # existence, HDF5-ness, nothing read from other files (or allowed)
        series = image_series(f)
    mr = _ismrmrd()
    with mr.File(src, "r") as f:
        names = [name for name in f if "xml" in f[name] or "data" in f[name]]
        if dataset is None:
            dataset = "dataset" if "dataset" in names else (names[0] if names else None)
        if dataset is None or dataset not in f.keys():
            which = f"'{dataset}'" if dataset else "group"
            raise SchemaError(printable(f"{src}: no ISMRMRD dataset {which} (expected a group holding 'data' "
                                        f"and 'xml'; groups found: {sorted(f.keys())})"))
        group = f[dataset]
        if not group.has_header():
            raise SchemaError(printable(f"{src}: ISMRMRD file without its XML header: dataset '{dataset}' has no "
                                        f"'xml' header (it gives the matrix and field of view)"))
        if not group.has_acquisitions():
            mine = [name for name in series if name.startswith(f"{dataset}/")]
            if mine:
                raise images_not_raw(src, mine)
            raise SchemaError(printable(f"{src}: ISMRMRD dataset '{dataset}' holds no acquisitions ('data')"))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                header = group.header
        except Exception as exc:  # the xsd parser raises TypeError, ParserError, ...
            raise header_error(src, exc) from exc
        records = group.acquisitions.data[()]
    if records.size == 0:
        raise SchemaError(printable(f"{src}: ISMRMRD dataset '{dataset}' holds no acquisitions ('data' is empty)"))
    return header, records, dataset


def _records(src: str, records: np.ndarray) -> dict[str, Any]:
    """Split the records into imaging and noise, check them, and gather the imaging arrays."""
    mr = _ismrmrd()
    head = records["head"]
    flags = head["flags"]
    noise = _flag(flags, mr.ACQ_IS_NOISE_MEASUREMENT)
    skip = np.zeros(records.shape, dtype=bool)
    for name in _SKIPPED:
        skip |= _flag(flags, getattr(mr, name))
    imaging = np.flatnonzero(~noise & ~skip)
    if imaging.size == 0:
        raise SchemaError(f"{src}: no imaging acquisitions ({records.size} acquisitions: "
                          f"{int(noise.sum())} noise, {int((skip & ~noise).sum())} calibration/navigation)")
    h = head[imaging]
    channels = h["active_channels"].astype(np.int64)
    first = int(imaging[0])
    if np.any(channels == 0):
        bad = int(imaging[np.argmax(channels == 0)])
        raise SchemaError(f"{src}: acquisition {bad} has zero channels (active_channels = 0); expected the "
                          f"receive coils' data")
    if np.any(channels != channels[0]):
        bad = int(imaging[np.argmax(channels != channels[0])])
        raise SchemaError(f"{src}: acquisition {bad} has {int(head['active_channels'][bad])} channels but "
                          f"acquisition {first} has {int(channels[0])}; expected one coil set")
    dims = h["trajectory_dimensions"].astype(np.int64)
    if np.any(dims == 0) and not np.all(dims == 0):  # all zero: Cartesian (mri_recon.io.cartesian)
        bad = int(imaging[np.argmax(dims == 0)])
        raise SchemaError(f"{src}: acquisition {bad} has no trajectory (trajectory_dimensions = 0); mri-recon "
                          f"reads non-Cartesian data with a per-sample trajectory")
    if np.any(dims != dims[0]):
        j = int(np.argmax(dims != dims[0]))
        raise SchemaError(f"{src}: acquisition {int(imaging[j])} has trajectory_dimensions {int(dims[j])} "
                          f"but acquisition {first} has {int(dims[0])}")
    refs = np.unique(h["encoding_space_ref"])
    if refs.size > 1:
        raise InvalidDataError(f"{src}: imaging acquisitions use several encoding spaces {refs.tolist()}; "
                               f"mri-recon reconstructs one")
    samples = h["number_of_samples"].astype(np.int64)
    keep = samples - h["discard_pre"].astype(np.int64) - h["discard_post"].astype(np.int64)
    if np.any(keep != keep[0]):
        bad = int(np.argmax(keep != keep[0]))
        raise SchemaError(f"{src}: inconsistent sample counts: acquisition {int(imaging[bad])} keeps "
                          f"{int(keep[bad])} samples but acquisition {first} keeps {int(keep[0])} "
                          f"(number_of_samples minus discard_pre and discard_post); expected equal readouts")
    if keep[0] < 1:
        raise SchemaError(f"{src}: acquisition {first} keeps no samples after discard_pre/discard_post")
    n_coils, n_dims = int(channels[0]), int(dims[0])
    _check_lengths(src, records, imaging)
    start = int(h["discard_pre"][0])
    if np.any(h["discard_pre"] != start):
        raise SchemaError(f"{src}: imaging acquisitions discard different numbers of leading samples")
    n = int(keep[0])
    kept = slice(start, start + n)
    # Views of each record (readout, after discards); they are copied once, into each scan's arrays.
    data = [records["data"][i].view(np.complex64).reshape(n_coils, -1)[:, kept] for i in imaging]
    traj = np.concatenate([records["traj"][i].reshape(-1, n_dims)[kept] for i in imaging]) if n_dims else \
        np.zeros((imaging.size * n, 0), dtype=np.float32)
    noise_data = _noise(src, records, np.flatnonzero(noise), n_coils)
    return {
        "data": data, "traj": traj.reshape(imaging.size, n, n_dims), "noise": noise_data, "dims": n_dims,
        "ref": int(refs[0]), "samples": n,
        "idx": {name: h["idx"][name].astype(np.int64) for name in DIMENSIONS},
        "skipped": int((skip & ~noise).sum()), "sample_time_us": float(h["sample_time_us"][0]),
        "orientation": {name: h[field].astype(np.float64) for name, field in _ORIENTATION.items()},
        "steps": [h["idx"][name].astype(np.int64) for name in STEPS], "centre_sample": h["center_sample"],
        "reverse": _flag(h["flags"], mr.ACQ_IS_REVERSE),
        "stamps": h["acquisition_time_stamp"].astype(np.float64) * 2.5,  # ms; 2.5 ms ticks (io.frames)
    }


def _check_lengths(src: str, records: np.ndarray, rows: np.ndarray) -> None:
    """The stored data and trajectory lengths must agree with each acquisition's header."""
    head = records["head"][rows]
    samples = head["number_of_samples"].astype(np.int64)
    expected = {"data": 2 * head["active_channels"].astype(np.int64) * samples,
                "traj": head["trajectory_dimensions"].astype(np.int64) * samples}
    for name, want in expected.items():
        found = np.fromiter((len(records[name][i]) for i in rows), dtype=np.int64, count=rows.size)
        if np.any(found != want):
            j = int(np.argmax(found != want))
            what = "data" if name == "data" else "trajectory"
            raise SchemaError(f"{src}: inconsistent sample counts: acquisition {int(rows[j])} stores "
                              f"{int(found[j])} {what} values but its header gives {int(want[j])}")


def _noise(src: str, records: np.ndarray, rows: np.ndarray, coils: int) -> np.ndarray | None:
    if rows.size == 0:
        return None
    head = records["head"][rows]
    channels = head["active_channels"].astype(np.int64)
    if np.any(channels != coils):
        bad = int(rows[np.argmax(channels != coils)])
        raise SchemaError(f"{src}: noise acquisition {bad} has {int(records['head'][bad]['active_channels'])} "
                          f"channels but the imaging data has {coils}")
    _check_lengths(src, records, rows)
    parts = [records["data"][i].view(np.complex64).reshape(coils, -1) for i in rows]
    return np.concatenate(parts, axis=1)


def _scans(path: str | os.PathLike, traj_units: str, space: str, dataset: str | None,
           chosen: dict[str, int | None], allow_external: bool) -> list[tuple[dict, Scan]]:
    header, records, dataset = _read(path, dataset, allow_external)
    return scans_of(str(path), header, records, dataset, traj_units, space, chosen)


def scans_of(src: str, header: Any, records: np.ndarray, dataset: str, traj_units: str, space: str,
             chosen: dict[str, int | None]) -> list[tuple[dict, Scan]]:
    """The chosen images of ``records`` (ISMRMRD acquisition records, ``acquisition_dtype``) with the parsed
    ``header``, as ``(key, Scan)`` pairs (:func:`load_ismrmrd_all`; ``src`` names them in messages)."""
    acq = _records(src, records)
    geometry = encoding_space(src, header, acq["ref"], space)
    extra: dict[str, Any] = {}  # Cartesian, or stack of stars with its partitions in kspace_encode_step_2
    if acq["dims"] == 0:
        acq["data"], trajectory, extra = cartesian_readouts(src, header, acq, geometry)
        weights, units, acq["samples"] = None, extra["traj_units"], trajectory.shape[1]
    elif acq["dims"] == 2 and geometry["ndim"] == 3:
        acq["traj"], traj_units = partition_column(src, header, acq, geometry, traj_units)
        extra = {"partitions": "kspace_encode_step_2"}
    if acq["dims"] != 0:
        trajectory, weights, units = scale_trajectory(src, acq["traj"], geometry, traj_units)
    data, n = acq["data"], acq["samples"]  # data: one (C, n) view per readout
    index = np.stack([acq["idx"][name] for name in DIMENSIONS], axis=1)  # (readouts, 5)
    every = [dict(zip(DIMENSIONS, values)) for values in sorted({tuple(row) for row in index.tolist()})]
    out = []
    for key in (every[i] for i in select(every, src, **chosen)):
        rows = np.flatnonzero(np.all(index == [key[name] for name in DIMENSIONS], axis=1))
        attrs = {
            "source_format": "ismrmrd", "ismrmrd_dataset": dataset, "traj_units": units, "space": space,
            **key, "samples_per_readout": n, "fov_mm": geometry["fov_mm"],
            "encoded_matrix": geometry["encoded_matrix"], "encoded_fov_mm": geometry["encoded_fov_mm"],
            "trajectory_type": geometry["trajectory_type"], "sample_time_us": acq["sample_time_us"],
            "skipped_acquisitions": acq["skipped"], "voxel_size_mm": geometry["voxel_size_mm"], **extra,
        }
        # The slice's first readout places it; all-zero directions are headers that leave geometry unset.
        placed = {name: values[rows[0]].tolist() for name, values in acq["orientation"].items()}
        if any(any(placed[name]) for name in ("read_dir", "phase_dir", "slice_dir")):
            attrs.update(placed)
        if np.any(acq["stamps"][rows]):  # each readout's time stamp (ms), for time series (io.frames)
            attrs["readout_time_ms"] = acq["stamps"][rows]
        if acq["dims"] > geometry["ndim"] and weights is None:
            attrs["trajectory_extra_column"] = "all zero: ignored (no density weights)"
        pick = slice(None) if rows.size == len(data) else rows  # no copy for a single image
        scan = Scan(
            kspace=np.concatenate([data[i] for i in rows], axis=1),
            trajectory=np.ascontiguousarray(trajectory[pick]).reshape(-1, geometry["ndim"]),
            matrix=geometry["matrix"],
            weights=None if weights is None else weights[pick].reshape(-1),
            noise=acq["noise"], attrs=attrs, source=src,
        )
        out.append((key, scan))
    return out


def load_ismrmrd_all(path: str | os.PathLike, *, traj_units: str = "auto", space: str = "recon",
                     dataset: str | None = None, slice: int | None = None, contrast: int | None = None,
                     phase: int | None = None, set: int | None = None,
                     repetition: int | None = None, allow_external: bool = False) -> list[tuple[dict, Scan]]:
    """Every image of an ISMRMRD file, or those chosen, as ``(key, Scan)`` pairs.

    The key holds the image's ``slice``, ``contrast``, ``phase``, ``set`` and ``repetition`` (in that
    order); the pairs are sorted by them, slice first. The pipeline reconstructs each scan and arranges the
    images on named leading output axes (:func:`mri_recon.io.stack.stack_layout`). See the module docstring
    for what is read and how the trajectory is scaled.

    Parameters
    ----------
    path
        The ISMRMRD (HDF5) file.
    traj_units
        ``"auto"`` (decide from the extent), ``"cycles-per-fov"`` or ``"normalized"``; the choice is in
        ``Scan.attrs["traj_units"]``.
    space
        ``"recon"``: the image is the header's reconSpace (matrix and FOV). ``"encoded"``: the encodedSpace,
        e.g. the 2x readout FOV, for objects that reach beyond the recon FOV (crop afterwards).
    dataset
        The HDF5 group to read; by default ``"dataset"``, else the first group with ``data`` and ``xml``.
    slice, contrast, phase, set, repetition
        Keep only the images with this index (``None``: every value).
    allow_external
        Read datasets and links that reach other files (refused by default, before any read:
        :mod:`mri_recon.io.contained`).

    Raises
    ------
    SchemaError
        Missing trajectory, zero channels, missing header matrix, inconsistent sample counts, a choice that
        matches no image (the message names the values the file holds), ...
    TrajectoryUnitsError
        The trajectory extent fits neither unit, or both.
    """
    chosen = dict(zip(DIMENSIONS, (slice, contrast, phase, set, repetition)))
    return _scans(path, traj_units, space, dataset, chosen, allow_external)


def load_ismrmrd(path: str | os.PathLike, *, traj_units: str = "auto", slice: int | None = None,
                 repetition: int | None = None, space: str = "recon", dataset: str | None = None,
                 contrast: int | None = None, phase: int | None = None, set: int | None = None,
                 allow_external: bool = False) -> Scan:
    """One image of an ISMRMRD file as a :class:`Scan` (see :func:`load_ismrmrd_all`).

    ``slice``, ``contrast``, ``phase``, ``set`` and ``repetition`` choose it; each may be left out when
    the file (or the images the others leave) holds only one value of it.

    Raises
    ------
    SchemaError
        No image matches, or several do (the message names the values they hold).
    """
    chosen = dict(zip(DIMENSIONS, (slice, contrast, phase, set, repetition)))
    scans = _scans(path, traj_units, space, dataset, chosen, allow_external)
    if len(scans) > 1:
        raise SchemaError(f"{path}: holds several images ({describe([key for key, _ in scans])}); choose one "
                          f"with slice=, contrast=, phase=, set=, repetition= or read them all with "
                          f"load_ismrmrd_all")
    return scans[0][1]


INPUT = InputFormat("ismrmrd", (".mrd", ".mrd.h5"), lambda probe: probe.hdf5 == "ismrmrd",
                    lambda probe, **options: load_ismrmrd_all(probe.path, allow_external=probe.allow_external,
                                                              **options),
                    lambda probe, **options: load_ismrmrd(probe.path, allow_external=probe.allow_external, **options))
"""ISMRMRD (MRD) raw-data input."""
