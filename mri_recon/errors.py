"""Exception hierarchy of mri-recon.

The library raises these and never prints or exits; the command-line interface turns them into one-line
messages. Every message names what was expected and what was found.
"""

from __future__ import annotations


class MriReconError(Exception):
    """Base class of every error mri-recon raises on purpose."""


class ScanFileError(MriReconError):
    """The scan file cannot be opened or is not HDF5 (missing, a directory, corrupt)."""


class SchemaError(MriReconError):
    """A dataset or attribute is missing, or has the wrong dtype, rank or shape."""


class InvalidDataError(MriReconError):
    """Values are unusable: NaN or Inf, empty arrays, non-positive or absurd sizes."""


class TrajectoryUnitsError(MriReconError):
    """The trajectory extent does not fit the matrix (most often: wrong units)."""


class DeviceError(MriReconError):
    """The requested compute device is unavailable (no CuPy, no GPU, bad index)."""


class ResourceError(MriReconError):
    """The problem does not fit in host or device memory."""


class FilterError(MriReconError):
    """A convolution filter is invalid (even size, too large for constant memory, wrong rank)."""


class OutputError(MriReconError):
    """An output file cannot be written (unwritable path, would overwrite the input)."""


class KernelError(MriReconError):
    """A CUDA kernel failed to compile, or a constant-memory upload does not fit."""
