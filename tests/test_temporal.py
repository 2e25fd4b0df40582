"""The joint reconstruction in time: D_t, the solvers against a float64 reference, scale invariance, the planner,
the beating phantom, and the GPU against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import mri_recon
from mri_recon.errors import InvalidDataError, ResourceError
from mri_recon.pipeline import plan_series
from mri_recon.prep.frames import prepare_series
from mri_recon.result import magnitude_nrmse
from mri_recon.sim import dynamic, phantom
from mri_recon.solvers.cg import inner
from mri_recon.solvers.sparse import sparsity_of
from mri_recon.solvers.temporal import (
    SeriesNormal,
    Term,
    joint_admm,
    joint_pdhg,
    series_objective,
    time_difference,
    time_difference_adjoint,
)
from mri_recon.solvers.temporal_terms import TemporalTv


def reconstruct_series(series, **options):
    """The time series reconstructed jointly by default (temporal TV), as the tests below ask."""
    return mri_recon.reconstruct(series, **{"temporal": "tv", **options})


def time_term(shape):
    return TemporalTv().sparsity(shape)


def _complex(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("frames", [1, 2, 3, 17])
def test_time_difference_adjoint(frames):
    rng = np.random.default_rng(frames)
    x, q = _complex(rng, (frames, 5, 4)), _complex(rng, (frames - 1, 5, 4))
    dx = time_difference(x)
    assert dx.shape == q.shape
    left, right = inner(dx, q), inner(x, time_difference_adjoint(q))
    assert abs(left - right) <= 1e-12 * max(1.0, abs(left))
    # D_t^H D_t is the path-graph Laplacian: rows (1, -1), (-1, 2, -1), ..., (-1, 1)
    lap = np.diag(np.r_[1.0, 2.0 * np.ones(max(frames - 2, 0)), 1.0][:frames]) if frames > 1 else np.zeros((1, 1))
    lap -= np.diag(np.ones(frames - 1), 1) + np.diag(np.ones(frames - 1), -1)
    expected = np.tensordot(lap, x, axes=1)
    assert np.allclose(time_difference_adjoint(time_difference(x)), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("frames", [1, 2, 3, 17])
def test_fused_time_products_are_the_laplacian_and_the_adjoint(frames):
    """The ADMM products of the temporal TV term: ``b + rho D^H q`` and ``out += rho D^H D x``."""
    rng = np.random.default_rng(frames + 40)
    term = time_term((frames, 5, 4))
    x, b, q = _complex(rng, (frames, 5, 4)), _complex(rng, (frames, 5, 4)), _complex(rng, (frames - 1, 5, 4))
    difference = np.eye(frames - 1, frames, 1) - np.eye(frames - 1, frames)  # rows e_{t+1} - e_t
    out = _complex(rng, x.shape)
    expected = out + 0.7 * np.tensordot(difference.T @ difference, x, axes=1)
    term.add_gram(x, out, 0.7)
    assert np.allclose(out, expected, rtol=0, atol=1e-12)
    assert np.allclose(term.adjoint_rhs(b, q, 0.3), b + 0.3 * np.tensordot(difference.T, q, axes=1), rtol=0,
                       atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 3), (3, 7, 6), (17, 5, 3, 2)], ids=["2-frames", "3-frames", "17-frames-3d"])
def test_gpu_time_products_match_numpy(shape):
    """The one-kernel GPU products against NumPy's on fresh random complex64 frames; the adjoint's output is
    a new array (every element written), the Laplacian's adds to random values."""
    from mri_recon.arrays.backend import cupy_module

    cupy = cupy_module()
    rng = np.random.default_rng(sum(shape))
    term = time_term(shape)
    x, b = _complex(rng, shape, np.complex64), _complex(rng, shape, np.complex64)
    q, out = _complex(rng, (shape[0] - 1, *shape[1:]), np.complex64), _complex(rng, shape, np.complex64)
    want_rhs = b.astype(np.complex128) + 0.3 * time_difference_adjoint(q.astype(np.complex128))
    got_rhs = cupy.asnumpy(term.adjoint_rhs(cupy.asarray(b), cupy.asarray(q), 0.3))
    assert np.linalg.norm(got_rhs - want_rhs) / np.linalg.norm(want_rhs) < 1e-6
    want = out.astype(np.complex128) + 0.7 * time_difference_adjoint(time_difference(x.astype(np.complex128)))
    device_out = cupy.asarray(out)
    term.add_gram(cupy.asarray(x), device_out, 0.7)
    assert np.linalg.norm(cupy.asnumpy(device_out) - want) / np.linalg.norm(want) < 1e-6


def _problem(rng, frames=4, n=6, dtype=np.complex128):
    """A small dense problem: per-frame Hermitian positive definite N_t, right-hand sides b_t."""
    mats = []
    for _ in range(frames):
        a = _complex(rng, (2 * n * n, n * n))
        mats.append(a.conj().T @ a / (2 * n * n))

    def op(m):
        return lambda x: (m @ x.reshape(-1)).reshape(x.shape).astype(x.dtype)

    truth = np.cumsum(_complex(rng, (frames, n, n)) * (rng.random((frames, n, n)) < 0.2), axis=0)
    rhs = np.stack([(m @ t.reshape(-1)).reshape(n, n) for m, t in zip(mats, truth)]).astype(dtype)
    rhs += 0.05 * _complex(rng, rhs.shape, dtype)
    energy = float(sum(inner(t, (m @ t.reshape(-1)).reshape(n, n)).real for m, t in zip(mats, truth)))
    return [op(m) for m in mats], rhs, energy


def _terms(shape, lam_t, lam_s=0.0):
    terms = [Term(time_term(shape), lam_t, 4.0)]
    if lam_s:
        sparsity, _ = sparsity_of("tv", shape, 2)
        terms.append(Term(sparsity, lam_s, 8.0))
    return terms


@pytest.mark.parametrize("lam_s", [0.0, 0.05], ids=["temporal", "temporal+spatial"])
def test_solvers_match_float64_reference(lam_s):
    rng = np.random.default_rng(7)
    normals, rhs, energy = _problem(rng)
    terms = _terms(rhs.shape, 0.1, lam_s)
    reference, _ = joint_pdhg(normals, rhs, terms, iterations=20000, data_energy=energy, check_every=20000)
    f_ref = series_objective(SeriesNormal(normals), reference, rhs, energy, terms)
    # the reference is a minimum: random perturbations do not lower the objective
    for _ in range(5):
        moved = reference + 1e-3 * _complex(rng, rhs.shape)
        assert series_objective(SeriesNormal(normals), moved, rhs, energy, terms) >= f_ref - 1e-9 * abs(f_ref)
    for solve in ("admm", "pdhg"):
        if solve == "admm":
            x, history = joint_admm(normals, rhs.astype(np.complex64), terms, rho=0.5, iterations=600,
                                    inner_iterations=3, data_energy=energy, check_every=50)
        else:
            x, history = joint_pdhg(normals, rhs.astype(np.complex64), terms, iterations=3000, data_energy=energy,
                                    check_every=500)
        error = np.linalg.norm(x - reference) / np.linalg.norm(reference)
        assert error < 2e-3, (solve, error)
        # float32 iterates: once converged (PDHG by its first check) the objective moves by rounding only
        assert history[0] == 1.0 and history[-1] < history[1] * (1.0 + 1e-6) and history[1] <= 1.0 + 1e-6
        assert abs(history[-1] * energy - f_ref) <= 1e-4 * abs(f_ref)


@pytest.mark.parametrize("kind", ["temporal", "temporal+spatial", "lowrank"])
def test_admm_reports_the_objective_of_its_iterate(kind):
    """ADMM's objective comes from CG's carried residual (no product): at every check it is the objective of
    the iterate computed with the normal operator."""
    from mri_recon.solvers.temporal_terms import GlobalLowRank

    rng = np.random.default_rng(11)
    normals, rhs, energy = _problem(rng)
    if kind == "lowrank":
        terms = [Term(GlobalLowRank().sparsity(rhs.shape), 0.1 * float(np.abs(rhs).max()), 1.0)]
    else:
        terms = _terms(rhs.shape, 0.1, 0.05 if kind == "temporal+spatial" else 0.0)
    seen = []

    def callback(k, x, f):
        seen.append((f, series_objective(SeriesNormal(normals), x.astype(np.complex128), rhs, energy, terms)))

    _, history = joint_admm(normals, rhs.astype(np.complex64), terms, rho=0.5, iterations=40, inner_iterations=3,
                            data_energy=energy, check_every=5, callback=callback)
    assert len(seen) == 8 and [f for f, _ in seen] == list(history[1:])
    for reported, explicit in seen:
        assert abs(reported * energy - explicit) <= 1e-5 * abs(explicit), (reported * energy, explicit)


def test_joint_admm_zero_rhs_and_bad_settings():
    normals, rhs, energy = _problem(np.random.default_rng(1), frames=2, n=4)
    x, history = joint_admm(normals, np.zeros_like(rhs), _terms(rhs.shape, 0.1), rho=1.0, iterations=3,
                            inner_iterations=1, data_energy=energy)
    assert not np.any(x) and history == (1.0,)
    with pytest.raises(InvalidDataError, match="rho must be a positive"):
        joint_admm(normals, rhs, _terms(rhs.shape, 0.1), rho=0.0, iterations=3, inner_iterations=1, data_energy=1.0)
    with pytest.raises(InvalidDataError, match="at least one regularizer"):
        joint_pdhg(normals, rhs, [], iterations=3, data_energy=1.0)
    with pytest.raises(InvalidDataError, match="iterations must be >= 1"):
        joint_pdhg(normals, rhs, _terms(rhs.shape, 0.1), iterations=0, data_energy=1.0)


@pytest.fixture(scope="module")
def small_series():
    raw = dynamic.simulate_series((32, 32), frames=5, spokes_per_frame=9, coils=4, snr=40, seed=3)
    ready, _ = prepare_series(raw, coil_maps="file")
    return raw, ready


def test_temporal_tv_beats_frame_by_frame(small_series):
    raw, ready = small_series
    cg = reconstruct_series(ready, prepare=False, temporal="none", iterations=10, device="cpu")
    tv = reconstruct_series(ready, prepare=False, temporal="tv", iterations=60, device="cpu")
    assert cg.image.shape == tv.image.shape == (5, 32, 32)
    truth = raw.ground_truth
    assert magnitude_nrmse(tv.image, truth) < 0.8 * magnitude_nrmse(cg.image, truth)
    assert tv.parameters["solver"] == "admm" and cg.parameters["temporal"] == "none"
    assert cg.frames.labels == tv.frames.labels == tuple(range(5))


@pytest.mark.parametrize("factor", [1e-20, 3.7e-6, 1e15])
def test_scale_invariance(small_series, factor):
    _, ready = small_series
    base = reconstruct_series(ready, prepare=False, iterations=20, device="cpu")
    scaled = ready.replace_frames([f.replace(kspace=(f.kspace * np.complex64(factor))) for f in ready.frames])
    other = reconstruct_series(scaled, prepare=False, iterations=20, device="cpu")
    error = np.linalg.norm(other.image / factor - base.image) / np.linalg.norm(base.image)
    assert error < 1e-5
    weights = ready.replace_frames([f.replace(weights=f.weights * np.float32(8.5)) for f in ready.frames])
    again = reconstruct_series(weights, prepare=False, iterations=20, device="cpu")
    assert np.linalg.norm(again.image - base.image) / np.linalg.norm(base.image) < 1e-4


def test_planner_refuses_before_allocating(small_series, monkeypatch):
    """Frame by frame the series keeps every frame's spectrum and data; a joint solve also its splits: the one
    fits where the other is refused, before anything is prepared."""
    from mri_recon import pipeline

    raw, _ = small_series
    device, _, frame = plan_series(raw, "cpu", iterations=10, splits=1)
    assert not device.is_gpu and frame.coil_batch == raw.n_coils
    alone = pipeline._series_bytes(raw, False, 0)
    assert pipeline._series_bytes(raw, False, 1) - alone == 3 * 5 * 32 * 32 * 8  # a split, its dual and update
    # on a GPU also the replayed iteration's kept temporaries
    assert pipeline._series_bytes(raw, True, 1) - pipeline._series_bytes(raw, True, 0) == 6 * 5 * 32 * 32 * 8
    monkeypatch.setattr(pipeline, "host_memory_available", lambda: int(max(alone, frame.peak_bytes) / 0.9) + 4096)
    plan_series(raw, "cpu", iterations=10)  # frame by frame fits
    prepared = []
    monkeypatch.setattr("mri_recon.prep.frames.prepare_scan", lambda *a, **k: prepared.append(1))
    with pytest.raises(ResourceError, match="the time series needs .* of host memory .*5 frames"):
        reconstruct_series(raw, device="cpu", iterations=10)
    assert not prepared


def test_bad_choices(small_series):
    _, ready = small_series
    with pytest.raises(InvalidDataError, match="temporal must be one of"):
        reconstruct_series(ready, prepare=False, temporal="spline", device="cpu")
    with pytest.raises(InvalidDataError, match="temporal_solver must be one of"):
        reconstruct_series(ready, prepare=False, temporal_solver="fista", device="cpu")
    with pytest.raises(InvalidDataError, match="solver 'fista': a time series with a temporal term"):
        reconstruct_series(ready, prepare=False, regularizer="wavelet", solver="fista", device="cpu")
    with pytest.raises(InvalidDataError, match="temporal 'tv' applies to a time series"):
        mri_recon.reconstruct(ready.frames[0], temporal="tv", device="cpu")
    with pytest.raises(InvalidDataError, match="temporal_lam applies to a joint"):
        mri_recon.reconstruct(ready, prepare=False, temporal_lam=0.1, device="cpu")
    with pytest.raises(InvalidDataError, match="temporal_lam and temporal_solver apply to a joint"):
        mri_recon.reconstruct(ready, prepare=False, temporal_lam=0.1, temporal_solver="pdhg", device="cpu")
    with pytest.raises(InvalidDataError, match="^temporal_solver applies to a joint"):
        mri_recon.reconstruct(ready, prepare=False, temporal_solver="pdhg", device="cpu")
    with pytest.raises(InvalidDataError, match="not rss"):
        reconstruct_series(ready, coil_maps="rss", device="cpu")


def test_phantom_at_rest_is_shepp_logan():
    rng = np.random.default_rng(2)
    k = (rng.random((300, 2)) - 0.5) * 32
    assert np.allclose(dynamic.frame_kspace(k, (32, 32), 3, 0.0), phantom.coil_kspace(k, (32, 32), 3),
                       rtol=0, atol=1e-4 * np.abs(phantom.coil_kspace(k, (32, 32), 3)).max())
    assert np.array_equal(dynamic.frame_image((32, 32), 0.0), phantom.shepp_logan_image((32, 32)))
    moved = dynamic.frame_image((32, 32), 1.0)
    assert np.abs(moved - phantom.shepp_logan_image((32, 32))).max() > 0.1


def test_frame_kspace_is_the_frames_transform():
    """The exact k-space of a frame against the DFT of its rasterized image, at low frequencies."""
    matrix = (48, 48)
    rng = np.random.default_rng(4)
    k = (rng.random((64, 2)) - 0.5) * 4
    image = dynamic.frame_image(matrix, 0.7, oversample=8).astype(np.complex128)
    grid = np.stack(np.meshgrid(*[(np.arange(n) - n // 2) / n for n in matrix], indexing="ij"), -1).reshape(-1, 2)
    dft = np.exp(-2j * np.pi * k @ grid.T) @ image.reshape(-1)
    exact = dynamic.frame_kspace(k, matrix, 1, 0.7)[0]
    assert np.linalg.norm(exact - dft) / np.linalg.norm(dft) < 2e-2


def test_simulate_series_layout():
    series = dynamic.simulate_series((16, 16, 4), "stack-of-stars", frames=3, spokes_per_frame=5, coils=2, snr=None)
    assert series.n_frames == 3 and series.ground_truth.shape == (3, 16, 16, 4)
    assert all(f.n_samples == 5 * 4 * 32 for f in series.frames)
    assert series.frames[0].noise is None
    with pytest.raises(InvalidDataError, match="moving phantom is simulated on"):
        dynamic.simulate_series((16, 16), "spiral", frames=2, spokes_per_frame=3)


@pytest.mark.gpu
@pytest.mark.parametrize("solver", ["admm", "pdhg"])
@pytest.mark.parametrize("regularizer", ["l2", "tv"])
def test_gpu_matches_numpy(small_series, solver, regularizer):
    _, ready = small_series
    options = {"prepare": False, "iterations": 30, "temporal_solver": solver, "regularizer": regularizer,
               "lam": 0.01 if regularizer == "tv" else None, "method": "exact"}
    cpu = reconstruct_series(ready, device="cpu", **options)
    gpu = reconstruct_series(ready, device="gpu", **options)
    assert gpu.device.startswith("gpu")
    assert np.linalg.norm(gpu.image - cpu.image) / np.linalg.norm(cpu.image) < 1e-4


@pytest.mark.gpu
def test_gpu_admm_iterations_replayed_as_a_graph_give_the_eager_frames(small_series, monkeypatch):
    """On a GPU the iterations without a check are one captured CUDA graph, replayed: the frames and the
    objectives are those of the same iterations launched one by one."""
    from mri_recon.solvers import temporal

    _, ready = small_series
    options = {"prepare": False, "iterations": 30, "method": "exact", "device": "gpu"}
    captures, original = [], temporal.capture_keeping

    def counted(xp, work):
        captures.append(original(xp, work))
        return captures[-1]

    monkeypatch.setattr(temporal, "capture_keeping", counted)
    replayed = reconstruct_series(ready, **options)
    assert len(captures) == 1 and captures[0] is not None
    monkeypatch.setattr(temporal, "capture_keeping", lambda xp, work: None)
    eager = reconstruct_series(ready, **options)
    assert np.array_equal(replayed.image, eager.image)
    assert replayed.residuals == eager.residuals


@pytest.mark.gpu
def test_gpu_joint_admm_dense_against_numpy():
    from mri_recon.arrays.backend import cupy_module

    cupy = cupy_module()
    normals, rhs, energy = _problem(np.random.default_rng(9), frames=3, n=8, dtype=np.complex64)
    terms = _terms(rhs.shape, 0.1, 0.05)
    x_cpu, _ = joint_admm(normals, rhs, terms, rho=0.5, iterations=50, inner_iterations=2, data_energy=energy)
    gpu_normals = [lambda x, op=op: cupy.asarray(op(cupy.asnumpy(x))) for op in normals]
    x_gpu, _ = joint_admm(gpu_normals, cupy.asarray(rhs), terms, rho=0.5, iterations=50, inner_iterations=2,
                          data_energy=energy)
    assert np.linalg.norm(cupy.asnumpy(x_gpu) - x_cpu) / np.linalg.norm(x_cpu) < 1e-4


def test_right_hand_side_groups_cover_the_frames_within_their_bytes():
    """A time series' right-hand side takes its frames in consecutive groups, each within FRAME_GROUP_BYTES
    (coil images and three copies of the samples per frame) unless one frame alone is more."""
    from types import SimpleNamespace

    from mri_recon.stages import work

    frames = [SimpleNamespace(kspace=np.empty((8, m), np.complex64)) for m in (100, 5000, 3, 70000, 1, 2000)]
    matrix, coil_batch = (64, 64), 4
    image = 8 * coil_batch * 64 * 64
    for limit in (1, image + 3 * 8 * 8 * 5000, 10 * image, 1 << 40):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(work, "FRAME_GROUP_BYTES", limit)
            groups = work.frame_groups(tuple(frames), matrix, coil_batch)
        assert [t for g in groups for t in g] == list(range(len(frames)))
        for group in groups:
            need = sum(image + 3 * 8 * frames[t].kspace.size for t in group)
            assert len(group) == 1 or need <= limit
        if limit == 1 << 40:
            assert len(groups) == 1


@pytest.mark.parametrize("batch", [None, 1, 2])
def test_batched_normal_matches_per_frame(small_series, batch):
    from mri_recon.operators.engines import choose_engine
    from mri_recon.operators.normal.toeplitz import kernel_spectrum, normal_operator
    from mri_recon.solvers.temporal import BatchedSeriesNormal

    _, ready = small_series
    _, engine = choose_engine("cpu", "exact")
    spectra = np.stack([kernel_spectrum(engine(f.trajectory, f.matrix, f.n_coils).psf(f.weights))
                        for f in ready.frames])
    rng = np.random.default_rng(11)
    x = _complex(rng, (ready.n_frames, *ready.matrix), np.complex64)
    per_frame = SeriesNormal([normal_operator(s, coil_maps=ready.coil_maps, lam=0.3) for s in spectra])(x)
    batched = BatchedSeriesNormal(spectra, ready.coil_maps, lam=0.3, frame_batch=batch)(x)
    assert np.linalg.norm(batched - per_frame) / np.linalg.norm(per_frame) < 1e-5
    rhs = _complex(rng, x.shape, np.complex64)
    terms = _terms(rhs.shape, 0.05 * float(np.abs(rhs).max()))
    lists = joint_admm([normal_operator(s, coil_maps=ready.coil_maps) for s in spectra], rhs, terms, rho=1.0,
                       iterations=8, inner_iterations=2, data_energy=1.0)[0]
    joint = joint_admm(BatchedSeriesNormal(spectra, ready.coil_maps, frame_batch=batch), rhs, terms, rho=1.0,
                       iterations=8, inner_iterations=2, data_energy=1.0)[0]
    assert np.linalg.norm(joint - lists) / np.linalg.norm(lists) < 1e-4


def test_simulate_scan_with_frames_is_a_series():
    series = mri_recon.simulate_scan((16, 16), frames=3, spokes_per_frame=4, coils=2, snr=None)
    assert series.n_frames == 3 and series.ground_truth.shape == (3, 16, 16)
    assert all(f.n_samples == 4 * 32 for f in series.frames)
    direct = dynamic.simulate_series((16, 16), frames=3, spokes_per_frame=4, coils=2, snr=None)
    assert all(np.array_equal(a.kspace, b.kspace) for a, b in zip(series.frames, direct.frames))


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [None, 1, 2])
def test_gpu_batched_normal_matches_numpy(small_series, batch):
    """The fused kernels of every frame batch (the last one shorter) against NumPy's products; the output
    poisoned first, so an element left unwritten fails."""
    from mri_recon.arrays.backend import cupy_module
    from mri_recon.operators.engines import choose_engine
    from mri_recon.operators.normal.toeplitz import kernel_spectrum
    from mri_recon.solvers.temporal import BatchedSeriesNormal

    cupy = cupy_module()
    _, ready = small_series
    _, engine = choose_engine("cpu", "exact")
    spectra = np.stack([kernel_spectrum(engine(f.trajectory, f.matrix, f.n_coils).psf(f.weights))
                        for f in ready.frames])
    x = _complex(np.random.default_rng(12), (ready.n_frames, *ready.matrix), np.complex64)
    cpu = BatchedSeriesNormal(spectra, ready.coil_maps, lam=0.2)(x)
    gpu = BatchedSeriesNormal(cupy.asarray(spectra), cupy.asarray(ready.coil_maps), lam=0.2, frame_batch=batch)
    out = cupy.full(x.shape, complex("nan+nanj"), dtype=cupy.complex64)
    gpu.apply_into(cupy.asarray(x), out)
    assert np.linalg.norm(cupy.asnumpy(out) - cpu) / np.linalg.norm(cpu) < 1e-5


def test_a_one_coil_series_is_in_the_receivers_units():
    """One coil and no maps, prewhitened: the frames equal each frame reconstructed as one scan."""
    raw = dynamic.simulate_series((24, 24), frames=3, spokes_per_frame=12, coils=1, snr=30, seed=6)
    raw = raw.replace_frames(raw.frames, coil_maps=None)
    series = mri_recon.reconstruct(raw, iterations=8, device="cpu")
    for t, frame in enumerate(raw.frames):
        alone = mri_recon.reconstruct(frame, iterations=8, device="cpu", dcf="pipe")
        assert np.linalg.norm(np.abs(series.image[t]) - np.abs(alone.image)) < 1e-4 * np.linalg.norm(alone.image)


def test_frames_the_pipeline_cannot_honour_are_refused(small_series):
    raw, ready = small_series
    mixed = ready.replace_frames([ready.frames[0].replace(weights=None), *ready.frames[1:]])
    with pytest.raises(InvalidDataError, match="some frames have density weights and others none"):
        mri_recon.reconstruct(mixed, prepare=False, device="cpu")
    fields = np.zeros(ready.matrix, dtype=np.float32)
    mapped = ready.replace_frames([f.replace(field_map=fields, times=np.zeros(f.n_samples, np.float32))
                                   for f in ready.frames])
    with pytest.raises(InvalidDataError, match="without off-resonance correction; its frames carry field maps"):
        mri_recon.reconstruct(mapped, prepare=False, device="cpu")
    raw_mapped = raw.replace_frames([f.replace(field_map=fields, times=np.zeros(f.n_samples, np.float32))
                                     for f in raw.frames])
    with pytest.raises(InvalidDataError, match="drop its field maps on purpose"):
        mri_recon.reconstruct(raw_mapped, device="cpu")
    assert mri_recon.reconstruct(raw_mapped, field_map="ignore", iterations=2, device="cpu").frames is not None


def test_a_joint_solve_runs_its_own_iterations_unless_given(small_series):
    from mri_recon.solvers.temporal import ITERATIONS_DEFAULT

    _, ready = small_series
    assert mri_recon.reconstruct(ready, prepare=False, temporal="tv", tol=0.0, device="cpu").iterations == \
        ITERATIONS_DEFAULT
    assert mri_recon.reconstruct(ready, prepare=False, temporal="tv", iterations=7, device="cpu").iterations == 7


def test_settings_a_series_cannot_take_are_refused_by_name(small_series):
    raw, ready = small_series
    with pytest.raises(InvalidDataError, match="anisotropic applies to total variation only"):
        reconstruct_series(ready, prepare=False, regularizer="wavelet", anisotropic=True, device="cpu")
    with pytest.raises(InvalidDataError, match="a PSF belongs to one trajectory"):
        reconstruct_series(ready, prepare=False, psf=np.zeros((64, 64), np.complex64), device="cpu")
    mapless = ready.replace_frames(ready.frames, coil_maps=None)
    with pytest.raises(InvalidDataError, match="a time series is reconstructed with coil maps: the series' own"):
        reconstruct_series(mapless, prepare=False, device="cpu")
    with pytest.raises(InvalidDataError, match="temporal_lam must be a finite number >= 0"):
        reconstruct_series(ready, prepare=False, temporal_lam=-1.0, device="cpu")
