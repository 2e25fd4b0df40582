"""Cartesian MRD acquisitions (no trajectory), and stack-of-stars with its partitions in ``kspace_encode_step_2``.

Cartesian. An acquisition without a trajectory (``trajectory_dimensions = 0``) is one readout line of a
Cartesian encoding: its phase encode is ``idx.kspace_encode_step_1`` (and, in 3-D, its partition
``idx.kspace_encode_step_2``), at ``k = step - centre`` cycles per field of view, ``centre`` the header's
``encodingLimits`` centre (when the header leaves it 0 with a larger maximum: ``encodedMatrix // 2``);
readout sample ``i`` sits at ``k = i - center_sample``. Each readout is placed on the encoded readout grid
(``encodedSpace`` x) with zeros where the echo has no sample (partial Fourier along the readout: zero-filled).
Readout oversampling (``encodedSpace`` x wider than ``reconSpace`` x at the same voxel size) is removed as
scanners do: inverse FFT along the readout, keep the centre ``reconSpace`` voxels, FFT back. The samples then
lie on integer frequencies of the image grid, which :mod:`mri_recon.operators.engines.cartesian` transforms by FFT.
Phase encodes absent from the file (undersampling, partial Fourier) are left out of the sampling mask;
asymmetric coverage is recorded as partial Fourier in ``Scan.attrs["partial_fourier"]``, zero-filled.

Stack of stars. An acquisition with a 2-D trajectory (two columns) in a 3-D encoding carries its
partition in ``idx.kspace_encode_step_2``: ``kz = step_2 - centre`` cycles per encoded FOV, appended as the
third trajectory column in the units of the other two (divided by ``encodedMatrix_z`` when they are
normalized), so that the scan is the 3-D stack of stars it is.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..checks.validation import trajectory_extent
from ..errors import InvalidDataError, SchemaError
from .ismrmrd_encoding import detect_units

log = logging.getLogger(__name__)

CHUNK = 2048
"""Readouts whose oversampling is removed at once."""
STEPS = ("kspace_encode_step_1", "kspace_encode_step_2")
LIMITS = ("kspace_encoding_step_1", "kspace_encoding_step_2")
"""The acquisition header's encode-step indices and the XML header's ``encodingLimits`` of each."""


def step_centre(header: Any, ref: int, axis: int, encoded: int) -> int:
    """The encode step at ``k = 0`` along phase (``axis`` 1) or partition (``axis`` 2): the header's
    ``encodingLimits`` centre, or ``encoded // 2`` where the header leaves it 0 above a larger maximum (unset)."""
    limits = getattr(header.encoding[ref], "encodingLimits", None)
    limit = getattr(limits, LIMITS[axis - 1], None) if limits is not None else None
    centre = getattr(limit, "center", None)
    maximum = getattr(limit, "maximum", None)
    if centre is None or (int(centre) == 0 and maximum is not None and int(maximum) > 0):
        return int(encoded) // 2
    return int(centre)


def _phase_frequencies(src: str, header: Any, ref: int, acq: dict, geometry: dict) -> np.ndarray:
    """``(readouts, D - 1)`` integer phase (and partition) frequencies in cycles per image FOV."""
    ndim, out = geometry["ndim"], []
    for axis in range(1, ndim):
        if abs(float(geometry["scale"][axis]) - 1.0) > 1e-6:
            raise InvalidDataError(
                f"{src}: the encoded and recon fields of view differ along axis {axis} "
                f"({geometry['encoded_fov_mm'][axis]} vs {geometry['fov_mm'][axis]} mm): Cartesian phase "
                f"oversampling is not supported on the recon space; reconstruct with space='encoded'")
        centre = acq["centres"][axis - 1] if "centres" in acq else step_centre(header, ref, axis,
                                                                                  int(geometry["encoded"][axis]))
        k = acq["steps"][axis - 1] - centre
        n = int(geometry["matrix"][axis])
        if k.min() < -(n // 2) or k.max() >= n - n // 2:
            raise InvalidDataError(f"{src}: encode step {axis} reaches k = {int(k.min())}..{int(k.max())}, beyond "
                                   f"the {n}-voxel matrix's frequencies {-(n // 2)}..{n - n // 2 - 1}")
        out.append(k)
    if ndim == 2 and np.any(acq["steps"][1] != 0):
        raise InvalidDataError(f"{src}: a 2-D recon space (matrix z = 1) with partitions in kspace_encode_step_2 "
                               f"(values {np.unique(acq['steps'][1])[:4].tolist()}...): expected a 3-D reconSpace")
    return np.stack(out, axis=1).astype(np.int64)


def _readout_grid(src: str, data: list, centre: np.ndarray, encoded: int) -> np.ndarray:
    """Readouts ``(R, C, encoded)`` on the encoded readout grid (index ``p`` at ``k = p - encoded // 2``),
    zeros where an echo has no sample."""
    n = data[0].shape[1]
    first = encoded // 2 - centre  # grid index of sample 0 of each readout
    if np.any(first < 0) or np.any(first + n > encoded):
        raise InvalidDataError(f"{src}: readouts of {n} samples with center_sample {int(centre.min())}.."
                               f"{int(centre.max())} do not fit the encoded readout of {encoded} samples")
    out = np.zeros((len(data), data[0].shape[0], encoded), dtype=np.complex64)
    for r, (line, start) in enumerate(zip(data, first.tolist())):
        out[r, :, start:start + n] = line
    return out


def remove_oversampling(lines: np.ndarray, matrix: int) -> np.ndarray:
    """Readouts ``(..., Ne)`` (index ``p`` at ``k = p - Ne // 2``) cropped to the centre ``matrix`` voxels
    of the readout image: inverse FFT, crop, FFT (float64 inside); the voxels keep their values, so the data
    keep the unnormalized scale of :mod:`mri_recon.operators.encoding`."""
    encoded = lines.shape[-1]
    if encoded == matrix:
        return lines
    image = np.fft.fftshift(np.fft.ifft(np.fft.ifftshift(lines.astype(np.complex128), axes=-1), axis=-1), axes=-1)
    start = encoded // 2 - matrix // 2
    kept = image[..., start:start + matrix]
    spectrum = np.fft.fftshift(np.fft.fft(np.fft.ifftshift(kept, axes=-1), axis=-1), axes=-1)
    return spectrum.astype(np.complex64)


def _on_recon_grid(src: str, data: list, centre: np.ndarray, encoded: int, matrix: int) -> np.ndarray:
    """complex64 ``(R, C, matrix)``: the readouts placed on the encoded readout grid and cropped to the recon
    voxels, :data:`CHUNK` readouts at a time (the float64 FFT's work stays small for large 3-D scans)."""
    out = np.empty((len(data), data[0].shape[0], matrix), dtype=np.complex64)
    for start in range(0, len(data), CHUNK):
        part = slice(start, start + CHUNK)
        out[part] = remove_oversampling(_readout_grid(src, data[part], centre[part], encoded), matrix)
    return out


def _partial_fourier(k: np.ndarray, matrix: tuple[int, ...], readout: tuple[int, int]) -> str | None:
    """A description of asymmetric k-space coverage (partial Fourier) per axis, or None."""
    parts = []
    ranges = [readout] + [(int(k[:, a].min()), int(k[:, a].max())) for a in range(k.shape[1])]
    for axis, ((low, high), n) in enumerate(zip(ranges, matrix)):
        full = (-(n // 2), n - n // 2 - 1)
        if (low, high) != full and abs(low + high) > max(2, n // 16):  # not the gaps of undersampling
            what = "readout" if axis == 0 else f"encode step {axis}"
            parts.append(f"{what}: k {low}..{high} of {full[0]}..{full[1]}")
    if not parts:
        return None
    return "; ".join(parts) + ": zero-filled (no homodyne)"


def cartesian_readouts(src: str, header: Any, acq: dict, geometry: dict) -> tuple[list, np.ndarray, dict]:
    """Cartesian readouts on the image grid: the per-readout data ``(C, Nx)``, the trajectory
    ``(readouts, Nx, D)`` (integer frequencies, cycles per image FOV) and the attributes to record.

    ``acq`` holds ``data`` (one ``(C, n)`` array per readout), ``steps`` (encode steps 1 and 2 per readout),
    ``centre_sample`` and ``reverse`` (per readout), ``ref`` (the encoding space), and optionally ``centres``
    (the steps at k = 0, else read from ``header``: :func:`step_centre`).
    """
    if np.any(acq["reverse"]):
        raise InvalidDataError(f"{src}: reversed readouts (ACQ_IS_REVERSE, EPI) are not supported on the "
                               f"Cartesian path")
    matrix = tuple(int(n) for n in geometry["matrix"])
    encoded_x = int(geometry["encoded"][0])
    if geometry["scale"][0] != 1.0 and abs(encoded_x * geometry["scale"][0] - matrix[0]) > 1e-3:
        raise InvalidDataError(f"{src}: readout encodedSpace {encoded_x} over {geometry['encoded_fov_mm'][0]} mm "
                               f"and reconSpace {matrix[0]} over {geometry['fov_mm'][0]} mm have different voxel "
                               f"sizes; expected readout oversampling (same voxel size) or space='encoded'")
    phase = _phase_frequencies(src, header, acq["ref"], acq, geometry)
    n, centre = acq["data"][0].shape[1], np.asarray(acq["centre_sample"], dtype=np.int64)
    lines = _on_recon_grid(src, acq["data"], centre, encoded_x, matrix[0])
    readout_low, readout_high = -int(centre.max()), n - 1 - int(centre.min())
    kx = np.arange(matrix[0]) - matrix[0] // 2
    trajectory = np.empty((len(lines), matrix[0], len(matrix)), dtype=np.float32)
    trajectory[:, :, 0] = kx
    trajectory[:, :, 1:] = phase[:, None, :]
    attrs = {"sampling": "cartesian", "traj_units": "cartesian (encode steps)",
             "readout_oversampling_removed": bool(encoded_x != matrix[0])}
    clipped = (max(readout_low, -(matrix[0] // 2)), min(readout_high, matrix[0] - matrix[0] // 2 - 1))
    partial = _partial_fourier(phase, matrix, clipped)
    if partial is not None:
        attrs["partial_fourier"] = partial
        log.info("%s: partial Fourier, %s", src, partial)
    if encoded_x != matrix[0]:
        log.info("%s: readout oversampling removed (%d -> %d samples)", src, encoded_x, matrix[0])
    return list(lines), trajectory, attrs


def partition_column(src: str, header: Any, acq: dict, geometry: dict, traj_units: str) -> tuple[np.ndarray, str]:
    """The stored 2-D radial trajectory ``(readouts, n, 2)`` with ``kz`` from ``kspace_encode_step_2``
    appended, ``(readouts, n, 3)`` in the units of the two stored columns, and those units (``traj_units``,
    or for ``"auto"`` detected from the two columns against the encoded matrix)."""
    if traj_units == "auto":
        extent = trajectory_extent(acq["traj"].reshape(-1, 2))
        traj_units = detect_units(extent, geometry["encoded"][:2], src)
    units = traj_units
    encoded_z = int(geometry["encoded"][2])
    kz = (acq["steps"][1] - step_centre(header, acq["ref"], 2, encoded_z)).astype(np.float64)
    if units == "normalized":
        kz = kz / encoded_z
    if np.all(kz == kz[0]) and kz.size > 1:
        raise SchemaError(f"{src}: a 3-D encoding with a 2-D trajectory needs its partitions in "
                          f"kspace_encode_step_2, and every acquisition has the same ({int(acq['steps'][1][0])})")
    traj = acq["traj"]
    column = np.broadcast_to(kz[:, None, None], (*traj.shape[:2], 1)).astype(np.float32)
    return np.concatenate([traj, column], axis=2), units
