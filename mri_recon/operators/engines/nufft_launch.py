"""How the GPU NUFFT's kernels are launched and compiled: block sizes, shared-memory tiles, coils per launch
and the ``-D`` defines of every module a default plan uses (``kernels/nufft.cu``). Plain Python, no CuPy: the
kernel registry and the tests list the configurations on machines without a GPU."""

from __future__ import annotations

import math

from .nufft_params import kernel_width

KERNEL_FILE = "nufft.cu"
THREADS = 256
"""Threads per block of every NUFFT kernel (the launch bounds)."""
SCAN_THREADS = 1024
"""Threads of the one block that scans the bin counts (``NUFFT_SCAN_THREADS`` in ``kernels/nufft.cu``)."""
SUBPROBLEM = 256
"""Most samples one spreading block takes (a crowded bin is split into several subproblems)."""
COIL_STEPS = (1, 2, 4, 8)
"""Coils per spread / interpolation launch that are compiled (a launch may leave some unused)."""
SHARED_LIMIT = {2: 64 * 1024, 3: 28 * 1024}
"""Most dynamic shared memory of a spreading block by default, per dimension (it sets the coils per launch,
:func:`spread_coils`). 2D: four coils per block of four warps (55 KB at w = 7), four blocks per multiprocessor;
3D: one coil's 15^3 tile per one-warp block, eight blocks per multiprocessor, faster than four warps per block.
The spreading waits on shared-memory latency more than on its bandwidth, so blocks per multiprocessor count: in
2D four 4-coil blocks are faster than 2-coil launches and within the noise of two 8-coil blocks (110 KB each;
docs/benchmarks.md, "Public operators against SigPy")."""
SPREAD_METHODS = ("warp", "atomic")
"""How a spreading block adds samples to its shared tile: "warp" (a private tile per warp, lanes over the
stencil, no atomics; the default) or "atomic" (one tile, a thread per sample, shared atomicAdd: cufinufft)."""
DEFAULT_WARPS = {2: 4, 3: 1}
"""Warps per spreading block of the "warp" method (each holds its own tile)."""
INTERP_CACHE_BYTES = 16 * 1024 * 1024
"""Most fine-grid bytes one interpolation launch reads: the coils of a launch share each sample's weights, but
their grids compete for the L2 cache (tens of MB): 3D 128^3 (128 MB grids) is fastest with one coil per
launch, 2D 256^2 (2 MB grids) takes all eight (docs/benchmarks.md, "Public operators against SigPy")."""
GRID_MEMORY_SHARE = 0.35
"""Share of the free device memory the fine grids of one coil group may take."""
DEFAULT_BINS = {"warp": {2: (4, 32, 1), 3: (8, 8, 8)}, "atomic": {2: (32, 32, 1), 3: (16, 16, 8)}}
"""Bin (and tile) sizes per method and dimension, in fine-grid points. 2D "warp": tile rows of 32 + w points, so
that the stencil cells the 32 lanes update at once (consecutive cells of the stencil, w to a stencil row) fall in
32 distinct banks of shared memory; four rows keep four coils' tiles of four warps within :data:`SHARED_LIMIT`.
Faster than 16 x 16 bins, whose rows of 23 points conflict two-way (docs/benchmarks.md, "Public operators
against SigPy")."""
DEFAULT_EPS = 1e-6
COMPILED_EPS = (1e-5, 1e-6)
"""Tolerances whose kernel widths :func:`compile_configurations` lists (others compile on first use)."""


def tile_points(bins: tuple[int, int, int], width: int, dim: int) -> int:
    """Points of a spreading tile: bin + w per axis (a sample touches floor(w/2) before its bin and
    ceil(w/2) - 1 after it)."""
    return math.prod(b + width for b in bins[:dim])


def spread_bytes(bins: tuple[int, int, int], width: int, dim: int, coils: int, real: bool,
                 warps: int = 0) -> int:
    """Dynamic shared memory of one spreading block: one tile ("atomic", ``warps = 0``) or one tile per
    warp plus each warp's 3 w weights ("warp")."""
    tile = tile_points(bins, width, dim) * coils * (1 if real else 2) * 4
    return tile if warps == 0 else warps * (tile + 3 * width * 4)


def spread_coils(bins: tuple[int, int, int], width: int, dim: int, coils: int, real: bool,
                 limit: int | None = None, warps: int = 0) -> int:
    """The largest step of :data:`COIL_STEPS` whose tiles fit ``limit``, no larger than needed for
    ``coils``; 1 if even one coil does not fit (the launch then takes the one coil's tiles, and fails only
    where they exceed the device). ``limit``: default :data:`SHARED_LIMIT` of ``dim``."""
    limit = SHARED_LIMIT[dim] if limit is None else limit
    fits = [s for s in COIL_STEPS if spread_bytes(bins, width, dim, s, real, warps) <= limit] or [1]
    enough = [s for s in fits if s >= coils]
    return enough[0] if enough else fits[-1]


def launch_coils(coils: int, grid_bytes: int = 0) -> int:
    """The smallest compiled coil step >= ``coils`` (capped at 8) whose grids of ``grid_bytes`` each fit
    :data:`INTERP_CACHE_BYTES`; at least 1."""
    step = next((s for s in COIL_STEPS if s >= coils), COIL_STEPS[-1])
    while step > 1 and step * grid_bytes > INTERP_CACHE_BYTES:
        step //= 2
    return step


def nufft_defines(dim: int, width: int, coils: int, bins: tuple[int, int, int], real: bool) -> dict[str, int]:
    return {"NUFFT_DIM": dim, "NUFFT_W": width, "NUFFT_COILS": coils, "NUFFT_REAL": int(real),
            "NUFFT_BIN0": bins[0], "NUFFT_BIN1": bins[1], "NUFFT_BIN2": bins[2] if dim == 3 else 1,
            "NUFFT_THREADS": THREADS}


def compile_configurations() -> list[tuple[str, dict[str, int]]]:
    """Every ``(file, defines)`` the default plans launch: both spreading methods, 2D and 3D, the widths of
    :data:`COMPILED_EPS` (:func:`nufft_configurations` of each)."""
    return [config for method in SPREAD_METHODS for dim in (2, 3) for eps in COMPILED_EPS
            for config in nufft_configurations(dim, eps, method)]


def nufft_configurations(dim: int, eps: float = DEFAULT_EPS, spread: str = "warp") -> list[tuple[str, dict[str, int]]]:
    """The modules a default plan of ``dim`` dimensions at ``eps`` launches: every coil step of complex data
    (spreading, interpolation, the sort and the deconvolution live in each) and the real PSF data."""
    bins, width = DEFAULT_BINS[spread][dim], kernel_width(eps)
    return [(KERNEL_FILE, nufft_defines(dim, width, coils, bins, False)) for coils in COIL_STEPS] + [
        (KERNEL_FILE, nufft_defines(dim, width, 1, bins, True))]
