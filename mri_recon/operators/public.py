"""The public functions F^H d, F x and the Toeplitz PSF: thin wrappers around the encoding operators.

They validate their inputs (once, here at the boundary), choose the device and the engine
(:func:`mri_recon.operators.engines.choose_engine`), move the data there, apply the operator of
:mod:`mri_recon.operators.engines.encoding` and give back the type they were given: NumPy in, NumPy out; CuPy in,
CuPy out. The reconstruction pipeline builds the operators itself and skips this layer.

Plans are kept between calls (:class:`mri_recon.operators.memo.PlanCache`, a small LRU per device): a call
with a trajectory seen before (the same engine, matrix, shape, dtype, device and bits) reuses its plan and
skips the trajectory's checks, which it passed then; :func:`~mri_recon.operators.memo.plan_cache_info` counts
the hits. To plan once explicitly, build a :class:`~mri_recon.operators.planned.EncodingOperator`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..arrays.backend import Device, get_xp, is_gpu_array, to_device, to_host
from ..checks.validation import check_any_array, check_trajectory, check_trajectory_units, validate_matrix
from ..errors import SchemaError
from .engines import Encoding, choose_engine
from .memo import plan_cache, trajectory_key


def resolve(device: str | int | Device | None = "auto", method: str = "auto",
            like: Any = None) -> tuple[Device, str]:
    """The device and the name of the engine :func:`~.encoding.choose_engine` picks without a problem size
    (``"exact"`` or ``"nufft"``, on the device returned)."""
    dev, engine = choose_engine(device, method, like)
    return dev, engine.name


def returned_like(result: Any, reference: Any) -> Any:
    """``result`` as the array type of ``reference``: a CuPy input keeps its GPU, anything else is NumPy."""
    if is_gpu_array(reference):
        return to_device(result, Device(int(reference.device.id)))
    return to_host(result)


def _array(trajectory: Any) -> Any:
    """A NumPy or CuPy array as given, anything else through ``numpy.asarray`` (what the checks do)."""
    return trajectory if isinstance(trajectory, np.ndarray) or is_gpu_array(trajectory) else np.asarray(trajectory)


def owned(trajectory: Any, dev: Device) -> Any:
    """The checked trajectory on ``dev``, in memory of its own: a kept plan must not see the caller's array
    change."""
    moved = to_device(trajectory, dev)
    xp = get_xp(moved)
    return moved.copy() if xp is get_xp(trajectory) and xp.may_share_memory(moved, trajectory) else moved


@contextlib.contextmanager
def _planned(kind: str, trajectory: Any, matrix: tuple[int, ...], dev: Device, engine: type[Encoding],
             check: Any) -> Iterator[Any]:
    """The kept plan of ``kind`` (``"encoding"``: the engine's encoding; ``"psf"``: its
    :meth:`~.encoding.Encoding.psf_plan`) for ``trajectory``, or one made after ``check(trajectory)`` (the
    caller's checks, returning the float32 trajectory) when none is kept."""

    def build() -> Any:
        encoding = engine(owned(check(trajectory), dev), matrix).prepare()
        return encoding if kind == "encoding" else encoding.psf_plan()

    with plan_cache(dev).use(trajectory_key(kind, engine.key, matrix, trajectory), trajectory, build) as plan:
        yield plan


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
    raw = _array(trajectory)
    dev, engine = choose_engine(device, method, like=kspace, problem=(matrix, data.shape[1], data.shape[0]))
    with dev.use(), _planned("encoding", raw, matrix, dev, engine,
                             lambda t: check_trajectory("fhd", t, matrix, data.shape[1])) as op:
        if raw.shape[0] != data.shape[1]:  # a kept plan: the rest of the checks passed when it was made
            raise SchemaError(f"fhd: trajectory has {raw.shape[0]} samples but kspace has {data.shape[1]}")
        out = returned_like(op.batched(data.shape[0]).H(to_device(data, dev)), kspace)
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
    raw = _array(trajectory)
    if raw.ndim != 2:  # the checks' own message (the rest of them run when a plan is made)
        check_any_array("forward", "trajectory", raw, complex_=False, ranks=(2,))
    ndim = int(raw.shape[1])
    if ndim not in (2, 3):
        raise SchemaError(f"forward: trajectory must have D = 2 or 3 columns, found shape {tuple(raw.shape)}")
    x = check_any_array("forward", "image", image, complex_=True, ranks=(ndim, ndim + 1))
    single = x.ndim == ndim
    x = x[None] if single else x
    matrix = validate_matrix(x.shape[1:], "forward")

    def check(t: Any) -> Any:
        traj = check_any_array("forward", "trajectory", t, complex_=False, ranks=(2,))
        check_trajectory_units(traj, matrix, "forward")
        return traj

    dev, engine = choose_engine(device, method, like=image, problem=(matrix, raw.shape[0], x.shape[0]))
    with dev.use(), _planned("encoding", raw, matrix, dev, engine, check) as op:
        out = returned_like(op.batched(x.shape[0])(to_device(x, dev)), image)
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
    raw = _array(trajectory)
    if raw.ndim != 2:
        check_trajectory("psf", raw, matrix)  # raises the checks' own message
    samples = int(raw.shape[0])
    dev, engine = choose_engine(device, method, like=trajectory, problem=(matrix, samples, 1))
    with dev.use(), _planned("psf", raw, matrix, dev, engine, lambda t: check_trajectory("psf", t, matrix)) as plan:
        if weights is None:
            w = dev.xp.ones(samples, dtype=np.float32)
        else:
            w = check_any_array("psf", "weights", weights, complex_=False, ranks=(1,))
            if w.shape[0] != samples:
                raise SchemaError(f"psf: weights has {w.shape[0]} samples but trajectory has {samples}")
        out = returned_like(plan(to_device(w, dev)), trajectory)
    return out
