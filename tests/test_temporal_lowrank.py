"""Low-rank temporal terms: singular value thresholding against a float64 SVD, the nuclear norms, blocks and
their shifts, a rank-K series recovered, ADMM and PDHG at one minimum, reproducibility, scale, the CLI and
the refusals of a batch and the server."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import mri_recon
from mri_recon.arrays.backend import cupy_module
from mri_recon.cli import main
from mri_recon.errors import InvalidDataError
from mri_recon.prep.frames import prepare_series
from mri_recon.result import magnitude_nrmse
from mri_recon.settings import ReconSettings, refuse_series_options
from mri_recon.sim import dynamic
from mri_recon.solvers import lowrank
from mri_recon.solvers.lowrank import (
    LocalLowRank,
    from_blocks,
    global_nuclear_norm,
    global_svt,
    svt,
    to_blocks,
)
from mri_recon.solvers.sparse import sparsity_of
from mri_recon.solvers.temporal import SeriesNormal, Term, joint_admm, joint_pdhg, series_objective
from mri_recon.solvers.temporal_terms import TEMPORAL_TERMS, GlobalLowRank, LocallyLowRank

LOW_RANK = ("lowrank", "llr")


def _complex(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _spread_matrix(rng, t, n, decades=6.0):
    """A ``t x n`` matrix with singular values spread log-uniformly over ``decades`` below 1."""
    k = min(t, n)
    u, _ = np.linalg.qr(_complex(rng, (n, k)))
    v, _ = np.linalg.qr(_complex(rng, (t, k)))
    return (v * 10.0 ** -np.linspace(0.0, decades, k)) @ u.conj().T


def _svt_oracle(m, t):
    """``U max(S - t, 0) V^H`` by a float64 SVD."""
    u, s, vh = np.linalg.svd(np.asarray(m, np.complex128), full_matrices=False)
    return (u * np.maximum(s - t, 0.0)) @ vh


@pytest.mark.parametrize("dtype, tolerance", [(np.complex64, 2e-6), (np.complex128, 1e-10)])
@pytest.mark.parametrize("shape", [(8, 300), (20, 64), (12, 5)], ids=["wide", "block", "tall"])
def test_svt_matches_a_float64_svd(rng, dtype, tolerance, shape):
    """Thresholds among singular values spread over six decades: the Gram route in float64 keeps float32's
    accuracy (the oracle is the SVD of the same rounded matrix)."""
    m = _spread_matrix(rng, *shape).astype(dtype)
    s = np.linalg.svd(m.astype(np.complex128), compute_uv=False)
    for t in (0.0, s[min(3, len(s) - 1)] * 0.7, s[-1] * 0.5, s[0] * 2):
        expected = _svt_oracle(m, t)
        out = svt(m, t)
        assert out.dtype == dtype and out.shape == m.shape
        assert np.linalg.norm(out - expected) <= tolerance * np.linalg.norm(m)


def test_svt_of_a_stack_is_each_matrix_alone(rng):
    m = _complex(rng, (5, 6, 16), np.complex64)
    out = svt(m, 0.8)
    for k in range(5):
        assert np.allclose(out[k], _svt_oracle(m[k], 0.8), rtol=0, atol=2e-6 * np.linalg.norm(m[k]))


def test_svt_in_groups_is_each_matrix_alone(rng, monkeypatch):
    """Many small blocks of many frames: the stack goes through in groups (their T x T temporaries bounded by
    the stack's size, the floor taken away), each matrix thresholded as if alone."""
    monkeypatch.setattr(lowrank, "SVT_TEMPORARIES", 0)
    m = _complex(rng, (100, 12, 5), np.complex64)
    out = svt(m, 0.8)
    for k in (0, 37, 99):
        assert np.allclose(out[k], _svt_oracle(m[k], 0.8), rtol=0, atol=2e-6 * np.linalg.norm(m[k]))


def test_the_llr_proximal_map_keeps_what_the_planner_counts(rng, monkeypatch):
    """The traced peak of one llr proximal map, in frames-sized arrays, is within what its ``splits`` give it
    beside the split's own triple, and does not grow with the number of frames (the T x T temporaries' fixed
    floor, a constant within the plan's headroom, taken away)."""
    import tracemalloc

    monkeypatch.setattr(lowrank, "SVT_TEMPORARIES", 0)

    term = LocallyLowRank()
    for frames in (8, 96):
        x = _complex(rng, (frames, 64, 64), np.complex64)
        prox = term.sparsity(x.shape).prox
        tracemalloc.start()
        prox(x, 0.1)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak <= (3 * (term.splits - 1) + 1) * x.nbytes, (frames, peak / x.nbytes)


def test_the_dual_step_is_the_projection_onto_the_spectral_ball(rng):
    """The primal-dual step ``y - prox(y, lam)`` (Moreau) is ``U min(S, lam) V^H``: spectral norm at most lam."""
    shape = (6, 5, 7)
    y = _complex(rng, shape)
    lam = np.linalg.svd(y.reshape(6, -1), compute_uv=False)[2]
    sparsity = GlobalLowRank().sparsity(shape)
    projected = y.copy()
    sparsity.project(projected, lam)
    u, s, vh = np.linalg.svd(y.reshape(6, -1), full_matrices=False)
    assert np.allclose(projected.reshape(6, -1), (u * np.minimum(s, lam)) @ vh, rtol=0, atol=1e-12)
    assert np.linalg.norm(projected.reshape(6, -1), 2) <= lam * (1 + 1e-12)
    # ADMM's fused update: z the prox at kx + u, u the remainder
    kx, u0, z = _complex(rng, shape), _complex(rng, shape), np.zeros(shape, complex)
    dual = u0.copy()
    sparsity.shrink(kx, dual, z, lam)
    assert np.allclose(z, global_svt(kx + u0, lam), rtol=0, atol=1e-12)
    assert np.allclose(dual, kx + u0 - z, rtol=0, atol=1e-12)


def test_nuclear_norms(rng):
    x = _complex(rng, (7, 13, 10))
    assert global_nuclear_norm(x) == pytest.approx(np.linalg.svd(x.reshape(7, -1), compute_uv=False).sum(), 1e-12)
    expected = 0.0  # blocks of 4 x 4 on the unshifted grid, the last ones partial (13 = 4 + 4 + 4 + 1, 10 = 4 + 4 + 2)
    for i in range(0, 13, 4):
        for j in range(0, 10, 4):
            block = x[:, i : i + 4, j : j + 4].reshape(7, -1)
            expected += np.linalg.svd(block, compute_uv=False).sum()
    assert LocalLowRank(4).penalty(x) == pytest.approx(expected, 1e-12)
    assert LocallyLowRank(4).sparsity(x.shape).norm(x) == pytest.approx(expected, 1e-12)


@pytest.mark.parametrize("shape", [(3, 8, 8), (2, 13, 10), (4, 5, 9, 7), (3, 1, 1)])
def test_blocks_tile_the_frames(rng, shape):
    x = _complex(rng, shape)
    blocks = to_blocks(x, 4)
    assert blocks.shape[1:] == (shape[0], 4 ** (len(shape) - 1))
    assert np.array_equal(from_blocks(blocks, shape, 4), x)
    assert np.linalg.norm(blocks) == pytest.approx(np.linalg.norm(x), 1e-14)  # the padding is zeros


def test_a_shifted_grid_thresholds_each_wrapped_block(rng):
    x = _complex(rng, (5, 11, 9))
    shift, t = (3, 6), 0.9
    expected = np.zeros_like(x)
    rolled = np.roll(x, shift, axis=(1, 2))
    for i in range(0, 11, 4):
        for j in range(0, 9, 4):
            block = rolled[:, i : i + 4, j : j + 4]
            expected[:, i : i + 4, j : j + 4] = _svt_oracle(block.reshape(5, -1), t).reshape(block.shape)
    expected = np.roll(expected, (-3, -6), axis=(1, 2))
    out = LocalLowRank(4).blockwise_svt(x, t, shift)
    assert np.allclose(out, expected, rtol=0, atol=1e-12)


def test_random_shifts_follow_the_seed(rng):
    x = _complex(rng, (4, 16, 16))
    first, again, other = LocalLowRank(8, seed=5), LocalLowRank(8, seed=5), LocalLowRank(8, seed=6)
    runs = [[p.prox(x, 2.0) for _ in range(6)] for p in (first, again, other)]
    assert all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1]))
    assert not all(np.array_equal(a, b) for a, b in zip(runs[0], runs[2]))
    assert not all(np.array_equal(runs[0][0], r) for r in runs[0][1:])  # the grid moves
    fixed = LocalLowRank(8, shifts=False)
    assert np.array_equal(fixed.prox(x, 2.0), LocalLowRank(8).fixed_prox(x, 2.0))


def _underdetermined(rng, frames, n, rank, rows):
    """Per frame a random ``rows x n^2`` encoding (rows < n^2), a rank-``rank`` series and noisy data: the
    dense normal operators, right-hand sides, the data energy and the truth."""
    truth = (_complex(rng, (frames, rank)) @ _complex(rng, (rank, n * n))).reshape(frames, n, n)
    normals, rhs, energy = [], [], 0.0
    for t in range(frames):
        a = _complex(rng, (rows, n * n)) / np.sqrt(rows)
        d = a @ truth[t].reshape(-1) + 0.01 * _complex(rng, rows)
        gram = a.conj().T @ a
        normals.append(lambda x, g=gram: (g @ x.reshape(-1)).reshape(x.shape).astype(x.dtype))
        rhs.append((a.conj().T @ d).reshape(n, n))
        energy += float(np.vdot(d, d).real)
    return normals, np.stack(rhs), energy, truth


def test_a_low_rank_series_is_recovered_better_than_frame_by_frame(rng):
    frames, n = 12, 6
    normals, rhs, energy, truth = _underdetermined(rng, frames, n, rank=2, rows=14)
    # frame by frame: each frame's minimum-norm least-squares solution
    alone = np.stack([np.linalg.pinv(_dense(op, n)) @ b.reshape(-1) for op, b in zip(normals, rhs)])
    alone = alone.reshape(truth.shape)
    scale = float(np.abs(rhs).max())
    # weights and bounds as measured on such draws (blocks of 3 x 3 voxels hold less of the rank than the whole)
    for term, lam, bound in ((GlobalLowRank(), 0.1, 0.5), (LocallyLowRank(block=3), 0.03, 0.75)):
        sparsity = term.sparsity(rhs.shape)
        x, history = joint_admm(
            normals,
            rhs,
            [Term(sparsity, lam * scale, 1.0)],
            rho=0.05 * scale,
            iterations=300,
            inner_iterations=3,
            data_energy=energy,
        )
        error, baseline = np.linalg.norm(x - truth), np.linalg.norm(alone - truth)
        assert error < bound * baseline, (term.name, error / np.linalg.norm(truth), baseline / np.linalg.norm(truth))
        assert history[-1] < history[1]


def _dense(op, n):
    return np.stack([op(e.reshape(n, n)).reshape(-1) for e in np.eye(n * n, dtype=complex)], axis=1)


@pytest.mark.parametrize("lam_s", [0.0, 0.05], ids=["lowrank", "lowrank+spatial-tv"])
def test_admm_and_pdhg_reach_one_minimum(rng, lam_s):
    frames, n = 5, 5
    normals, rhs, energy, _ = _underdetermined(rng, frames, n, rank=2, rows=20)
    scale = float(np.abs(rhs).max())
    terms = [Term(GlobalLowRank().sparsity(rhs.shape), 0.1 * scale, 1.0)]
    if lam_s:
        sparsity, _ = sparsity_of("tv", rhs.shape, 2)
        terms.append(Term(sparsity, lam_s * scale, 8.0))
    reference, _ = joint_pdhg(normals, rhs, terms, iterations=20000, data_energy=energy, check_every=20000)
    f_ref = series_objective(SeriesNormal(normals), reference, rhs, energy, terms)
    for _ in range(5):  # a minimum: random moves do not lower the objective
        moved = reference + 1e-3 * _complex(rng, rhs.shape)
        assert series_objective(SeriesNormal(normals), moved, rhs, energy, terms) >= f_ref - 1e-9 * abs(f_ref)
    admm, _ = joint_admm(
        normals,
        rhs.astype(np.complex64),
        terms,
        rho=0.5 * scale,
        iterations=1500,
        inner_iterations=3,
        data_energy=energy,
        check_every=500,
    )
    pdhg, _ = joint_pdhg(
        normals, rhs.astype(np.complex64), terms, iterations=5000, data_energy=energy, check_every=1000
    )
    for x in (admm, pdhg):
        assert np.linalg.norm(x - reference) / np.linalg.norm(reference) < 3e-3


@pytest.fixture(scope="module")
def small_series():
    raw = dynamic.simulate_series((32, 32), frames=8, spokes_per_frame=9, coils=4, snr=40, seed=3)
    ready, _ = prepare_series(raw, coil_maps="file")
    return raw, ready


@pytest.mark.parametrize("temporal", LOW_RANK)
def test_low_rank_beats_frame_by_frame_on_the_beating_phantom(small_series, temporal):
    raw, ready = small_series
    alone = mri_recon.reconstruct(ready, prepare=False, temporal="none", iterations=10, device="cpu")
    joint = mri_recon.reconstruct(ready, prepare=False, temporal=temporal, iterations=60, device="cpu")
    assert joint.image.shape == (8, 32, 32)
    assert magnitude_nrmse(joint.image, raw.ground_truth) < 0.8 * magnitude_nrmse(alone.image, raw.ground_truth)
    assert joint.parameters["temporal"] == temporal
    assert joint.parameters["temporal_lam"] == TEMPORAL_TERMS[temporal].lam_default


@pytest.mark.parametrize("solver", ["admm", "pdhg"])
def test_llr_is_reproducible(small_series, solver):
    _, ready = small_series
    runs = [
        mri_recon.reconstruct(
            ready, prepare=False, temporal="llr", temporal_solver=solver, iterations=15, device="cpu"
        ).image
        for _ in range(2)
    ]
    assert np.array_equal(runs[0], runs[1])


def test_the_block_size_is_the_users_and_only_llrs(small_series, tmp_path):
    """``temporal_block`` (``--temporal-block``) sets llr's blocks: one block as large as the frames is the
    global low rank (the same proximal map, fixed grid: PDHG); with another term it is refused by name."""
    _, ready = small_series
    common = {"prepare": False, "temporal_solver": "pdhg", "iterations": 15, "temporal_lam": 1.0, "device": "cpu"}
    whole = mri_recon.reconstruct(ready, temporal="llr", temporal_block=32, **common).image
    small = mri_recon.reconstruct(ready, temporal="llr", temporal_block=4, **common).image
    assert np.allclose(whole, mri_recon.reconstruct(ready, temporal="lowrank", **common).image, rtol=0,
                       atol=1e-5 * np.abs(whole).max())
    assert np.linalg.norm(small - whole) > 1e-2 * np.linalg.norm(whole)
    for temporal in ("tv", "lowrank"):
        refused = rf"temporal_block applies to temporal='llr', not temporal='{temporal}'"
        with pytest.raises(InvalidDataError, match=refused):
            mri_recon.reconstruct(ready, temporal=temporal, temporal_block=4, **common)


@pytest.mark.parametrize("temporal", LOW_RANK)
def test_scale_free(small_series, temporal):
    _, ready = small_series
    base = mri_recon.reconstruct(ready, prepare=False, temporal=temporal, iterations=20, device="cpu").image
    for factor in (1e-20, 1e20):
        scaled = ready.replace_frames([f.replace(kspace=f.kspace * np.complex64(factor)) for f in ready.frames])
        image = mri_recon.reconstruct(scaled, prepare=False, temporal=temporal, iterations=20, device="cpu").image
        assert np.linalg.norm(image / factor - base) / np.linalg.norm(base) < 1e-5, factor


def test_a_spatial_regularizer_joins_a_low_rank_term(small_series):
    raw, ready = small_series
    alone = mri_recon.reconstruct(ready, prepare=False, temporal="lowrank", iterations=30, device="cpu")
    both = mri_recon.reconstruct(
        ready, prepare=False, temporal="lowrank", regularizer="tv", lam=0.002, iterations=30, device="cpu"
    )
    assert both.parameters["regularizer"] == "tv" and both.parameters["temporal"] == "lowrank"
    assert np.linalg.norm(both.image - alone.image) > 1e-3 * np.linalg.norm(alone.image)
    assert magnitude_nrmse(both.image, raw.ground_truth) < 0.5


@pytest.mark.parametrize("temporal", LOW_RANK)
def test_cli_reconstructs_a_simulated_series(tmp_path, temporal):
    runner = CliRunner()
    scan = tmp_path / "s.mrd.h5"
    done = runner.invoke(
        main, ["simulate", str(scan), "--matrix", "24", "--coils", "3", "--frames", "4", "--spokes-per-frame", "7"]
    )
    assert done.exit_code == 0, done.output
    out = tmp_path / "r.h5"
    args = ["reconstruct", str(scan), "-o", str(out), "--temporal", temporal, "--iterations", "20", "--device", "cpu"]
    done = runner.invoke(main, [*args, "--temporal-solver", "pdhg", "--temporal-lambda", "0.5"])
    assert done.exit_code == 0, done.output
    assert "4 frames along repetition" in done.output
    with h5py.File(out) as f:
        assert f["image"].shape == (4, 24, 24) and f.attrs["param_temporal"] == temporal
        assert f.attrs["param_temporal_lam"] == 0.5 and np.all(np.isfinite(f["image"][()]))


@pytest.mark.parametrize("temporal", LOW_RANK)
def test_a_batch_and_the_server_refuse_them(temporal):
    from mri_recon.errors import InvalidDataError
    from mri_recon.server.config import ConfigError, client_keywords

    with pytest.raises(InvalidDataError, match="--temporal: a batch reconstructs images one by one"):
        refuse_series_options(ReconSettings(temporal=temporal), "a batch")
    with pytest.raises(ConfigError, match="joint temporal reconstruction .* is not streamed"):
        client_keywords({"temporal": temporal})


@pytest.mark.gpu
@pytest.mark.parametrize("temporal", LOW_RANK)
def test_gpu_proximal_maps_match_numpy(rng, temporal):
    cupy = cupy_module()
    x = _complex(rng, (10, 37, 29), np.complex64)
    sparsity = TEMPORAL_TERMS[temporal].sparsity(x.shape)
    again = TEMPORAL_TERMS[temporal].sparsity(x.shape)
    expected, out = sparsity.prox(x, 3.0), again.prox(cupy.asarray(x), 3.0)
    assert isinstance(out, cupy.ndarray) and out.dtype == np.complex64
    assert np.linalg.norm(cupy.asnumpy(out) - expected) <= 1e-5 * np.linalg.norm(expected)
    assert again.norm(cupy.asarray(x)) == pytest.approx(sparsity.norm(x), 1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("temporal", LOW_RANK)
def test_gpu_series_matches_numpy(small_series, temporal):
    _, ready = small_series
    cpu = mri_recon.reconstruct(ready, prepare=False, temporal=temporal, iterations=20, device="cpu").image
    gpu = mri_recon.reconstruct(ready, prepare=False, temporal=temporal, iterations=20, device="gpu").image
    assert np.linalg.norm(gpu - cpu) / np.linalg.norm(cpu) < 1e-3
