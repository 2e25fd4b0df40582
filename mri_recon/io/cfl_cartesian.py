"""BART's Cartesian k-space (``bart pics ksp sens``): ``(X, Y, Z, COILS, ...)`` on the image's own frequency
grid, zeros where nothing was sampled, as :class:`~mri_recon.scan.Scan` objects of the Cartesian engines.

The sampled frequencies are those where any coil holds a non-zero value (BART's own rule: ``pics`` builds
its pattern from the non-zero samples); each becomes one sample at ``k = index - N // 2`` cycles per field
of view (BART's centred FFT, voxel ``N // 2`` at ``r = 0``, as for its NUFFT), all coils' values at it in
``Scan.kspace``. The matrix is the grid's ``(X, Y)`` (``(X, Y, Z)`` when ``Z > 1``); sensitivities must
match it, and without them the Cartesian preparation estimates ESPIRiT maps from the fully sampled centre
(:mod:`mri_recon.prep.cartesian_maps`). BART's FFT is unitary: the same data give an image
``sqrt(prod(matrix))`` times smaller than BART's and BART's ``pics -r`` lambda is ours times
``M / prod(matrix)`` (``M`` the samples, maps of peak 1; docs/cartesian.md works an example).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..checks.validation import validate_matrix
from ..errors import SchemaError
from ..scan import Scan
from .cfl import COIL_DIM, DIMS, STACK_DIMS, trimmed
from .stack import DIMENSIONS, select


def cartesian_scans(source: str, ksp: np.ndarray, maps: np.ndarray | None, matrix: Sequence[int] | None,
                    **chosen: int | None) -> list[tuple[dict, Scan]]:
    """Every image of the Cartesian BART k-space ``ksp`` (16 dimensions) as ``(key, Scan)``; ``maps``:
    sensitivities already read and checked against the grid (``(C, *matrix)``) or None; ``matrix``: a size
    the user gave, which must be the grid's."""
    dims = ksp.shape
    grid = tuple(int(n) for n in dims[:3])
    shape = validate_matrix(list(grid[:2]) if grid[2] == 1 else list(grid), source)
    if matrix is not None and tuple(trimmed(matrix)) != tuple(trimmed(grid)):
        raise SchemaError(f"{source}: Cartesian BART k-space is the grid {list(trimmed(grid))}; matrix "
                          f"{list(matrix)} differs (a Cartesian image has the size of its k-space grid)")
    images = _images(dims)
    keep = select([key for key, _ in images], source, **chosen)
    return [(key, _scan(source, np.asarray(ksp[index]), shape, maps, key)) for key, index in (images[i] for i in keep)]


def _images(dims: Sequence[int]) -> list[tuple[dict, tuple]]:
    """``(key, index)`` of every image: one per combination of the stack dimensions."""
    images = []
    for flat in np.ndindex(*(dims[d] for d in STACK_DIMS.values())):
        at = dict(zip(STACK_DIMS.values(), flat))
        key = {name: int(at.get(STACK_DIMS[name], 0)) for name in DIMENSIONS}
        index = tuple(at.get(d, slice(None) if d in (0, 1, 2, COIL_DIM) else 0) for d in range(DIMS))
        images.append((key, index))
    return sorted(images, key=lambda item: tuple(item[0][name] for name in DIMENSIONS))


def _scan(source: str, grid: np.ndarray, shape: tuple[int, ...], maps: np.ndarray | None, key: dict) -> Scan:
    """One image's samples: ``grid`` ``(X, Y, Z, C)`` at its non-zero frequencies."""
    coils = grid.shape[3]
    grid = grid.reshape(*shape, coils)
    sampled = np.any(grid != 0, axis=-1)
    if not sampled.any():
        raise SchemaError(f"{source}: Cartesian BART k-space holds no non-zero sample")
    where = np.nonzero(sampled)
    centre = np.array([n // 2 for n in shape])
    trajectory = (np.stack(where, axis=1) - centre).astype(np.float32)
    data = grid[where].T  # (C, M)
    attrs = {"source_format": "cfl", "sampling": "cartesian", "traj_units": "cartesian (grid frequencies)",
             "sampled_fraction": float(sampled.mean()), **key}
    return Scan(kspace=np.ascontiguousarray(data, dtype=np.complex64), trajectory=trajectory, matrix=shape,
                coil_maps=maps, attrs=attrs, source=source)
