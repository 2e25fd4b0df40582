"""Density-compensation weights: the analytic radial ramp and the iterative Pipe-Menon weights.

Normalization (both functions): the weights approximate the k-space area (volume) each sample stands for,
in cycles per FOV, divided by ``prod(matrix)`` -- on a full Cartesian grid that is ``1 / prod(matrix)``.
With it the density-compensated adjoint ``F^H W F`` has unit gain on smooth images, so gridding
``F^H (w * d)`` estimates intensities directly. The scale is fixed by requiring that a Gaussian blob of
width 0.1 FOV (at least 1.5 voxels) on the voxel grid is reproduced at its centre,
``sum_m w_m (F b)(k_m) = b(0)``; for large matrices ``F b`` is ``prod(matrix)`` times the blob's continuous
Fourier transform.
"""

from __future__ import annotations

import numpy as np

from ..checks.grid import axis_positions
from ..checks.validation import positive_int, trajectory_extent, validate_matrix
from ..errors import InvalidDataError
from ..operators.engines import finufft as nufft_cpu

BLOB_WIDTH = 0.1
"""Standard deviation (FOV units) of the Gaussian blob that fixes the scale of the weights (at least
1.5 voxels along each axis)."""
WINDOW_WIDTH = 0.25
"""Standard deviation (FOV units) of the Gaussian image window of the Pipe-Menon kernel: the kernel in
k-space has a main lobe of standard deviation about ``1 / (2 pi 0.25) = 0.64`` cycles per FOV."""
_REFERENCE_STEP = 0.5  # spacing of the uniform reference sampling, cycles per FOV
_NUFFT_EPS = 1e-4


def _inputs(trajectory, matrix) -> tuple[np.ndarray, tuple[int, ...]]:
    matrix = validate_matrix(matrix, "dcf")
    k = np.asarray(trajectory, dtype=np.float64)
    if k.ndim != 2 or k.shape[1] != len(matrix) or len(k) == 0:
        raise InvalidDataError(
            f"trajectory must have shape (M, {len(matrix)}) with M > 0 for matrix {list(matrix)}, "
            f"found {k.shape}")
    if not np.all(np.isfinite(k)):
        raise InvalidDataError("trajectory contains NaN or Inf values")
    return k, matrix


def _axes(axes, ndim: int) -> list[int]:
    axes = list(range(ndim)) if axes is None else list(axes)
    if not axes or len(set(axes)) != len(axes) or any(a not in range(ndim) for a in axes):
        raise InvalidDataError(f"axes must be distinct axes of a {ndim}-D trajectory, found {tuple(axes)}")
    return axes


def blob_extent(matrix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The blob's standard deviation per axis, ``max(BLOB_WIDTH, 1.5 / N_d)`` FOV, and the reach of its
    spectrum per axis (cycles per FOV): beyond 8 of the spectrum's standard deviations or the Nyquist extent
    it is taken as zero."""
    width = np.maximum(BLOB_WIDTH, 1.5 / np.asarray(matrix, dtype=np.float64))
    return width, np.minimum(8 / (2 * np.pi * width), np.asarray(matrix) / 2)


def blob_samples(matrix: tuple[int, ...]) -> list[np.ndarray]:
    """The blob on each axis's voxel positions (float64, ``b = 1`` at r = 0)."""
    width, _ = blob_extent(matrix)
    return [np.exp(-(axis_positions(n) ** 2) / (2 * s**2)) for n, s in zip(matrix, width)]


def blob_spectrum(k: np.ndarray, matrix: tuple[int, ...]) -> np.ndarray:
    """``(F b)(k)`` of the separable Gaussian blob ``b`` on the voxel grid at float64 positions ``k`` (M, D):
    zero beyond the reach of :func:`blob_extent`."""
    out = np.zeros(len(k))
    _, reach = blob_extent(matrix)
    near = np.nonzero(np.all(np.abs(k) <= reach, axis=1))[0]
    blobs = blob_samples(matrix)
    for start in range(0, len(near), 8192):
        part = near[start:start + 8192]
        spectrum = np.ones(len(part), dtype=np.complex128)
        for d, (n, g) in enumerate(zip(matrix, blobs)):
            spectrum *= np.exp(-2j * np.pi * np.outer(k[part, d], axis_positions(n))) @ g
        out[part] = spectrum.real
    return out


def normalize(weights: np.ndarray, trajectory: np.ndarray, matrix: tuple[int, ...]) -> np.ndarray:
    """Scale ``weights`` so that ``F^H W F`` reproduces a smooth blob at its centre (module docstring).

    The blob is the Gaussian of :func:`blob_spectrum` on the voxel grid, so that a full Cartesian grid
    gets exactly ``1 / prod(matrix)``.
    """
    k = np.asarray(trajectory, dtype=np.float64)
    gain = float(np.sum(weights * blob_spectrum(k, tuple(matrix))))
    if not gain > 0:
        raise InvalidDataError("weights are zero near the centre of k-space: no sample within a few cycles "
                               "per FOV of k = 0 carries weight")
    return weights / gain


def ramp(trajectory, matrix, *, axes: tuple[int, ...] | None = None) -> np.ndarray:
    """Analytic radial density compensation ``|k|^(D' - 1)`` over ``axes`` (D' of them).

    ``|k|`` (2D radial, or stack of stars with ``axes=(0, 1)``) or ``|k|^2`` (kooshball), with axis d
    scaled by ``max(matrix) / N_d`` so that the elliptical coverage of an anisotropic matrix is handled.
    A sample at k = 0 gets the share of the central disc (ball) of radius ``delta / 2`` that matches the
    ramp's share of each ring (shell): ``(2 / D') (delta / 2)^D' / delta`` in ramp units, ``delta / 4``
    in 2D and ``delta^2 / 12`` in 3D, where ``delta`` is the smallest non-zero radius (the readout
    spacing).

    Parameters
    ----------
    trajectory : numpy.ndarray
        ``(M, D)`` in cycles per FOV.
    matrix : sequence of int
        Image size.
    axes : tuple of int, optional
        Axes spanning the radial pattern; default all.

    Returns
    -------
    numpy.ndarray
        float32 ``(M,)``, normalized as described in the module docstring.
    """
    k, matrix = _inputs(trajectory, matrix)
    axes = _axes(axes, len(matrix))
    scale = max(matrix) / np.asarray([matrix[a] for a in axes], dtype=np.float64)
    radius = np.sqrt(np.sum((k[:, axes] * scale) ** 2, axis=1))
    dims = len(axes)
    tiny = 1e-9 * max(matrix)
    moving = radius > tiny
    if not np.any(moving):
        raise InvalidDataError("ramp weights need samples away from k = 0, found all samples at the centre")
    delta = float(np.min(radius[moving]))
    weights = radius ** (dims - 1)
    weights[~moving] = (2 / dims) * (delta / 2) ** dims / delta
    return normalize(weights, k, matrix).astype(np.float32)


def _grid(k: np.ndarray) -> tuple[int, ...]:
    """An even oversized grid on which the kernel's periodic images stay clear of every sample pair."""
    margin = 8 / (2 * np.pi * WINDOW_WIDTH)  # eight kernel widths
    reach = trajectory_extent(k)
    return tuple(int(2 * np.ceil(r + margin)) for r in reach)


class _Convolution:
    """``w -> |C w|`` for weights on points ``k``: the Pipe-Menon kernel, read back at ``k``."""

    def __init__(self, k: np.ndarray) -> None:
        self.k = k
        self.grid = _grid(k)
        r = np.meshgrid(*[axis_positions(n) for n in self.grid], indexing="ij", sparse=True)
        self.window = np.exp(-sum(x**2 for x in r) / (2 * WINDOW_WIDTH**2))

    def __call__(self, weights: np.ndarray, points: np.ndarray | None = None) -> np.ndarray:
        """``|C w|`` at ``self.k`` for ``weights`` placed on ``points`` (default: ``self.k``)."""
        points = self.k if points is None else points
        image = nufft_cpu.adjoint(weights[None], points, self.grid, eps=_NUFFT_EPS) * self.window
        return np.abs(nufft_cpu.forward(image, self.k, eps=_NUFFT_EPS)[0])


def _covered_region(k: np.ndarray) -> tuple[np.ndarray, float] | None:
    """A Cartesian grid (spacing 1/2) filling the sampled region, and its cell volume; None if flat.

    The region is the convex hull of the samples with every face moved out by half the spacing of the
    outermost samples (each sample stands for a cell around it). Returns None when the samples span no
    volume.
    """
    from scipy.spatial import ConvexHull, HalfspaceIntersection, QhullError, cKDTree  # noqa: PLC0415 - 0.3 s

    ndim = k.shape[1]
    try:
        hull = ConvexHull(k)
        spacing, _ = cKDTree(k).query(k[hull.vertices], k=2)
        planes = hull.equations.copy()  # unit outward normals n and offsets b: n.x + b <= 0 inside
        planes[:, -1] -= 0.5 * float(np.median(spacing[:, 1]))
        centre = np.mean(k[hull.vertices], axis=0)
        corners = HalfspaceIntersection(planes, centre).intersections
    except QhullError:
        return None
    planes[:, -1] += planes[:, :-1] @ centre  # in coordinates relative to the centre
    inner = float(np.min(-planes[:, -1]))  # a ball this size around the centre is inside
    outer = float(np.max(np.linalg.norm(corners - centre, axis=1)))  # and everything is within this one
    step = _REFERENCE_STEP
    axes = [np.arange(np.floor(lo / step), np.ceil(hi / step) + 1) * step - c
            for lo, hi, c in zip(corners.min(axis=0), corners.max(axis=0), centre)]
    rest = np.stack([g.reshape(-1) for g in np.meshgrid(*axes[1:], indexing="ij")], axis=1)
    points = []
    for first in axes[0]:  # one slab at a time keeps memory small in 3D
        slab = np.column_stack([np.full(len(rest), first), rest])
        radius = np.linalg.norm(slab, axis=1)
        keep = radius <= inner
        shell = np.nonzero((radius > inner) & (radius <= outer))[0]
        for start in range(0, len(shell), 2048):
            part = shell[start:start + 2048]
            keep[part] = np.max(slab[part] @ planes[:, :-1].T + planes[:, -1], axis=1) <= 0
        points.append(slab[keep] + centre)
    return np.concatenate(points), step**ndim


def pipe_menon(trajectory, matrix, *, iterations: int = 20, axes: tuple[int, ...] | None = None) -> np.ndarray:
    """Iterative density compensation of Pipe and Menon (MRM 1999): ``w <- w f / |C w|``.

    ``C`` convolves the weighted samples with a kernel of about 0.6 cycles per FOV and reads the result
    back at the samples. It is computed with the project's FINUFFT operators as ``C w = F diag(h) F^H w``,
    with ``h`` a Gaussian window of width :data:`WINDOW_WIDTH` on an image grid fine enough that the
    periodic copies of the kernel do not reach across k-space. The target ``f`` is ``C`` applied to a
    uniform Cartesian sampling of the covered region (the samples' convex hull, pushed out by half a sample
    spacing), weighted by its cell volume: at the fixed point the weighted density equals a uniform one,
    and the weights at the edge of k-space are not inflated (the plain iteration with ``f = 1`` doubles
    them). Coincident samples (the centre of radial spokes, repeated partitions) share one weight, and the
    iteration starts from one unit of weight per distinct position.

    Parameters
    ----------
    trajectory : numpy.ndarray
        ``(M, D)`` in cycles per FOV.
    matrix : sequence of int
        Image size (used by the normalization).
    iterations : int
        Number of updates; 20 flatten the weighted density to better than 1% for radial and spiral
        trajectories at Nyquist.
    axes : tuple of int, optional
        Axes spanning the non-Cartesian pattern (default all): ``(0, 1)`` for a stack of stars, whose
        Cartesian partitions need no compensation.

    Returns
    -------
    numpy.ndarray
        float32 ``(M,)``, normalized as described in the module docstring.
    """
    k, matrix = _inputs(trajectory, matrix)
    axes = _axes(axes, len(matrix))
    iterations = positive_int("iterations", iterations)
    positions, inverse, counts = np.unique(k[:, axes], axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    convolve = _Convolution(positions)
    region = _covered_region(positions)
    target = 1.0 if region is None else convolve(np.full(len(region[0]), region[1]), region[0])
    weights = np.ones(len(positions))
    for _ in range(iterations):
        rho = convolve(weights)
        weights = weights * target / np.maximum(rho, 1e-12 * float(np.max(rho)))
    return normalize(weights[inverse] / counts[inverse], k, matrix).astype(np.float32)


def density(weights, trajectory, *, axes: tuple[int, ...] | None = None) -> np.ndarray:
    """Weighted sampling density ``|C w|`` at each sample, relative to its median (1 means flat).

    ``C`` is the Pipe-Menon kernel convolution (see :func:`pipe_menon`) over ``axes`` (default all). A
    good compensation gives 1 everywhere except within a kernel width of the edge of the sampled region.
    """
    k = np.asarray(trajectory, dtype=np.float64)
    k = k[:, _axes(axes, k.shape[1])]
    rho = _Convolution(k)(np.asarray(weights, dtype=np.float64))
    return rho / np.median(rho)
