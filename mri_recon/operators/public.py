"""The public functions F^H d, F x and the Toeplitz PSF: thin wrappers around the encoding operators.

They validate their inputs (once, here at the boundary), choose the device and the engine
(:func:`mri_recon.operators.encoding.choose_engine`), move the data there, apply the operator of
:mod:`mri_recon.operators.encoding` and give back the type they were given: NumPy in, NumPy out; CuPy in,
CuPy out. The reconstruction pipeline builds the operators itself and skips this layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import Device, get_xp, is_gpu_array, to_device, to_host
from ..errors import SchemaError
from ..validation import check_any_array, check_trajectory, check_trajectory_units, validate_matrix
from .encoding import choose_engine


def resolve(device: str | int | Device | None = "auto", method: str = "auto",
            like: Any = None) -> tuple[Device, str]:
    """The device and the name of the engine :func:`~.encoding.choose_engine` picks without a problem size
    (``"exact"``, ``"nufft"``, ``"gpu"`` or ``"gpu-nufft"``)."""
    dev, engine = choose_engine(device, method, like)
    return dev, engine.name


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
        ``"auto" | "exact" | "nufft"`` (see :func:`~.encoding.choose_engine`).

    Returns
    -------
    array
        complex64 ``(C, *matrix)``, or ``matrix`` for a 1-D ``kspace``; NumPy or CuPy like ``kspace``.
    """
    matrix = validate_matrix(matrix, "fhd")
    data = check_any_array("fhd", "kspace", kspace, complex_=True, ranks=(1, 2))
    single = data.ndim == 1
    data = data[None, :] if single else data
    traj = check_trajectory("fhd", trajectory, matrix, data.shape[1])
    dev, engine = choose_engine(device, method, like=kspace, problem=(matrix, data.shape[1], data.shape[0]))
    with dev.use():
        op = engine(to_device(traj, dev), matrix, data.shape[0])
        out = _like(op.H(to_device(data, dev)), kspace)
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
    traj = check_any_array("forward", "trajectory", trajectory, complex_=False, ranks=(2,))
    ndim = int(traj.shape[1])
    if ndim not in (2, 3):
        raise SchemaError(f"forward: trajectory must have D = 2 or 3 columns, found shape {traj.shape}")
    x = check_any_array("forward", "image", image, complex_=True, ranks=(ndim, ndim + 1))
    single = x.ndim == ndim
    x = x[None] if single else x
    matrix = validate_matrix(x.shape[1:], "forward")
    check_trajectory_units(traj, matrix, "forward")
    dev, engine = choose_engine(device, method, like=image, problem=(matrix, traj.shape[0], x.shape[0]))
    with dev.use():
        op = engine(to_device(traj, dev), matrix, x.shape[0])
        out = _like(op(to_device(x, dev)), image)
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
    traj = check_trajectory("psf", trajectory, matrix)
    xp = get_xp(traj)
    if weights is None:
        w = xp.ones(traj.shape[0], dtype=np.float32)
    else:
        w = check_any_array("psf", "weights", weights, complex_=False, ranks=(1,))
        if w.shape[0] != traj.shape[0]:
            raise SchemaError(f"psf: weights has {w.shape[0]} samples but trajectory has {traj.shape[0]}")
    dev, engine = choose_engine(device, method, like=trajectory, problem=(matrix, traj.shape[0], 1))
    with dev.use():
        op = engine(to_device(traj, dev), matrix)
        out = _like(op.psf(to_device(w, dev)), trajectory)
    return out
