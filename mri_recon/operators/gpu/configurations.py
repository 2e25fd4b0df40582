"""Every kernel compile configuration the launchers can build: the one list behind ``kernels/registry.json``.

``scripts/update_kernel_registry.py`` writes :func:`launcher_configurations` to the registry file,
:mod:`mri_recon.kernels.registry` reads that file (so that the kernels layer imports none of the launchers
above it), and ``tests/test_kernel_registry.py`` fails when the file and this list differ.

Off-resonance: ``fhd.cu`` with ``FHD_OFFRES = 1`` and ``forward.cu`` with ``FWD_OFFRES = 1`` (exact field-map
correction, :mod:`mri_recon.operators.offres.gpu_offres`) are listed for 1..MAX_GROUP coils in 2-D and 3-D; F^H d
three times: one phasor per voxel-sample (``FHD_RECUR = 0``) and the time recurrence (``FHD_RECUR = 1``) with
either accumulation (``FHD_ROTATE = 0, 1``: the launcher's ``rotate``); ``offres_tc.cu`` (F^H d on the tensor
cores) with one and two column tiles. ``segments.cu`` (the fused time-segmented normal operator,
:mod:`mri_recon.operators.offres.gpu_segments`) for every ``SEG_MAX`` tier, which covers 1..64 segments.
"""

from __future__ import annotations

from ...filters.gpu import compile_configurations as filter_configurations
from ...kernels.configs import (
    FORWARD_RUN,
    MAPS_TIERS,
    MAX_GROUP,
    SEGMENT_TIERS,
    adjoint_defines,
    forward_defines,
    frames_defines,
    maps_defines,
    offres_adjoint_defines,
    offres_forward_defines,
    offres_tc_defines,
    psf_defines,
    segments_defines,
)
from ...kernels.registry import canonical
from ..engines.nufft_launch import compile_configurations as nufft_configurations

DIMENSIONS = (2, 3)


def exact_configurations() -> list[tuple[str, dict[str, int]]]:
    """``fhd.cu`` (F^H d and the PSF, one frame or a time series' frames at once) and ``forward.cu`` for 2-D
    and 3-D, 1..MAX_GROUP coils (with and without off-resonance), plus the element-wise helpers (``arith.cu``),
    the Toeplitz product, CG and the compressed-sensing kernels (finite differences, proximal steps, wavelets),
    which take no defines, and the time-segmented normal operator for every ``SEG_MAX`` tier."""
    configs: list[tuple[str, dict[str, int]]] = [("toeplitz.cu", {}), ("cg.cu", {}), ("tv.cu", {}), ("prox.cu", {}),
                                                 ("wavelet.cu", {}), ("arith.cu", {})]
    configs += [("segments.cu", segments_defines(tier)) for tier in SEGMENT_TIERS]
    for dim in DIMENSIONS:
        for coils in range(1, MAX_GROUP + 1):
            configs += [("fhd.cu", adjoint_defines(dim, coils, multi=False, recur=False)),
                        ("fhd.cu", adjoint_defines(dim, coils, multi=True, recur=False)),
                        ("fhd.cu", adjoint_defines(dim, coils, multi=True, recur=True)),
                        ("fhd.cu", frames_defines(adjoint_defines(dim, coils, multi=True, recur=True)))]
        configs += [("fhd.cu", psf_defines(dim)), ("fhd.cu", frames_defines(psf_defines(dim)))]
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


def launcher_configurations() -> list[tuple[str, dict[str, int]]]:
    """The exact transforms, the Toeplitz product, CG, the sparse solvers' kernels, the NUFFT, the
    post-filter and Walsh's maps, without repeats, in the registry file's order
    (:func:`~mri_recon.kernels.registry.canonical`)."""
    return canonical([*exact_configurations(), *nufft_configurations(), *filter_configurations(),
                      *maps_configurations()])


def maps_configurations() -> list[tuple[str, dict[str, int]]]:
    """``maps.cu`` (Walsh's coil maps, :mod:`mri_recon.prep.walsh_gpu`) for every ``MAPS_COILS`` tier."""
    return [("maps.cu", maps_defines(tier)) for tier in MAPS_TIERS]
