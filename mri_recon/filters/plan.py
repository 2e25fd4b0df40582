"""GPU launch plans of the post-filter: strategies, tiles and launch geometry (pure Python, no GPU needed).

Every kernel of ``kernels/convolution.cu`` sees a C-ordered volume ``(nz, ny, nx)``; 1-D and 2-D images are
volumes with extent 1 along the missing axes. :func:`plan` turns an image shape and a filter into a list of
:class:`Launch`; :mod:`.gpu` compiles, caches and runs them. Nothing here touches a GPU, which lets the
geometry be tested anywhere.

Strategies (``strategy=``):

``"A"``
    The book's strategy A: the block is the input tile (``IN = OUT + 2r`` per axis), one element loaded
    per thread, the outer rim of threads deactivated for the computation. 2-D tiles are the book's
    32 x 32 threads (1-D: 256); 3-D tiles are the block of at most 1024 threads with the most outputs.
    Beyond radius 4 in 3-D no such block exists (an 11^3 tile needs 1331 threads): :class:`FilterError`.
``"B"``
    The book's strategy B: the block is the output tile (32 x 16; 1-D 256; 3-D 32 x 4 x 4); halo cells
    are read from global memory through the caches.
``"register"``
    Beyond the book: the input tile with its halo is loaded cooperatively (coalesced, conflict-free) and
    each thread computes 8 consecutive outputs along the slowest axis (fewer for large 3-D filters, whose
    tile must fit :data:`SHARED_LIMIT_BYTES`), reusing every value it reads from shared memory for up to
    ``2r + 1`` outputs. A 2-D image runs as the volume ``(ny, 1, nx)`` so that a
    thread's outputs run down a column.
``"stream"``
    Beyond the book, for 2-D filters of radius at most :data:`STREAM_MAX_RADIUS` (x radius at most the
    elements per 16-byte vector: 4 float32, 2 complex64) on images whose rows are whole 16-byte vectors:
    each thread owns one vector of a row and walks :data:`STREAM_ROWS` rows down the image, keeping the
    ``2r + 1`` input rows it needs in registers; the x halo comes from the neighbouring lanes by warp
    shuffles. Every element is loaded once per block as part of one 16-byte load, with no shared memory and
    no barrier.
``"separable"``
    For filters that are an outer product of 1-D taps (the Gaussian of :func:`filters.smooth`): one tiled
    register-blocked pass per axis (x, then y, then z), each a 1-D correlation; 2 or 3 launches through
    one scratch array. The passes take radii up to :data:`SEPARABLE_MAX_RADIUS`.
``"auto"``
    :func:`choose_strategy`.

Radius limits: the direct kernels (A, B, register, stream) take radii up to :data:`MAX_RADIUS` per axis;
a separable filter with a larger radius runs as separable passes, up to :data:`SEPARABLE_MAX_RADIUS`.
Anything larger is refused with a :class:`FilterError` that names the limit (the CPU path takes any
radius). Nothing is ever cut silently.

complex64 images are processed in one pass by kernels compiled with ``COMPLEX=1``: elements are loaded as
``float2`` (real, imaginary) and every tap updates both parts, i.e. the real and imaginary planes are
filtered together from a single read of the data.

The limits and the :class:`~.limits.Launch` record live in :mod:`.limits`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

import numpy as np

from ..errors import FilterError, ResourceError
from ..kernels import CONSTANT_BYTES
from .limits import (
    _B_TILES,
    _REGISTER_3D,
    _VARIANT,
    FILENAME,
    KERNEL_NAMES,
    MAX_GRID_X,
    MAX_GRID_YZ,
    MAX_RADIUS,
    MAX_THREADS,
    REGISTER_OUTPUTS,
    SEPARABLE_MAX_RADIUS,
    SEPARABLE_MIN_VOXELS,
    SHARED_LIMIT_BYTES,
    STATIC_SHARED_BYTES,
    STRATEGIES,
    STREAM_AUTO_RADIUS,
    STREAM_MAX_RADIUS,
    STREAM_PREFETCH,
    STREAM_ROWS,
    STREAM_WARPS,
    VECTOR_BYTES,
    Launch,
    vector_elements,
)
from .taps import outer_product

__all__ = ["FILENAME", "KERNEL_NAMES", "Launch", "MAX_GRID_X", "MAX_GRID_YZ", "MAX_RADIUS", "MAX_THREADS",
           "REGISTER_OUTPUTS", "SEPARABLE_MAX_RADIUS", "SEPARABLE_MIN_VOXELS", "SHARED_LIMIT_BYTES",
           "STATIC_SHARED_BYTES", "STRATEGIES", "STREAM_AUTO_RADIUS", "STREAM_MAX_RADIUS", "STREAM_PREFETCH",
           "STREAM_ROWS", "STREAM_WARPS", "VECTOR_BYTES", "vector_elements", "check_direct_radius",
           "check_shared_memory", "choose_strategy", "plan", "stream_problem", "tile_a", "tile_register"]

def choose_strategy(shape: tuple[int, ...], radii: tuple[int, ...], separable: bool,
                    streamable: bool = False) -> str:
    """The strategy expected to be fastest: ``"separable"``, ``"stream"`` or ``"register"``.

    A separable filter with a radius above :data:`MAX_RADIUS` can only run as separable passes. Otherwise
    separable passes cost one extra read and write of the image per axis but only ``2r + 1`` taps per pass
    instead of ``(2r+1)^d``; they win once the direct kernel stops being memory-bound: from radius 4 in
    2-D and radius 2 in 3-D, for images of at least 2^18 voxels (below that, launches dominate). Otherwise
    2-D filters up to radius :data:`STREAM_AUTO_RADIUS` go to the streaming kernel when a float32 image suits
    it (``streamable``: real data, :func:`stream_problem` found nothing, 16-byte aligned arrays), everything
    else to the register-blocked kernel.
    """
    reach = max(radii)
    if separable and reach > MAX_RADIUS:
        return "separable"
    if separable and math.prod(shape) >= SEPARABLE_MIN_VOXELS:
        if (len(shape) == 3 and reach >= 2) or (len(shape) <= 2 and reach >= 4):
            return "separable"
    if streamable and reach <= STREAM_AUTO_RADIUS:
        return "stream"
    return "register"


def stream_problem(volume: tuple[int, int, int], radii: tuple[int, int, int], complex_: bool) -> str | None:
    """Why the streaming kernel cannot filter ``volume`` (nz, ny, nx) with ``radii`` (z, y, x); None if it can."""
    rz, ry, rx = radii
    per_vector = vector_elements(complex_)
    if rz:
        return "it filters 2-D planes only (the filter's z radius must be 0)"
    if max(ry, rx) > STREAM_MAX_RADIUS:
        return f"its radius is at most {STREAM_MAX_RADIUS}, the filter's is {max(ry, rx)}"
    if rx > per_vector:
        return f"its x radius is at most {per_vector} for this dtype, the filter's is {rx}"
    if volume[2] % per_vector:
        return f"rows must hold a multiple of {per_vector} elements (16 bytes), this image's hold {volume[2]}"
    if volume[0] > MAX_GRID_YZ:
        return f"at most {MAX_GRID_YZ} planes, this volume has {volume[0]}"
    return None


@cache
def tile_a(radii: tuple[int, int, int], rank: int) -> tuple[int, int, int]:
    """Strategy A block (= input tile) ``(IN_X, IN_Y, IN_Z)`` for ``radii = (rz, ry, rx)``.

    Rank 1: 256 x 1 x 1. Rank 2: the book's 32 x 32. Rank 3: the block of at most 1024 threads with
    ``IN_X <= 32`` that has the most outputs (ties: wider in x). Raises :class:`FilterError` when no block
    of 1024 threads holds a ``(2r+1)``-wide tile.
    """
    rz, ry, rx = radii
    if rank == 1:
        return 256, 1, 1
    if rank == 2:
        return 32, 32, 1
    best = None
    for in_x in range(2 * rx + 1, 33):
        for in_y in range(2 * ry + 1, MAX_THREADS // in_x + 1):
            in_z = MAX_THREADS // (in_x * in_y)
            if in_z < 2 * rz + 1:
                break
            key = ((in_x - 2 * rx) * (in_y - 2 * ry) * (in_z - 2 * rz), in_x, in_y)
            if best is None or key > best[0]:
                best = (key, (in_x, in_y, in_z))
    if best is None:
        need = (2 * rx + 1) * (2 * ry + 1) * (2 * rz + 1)
        raise FilterError(f"strategy 'A' cannot tile radii (z, y, x) = {radii} in 3-D: its block is the input "
                          f"tile, which needs at least {need} threads per block, more than {MAX_THREADS}; "
                          "use strategy 'B', 'register' or 'separable'")
    return best[1]


def tile_register(radii: tuple[int, int, int], itemsize: int, flat: bool) -> tuple[int, int, int, int]:
    """Register-blocked tile ``(BX, BY, BZ, PER_THREAD)``.

    ``flat`` volumes (``ny == 1`` and ``ry == 0``: 1-D and 2-D images, separable passes) use 32 x 1 x 8 threads with 8
    outputs each (a 32 x 64 output tile). 3-D volumes use 32 x BY x 1 threads with the largest
    ``(BY, PER_THREAD)`` whose shared tile fits :data:`SHARED_LIMIT_BYTES`.
    """
    if flat:
        return 32, 1, 8, REGISTER_OUTPUTS
    for by, per_thread in _REGISTER_3D:  # the last one, 32 x 1 x 1, fits every radius <= 7
        if _register_bytes((32, by, 1, per_thread), radii, itemsize) <= SHARED_LIMIT_BYTES:
            break
    return 32, by, 1, per_thread


def _register_bytes(tile: tuple[int, int, int, int], radii: tuple[int, int, int], itemsize: int) -> int:
    bx, by, bz, per_thread = tile
    rz, ry, rx = radii
    return (bx + 2 * rx) * (by + 2 * ry) * (bz * per_thread + 2 * rz) * itemsize


def _rank(view: tuple[int, int, int], radii: tuple[int, int, int]) -> int:
    nz, ny, _ = view
    rz, ry, _ = radii
    return 3 if nz > 1 or rz > 0 else 2 if ny > 1 or ry > 0 else 1


def _launch(strategy: str, view: tuple[int, int, int], batch: int, taps: np.ndarray, complex_: bool) -> Launch:
    """Geometry and defines of one launch over ``batch`` volumes ``view`` with the 3-D filter ``taps``."""
    taps = np.array(taps, dtype=np.float32, order="C")  # a copy: the plan owns its taps
    radii = tuple((n - 1) // 2 for n in taps.shape)
    itemsize = 8 if complex_ else 4
    defines = {"VARIANT": _VARIANT[strategy], "RZ": radii[0], "RY": radii[1], "RX": radii[2],
               "COMPLEX": int(complex_)}
    shared = 0
    if strategy == "A":
        block = tile_a(radii, _rank(view, radii))
        defines.update(IN_X=block[0], IN_Y=block[1], IN_Z=block[2])
        out = (block[0] - 2 * radii[2], block[1] - 2 * radii[1], block[2] - 2 * radii[0])
    elif strategy == "stream":
        defines.update(ROWS=STREAM_ROWS, WARPS=STREAM_WARPS, PREFETCH=STREAM_PREFETCH)
        block = (32 * STREAM_WARPS, 1, 1)
        out = (32 * STREAM_WARPS * vector_elements(complex_), STREAM_ROWS, 1)
    elif strategy == "B":
        block = _B_TILES[_rank(view, radii)]
        defines.update(TILE_X=block[0], TILE_Y=block[1], TILE_Z=block[2])
        out = block
    else:
        tile = tile_register(radii, itemsize, flat=view[1] == 1 and radii[1] == 0)
        defines.update(BX=tile[0], BY=tile[1], BZ=tile[2], PER_THREAD=tile[3])
        block = tile[:3]
        out = (tile[0], tile[1], tile[2] * tile[3])
        shared = _register_bytes(tile, radii, itemsize)
    nz, ny, nx = view
    grid = (-(-nx // out[0]) * batch, -(-ny // out[1]), -(-nz // out[2]))
    if grid[0] > MAX_GRID_X or grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
        raise ResourceError(f"volume {view} x {batch} needs a grid of {grid} blocks with strategy "
                            f"{strategy!r}: at most {MAX_GRID_YZ} blocks along y and z")
    taps = taps.ravel()
    taps.flags.writeable = False
    return Launch(strategy, tuple(sorted(defines.items())), view, batch, grid, block, shared, taps)


def _volume(shape: tuple[int, ...]) -> tuple[int, int, int]:
    return (1,) * (3 - len(shape)) + tuple(int(n) for n in shape)


def plan(shape: tuple[int, ...], weights: np.ndarray | None, *, complex_: bool = False, strategy: str = "auto",
         factors: Sequence[np.ndarray] | None = None, aligned: bool = True) -> list[Launch]:
    """The launches that correlate an image of ``shape`` with ``weights`` (validated, float32).

    Parameters
    ----------
    shape : tuple of int
        Image shape, 1-D to 3-D.
    weights : numpy.ndarray or None
        Validated float32 filter of the image's rank; None when ``factors`` define it (its outer product is
        then formed only if a direct kernel is chosen).
    complex_ : bool
        complex64 image (else float32).
    strategy : {"auto", "A", "B", "register", "stream", "separable"}
        Kernel family (module docstring).
    factors : sequence of numpy.ndarray, optional
        1-D taps whose outer product is ``weights`` when the filter is separable, else None.
    aligned : bool
        The image and output arrays start on 16-byte boundaries (needed by ``"stream"``).

    Returns
    -------
    list of Launch
        One launch, or one per separable pass.

    Raises
    ------
    FilterError
        Unknown strategy; a strategy that cannot take this filter or image; a radius above
        :data:`MAX_RADIUS` for a filter that is not separable, or above :data:`SEPARABLE_MAX_RADIUS`.
    """
    if strategy not in STRATEGIES:
        raise FilterError(f"unknown strategy {strategy!r}: expected one of {', '.join(STRATEGIES)}")
    fshape = tuple(weights.shape) if weights is not None else tuple(int(np.size(f)) for f in factors)
    volume = _volume(shape)
    radii = tuple((n - 1) // 2 for n in _volume(fshape))
    if strategy == "auto":
        problem = stream_problem(volume, radii, complex_) or (None if aligned else "not aligned")
        strategy = choose_strategy(tuple(shape), radii[3 - len(shape):], factors is not None,
                                   streamable=problem is None and not complex_)
    if strategy == "separable":
        if factors is None:
            raise FilterError(f"strategy 'separable' needs a filter that is an outer product of 1-D taps; "
                              f"the {fshape} filter given is not")
        return _separable(volume, len(shape), factors, complex_)
    check_direct_radius(fshape, factors is not None)
    taps = (weights if weights is not None else outer_product(factors)).reshape(_volume(fshape))
    if strategy == "stream":
        problem = stream_problem(volume, radii, complex_) or (None if aligned else "the arrays are not 16-byte aligned")
        if problem is not None:
            raise FilterError(f"strategy 'stream' cannot filter a {tuple(shape)} image with a {fshape} "
                              f"filter: {problem}")
        return [_launch(strategy, volume, 1, taps, complex_)]
    if strategy == "register" and len(shape) <= 2:
        # 1-D and 2-D images: the image's rows become the blocked (z) axis.
        nz, ny, nx = volume
        return [_launch(strategy, (ny, 1, nx), 1, taps.reshape(taps.shape[1], 1, taps.shape[2]), complex_)]
    return [_launch(strategy, volume, 1, taps, complex_)]


def check_direct_radius(fshape: tuple[int, ...], separable: bool) -> None:
    """Raise :class:`FilterError` when a filter of ``fshape`` exceeds the direct kernels' :data:`MAX_RADIUS`.

    The message names the limit, the ``__constant__`` bytes when the filter would not fit them, and the way
    out: the separable passes (for a separable filter) or the CPU path.
    """
    for axis, size in enumerate(fshape):
        radius = (size - 1) // 2
        if radius <= MAX_RADIUS:
            continue
        nbytes = 4 * math.prod(fshape)
        message = (f"filter shape {fshape} has radius {radius} along axis {axis}: the GPU's direct kernels take "
                   f"radius <= {MAX_RADIUS} (at most {2 * MAX_RADIUS + 1} taps per axis, the size they are built "
                   "for)")
        if nbytes > CONSTANT_BYTES:
            message += f"; its {nbytes} bytes would not fit the {CONSTANT_BYTES}-byte __constant__ memory"
        if separable:
            message += f"; use strategy 'separable' (radius <= {SEPARABLE_MAX_RADIUS}) or device='cpu'"
        else:
            message += "; the filter is not separable: use device='cpu' (any radius)"
        raise FilterError(message)


def _separable(volume: tuple[int, int, int], ndim: int, factors: Sequence[np.ndarray],
               complex_: bool) -> list[Launch]:
    """One register-blocked 1-D pass per axis with more than one tap (x first)."""
    nz, ny, nx = volume
    axes = list(range(3 - ndim, 3))  # volume axes (0 = z, 1 = y, 2 = x) of the image axes
    factors = [np.asarray(f, dtype=np.float64).ravel() for f in factors]
    for axis, f in enumerate(factors):
        if (f.size - 1) // 2 > SEPARABLE_MAX_RADIUS:
            raise FilterError(f"separable filter of sizes {tuple(g.size for g in factors)} has radius "
                              f"{(f.size - 1) // 2} along axis {axis}: the GPU's separable passes take radius "
                              f"<= {SEPARABLE_MAX_RADIUS} (sigma <= {SEPARABLE_MAX_RADIUS / 4:g} voxels for the "
                              "default Gaussian radius); use device='cpu' (any radius) or a smaller radius")
    scale = math.prod(float(f[0]) for f in factors if f.size == 1)
    passes = [(axis, f) for axis, f in zip(axes, factors) if f.size > 1][::-1]
    if not passes:
        passes = [(2, np.array([1.0]))]
    passes[0] = (passes[0][0], passes[0][1] * scale)
    launches = []
    for axis, f in passes:
        if axis == 2:
            launches.append(_launch("register", (nz * ny, 1, nx), 1, f.reshape(1, 1, -1), complex_))
        elif axis == 1:
            launches.append(_launch("register", (ny, 1, nx), nz, f.reshape(-1, 1, 1), complex_))
        else:
            launches.append(_launch("register", (nz, 1, ny * nx), 1, f.reshape(-1, 1, 1), complex_))
    return launches


def check_shared_memory(name: str, shared_bytes: int, limit: int) -> None:
    """Raise :class:`ResourceError` when a block of kernel ``name`` needs more shared memory than ``limit``."""
    if shared_bytes > limit:
        raise ResourceError(f"kernel {name} needs {shared_bytes} bytes of shared memory per block; this GPU "
                            f"allows {limit} (a smaller 3-D filter, or the separable strategy, fits)")
