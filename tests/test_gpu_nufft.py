"""GPU NUFFT against the exact float64 sums (GPU), and its host-side layout rules (CPU)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import adjoint_gap, random_problem, relative

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import DeviceError, InvalidDataError, SchemaError, TrajectoryUnitsError
from mri_recon.operators.engines import gpu_nufft, nufft_launch
from mri_recon.operators.engines.nufft_params import direct_adjoint, direct_forward

TOL = 1e-5  # the accuracy requirement (relative L2 error against the float64 sum)
MATRICES = [(16, 12), (9, 7), (1, 6), (40, 33), (8, 6, 5), (7, 5, 3), (10, 1, 4), (21, 18, 17)]






def poisoned(shape):
    return cupy_module().full(shape, np.nan + 1j * np.nan, dtype=np.complex64)


# ----------------------------------------------------------------------------------------------------
# Host-side rules (no GPU)


def test_spread_coils_fit_the_shared_memory():
    assert nufft_launch.tile_points((32, 32, 1), 7, 2) == 39 * 39
    assert nufft_launch.spread_bytes((32, 32, 1), 7, 2, 8, False) == 39 * 39 * 8 * 8
    assert nufft_launch.spread_bytes((8, 8, 8), 7, 3, 1, True, warps=2) == 2 * (15**3 * 4 + 21 * 4)
    for coils in range(1, 10):
        for method in nufft_launch.SPREAD_METHODS:
            for dim in (2, 3):
                bins = nufft_launch.DEFAULT_BINS[method][dim]
                warps = nufft_launch.DEFAULT_WARPS[dim] if method == "warp" else 0
                step = nufft_launch.spread_coils(bins, 7, dim, coils, False, warps=warps)
                assert step in nufft_launch.COIL_STEPS
                used = nufft_launch.spread_bytes(bins, 7, dim, step, False, warps)
                assert used <= nufft_launch.SHARED_LIMIT[dim] or step == 1


@pytest.mark.parametrize(("coils", "step"), [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 8)])
def test_launch_coils(coils, step):
    assert nufft_launch.launch_coils(coils) == step


@pytest.mark.parametrize(("coils", "grid_bytes", "step"), [
    (8, 2 << 20, 8), (8, 4 << 20, 4), (3, 4 << 20, 4), (8, 8 << 20, 2), (8, 128 << 20, 1), (1, 128 << 20, 1)])
def test_launch_coils_keep_their_grids_within_the_cache_budget(coils, grid_bytes, step):
    assert nufft_launch.launch_coils(coils, grid_bytes) == step
    assert step == 1 or step * grid_bytes <= nufft_launch.INTERP_CACHE_BYTES


def test_compile_configurations_cover_2d_3d_complex_and_real():
    configs = nufft_launch.compile_configurations()
    assert {d["NUFFT_DIM"] for _, d in configs} == {2, 3}
    assert {d["NUFFT_REAL"] for _, d in configs} == {0, 1}
    assert {d["NUFFT_COILS"] for _, d in configs} == set(nufft_launch.COIL_STEPS)
    assert all(f == "nufft.cu" for f, _ in configs)


# ----------------------------------------------------------------------------------------------------
# GPU


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", MATRICES, ids=str)
@pytest.mark.parametrize("coils", [1, 3, 8, 9])
@pytest.mark.parametrize("spread", nufft_launch.SPREAD_METHODS)
def test_adjoint_matches_exact_sum(rng, matrix, coils, spread):
    cupy = cupy_module()
    traj, data = random_problem(rng, matrix, coils, 700)
    plan = gpu_nufft.GpuNufft(traj, matrix, spread=spread)
    out = plan.adjoint(cupy.asarray(data), out=poisoned((coils, *matrix)))
    assert relative(out.get(), direct_adjoint(data, traj, matrix)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", MATRICES, ids=str)
@pytest.mark.parametrize("coils", [1, 3, 8, 9])
def test_forward_matches_exact_sum(rng, matrix, coils):
    cupy = cupy_module()
    traj, _ = random_problem(rng, matrix, 1, 700)
    image = (rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix))).astype(np.complex64)
    plan = gpu_nufft.GpuNufft(cupy.asarray(traj), matrix)
    out = plan.forward(cupy.asarray(image), out=poisoned((coils, 700)))
    assert relative(out.get(), direct_forward(image, traj)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(64, 48), (24, 20, 18)], ids=str)
@pytest.mark.parametrize("subproblem", [16, 1024])
@pytest.mark.parametrize("spread", nufft_launch.SPREAD_METHODS)
def test_crowded_bins_and_coil_groups(rng, matrix, subproblem, spread):
    """Many samples per bin (split into subproblems), reach up to N (the PSF's), coils in groups of 2."""
    cupy = cupy_module()
    traj, data = random_problem(rng, matrix, 5, 4000, reach=1.0)
    traj[:200] *= 0.05  # a dense centre, as radial trajectories have
    plan = gpu_nufft.GpuNufft(traj, matrix, subproblem=subproblem, max_group=2, spread=spread)
    assert plan.n_subproblems >= 1
    out = plan.adjoint(cupy.asarray(data), out=poisoned((5, *matrix)))
    assert relative(out.get(), direct_adjoint(data, traj, matrix)) < TOL
    image = out.get()
    fwd = plan.forward(cupy.asarray(image), out=poisoned((5, 4000)))
    assert relative(fwd.get(), direct_forward(image, traj)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(16, 16), (9, 7), (8, 6, 5), (7, 5, 3)], ids=str)
def test_one_sample_and_the_nyquist_edge(rng, matrix):
    cupy = cupy_module()
    n = np.asarray(matrix, dtype=np.float32)
    corners = np.array([n / 2, -n / 2, n, -n, np.zeros_like(n), n / 2 * np.float32(0.999999)], dtype=np.float32)
    for traj in (corners[:1], corners):
        data = (rng.standard_normal((2, len(traj))) + 1j * rng.standard_normal((2, len(traj)))).astype(np.complex64)
        plan = gpu_nufft.GpuNufft(traj, matrix)
        out = plan.adjoint(cupy.asarray(data), out=poisoned((2, *matrix)))
        assert relative(out.get(), direct_adjoint(data, traj, matrix)) < TOL
        image = out.get()
        fwd = plan.forward(cupy.asarray(image), out=poisoned((2, len(traj))))
        assert relative(fwd.get(), direct_forward(image, traj)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(20, 15), (9, 8, 7)], ids=str)
def test_adjointness(rng, matrix):
    cupy = cupy_module()
    traj, y = random_problem(rng, matrix, 3, 900)
    x = (rng.standard_normal((3, *matrix)) + 1j * rng.standard_normal((3, *matrix))).astype(np.complex64)
    plan = gpu_nufft.GpuNufft(traj, matrix)
    fx = plan.forward(cupy.asarray(x)).get()
    fhy = plan.adjoint(cupy.asarray(y)).get()
    assert fx.shape == y.shape and fhy.shape == x.shape
    assert adjoint_gap(x, fhy, y, fx) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(12, 10), (9, 7), (6, 5, 4)], ids=str)
def test_psf_matches_exact_sum(rng, matrix):
    traj, _ = random_problem(rng, matrix, 1, 600)
    weights = rng.random(600).astype(np.float32)
    p = gpu_nufft.psf(traj, weights, matrix)
    big = tuple(2 * n for n in matrix)
    j = np.stack(np.meshgrid(*[np.arange(m) for m in big], indexing="ij"), axis=-1).reshape(-1, len(matrix))
    r = (j - np.asarray(matrix)) / np.asarray(matrix)
    cycles = traj.astype(np.float64) @ r.T
    exact = (weights.astype(np.float64) @ np.exp(2j * np.pi * (cycles - np.rint(cycles)))).reshape(big)
    assert relative(p.get(), exact) < TOL


@pytest.mark.gpu
def test_plan_is_reused_with_fresh_data(rng):
    cupy = cupy_module()
    matrix = (30, 26)
    traj, _ = random_problem(rng, matrix, 1, 800)
    plan = gpu_nufft.GpuNufft(traj, matrix)
    for coils in (4, 2, 4):
        _, data = random_problem(rng, matrix, coils, 800)
        out = plan.adjoint(cupy.asarray(data))
        assert relative(out.get(), direct_adjoint(data, traj, matrix)) < TOL


@pytest.mark.gpu
def test_errors_name_what_is_wrong(rng):
    cupy = cupy_module()
    matrix = (16, 16)
    traj, data = random_problem(rng, matrix, 2, 50)
    with pytest.raises(TrajectoryUnitsError, match="cycles per field of view"):
        gpu_nufft.GpuNufft(traj * 40, matrix)
    bad = traj.copy()
    bad[3, 1] = np.nan
    with pytest.raises(InvalidDataError, match="NaN or Inf"):
        gpu_nufft.GpuNufft(bad, matrix)
    with pytest.raises(SchemaError, match=r"trajectory must have shape \(M, 2\)"):
        gpu_nufft.GpuNufft(traj[:, :1], matrix)
    with pytest.raises(SchemaError, match="trajectory must be float32"):
        gpu_nufft.GpuNufft(traj.astype(np.float64), matrix)
    with pytest.raises(InvalidDataError, match="no samples"):
        gpu_nufft.GpuNufft(traj[:0], matrix)
    with pytest.raises(InvalidDataError, match="bins must be 2 positive sizes"):
        gpu_nufft.GpuNufft(traj, matrix, bins=(0, 8))
    with pytest.raises(InvalidDataError, match="unknown spreading method 'fast'"):
        gpu_nufft.GpuNufft(traj, matrix, spread="fast")
    with pytest.raises(InvalidDataError, match="warps must lie in"):
        gpu_nufft.GpuNufft(traj, matrix, warps=9)
    plan = gpu_nufft.GpuNufft(traj, matrix)
    with pytest.raises(DeviceError, match="must be a CuPy array"):
        plan.adjoint(data)
    with pytest.raises(SchemaError, match="kspace must be complex64"):
        plan.adjoint(cupy.asarray(data[:, :10]))
    with pytest.raises(SchemaError, match="image must be complex64"):
        plan.forward(cupy.zeros((2, 16, 15), dtype=np.complex64))
    with pytest.raises(SchemaError, match="PSF weights must be real"):
        gpu_nufft.psf(traj, data[0], matrix)
