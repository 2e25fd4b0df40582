"""Parameters of the non-uniform FFT and a slow NumPy model of the whole algorithm.

The GPU NUFFT (``gpu_nufft.py``, ``kernels/nufft.cu``) follows FINUFFT (Barnett, Magland, af Klinteberg
2019). Per axis of size N:

- the image is oversampled onto a periodic fine grid of n >= sigma N points (sigma = 2, n even, 5-smooth,
  n >= 2 w);
- a sample at k (cycles per FOV) sits at the fine-grid coordinate g = k n / N (mod n), and is spread onto
  the w grid points i with |i - g| <= w/2 by the "exponential of semicircle" kernel
  ``psi(t) = phi(2 t / w)``, ``phi(z) = exp(beta (sqrt(1 - z^2) - 1))`` on |z| <= 1;
- an unnormalized FFT of the fine grid is divided, mode by mode, by the kernel's Fourier transform
  ``Psi(l) = (w/2) int_{-1}^{1} phi(z) cos(pi l w z / n) dz`` (Gauss-Legendre quadrature, as FINUFFT's
  ``onedim_fseries_kernel``, in the variable theta = arcsin z).

Conventions (those of the GPU path): voxel j of an axis of size N sits at r = (j - floor(N/2)) / N, i.e.
at mode l = j - floor(N/2). Adjoint (type 1) ``out[c, j] = sum_m d[c, m] exp(+i 2 pi k_m . r_j)``;
forward (type 2) ``d[c, m] = sum_j x[c, j] exp(-i 2 pi k_m . r_j)``. Trajectory column d belongs to array
axis d (C order).

:func:`reference_adjoint` and :func:`reference_forward` run exactly these steps in float64 NumPy (slow:
small problems only). The tests hold them against FINUFFT and a direct sum, which pins the parameters and
the conventions the CUDA kernels reproduce.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import InvalidDataError, SchemaError

SIGMA = 2.0
"""Oversampling factor of the fine grid (the only one implemented; 1.25 would need other beta rules)."""
MAX_WIDTH = 16


def kernel_width(eps: float) -> int:
    """Kernel width w (grid points per axis) for tolerance ``eps`` at sigma = 2: FINUFFT's
    ``w = ceil(log10(1 / eps)) + 1``, clipped to [2, 16]."""
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and 0 < eps < 1):
        raise InvalidDataError(f"eps must be a number in (0, 1), found {eps!r}")
    return int(min(MAX_WIDTH, max(2, math.ceil(math.log10(1.0 / eps) - 1e-12) + 1)))


def kernel_beta(width: int) -> float:
    """Shape parameter beta of the ES kernel at sigma = 2 (FINUFFT: 2.30 w, adjusted for w <= 4)."""
    ratio = {2: 2.20, 3: 2.26, 4: 2.38}.get(int(width), 2.30)
    return ratio * width


def es_kernel(z: np.ndarray, beta: float) -> np.ndarray:
    """phi(z) = exp(beta (sqrt(1 - z^2) - 1)) on |z| <= 1, zero outside."""
    z = np.asarray(z, dtype=np.float64)
    inside = np.abs(z) <= 1.0
    root = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    return np.where(inside, np.exp(beta * (root - 1.0)), 0.0)


def next_smooth_even(n: int) -> int:
    """The smallest even integer >= n of the form 2^a 3^b 5^c (a >= 1)."""
    m = max(2, int(n) + (int(n) % 2))
    while True:
        rest = m
        for p in (2, 3, 5):
            while rest % p == 0:
                rest //= p
        if rest == 1:
            return m
        m += 2


def fine_size(n: int, width: int, sigma: float = SIGMA) -> int:
    """Fine-grid size of an axis of n voxels: even, 5-smooth, >= sigma n and >= 2 w."""
    return next_smooth_even(max(math.ceil(sigma * n), 2 * width))


def fourier_coefficients(n: int, fine: int, width: int, beta: float, nodes: int | None = None) -> np.ndarray:
    """Psi at the modes of an axis: ``Psi(l) = (w/2) int_{-1}^{1} phi(z) cos(pi l w z / fine) dz`` for
    l = j - floor(n/2), j = 0 .. n-1 (float64, length n), by Gauss-Legendre quadrature in theta = arcsin z.
    Computed once per arguments (every plan of one image size needs the same, and the quadrature costs about a
    millisecond of host time per axis); each call returns its own copy."""
    return _coefficients(int(n), int(fine), int(width), float(beta), int(nodes or (3 * width + 12))).copy()


@functools.lru_cache(maxsize=64)
def _coefficients(n: int, fine: int, width: int, beta: float, q: int) -> np.ndarray:
    # z = sin(theta) on [0, pi/2] removes the square-root singularity of phi at z = 1, so the rule
    # converges exponentially (FINUFFT integrates in z directly; the difference is ~1e-8 at w = 4)
    t, wts = np.polynomial.legendre.leggauss(q)
    theta = (t + 1.0) * (np.pi / 4)
    x = np.sin(theta)
    wts = wts * (np.pi / 4) * np.cos(theta)
    modes = np.arange(n) - n // 2
    phase = np.cos(np.pi * width / fine * np.outer(modes, x))
    psi = width * (phase @ (wts * es_kernel(x, beta)))
    psi.flags.writeable = False
    return psi


@dataclass(frozen=True)
class NufftParams:
    """Every number the NUFFT needs for one image size and tolerance."""

    matrix: tuple[int, ...]
    """Image size (N1, N2[, N3]), voxels per axis."""
    eps: float
    """Requested relative tolerance."""
    width: int
    """Kernel width w in fine-grid points per axis."""
    beta: float
    """ES kernel shape parameter."""
    fine: tuple[int, ...]
    """Fine-grid size per axis (even, 5-smooth, >= 2 N and >= 2 w)."""

    @property
    def ndim(self) -> int:
        return len(self.matrix)

    def deconvolution(self) -> list[np.ndarray]:
        """Per axis, ``1 / Psi(l)`` at l = j - floor(N/2) (float64, length N)."""
        return [1.0 / fourier_coefficients(n, f, self.width, self.beta)
                for n, f in zip(self.matrix, self.fine)]


@functools.lru_cache(maxsize=64)
def _params(matrix: tuple[int, ...], eps: float) -> NufftParams:
    width = kernel_width(eps)
    return NufftParams(matrix, eps, width, kernel_beta(width), tuple(fine_size(n, width) for n in matrix))


def nufft_params(matrix: Sequence[int], eps: float = 1e-6) -> NufftParams:
    """The :class:`NufftParams` of ``matrix`` (2 or 3 axes of >= 1 voxel) at tolerance ``eps``."""
    dims = tuple(int(n) for n in matrix)
    if len(dims) not in (2, 3) or min(dims) < 1:
        raise SchemaError(f"matrix must have 2 or 3 axes of at least one voxel, found {list(matrix)}")
    return _params(dims, float(eps))


# ----------------------------------------------------------------------------------------------------
# The NumPy model of the algorithm (float64, small problems)


def fine_coordinates(trajectory: np.ndarray, params: NufftParams) -> np.ndarray:
    """Fine-grid coordinates g = k n / N, wrapped into [0, n), float64 (M, D)."""
    k = np.asarray(trajectory, dtype=np.float64)
    fine = np.asarray(params.fine, dtype=np.float64)
    g = k * fine / np.asarray(params.matrix, dtype=np.float64)
    return np.mod(g, fine)


def _axis_weights(g: np.ndarray, params: NufftParams) -> tuple[np.ndarray, np.ndarray]:
    """First grid index i1 = ceil(g - w/2) per sample and the w kernel values psi(i1 + t - g)."""
    w = params.width
    first = np.ceil(g - w / 2.0).astype(np.int64)
    z = (first[:, None] + np.arange(w)[None, :] - g[:, None]) * (2.0 / w)
    return first, es_kernel(z, params.beta)


def _stencil(trajectory: np.ndarray, params: NufftParams) -> tuple[np.ndarray, np.ndarray]:
    """Flat fine-grid indices (M, w^D) and kernel weights (M, w^D) of every sample."""
    g = fine_coordinates(trajectory, params)
    index = np.zeros((g.shape[0], 1), dtype=np.int64)
    weight = np.ones((g.shape[0], 1))
    for d, n in enumerate(params.fine):
        first, values = _axis_weights(g[:, d], params)
        cells = np.mod(first[:, None] + np.arange(params.width)[None, :], n)
        index = (index[:, :, None] * n + cells[:, None, :]).reshape(g.shape[0], -1)
        weight = (weight[:, :, None] * values[:, None, :]).reshape(g.shape[0], -1)
    return index, weight


def _mode_slots(params: NufftParams) -> tuple[np.ndarray, np.ndarray]:
    """Flat fine-grid index of every image voxel (mode l = j - floor(N/2) sits at l mod n) and the
    separable deconvolution factor 1 / prod_d Psi_d, both C-order over the matrix."""
    slots = np.zeros(1, dtype=np.int64)
    factor = np.ones(1)
    for n, f, inv in zip(params.matrix, params.fine, params.deconvolution()):
        slot = np.mod(np.arange(n) - n // 2, f)
        slots = (slots[:, None] * f + slot[None, :]).reshape(-1)
        factor = (factor[:, None] * inv[None, :]).reshape(-1)
    return slots, factor


def reference_adjoint(kspace: np.ndarray, trajectory: np.ndarray, matrix: Sequence[int],
                      eps: float = 1e-6) -> np.ndarray:
    """Type 1 by spread, FFT and deconvolution in float64: ``(C, M)`` -> complex128 ``(C, *matrix)``."""
    params = nufft_params(matrix, eps)
    data = np.atleast_2d(np.asarray(kspace, dtype=np.complex128))
    index, weight = _stencil(trajectory, params)
    slots, factor = _mode_slots(params)
    size = math.prod(params.fine)
    out = np.empty((data.shape[0], math.prod(params.matrix)), dtype=np.complex128)
    for c, samples in enumerate(data):
        grid = np.zeros(size, dtype=np.complex128)
        np.add.at(grid, index.ravel(), (weight * samples[:, None]).ravel())
        # sum_i b_i exp(+2 pi i l i / n): the unnormalized inverse FFT
        spectrum = np.fft.ifftn(grid.reshape(params.fine)).ravel() * size
        out[c] = spectrum[slots] * factor
    return out.reshape(data.shape[0], *params.matrix)


def reference_forward(image: np.ndarray, trajectory: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Type 2 by deconvolution, FFT and interpolation in float64: ``(C, *matrix)`` -> complex128 ``(C, M)``."""
    image = np.asarray(image, dtype=np.complex128)
    ndim = np.asarray(trajectory).shape[1]
    matrix = image.shape[-ndim:]
    params = nufft_params(matrix, eps)
    flat = image.reshape(-1, math.prod(matrix))
    index, weight = _stencil(trajectory, params)
    slots, factor = _mode_slots(params)
    out = np.empty((flat.shape[0], index.shape[0]), dtype=np.complex128)
    for c, voxels in enumerate(flat):
        grid = np.zeros(math.prod(params.fine), dtype=np.complex128)
        grid[slots] = voxels * factor
        # sum_l a_l exp(-2 pi i l i / n): the unnormalized forward FFT
        spread = np.fft.fftn(grid.reshape(params.fine)).ravel()
        out[c] = np.sum(spread[index] * weight, axis=1)
    return out


def direct_adjoint(kspace: np.ndarray, trajectory: np.ndarray, matrix: Sequence[int]) -> np.ndarray:
    """Exact type 1 in float64 with r = (j - floor(N/2)) / N (a small dense oracle for odd sizes)."""
    data = np.atleast_2d(np.asarray(kspace, dtype=np.complex128))
    k = np.asarray(trajectory, dtype=np.float64)
    r = _positions(matrix)
    cycles = k @ r.T
    cycles -= np.rint(cycles)
    return (data @ np.exp(2j * np.pi * cycles)).reshape(data.shape[0], *matrix)


def direct_forward(image: np.ndarray, trajectory: np.ndarray) -> np.ndarray:
    """Exact type 2 in float64 with r = (j - floor(N/2)) / N."""
    k = np.asarray(trajectory, dtype=np.float64)
    image = np.asarray(image, dtype=np.complex128)
    matrix = image.shape[-k.shape[1]:]
    r = _positions(matrix)
    cycles = k @ r.T
    cycles -= np.rint(cycles)
    return image.reshape(-1, r.shape[0]) @ np.exp(-2j * np.pi * cycles).T


def _positions(matrix: Sequence[int]) -> np.ndarray:
    axes = [(np.arange(n) - n // 2) / n for n in matrix]
    return np.stack([g.ravel() for g in np.meshgrid(*axes, indexing="ij")], axis=1)
