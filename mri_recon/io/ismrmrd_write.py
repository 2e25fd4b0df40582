"""Writing ISMRMRD (MRD) files from scans, and converting MRD input to schema v1."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import InvalidDataError, OutputError
from ..scan import Scan
from .files import memory_output, same_file
from .ismrmrd import MAX_READOUT, _ismrmrd, load_ismrmrd_all
from .schema import save_scan
from .stack import DIMENSIONS

# --------------------------------------------------------------------------------------------------------
# Writing


def _key(values: Mapping) -> dict[str, int]:
    """The five image indices of a key or of ``Scan.attrs`` (0 where absent)."""
    return {name: int(values.get(name, 0)) for name in DIMENSIONS}


def _pairs(scans: Scan | Sequence[tuple[Mapping, Scan]]) -> list[tuple[dict, Scan]]:
    if isinstance(scans, Scan):
        return [(_key(scans.attrs), scans)]
    pairs = [(_key(key), scan) for key, scan in scans]
    if not pairs:
        raise InvalidDataError("write_ismrmrd: no scans given")
    first = pairs[0][1]
    for key, scan in pairs[1:]:
        if scan.matrix != first.matrix or scan.n_coils != first.n_coils or \
                (scan.weights is None) != (first.weights is None):
            raise InvalidDataError(f"write_ismrmrd: scan {key} has matrix {list(scan.matrix)}, "
                                   f"{scan.n_coils} coils but the first has {list(first.matrix)}, "
                                   f"{first.n_coils} coils (and weights must be given for all or none)")
    if len({tuple(k.values()) for k, _ in pairs}) != len(pairs):
        raise InvalidDataError("write_ismrmrd: two scans share one slice, contrast, phase, set and repetition")
    return pairs


def _readout(scan: Scan, samples_per_readout: int | None) -> int:
    """Samples per acquisition: the argument, else a known readout length, else a divisor of M."""
    m = scan.n_samples
    if samples_per_readout is not None:
        n = int(samples_per_readout)
    else:
        known = [int(scan.attrs.get(name, 0) or 0) for name in ("samples_per_readout", "samples")]
        fits = [k for k in known if 0 < k <= MAX_READOUT and m % k == 0]
        n = fits[0] if fits else max(d for d in range(1, min(m, MAX_READOUT) + 1) if m % d == 0)
    if not 0 < n <= MAX_READOUT or m % n:
        raise InvalidDataError(f"write_ismrmrd: samples_per_readout {n} must divide the {m} samples and be at "
                               f"most {MAX_READOUT}")
    return n


def _header(mr, scan: Scan, fov: np.ndarray, encoded: np.ndarray, encoded_fov: np.ndarray,
            counts: dict[str, int], readouts: int):
    x = mr.xsd
    ndim = scan.ndim

    def space(size, mm):
        size = [int(v) for v in size] + [1] * (3 - ndim)
        mm = [float(v) for v in mm] + [float(fov[2]) if ndim == 3 else 1.0] * (3 - ndim)
        return x.encodingSpaceType(matrixSize=x.matrixSizeType(x=size[0], y=size[1], z=size[2]),
                                   fieldOfView_mm=x.fieldOfViewMm(x=mm[0], y=mm[1], z=mm[2]))

    def limit(n):
        return x.limitType(minimum=0, maximum=max(n - 1, 0), center=0)

    kind = str(scan.attrs.get("trajectory_type", "other"))
    try:
        trajectory = x.trajectoryType(kind)
    except ValueError:
        trajectory = x.trajectoryType.OTHER
    return x.ismrmrdHeader(
        experimentalConditions=x.experimentalConditionsType(H1resonanceFrequency_Hz=63_870_000),
        acquisitionSystemInformation=x.acquisitionSystemInformationType(receiverChannels=scan.n_coils),
        encoding=[x.encodingType(
            encodedSpace=space(encoded, encoded_fov), reconSpace=space(scan.matrix, fov),
            encodingLimits=x.encodingLimitsType(kspace_encoding_step_1=limit(readouts),
                                                **{name: limit(n) for name, n in counts.items()}),
            trajectory=trajectory)],
    )


def write_ismrmrd(path: str | os.PathLike, scans: Scan | Sequence[tuple[Mapping, Scan]], *,
                  traj_units: str = "cycles-per-fov", samples_per_readout: int | None = None,
                  readout_oversampling: float = 1.0, fov_mm: Sequence[float] | None = None,
                  weights_in_trajectory: bool = True, sample_time_us: float = 2.0,
                  dataset: str = "dataset") -> None:
    """Write scans as an ISMRMRD file with the ``ismrmrd`` package (atomically).

    Stored: k-space, trajectory (relative to the encoded space), weights (as a trajectory column) and
    noise; ISMRMRD raw data has no place for coil maps, field maps or a ground truth.

    Parameters
    ----------
    path
        Output file.
    scans
        One :class:`Scan` (its indices from its attrs), or ``(key, Scan)`` pairs, the key holding any of
        ``slice``, ``contrast``, ``phase``, ``set``, ``repetition`` (0 where absent), as
        :func:`load_ismrmrd_all` returns them; all share matrix and coils. The noise of the first scan that has
        one is written first, as ``ACQ_IS_NOISE_MEASUREMENT`` acquisitions.
    traj_units
        ``"cycles-per-fov"`` (cycles per encoded FOV) or ``"normalized"`` (that over the encoded matrix).
    samples_per_readout
        Samples per acquisition; by default ``attrs["samples_per_readout"]`` (or ``attrs["samples"]``, as
        :func:`mri_recon.sim.simulate.simulate_scan` sets it) when it divides the samples, else the largest
        divisor of M up to :data:`MAX_READOUT`.
    readout_oversampling
        Encoded FOV and matrix along x over the recon ones (2.0 for the usual 2x readout oversampling); the
        stored trajectory is scaled to the encoded FOV.
    fov_mm
        Recon field of view; by default ``attrs["fov_mm"]``, else 1 mm voxels.
    weights_in_trajectory
        Store ``Scan.weights`` as the extra trailing trajectory dimension.
    sample_time_us
        Dwell time written to every acquisition header.
    dataset
        The HDF5 group name.
    """
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    mr = _ismrmrd()
    if traj_units not in ("cycles-per-fov", "normalized"):
        raise InvalidDataError(f"unknown traj_units {traj_units!r}: expected 'cycles-per-fov' or 'normalized'")
    pairs = _pairs(scans)
    first = pairs[0][1]
    fov, encoded, encoded_fov, scale = _spaces(first, fov_mm, readout_oversampling, traj_units)
    acquisitions = _noise_acquisitions(mr, pairs, sample_time_us)
    readouts = 0
    for key, scan in pairs:
        n = _readout(scan, samples_per_readout)
        readouts = max(readouts, scan.n_samples // n)
        acquisitions += _scan_acquisitions(mr, key, scan, scale, n, weights_in_trajectory, sample_time_us)
    acquisitions[-1].set_flag(mr.ACQ_LAST_IN_MEASUREMENT)
    counts = {name: max(k[name] for k, _ in pairs) + 1 for name in DIMENSIONS}
    header = _header(mr, first, fov, encoded, encoded_fov, counts, readouts)
    with memory_output(path) as buffer, h5py.File(buffer, "w") as f:  # as ismrmrd.File, in memory
        group = mr.file.Folder(f)[dataset]
        group.header = header
        group.acquisitions = acquisitions


def _spaces(first: Scan, fov_mm: Sequence[float] | None, readout_oversampling: float,
            traj_units: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(recon FOV, encoded matrix, encoded FOV, trajectory scale)``: the recon FOV from ``fov_mm`` or the
    scan's attrs (1 mm voxels by default), the readout oversampled, and the factor from the scan's cycles per
    recon FOV to the stored units."""
    ndim = first.ndim
    matrix = np.asarray(first.matrix, dtype=np.float64)
    fov = np.asarray(fov_mm if fov_mm is not None else first.attrs.get("fov_mm", matrix), dtype=np.float64)
    if fov.shape != (ndim,) or np.any(fov <= 0):
        raise InvalidDataError(f"write_ismrmrd: fov_mm must be {ndim} positive sizes, found {fov.tolist()}")
    encoded = matrix.copy()
    encoded[0] = round(readout_oversampling * matrix[0])
    if encoded[0] < matrix[0]:
        raise InvalidDataError(f"write_ismrmrd: readout_oversampling must be >= 1, found {readout_oversampling}")
    encoded_fov = fov * encoded / matrix
    scale = encoded / matrix  # recon-FOV cycles -> encoded-FOV cycles
    if traj_units == "normalized":
        scale = scale / encoded
    return fov, encoded, encoded_fov, scale


def _noise_acquisitions(mr, pairs: list[tuple[dict, Scan]], sample_time_us: float) -> list:
    """The noise of the first scan that has one, as ``ACQ_IS_NOISE_MEASUREMENT`` acquisitions of <= 512
    samples."""
    acquisitions = []
    noise = next((scan.noise for _, scan in pairs if scan.noise is not None), None)
    if noise is not None:
        step = min(noise.shape[1], 512)
        for start in range(0, noise.shape[1], step):
            acq = mr.Acquisition.from_array(np.ascontiguousarray(noise[:, start:start + step]),
                                            sample_time_us=sample_time_us)
            acq.set_flag(mr.ACQ_IS_NOISE_MEASUREMENT)
            acquisitions.append(acq)
    return acquisitions


def _scan_acquisitions(mr, key: dict, scan: Scan, scale: np.ndarray, n: int, weights_in_trajectory: bool,
                       sample_time_us: float) -> list:
    """One acquisition per readout of ``n`` samples, with its indices and first/last-in-slice flags."""
    count = scan.n_samples // n
    k = (scan.trajectory.astype(np.float64) * scale).astype(np.float32)
    if scan.weights is not None and weights_in_trajectory:
        k = np.concatenate([k, scan.weights[:, None]], axis=1)
    acquisitions = []
    for a in range(count):
        part = slice(a * n, (a + 1) * n)
        acq = mr.Acquisition.from_array(np.ascontiguousarray(scan.kspace[:, part]),
                                        np.ascontiguousarray(k[part]), sample_time_us=sample_time_us,
                                        center_sample=n // 2)
        for name, value in key.items():
            setattr(acq.idx, name, value)
        acq.idx.kspace_encode_step_1 = a
        if "readout_time_ms" in scan.attrs:  # time stamps of a time series (2.5 ms ticks; io.frames)
            acq.acquisition_time_stamp = int(round(float(scan.attrs["readout_time_ms"][a]) / 2.5))
        if a == 0:
            acq.set_flag(mr.ACQ_FIRST_IN_SLICE)
        if a == count - 1:
            acq.set_flag(mr.ACQ_LAST_IN_SLICE)
        acquisitions.append(acq)
    return acquisitions


# --------------------------------------------------------------------------------------------------------
# Conversion


def convert(in_path: str | os.PathLike, out_path: str | os.PathLike, *, traj_units: str = "auto",
            slice: int | None = None, repetition: int | None = None, space: str = "recon",
            dataset: str | None = None, contrast: int | None = None, phase: int | None = None,
            set: int | None = None, allow_external: bool = False) -> list[Path]:
    """Convert an ISMRMRD file to schema v1 (through :func:`mri_recon.io.save_scan`).

    One image (after the optional ``slice`` / ``contrast`` / ``phase`` / ``set`` / ``repetition`` choice)
    is written to ``out_path``. Several are written one file each, beside ``out_path`` with the indices that
    vary appended to its stem: ``out.h5`` becomes ``out_slice0.h5, out_slice1.h5`` (or ``out_contrast1.h5``,
    ``out_phase2.h5``, ``out_set1.h5``, ``out_rep2.h5``, ``out_slice0_contrast1.h5``, ...). The whole input
    is read and checked before anything is written; ``allow_external`` as for
    :func:`~mri_recon.io.ismrmrd.load_ismrmrd_all`.

    Returns
    -------
    list of Path
        The files written, in the order of :func:`load_ismrmrd_all`.

    Raises
    ------
    SchemaError
        The choice matches no image (the message names the values the file holds), or the input is malformed.
    OutputError
        An output would replace the input.
    """
    out_path = Path(out_path)
    scans = load_ismrmrd_all(in_path, traj_units=traj_units, space=space, dataset=dataset, slice=slice,
                             contrast=contrast, phase=phase, set=set, repetition=repetition,
                             allow_external=allow_external)
    if len(scans) == 1:
        targets = [out_path]
    else:
        several = [name for name in DIMENSIONS if len({key[name] for key, _ in scans}) > 1]
        targets = []
        for key, _ in scans:
            suffix = "".join(f"_{_TAGS.get(name, name)}{key[name]}" for name in several)
            targets.append(out_path.with_name(out_path.stem + suffix + out_path.suffix))
    for target in targets:
        if same_file(target, in_path):
            raise OutputError(f"{target}: output would overwrite the input file; choose another path")
    for target, (_, scan) in zip(targets, scans):
        save_scan(target, scan, protect=(in_path,))
    return targets


_TAGS = {"repetition": "rep"}
"""Short names of the indices in the file names of :func:`convert` (others: the index's own name)."""
