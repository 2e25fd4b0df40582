"""The public F^H d and F with off-resonance: :func:`fhd_offres` and :func:`forward_offres` (exact).

Model (:mod:`.offres`): ``d_m = sum_n x_n exp(-i 2 pi (k_m . r_n + f_n t_m))``, f in Hz, t in s. The inputs
are validated here, at the boundary; the work runs on the GPU kernels (FHD_OFFRES, FWD_OFFRES) or the float64
NumPy sum on the CPU. NumPy in, NumPy out; CuPy in, CuPy out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...arrays.backend import Device, resolve_device_like, to_device
from ...checks.validation import check_any_array, check_trajectory, validate_matrix
from ...errors import SchemaError
from ..public import returned_like
from .model import OffresEncoding


def _offres_arrays(name: str, field_map: Any, times: Any, matrix: tuple[int, ...], n_samples: int) -> tuple:
    f = check_any_array(name, "field_map", field_map, complex_=False, ranks=(len(matrix),))
    t = check_any_array(name, "times", times, complex_=False, ranks=(1,))
    if tuple(f.shape) != matrix:
        raise SchemaError(f"{name}: field_map must have the image's shape {matrix}, found {tuple(f.shape)}")
    if t.shape[0] != n_samples:
        raise SchemaError(f"{name}: times has {t.shape[0]} samples but the data have {n_samples}")
    return f, t


def fhd_offres(kspace: Any, trajectory: Any, matrix: Sequence[int], field_map: Any, times: Any, *,
               device: str | int | Device | None = "auto") -> Any:
    """Exact F^H d with off-resonance: ``sum_m d_m exp(+i 2 pi (k_m . r_n + f_n t_m))``.

    Parameters
    ----------
    kspace
        complex ``(C, M)`` or ``(M,)``.
    trajectory
        float ``(M, D)`` in cycles per field of view.
    matrix
        Image size; D = ``len(matrix)``.
    field_map
        float ``matrix``: off-resonance in Hz.
    times
        float ``(M,)``: sample times in s.
    device
        ``"auto" | "cpu" | "gpu" | "gpu:N"``.

    Returns
    -------
    array
        complex64 ``(C, *matrix)`` (``matrix`` for 1-D ``kspace``), NumPy or CuPy like ``kspace``.
    """
    matrix = validate_matrix(matrix, "fhd_offres")
    data = check_any_array("fhd_offres", "kspace", kspace, complex_=True, ranks=(1, 2))
    single = data.ndim == 1
    data = data[None, :] if single else data
    traj = check_trajectory("fhd_offres", trajectory, matrix, data.shape[1])
    f, t = _offres_arrays("fhd_offres", field_map, times, matrix, data.shape[1])
    dev = resolve_device_like(device, kspace)
    with dev.use():
        op = OffresEncoding(*(to_device(a, dev) for a in (traj, f, t)), batch=data.shape[0])
        out = returned_like(op.H(to_device(data, dev)), kspace)
    return out[0] if single else out


def forward_offres(image: Any, trajectory: Any, field_map: Any, times: Any, *,
                   device: str | int | Device | None = "auto") -> Any:
    """Exact F x with off-resonance: ``d_m = sum_n x_n exp(-i 2 pi (k_m . r_n + f_n t_m))``.

    ``image`` is complex ``(C, *matrix)`` or ``matrix``-shaped with ``matrix = field_map.shape``; returns
    complex64 ``(C, M)`` (``(M,)`` without a coil axis), NumPy or CuPy like ``image``.
    """
    matrix = validate_matrix(getattr(field_map, "shape", ()), "forward_offres")
    x = check_any_array("forward_offres", "image", image, complex_=True, ranks=(len(matrix), len(matrix) + 1))
    single = x.ndim == len(matrix)
    x = x[None] if single else x
    if tuple(x.shape[1:]) != matrix:
        raise SchemaError(f"forward_offres: image must have the field map's shape {matrix}, found "
                          f"{tuple(x.shape[1:])}")
    traj = check_trajectory("forward_offres", trajectory, matrix)
    f, t = _offres_arrays("forward_offres", field_map, times, matrix, traj.shape[0])
    dev = resolve_device_like(device, image)
    with dev.use():
        op = OffresEncoding(*(to_device(a, dev) for a in (traj, f, t)), batch=x.shape[0])
        out = returned_like(op(to_device(x, dev)), image)
    return out[0] if single else out
