"""Analytic Shepp-Logan phantoms, smooth coil maps and noise: ground truth with exact k-space.

The phantom is the modified Shepp-Logan of Toft (higher-contrast intensities) in 2D (ten ellipses) and its
3D extension (ten ellipsoids, rotated about z only). The classic definition lives in ``[-1, 1]^D``; here it
is scaled by :data:`SCALE` = 0.45, so it fills 0.9 of the field of view ``r in [-0.5, 0.5)^D`` without
touching its edge. It lies as ``bart phantom`` lays it out: image axis 0 runs from the top of the classic
picture to its bottom and axis 1 from its left to its right (the classic ``(x, y)`` turned by 90 degrees:
``axis 0 = -y``, ``axis 1 = x``), so the PNG preview and ``bart toimg`` show it upright, the larger dark
ellipse on the left; axis 2 (3D) is z.

The k-space is the continuous Fourier transform evaluated exactly at the trajectory (no inverse crime):
an ellipse with semi-axes ``(a, b)``, rotation ``R`` and centre ``c`` contributes
``a b exp(-i 2 pi k.c) J1(2 pi q) / q`` and an ellipsoid ``a b c exp(-i 2 pi k.c) (sin t - t cos t) /
(2 pi^2 q^3)``, with ``q = |diag(a, b[, c]) R^T k|`` and ``t = 2 pi q``. The result is multiplied by
``prod(matrix)`` (the inverse voxel volume), so the discrete model ``d = sum_n x_n exp(-i 2 pi k.r_n)``
is solved by the image intensities themselves.

Coil maps are short sums of complex exponentials ``S_c(r) = sum_q a_cq exp(i 2 pi g_q.r)`` with
``g_q in {-1/2, 0, 1/2}^D`` (cycles per FOV), so the k-space of ``S_c x phantom`` is exact too:
``sum_q a_cq FT(k - g_q)``.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.special import j1

from ..checks.grid import axis_positions, voxel_positions  # noqa: F401 - re-exported: phantoms are sampled at voxel centres
from ..checks.validation import positive_int, validate_matrix
from ..errors import InvalidDataError

SCALE = 0.45
"""Factor from the classic ``[-1, 1]`` phantom coordinates to the field of view ``[-0.5, 0.5)``."""

# Toft's modified Shepp-Logan: intensity, semi-axes (a, b), centre (x, y), rotation (degrees).
_ELLIPSES = np.array([
    [1.0, 0.6900, 0.9200, 0.00, 0.0000, 0.0],
    [-0.8, 0.6624, 0.8740, 0.00, -0.0184, 0.0],
    [-0.2, 0.1100, 0.3100, 0.22, 0.0000, -18.0],
    [-0.2, 0.1600, 0.4100, -0.22, 0.0000, 18.0],
    [0.1, 0.2100, 0.2500, 0.00, 0.3500, 0.0],
    [0.1, 0.0460, 0.0460, 0.00, 0.1000, 0.0],
    [0.1, 0.0460, 0.0460, 0.00, -0.1000, 0.0],
    [0.1, 0.0460, 0.0230, -0.08, -0.6050, 0.0],
    [0.1, 0.0230, 0.0230, 0.00, -0.6060, 0.0],
    [0.1, 0.0230, 0.0460, 0.06, -0.6050, 0.0],
])

# 3D extension: intensity, semi-axes (a, b, c), centre (x, y, z), rotation about z (degrees).
_ELLIPSOIDS = np.array([
    [1.0, 0.6900, 0.920, 0.810, 0.00, 0.0000, 0.00, 0.0],
    [-0.8, 0.6624, 0.874, 0.780, 0.00, -0.0184, 0.00, 0.0],
    [-0.2, 0.1100, 0.310, 0.220, 0.22, 0.0000, 0.00, -18.0],
    [-0.2, 0.1600, 0.410, 0.280, -0.22, 0.0000, 0.00, 18.0],
    [0.1, 0.2100, 0.250, 0.410, 0.00, 0.3500, -0.15, 0.0],
    [0.1, 0.0460, 0.046, 0.050, 0.00, 0.1000, 0.25, 0.0],
    [0.1, 0.0460, 0.046, 0.050, 0.00, -0.1000, 0.25, 0.0],
    [0.1, 0.0460, 0.023, 0.050, -0.08, -0.6050, 0.00, 0.0],
    [0.1, 0.0230, 0.023, 0.020, 0.00, -0.6060, 0.00, 0.0],
    [0.1, 0.0230, 0.046, 0.020, 0.06, -0.6050, 0.00, 0.0],
])

_COIL_PHASE_SLOPE = 0.4  # imaginary part of each per-axis coil factor: a spatially varying phase
_NORMALIZE_GRID = 32  # points per axis on which sum_c |S_c|^2 is normalized over the phantom
_CHUNK = 1 << 16


def _shapes(ndim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Intensities (E,), semi-axes (E, D), centres (E, D) and rotations (E, D, D), in FOV units."""
    table = {2: _ELLIPSES, 3: _ELLIPSOIDS}[ndim]
    intensity = table[:, 0]
    axes = table[:, 1:1 + ndim] * SCALE
    classic = table[:, 1 + ndim:1 + 2 * ndim] * SCALE
    centres = classic.copy()
    centres[:, 0], centres[:, 1] = -classic[:, 1], classic[:, 0]  # turned by 90 degrees: BART's layout
    phi = np.deg2rad(table[:, -1] + 90.0)
    rot = np.zeros((len(table), ndim, ndim))
    rot[:, 0, 0] = np.cos(phi)
    rot[:, 0, 1] = -np.sin(phi)
    rot[:, 1, 0] = np.sin(phi)
    rot[:, 1, 1] = np.cos(phi)
    if ndim == 3:
        rot[:, 2, 2] = 1.0
    return intensity, axes, centres, rot


def _matrix(matrix) -> tuple[int, ...]:
    return validate_matrix(matrix, "phantom")


def _trajectory(trajectory, matrix: tuple[int, ...]) -> np.ndarray:
    k = np.asarray(trajectory, dtype=np.float64)
    if k.ndim != 2 or k.shape[1] != len(matrix):
        raise InvalidDataError(
            f"trajectory must have shape (M, {len(matrix)}) for matrix {list(matrix)}, found {k.shape}")
    return k


def shepp_logan(points: np.ndarray) -> np.ndarray:
    """Phantom intensity at ``points`` of shape ``(P, D)`` (D = 2 or 3, FOV units); float64 ``(P,)``."""
    r = np.asarray(points, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] not in (2, 3):
        raise InvalidDataError(f"points must have shape (P, 2) or (P, 3), found {r.shape}")
    intensity, axes, centres, rot = _shapes(r.shape[1])
    out = np.zeros(len(r))
    for a, ax, c, rm in zip(intensity, axes, centres, rot):
        u = ((r - c) @ rm) / ax  # R^T (r - c), scaled by the semi-axes
        out += a * (np.einsum("pd,pd->p", u, u) <= 1.0)
    return out


def _raster_add(out: np.ndarray, axes_coords: list[np.ndarray]) -> None:
    """Add the phantom's point values on the open grid ``axes_coords`` into ``out``, ellipse by ellipse."""
    intensity, axes, centres, rot = _shapes(len(axes_coords))
    reach = np.sqrt(np.einsum("eij,ej->ei", rot**2, axes**2))  # half-width of each bounding box
    for a, ax, c, rm, half in zip(intensity, axes, centres, rot, reach):
        box = []
        for x, lo, hi in zip(axes_coords, c - half, c + half):
            box.append(slice(int(np.searchsorted(x, lo)), int(np.searchsorted(x, hi, side="right"))))
        if any(b.start >= b.stop for b in box):
            continue
        parts = np.ix_(*[x[b] - cd for x, b, cd in zip(axes_coords, box, c)])
        u2 = sum((sum(parts[d] * rm[d, j] for d in range(len(parts))) / ax[j]) ** 2 for j in range(len(parts)))
        out[tuple(box)] += a * (u2 <= 1.0)


def shepp_logan_image(matrix, *, oversample: int = 4) -> np.ndarray:
    """The phantom rasterized on ``matrix``: the mean of ``oversample^D`` point samples per voxel.

    Parameters
    ----------
    matrix : sequence of int
        ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``; voxel j of an axis of size N is centred at ``(j - N // 2) / N``.
    oversample : int
        Sub-samples per voxel and axis, on a regular grid centred in the voxel (1: point samples at the
        voxel centres). The average is the voxel's partial-volume intensity.

    Returns
    -------
    numpy.ndarray
        complex64 array of shape ``matrix`` (real valued).
    """
    matrix = _matrix(matrix)
    oversample = positive_int("oversample", oversample)
    centres = [axis_positions(n) for n in matrix]
    steps = [((np.arange(oversample) + 0.5) / oversample - 0.5) / n for n in matrix]
    total = np.zeros(matrix)
    for offset in itertools.product(*steps):
        _raster_add(total, [x + o for x, o in zip(centres, offset)])
    return (total / oversample ** len(matrix)).astype(np.complex64)


def _unit_ft(q: np.ndarray, ndim: int) -> np.ndarray:
    """Fourier transform of the unit disc (D = 2) or ball (D = 3) at spatial frequency ``|q|``."""
    t = 2 * np.pi * q
    small = t < 1e-2
    ts = np.where(small, 1.0, t)
    if ndim == 2:
        series = np.pi * (1 - t**2 / 8 + t**4 / 192)
        exact = 2 * np.pi * j1(ts) / ts
    else:
        series = 4 * np.pi / 3 * (1 - t**2 / 10 + t**4 / 280)
        exact = 4 * np.pi * (np.sin(ts) - ts * np.cos(ts)) / ts**3
    return np.where(small, series, exact)


def _phantom_ft(k: np.ndarray, shifts: np.ndarray | None = None) -> np.ndarray:
    """Continuous Fourier transform of the phantom at ``k - g`` for each shift ``g`` of ``shifts`` (Q, D)
    (None: ``k`` itself), ``k`` (M, D): complex128 (Q, M), or (M,) without shifts. Each ellipse's rotated
    frequencies and phase ``exp(-i 2 pi k.c)`` are formed once for all the shifts."""
    ndim = k.shape[1]
    g = np.zeros((1, ndim)) if shifts is None else np.asarray(shifts, dtype=np.float64)
    intensity, axes, centres, rot = _shapes(ndim)
    out = np.zeros((len(g), len(k)), dtype=np.complex128)
    for a, ax, c, rm in zip(intensity, axes, centres, rot):
        turned, phase = k @ rm, np.exp(-2j * np.pi * (k @ c))
        for row, (shift, moved) in enumerate(zip(g @ rm, np.exp(2j * np.pi * (g @ c)))):
            q = np.sqrt(np.sum(((turned - shift) * ax) ** 2, axis=1))  # |diag(axes) R^T (k - g)|
            out[row] += ((a * np.prod(ax)) * moved) * _unit_ft(q, ndim) * phase
    return out if shifts is not None else out[0]


def shepp_logan_kspace(trajectory, matrix) -> np.ndarray:
    """Exact k-space of the phantom at ``trajectory``: ``prod(matrix)`` times its Fourier transform.

    Parameters
    ----------
    trajectory : numpy.ndarray
        ``(M, D)`` sample positions in cycles per field of view.
    matrix : sequence of int
        The image size; only ``prod(matrix)`` (the inverse voxel volume) and D enter.

    Returns
    -------
    numpy.ndarray
        complex64 ``(M,)``. Least squares on the model ``d = sum_n x_n exp(-i 2 pi k.r_n)`` returns the
        phantom's intensities (up to the resolution of the sampling).
    """
    matrix = _matrix(matrix)
    k = _trajectory(trajectory, matrix)
    out = np.empty(len(k), dtype=np.complex64)
    for start in range(0, len(k), _CHUNK):
        out[start:start + _CHUNK] = np.prod(matrix) * _phantom_ft(k[start:start + _CHUNK])
    return out


def _coil_positions(ndim: int, coils: int) -> np.ndarray:
    """Coil centres on a circle (2D) or a Fibonacci sphere (3D) of radius 1/2."""
    c = np.arange(coils)
    if ndim == 2:
        theta = 2 * np.pi * c / coils + np.pi / 4
        return 0.5 * np.stack([np.cos(theta), np.sin(theta)], axis=1)
    z = 1 - (2 * c + 1) / coils
    phi = np.pi * (3 - np.sqrt(5)) * c
    rho = np.sqrt(1 - z**2)
    return 0.5 * np.stack([rho * np.cos(phi), rho * np.sin(phi), z], axis=1)


def coil_model(ndim: int, coils: int) -> tuple[np.ndarray, np.ndarray]:
    """Frequencies ``g`` (Q, D) and coefficients ``a`` (C, Q) of ``S_c(r) = sum_q a_cq exp(i 2 pi g_q.r)``.

    Coil c at position ``p_c`` (on a circle or sphere of radius 1/2) has the separable sensitivity
    ``prod_d [1 + cos(pi u_d) + 0.4 i sin(pi u_d)]`` with ``u = r - p_c``: a smooth bump that peaks at the
    coil, falls to zero one FOV away and carries a spatially varying phase; each coil has its own constant
    phase too. One coil is a uniform body coil (``S = 1``). A single scale makes the mean of
    ``sum_c |S_c|^2`` over the phantom's support equal to 1.
    """
    if ndim not in (2, 3):
        raise InvalidDataError(f"coil maps need 2 or 3 dimensions, found {ndim}")
    coils = positive_int("coils", coils)
    if coils == 1:
        return np.zeros((1, ndim)), np.ones((1, 1), dtype=np.complex128)
    steps = (-0.5, 0.0, 0.5)
    freqs = np.array(list(itertools.product(steps, repeat=ndim)))
    beta = _COIL_PHASE_SLOPE
    weight = {-0.5: (1 - beta) / 2, 0.0: 1.0, 0.5: (1 + beta) / 2}
    positions = _coil_positions(ndim, coils)
    base = np.array([np.prod([weight[g] for g in row]) for row in freqs])
    coeffs = base[None, :] * np.exp(-2j * np.pi * positions @ freqs.T)
    coeffs *= np.exp(2j * np.pi * np.arange(coils) / coils)[:, None]
    grid = voxel_positions((_NORMALIZE_GRID,) * ndim)
    inside = grid[shepp_logan(grid) > 0]
    maps = coeffs @ np.exp(2j * np.pi * freqs @ inside.T)
    coeffs /= np.sqrt(np.mean(np.sum(np.abs(maps) ** 2, axis=0)))
    return freqs, coeffs


def coil_maps(matrix, coils: int) -> np.ndarray:
    """Coil sensitivities of :func:`coil_model` sampled at the voxel centres: complex64 ``(C, *matrix)``."""
    matrix = _matrix(matrix)
    freqs, coeffs = coil_model(len(matrix), coils)
    r = voxel_positions(matrix)
    maps = np.empty((coeffs.shape[0], len(r)), dtype=np.complex64)
    for start in range(0, len(r), _CHUNK):
        maps[:, start:start + _CHUNK] = coeffs @ np.exp(2j * np.pi * freqs @ r[start:start + _CHUNK].T)
    return maps.reshape(coeffs.shape[0], *matrix)


def coil_kspace(trajectory, matrix, coils: int, *, progress=None) -> np.ndarray:
    """Exact k-space of ``S_c x phantom`` for each coil: complex64 ``(C, M)``.

    ``prod(matrix) * sum_q a_cq FT(k - g_q)`` with the coil model of :func:`coil_model`; the rasterized
    counterpart is ``coil_maps(matrix, coils) * shepp_logan_image(matrix)``. Chunks of samples are computed
    on every core (NumPy releases the GIL); ``progress(done, total)`` is called with the samples done.
    """
    matrix = _matrix(matrix)
    k = _trajectory(trajectory, matrix)
    freqs, coeffs = coil_model(len(matrix), coils)
    out = np.empty((coeffs.shape[0], len(k)), dtype=np.complex64)

    def chunk(start: int) -> int:
        part = k[start:start + _CHUNK]
        shifted = _phantom_ft(part, freqs)  # (Q, m)
        out[:, start:start + _CHUNK] = np.prod(matrix) * (coeffs @ shifted)
        return len(part)

    done = 0
    with ThreadPoolExecutor(max(1, min(os.cpu_count() or 1, 8))) as pool:
        for count in pool.map(chunk, range(0, len(k), _CHUNK)):
            done += count
            if progress is not None:
                progress(done, len(k))
    return out


def noise_std_for(kspace: np.ndarray, snr: float, *, signal: float | None = None) -> float:
    """Noise standard deviation ``signal / snr`` (``signal`` defaults to the RMS magnitude of ``kspace``)."""
    try:
        value = float(snr)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(snr, bool) or not value > 0:
        raise InvalidDataError(f"snr must be a positive number (or inf for no noise), found {snr!r}")
    if signal is None:
        signal = float(np.sqrt(np.mean(np.abs(np.asarray(kspace)) ** 2)))
    elif not (np.isfinite(signal) and signal >= 0):
        raise InvalidDataError(f"signal must be finite and non-negative, found {signal!r}")
    return 0.0 if np.isinf(value) else float(signal) / value


def cartesian_signal(images: np.ndarray) -> float:
    """RMS k-space magnitude a full Cartesian scan of ``images`` (``(C, *matrix)``) would have.

    By Parseval, ``sqrt(prod(matrix)) * RMS(images)``: with it as the ``signal`` of :func:`add_noise`,
    ``snr`` is the image-domain SNR (RMS intensity over the noise standard deviation of the inverse-DFT
    image) of each coil of a fully sampled Cartesian scan, whatever the trajectory.
    """
    images = np.asarray(images)
    return float(np.sqrt(images[0].size * np.mean(np.abs(images) ** 2)))


def _complex_noise(shape: tuple[int, ...], sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Circular complex Gaussian noise, ``E|n|^2 = sigma^2`` (sigma / sqrt 2 per real part): complex64."""
    scale = sigma / np.sqrt(2)
    return (rng.normal(0.0, scale, shape) + 1j * rng.normal(0.0, scale, shape)).astype(np.complex64)


def noise_samples(coils: int, count: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Noise-only samples (a scan's ``noise`` dataset): complex64 ``(coils, count)``, white, std ``sigma``."""
    shape = (positive_int("coils", coils), positive_int("count", count))
    if not (np.isfinite(sigma) and sigma >= 0):
        raise InvalidDataError(f"sigma must be finite and non-negative, found {sigma!r}")
    return _complex_noise(shape, float(sigma), rng)


def add_noise(kspace: np.ndarray, snr: float, rng: np.random.Generator, *,
              signal: float | None = None) -> tuple[np.ndarray, float]:
    """Add circular complex Gaussian noise at a given SNR.

    ``snr = signal / sigma`` with ``sigma`` the noise standard deviation (``E|n|^2 = sigma^2``,
    ``sigma / sqrt 2`` per real and imaginary part) and ``signal`` by default the RMS magnitude of
    ``kspace`` over all coils and samples. That k-space SNR depends on the trajectory (radial samples crowd
    the bright centre); pass ``signal=cartesian_signal(coil_images)`` for an image-domain SNR instead, as
    :func:`mri_recon.sim.simulate.simulate_scan` does.

    Parameters
    ----------
    kspace : numpy.ndarray
        Noise-free data, any shape.
    snr : float
        Positive; ``inf`` adds no noise.
    rng : numpy.random.Generator
        Source of the noise.
    signal : float, optional
        The signal level ``snr`` refers to (default: RMS of ``kspace``).

    Returns
    -------
    tuple
        ``(noisy, sigma)``: complex64 data of the same shape and the noise standard deviation.
    """
    sigma = noise_std_for(kspace, snr, signal=signal)
    data = np.asarray(kspace)
    return (data + _complex_noise(data.shape, sigma, rng)).astype(np.complex64), sigma


ellipse_shapes = _shapes
"""Public name of the ellipse table (intensities, semi-axes, centres, rotations) of :func:`shepp_logan`."""
unit_ft = _unit_ft
"""Public name of the Fourier transform of the unit disc / ball (:mod:`mri_recon.sim.dynamic` moves ellipses)."""
