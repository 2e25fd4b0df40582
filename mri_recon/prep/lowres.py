"""Shared pieces of coil-map estimation: low-resolution coil images from the k-space centre, the Fourier
resize to the full matrix, and the batched per-voxel dominant eigenvector (see :mod:`.coilmaps`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..arrays.backend import Device, get_xp, resolve_device_like, to_device, to_host
from ..checks.grid import centre_phase
from ..checks.scaling import rescale, unit_scale
from ..checks.validation import validate_matrix
from ..errors import InvalidDataError, SchemaError

EIGEN_CHUNK = 1 << 19
"""Voxels per batched eigen-solver call (bounds the temporary (n, C, C) arrays)."""
SQUARINGS = 6
"""Repeated squarings of the power solver: components below the top eigenvalue shrink as ratio ** 64."""


# --------------------------------------------------------------------------------------------------------
# Low-resolution images


def default_radius(matrix: Sequence[int]) -> float:
    """Default k-space radius of :func:`lowres_images` in cycles per FOV: 12, at most a quarter of the matrix."""
    return float(min(12.0, min(matrix) / 4))


def cell_density_weights(trajectory: Any) -> Any:
    """Density compensation ``1 / (samples in the sample's 1/FOV cell)`` (float32 (M,), same module)."""
    xp = get_xp(trajectory)
    cells = xp.rint(trajectory).astype(xp.int64)
    cells -= cells.min(axis=0, keepdims=True)
    extent = [int(e) + 1 for e in to_host(cells.max(axis=0))]
    index = cells[:, 0]
    for d in range(1, cells.shape[1]):
        index = index * extent[d] + cells[:, d]
    counts = xp.bincount(index)
    return (1.0 / counts[index]).astype(xp.float32)


def _window(radius_k: Any, radius: float, flat: float) -> Any:
    """1 up to ``flat``, a cos^2 taper to 0 at ``radius``, 0 beyond."""
    xp = get_xp(radius_k)
    t = xp.clip((radius_k - flat) / max(radius - flat, 1e-12), 0.0, 1.0)
    return (xp.cos(0.5 * np.pi * t) ** 2).astype(xp.float32)


def coarse_grid(matrix: Sequence[int], radius: float) -> tuple[int, ...]:
    """Grid on which the low-resolution adjoint is evaluated: ``4 radius`` rounded up to even, at most N."""
    size = 2 * math.ceil(2 * radius)
    return tuple(min(int(n), size) for n in matrix)


def lowres_images(kspace: Any, trajectory: Any, matrix: Sequence[int], *, radius: float | None = None,
                  flat: float = 0.0, weights: Any = None, device: str | int | Device | None = "auto",
                  grid: Sequence[int] | None = None) -> Any:
    """Low-resolution coil images ``F^H (w W d)`` from the samples with ``|k| < radius``.

    The adjoint is evaluated exactly on a coarse grid of the same field of view (:func:`coarse_grid`:
    4 radius points per axis, so the grid's periodic images of the samples stay 2 radius away) and
    Fourier-interpolated to ``matrix`` (:func:`fourier_resize`); its cost does not grow with the matrix.

    Parameters
    ----------
    kspace
        complex ``(C, M)`` (NumPy or CuPy).
    trajectory
        float ``(M, D)`` in cycles per FOV.
    matrix
        Image size.
    radius
        k-space radius in cycles per FOV; :func:`default_radius` by default.
    flat
        The window is 1 up to ``flat`` and falls as cos^2 to 0 at ``radius`` (0: a Hann window).
    weights
        Density compensation (M,), or None for :func:`cell_density_weights` of the central samples.
    device
        ``"auto" | "cpu" | "gpu" | "gpu:N"``.
    grid
        The coarse grid; ``matrix`` itself evaluates the adjoint at every voxel.

    Returns
    -------
    array
        complex64 ``(C, *matrix)`` on ``device`` (CuPy on a GPU).
    """
    images, scale = _lowres_scaled(kspace, trajectory, matrix, radius, flat, weights, device, grid)
    return rescale(images, scale)


def _lowres_scaled(kspace: Any, trajectory: Any, matrix: Sequence[int], radius: float | None, flat: float,
                   weights: Any, device: str | int | Device | None,
                   grid: Sequence[int] | None = None) -> tuple[Any, float]:
    """:func:`lowres_images` divided by a power of two: ``(images / s, s)`` (see :func:`_centre_adjoint`)."""
    matrix = validate_matrix(matrix, "lowres_images")
    radius = default_radius(matrix) if radius is None else float(radius)
    grid = coarse_grid(matrix, radius) if grid is None else validate_matrix(grid, "lowres_images grid")
    images, scale = _centre_adjoint(kspace, trajectory, grid, radius, flat, weights, device)
    return fourier_resize(images, matrix), scale


def _centre_adjoint(kspace: Any, trajectory: Any, grid: tuple[int, ...], radius: float, flat: float,
                    weights: Any, device: str | int | Device | None) -> tuple[Any, float]:
    """``F^H`` on ``grid`` of the density-compensated, windowed samples with ``|k| < radius``, divided by a
    power of two: ``(images / s, s)``.

    The central samples and their weights are each divided by a power of two near their largest value
    before anything is multiplied or summed (``s`` is the product of the two), so float32 holds every
    intermediate value for data of any scale and the images / s are the same, bit for bit, for data
    multiplied by any power of two."""
    from ..operators.engines import choose_engine  # noqa: PLC0415 - loaded when maps are estimated

    if not 0 <= flat < radius:
        raise InvalidDataError(f"lowres_images: flat must be in [0, radius = {radius:g}), found {flat:g}")
    if any(2 * radius > n for n in grid):
        raise InvalidDataError(f"lowres_images: radius {radius:g} exceeds the Nyquist extent of the grid "
                               f"{list(grid)}")
    dev = resolve_device_like(device, kspace)
    with dev.use():
        xp = dev.xp
        data = to_device(kspace, dev)
        data = data[None] if data.ndim == 1 else data
        k = to_device(trajectory, dev)
        if k.ndim != 2 or k.shape[1] != len(grid) or k.shape[0] != data.shape[1]:
            raise SchemaError(f"lowres_images: trajectory must have shape ({data.shape[1]}, {len(grid)}), "
                              f"found {tuple(k.shape)}")
        r = xp.sqrt(xp.sum(k.astype(xp.float32) ** 2, axis=1))
        inside = xp.flatnonzero(r < radius)
        if int(inside.size) == 0:
            raise InvalidDataError(f"lowres_images: no samples within |k| < {radius:g} cycles/FOV of the "
                                   f"k-space centre")
        k = k[inside]
        w = cell_density_weights(k) if weights is None else to_device(weights, dev)[inside]
        w, weight_scale = unit_scale(w)
        w = w.astype(xp.float32) * _window(r[inside], radius, flat)
        centre, data_scale = unit_scale(data[:, inside])
        centre = centre.astype(xp.complex64) * w[None, :]
        # internal arrays, already checked: the encoding operator, not the validating public fhd
        _, engine = choose_engine(dev, problem=(grid, int(k.shape[0]), int(centre.shape[0])))
        images = engine(k.astype(xp.float32), grid, int(centre.shape[0])).H(centre.astype(xp.complex64))
        return images, data_scale * weight_scale


def fourier_resize(images: Any, matrix: Sequence[int]) -> Any:
    """Evaluate the trigonometric interpolant of images ``(C, *grid)`` on a finer ``matrix`` (same FOV).

    The grid's coefficients ``y(kappa)`` (:func:`calibration_region`, kappa in ``[-g/2, g/2)``) define
    ``x(r) = g^-D sum_kappa y(kappa) exp(+i 2 pi kappa . r)``, which is evaluated at the voxels
    ``r = (n - N // 2) / N`` of ``matrix`` (:mod:`mri_recon.checks.grid`) by a zero-padded inverse FFT; on the
    grid's own voxels it returns the input.
    """
    xp = get_xp(images)
    grid = tuple(images.shape[1:])
    matrix = tuple(int(n) for n in matrix)
    if grid == matrix:
        return images.astype(xp.complex64)
    if any(g > n for g, n in zip(grid, matrix)):
        raise InvalidDataError(f"fourier_resize: grid {list(grid)} is larger than the matrix {list(matrix)}")
    coef = calibration_region(images, grid)
    kappa = [np.arange(g) - g // 2 for g in grid]
    sign = xp.asarray(_centre_phases(kappa, matrix))
    spectrum = xp.zeros((images.shape[0], *matrix), dtype=xp.complex64)
    index = np.ix_(*[kap % n for kap, n in zip(kappa, matrix)])
    spectrum[(slice(None), *(xp.asarray(i) for i in index))] = coef * sign[None]
    scale = math.prod(matrix) / math.prod(grid)
    return (xp.fft.ifftn(spectrum, axes=tuple(range(1, len(matrix) + 1))) * scale).astype(xp.complex64)


# --------------------------------------------------------------------------------------------------------
# Shared pieces


def _box_sum(a: Any, size: int, axes: Sequence[int]) -> Any:
    """Sum over a box of ``size`` voxels per axis (zero outside), centred, by cumulative sums."""
    xp = get_xp(a)
    half = size // 2
    for axis in axes:
        pad = [(0, 0)] * a.ndim
        pad[axis] = (half + 1, size - half - 1)
        c = xp.cumsum(xp.pad(a, pad), axis=axis)
        n = a.shape[axis]
        upper = [slice(None)] * a.ndim
        lower = [slice(None)] * a.ndim
        upper[axis], lower[axis] = slice(size, size + n), slice(0, n)
        a = c[tuple(upper)] - c[tuple(lower)]
    return a


def dominant_eigenvectors(mats: Any, *, solver: str = "power", squarings: int = SQUARINGS) -> tuple[Any, Any]:
    """Largest eigenvalue and a unit eigenvector of it for each Hermitian PSD matrix of ``(N, C, C)``.

    ``solver="eigh"`` is the batched LAPACK / cuSOLVER ``eigh``. ``solver="power"`` (the default) raises
    each matrix to the power ``2**squarings`` by repeated squaring (renormalized by the trace), takes its
    largest column and refines it with one product by the matrix itself; the eigenvalue is the Rayleigh
    quotient. Each matrix is first divided by its trace (the chunk by a power of two near its largest entry
    before that), so no product over- or underflows float32 whatever the matrices' scale, and the solver has
    no absolute threshold. It costs ``squarings`` batched C x C products, several times less than ``eigh`` on a CPU
    and a handful of kernel launches on a GPU; components along eigenvalues below ``lambda_1`` are damped by
    ``(lambda_2 / lambda_1) ** (2 ** squarings)``. An all-zero matrix gives a zero vector.
    """
    if solver not in ("power", "eigh"):
        raise InvalidDataError(f"unknown eigen solver {solver!r}: expected 'power' or 'eigh'")
    xp = get_xp(mats)
    n, c = mats.shape[0], mats.shape[1]
    vec = xp.empty((n, c), dtype=xp.complex64)
    val = xp.empty(n, dtype=xp.float32)
    for start in range(0, n, EIGEN_CHUNK):
        part, scale = unit_scale(mats[start:start + EIGEN_CHUNK])
        part, trace = _unit_trace(part.astype(xp.complex64))  # eigenvectors unchanged, eigenvalues <= 1
        if solver == "eigh":
            w, v = xp.linalg.eigh(part)
            val[start:start + EIGEN_CHUNK] = w[:, -1] * trace * np.float32(scale)
            vec[start:start + EIGEN_CHUNK] = v[:, :, -1]
            continue
        a = part
        for _ in range(squarings):
            a, _ = _unit_trace(a @ a)
        column = xp.argmax(xp.sum(xp.abs(a) ** 2, axis=1), axis=1)
        v = xp.take_along_axis(a, column[:, None, None], axis=2)  # (n, C, 1)
        v = part @ v
        norm = xp.sqrt(xp.sum(xp.abs(v) ** 2, axis=1, keepdims=True))
        v = v / xp.where(norm > 0, norm, 1)
        vec[start:start + EIGEN_CHUNK] = v[:, :, 0]
        rayleigh = xp.real(xp.sum(xp.conj(v) * (part @ v), axis=(1, 2)))
        val[start:start + EIGEN_CHUNK] = rayleigh * trace * np.float32(scale)
    return vec, val


def _unit_trace(a: Any) -> tuple[Any, Any]:
    """``(a / trace, trace)`` per matrix of ``(N, C, C)``; matrices of zero trace are left as they are."""
    xp = get_xp(a)
    trace = xp.real(xp.trace(a, axis1=1, axis2=2))
    return a / xp.where(trace > 0, trace, 1)[:, None, None], trace


def _phase_reference(maps: Any, ref: int) -> Any:
    """Multiply every voxel by the conjugate phase of coil ``ref`` there (voxels where it is 0 unchanged)."""
    xp = get_xp(maps)
    m = maps[ref]
    mag = xp.abs(m)
    phase = xp.where(mag > 0, xp.conj(m) / xp.where(mag > 0, mag, 1), 1)
    return (maps * phase[None]).astype(xp.complex64)


def _strongest(images: Any) -> int:
    xp = get_xp(images)
    energy = xp.sum(xp.abs(images.reshape(images.shape[0], -1)) ** 2, axis=1)
    return int(to_host(xp.argmax(energy)))


def calibration_region(images: Any, size: int | Sequence[int]) -> Any:
    """Cartesian k-space of coil images on the integer grid ``|kappa_d| < size/2``: ``(C, *size)``.

    ``y(kappa) = sum_n x_n exp(-i 2 pi kappa . r_n)`` with ``r_n = (n - N // 2) / N``, i.e. the project's
    forward transform at integer frequencies, computed by FFT; index i of an axis is ``kappa = i - size//2``.
    From :func:`lowres_images` this grids the non-Cartesian centre with the FOV's Dirichlet kernel.
    """
    xp = get_xp(images)
    spatial = tuple(images.shape[1:])
    sizes = (int(size),) * len(spatial) if np.ndim(size) == 0 else tuple(int(s) for s in size)
    if len(sizes) != len(spatial) or any(s < 1 or s > n for s, n in zip(sizes, spatial)):
        raise InvalidDataError(f"calibration size {list(sizes)} must be between 1 and the matrix {list(spatial)}")
    spectrum = xp.fft.fftn(images, axes=tuple(range(1, len(spatial) + 1)))
    out = spectrum
    for axis, (s, n) in enumerate(zip(sizes, spatial), start=1):
        kappa = np.arange(s) - s // 2
        out = xp.take(out, xp.asarray(kappa % n), axis=axis)
        sign = xp.asarray(centre_phase(kappa, n).astype(np.complex64))  # exp(+i 2 pi kappa (N // 2) / N)
        out = out * sign.reshape([-1 if a == axis else 1 for a in range(out.ndim)])
    return out.astype(xp.complex64)


def _centre_phases(freqs: Sequence[np.ndarray], matrix: Sequence[int]) -> np.ndarray:
    """``exp(-i 2 pi sum_d q_d c_d / N_d)`` (c_d = N_d // 2) on the grid of integer frequencies ``freqs[d]``:
    the factor that moves a DFT over voxel indices onto the voxels ``r = (n - c) / N`` of ``matrix``
    (``(-1)^(sum_d q_d)`` when every N_d is even)."""
    out = np.ones((), dtype=np.complex128)
    for q, n in zip(freqs, matrix):
        out = np.multiply.outer(out, np.conj(centre_phase(q, n)))
    return out
