"""The post-filter's GPU limits and the :class:`Launch` record of a plan (pure Python): kernel names, radius
limits, threads, shared memory and the tiles of each strategy (:mod:`.plan` chooses among them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FILENAME = "convolution.cu"
STRATEGIES = ("auto", "A", "B", "register", "stream", "separable")
KERNEL_NAMES = {"A": "mri_recon_conv_a", "B": "mri_recon_conv_b", "register": "mri_recon_conv_register",
                "stream": "mri_recon_conv_stream"}
_VARIANT = {"A": 0, "B": 1, "register": 2, "stream": 3}
MAX_RADIUS = 7
"""Largest filter radius per axis (15 taps) of the direct kernels, which hold the whole n-D filter in
``__constant__`` memory and unroll its loops."""
SEPARABLE_MAX_RADIUS = 24
"""Largest radius of one separable pass (49 taps): the default radius of a Gaussian up to sigma 6.1 voxels.
Every radius up to it is a compiled configuration (:func:`compile_configurations`)."""
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
"""Largest radius for which ``"auto"`` takes the streaming kernel, for float32 images: up to it the streaming
kernel is the faster; at radius 3, and for complex64 images, the register kernel is (docs/benchmarks.md,
"Post-filter")."""
STREAM_ROWS = 8
"""Output rows of one thread of the streaming kernel (it walks ``STREAM_ROWS + 2r`` input rows)."""
STREAM_WARPS = 4
"""Warps per block of the streaming kernel, side by side along x."""
STREAM_PREFETCH = 1
"""Input rows whose loads the streaming kernel keeps in flight ahead of the row it computes."""
_B_TILES = {1: (256, 1, 1), 2: (32, 16, 1), 3: (32, 4, 4)}
_REGISTER_3D = ((8, 8), (8, 4), (4, 4), (4, 2), (2, 2), (2, 1), (1, 1))  # (threads along y, outputs)


@dataclass(frozen=True, eq=False)
class Launch:
    """One kernel launch of a plan: what to compile, the volume it sees and the launch geometry.

    Immutable (its taps are read-only) and compared by identity, so that :mod:`.gpu` can cache what it
    prepares for a plan it is given again.
    """

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
