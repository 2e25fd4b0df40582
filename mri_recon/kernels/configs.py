"""The ``-D`` options of every kernel: pure functions of the launch, shared by the launchers and the registry.

Nothing here touches a GPU or imports a layer above :mod:`mri_recon.kernels`; the launchers in
:mod:`mri_recon.operators` build their options with these functions, and :mod:`mri_recon.kernels.registry`
lists every configuration they can produce.
"""

from __future__ import annotations

from ..errors import KernelError
from . import CONSTANT_BYTES

MAX_GROUP = 8
"""Coils per F^H d / F launch (one phase evaluation serves all of them); more coils are split into groups."""
FORWARD_RUN = 8
"""Positions per run of the forward ``recur`` kernel (recurrence steps between exact phases + 1)."""
FORWARD_TILE_WORDS = 8192
"""32-bit words of one shared-memory tile of the forward kernel (32 KB)."""
PSF_VOX = 8
"""Positions per thread of the real-weight PSF kernel (8: faster than 4, docs/benchmarks.md)."""
_VOX = {1: 8, 2: 4}  # positions per thread of "multi" and "recur" by coils per launch; 2 beyond (the fastest
# per coil count, docs/benchmarks.md "Exact F^H d kernels": 1 coil 8 in 3D, 8 and 4 alike in 2D; 8 coils 2)


def positions_per_thread(coils: int) -> int:
    """Positions (voxels, or mirror pairs) per thread of F^H d with several positions per thread."""
    return _VOX.get(int(coils), 2)


OFFRES_RESEED = 64
"""Samples between exact re-seeds of the time recurrence of F^H d with off-resonance (``FHD_RECUR`` 1 with
``FHD_OFFRES`` 1; the host flags every ``OFFRES_RESEED``-th sample). Emulated in float32 (2048 samples, 150 Hz
and 1 kHz): both accumulations stay near 1e-6 of relative error up to 64 (walking phasors to 256); the rotating
sums reach 1e-5 without re-seeds."""
ROTATE_COILS = 1
"""Coil groups up to this size rotate the sums of F^H d with off-resonance and the time recurrence
(``FHD_ROTATE`` 1, 4 + 14 C FMAs per mirror pair and sample); larger groups walk the phasors (20 + 8 C). The
faster of the two by coil count at 256^2 (docs/changelog.md, where the default was chosen): one coil rotates,
two walk, which the FMA count (32 against 36 at two coils) does not tell."""


def fhd_record_words(dim: int, coils: int, real: bool = False, offres: bool = False, flags: bool = False) -> int:
    """32-bit words of one constant-memory record of ``fhd.cu`` (trajectory, the sample time with ``offres``,
    the flags word with ``flags`` (the time recurrence), padding, sample data)."""
    header = dim + int(offres) + int(flags)
    if not real:
        header += header % 2  # complex data is float2-aligned
    return header + coils * (1 if real else 2)


def fhd_accumulators(vox: int, coils: int, real: bool = False, offres: bool = False, recur: bool = False) -> int:
    """Floats a thread of ``fhd.cu`` accumulates: cosine and sine sums per position and coil (2 real, 4 complex
    floats); with ``offres`` and not ``recur`` the complex sum itself (2 floats: no mirror voxel shares the
    phase); with ``offres`` and ``recur`` the complex sums of the voxel and of its mirror (4 floats)."""
    return vox * coils * (2 if real or (offres and not recur) else 4)


def offres_positions(coils: int) -> int:
    """Positions per thread of F^H d with off-resonance: ``32 // coils`` capped to 1..8 (1..4 coils: 8; 8 coils:
    4), 64 accumulator floats at most, as many as the plain kernel's 8-coil configuration."""
    return max(1, min(8, 32 // int(coils)))


def offres_rotates(coils: int) -> bool:
    """Whether F^H d with off-resonance and the time recurrence rotates the sums (``FHD_ROTATE`` 1) for a
    group of ``coils`` coils: fewer FMAs up to :data:`ROTATE_COILS` coils."""
    return int(coils) <= ROTATE_COILS


def offres_recur_positions(coils: int) -> int:
    """Mirror-pair positions per thread of F^H d with off-resonance and the time recurrence: 4 for one or two
    coils, 2 beyond (like the plain kernel's 8 coils). A position holds, besides the accumulators, the field
    and the step of two voxels (6 floats) and either E (4 more, walking phasors) or the rotating sums (4 per
    coil): 56 floats for 1 coil, 88 for 2, 84 for 8."""
    return 4 if int(coils) <= 2 else 2


def thread_floats(vox: int, coils: int, recur: bool, real: bool, offres: bool, rotate: bool) -> int:
    """Floats a thread of ``fhd.cu`` keeps across samples: the accumulators, plus with the time recurrence the
    per-position state (field, step, E or the rotating sums)."""
    floats = fhd_accumulators(vox, coils, real, offres, recur)
    if offres and recur:
        floats += vox * (6 + (4 * coils if rotate else 4))
    return floats


def fhd_defines(dim: int, coils: int, vox: int, recur: bool, real: bool = False,
                offres: bool = False, rotate: bool = False) -> dict[str, int]:
    """The ``-D`` options of ``fhd.cu`` for one launch configuration (``offres``: ``FHD_OFFRES`` 1, the
    exact off-resonance path, with complex data; with ``recur`` too, the time recurrence, whose accumulation
    ``rotate`` selects: ``FHD_ROTATE``, a key only there)."""
    words = fhd_record_words(dim, coils, real, offres, offres and recur)
    floats = thread_floats(vox, coils, recur, real, offres, rotate)
    defines = {"FHD_DIM": dim, "FHD_COILS": coils, "FHD_VOX": vox, "FHD_RECUR": int(recur),
               "FHD_REAL": int(real), "FHD_OFFRES": int(offres), "FHD_WORDS": words,
               "FHD_CHUNK": CONSTANT_BYTES // (4 * words),
               "FHD_MAX_THREADS": 512 if floats <= (64 if offres and recur else 32) else 256}
    if (offres and recur) or rotate:  # the kernel refuses FHD_ROTATE 1 without the time recurrence
        defines["FHD_ROTATE"] = int(rotate)
    return defines


def adjoint_defines(dim: int, coils: int, *, multi: bool, recur: bool) -> dict[str, int]:
    """``fhd.cu`` options of F^H d: ``multi`` several positions per thread, ``recur`` their phases by the
    angle-addition recurrence (needs ``multi``; the caller checks)."""
    return fhd_defines(dim, coils, positions_per_thread(coils) if multi else 1, recur)


def offres_adjoint_defines(dim: int, coils: int, recur: bool = False, rotate: bool | None = None) -> dict[str, int]:
    """``fhd.cu`` options of F^H d with off-resonance. ``recur=False``: unpaired lines, several positions per
    thread, each with its own phase. ``recur=True``: mirror pairs, the angle-addition recurrence along the
    positions and the time recurrence along the samples, with rotating sums when ``rotate`` (None:
    :func:`offres_rotates`)."""
    if not recur:
        return fhd_defines(dim, coils, offres_positions(coils), False, offres=True)
    rotate = offres_rotates(coils) if rotate is None else bool(rotate)
    return fhd_defines(dim, coils, offres_recur_positions(coils), True, offres=True, rotate=rotate)


TC_WARPS = 4
"""Warps per block of ``offres_tc.cu`` (they share the staged sample records)."""
TC_CHUNK = 8
"""Blocks of 16 samples ``offres_tc.cu`` stages in shared memory at a time; the tensor cores' float32 partial
sums leave into registers after each chunk, so none of them adds more than 128 samples."""
TC_MTILES = 4
"""16-voxel tiles per warp of ``offres_tc.cu``."""
TC_MIN_COILS = 3
"""Smallest launch of coils that F^H d with off-resonance puts on the tensor cores by default. One 8-column tile
(1..4 coils) takes the same time whatever its coil count, so the tensor cores catch up with ``fhd.cu`` at 3
coils and pass it at 4, and ``fhd.cu`` is faster at 2 (docs/benchmarks.md, "Off-resonance correction")."""


def tc_column_tiles(coils: int) -> int:
    """8-column tiles of one ``offres_tc.cu`` launch (``OTC_NTILES``): the interleaved (Re, Im) of 4 coils per
    tile."""
    return (int(coils) + 3) // 4


def offres_tc_defines(dim: int, coils: int, mtiles: int | None = None) -> dict[str, int]:
    """``offres_tc.cu`` options of F^H d with off-resonance on the tensor cores for a group of 1..MAX_GROUP
    coils: one 8-column tile (the interleaved (Re, Im) of 4 coils) per 4 coils, ``mtiles`` 16-voxel tiles per
    warp (None: :data:`TC_MTILES`)."""
    if not 1 <= int(coils) <= MAX_GROUP:
        raise KernelError(f"offres_tc.cu takes 1 to {MAX_GROUP} coils per launch, found {coils}")
    return {"OTC_DIM": int(dim), "OTC_NTILES": tc_column_tiles(coils),
            "OTC_MTILES": int(TC_MTILES if mtiles is None else mtiles), "OTC_WARPS": TC_WARPS,
            "OTC_CHUNK": TC_CHUNK}


def offres_forward_defines(dim: int, coils: int) -> dict[str, int]:
    """``forward.cu`` options of F with off-resonance (``mri_recon_forward_offres``): one voxel record of
    16 + 8 * coils bytes (rounded up to 16) per voxel, :data:`FORWARD_TILE_WORDS` words of them per tile."""
    words = 4 + 4 * ((coils + 1) // 2)
    return {"FWD_DIM": dim, "FWD_NAIVE": 0, "FWD_OFFRES": 1, "FWD_COILS": coils,
            "FWD_TILE_RUNS": max(1, FORWARD_TILE_WORDS // words)}


def frames_defines(defines: dict[str, int]) -> dict[str, int]:
    """``defines`` of ``fhd.cu`` with every frame of a time series in one launch (``FHD_FRAMES`` 1: the records
    from global memory)."""
    return {**defines, "FHD_FRAMES": 1}


def psf_defines(dim: int) -> dict[str, int]:
    """``fhd.cu`` options of the Toeplitz PSF (real weights, recurrence, :data:`PSF_VOX` positions)."""
    return fhd_defines(dim, 1, PSF_VOX, True, real=True)


def forward_defines(dim: int, coils: int | None, run: int | None) -> dict[str, int]:
    """The ``-D`` options of ``forward.cu``: ``coils=None`` selects the naive (reference) kernel."""
    if coils is None:
        return {"FWD_DIM": dim, "FWD_NAIVE": 1}
    words = 4 + 4 * run * coils
    return {"FWD_DIM": dim, "FWD_NAIVE": 0, "FWD_COILS": coils, "FWD_RUN": run,
            "FWD_TILE_RUNS": max(1, FORWARD_TILE_WORDS // words)}


SEGMENT_TIERS = (2, 4, 6, 8, 10, 12, 14, 16, 24, 32, 48, 64)
"""``SEG_MAX`` of ``segments.cu``: a launch with L segments is built for the smallest tier >= L (the mixing
kernel's per-thread array of the L values of one frequency is ``SEG_MAX`` long, kept in registers)."""


def segments_defines(segments: int) -> dict[str, int]:
    """The ``-D`` options of ``segments.cu`` for L = ``segments`` (1 .. the largest of :data:`SEGMENT_TIERS`)."""
    for tier in SEGMENT_TIERS:
        if 1 <= int(segments) <= tier:
            return {"SEG_MAX": tier}
    raise KernelError(f"segments.cu handles 1 to {SEGMENT_TIERS[-1]} segments, found {segments}")


MAPS_TIERS = (8, 16)
"""``MAPS_COILS`` of the ``maps.cu`` modules (Walsh's coil maps): a launch of C coils uses the smallest tier of at
least C; more than the last tier's coils are left to the array code (:func:`mri_recon.prep.walsh.walsh`), which
was the faster at 32 coils (docs/benchmarks.md, "Walsh's maps on the GPU")."""
MAPS_SCRATCH_BYTES = 256 * 2 ** 20
"""Bytes of each of the two scratch buffers of ``maps.cu``'s box sums: the coil pairs are summed in groups that fit
(one pair at least, whatever its size)."""


def maps_defines(coils: int) -> dict[str, int]:
    """``maps.cu`` options for ``coils`` coils (1 .. the last of :data:`MAPS_TIERS`)."""
    for tier in MAPS_TIERS:
        if int(coils) <= tier:
            return {"MAPS_COILS": tier}
    raise KernelError(f"maps.cu holds at most {MAPS_TIERS[-1]} coils, asked for {coils}")
