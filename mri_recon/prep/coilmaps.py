"""Coil sensitivities estimated from the scan itself: Walsh adaptive combine and an ESPIRiT eigen method.

Both start from the centre of k-space. :func:`lowres_images` forms ``F^H`` of the samples within a small
radius, density compensated (the scan's weights, or one over the number of samples in each 1/FOV cell) and
tapered by a smooth window, with the project's adjoint (FINUFFT on the CPU, the exact GPU kernel on a GPU,
both through :mod:`mri_recon.operators.encoding`). Then, per voxel, both methods take the dominant eigenvector of
a small C x C Hermitian matrix, all voxels at once (:func:`dominant_eigenvectors`: batched repeated
squaring by default, batched ``eigh`` on request):

- :func:`walsh`: the coil covariance of the low-resolution images averaged over a box (Walsh, Gmitro and
  Marcellin 2000). Unit norm per voxel; the image then carries the intensity.
- :func:`espirit`: the ESPIRiT operator built from the row space of the calibration (Hankel) matrix
  (Uecker et al. 2014), whose eigenvalue is 1 where the maps explain the data; maps are zero where it is
  below ``crop``.

The phase of each voxel's eigenvector is referenced to the coil with the most energy. Everything after
the adjoint is written against the array module of its input, so NumPy and CuPy run the same code.
:func:`estimate_coil_maps` takes a :class:`~mri_recon.scan.Scan` and returns NumPy maps;
:func:`coil_maps_from_kspace` takes arrays already on a GPU and leaves the maps there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import Device, get_xp, is_gpu_array, resolve_device, to_device, to_host
from ..errors import InvalidDataError, SchemaError
from ..grid import centre_phase
from ..scan import Scan
from ..validation import validate_matrix

METHODS = ("walsh", "espirit")
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


def _device(device: str | int | Device | None, like: Any) -> Device:
    if (device is None or device == "auto") and is_gpu_array(like):
        return resolve_device(int(like.device.id))
    return resolve_device(device)


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
    matrix = validate_matrix(matrix, "lowres_images")
    radius = default_radius(matrix) if radius is None else float(radius)
    grid = coarse_grid(matrix, radius) if grid is None else validate_matrix(grid, "lowres_images grid")
    return fourier_resize(_centre_adjoint(kspace, trajectory, grid, radius, flat, weights, device), matrix)


def _centre_adjoint(kspace: Any, trajectory: Any, grid: tuple[int, ...], radius: float, flat: float,
                    weights: Any, device: str | int | Device | None) -> Any:
    """``F^H`` on ``grid`` of the density-compensated, windowed samples with ``|k| < radius``."""
    from ..operators.encoding import choose_engine  # noqa: PLC0415 - loaded when maps are estimated

    if not 0 <= flat < radius:
        raise InvalidDataError(f"lowres_images: flat must be in [0, radius = {radius:g}), found {flat:g}")
    if any(2 * radius > n for n in grid):
        raise InvalidDataError(f"lowres_images: radius {radius:g} exceeds the Nyquist extent of the grid "
                               f"{list(grid)}")
    dev = _device(device, kspace)
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
        w = w * _window(r[inside], radius, flat)
        centre = data[:, inside] * w[None, :].astype(xp.float32)
        # internal arrays, already checked: the encoding operator, not the validating public fhd
        _, engine = choose_engine(dev)
        return engine(k.astype(xp.float32), grid, int(centre.shape[0])).H(centre.astype(xp.complex64))


def fourier_resize(images: Any, matrix: Sequence[int]) -> Any:
    """Evaluate the trigonometric interpolant of images ``(C, *grid)`` on a finer ``matrix`` (same FOV).

    The grid's coefficients ``y(kappa)`` (:func:`calibration_region`, kappa in ``[-g/2, g/2)``) define
    ``x(r) = g^-D sum_kappa y(kappa) exp(+i 2 pi kappa . r)``, which is evaluated at the voxels
    ``r = (n - N // 2) / N`` of ``matrix`` (:mod:`mri_recon.grid`) by a zero-padded inverse FFT; on the
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
    quotient. It costs ``squarings`` batched C x C products, several times less than ``eigh`` on a CPU
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
        part = mats[start:start + EIGEN_CHUNK].astype(xp.complex64)
        if solver == "eigh":
            w, v = xp.linalg.eigh(part)
            val[start:start + EIGEN_CHUNK] = w[:, -1]
            vec[start:start + EIGEN_CHUNK] = v[:, :, -1]
            continue
        a = _unit_trace(part)
        for _ in range(squarings):
            a = _unit_trace(a @ a)
        column = xp.argmax(xp.sum(xp.abs(a) ** 2, axis=1), axis=1)
        v = xp.take_along_axis(a, column[:, None, None], axis=2)  # (n, C, 1)
        v = part @ v
        norm = xp.sqrt(xp.sum(xp.abs(v) ** 2, axis=1, keepdims=True))
        v = v / xp.where(norm > 0, norm, 1)
        vec[start:start + EIGEN_CHUNK] = v[:, :, 0]
        val[start:start + EIGEN_CHUNK] = xp.real(xp.sum(xp.conj(v) * (part @ v), axis=(1, 2)))
    return vec, val


def _unit_trace(a: Any) -> Any:
    xp = get_xp(a)
    trace = xp.real(xp.trace(a, axis1=1, axis2=2))
    return a / xp.where(trace > 0, trace, 1)[:, None, None]


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


# --------------------------------------------------------------------------------------------------------
# Walsh


def walsh(images: Any, *, kernel: int | None = None, solver: str = "power") -> Any:
    """Walsh adaptive-combine maps from coil images ``(C, *matrix)`` (NumPy or CuPy, same module out).

    Per voxel, the coil covariance ``R = sum_box x x^H`` over a box of ``kernel`` voxels per axis; the map
    is its dominant eigenvector (unit norm), phase referenced to the coil with the most energy. The data
    should be prewhitened (:func:`mri_recon.noise.prewhiten`), which makes the noise covariance the identity.

    Parameters
    ----------
    images
        complex ``(C, Nx, Ny[, Nz])``, typically from :func:`lowres_images`.
    kernel
        Odd box size in voxels; by default about a sixteenth of the smallest axis (at least 3).
    solver
        ``"power"`` or ``"eigh"`` (:func:`dominant_eigenvectors`).
    """
    xp = get_xp(images)
    if images.ndim not in (3, 4):
        raise SchemaError(f"walsh: images must have shape (C, Nx, Ny[, Nz]), found {tuple(images.shape)}")
    spatial = tuple(images.shape[1:])
    if kernel is None:
        kernel = max(3, 2 * (min(spatial) // 32) + 1)
    if kernel < 1 or kernel % 2 == 0:
        raise InvalidDataError(f"walsh: kernel must be a positive odd number of voxels, found {kernel}")
    c = images.shape[0]
    x = images.astype(xp.complex64).reshape(c, -1)
    upper = [(i, j) for i in range(c) for j in range(i, c)]
    ii = xp.asarray([i for i, _ in upper])
    jj = xp.asarray([j for _, j in upper])
    cov = (x[ii] * xp.conj(x[jj])).reshape(len(upper), *spatial)
    cov = _box_sum(cov, kernel, axes=range(1, len(spatial) + 1)).reshape(len(upper), -1)
    mats = xp.zeros((cov.shape[1], c, c), dtype=xp.complex64)
    mats[:, ii, jj] = cov.T
    mats[:, jj, ii] = xp.conj(cov.T)
    vec, _ = dominant_eigenvectors(mats, solver=solver)
    maps = vec.T.reshape(c, *spatial)
    return _phase_reference(maps, _strongest(images))


# --------------------------------------------------------------------------------------------------------
# ESPIRiT


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


def _kernels(calib: Any, kernel: int, threshold: float) -> Any:
    """Row-space basis of the calibration matrix: ``(n_keep, C, *[kernel] * D)``."""
    xp = get_xp(calib)
    c, ndim = calib.shape[0], calib.ndim - 1
    shape = (kernel,) * ndim
    patches = xp.lib.stride_tricks.sliding_window_view(calib, shape, axis=tuple(range(1, ndim + 1)))
    # (C, *positions, *kernel) -> rows: positions; columns: (C, *kernel)
    order = (*range(1, ndim + 1), 0, *range(ndim + 1, 2 * ndim + 1))
    a = patches.transpose(order).reshape(-1, c * kernel**ndim).astype(xp.complex128)
    gram = a.conj().T @ a
    power, v = xp.linalg.eigh(gram)  # ascending; power = singular values squared
    sigma = xp.sqrt(xp.clip(power, 0, None))
    keep = sigma >= threshold * sigma[-1]
    return v[:, keep].T.reshape(-1, c, *shape)


def espirit_operator(kernels: Any, matrix: Sequence[int]) -> Any:
    """The per-voxel ESPIRiT matrices ``G(r) = k^-D sum_j b_j(r) b_j(r)^H``: ``(prod(matrix), C, C)``.

    ``b_j,c(r) = sum_q conj(v_j(c, q)) exp(+i 2 pi q . r)``: with this sign a consistent map S(r) is an
    eigenvector with eigenvalue 1 (the null-space vectors n satisfy ``sum_{c,q} n_c(q) S_c(r)
    exp(-i 2 pi q.r) = 0``). G is a trigonometric polynomial of degree < kernel, so it is computed exactly on
    a grid of ``2 kernel`` points per axis, turned into its coefficients by FFT and evaluated on the image
    grid by a zero-padded inverse FFT.
    """
    xp = get_xp(kernels)
    n_keep, c = kernels.shape[:2]
    shape = tuple(kernels.shape[2:])
    ndim, kernel = len(shape), shape[0]
    small = 2 * kernel
    if any(n < 2 * kernel - 1 for n in matrix):
        raise InvalidDataError(f"ESPIRiT kernel {kernel} needs a matrix of at least {2 * kernel - 1} per axis, "
                               f"found {list(matrix)}")
    axes = tuple(range(2, 2 + ndim))
    b = xp.fft.ifftn(xp.conj(kernels), s=(small,) * ndim, axes=axes) * small**ndim  # (J, C, *small)
    b = b.reshape(n_keep, c, -1)
    g = xp.einsum("jcp,jdp->cdp", b, xp.conj(b)) / kernel**ndim  # values on the small grid
    g = g.reshape(c, c, *(small,) * ndim)
    coef = xp.fft.fftn(g, axes=axes) / small**ndim  # coefficient of frequency delta at delta % small
    delta = np.arange(-(kernel - 1), kernel)
    index = np.ix_(*[delta % n for n in matrix])
    source = np.ix_(*[delta % small for _ in matrix])
    sign = xp.asarray(_centre_phases([delta] * ndim, matrix))
    grid = xp.zeros((c, c, *matrix), dtype=xp.complex64)  # transformed axes last: batched FFTs
    grid[(slice(None), slice(None), *(xp.asarray(i) for i in index))] = (
        coef[(slice(None), slice(None), *(xp.asarray(i) for i in source))] * sign)
    out = xp.fft.ifftn(grid, axes=axes) * math.prod(matrix)
    return xp.ascontiguousarray(out.reshape(c, c, -1).transpose(2, 0, 1))


def _centre_phases(freqs: Sequence[np.ndarray], matrix: Sequence[int]) -> np.ndarray:
    """``exp(-i 2 pi sum_d q_d c_d / N_d)`` (c_d = N_d // 2) on the grid of integer frequencies ``freqs[d]``:
    the factor that moves a DFT over voxel indices onto the voxels ``r = (n - c) / N`` of ``matrix``
    (``(-1)^(sum_d q_d)`` when every N_d is even)."""
    out = np.ones((), dtype=np.complex128)
    for q, n in zip(freqs, matrix):
        out = np.multiply.outer(out, np.conj(centre_phase(q, n)))
    return out


def espirit(calib: Any, matrix: Sequence[int], *, kernel: int = 6, threshold: float = 0.02,
            crop: float = 0.95, solver: str = "power") -> Any:
    """ESPIRiT maps from a Cartesian calibration region ``(C, *cal)`` (NumPy or CuPy, same module out).

    The calibration (Hankel) matrix holds every ``kernel^D`` patch of the region as a row; its row space
    (singular values above ``threshold`` times the largest) defines per-voxel matrices
    (:func:`espirit_operator`) whose dominant eigenvector is the map and whose eigenvalue is about 1 inside
    the object. Simplifications: one set of maps (the dominant eigenvector; no soft-SENSE second set), a
    fixed relative singular-value threshold, and maps set to 0 where the eigenvalue is below ``crop``.
    """
    xp = get_xp(calib)
    matrix = validate_matrix(matrix, "espirit")
    if calib.ndim != len(matrix) + 1:
        raise SchemaError(f"espirit: calibration region must have shape (C, *cal) with {len(matrix)} spatial "
                          f"axes, found {tuple(calib.shape)}")
    if any(s < kernel + 1 for s in calib.shape[1:]):
        raise InvalidDataError(f"espirit: calibration region {list(calib.shape[1:])} must exceed the kernel "
                               f"size {kernel} along every axis")
    if not 0 < threshold < 1 or not 0 <= crop < 1:
        raise InvalidDataError(f"espirit: threshold must be in (0, 1) and crop in [0, 1), found {threshold}, "
                               f"{crop}")
    kernels = _kernels(calib, kernel, threshold)
    vec, val = dominant_eigenvectors(espirit_operator(kernels, matrix), solver=solver)
    maps = (vec * (val > crop)[:, None]).T.reshape(calib.shape[0], *matrix)
    energy = xp.sum(xp.abs(calib.reshape(calib.shape[0], -1)) ** 2, axis=1)
    return _phase_reference(maps, int(to_host(xp.argmax(energy))))


# --------------------------------------------------------------------------------------------------------
# From a scan


def estimate_coil_maps(scan: Scan, method: str = "walsh", *, device: str | int | Device | None = "auto",
                       **options: Any) -> np.ndarray:
    """Coil maps of ``scan``: complex64 NumPy ``(C, *matrix)``, ready for ``scan.replace(coil_maps=...)``.

    Prewhiten first (:func:`mri_recon.noise.prewhiten`) so that the maps live in the whitened coil basis.
    The scan's ``weights`` are used as density compensation when present; its own ``coil_maps`` are
    ignored. ``options`` are those of :func:`coil_maps_from_kspace`, which keeps the maps on the device.
    """
    maps = coil_maps_from_kspace(scan.kspace, scan.trajectory, scan.matrix, method, weights=scan.weights,
                                 device=device, **options)
    return to_host(maps).astype(np.complex64)


def coil_maps_from_kspace(kspace: Any, trajectory: Any, matrix: Sequence[int], method: str = "walsh", *,
                          weights: Any = None, device: str | int | Device | None = "auto",
                          radius: float | None = None, kernel: int | None = None,
                          calibration: int | None = None, threshold: float = 0.02, crop: float = 0.95,
                          solver: str = "power") -> Any:
    """Coil maps from k-space on ``device``: complex64 ``(C, *matrix)``, CuPy on a GPU.

    Parameters
    ----------
    kspace, trajectory
        complex ``(C, M)`` and float ``(M, D)`` in cycles per FOV, NumPy or already on the device.
    matrix
        Image size.
    method
        ``"walsh"`` or ``"espirit"``.
    weights
        Density compensation (M,), or None for :func:`cell_density_weights`.
    device
        Where to compute: ``"auto" | "cpu" | "gpu" | "gpu:N"`` (``"auto"`` keeps a CuPy input's GPU).
    radius
        Walsh: k-space radius of the low-resolution images (cycles per FOV).
    kernel
        Walsh: box size in voxels; ESPIRiT: kernel width (default 6 in 2-D, 5 in 3-D).
    calibration
        ESPIRiT: calibration region width (default 24 in 2-D, 16 in 3-D, at most the matrix).
    threshold, crop
        ESPIRiT: relative singular-value threshold and eigenvalue crop.
    solver
        Per-voxel eigen solver, ``"power"`` or ``"eigh"`` (:func:`dominant_eigenvectors`).
    """
    if method not in METHODS:
        raise InvalidDataError(f"unknown coil map method {method!r}: expected 'walsh' or 'espirit'")
    matrix = validate_matrix(matrix, "coil maps")
    dev = _device(device, kspace)
    with dev.use():
        if method == "walsh":
            images = lowres_images(kspace, trajectory, matrix, radius=radius, weights=weights, device=dev)
            return walsh(images, kernel=kernel, solver=solver)
        ndim = len(matrix)
        width = min(calibration or (24 if ndim == 2 else 16), min(matrix))
        kernel = kernel or (6 if ndim == 2 else 5)
        # Grid the region with the window flat up to its corners, plus a margin for the gridding kernel.
        radius = min(width / 2 * math.sqrt(ndim) + 6, min(matrix) / 2)
        images = _centre_adjoint(kspace, trajectory, coarse_grid(matrix, radius), radius,
                                 max(radius - 4, 0.0), weights, dev)
        calib = calibration_region(images, width)
        return espirit(calib, matrix, kernel=kernel, threshold=threshold, crop=crop, solver=solver)
