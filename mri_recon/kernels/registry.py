"""The one registry of kernel compile configurations: every ``(filename, defines)`` a launcher can build.

The list is data, ``registry.json`` beside this module, so that this layer imports none of the launchers
above it (the filter plans, for one, come from the filter package's planner). ``mri-recon doctor`` compiles
each configuration on the GPU, ``tests/test_kernels_compile.py`` compiles each with NVRTC (no GPU needed),
and ``tests/test_kernel_registry.py`` fails when the file differs from what the launchers can build, or
when a ``.cu`` file of this folder is missing from it. ``python scripts/update_kernel_registry.py``
rewrites the file from the launchers.

Off-resonance: ``fhd.cu`` with ``FHD_OFFRES = 1`` and ``forward.cu`` with ``FWD_OFFRES = 1`` (exact field-map
correction, :mod:`mri_recon.operators.offres.gpu_offres`) are listed for 1..MAX_GROUP coils in 2-D and 3-D; F^H d
three times: one phasor per voxel-sample (``FHD_RECUR = 0``) and the time recurrence (``FHD_RECUR = 1``) with
either accumulation (``FHD_ROTATE = 0, 1``: the launcher's ``rotate``); ``offres_tc.cu`` (F^H d on the tensor
cores) with one and two column tiles. ``segments.cu`` (the fused time-segmented normal operator,
:mod:`mri_recon.operators.offres.gpu_segments`) for every ``SEG_MAX`` tier, which covers 1..64 segments.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from .configs import (
    FORWARD_RUN,
    MAX_GROUP,
    SEGMENT_TIERS,
    adjoint_defines,
    forward_defines,
    offres_adjoint_defines,
    offres_forward_defines,
    offres_tc_defines,
    psf_defines,
    segments_defines,
)

REGISTRY_FILE = Path(__file__).resolve().parent / "registry.json"
DIMENSIONS = (2, 3)


def exact_configurations() -> list[tuple[str, dict[str, int]]]:
    """``fhd.cu`` (F^H d and the PSF) and ``forward.cu`` for 2-D and 3-D, 1..MAX_GROUP coils
    (with and without off-resonance), plus the element-wise helpers (``arith.cu``), the Toeplitz product, CG
    and the compressed-sensing kernels (finite
    differences, proximal steps, wavelets), which take no defines, and the time-segmented normal operator for
    every ``SEG_MAX`` tier (used by ``scripts/update_kernel_registry.py``)."""
    configs: list[tuple[str, dict[str, int]]] = [("toeplitz.cu", {}), ("cg.cu", {}), ("tv.cu", {}), ("prox.cu", {}),
                                                 ("wavelet.cu", {}), ("arith.cu", {})]
    configs += [("segments.cu", segments_defines(tier)) for tier in SEGMENT_TIERS]
    for dim in DIMENSIONS:
        for coils in range(1, MAX_GROUP + 1):
            configs += [("fhd.cu", adjoint_defines(dim, coils, multi=False, recur=False)),
                        ("fhd.cu", adjoint_defines(dim, coils, multi=True, recur=False)),
                        ("fhd.cu", adjoint_defines(dim, coils, multi=True, recur=True))]
        configs.append(("fhd.cu", psf_defines(dim)))
        configs.append(("forward.cu", forward_defines(dim, None, None)))
        for coils in range(1, MAX_GROUP + 1):
            configs += [("forward.cu", forward_defines(dim, coils, 1)),
                        ("forward.cu", forward_defines(dim, coils, FORWARD_RUN)),
                        ("fhd.cu", offres_adjoint_defines(dim, coils)),
                        ("fhd.cu", offres_adjoint_defines(dim, coils, True, False)),
                        ("fhd.cu", offres_adjoint_defines(dim, coils, True, True)),
                        ("forward.cu", offres_forward_defines(dim, coils)),
                        ("offres_tc.cu", offres_tc_defines(dim, coils))]
    return configs


def canonical(configs: list[tuple[str, dict[str, int]]]) -> list[tuple[str, dict[str, int]]]:
    """``configs`` without repeats, sorted by file and defines (the order of ``registry.json``)."""
    unique = {(f, tuple(sorted((k, int(v)) for k, v in d.items()))) for f, d in configs}
    return [(f, dict(d)) for f, d in sorted(unique)]


@functools.cache
def _load() -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    entries = json.loads(REGISTRY_FILE.read_text())
    return tuple((str(f), tuple(sorted((str(k), int(v)) for k, v in d.items()))) for f, d in entries)


def configurations() -> list[tuple[str, dict[str, int]]]:
    """Every configuration of the registry, each once, as ``(filename, defines)``."""
    return [(f, dict(d)) for f, d in _load()]


def contains(filename: str, defines: dict[str, int]) -> bool:
    """Whether ``(filename, defines)`` is in the registry."""
    return (filename, tuple(sorted((k, int(v)) for k, v in defines.items()))) in set(_load())
