"""GPU correlation with tiled CUDA kernels (``kernels/convolution.cu``), the GPU path of :mod:`filters`.

Semantics are those of :func:`mri_recon.filters.convolve` (correlation, like ``scipy.ndimage.correlate``).
Every kernel sees a C-ordered volume ``(nz, ny, nx)``; 1-D and 2-D images are volumes with extent 1 along
the missing axes. The filter sits in the module's ``__constant__`` array, filled with
:func:`mri_recon.kernels.upload_constant` on the current stream before the launch that reads it (skipped when
that module already holds the same taps). Plans (:func:`plan`) are pure Python; :func:`execute` runs them.

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
    one scratch array.
``"auto"``
    :func:`choose_strategy`.

complex64 images are processed in one pass by kernels compiled with ``COMPLEX=1``: elements are loaded as
``float2`` (real, imaginary) and every tap updates both parts, i.e. the real and imaginary planes are
filtered together from a single read of the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from .. import backend, kernels
from ..backend import Device
from ..errors import DeviceError, FilterError, InvalidDataError, ResourceError
from . import SEPARABLE_TOLERANCE, check_filter, check_image, check_mode, outer_product, separable_factors

FILENAME = "convolution.cu"
STRATEGIES = ("auto", "A", "B", "register", "stream", "separable")
KERNEL_NAMES = {"A": "mri_recon_conv_a", "B": "mri_recon_conv_b", "register": "mri_recon_conv_register",
                "stream": "mri_recon_conv_stream"}
_VARIANT = {"A": 0, "B": 1, "register": 2, "stream": 3}
MAX_THREADS = 1024
STATIC_SHARED_BYTES = 48 * 1024
SHARED_LIMIT_BYTES = 96 * 1024
"""Largest dynamic shared-memory tile planned: within the opt-in limit of Volta and later GPUs but Turing."""
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
SEPARABLE_MIN_VOXELS = 1 << 18
REGISTER_OUTPUTS = 8
"""Outputs per thread of the register-blocked kernel, along the slowest axis."""
VECTOR_BYTES = 16
"""Bytes per load and store of the streaming kernel (float4); rows and pointers must be multiples of it."""
def vector_elements(complex_: bool) -> int:
    """Elements in one 16-byte vector of the streaming kernel: 4 float32 or 2 complex64."""
    return VECTOR_BYTES // (8 if complex_ else 4)


STREAM_MAX_RADIUS = 3
"""Largest filter radius of the streaming kernel (it keeps ``2r + 1`` rows of partial sums in registers)."""
STREAM_AUTO_RADIUS = 2
"""Largest radius for which ``"auto"`` takes the streaming kernel, for float32 images. Measured on an H200
(docs/benchmarks.md): 8192^2 radius 1 3.3 TB/s and radius 2 2.7 TB/s against 2.9 and 2.2 for the register
kernel; at radius 3, and for complex64 images, the register kernel is faster."""
STREAM_ROWS = 8
"""Output rows of one thread of the streaming kernel (it walks ``STREAM_ROWS + 2r`` input rows)."""
STREAM_WARPS = 4
"""Warps per block of the streaming kernel, side by side along x."""
STREAM_PREFETCH = 1
"""Input rows whose loads the streaming kernel keeps in flight ahead of the row it computes."""
_B_TILES = {1: (256, 1, 1), 2: (32, 16, 1), 3: (32, 4, 4)}
_REGISTER_3D = ((8, 8), (8, 4), (4, 4), (4, 2), (2, 2), (2, 1), (1, 1))  # (threads along y, outputs)


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a plan: what to compile, the volume it sees and the launch geometry."""

    strategy: str
    """Kernel family: ``"A"``, ``"B"``, ``"register"`` or ``"stream"``."""
    defines: tuple[tuple[str, int], ...]
    """Sorted ``-D`` options of ``convolution.cu``."""
    view: tuple[int, int, int]
    """``(nz, ny, nx)`` of each volume the kernel filters (C order, x contiguous)."""
    batch: int
    """Number of such volumes one after the other in memory."""
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    """Dynamic shared memory per block (0: the kernel's tile is static)."""
    taps: np.ndarray
    """float32 filter, ``(2RZ+1) x (2RY+1) x (2RX+1)`` flattened, for the ``__constant__`` array."""

    @property
    def name(self) -> str:
        return KERNEL_NAMES[self.strategy]

    @property
    def tiles_x(self) -> int:
        return self.grid[0] // self.batch

    @property
    def radii(self) -> tuple[int, int, int]:
        d = dict(self.defines)
        return d["RZ"], d["RY"], d["RX"]

    @property
    def out_tile(self) -> tuple[int, int, int]:
        """``(z, y, x)`` extent of the outputs one block computes."""
        d = dict(self.defines)
        rz, ry, rx = self.radii
        if self.strategy == "A":
            return d["IN_Z"] - 2 * rz, d["IN_Y"] - 2 * ry, d["IN_X"] - 2 * rx
        if self.strategy == "B":
            return d["TILE_Z"], d["TILE_Y"], d["TILE_X"]
        if self.strategy == "stream":
            return 1, d["ROWS"], d["WARPS"] * 32 * vector_elements(bool(d["COMPLEX"]))
        return d["BZ"] * d["PER_THREAD"], d["BY"], d["BX"]

    @property
    def in_tile(self) -> tuple[int, int, int]:
        """``(z, y, x)`` extent of the input elements one block stages in shared memory."""
        if self.strategy == "B":
            return self.out_tile
        rz, ry, rx = self.radii
        oz, oy, ox = self.out_tile
        return oz + 2 * rz, oy + 2 * ry, ox + 2 * rx


def choose_strategy(shape: tuple[int, ...], radii: tuple[int, ...], separable: bool,
                    streamable: bool = False) -> str:
    """The strategy expected to be fastest: ``"separable"``, ``"stream"`` or ``"register"``.

    Separable passes cost one extra read and write of the image per axis but only ``2r + 1`` taps per pass
    instead of ``(2r+1)^d``; they win once the direct kernel stops being memory-bound: from radius 4 in
    2-D and radius 2 in 3-D, for images of at least 2^18 voxels (below that, launches dominate). Otherwise
    2-D filters up to radius :data:`STREAM_AUTO_RADIUS` go to the streaming kernel when a float32 image suits
    it (``streamable``: real data, :func:`stream_problem` found nothing, 16-byte aligned arrays), everything
    else to the register-blocked kernel.
    """
    if separable and math.prod(shape) >= SEPARABLE_MIN_VOXELS:
        reach = max(radii)
        if (len(shape) == 3 and reach >= 2) or (len(shape) <= 2 and reach >= 4):
            return "separable"
    if streamable and max(radii) <= STREAM_AUTO_RADIUS:
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
    taps = np.ascontiguousarray(taps, dtype=np.float32)
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
    return Launch(strategy, tuple(sorted(defines.items())), view, batch, grid, block, shared, taps.ravel())


def _volume(shape: tuple[int, ...]) -> tuple[int, int, int]:
    return (1,) * (3 - len(shape)) + tuple(int(n) for n in shape)


def plan(shape: tuple[int, ...], weights: np.ndarray, *, complex_: bool = False, strategy: str = "auto",
         factors: list[np.ndarray] | None = None, aligned: bool = True) -> list[Launch]:
    """The launches that correlate an image of ``shape`` with ``weights`` (validated, float32).

    ``factors``: 1-D taps whose outer product is ``weights`` when the filter is separable, else None.
    ``aligned``: the image and output arrays start on 16-byte boundaries (needed by ``"stream"``).
    Pure Python: no GPU needed, which lets the geometry be tested anywhere.
    """
    if strategy not in STRATEGIES:
        raise FilterError(f"unknown strategy {strategy!r}: expected one of {', '.join(STRATEGIES)}")
    volume = _volume(shape)
    taps = weights.reshape(_volume(weights.shape))
    radii = tuple((n - 1) // 2 for n in taps.shape)
    problem = stream_problem(volume, radii, complex_) or (None if aligned else "the arrays are not 16-byte aligned")
    if strategy == "auto":
        strategy = choose_strategy(tuple(shape), radii[3 - len(shape):], factors is not None,
                                   streamable=problem is None and not complex_)
    if strategy == "separable":
        if factors is None:
            raise FilterError(f"strategy 'separable' needs a filter that is an outer product of 1-D taps; "
                              f"the {weights.shape} filter given is not")
        return _separable(volume, len(shape), factors, complex_)
    if strategy == "stream":
        if problem is not None:
            raise FilterError(f"strategy 'stream' cannot filter a {tuple(shape)} image with a {weights.shape} "
                              f"filter: {problem}")
        return [_launch(strategy, volume, 1, taps, complex_)]
    if strategy == "register" and len(shape) <= 2:
        # 1-D and 2-D images: the image's rows become the blocked (z) axis.
        nz, ny, nx = volume
        return [_launch(strategy, (ny, 1, nx), 1, taps.reshape(taps.shape[1], 1, taps.shape[2]), complex_)]
    return [_launch(strategy, volume, 1, taps, complex_)]


def _separable(volume: tuple[int, int, int], ndim: int, factors: list[np.ndarray], complex_: bool) -> list[Launch]:
    """One register-blocked 1-D pass per axis with more than one tap (x first)."""
    nz, ny, nx = volume
    axes = list(range(3 - ndim, 3))  # volume axes (0 = z, 1 = y, 2 = x) of the image axes
    factors = [np.asarray(f, dtype=np.float64) for f in factors]
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


def check_factors(factors: list[np.ndarray], weights: np.ndarray) -> list[np.ndarray]:
    """Validate separable ``factors`` of ``weights``: one 1-D array per axis whose outer product matches."""
    factors = [np.asarray(f, dtype=np.float32).ravel() for f in factors]
    shape = tuple(f.size for f in factors)
    if shape != weights.shape:
        raise FilterError(f"separable factors of lengths {shape} for a filter of shape {weights.shape}: "
                          "expected one factor per axis with the filter's sizes")
    peak = float(np.max(np.abs(weights)))
    if np.max(np.abs(outer_product(factors, np.float64) - weights)) > SEPARABLE_TOLERANCE * max(peak, 1e-30):
        raise FilterError("separable factors do not multiply to the filter: expected their outer product")
    return factors


def correlate(image: Any, weights: Any, *, mode: str = "zero", strategy: str = "auto",
              factors: list[np.ndarray] | None = None, out: Any = None):
    """Correlate a CuPy ``image`` with ``weights`` on the image's GPU.

    Parameters
    ----------
    image : cupy.ndarray
        1-D, 2-D or 3-D; computed as float32 or complex64 (other dtypes are cast).
    weights : array_like
        Real filter of the image's rank, odd sizes, radius <= 7 (see :func:`filters.check_filter`).
    mode : {"zero", "nearest"}
        Ghost cells.
    strategy : {"auto", "A", "B", "register", "stream", "separable"}
        Kernel family (module docstring).
    factors : list of numpy.ndarray, optional
        1-D taps whose outer product is ``weights``; found automatically when omitted.
    out : cupy.ndarray, optional
        C-contiguous array of the result's shape and dtype to write into; not the image itself.

    Returns
    -------
    cupy.ndarray
        ``out`` or a new array, float32 or complex64.
    """
    if not backend.is_gpu_array(image):
        raise DeviceError(f"gpu_filter.correlate needs a CuPy array; found {type(image).__name__}")
    data = check_image(image)
    weights = check_filter(weights, data.ndim)
    if factors is not None:
        factors = check_factors(factors, weights)
    elif strategy in ("auto", "separable"):
        factors = separable_factors(weights)
    aligned = _aligned(data) and (out is None or not backend.is_gpu_array(out) or _aligned(out))
    launches = plan(data.shape, weights, complex_=data.dtype.kind == "c", strategy=strategy, factors=factors,
                    aligned=aligned)
    return execute(launches, data, out=out, mode=mode)


def _aligned(array: Any) -> bool:
    return int(array.data.ptr) % VECTOR_BYTES == 0


def execute(launches: list[Launch], image: Any, *, out: Any = None, mode: str = "zero"):
    """Run a :func:`plan` on a C-contiguous float32 / complex64 CuPy ``image`` (no other validation; a
    streaming launch also needs 16-byte aligned arrays).

    Multi-pass plans alternate between ``out`` and one scratch array so that the last pass writes ``out``.
    """
    nearest = int(check_mode(mode) == "nearest")
    cupy = backend.cupy_module()
    device = Device(int(image.device.id))
    with device.use():
        if out is None:
            out = cupy.empty_like(image)
        elif (not backend.is_gpu_array(out) or out.shape != image.shape or out.dtype != image.dtype
              or not out.flags.c_contiguous or out.data.ptr == image.data.ptr):
            raise InvalidDataError(f"out must be a C-contiguous {image.dtype} array of shape {image.shape} other "
                                   f"than the image; found {type(out).__name__} {getattr(out, 'dtype', '')} "
                                   f"{getattr(out, 'shape', '')}")
        if any(launch.strategy == "stream" for launch in launches) and not (_aligned(image) and _aligned(out)):
            raise FilterError("strategy 'stream' needs arrays that start on 16-byte boundaries")
        scratch = cupy.empty_like(image) if len(launches) > 1 else None
        source = image
        for i, launch in enumerate(launches):
            target = out if (len(launches) - 1 - i) % 2 == 0 else scratch
            _run(launch, source, target, nearest, device)
            source = target
    return out


_resident: dict[int, bytes] = {}  # id(module) -> taps in its __constant__ array


@cache
def _compiled(defines: tuple[tuple[str, int], ...], name: str, shared_bytes: int, device_index: int):
    """The module and kernel of a launch on one GPU, allowed ``shared_bytes`` of dynamic shared memory."""
    module = kernels.get_module(FILENAME, dict(defines), Device(device_index))
    kernel = module.get_function(name)
    if shared_bytes > STATIC_SHARED_BYTES:
        attributes = backend.cupy_module().cuda.Device(device_index).attributes
        check_shared_memory(name, shared_bytes, int(attributes["MaxSharedMemoryPerBlockOptin"]))
        kernel.max_dynamic_shared_size_bytes = shared_bytes
    return module, kernel


def check_shared_memory(name: str, shared_bytes: int, limit: int) -> None:
    """Raise :class:`ResourceError` when a block of kernel ``name`` needs more shared memory than ``limit``."""
    if shared_bytes > limit:
        raise ResourceError(f"kernel {name} needs {shared_bytes} bytes of shared memory per block; this GPU "
                            f"allows {limit} (a smaller 3-D filter, or the separable strategy, fits)")


def _run(launch: Launch, source: Any, target: Any, nearest: int, device: Device) -> None:
    """Upload the taps (unless this module already holds them) and launch, on the current stream."""
    module, kernel = _compiled(launch.defines, launch.name, launch.shared_bytes, device.index)
    taps = launch.taps.tobytes()
    if _resident.get(id(module)) != taps:
        kernels.upload_constant(module, "c_filter", launch.taps)
        _resident[id(module)] = taps
    nz, ny, nx = launch.view
    args = (source, target, np.int32(nx), np.int32(ny), np.int32(nz), np.int32(launch.tiles_x),
            np.int32(nearest))
    kernel(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)


def compile_configurations() -> list[tuple[str, dict[str, int]]]:
    """Every ``(filename, defines)`` the launchers produce for isotropic radii 0..7.

    Covers strategies A, B, register, stream and the separable passes on 1-D, 2-D and 3-D images, float32 and
    complex64. (Anisotropic radii compile the same code with other ``RX, RY, RZ``.) For CI:
    ``kernels.compile_ptx(filename, defines)`` on each.
    """
    shapes = {1: (1000,), 2: (300, 300), 3: (40, 40, 40)}
    seen: dict[tuple[tuple[str, int], ...], None] = {}
    for complex_ in (False, True):
        for ndim, shape in shapes.items():
            for radius in range(8):
                factors = [np.ones(2 * radius + 1, np.float32)] * ndim
                weights = outer_product(factors)
                for strategy in STRATEGIES[1:]:
                    try:
                        launches = plan(shape, weights, complex_=complex_, strategy=strategy, factors=factors)
                    except FilterError:  # strategy A in 3-D beyond radius 4
                        continue
                    for launch in launches:
                        seen.setdefault(launch.defines)
    return [(FILENAME, dict(defines)) for defines in seen]
