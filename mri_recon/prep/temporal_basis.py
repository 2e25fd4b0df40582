"""A temporal basis estimated from the data: the subspace of a time series (``temporal="subspace"`` without a
``temporal_basis`` file).

The basis is the K leading left singular vectors of the Casorati matrix (one row per frame) of the frames'
low-resolution coil images: for each frame, ``F^H`` of its density-compensated, windowed samples within
:func:`~.lowres.default_radius` of the k-space centre, on the coarse grid of that radius (:mod:`.lowres`, the
coil maps' first step). Why these images:

- Every frame samples its own k-space positions (a golden-angle radial series never repeats a spoke), so the
  samples themselves have no common rows to decompose; the low-resolution images put every frame on one grid.
- The centre is where each frame's samples are densest (radial and spiral trajectories sample it many times
  over), so its images carry the frame's contrast and motion with little of the aliasing that the frame's
  undersampling leaves at full resolution; aliasing changes from frame to frame and would otherwise take
  singular vectors of its own.
- The coil images need no coil maps (the maps may be estimated later or be those of another resolution), and
  the coils' phases do not mix motion into the time courses.

The decomposition is that of the ``T x T`` Gram matrix in float64 (:func:`~mri_recon.solvers.lowrank.gram64`;
T is small). Each frame's images come from :mod:`.lowres` divided by a power of two of their own; they are put
back on one scale (the largest frame's) before the decomposition, exactly, so the basis does not depend on the
data's scale. Each vector's phase is fixed (its largest entry real positive), so the basis is the same on every
device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays.backend import Device, get_xp, to_host
from ..solvers.lowrank import gram64
from .lowres import _lowres_scaled, coarse_grid, default_radius


@dataclass(frozen=True)
class EstimatedBasis:
    """A basis estimated from the k-space centre and what it rests on."""

    basis: np.ndarray
    """complex128 ``(T, K)``, orthonormal columns, the leading singular vector first."""
    radius: float
    """The k-space radius of the low-resolution images, cycles per FOV."""
    energy: float
    """The fraction of the low-resolution images' energy (squared Frobenius norm) in the K basis functions."""

    def source(self) -> str:
        """How it was made, as results record it."""
        return f"estimated (k-space centre, radius {self.radius:g})"


def estimate_basis(kspaces: Sequence[Any], trajectories: Sequence[Any], matrix: Sequence[int], rank: int, *,
                   radius: float | None = None, device: str | int | Device | None = "auto") -> EstimatedBasis:
    """The ``rank`` leading temporal basis functions of frames with k-space ``kspaces[t]`` (``(C, M_t)``) at
    ``trajectories[t]`` (``(M_t, D)``, cycles per FOV) for images of ``matrix`` (see the module docstring)."""
    radius = default_radius(matrix) if radius is None else float(radius)
    grid = coarse_grid(matrix, radius)
    scaled = [_lowres_scaled(k, t, grid, radius, 0.0, None, device) for k, t in zip(kspaces, trajectories)]
    top = max(scale for _, scale in scaled)
    xp = get_xp(scaled[0][0])
    rows = xp.stack([(images * np.float32(scale / top)).reshape(-1) for images, scale in scaled])
    values, vectors = np.linalg.eigh(to_host(gram64(rows)))  # ascending; T x T on the host
    leading = vectors[:, ::-1][:, :rank]
    peaks = leading[np.argmax(np.abs(leading), axis=0), np.arange(rank)]
    total = float(np.sum(np.maximum(values, 0.0)))
    energy = float(np.sum(np.maximum(values[::-1][:rank], 0.0)) / total) if total > 0 else 1.0
    phases = np.where(np.abs(peaks) > 0, np.conj(peaks) / np.maximum(np.abs(peaks), np.finfo(float).tiny), 1.0)
    return EstimatedBasis(leading * phases[None, :], radius, energy)
