"""FINUFFT wrappers in the project's conventions: the fast CPU path for F and F^H.

Convention (schema v1, :mod:`mri_recon.checks.grid`): voxel j of an axis of size N sits at r = (j - N // 2) / N,
the trajectory k is in cycles per field of view, F x = sum_n x_n exp(-i 2 pi k . r_n) and
F^H d = sum_m d_m exp(+i 2 pi k_m . r). FINUFFT's modes are the integers q = j - N // 2 (its default
``modeord=0``), the same grid, so its type-1 and type-2 transforms at x_d = 2 pi k_d / N_d are F^H and F
with no phase correction. Computed in double precision to tolerance ``eps``.

Bit reproducibility: FINUFFT's multi-threaded type-1 spreading adds the threads' subgrids in whatever
order the threads finish, so two runs of F^H d (or of the PSF) can differ in the last bits (about 1e-7
relative after the cast to complex64, more on a loaded machine). :func:`adjoint` therefore runs each
transform with ``nthreads=1`` (a fixed summation order) and spreads the coils over a pool of threads
instead: the same inputs give bit-identical F^H d and PSF on every run of the same build on the same
machine, whatever the load, and a cached PSF matches a recomputed one. Not promised: identical bits across
FINUFFT or FFTW versions, CPUs (SIMD width), or against the GPU path. :func:`forward` (type 2: each
sample interpolated by one thread) is deterministic with FINUFFT's default threading.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...arrays.backend import cpu_threads
from .nufft_params import next_smooth_even  # FINUFFT's next235even

DEFAULT_EPS = 1e-9
MAX_KERNEL_WIDTH = 16
MAX_SUBPROBLEM = 100_000
"""Samples per subproblem of a type-1 transform's spreading (FINUFFT's ``spread_max_sp_size``, 2.5's default
in 2-D and 3-D), passed so that :mod:`.finufft_spread` counts what FINUFFT holds."""


def upsampfac(eps: float) -> float:
    """The oversampling factor used at tolerance ``eps``: 1.25 down to 1e-9 (what FINUFFT 2.5 picks itself
    there), else 2 (a 1.25 grid would need a kernel wider than FINUFFT allows). Fixed here, not left to
    FINUFFT's heuristics, so that the memory planner can count the grids."""
    return 1.25 if eps >= 1e-9 else 2.0


def kernel_width(eps: float, ndim: int) -> int:
    """FINUFFT 2.5's spreading kernel width ``ns`` (grid points, at most 16) at tolerance ``eps`` in ``ndim``
    dimensions, for its PSWF kernel at :func:`upsampfac`."""
    sigma = upsampfac(eps)
    tolfac = 0.18 * 1.4 ** (ndim - 1)
    ns = math.ceil(math.log(tolfac / eps) / (math.pi * math.sqrt(1 - 1 / sigma)) + 1)
    return min(MAX_KERNEL_WIDTH, max(2, ns))


def fine_grid_shape(matrix: tuple[int, ...], eps: float = DEFAULT_EPS) -> tuple[int, ...]:
    """The oversampled (fine) grid of one FINUFFT transform onto ``matrix`` at tolerance ``eps``.

    Each transform in flight holds one complex128 array of this shape (plus its FFTW plan's). The grid is at
    least ``upsampfac * N`` and ``2 ns`` per axis (:func:`kernel_width`), rounded up to an even 2-3-5-smooth
    size.
    """
    sigma, ns = upsampfac(eps), kernel_width(eps, len(matrix))
    return tuple(next_smooth_even(max(math.ceil(sigma * n), 2 * ns)) for n in matrix)


def _finufft():
    import finufft  # noqa: PLC0415 - import cost paid only when used

    return finufft


def _scaled(trajectory: np.ndarray, matrix: tuple[int, ...]) -> list[np.ndarray]:
    """FINUFFT coordinates x_d = 2 pi k_d / N_d (its modes j - N_d // 2 are the voxels of
    :mod:`mri_recon.checks.grid`), float64, one array per axis (made from each column, not from a float64 copy of
    the whole trajectory)."""
    k = np.asarray(trajectory)
    return [2 * np.pi * np.asarray(k[:, d], dtype=np.float64) / n for d, n in enumerate(matrix)]


def _per_coil(transform, count: int) -> None:
    """``transform(c)`` for every coil ``c < count``, up to :func:`~mri_recon.arrays.backend.cpu_threads` at once."""
    threads = min(cpu_threads(), count)
    if threads <= 1:  # one coil, or none
        for c in range(count):
            transform(c)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(transform, range(count)))


def adjoint(kspace: np.ndarray, trajectory: np.ndarray, matrix: tuple[int, ...],
            eps: float = DEFAULT_EPS) -> np.ndarray:
    """F^H d for ``kspace`` of shape ``(C, M)``; returns complex128 ``(C, *matrix)``.

    Bit-reproducible: each coil is one single-threaded FINUFFT transform (fixed summation order); up to
    :func:`workers` coils run at once, each with its own oversampled grid.
    """
    matrix = tuple(int(n) for n in matrix)
    return _type1(kspace, _scaled(trajectory, matrix), matrix, eps)


def psf(weights: np.ndarray, trajectory: np.ndarray, matrix: tuple[int, ...], eps: float = DEFAULT_EPS) -> np.ndarray:
    """The Toeplitz PSF ``p[j] = sum_m w_m exp(+i 2 pi k_m . (j - N) / N)`` on the grid of twice ``matrix``
    (complex128): F^H w with trajectory 2k on matrix 2N. Its FINUFFT coordinates 2 pi (2k) / (2N) are the
    doubles 2 pi k / N (doubling is exact), so they are made from k on ``matrix``, without a doubled copy of
    the trajectory."""
    matrix = tuple(int(n) for n in matrix)
    data = np.asarray(weights, dtype=np.complex128)[None, :]
    return _type1(data, _scaled(trajectory, matrix), tuple(2 * n for n in matrix), eps)[0]


def _type1(kspace: np.ndarray, coords: list[np.ndarray], shape: tuple[int, ...], eps: float) -> np.ndarray:
    """Type-1 transforms of ``kspace`` ``(C, M)`` at FINUFFT ``coords`` onto ``shape``, one single-threaded
    transform per coil, the coils on a pool of threads; complex128 ``(C, *shape)``."""
    data = np.ascontiguousarray(np.asarray(kspace, dtype=np.complex128))
    fn = {2: _finufft().nufft2d1, 3: _finufft().nufft3d1}[len(shape)]
    out = np.empty((data.shape[0], *shape), dtype=np.complex128)

    def one(c: int) -> None:
        fn(*coords, data[c], n_modes=shape, eps=eps, isign=+1, nthreads=1, upsampfac=upsampfac(eps),
           spread_max_sp_size=MAX_SUBPROBLEM, out=out[c])

    _per_coil(one, data.shape[0])
    return out


def forward(image: np.ndarray, trajectory: np.ndarray, eps: float = DEFAULT_EPS) -> np.ndarray:
    """F x for ``image`` of shape ``(C, *matrix)``; returns complex128 ``(C, M)``.

    Like :func:`adjoint`, one single-threaded transform per coil: FINUFFT's multi-threaded type 2 gives
    different last bits for different thread counts (its FFT), so results would depend on the machine's load
    of cores (a batch worker's share against a single run's)."""
    image = np.ascontiguousarray(np.asarray(image, dtype=np.complex128))
    matrix = tuple(image.shape[1:])
    coords = _scaled(trajectory, matrix)
    fn = {2: _finufft().nufft2d2, 3: _finufft().nufft3d2}[len(matrix)]
    out = np.empty((image.shape[0], len(coords[0])), dtype=np.complex128)

    def one(c: int) -> None:
        fn(*coords, image[c], eps=eps, isign=-1, nthreads=1, upsampfac=upsampfac(eps), out=out[c])

    _per_coil(one, image.shape[0])
    return out
