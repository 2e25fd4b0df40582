"""Every throughput figure of the engines and the normal operators, in one place: the time models that
``method="auto"``, the memory planner and the off-resonance set-up read (each engine's ``seconds``).

GPU: exact sums or the NUFFT, for ``method="auto"``.

A reconstruction computes F^H d of every coil once and the Toeplitz PSF once, so both are counted:

- exact (``kernels/fhd.cu``): ``N M g_eff / R_EXACT`` per group of up to 8 coils (one phase evaluation
  serves the group, so a group of g coils costs ``1 + EXACT_COIL_SHARE (g - 1)`` one-coil sums), and the PSF
  ``(2^D N) M / R_PSF`` on the 2x grid.
- NUFFT (``kernels/nufft.cu``): a plan per trajectory (sorting, ``NUFFT_SETUP_S + NUFFT_SETUP_PER_SAMPLE M``),
  then per coil the spreading ``NUFFT_SPREAD_S M w^D`` and the FFT of the fine grid
  ``NUFFT_FFT_S (2^D N)``; the PSF is one more plan and one real transform on the 2x grid.

The constants are a non-negative least-squares fit (relative errors) to the problems of
``scripts/bench_cost.py`` (2D 32^2..256^2 radial and 3D 16^3..64^3 kooshball, full and 1/4 sampling, 1 and 8
coils) timed on one GPU; the times, the GPU and how often the model picks the faster engine are in
``docs/benchmarks.md`` ("``method="auto"`` on the GPU"). On another GPU the absolute times differ, but the
crossover moves little, since both engines are bound by the same multiprocessors.
"""

from __future__ import annotations

import math

R_EXACT = 7.04e12
"""Voxel-sample pairs per second of the exact F^H d term, one coil, as fitted over whole calls (above the
kernel's own rate, "Exact F^H d kernels" in docs/benchmarks.md: the fit shares the cost with the PSF and fixed
terms)."""
EXACT_COIL_SHARE = 1.22
"""Extra cost of each further coil of a group relative to the first, as fitted (the fit's one-coil rate is
high, so the share of a further coil comes out above 1; a group of 8 runs at ``8 R_EXACT / (1 + 7 share)``
coil-voxel-sample triples per second)."""
R_PSF = 5.16e12
"""Voxel-sample pairs per second of the exact PSF kernel on the 2x grid (real weights, mirror pairs)."""
EXACT_LAUNCH_S = 3.36e-4
"""Fixed cost of one exact call (host-side layout, constant uploads, launches, the Python around them)."""
MAX_GROUP = 8
"""Coils per exact launch."""

NUFFT_SETUP_S = 5.41e-4
"""Fixed cost of a NUFFT plan (allocations, the sort's one host synchronization)."""
NUFFT_SETUP_PER_SAMPLE = 0.0
"""Sorting cost per sample (fitted as 0: the sort is a few launches whose cost is the fixed part)."""
NUFFT_SPREAD_S = 1.90e-12
"""Spreading (or interpolation) cost per sample, coil and kernel point."""
NUFFT_FFT_S = 7.24e-11
"""FFT and deconvolution cost per fine-grid point and coil (sigma = 2)."""
NUFFT_WIDTH = 7
"""Kernel width at the GPU NUFFT's tolerance (1e-6)."""


CPU_SAMPLES_PER_S = 5.0e6
"""FINUFFT coil-samples per second (F^H d and PSF), two cores; the planner's estimate of the CPU engines."""
FFT_S = {"gpu": 1.0e-11, "cpu": 1.5e-9}
"""Seconds per (coil x 2x-grid voxel x log2 size) of one CG iteration of the Toeplitz normal operator."""

OFFRES_EXACT_PAIRS_PER_S = {"gpu": 3.8e12, "cpu": 1e8}
"""Coil-voxel-sample triples per second of one exact off-resonance transform (F or F^H; ``kernels/fhd.cu`` and
``forward.cu`` with the field map, or the float64 sum). CPU: one 8-coil transform of the float64 sum at 128^2
(docs/offres.md); GPU: the right-hand side and 30 CG iterations of an 8-coil 256^2 spiral, F^H on the tensor
cores (scripts/bench_offres.py; docs/benchmarks.md, "Off-resonance correction"). One rate for every coil count:
with 1 or 2 coils the transforms run slower per triple, so exact correction is predicted too fast there, but it
stays the slower choice by far (docs/offres.md)."""
SEGMENT_FFT_POINTS_PER_S = {"gpu": 1.4e11, "cpu": 1.2e8}
"""2x-grid points per second of the time-segmented normal operator's work per coil, counted as
``2 L + L^2 / 4`` grids (FFTs and mixing). CPU: CG iterations at 128^2, 8 coils, L = 10; GPU: the fused
operator (``kernels/segments.cu``) at 256^2, 8 coils, L = 10 (scripts/profile_segments.py); both in
docs/offres.md."""
SEGMENT_PSF_POINTS_PER_S = {"gpu": 4.1e9, "cpu": 1e7}
"""Samples plus 2x-grid points per second of one segment PSF (a batched F^H of the plain engine on the 2x
grid, its spectrum included). CPU: 55 segment PSFs on 256^2; GPU: 55 segment PSFs with their spectra on 512^2
(GPU NUFFT); both in docs/offres.md."""


def fft_seconds(kind: str, matrix: tuple[int, ...], coils: int, psf: bool = True) -> float:
    """Predicted seconds of F^H d of ``coils`` coils by FFT on the image grid (and the PSF on the 2x grid), at
    the rate :data:`FFT_S` of the Toeplitz operator's FFTs: far below any sum over the samples."""
    n = math.prod(matrix)
    grid = coils * n * max(1.0, math.log2(n))
    point_spread = 2 ** len(matrix) * n * max(1.0, math.log2(2 ** len(matrix) * n)) if psf else 0.0
    return FFT_S[kind] * (grid + point_spread)


def exact_seconds(matrix: tuple[int, ...], samples: int, coils: int, psf: bool = True) -> float:
    """Predicted seconds of F^H d of ``coils`` coils (and the PSF) by exact summation."""
    n = math.prod(matrix)
    groups = -(-coils // MAX_GROUP)
    per_group = coils / groups
    fhd = groups * (n * samples * (1 + EXACT_COIL_SHARE * (per_group - 1)) / R_EXACT + EXACT_LAUNCH_S)
    point_spread = (2 ** len(matrix) * n * samples / R_PSF + EXACT_LAUNCH_S) if psf else 0.0
    return fhd + point_spread


def nufft_seconds(matrix: tuple[int, ...], samples: int, coils: int, psf: bool = True) -> float:
    """Predicted seconds of F^H d of ``coils`` coils (and the PSF) by the GPU NUFFT, plans included."""
    dim = len(matrix)
    n = math.prod(matrix)
    setup = NUFFT_SETUP_S + NUFFT_SETUP_PER_SAMPLE * samples
    spread = NUFFT_SPREAD_S * samples * NUFFT_WIDTH ** dim

    def transform(grid_points: int, count: int) -> float:
        return count * (spread + NUFFT_FFT_S * grid_points)

    fhd = setup + transform(2 ** dim * n, coils)
    point_spread = (setup + transform(4 ** dim * n, 1) / 2) if psf else 0.0  # real weights: half the spread
    return fhd + point_spread


def cpu_seconds(samples: int, coils: int, psf: bool = True) -> float:
    """Predicted seconds of F^H d of ``coils`` coils (and the PSF) on the CPU (FINUFFT's rate)."""
    return (coils + (1 if psf else 0)) * samples / CPU_SAMPLES_PER_S


def iteration_seconds(kind: str, matrix: tuple[int, ...], coils: int, iterations: int) -> float:
    """Predicted seconds of ``iterations`` CG iterations of the Toeplitz normal operator on ``kind``
    (``"cpu"`` or ``"gpu"``): 2x-grid FFTs of every coil."""
    grid2 = math.prod(matrix) * 2 ** len(matrix)
    return iterations * coils * grid2 * max(1.0, math.log2(grid2)) * FFT_S[kind]
