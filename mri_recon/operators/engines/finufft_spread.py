"""What FINUFFT's type-1 spreading holds besides its fine grid and its output, for the memory planner.

FINUFFT 2.5 (``spreadSorted`` in its ``src/spreadinterp.cpp``) sorts the samples by bins of the fine grid (an
8-byte index per sample), cuts the sorted samples into subproblems of at most :data:`MAX_SUBPROBLEM`, copies
each subproblem's coordinates and strengths, and spreads it onto a subgrid: a complex128 box around its
samples, widened by the kernel width, which is then added into the fine grid. A thread (:mod:`.finufft` runs
every transform on one) keeps one subgrid, a ``std::vector`` resized for each subproblem; when a subproblem
needs more than every one before it, the vector is reallocated and holds the old and the new subgrid at once
for a moment. The bins are sorted along FINUFFT's slowest axis first, which is our first axis (FINUFFT
reverses the axes), so a subproblem covers a slab of that axis and, in general, the whole of the others.

How wide the slabs are depends on where the samples lie: :func:`subproblem_spans` reads it from the
trajectory (one pass over its first axis). When all the samples fit one subproblem, its subgrid is the
whole fine grid plus the kernel's width; without the trajectory the plan assumes that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .finufft import MAX_SUBPROBLEM, kernel_width

C128, F64, I64 = 16, 8, 8
BIN = 4
"""Width in fine-grid cells of FINUFFT's sort bins along its slowest axis (our first): a subproblem's samples
reach at most one bin beyond the ranks that bound it, on each side."""
SIMD_PAD = 4
"""Most cells FINUFFT adds to a subgrid's fastest axis (our last) for its SIMD kernels."""
LOW_DENSITY = 1000
"""FINUFFT gives every sample its own subproblem when the fine grid has more than this many points per
sample."""
HISTOGRAM = 4096
"""Bins of the first axis in :func:`subproblem_spans` (its resolution: 1/4096 of the axis)."""
CHUNK = 1 << 16
"""Samples binned at a time by :func:`subproblem_spans` (bounds what the plan itself allocates for it)."""


@dataclass(frozen=True)
class Spans:
    """Where FINUFFT's subproblems lie along the first axis, as shares of the axis (1: all of it)."""

    one: float = 1.0
    """The widest subproblem's samples."""
    two: float = 0.0
    """The two widest subproblems' samples together (the subgrid of one that outgrows every one before it is
    held with the largest of those for a moment); 0: one subproblem, never two subgrids at once."""


def default_spans(n_samples: int) -> Spans:
    """The spans assumed without the trajectory: one subgrid over the whole axis (exact when every sample fits
    one subproblem), or two whose slabs together cover the axis."""
    return Spans(1.0, 0.0 if n_samples <= MAX_SUBPROBLEM else 1.0)


def _histogram(trajectory: Any, n0: int) -> np.ndarray:
    """Samples per :data:`HISTOGRAM` bin of ``u = k_0 / N_0 + 1/2`` folded into [0, 1) (FINUFFT's periodic
    position along the first axis, whatever the grid), read :data:`CHUNK` samples at a time."""
    counts = np.zeros(HISTOGRAM, dtype=np.int64)
    for start in range(0, len(trajectory), CHUNK):
        u = np.asarray(trajectory[start:start + CHUNK, 0], dtype=np.float64) / n0
        u += 0.5
        u -= np.floor(u)
        u *= HISTOGRAM
        counts += np.bincount(np.minimum(u.astype(np.intp), HISTOGRAM - 1), minlength=HISTOGRAM)
    return counts


def subproblem_spans(trajectory: Any, n0: int) -> Spans:
    """The :class:`Spans` of FINUFFT's subproblems for the samples of ``trajectory`` (``(M, D)`` NumPy, cycles
    per FOV) on a grid of ``n0`` voxels along the first axis, at the histogram's resolution.

    The samples sorted by bin are in the order of their first coordinate to within a bin, so the subproblem
    of sorted ranks ``[a, b]`` spans at most from the histogram bin of the a-th smallest first coordinate to
    that of the b-th (:func:`spread_bytes` adds a sort bin on each side). Which subproblem's subgrid is the
    largest also depends on the other axes, which are not read: any two of them may be held at once, so
    ``two`` is the sum of the two widest."""
    m = int(len(trajectory))
    if m <= MAX_SUBPROBLEM:
        return default_spans(m)
    total = np.cumsum(_histogram(trajectory, n0))
    count = -(-m // MAX_SUBPROBLEM)
    ends = (m * np.arange(count + 1) + count - 1) // count  # FINUFFT's breakpoints
    first = np.searchsorted(total, ends[:-1], side="right")
    last = np.searchsorted(total, ends[1:] - 1, side="right")
    spans = np.sort(last + 1 - first) / HISTOGRAM
    return Spans(float(spans[-1]), float(spans[-1] + spans[-2]))


def spread_bytes(fine: tuple[int, ...], eps: float, n_samples: int, spans: Spans | None = None) -> int:
    """Bytes one type-1 transform of ``n_samples`` onto the ``fine`` grid at tolerance ``eps`` holds beyond the
    fine grid and its output while it spreads: the sort order, a subproblem's copied samples and its subgrid
    (two at the moment one outgrows the other), sized from ``spans`` (:func:`default_spans` when None)."""
    d, m = len(fine), int(n_samples)
    ns = kernel_width(eps, d)
    held = m * I64 + min(m, MAX_SUBPROBLEM) * (d + 2) * F64  # sort order; coordinates and strengths copied
    if m * LOW_DENSITY < math.prod(fine):  # a subgrid per sample
        return held + 2 * C128 * (ns + 2 * BIN + 1 + SIMD_PAD) ** d
    spans = default_spans(m) if spans is None else spans
    sizes = [n + ns for n in fine[1:]]
    sizes[-1] += SIMD_PAD
    margin = 2 * BIN + 1 + ns  # a bin beyond the ranks on each side, rounding, the kernel's width
    one = min(fine[0] + ns, math.ceil(spans.one * fine[0]) + margin)
    two = min(2 * (fine[0] + ns), math.ceil(spans.two * fine[0]) + 2 * margin) if spans.two else 0
    return held + C128 * math.prod(sizes) * max(one, two)
