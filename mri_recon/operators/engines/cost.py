"""Predicted GPU time of the two GPU engines, for ``method="auto"``: exact sums or the NUFFT.

A reconstruction computes F^H d of every coil once and the Toeplitz PSF once, so both are counted:

- exact (``kernels/fhd.cu``): ``N M g_eff / R_EXACT`` per group of up to 8 coils (one phase evaluation
  serves the group, so a group of g coils costs ``1 + EXACT_COIL_SHARE (g - 1)`` one-coil sums), and the PSF
  ``(2^D N) M / R_PSF`` on the 2x grid.
- NUFFT (``kernels/nufft.cu``): a plan per trajectory (sorting, ``NUFFT_SETUP_S + NUFFT_SETUP_PER_SAMPLE M``),
  then per coil the spreading ``NUFFT_SPREAD_S M w^D`` and the FFT of the fine grid
  ``NUFFT_FFT_S (2^D N)``; the PSF is one more plan and one real transform on the 2x grid.

The constants are a non-negative least-squares fit (relative errors) to 32 problems timed on an NVIDIA
H200 on 2026-11-30 (``scripts/bench_cost.py``: 2D 32^2..256^2 radial and 3D 16^3..64^3 kooshball, full and
1/4 sampling, 1 and 8 coils; table in ``docs/benchmarks.md``). On another GPU the absolute times differ,
but the crossover moves little, since both engines are bound by the same multiprocessors.
"""

from __future__ import annotations

import math

R_EXACT = 5.33e12
"""Voxel-sample pairs per second of the exact F^H d term, one coil, as fitted over whole calls (the kernel
alone measures 3.1e12 on large problems; the fit shares the cost with the PSF and fixed terms)."""
EXACT_COIL_SHARE = 0.813
"""Extra cost of each further coil of a group relative to the first (8 coils: 6.28e12 triples/s)."""
R_PSF = 5.45e12
"""Voxel-sample pairs per second of the exact PSF kernel on the 2x grid (real weights, mirror pairs)."""
EXACT_LAUNCH_S = 5.57e-4
"""Fixed cost of one exact call (host-side layout, constant uploads, launches, the Python around them)."""
MAX_GROUP = 8
"""Coils per exact launch."""

NUFFT_SETUP_S = 2.38e-3
"""Fixed cost of a NUFFT plan (allocations, the sort's one host synchronization)."""
NUFFT_SETUP_PER_SAMPLE = 0.0
"""Sorting cost per sample (fitted as 0: the sort is a few launches whose cost is the fixed part)."""
NUFFT_SPREAD_S = 1.29e-12
"""Spreading (or interpolation) cost per sample, coil and kernel point."""
NUFFT_FFT_S = 1.84e-10
"""FFT and deconvolution cost per fine-grid point and coil (sigma = 2)."""
NUFFT_WIDTH = 7
"""Kernel width at the GPU NUFFT's tolerance (1e-6)."""


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


def fastest_gpu_engine(matrix: tuple[int, ...], samples: int, coils: int, psf: bool = True) -> str:
    """``"gpu"`` (exact sums) or ``"gpu-nufft"``: the engine predicted faster for this problem."""
    matrix = tuple(int(v) for v in matrix)
    if exact_seconds(matrix, samples, coils, psf) <= nufft_seconds(matrix, samples, coils, psf):
        return "gpu"
    return "gpu-nufft"
