"""Every CUDA kernel configuration of the registry compiles with NVRTC (no GPU needed)."""

from __future__ import annotations

import os

import pytest
from gpu_ladder import SEED_RUNGS, SEED_SOURCE, seed_defines

from mri_recon.errors import KernelError
from mri_recon.kernels import CONSTANT_BYTES, compile_ptx, registry

if os.environ.get("CI"):  # CI must build every kernel: without NVRTC the import fails the run
    import cupy_backends.cuda.libs.nvrtc  # noqa: F401
else:
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="NVRTC comes with the 'test' extra")

CONFIGS = registry.configurations()


def _id(config: tuple[str, dict[str, int]]) -> str:
    filename, defines = config
    return filename.removesuffix(".cu") + "[" + ",".join(f"{k}={v}" for k, v in sorted(defines.items())) + "]"


@pytest.mark.parametrize("config", CONFIGS, ids=[_id(c) for c in CONFIGS])
def test_configuration_compiles(config):
    filename, defines = config
    ptx = compile_ptx(filename, defines)
    assert ".entry" in ptx and "mri_recon_" in ptx


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("rung", range(SEED_RUNGS))
def test_the_ladders_seed_kernel_compiles(dim, rung):
    """The textbook ladder's seed (test and benchmark code: tests/kernels/fhd_seed.cu) with the package's
    headers."""
    ptx = compile_ptx(SEED_SOURCE, seed_defines(dim, rung))
    assert ".entry" in ptx and "mri_recon_" in ptx


def test_fhd_records_fit_the_constant_bank():
    fhd = [defines for filename, defines in CONFIGS if filename == "fhd.cu"]
    assert fhd
    for defines in fhd:
        assert defines["FHD_CHUNK"] >= 1
        assert defines["FHD_CHUNK"] * 4 * defines["FHD_WORDS"] <= CONSTANT_BYTES


def test_missing_defines_fail_with_the_log():
    with pytest.raises(KernelError, match="fhd.cu failed to compile"):
        compile_ptx("fhd.cu", {"FHD_DIM": 2})


def test_off_resonance_path_is_registered_and_guarded():
    """FHD_OFFRES = 1 (phasor, and the time recurrence with both accumulations) and FWD_OFFRES = 1 are
    registered for every coil count; the kernels refuse the combinations that cannot hold a per-voxel phase
    (real data, the naive forward rung) and FHD_ROTATE without the time recurrence."""
    fhd = [d for f, d in CONFIGS if f == "fhd.cu" and d["FHD_OFFRES"] == 1]
    fwd = [d for f, d in CONFIGS if f == "forward.cu" and d.get("FWD_OFFRES") == 1]
    every = [(n, c) for n in (2, 3) for c in range(1, 9)]
    for recur, rotate in ((0, None), (1, 0), (1, 1)):
        chosen = [d for d in fhd if d["FHD_RECUR"] == recur and d.get("FHD_ROTATE") == rotate]
        assert sorted((d["FHD_DIM"], d["FHD_COILS"]) for d in chosen) == every, (recur, rotate)
    assert sorted((d["FWD_DIM"], d["FWD_COILS"]) for d in fwd) == every
    assert all(d["FHD_REAL"] == 0 for d in fhd)
    phasor = next(d for d in fhd if d["FHD_RECUR"] == 0)
    with pytest.raises(KernelError, match="FHD_OFFRES 1 needs FHD_REAL 0"):
        compile_ptx("fhd.cu", {**phasor, "FHD_REAL": 1})
    with pytest.raises(KernelError, match="FHD_OFFRES must be 0 or 1"):
        compile_ptx("fhd.cu", {**phasor, "FHD_OFFRES": 2})
    with pytest.raises(KernelError, match="FHD_ROTATE 1 needs FHD_OFFRES 1 and FHD_RECUR 1"):
        compile_ptx("fhd.cu", {**phasor, "FHD_ROTATE": 1})
    with pytest.raises(KernelError, match="FHD_ROTATE must be 0 or 1"):
        compile_ptx("fhd.cu", {**next(d for d in fhd if d["FHD_RECUR"] == 1), "FHD_ROTATE": 2})
    phasor_3d = next(d for d in fhd if d["FHD_RECUR"] == 0 and d["FHD_DIM"] == 3)
    with pytest.raises(KernelError, match="kdata does not match the host's record layout"):  # the flags word
        compile_ptx("fhd.cu", {**phasor_3d, "FHD_RECUR": 1})
    with pytest.raises(KernelError, match="FWD_OFFRES 1 needs FWD_NAIVE 0"):
        compile_ptx("forward.cu", {**fwd[0], "FWD_NAIVE": 1})


def test_tensor_core_kernel_is_registered_and_guarded():
    """offres_tc.cu is registered for 2-D and 3-D with one and two column tiles (1..4 and 5..8 coils), its other
    tile counts per warp compile, and it refuses sizes outside its contract."""
    tc = [d for f, d in CONFIGS if f == "offres_tc.cu"]
    assert sorted((d["OTC_DIM"], d["OTC_NTILES"]) for d in tc) == [(2, 1), (2, 2), (3, 1), (3, 2)]
    for mtiles in (1, 4):
        assert "mma.sync.aligned.m16n8k16" in compile_ptx("offres_tc.cu", {**tc[-1], "OTC_MTILES": mtiles})
    with pytest.raises(KernelError, match="OTC_NTILES must lie in 1..2"):
        compile_ptx("offres_tc.cu", {**tc[0], "OTC_NTILES": 3})
    with pytest.raises(KernelError, match="the staged chunk exceeds 48 KB"):
        compile_ptx("offres_tc.cu", {**tc[-1], "OTC_CHUNK": 128})
    with pytest.raises(KernelError, match="OTC_DIM, OTC_NTILES, OTC_MTILES, OTC_WARPS and OTC_CHUNK must be defined"):
        compile_ptx("offres_tc.cu", {"OTC_DIM": 2})


def test_segment_kernels_are_registered_per_tier_and_guarded():
    """segments.cu is registered for every SEG_MAX tier and refuses a missing or out-of-range SEG_MAX."""
    from mri_recon.kernels.configs import SEGMENT_TIERS

    assert sorted(d["SEG_MAX"] for f, d in CONFIGS if f == "segments.cu") == list(SEGMENT_TIERS)
    with pytest.raises(KernelError, match="SEG_MAX \\(the most segments per launch\\) must be defined"):
        compile_ptx("segments.cu", {})
    for bad in (0, 65):
        with pytest.raises(KernelError, match="SEG_MAX must lie in 1..64"):
            compile_ptx("segments.cu", {"SEG_MAX": bad})
    ptx = compile_ptx("segments.cu", {"SEG_MAX": 8})
    for name in ("mri_recon_segments_expand", "mri_recon_segments_mix", "mri_recon_segments_reduce"):
        assert f".entry {name}" in ptx
