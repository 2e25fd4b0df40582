"""Bytes the preparation of a scan holds at its peaks: prewhitening, density compensation, coil-map estimation.

The planner (:mod:`mri_recon.planning.planner`) adds these to the arrays held for the whole run. Each count follows
the code of :mod:`mri_recon.prep` array by array (NumPy's temporaries included: an expression ``a * b + c``
holds two results at once) and was checked against the peaks traced by ``tracemalloc`` and the peak RSS
(``scripts/measure_planner.py``, ``docs/planner.md``). The preparation's own constants are repeated here
(this module sits below :mod:`mri_recon.prep` and may not import it); a test checks that they agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..checks.validation import samples_within, trajectory_extent
from ..kernels.configs import MAPS_SCRATCH_BYTES, MAPS_TIERS
from ..scan import Scan

C64, C128, F32, F64, I64 = 8, 16, 4, 8, 8
EIGEN_CHUNK = 1 << 19
"""Voxels per batched eigen-solver call (:data:`mri_recon.prep.lowres.EIGEN_CHUNK`)."""
EIGEN_SCALARS = 36
"""Bytes per matrix of the eigen solver's chunk besides its (C, C) arrays: the traces and their guards, the
int64 column of each argmax, the norms (traced at C = 1 to 16: 36 bytes whatever C; with one coil they are most
of it)."""
WALSH_RADIUS = 12.0
"""Radius of Walsh's low-resolution images in cycles per FOV, at most a quarter of the matrix
(:func:`mri_recon.prep.lowres.default_radius`)."""
ESPIRIT_CALIBRATION = {2: 24, 3: 16}
ESPIRIT_KERNEL = {2: 6, 3: 5}
"""ESPIRiT's default calibration width and kernel per dimension
(:func:`mri_recon.prep.coilmaps.coil_maps_from_kspace`)."""
ESPIRIT_KEPT = 1 / 3
"""Share of the C x kernel^D calibration kernels ESPIRiT is assumed to keep (singular values above its
threshold): above what the simulated scans of ``scripts/measure_planner.py`` keep (docs/planner.md); noisier
calibration data keep more, and their plan is low by that share of the kernels' images."""
PIPE_MARGIN = 8 / (2 * math.pi * 0.25)
"""Pipe-Menon's grid margin in cycles per FOV: eight kernel widths (:mod:`mri_recon.prep.dcf`)."""
PIPE_STEP = 0.5
"""Spacing of Pipe-Menon's uniform reference sampling (cycles per FOV)."""
PIPE_EPS = 1e-4
"""FINUFFT's tolerance in Pipe-Menon's convolutions (:mod:`mri_recon.prep.dcf`)."""
BLOB_CHUNK = 8192
"""Samples per block of the weights' normalization (:func:`mri_recon.prep.dcf.normalize`)."""
COMPRESS_MAX_SAMPLES = 16384
"""The most centre samples coil compression is computed from (:mod:`mri_recon.prep.compress`: ``MAX_SAMPLES``)."""


@dataclass(frozen=True)
class Preparation:
    """What the preparation of a scan computes, in sizes only (:func:`mri_recon.planning.planner.plan`'s
    ``preparation``)."""

    noise_samples: int = 0
    """K of the ``(C, K)`` noise the data are prewhitened with; 0: no prewhitening."""
    dcf: str | None = None
    """``"ramp"`` or ``"pipe"``: density weights computed; None: none computed."""
    extent: tuple[float, ...] = ()
    """``max |k_d|`` of the trajectory per axis (cycles per FOV): the size of Pipe-Menon's grids."""
    coil_maps: str | None = None
    """``"walsh"``, ``"espirit"`` or ``"nlinv"``: maps estimated from the data; None: none estimated."""
    centre_samples: int = 0
    """Samples within the coil-map estimate's k-space radius (bounded by all samples when unknown)."""
    whitened_maps: bool = False
    """The scan's own coil maps are prewhitened with the data."""
    virtual_coils: int = 0
    """The coils after coil compression (:mod:`mri_recon.prep.compress`), which every later stage holds; 0: not
    compressed (or the number decided from the data: the scan's coils are planned)."""
    compress_samples: int = 0
    """The centre samples the compression matrix is computed from, at most (the cap, or every sample of a
    smaller scan: known without reading the trajectory)."""
    compress_working: int = 0
    """Bytes the compression method's application holds besides (its working blocks)."""
    compress_on_the_way: bool = False
    """The compression is one matrix, applied on the host as the data go to a GPU, which then never holds the
    receivers' k-space and maps."""
    held_bytes: int = 0
    """The caller's arrays that the run's stages do not otherwise count (noise, ground truth, field map,
    times, the scan's own weights), held throughout."""
    trajectory: Any = field(default=None, repr=False, compare=False)
    """The scan's ``(M, D)`` trajectory (None: not known), for an engine whose memory depends on where the
    samples lie (FINUFFT's spreading subgrids: :mod:`mri_recon.operators.engines.finufft_spread`); it is read
    only when such an engine is planned."""


def prewhiten(c: int, m: int, k: int, n_vox: int, maps: bool) -> tuple[int, int]:
    """``(peak, kept)``: bytes beyond the inputs at the peak of prewhitening, and the whitened copies kept
    afterwards (the caller still holds the originals): k-space, noise and maps in complex64; the noise in
    complex128 for its covariance, and the finiteness test's booleans when the whitened scan is validated."""
    kept = c * m * C64 + c * k * C64 + (c * n_vox * C64 if maps else 0)
    return kept + max(c * k * C128, 2 * c * m, 2 * c * n_vox if maps else 0), kept


def coils_after(preparation: Preparation, coils: int) -> int:
    """The coils of the stages after the preparation's coil compression (the scan's ``coils`` without one)."""
    return min(coils, preparation.virtual_coils) if preparation.virtual_coils else coils


def compress(c: int, n: int, m: int, k: int, n_vox: int, maps: bool, centre: int) -> int:
    """Bytes beyond the inputs at the peak of whitening and compressing ``c`` coils to ``n`` in one product: the
    noise in complex128 for its covariance, the ``centre`` samples gathered in complex128 with their Gram matrix
    (counted as three copies of them), or the compressed k-space, noise and maps."""
    return max(c * k * C128, 3 * c * centre * C128, n * m * C64 + n * k * C64 + (n * n_vox * C64 if maps else 0))


def _blob(m: int, matrix: tuple[int, ...]) -> int:
    """The weights' normalization: a block of samples times an axis in float64 and twice complex128."""
    return BLOB_CHUNK * max(matrix) * (C128 + C128) + 2 * m * F64


def pipe_shape(extent: tuple[float, ...]) -> tuple[int, ...]:
    """Pipe-Menon's convolution grid (two margins beyond the samples' extent, even)."""
    return tuple(int(2 * math.ceil(r + PIPE_MARGIN)) for r in extent)


def pipe_grid(extent: tuple[float, ...]) -> int:
    """Voxels of Pipe-Menon's convolution grid (:func:`pipe_shape`)."""
    return math.prod(pipe_shape(extent))


def pipe_region(extent: tuple[float, ...]) -> int:
    """Points of Pipe-Menon's uniform reference sampling: the box around the samples (a bound of the hull)."""
    return math.prod(int(math.ceil((2 * r + 1) / PIPE_STEP)) + 1 for r in extent)


def _transform(shape: tuple[int, ...], eps: float, points: int) -> int:
    """One FINUFFT type-1 transform of ``points`` onto ``shape`` at ``eps``: its complex128 fine grid and what its
    spreading holds besides (the sort order, a subproblem's samples, subgrids over the whole grid: the
    trajectory is not read here; :mod:`mri_recon.operators.engines.finufft_spread`)."""
    from ..operators.engines.finufft import fine_grid_shape  # noqa: PLC0415 - numpy only; keeps this module light
    from ..operators.engines.finufft_spread import spread_bytes  # noqa: PLC0415

    fine = fine_grid_shape(shape, eps)
    return math.prod(fine) * C128 + spread_bytes(fine, eps, points)


def _convolution(points: int, positions: int, shape: tuple[int, ...]) -> int:
    """One Pipe-Menon convolution: FINUFFT's type-1 of ``points`` onto ``shape`` and type-2 back at
    ``positions`` (which sorts them too)."""
    from ..operators.engines.finufft import fine_grid_shape  # noqa: PLC0415

    d, grid = len(shape), math.prod(shape)
    adjoint = points * (d * F64 + C128) + grid * C128 + _transform(shape, PIPE_EPS, points)
    forward = (positions * (d * F64 + C128 + F64 + I64) + 2 * grid * C128
               + math.prod(fine_grid_shape(shape, PIPE_EPS)) * C128)
    return max(adjoint + grid * C128, forward)


def dcf(kind: str, m: int, matrix: tuple[int, ...], extent: tuple[float, ...]) -> int:
    """Bytes beyond the inputs at the peak of computing ``kind`` (``"ramp"`` or ``"pipe"``) density weights."""
    d = len(matrix)
    k = m * d * F64  # the float64 trajectory, held throughout
    if kind == "ramp":
        return k + max(2 * m * d * F64 + m * F64, m * F64 + _blob(m, matrix)) + m * F32
    extent = extent or tuple(n / 2 for n in matrix)
    shape, region = pipe_shape(extent), pipe_region(extent)
    grid = math.prod(shape)
    unique = 3 * m * d * F64 + 3 * m * I64  # np.unique along axis 0: copies, its sort order and inverse
    found = m * d * F64 + 2 * m * I64  # the distinct positions, inverse and counts (at most M of each)
    sampled = 2 * region * d * F64 + m * d * F64  # the reference points (slabs and their concatenation), tree
    iterate = max(_convolution(region, m, shape) + region * d * F64, _convolution(m, m, shape) + 3 * m * F64)
    rest = found + grid * F64 + max(sampled, iterate, _blob(m, matrix) + 3 * m * F64)
    return k + max(unique, rest)


def centre_radius(method: str, matrix: tuple[int, ...]) -> float:
    """The k-space radius (cycles per FOV) of the samples a coil-map estimate by ``method`` transforms."""
    return ESTIMATES[method][0](tuple(matrix))


def _walsh_radius(matrix: tuple[int, ...]) -> float:
    return min(WALSH_RADIUS, min(matrix) / 4)


def _espirit_radius(matrix: tuple[int, ...]) -> float:
    width = min(ESPIRIT_CALIBRATION[len(matrix)], min(matrix))
    return min(width / 2 * math.sqrt(len(matrix)) + 6, min(matrix) / 2)


def _eigen(n_vox: int, c: int) -> int:
    """The batched eigen solver: its chunk's copy, the power iteration's three (C, C) arrays and
    :data:`EIGEN_SCALARS` per matrix, the vectors."""
    chunk = min(n_vox, EIGEN_CHUNK)
    return 4 * chunk * c * c * C64 + chunk * EIGEN_SCALARS + n_vox * (c * C64 + F32)


def _lowres(c: int, m: int, m_in: int, shape: tuple[int, ...], workers: int) -> int:
    """The low-resolution adjoint on the coarse grid ``shape``: the radii of all ``m`` samples (their float32
    copy and its square while they are summed, and the radii kept), the ``m_in`` central samples weighted,
    their FINUFFT transform (complex128 samples and images, per transform in flight its fine grid and what its
    spreading holds)."""
    from ..operators.engines.encoding import NUFFT_EPS  # noqa: PLC0415

    d, grid = len(shape), math.prod(shape)
    return (m * (2 * d + 2) * F32 + m_in * (d * F32 + 3 * F32 + I64) + 2 * c * m_in * C64 + c * m_in * C128
            + m_in * d * F64 + c * grid * (C128 + C64) + min(workers, c) * _transform(shape, NUFFT_EPS, m_in))


def _coarse(method: str, matrix: tuple[int, ...]) -> tuple[int, ...]:
    """The coarse grid of a coil-map estimate's low-resolution images (:func:`mri_recon.prep.lowres.coarse_grid`)."""
    return tuple(min(n, 2 * math.ceil(2 * centre_radius(method, matrix))) for n in matrix)


def walsh(matrix: tuple[int, ...], c: int, m: int, m_in: int, workers: int) -> int:
    """Bytes at the peak of Walsh's maps (final maps included): the low-resolution images and their copy, the
    covariance of every coil pair, then either the array code's (three copies while the covariance is formed,
    four in the box sum, the (N, C, C) matrices and the eigen solver) or, on a GPU (``workers`` 0) for the coils
    of ``maps.cu`` (:data:`~mri_recon.kernels.configs.MAPS_TIERS`), its kernels' (the covariance, then its box
    sums' scratch buffers or the maps)."""
    n_vox = math.prod(matrix)
    shape = _coarse("walsh", matrix)
    pairs = c * (c + 1) // 2
    images = c * n_vox * C64
    cov = pairs * n_vox * C64
    lowres = max(_lowres(c, m, m_in, shape, workers) + c * math.prod(shape) * C64, 3 * images)
    if workers == 0 and c <= MAPS_TIERS[-1]:
        group = max(1, min(pairs, MAPS_SCRATCH_BYTES // (n_vox * C64)))
        scratch = min(2, len(matrix) - 1) * group * n_vox * C64  # freed before the maps are allocated
        return max(lowres, 2 * images + cov + max(scratch, images))
    mats = n_vox * c * c * C64
    return max(lowres, 2 * images + 4 * cov, 2 * images + 2 * cov + mats,
               2 * images + cov + mats + _eigen(n_vox, c), 2 * images + cov + mats + 3 * images)


def espirit(matrix: tuple[int, ...], c: int, m: int, m_in: int, workers: int) -> int:
    """Bytes at the peak of ESPIRiT's maps: the calibration matrix and its Gram matrix, the kernels'
    images on a ``2 kernel`` grid (:data:`ESPIRIT_KEPT` of the C x kernel^D kernels: the number kept depends
    on the data), the
    (C, C, *matrix) operator (three while it is transformed) and the eigen solver."""
    d, n_vox = len(matrix), math.prod(matrix)
    width = min(ESPIRIT_CALIBRATION[d], min(matrix))
    kernel = ESPIRIT_KERNEL[d]
    rows, columns = (width - kernel + 1) ** d, c * kernel ** d
    kept = min(rows, math.ceil(columns * ESPIRIT_KEPT))
    hankel = rows * columns * (C64 + C128) + 3 * columns * columns * C128
    images = 2 * kept * c * (2 * kernel) ** d * C128
    operator = c * c * n_vox * C64
    maps = c * n_vox * C64
    return max(_lowres(c, m, m_in, _coarse("espirit", matrix), workers), hankel, images, 3 * operator,
               operator + _eigen(n_vox, c), operator + n_vox * (c * C64 + F32) + 3 * maps)


def _nlinv_radius(matrix: tuple[int, ...]) -> float:
    return math.inf  # every sample


def nlinv(matrix: tuple[int, ...], c: int, m: int, m_in: int, workers: int) -> int:
    """Bytes at the peak of NLINV's maps (:mod:`mri_recon.prep.nlinv`), counted from its arrays: the PSF on the
    2x grid (FINUFFT's type-1 of the ``m`` samples, its shifted copy and spectrum), the coils' adjoint images
    (complex128 while transformed), then the solve: the unknowns (the image and ``c`` coefficient grids of the
    2x grid) held about ten times (``x``, the step, the right-hand side, CG's four vectors, the operator's
    output and its two halves' temporaries), the sensitivities and coil images on the matrix and the ``c``
    padded 2x grids of the Toeplitz and coefficient transforms (two each)."""
    from ..operators.engines.encoding import NUFFT_EPS  # noqa: PLC0415

    n_vox = math.prod(matrix)
    big = tuple(2 * n for n in matrix)
    q = math.prod(big)
    unknowns = (n_vox + c * q) * C64
    psf = _transform(big, NUFFT_EPS, m) + 3 * q * C64
    adjoint = c * n_vox * (C128 + C64) + min(workers, c) * _transform(tuple(matrix), NUFFT_EPS, m)
    solve = 2 * q * C64 + c * n_vox * C64 + 10 * unknowns + 4 * c * n_vox * C64 + 4 * c * q * C64
    return max(psf, 2 * q * C64 + adjoint, solve)


ESTIMATES = {"walsh": (_walsh_radius, walsh), "espirit": (_espirit_radius, espirit),
             "nlinv": (_nlinv_radius, nlinv)}
"""``(k-space radius, peak bytes)`` of each method that estimates coil maps
(:func:`mri_recon.prep.maps_methods.estimated`, which a test checks against these names)."""


def coil_maps(method: str, matrix: tuple[int, ...], c: int, m: int, m_in: int, workers: int) -> int:
    """Bytes at the peak of estimating coil maps by ``method`` (``"walsh"`` or ``"espirit"``) from ``m``
    samples, ``m_in`` of them within its radius."""
    return ESTIMATES[method][1](tuple(matrix), c, m, m_in, workers)


def preparation_of(scan: Scan, *, prewhiten: bool = False, dcf: str | None = None,
                   estimate_maps: str | None = None, coils: int | None = None,
                   compress_working: int = 0, compress_on_the_way: bool = False) -> Preparation:
    """The sizes of what preparing ``scan`` computes, for the planner: prewhitening with its noise (when
    ``prewhiten`` and it has noise), coil compression to ``coils`` virtual coils (when fewer than the scan's),
    ``dcf`` (``"ramp"`` or ``"pipe"``: weights computed) and the coil maps estimated by ``estimate_maps``; the
    scan's arrays the run keeps without counting them are ``held_bytes``; ``compress_working``: the bytes the
    compression method holds besides (:attr:`Preparation.compress_working`, when it compresses);
    ``compress_on_the_way``: :attr:`Preparation.compress_on_the_way`."""
    unused_maps = scan.coil_maps if estimate_maps is not None else None
    held = sum(a.nbytes for a in (scan.noise, scan.ground_truth, scan.field_map, scan.times, scan.weights,
                                  unused_maps) if a is not None)
    if scan.weights is None and dcf in ("ramp", "pipe"):
        held += scan.n_samples * 4  # the computed weights, besides the reconstruction's scaled copy
    centre = 0
    if estimate_maps is not None:
        radius = centre_radius(estimate_maps, scan.matrix)
        centre = len(samples_within(scan.trajectory, radius))
    whiten = prewhiten and scan.noise is not None
    virtual = int(coils) if coils is not None and coils < scan.n_coils else 0
    return Preparation(noise_samples=int(scan.noise.shape[1]) if whiten else 0,
                       virtual_coils=virtual, compress_working=int(compress_working) if virtual else 0,
                       compress_on_the_way=bool(compress_on_the_way and virtual),
                       compress_samples=0 if not virtual else min(scan.n_samples, COMPRESS_MAX_SAMPLES),
                       dcf=dcf if dcf in ("ramp", "pipe") else None,
                       extent=tuple(float(r) for r in trajectory_extent(scan.trajectory)) if dcf == "pipe" else (),
                       coil_maps=estimate_maps, centre_samples=centre,
                       whitened_maps=whiten and scan.coil_maps is not None,
                       held_bytes=int(held), trajectory=scan.trajectory)
