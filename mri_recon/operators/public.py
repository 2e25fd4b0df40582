"""The encoding operator F, its adjoint F^H and the Toeplitz point-spread function, on every device.

Public functions (:func:`fhd`, :func:`forward`, :func:`psf`) validate their inputs, pick the device and the
method, move the data there and give back the type they were given: NumPy in, NumPy out; CuPy in, CuPy out.
The ``apply_*`` functions below them take arrays already on the device and validated; the reconstruction
pipeline calls those directly.

Methods: ``"auto"`` is the GPU kernel on a GPU and FINUFFT on the CPU; ``"exact"`` is the NumPy oracle
(:mod:`mri_recon.nudft`) on the CPU and the GPU kernel (exact as well) on a GPU; ``"nufft"`` is FINUFFT and
runs on the CPU only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import CPU, Device, get_xp, is_gpu_array, resolve_device, to_device, to_host
from ..errors import DeviceError, InvalidDataError, SchemaError
from ..validation import check_array as _array
from ..validation import check_trajectory_units, validate_matrix
from . import finufft as nufft_cpu
from . import nudft

METHODS = ("auto", "exact", "nufft")
NUFFT_EPS = 1e-7
"""FINUFFT tolerance (relative, computed in double precision); below complex64 output rounding."""


# --------------------------------------------------------------------------------------------------------
# Device and method


def resolve(device: str | int | Device | None = "auto", method: str = "auto",
            like: Any = None) -> tuple[Device, str]:
    """The device to compute on and the engine: ``"gpu"``, ``"exact"`` (NumPy oracle) or ``"nufft"``.

    Parameters
    ----------
    device
        ``"auto" | "cpu" | "gpu" | "gpu:N" | N | Device``. With ``"auto"`` a CuPy input ``like`` keeps its
        own GPU, and ``method="nufft"`` means the CPU.
    method
        ``"auto"``, ``"exact"`` or ``"nufft"``.
    like
        An input array, consulted by ``device="auto"``.
    """
    if method not in METHODS:
        raise InvalidDataError(f"unknown method {method!r}: expected 'auto', 'exact' or 'nufft'")
    auto = device is None or (isinstance(device, str) and device == "auto")
    if auto and method == "nufft":
        return CPU, "nufft"
    if auto and is_gpu_array(like):
        dev = resolve_device(int(like.device.id))
    else:
        dev = resolve_device(device)
    if dev.is_gpu:
        if method == "nufft":
            raise DeviceError(f"method 'nufft' (FINUFFT) runs on the CPU only, found device {dev}; "
                              f"use device='cpu' or method='exact'")
        return dev, "gpu"
    return dev, "exact" if method == "exact" else "nufft"


# --------------------------------------------------------------------------------------------------------
# Device-level primitives (inputs validated and already on the device)


def apply_adjoint(engine: str, kspace: Any, trajectory: Any, matrix: tuple[int, ...]) -> Any:
    """F^H d: complex64 ``(C, M)`` and float32 ``(M, D)`` on one device -> complex64 ``(C, *matrix)`` there."""
    if engine == "gpu":
        from . import gpu_exact as gpu_fhd  # noqa: PLC0415 - needs CuPy and a GPU

        return gpu_fhd.fhd_gpu(kspace, trajectory, matrix)
    if engine == "exact":
        out = nudft.nudft_adjoint(kspace, trajectory, matrix)
    else:
        out = nufft_cpu.adjoint(kspace, trajectory, matrix, eps=NUFFT_EPS)
    return out.astype(np.complex64)


def apply_forward(engine: str, image: Any, trajectory: Any) -> Any:
    """F x: complex64 ``(C, *matrix)`` and float32 ``(M, D)`` on one device -> complex64 ``(C, M)`` there."""
    if engine == "gpu":
        from . import gpu_exact as gpu_fhd  # noqa: PLC0415 - needs CuPy and a GPU

        return gpu_fhd.forward_gpu(image, trajectory)
    if engine == "exact":
        out = nudft.nudft_forward(image, trajectory)
    else:
        out = nufft_cpu.forward(image, trajectory, eps=NUFFT_EPS)
    return out.astype(np.complex64)


def apply_psf(engine: str, trajectory: Any, weights: Any, matrix: tuple[int, ...]) -> Any:
    """The Toeplitz PSF on the 2x grid: ``p[j] = sum_m w_m exp(+i 2 pi k_m . (j - N) / N)``, j in [0, 2N).

    It is F^H w with trajectory 2k on matrix 2N (the 2x grid's voxel j sits at (j - N) / (2N)), which may
    reach 2 N per axis: the user-facing unit check does not apply to it. ``weights`` is float32 ``(M,)``
    (pass ones for no weights). Returns complex64 of shape ``tuple(2 * n for n in matrix)``.
    """
    if engine == "gpu":
        from . import gpu_exact as gpu_fhd  # noqa: PLC0415 - needs CuPy and a GPU

        return gpu_fhd.psf_gpu(trajectory, weights, matrix)
    big = tuple(2 * n for n in matrix)
    data = np.asarray(weights, dtype=np.complex128)[None, :]
    k2 = 2 * np.asarray(trajectory, dtype=np.float64)
    if engine == "exact":
        out = nudft.nudft_adjoint(data, k2, big)
    else:
        out = nufft_cpu.adjoint(data, k2, big, eps=NUFFT_EPS)
    return out[0].astype(np.complex64)


# --------------------------------------------------------------------------------------------------------
# Validation


def _checked(source: str, name: str, value: Any, *, complex_: bool, ranks: tuple[int, ...]) -> Any:
    """Apply the schema's dtype, rank, emptiness and finiteness rules; cast to complex64 / float32.

    NumPy inputs (and lists) go through :func:`mri_recon.scan._array`; CuPy inputs get the same rules on
    their device, where only the finiteness count comes back to the host.
    """
    if not is_gpu_array(value):
        return _array(source, name, value, complex_=complex_, ranks=ranks)
    xp = get_xp(value)
    kind, target = ("c", np.complex64) if complex_ else ("f", np.float32)
    if value.dtype.kind != kind:
        want = "complex64 (or complex128)" if complex_ else "float32 (or float64)"
        raise SchemaError(f"{source}: dataset '{name}' must be {want}, found {value.dtype}")
    if value.ndim not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise SchemaError(f"{source}: dataset '{name}' must have rank {want}, found shape {value.shape}")
    if value.size == 0:
        raise InvalidDataError(f"{source}: dataset '{name}' is empty (shape {value.shape})")
    bad = int(value.size - int(xp.count_nonzero(xp.isfinite(value))))
    if bad:
        raise InvalidDataError(f"{source}: dataset '{name}' contains {bad} NaN or Inf value(s)")
    return xp.ascontiguousarray(value.astype(target, copy=False))


def _trajectory(source: str, trajectory: Any, matrix: tuple[int, ...], n_samples: int | None = None) -> Any:
    """Checked float32 ``(M, D)`` trajectory matching ``matrix`` (and ``n_samples``), in the right units."""
    traj = _checked(source, "trajectory", trajectory, complex_=False, ranks=(2,))
    if n_samples is not None and traj.shape[0] != n_samples:
        raise SchemaError(f"{source}: trajectory has {traj.shape[0]} samples but kspace has {n_samples}")
    if traj.shape[1] != len(matrix):
        raise SchemaError(f"{source}: trajectory has D = {traj.shape[1]} columns but matrix {list(matrix)} "
                          f"needs D = {len(matrix)}")
    _check_units(source, traj, matrix)
    return traj


def _check_units(source: str, trajectory: Any, matrix: tuple[int, ...]) -> None:
    """:func:`mri_recon.scan.check_trajectory_units` on the per-axis extent (D numbers leave the device)."""
    xp = get_xp(trajectory)
    extent = to_host(xp.max(xp.abs(trajectory), axis=0))
    check_trajectory_units(extent[None, :], matrix, source)


def _like(result: Any, reference: Any) -> Any:
    """``result`` as the array type of ``reference``: a CuPy input keeps its GPU, anything else is NumPy."""
    if is_gpu_array(reference):
        return to_device(result, Device(int(reference.device.id)))
    return to_host(result)


# --------------------------------------------------------------------------------------------------------
# Public operators


def fhd(kspace: Any, trajectory: Any, matrix: Sequence[int], *, device: str | int | Device | None = "auto",
        method: str = "auto") -> Any:
    """The adjoint F^H d: ``(F^H d)_n = sum_m d_m exp(+i 2 pi k_m . r_n)``.

    Parameters
    ----------
    kspace
        complex ``(C, M)``, or ``(M,)`` for one coil (NumPy or CuPy).
    trajectory
        float ``(M, D)`` in cycles per field of view.
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``; D = ``len(matrix)``.
    device
        ``"auto" | "cpu" | "gpu" | "gpu:N"``.
    method
        ``"auto" | "exact" | "nufft"`` (see the module docstring).

    Returns
    -------
    array
        complex64 ``(C, *matrix)``, or ``matrix`` for a 1-D ``kspace``; NumPy or CuPy like ``kspace``.
    """
    matrix = validate_matrix(matrix, "fhd")
    data = _checked("fhd", "kspace", kspace, complex_=True, ranks=(1, 2))
    single = data.ndim == 1
    data = data[None, :] if single else data
    traj = _trajectory("fhd", trajectory, matrix, data.shape[1])
    dev, engine = resolve(device, method, like=kspace)
    with dev.use():
        out = apply_adjoint(engine, to_device(data, dev), to_device(traj, dev), matrix)
        out = _like(out, kspace)
    return out[0] if single else out


def forward(image: Any, trajectory: Any, *, device: str | int | Device | None = "auto",
            method: str = "auto") -> Any:
    """The forward transform F x: ``d_m = sum_n x_n exp(-i 2 pi k_m . r_n)``.

    Parameters
    ----------
    image
        complex ``(C, *matrix)`` or ``matrix``-shaped (NumPy or CuPy); the rank is read against D.
    trajectory
        float ``(M, D)`` in cycles per field of view, D = 2 or 3.
    device, method
        As for :func:`fhd`.

    Returns
    -------
    array
        complex64 ``(C, M)``, or ``(M,)`` when ``image`` has no coil axis; NumPy or CuPy like ``image``.
    """
    traj = _checked("forward", "trajectory", trajectory, complex_=False, ranks=(2,))
    ndim = int(traj.shape[1])
    if ndim not in (2, 3):
        raise SchemaError(f"forward: trajectory must have D = 2 or 3 columns, found shape {traj.shape}")
    x = _checked("forward", "image", image, complex_=True, ranks=(ndim, ndim + 1))
    single = x.ndim == ndim
    x = x[None] if single else x
    matrix = validate_matrix(x.shape[1:], "forward")
    _check_units("forward", traj, matrix)
    dev, engine = resolve(device, method, like=image)
    with dev.use():
        out = apply_forward(engine, to_device(x, dev), to_device(traj, dev))
        out = _like(out, image)
    return out[0] if single else out


def psf(trajectory: Any, matrix: Sequence[int], weights: Any = None, *,
        device: str | int | Device | None = "auto", method: str = "auto") -> Any:
    """The Toeplitz point-spread function on the 2x grid.

    ``p[j] = sum_m w_m exp(+i 2 pi k_m . (j - N) / N)`` for j in [0, 2N) per axis, so that
    ``(F^H W F x)[j] = sum_j' p[j - j' + N] x[j']``; w = 1 without weights.

    Parameters
    ----------
    trajectory
        float ``(M, D)`` in cycles per field of view.
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``.
    weights
        float ``(M,)`` density weights, or None for ones.
    device, method
        As for :func:`fhd`.

    Returns
    -------
    array
        complex64 of shape ``tuple(2 * n for n in matrix)``; NumPy or CuPy like ``trajectory``.
    """
    matrix = validate_matrix(matrix, "psf")
    traj = _trajectory("psf", trajectory, matrix)
    xp = get_xp(traj)
    if weights is None:
        w = xp.ones(traj.shape[0], dtype=np.float32)
    else:
        w = _checked("psf", "weights", weights, complex_=False, ranks=(1,))
        if w.shape[0] != traj.shape[0]:
            raise SchemaError(f"psf: weights has {w.shape[0]} samples but trajectory has {traj.shape[0]}")
    dev, engine = resolve(device, method, like=trajectory)
    with dev.use():
        out = apply_psf(engine, to_device(traj, dev), to_device(w, dev), matrix)
        out = _like(out, trajectory)
    return out
