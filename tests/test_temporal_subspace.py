"""The subspace model of a time series (``temporal="subspace"``): the coefficients' normal operator against a
dense oracle, adjointness, exact recovery of frames in the subspace (given and estimated bases), the basis
files (.npy and BART's .cfl) and their checks, scale, the refusals, the command line, a batch and the server."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import adjoint_gap, relative

import mri_recon
from mri_recon.arrays.backend import cupy_module
from mri_recon.cli import main
from mri_recon.errors import InvalidDataError
from mri_recon.io.basis import orthonormal_basis, read_basis
from mri_recon.io.cfl import write_cfl
from mri_recon.io.frames import TimeSeries
from mri_recon.operators.engines.nudft import nudft_forward
from mri_recon.prep.frames import prepare_series
from mri_recon.prep.temporal_basis import estimate_basis
from mri_recon.scan import Scan
from mri_recon.settings import ReconSettings, refuse_series_options
from mri_recon.sim import dynamic
from mri_recon.solvers.cg import cg
from mri_recon.solvers.subspace import SubspaceNormal, expand, project
from mri_recon.solvers.temporal import SeriesNormal


def _complex(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _orthonormal(rng, t, k):
    q, _ = np.linalg.qr(_complex(rng, (t, k)))
    return q


def _dense_frames(rng, frames, n, rows):
    """One random ``rows x n^2`` encoding per frame: the frames' normal operators and their dense Gram
    matrices."""
    grams = []
    for _ in range(frames):
        a = _complex(rng, (rows, n * n)) / np.sqrt(rows)
        grams.append(a.conj().T @ a)
    normals = [lambda x, g=g: (g @ x.reshape(-1)).reshape(x.shape) for g in grams]
    return normals, grams


def test_the_coefficient_normal_operator_is_its_dense_oracle(rng):
    """``N_c[k, k'] = sum_t conj(Phi[t, k]) Phi[t, k'] G_t``, Hermitian and positive; ``Phi`` and ``Phi^H``
    adjoint."""
    frames, n, k = 6, 4, 3
    normals, grams = _dense_frames(rng, frames, n, rows=10)
    basis = _orthonormal(rng, frames, k)
    dense = np.block([[sum(np.conj(basis[t, i]) * basis[t, j] * grams[t] for t in range(frames))
                       for j in range(k)] for i in range(k)])
    operator = SubspaceNormal(SeriesNormal(normals), basis)
    c, other = _complex(rng, (k, n, n)), _complex(rng, (k, n, n))
    assert relative(operator(c).reshape(-1), dense @ c.reshape(-1)) < 1e-12
    assert adjoint_gap(c, operator(other), other, operator(c)) < 1e-14
    assert np.vdot(c, operator(c)).real > 0 and abs(np.vdot(c, operator(c)).imag) < 1e-12 * np.linalg.norm(c) ** 2
    x = _complex(rng, (frames, n, n))
    assert adjoint_gap(c, project(basis, x), x, expand(basis, c)) < 1e-14
    assert relative(project(basis, expand(basis, c)), c) < 1e-14  # orthonormal columns

    def twice(v, out, rho):  # out += rho K^H K v with K^H K = 2 I
        out += rho * 2.0 * v

    shifted = SubspaceNormal(SeriesNormal(normals), basis).with_penalty(0.7, twice)
    assert relative(shifted(c), operator(c) + 1.4 * c) < 1e-14


def test_cg_recovers_coefficients_from_enough_samples(rng):
    """Data made in the subspace, fewer samples per frame than voxels but more over all frames than
    coefficients: the one CG recovers the coefficients (complex64, as the pipeline solves)."""
    frames, n, k = 8, 5, 2
    normals, grams = _dense_frames(rng, frames, n, rows=12)  # 12 < 25 per frame, 96 > 50 in all
    basis = _orthonormal(rng, frames, k)
    truth = _complex(rng, (k, n, n))
    rhs = np.stack([(g @ x.reshape(-1)).reshape(n, n) for g, x in zip(grams, expand(basis, truth))])
    operator = SubspaceNormal(SeriesNormal(normals), basis.astype(np.complex64))
    c, residuals = cg(operator, project(basis, rhs).astype(np.complex64), max_iterations=200, tolerance=1e-6)
    assert residuals[-1] <= 1e-6
    assert relative(c, truth) < 1e-4


def _series_in_subspace(rng, frames=8, rank=2, matrix=16, coils=2, spokes=6, shared=False):
    """Noiseless frames ``x = Phi c`` of smooth images band-limited to a disc inside the spokes' reach, each
    frame's golden-angle spokes (the same spokes for every frame when ``shared``) through the exact transform
    with smooth maps."""
    axes = np.meshgrid(*[np.linspace(-1, 1, matrix)] * 2, indexing="ij")
    envelope = np.exp(-2 * (axes[0] ** 2 + axes[1] ** 2))
    images = np.stack([envelope * (1 + 0.5 * np.cos(np.pi * (i + 1) * axes[0] + i) * np.sin(np.pi * axes[1]))
                       for i in range(rank)])
    k = np.fft.fftfreq(matrix) * matrix
    disc = np.hypot(*np.meshgrid(k, k, indexing="ij")) < matrix / 2 - 2  # what the spokes sample densely
    images = np.fft.ifft2(np.fft.fft2(images) * disc)
    basis = _orthonormal(rng, frames, rank)
    truth = expand(basis, images * _complex(rng, (rank, 1, 1)))
    maps = np.stack([np.exp(1j * (c + 1) * axes[0]) * (1 + 0.3 * np.cos(c + axes[1])) for c in range(coils)])
    maps /= np.sqrt((np.abs(maps) ** 2).sum(0)).max()
    samples = 2 * matrix
    radius = (np.arange(samples) - samples // 2) * matrix / samples
    scans = []
    for t in range(frames):
        angles = np.pi * 0.618034 * (np.arange(spokes) + (0 if shared else t * spokes))
        trajectory = np.stack([np.cos(angles)[:, None] * radius, np.sin(angles)[:, None] * radius], -1)
        trajectory = trajectory.reshape(-1, 2).astype(np.float32)
        scans.append(Scan(kspace=nudft_forward(maps * truth[t], trajectory).astype(np.complex64),
                          trajectory=trajectory, matrix=(matrix, matrix)))
    series = TimeSeries(frames=tuple(scans), axis="readouts", labels=tuple(range(frames)),
                        coil_maps=maps.astype(np.complex64), ground_truth=truth.astype(np.complex64))
    return series, basis


def test_frames_in_the_subspace_are_recovered(rng, tmp_path):
    """Noiseless frames of rank 2 with their basis given (as a file): 6 spokes a frame, too few for a frame
    alone, are enough for the two coefficient images, and the frames come back to CG's tolerance."""
    series, basis = _series_in_subspace(rng)
    path = tmp_path / "basis.npy"
    np.save(path, basis * 3.0)  # the scale of the columns does not matter: orthonormalized
    common = {"prepare": False, "device": "cpu", "method": "exact", "iterations": 300, "tol": 1e-5}
    result = mri_recon.reconstruct(series, temporal="subspace", temporal_basis=str(path), **common)
    assert relative(result.image, series.ground_truth) < 2e-3
    assert result.parameters["temporal_rank"] == 2 and result.parameters["temporal_basis"] == str(path)
    assert result.iterations < 300
    alone = mri_recon.reconstruct(series, **common)
    assert relative(alone.image, series.ground_truth) > 10 * relative(result.image, series.ground_truth)


def test_frames_in_the_subspace_are_recovered_with_the_estimated_basis(rng):
    """Frames that share their spokes: their low-resolution images are exactly of rank 2, so the estimated
    basis spans the frames' and the frames come back."""
    series, _ = _series_in_subspace(rng, spokes=16, shared=True)
    result = mri_recon.reconstruct(series, prepare=False, device="cpu", method="exact", temporal="subspace",
                                   temporal_rank=2, iterations=300, tol=1e-5)
    assert relative(result.image, series.ground_truth) < 2e-3
    assert result.parameters["temporal_basis"] == "estimated (k-space centre, radius 4)"
    assert result.parameters["temporal_basis_energy"] == pytest.approx(1.0, abs=1e-6)


def test_the_estimate_spans_the_frames_of_shared_spokes(rng):
    series, basis = _series_in_subspace(rng, frames=7, rank=3, spokes=16, shared=True)
    estimated = estimate_basis([f.kspace for f in series.frames], [f.trajectory for f in series.frames],
                               series.matrix, 3, device="cpu")
    assert np.allclose(estimated.basis.conj().T @ estimated.basis, np.eye(3), atol=1e-12)
    assert np.linalg.norm(basis - estimated.basis @ (estimated.basis.conj().T @ basis)) < 1e-5
    assert estimated.energy == pytest.approx(1.0, abs=1e-9)
    one = estimate_basis([f.kspace for f in series.frames], [f.trajectory for f in series.frames],
                         series.matrix, 1, device="cpu")
    assert one.energy < 1 - 1e-3 and np.allclose(one.basis[:, 0], estimated.basis[:, 0])


@pytest.fixture(scope="module")
def small_series():
    raw = dynamic.simulate_series((32, 32), frames=8, spokes_per_frame=9, coils=4, snr=40, seed=3)
    ready, _ = prepare_series(raw, coil_maps="file")
    return raw, ready


@pytest.mark.parametrize("regularizer", ["l2", "tv"])
def test_scale_free(small_series, regularizer):
    _, ready = small_series
    common = {"prepare": False, "temporal": "subspace", "temporal_rank": 3, "iterations": 15, "device": "cpu",
              "regularizer": regularizer, "lam": 0.01 if regularizer == "tv" else None}
    base = mri_recon.reconstruct(ready, **common).image
    for factor in (1e-20, 1e20):
        scaled = ready.replace_frames([f.replace(kspace=f.kspace * np.complex64(factor)) for f in ready.frames])
        image = mri_recon.reconstruct(scaled, **common).image
        assert relative(image / factor, base) < 1e-5, factor


def test_a_spatial_regularizer_acts_on_the_coefficients(small_series):
    raw, ready = small_series
    common = {"prepare": False, "temporal": "subspace", "temporal_rank": 3, "device": "cpu"}
    plain = mri_recon.reconstruct(ready, iterations=20, **common)
    tv = mri_recon.reconstruct(ready, regularizer="tv", lam=0.01, iterations=40, **common)
    assert plain.parameters["solver"] == "cg" and tv.parameters["solver"] == "admm"
    assert tv.parameters["temporal_rank"] == 3 and tv.image.shape == (8, 32, 32)
    truth = raw.ground_truth
    assert relative(np.abs(tv.image), np.abs(truth)) < relative(np.abs(plain.image), np.abs(truth))


def test_a_bart_basis_is_read_as_bart_writes_it(rng, tmp_path):
    """``[1 1 1 1 1 T K]`` (``bart pics -B``): the same basis as the .npy of the (T, K) matrix."""
    basis = _orthonormal(rng, 5, 2).astype(np.complex64)
    write_cfl(tmp_path / "b", basis.reshape(1, 1, 1, 1, 1, 5, 2))
    np.save(tmp_path / "b.npy", basis)
    from_cfl, from_npy = read_basis(tmp_path / "b", 5), read_basis(tmp_path / "b.npy", 5)
    assert np.allclose(from_cfl, from_npy, atol=1e-15) and np.allclose(from_cfl, basis, atol=1e-6)
    assert np.allclose(read_basis(tmp_path / "b.cfl", 5, rank=1), from_cfl[:, :1], atol=1e-15)


def test_orthonormalization_keeps_the_span_and_the_order(rng):
    given = _complex(rng, (9, 3)) * np.array([1e-3, 1.0, 1e4])
    q = orthonormal_basis(given, 9)
    assert np.allclose(q.conj().T @ q, np.eye(3), atol=1e-12)
    assert np.allclose(q @ (q.conj().T @ given), given, rtol=0, atol=1e-10 * np.abs(given).max())
    assert np.allclose(q[:, 0] * np.vdot(q[:, 0], given[:, 0]), given[:, 0])  # column 0 keeps its direction
    assert np.vdot(q[:, 0], given[:, 0]).real > 0


@pytest.mark.parametrize("make, message", [
    (lambda rng: _complex(rng, (7, 2)), "7 rows .frames. for a series of 8 frames"),
    (lambda rng: np.ones((8, 2)), "columns are linearly dependent"),
    (lambda rng: np.zeros((8, 1)), "columns are linearly dependent"),
    (lambda rng: _complex(rng, (8, 9)), "9 basis functions for 8 frames"),
    (lambda rng: np.full((8, 2), np.nan), "not finite"),
    (lambda rng: np.zeros((8, 2, 2)), r"expected a \(T, K\) array"),
    (lambda rng: np.array(["a"] * 8), r"expected a \(T, K\) array"),
], ids=["frames", "dependent", "zero", "too-many", "nan", "3-d", "text"])
def test_a_basis_file_is_checked(rng, tmp_path, small_series, make, message):
    _, ready = small_series
    path = tmp_path / "basis.npy"
    np.save(path, make(rng))
    with pytest.raises(InvalidDataError, match=message):
        mri_recon.reconstruct(ready, prepare=False, temporal="subspace", temporal_basis=path, device="cpu")


def test_a_basis_file_is_data_only(tmp_path, small_series):
    _, ready = small_series
    path = tmp_path / "basis.npy"
    np.save(path, np.array([object()] * 8), allow_pickle=True)
    refused = r"not a NumPy \.npy file of numbers .*Python objects, which are not read$"
    with pytest.raises(InvalidDataError, match=refused):
        mri_recon.reconstruct(ready, prepare=False, temporal="subspace", temporal_basis=path, device="cpu")
    path.write_text("1 0\n0 1\n")  # text under a .npy name: NumPy's words would suggest allow_pickle
    with pytest.raises(InvalidDataError, match=refused) as refusal:
        mri_recon.reconstruct(ready, prepare=False, temporal="subspace", temporal_basis=path, device="cpu")
    assert "pickle" not in str(refusal.value)
    (tmp_path / "basis.txt").write_text("1 0\n0 1\n")
    with pytest.raises(InvalidDataError, match=r"expected a NumPy \.npy file or a BART \.cfl/\.hdr pair"):
        mri_recon.reconstruct(ready, prepare=False, temporal="subspace", temporal_basis=tmp_path / "basis.txt")
    write_cfl(tmp_path / "wrong", np.ones((8, 2), np.complex64))  # T along dimension 0
    with pytest.raises(InvalidDataError, match=r"a basis has T along dimension 5 \(TE\)"):
        mri_recon.reconstruct(ready, prepare=False, temporal="subspace", temporal_basis=tmp_path / "wrong")


@pytest.mark.parametrize("keywords, message", [
    ({"temporal": "tv", "temporal_rank": 2}, "temporal_rank applies to temporal='subspace', not temporal='tv'"),
    ({"temporal": "llr", "temporal_basis": "b.npy"}, "temporal_basis applies to temporal='subspace'"),
    ({"temporal": "subspace", "temporal_lam": 0.1}, "temporal_lam: temporal='subspace' has no temporal penalty"),
    ({"temporal": "subspace", "temporal_rank": 9}, "temporal_rank 9 exceeds the series' 8 frames"),
    ({"temporal": "subspace", "temporal_solver": "pdhg"}, "temporal_solver: a subspace time series with the l2"),
    ({"temporal": "subspace", "rho": 1.0}, "rho: a subspace time series with the l2 regularizer is solved by CG"),
], ids=["rank-tv", "basis-llr", "lam", "rank", "solver", "rho"])
def test_refusals(small_series, keywords, message):
    _, ready = small_series
    with pytest.raises(InvalidDataError, match=message):
        mri_recon.reconstruct(ready, prepare=False, device="cpu", **keywords)


def test_a_rank_beyond_the_files_basis_is_refused(rng, tmp_path, small_series):
    _, ready = small_series
    np.save(tmp_path / "b.npy", _orthonormal(rng, 8, 2))
    with pytest.raises(InvalidDataError, match="temporal_rank 3 exceeds the file's 2 basis functions"):
        mri_recon.reconstruct(ready, prepare=False, temporal="subspace", temporal_basis=tmp_path / "b.npy",
                              temporal_rank=3, device="cpu")


def test_a_single_scan_refuses_it(small_series):
    _, ready = small_series
    with pytest.raises(InvalidDataError, match="applies to a time series"):
        mri_recon.reconstruct(ready.frames[0].replace(coil_maps=ready.coil_maps), prepare=False,
                              temporal="subspace")


def test_cli_reconstructs_in_a_subspace(rng, tmp_path):
    runner = CliRunner()
    scan, basis = tmp_path / "s.mrd.h5", tmp_path / "basis.npy"
    done = runner.invoke(main, ["simulate", str(scan), "--matrix", "24", "--coils", "3", "--frames", "4",
                                "--spokes-per-frame", "7"])
    assert done.exit_code == 0, done.output
    np.save(basis, _orthonormal(rng, 4, 2))
    common = ["reconstruct", str(scan), "--temporal", "subspace", "--iterations", "20", "--device", "cpu"]
    for name, extra in (("rank", ["--temporal-rank", "3"]), ("file", ["--temporal-basis", str(basis)])):
        out = tmp_path / f"{name}.h5"
        done = runner.invoke(main, [*common, "-o", str(out), *extra])
        assert done.exit_code == 0, done.output
        with h5py.File(out) as f:
            assert f["image"].shape == (4, 24, 24) and f.attrs["param_temporal"] == "subspace"
            assert f.attrs["param_temporal_rank"] == (3 if name == "rank" else 2)
            assert np.all(np.isfinite(f["image"][()]))
    done = runner.invoke(main, [*common, "-o", str(basis), "--temporal-basis", str(basis)])
    assert done.exit_code != 0 and np.load(basis).shape == (4, 2)  # an input is never an output
    done = runner.invoke(main, [*common, "-o", str(tmp_path / "x.h5"), "--temporal-lambda", "0.1"])
    assert done.exit_code != 0 and "temporal_lam: temporal='subspace' has no temporal penalty" in done.output


@pytest.mark.parametrize("keywords", [{"temporal_rank": 3}, {"temporal_basis": "b.npy"}], ids=["rank", "basis"])
def test_a_batch_and_the_server_refuse_them(keywords):
    from mri_recon.server.config import ConfigError, client_keywords

    option = "--" + next(iter(keywords)).replace("_", "-")
    with pytest.raises(InvalidDataError, match=f"{option}: a batch reconstructs images one by one"):
        refuse_series_options(ReconSettings(**keywords), "a batch")
    with pytest.raises(ConfigError, match=f"unexpected keyword argument '{next(iter(keywords))}'"):
        client_keywords(keywords)


@pytest.mark.gpu
@pytest.mark.parametrize("regularizer", ["l2", "tv"])
def test_gpu_subspace_matches_numpy(small_series, regularizer):
    cupy_module()
    _, ready = small_series
    common = {"prepare": False, "temporal": "subspace", "temporal_rank": 3, "iterations": 20,
              "regularizer": regularizer, "lam": 0.01 if regularizer == "tv" else None}
    cpu = mri_recon.reconstruct(ready, device="cpu", **common)
    gpu = mri_recon.reconstruct(ready, device="gpu", **common)
    assert relative(gpu.image, cpu.image) < 1e-3
    assert gpu.parameters["temporal_basis"] == cpu.parameters["temporal_basis"]
