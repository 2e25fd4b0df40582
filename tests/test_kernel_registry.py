"""The registry of kernel configurations is complete: every .cu file, every configuration a launcher makes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from gpu_ladder import SEED_SOURCE

from mri_recon.errors import KernelError
from mri_recon.kernels import KERNEL_DIR, header_files, include_options, kernel_files, registry, source
from mri_recon.kernels.configs import MAX_GROUP, SEGMENT_TIERS, offres_adjoint_defines, segments_defines
from mri_recon.operators.engines import gpu_layout
from mri_recon.operators.gpu.configurations import exact_configurations, launcher_configurations
from mri_recon.operators.offres.gpu_segments import MAX_FUSED_SEGMENTS
from mri_recon.operators.offres.time_segments import MAX_SEGMENTS

PACKAGE = Path(__file__).resolve().parents[1] / "mri_recon"


def _key(filename, defines):
    return filename, tuple(sorted((k, int(v)) for k, v in defines.items()))


REGISTERED = {_key(f, d) for f, d in registry.configurations()}


def test_every_kernel_file_is_registered():
    covered = {filename for filename, _ in REGISTERED}
    missing = sorted(path.name for path in kernel_files() if path.name not in covered)
    assert not missing, f"no registry configuration covers {missing}"


def test_configurations_are_unique():
    assert len(REGISTERED) == len(registry.configurations())
    assert registry.contains("cg.cu", {}) and not registry.contains("cg.cu", {"X": 1})


def test_coil_groups_are_the_listed_sizes():
    """The exact launchers split any coil count into groups of 1..MAX_GROUP, the sizes the list enumerates."""
    sizes = {size for n in range(1, 5 * MAX_GROUP + 2) for _, size in gpu_layout.coil_groups(n)}
    assert sizes == set(range(1, MAX_GROUP + 1))


def test_the_list_holds_each_launchers_default_choice():
    """F^H d with off-resonance as the launcher asks by default (``rotate=None``), and every time-segment count
    through its ``SEG_MAX`` tier, are in the one list."""
    listed = {_key(f, d) for f, d in launcher_configurations()}
    for dim in (2, 3):
        for coils in range(1, MAX_GROUP + 1):
            assert _key("fhd.cu", offres_adjoint_defines(dim, coils, True)) in listed
    assert {_key("segments.cu", segments_defines(n)) for n in range(1, MAX_SEGMENTS + 1)} <= listed


def _kernel_literals(module: str) -> set[str]:
    """``.cu`` file names written as string literals in a module's source."""
    tree = ast.parse((PACKAGE / module if not module.startswith("../") else PACKAGE.parent / module[3:]).read_text())
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and node.value.endswith(".cu")}


def test_launchers_build_only_registered_files():
    files = {filename for filename, _ in REGISTERED}
    for module in ("operators/engines/gpu_exact.py", "operators/normal/gpu_toeplitz.py",
                   "solvers/gpu_cg.py", "filters/gpu.py", "filters/plan.py", "operators/engines/gpu_nufft.py",
                   "operators/offres/gpu_offres.py", "operators/offres/gpu_offres_tc.py",
                   "operators/offres/gpu_segments.py"):
        assert _kernel_literals(module) <= files, module
    assert _kernel_literals("../tests/gpu_ladder.py") <= files | {"fhd_seed.cu"}  # its seed: tests/kernels


def test_registry_file_is_what_the_launchers_build():
    from mri_recon.filters.gpu import compile_configurations as filter_configurations
    from mri_recon.operators.engines.nufft_launch import compile_configurations as nufft_configurations

    assert registry.configurations() == launcher_configurations(), "run: python scripts/update_kernel_registry.py"
    for part in (exact_configurations(), nufft_configurations(), filter_configurations()):
        assert {_key(f, d) for f, d in part} <= REGISTERED


def test_headers_are_found_and_shipped():
    assert [p.name for p in header_files()] == ["mri_recon_grid.cuh", "mri_recon_phase.cuh"]
    options = include_options()
    assert options[0] == f"-I{KERNEL_DIR}" and options[1].startswith("-DMRI_RECON_HEADERS=")
    for name in ("fhd.cu", "forward.cu", SEED_SOURCE, "offres_tc.cu"):
        assert '#include "mri_recon_phase.cuh"' in source(name)
    assert not (KERNEL_DIR / "fhd_seed.cu").exists()  # test and benchmark code is not shipped
    assert '#include "mri_recon_grid.cuh"' in source("segments.cu")
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text()
    assert '"mri_recon.kernels" = ["*.cu", "*.cuh", "*.json", "bundle/manifest.json", "bundle/*.xz"]' in pyproject


def test_kernels_layer_does_not_import_upwards():
    for path in (PACKAGE / "kernels").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] not in ("operators", "filters", "solvers"), path.name


def test_production_launcher_does_not_import_the_ladder():
    tree = ast.parse((PACKAGE / "operators" / "engines" / "gpu_exact.py").read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
             for alias in node.names}
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "gpu_ladder" not in names and not any("gpu_ladder" in (m or "") for m in modules)


@pytest.mark.parametrize("dim", [2, 3])
def test_what_a_reconstruction_prefetches_is_in_the_registry(dim):
    from mri_recon.kernels.registry import contains
    from mri_recon.operators.engines import FinufftEncoding, GpuExactEncoding, GpuNufftEncoding
    from mri_recon.pipeline import SOLVER_KERNELS

    assert FinufftEncoding.kernel_configs(dim, 8) == []
    for coils in range(1, 20):
        for engine in (GpuExactEncoding, GpuNufftEncoding):
            configs = engine.kernel_configs(dim, coils) + list(SOLVER_KERNELS)
            assert configs and all(contains(f, d) for f, d in configs), (engine.name, coils)


def test_segment_tiers_cover_every_segment_count():
    """Every L the search can choose (1..MAX_SEGMENTS) has a SEG_MAX tier at least L, the smallest one."""
    assert MAX_FUSED_SEGMENTS == SEGMENT_TIERS[-1] >= MAX_SEGMENTS
    for count in range(1, MAX_SEGMENTS + 1):
        tier = segments_defines(count)["SEG_MAX"]
        assert tier >= count and all(t < count for t in SEGMENT_TIERS if t < tier)
    for bad in (0, SEGMENT_TIERS[-1] + 1):
        with pytest.raises(KernelError, match=f"segments.cu handles 1 to 64 segments, found {bad}"):
            segments_defines(bad)


def test_segmented_reconstruction_prefetches_registered_modules():
    from mri_recon.operators.offres.setup import OffresCorrection

    for count in range(1, MAX_SEGMENTS + 1):
        plan = OffresCorrection("segmented", count, 0.0, None, None)
        assert [registry.contains(f, d) for f, d in plan.kernel_configs(True)] == [True]
        assert plan.kernel_configs(False) == []
    assert OffresCorrection("segmented", MAX_FUSED_SEGMENTS + 1, 0.0, None, None).kernel_configs(True) == []
    assert OffresCorrection("exact", 0, 0.0, None, None).kernel_configs(True) == []
