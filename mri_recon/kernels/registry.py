"""The one registry of kernel compile configurations: every ``(filename, defines)`` a launcher can build.

``mri-recon doctor`` compiles each of them on the GPU, ``tests/test_kernels_compile.py`` compiles each with
NVRTC (no GPU needed), and ``tests/test_kernel_registry.py`` fails when a ``.cu`` file of this folder, or a
configuration a launcher can produce, is missing from it.

Reserved: ``fhd.cu`` with ``FHD_OFFRES = 1`` (exact off-resonance correction) is not listed; its record slot
is documented in ``fhd.cu``, which refuses it with ``#error`` until the field-map work implements it.
"""

from __future__ import annotations

from .configs import (
    FORWARD_RUN,
    MAX_GROUP,
    adjoint_defines,
    convolution_configurations,
    forward_defines,
    psf_defines,
    seed_defines,
)

DIMENSIONS = (2, 3)
SEED_RUNGS = 4
"""Rungs of ``fhd_seed.cu`` (the textbook ladder: naive, registers, constant, aos)."""


def exact_configurations() -> list[tuple[str, dict[str, int]]]:
    """``fhd_seed.cu``, ``fhd.cu`` (F^H d and the PSF) and ``forward.cu`` for 2-D and 3-D, 1..MAX_GROUP coils."""
    configs: list[tuple[str, dict[str, int]]] = []
    for dim in DIMENSIONS:
        configs += [("fhd_seed.cu", seed_defines(dim, rung)) for rung in range(SEED_RUNGS)]
        for coils in range(1, MAX_GROUP + 1):
            configs += [("fhd.cu", adjoint_defines(dim, coils, multi=False, recur=False)),
                        ("fhd.cu", adjoint_defines(dim, coils, multi=True, recur=False)),
                        ("fhd.cu", adjoint_defines(dim, coils, multi=True, recur=True))]
        configs.append(("fhd.cu", psf_defines(dim)))
        configs.append(("forward.cu", forward_defines(dim, None, None)))
        for coils in range(1, MAX_GROUP + 1):
            configs += [("forward.cu", forward_defines(dim, coils, 1)),
                        ("forward.cu", forward_defines(dim, coils, FORWARD_RUN))]
    return configs


def configurations() -> list[tuple[str, dict[str, int]]]:
    """Every configuration, each once: the exact transforms, the Toeplitz product, CG and the filters."""
    configs = [*exact_configurations(), ("toeplitz.cu", {}), ("cg.cu", {}), *convolution_configurations()]
    unique: dict[tuple[str, tuple[tuple[str, int], ...]], tuple[str, dict[str, int]]] = {}
    for filename, defines in configs:
        unique.setdefault((filename, tuple(sorted(defines.items()))), (filename, defines))
    return list(unique.values())


def contains(filename: str, defines: dict[str, int]) -> bool:
    """Whether ``(filename, defines)`` is in the registry."""
    key = (filename, tuple(sorted((k, int(v)) for k, v in defines.items())))
    return key in {(f, tuple(sorted(d.items()))) for f, d in configurations()}
