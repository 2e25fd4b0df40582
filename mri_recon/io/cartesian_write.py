"""Writing Cartesian k-space as MRD acquisitions without trajectory (the layout :mod:`.cartesian` reads).

For tests, benchmarks and users who hold Cartesian k-space in arrays: one acquisition per phase encode (and
partition), ``idx.kspace_encode_step_1/2`` the line's index on the encoded grid, ``encodingLimits`` centres
at ``N // 2``, readout oversampling as an encodedSpace x wider than the reconSpace's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..errors import InvalidDataError
from .files import memory_output


def _ismrmrd():
    import ismrmrd  # noqa: PLC0415 - a dependency, imported on use

    return ismrmrd


def _header(mr, encoded: Sequence[int], matrix: Sequence[int], fov: Sequence[float], coils: int,
            slices: int):
    x = mr.xsd
    ratio = encoded[0] / matrix[0]

    def space(size, mm):
        return x.encodingSpaceType(matrixSize=x.matrixSizeType(x=int(size[0]), y=int(size[1]), z=int(size[2])),
                                   fieldOfView_mm=x.fieldOfViewMm(x=float(mm[0]), y=float(mm[1]), z=float(mm[2])))

    def limit(n):
        return x.limitType(minimum=0, maximum=max(int(n) - 1, 0), center=int(n) // 2)

    encoded_fov = [fov[0] * ratio, fov[1], fov[2]]
    return x.ismrmrdHeader(
        experimentalConditions=x.experimentalConditionsType(H1resonanceFrequency_Hz=63_870_000),
        acquisitionSystemInformation=x.acquisitionSystemInformationType(receiverChannels=coils),
        encoding=[x.encodingType(
            encodedSpace=space(encoded, encoded_fov), reconSpace=space(matrix, fov),
            encodingLimits=x.encodingLimitsType(kspace_encoding_step_1=limit(encoded[1]),
                                                kspace_encoding_step_2=limit(encoded[2]),
                                                slice=x.limitType(minimum=0, maximum=slices - 1, center=0)),
            trajectory=x.trajectoryType.CARTESIAN)],
    )


def write_cartesian_ismrmrd(path: str | os.PathLike, kspace: np.ndarray, *, matrix: Sequence[int] | None = None,
                            lines: np.ndarray | None = None, acs: np.ndarray | None = None,
                            readout: slice | None = None, noise: np.ndarray | None = None,
                            fov_mm: Sequence[float] | None = None) -> None:
    """Write Cartesian k-space ``(S, C, Nx_enc, Ny[, Nz])`` (S 2-D slices, or one 3-D volume with S = 1) as MRD.

    Index ``p`` of each k-space axis is ``k = p - N // 2`` (cycles per FOV), the layout of
    :func:`mri_recon.operators.engines.cartesian` images transformed with ``fftshift(fftn(ifftshift(x)))``.

    Parameters
    ----------
    matrix
        The reconSpace matrix (x may be below ``Nx_enc``: readout oversampling); default the k-space's.
    lines
        bool ``(Ny[, Nz])``: the phase encodes acquired (default all).
    acs
        bool ``(Ny[, Nz])``: lines flagged ``ACQ_IS_PARALLEL_CALIBRATION_AND_IMAGING``.
    readout
        The readout samples written (partial echo), default all; ``center_sample`` follows.
    noise
        complex ``(C, K)`` written first as noise acquisitions.
    fov_mm
        reconSpace field of view (default 1 mm voxels).
    """
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    mr = _ismrmrd()
    kspace = np.asarray(kspace, dtype=np.complex64)
    if kspace.ndim not in (4, 5):
        raise InvalidDataError(f"write_cartesian_ismrmrd: k-space must be (S, C, Nx, Ny[, Nz]), found {kspace.shape}")
    slices, coils, *encoded = kspace.shape
    encoded = [*encoded, 1] if len(encoded) == 2 else encoded
    matrix = [*(matrix or encoded[:kspace.ndim - 2])]
    matrix = [*matrix, 1] if len(matrix) == 2 else matrix
    fov = list(fov_mm) if fov_mm is not None else [float(n) for n in matrix]
    fov = [*fov, 1.0] if len(fov) == 2 else fov
    shape = tuple(encoded[1:]) if kspace.ndim == 5 else (encoded[1],)
    lines = np.ones(shape, dtype=bool) if lines is None else np.asarray(lines, dtype=bool).reshape(shape)
    acs = np.zeros(shape, dtype=bool) if acs is None else np.asarray(acs, dtype=bool).reshape(shape)
    readout = readout or slice(0, encoded[0])
    acquisitions = []
    if noise is not None:
        acq = mr.Acquisition.from_array(np.ascontiguousarray(noise, dtype=np.complex64))
        acq.set_flag(mr.ACQ_IS_NOISE_MEASUREMENT)
        acquisitions.append(acq)
    for s in range(slices):
        for index in zip(*np.nonzero(lines)):
            data = kspace[(s, slice(None), readout, *index)] if kspace.ndim == 5 else kspace[s, :, readout, index[0]]
            acq = mr.Acquisition.from_array(np.ascontiguousarray(data),
                                            center_sample=encoded[0] // 2 - (readout.start or 0))
            acq.idx.kspace_encode_step_1 = int(index[0])
            acq.idx.kspace_encode_step_2 = int(index[1]) if len(index) > 1 else 0
            acq.idx.slice = s
            if acs[index]:
                acq.set_flag(mr.ACQ_IS_PARALLEL_CALIBRATION_AND_IMAGING)
            acquisitions.append(acq)
    acquisitions[-1].set_flag(mr.ACQ_LAST_IN_MEASUREMENT)
    header = _header(mr, encoded, matrix, fov, coils, slices)
    with memory_output(path) as buffer, h5py.File(buffer, "w") as f:
        group = mr.file.Folder(f)["dataset"]
        group.header = header
        group.acquisitions = acquisitions
