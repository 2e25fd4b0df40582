"""The ``-D`` options of every kernel: pure functions of the launch, shared by the launchers and the registry.

Nothing here touches a GPU or imports a layer above :mod:`mri_recon.kernels`; the launchers in
:mod:`mri_recon.operators` build their options with these functions, and :mod:`mri_recon.kernels.registry`
lists every configuration they can produce.
"""

from __future__ import annotations

from . import CONSTANT_BYTES

MAX_GROUP = 8
"""Coils per F^H d / F launch (one phase evaluation serves all of them); more coils are split into groups."""
FORWARD_RUN = 8
"""Positions per run of the forward ``recur`` kernel (recurrence steps between exact phases + 1)."""
FORWARD_TILE_WORDS = 8192
"""32-bit words of one shared-memory tile of the forward kernel (32 KB)."""
PSF_VOX = 8
"""Positions per thread of the real-weight PSF kernel (measured on an H200: 8 is 2.7x faster than 4)."""
_VOX = {1: 8, 2: 4}  # positions per thread of "multi" and "recur" by coils per launch; 2 beyond (measured on
# an H200, docs/benchmarks.md: 1 coil 8 beats 4 in 3D and ties in 2D; 8 coils 2 beats 4 and 8)


def positions_per_thread(coils: int) -> int:
    """Positions (voxels, or mirror pairs) per thread of F^H d with several positions per thread."""
    return _VOX.get(int(coils), 2)


def fhd_record_words(dim: int, coils: int, real: bool = False) -> int:
    """32-bit words of one constant-memory record of ``fhd.cu`` (trajectory, padding, sample data)."""
    header = dim if real else dim + dim % 2  # complex data is float2-aligned
    return header + coils * (1 if real else 2)


def fhd_defines(dim: int, coils: int, vox: int, recur: bool, real: bool = False) -> dict[str, int]:
    """The ``-D`` options of ``fhd.cu`` for one launch configuration.

    ``FHD_OFFRES`` is always 0: the off-resonance path is reserved (its record slot is documented in
    ``fhd.cu``, which refuses ``FHD_OFFRES != 0`` with ``#error`` until the field-map work implements it).
    """
    words = fhd_record_words(dim, coils, real)
    accumulators = vox * coils * (2 if real else 4)
    return {"FHD_DIM": dim, "FHD_COILS": coils, "FHD_VOX": vox, "FHD_RECUR": int(recur),
            "FHD_REAL": int(real), "FHD_OFFRES": 0, "FHD_WORDS": words,
            "FHD_CHUNK": CONSTANT_BYTES // (4 * words), "FHD_MAX_THREADS": 512 if accumulators <= 32 else 256}


def adjoint_defines(dim: int, coils: int, *, multi: bool, recur: bool) -> dict[str, int]:
    """``fhd.cu`` options of F^H d: ``multi`` several positions per thread, ``recur`` their phases by the
    angle-addition recurrence (needs ``multi``; the caller checks)."""
    return fhd_defines(dim, coils, positions_per_thread(coils) if multi else 1, recur)


def psf_defines(dim: int) -> dict[str, int]:
    """``fhd.cu`` options of the Toeplitz PSF (real weights, recurrence, :data:`PSF_VOX` positions)."""
    return fhd_defines(dim, 1, PSF_VOX, True, real=True)


def seed_defines(dim: int, rung: int) -> dict[str, int]:
    """The ``-D`` options of ``fhd_seed.cu`` for one rung of the textbook ladder (0 naive .. 3 aos)."""
    defines = {"FHD_DIM": dim, "FHD_RUNG": rung}
    if rung >= 2:
        defines["FHD_CHUNK"] = CONSTANT_BYTES // (4 * dim)
    return defines


def forward_defines(dim: int, coils: int | None, run: int | None) -> dict[str, int]:
    """The ``-D`` options of ``forward.cu``: ``coils=None`` selects the naive (reference) kernel."""
    if coils is None:
        return {"FWD_DIM": dim, "FWD_NAIVE": 1}
    words = 4 + 4 * run * coils
    return {"FWD_DIM": dim, "FWD_NAIVE": 0, "FWD_COILS": coils, "FWD_RUN": run,
            "FWD_TILE_RUNS": max(1, FORWARD_TILE_WORDS // words)}


# ----------------------------------------------------------------------------------------------------
# convolution.cu: a mirror of mri_recon.filters' compile_configurations() (the filter plans depend on the
# filter package's planner, which this layer must not import); tests/test_kernel_registry.py asserts that
# the two produce the same configurations.

_CONV_SHAPES = {1: (1000,), 2: (300, 300), 3: (40, 40, 40)}
_CONV_MAX_RADIUS = 7
_CONV_SHARED_LIMIT = 96 * 1024
_CONV_REGISTER_3D = ((8, 8), (8, 4), (4, 4), (4, 2), (2, 2), (2, 1), (1, 1))
_CONV_B_TILES = {1: (256, 1, 1), 2: (32, 16, 1), 3: (32, 4, 4)}
_CONV_STREAM = {"ROWS": 8, "WARPS": 4, "PREFETCH": 1}


def _conv_tile_a(radii: tuple[int, int, int], rank: int) -> tuple[int, int, int] | None:
    rz, ry, rx = radii
    if rank < 3:
        return (256, 1, 1) if rank == 1 else (32, 32, 1)
    best = None
    for in_x in range(2 * rx + 1, 33):
        for in_y in range(2 * ry + 1, 1024 // in_x + 1):
            in_z = 1024 // (in_x * in_y)
            if in_z < 2 * rz + 1:
                break
            key = ((in_x - 2 * rx) * (in_y - 2 * ry) * (in_z - 2 * rz), in_x, in_y)
            if best is None or key > best[0]:
                best = (key, (in_x, in_y, in_z))
    return None if best is None else best[1]


def _conv_register(radii: tuple[int, int, int], itemsize: int, flat: bool) -> dict[str, int]:
    rz, ry, rx = radii
    tile = (1, 8)
    if not flat:
        for tile in _CONV_REGISTER_3D:
            if (32 + 2 * rx) * (tile[0] + 2 * ry) * (tile[1] + 2 * rz) * itemsize <= _CONV_SHARED_LIMIT:
                break
    return {"BX": 32, "BY": tile[0], "BZ": 8 if flat else 1, "PER_THREAD": tile[1]}


def convolution_configurations() -> list[tuple[str, dict[str, int]]]:
    """The ``convolution.cu`` options of isotropic radii 0..7 on 1-D, 2-D and 3-D images, float32 and
    complex64, strategies A, B, register, stream and the separable passes (as the filter planner makes them)."""
    seen: dict[tuple[tuple[str, int], ...], None] = {}

    def add(variant: int, radii: tuple[int, int, int], complex_: bool, **extra: int) -> None:
        defines = {"VARIANT": variant, "RZ": radii[0], "RY": radii[1], "RX": radii[2], "COMPLEX": int(complex_),
                   **extra}
        seen.setdefault(tuple(sorted(defines.items())))

    for complex_ in (False, True):
        itemsize = 8 if complex_ else 4
        for ndim, shape in _CONV_SHAPES.items():
            volume = (1,) * (3 - ndim) + shape
            for r in range(_CONV_MAX_RADIUS + 1):
                radii = (r if ndim == 3 else 0, r if ndim >= 2 else 0, r)
                rank = 3 if volume[0] > 1 or radii[0] else 2 if volume[1] > 1 or radii[1] else 1
                tile = _conv_tile_a(radii, rank)
                if tile is not None:
                    add(0, radii, complex_, IN_X=tile[0], IN_Y=tile[1], IN_Z=tile[2])
                b = _CONV_B_TILES[rank]
                add(1, radii, complex_, TILE_X=b[0], TILE_Y=b[1], TILE_Z=b[2])
                direct = radii if ndim == 3 else (radii[1], 0, radii[2])  # 1-D / 2-D: rows become the z axis
                add(2, direct, complex_, **_conv_register(direct, itemsize, flat=ndim < 3))
                per_vector = 16 // itemsize
                if radii[0] == 0 and r <= 3 and r <= per_vector and volume[2] % per_vector == 0:
                    add(3, radii, complex_, **_CONV_STREAM)
                passes = [(0, 0, r), (r, 0, 0)] if r else [(0, 0, 0)]  # x pass; y and z passes
                for pass_radii in passes:
                    add(2, pass_radii, complex_, **_conv_register(pass_radii, itemsize, flat=True))
    return [("convolution.cu", dict(defines)) for defines in seen]
