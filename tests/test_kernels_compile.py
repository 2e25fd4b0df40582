"""Every CUDA kernel configuration the launchers use compiles with NVRTC (no GPU needed)."""

from __future__ import annotations

import importlib
import os

import pytest

from mri_recon import cg, gpu_fhd, gpu_nufft, gpu_toeplitz
from mri_recon.errors import KernelError
from mri_recon.kernels import CONSTANT_BYTES, compile_ptx, kernel_files

if os.environ.get("CI"):  # CI must build every kernel: without NVRTC the import fails the run
    import cupy_backends.cuda.libs.nvrtc  # noqa: F401
else:
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="NVRTC comes with the 'test' extra")


def _configurations() -> list[tuple[str, dict[str, int]]]:
    configs = [*gpu_fhd.compile_configurations(), *gpu_toeplitz.compile_configurations(),
               *cg.compile_configurations(), *gpu_nufft.compile_configurations()]
    try:
        gpu_filter = importlib.import_module("mri_recon.gpu_filter")
    except ImportError:  # the filter module is optional here
        gpu_filter = None
    if gpu_filter is not None:
        configs += list(gpu_filter.compile_configurations())
    return configs


CONFIGS = _configurations()


def _id(config: tuple[str, dict[str, int]]) -> str:
    filename, defines = config
    return filename.removesuffix(".cu") + "[" + ",".join(f"{k}={v}" for k, v in sorted(defines.items())) + "]"


@pytest.mark.parametrize("config", CONFIGS, ids=[_id(c) for c in CONFIGS])
def test_configuration_compiles(config):
    filename, defines = config
    ptx = compile_ptx(filename, defines)
    assert ".entry" in ptx and "mri_recon_" in ptx


def test_every_kernel_file_is_covered():
    covered = {filename for filename, _ in CONFIGS}
    missing = sorted(path.name for path in kernel_files() if path.name not in covered)
    assert not missing, f"no compile configuration covers {missing}"


def test_fhd_records_fit_the_constant_bank():
    for filename, defines in gpu_fhd.compile_configurations():
        if filename == "fhd.cu":
            assert defines["FHD_CHUNK"] >= 1
            assert defines["FHD_CHUNK"] * 4 * defines["FHD_WORDS"] <= CONSTANT_BYTES


def test_missing_defines_fail_with_the_log():
    with pytest.raises(KernelError, match="fhd.cu failed to compile"):
        compile_ptx("fhd.cu", {"FHD_DIM": 2})


def test_nufft_tiles_fit_the_shared_memory():
    for _, defines in gpu_nufft.compile_configurations():
        dim, width = defines["NUFFT_DIM"], defines["NUFFT_W"]
        bins = (defines["NUFFT_BIN0"], defines["NUFFT_BIN1"], defines["NUFFT_BIN2"])
        coils, real = defines["NUFFT_COILS"], bool(defines["NUFFT_REAL"])
        if gpu_nufft.spread_coils(bins, width, dim, coils, real) == coils:
            assert gpu_nufft.spread_bytes(bins, width, dim, coils, real) <= gpu_nufft.SHARED_LIMIT


def test_nufft_missing_defines_fail_with_the_log():
    with pytest.raises(KernelError, match="nufft.cu failed to compile"):
        compile_ptx("nufft.cu", {"NUFFT_DIM": 2, "NUFFT_W": 7})
