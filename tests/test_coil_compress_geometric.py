"""Geometric coil compression (``coil_compress_method="geometric"``, :mod:`mri_recon.prep.geometric`): the matrices
against an explicit-DFT oracle and against ``bart cc -G``, the compressed data as ``A(x)`` applied in hybrid space,
exactness of SENSE under a unitary per readout position, the quality kept on a 32-coil scan, scale freedom,
refusals, and every path: the API, the CLI, a batch, the server's settings, a time series and the device
preparation (its NumPy twin here, CuPy under the ``gpu`` marker)."""

from __future__ import annotations

import shutil
import subprocess

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from helpers import assert_same_preparation, relative, smallest_traced_peak
from scipy.linalg import subspace_angles

import mri_recon
from mri_recon import pipeline
from mri_recon.api import plan_prepared, prepare_and_reconstruct
from mri_recon.arrays.backend import CPU, cupy_module, resolve_device, to_host
from mri_recon.batch import reconstruct_many
from mri_recon.cli import main
from mri_recon.errors import InvalidDataError
from mri_recon.io.cartesian_write import write_cartesian_ismrmrd
from mri_recon.io.cfl import read_cfl, write_cfl
from mri_recon.io.cfl_cartesian import cartesian_scans
from mri_recon.io.frames import TimeSeries
from mri_recon.prep import prepare_scan
from mri_recon.prep.compress_methods import COMPRESSION_METHODS, compression_for
from mri_recon.prep.device import prepare_on_device
from mri_recon.prep.frames import prepare_series
from mri_recon.prep.geometric import GeometricCompression, calibration_hybrid
from mri_recon.prep.noise import noise_covariance, whitening_and_basis
from mri_recon.scan import Scan
from mri_recon.server.config import ConfigError, configured
from mri_recon.settings import ReconSettings
from mri_recon.sim.cartesian import undersampling_mask
from mri_recon.sim.phantom import shepp_logan, voxel_positions
from mri_recon.sim.simulate import simulate_scan

BART = shutil.which("bart")
FAST = {"device": "cpu", "iterations": 8}
GCC = {"coil_compress_method": "geometric"}


def ring_grid(n: int, coils: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(k-space (C, n, n) on the centred grid, maps (C, n, n), truth (n, n))``: the Shepp-Logan phantom seen by
    ``coils`` Gaussian coils (width 0.2 FOV) on a ring of radius 0.55 FOV, each with its own phase, noiseless."""
    rng = np.random.default_rng(seed)
    r = voxel_positions((n, n))
    angle = 2 * np.pi * np.arange(coils) / coils
    ring = 0.55 * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    maps = np.exp(-((r[None] - ring[:, None]) ** 2).sum(-1) / (2 * 0.2 ** 2))
    maps = (maps * np.exp(2j * np.pi * rng.random(coils))[:, None]).reshape(coils, n, n)
    truth = shepp_logan(r).reshape(n, n)
    images = np.fft.ifftshift(maps * truth, axes=(1, 2))
    kspace = np.fft.fftshift(np.fft.fftn(images, axes=(1, 2)), axes=(1, 2))  # F x of the engines, on the grid
    return kspace, maps, truth


def ring_scan(n: int = 32, coils: int = 12, acceleration: int = 2, acs: int = 12, noise: float = 2e-3,
              seed: int = 0) -> Scan:
    """A Cartesian scan of :func:`ring_grid`: every ``acceleration``-th phase encode and ``acs`` central ones,
    the readout (axis 0) complete, noise correlated across coils (whitening mixes them), samples shuffled."""
    rng = np.random.default_rng(seed)
    grid, maps, truth = ring_grid(n, coils, seed)
    lines, _ = undersampling_mask(n, acceleration, acs)
    kx, ky = np.meshgrid(np.arange(n), np.flatnonzero(lines), indexing="ij")
    shuffle = rng.permutation(kx.size)
    kx, ky = kx.reshape(-1)[shuffle], ky.reshape(-1)[shuffle]
    mix = np.eye(coils) + 0.3 * (rng.standard_normal((coils, coils)) + 1j * rng.standard_normal((coils, coils)))
    level = noise * np.abs(grid).max()

    def white(shape):
        return level * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))

    data = grid[:, kx, ky]
    return Scan(kspace=(mix @ (data + white(data.shape))).astype(np.complex64),
                trajectory=np.stack([kx - n // 2, ky - n // 2], axis=1).astype(np.float32), matrix=(n, n),
                coil_maps=(mix @ maps.reshape(coils, -1)).reshape(maps.shape).astype(np.complex64),
                noise=(mix @ white((coils, 2048))).astype(np.complex64), ground_truth=truth.astype(np.complex64),
                attrs={"sampling": "cartesian"}, source="ring")


@pytest.fixture(scope="module")
def scan():
    return ring_scan()


def _dft(n: int) -> np.ndarray:
    """The unitary centred DFT along a readout of ``n``: ``E[k, x] = exp(-2 pi i (k - n//2)(x - n//2) / n) / sqrt(n)``
    (k and x indices)."""
    c = np.arange(n) - n // 2
    return np.exp(-2j * np.pi * np.outer(c, c) / n) / np.sqrt(n)


def _lines(scan: Scan) -> tuple[np.ndarray, np.ndarray]:
    """``(k-space (C, L, X), phase index per line)`` of a scan of :func:`ring_scan` (one sample per frequency)."""
    n = scan.matrix[0]
    k = np.rint(scan.trajectory).astype(int) + n // 2
    phases = np.unique(k[:, 1])
    grid = np.zeros((scan.n_coils, len(phases), n), dtype=np.complex128)
    grid[:, np.searchsorted(phases, k[:, 1]), k[:, 0]] = scan.kspace
    return grid, phases - n // 2


def _oracle_vectors(scan: Scan, whitening: np.ndarray) -> np.ndarray:
    """Per readout position the left singular vectors (largest first) ``(X, C, C)`` of the whitened calibration
    box of :func:`ring_scan`'s default sampling (phase encodes -6..6, all sampled, -7 not; readout -12..11) zero-filled
    along the readout, by explicit DFT and ``numpy.linalg.svd``."""
    n = scan.matrix[0]
    grid, phases = _lines(scan)
    centre = grid[:, np.abs(phases) <= 6][:, :, n // 2 - 12:n // 2 + 12]
    padded = np.zeros((scan.n_coils, centre.shape[1], n), dtype=np.complex128)
    padded[:, :, n // 2 - 12:n // 2 + 12] = np.einsum("cd,dlk->clk", whitening, centre)
    hybrid = np.einsum("clk,kx->xcl", padded, _dft(n).conj())
    return np.linalg.svd(hybrid)[0]


def _angle(a, b) -> float:
    return float(subspace_angles(np.asarray(a), np.asarray(b)).max())


# --- the matrices -----------------------------------------------------------------------------------------------------


def test_each_position_s_matrix_spans_its_principal_subspace_and_is_aligned(scan):
    w, _ = whitening_and_basis(scan)
    oracle = _oracle_vectors(scan, w)
    for n in (2, 5, 8):
        found = compression_for(scan, n, "geometric", w)
        a = found.matrices
        assert isinstance(found, GeometricCompression) and a.shape == (32, n, 12) and found.box == (24, 13)
        assert found.samples == 13 and found.virtual == n
        assert np.allclose(a @ a.conj().transpose(0, 2, 1), np.eye(n), atol=1e-12)  # orthonormal rows per x
        assert max(_angle(a[x].conj().T, oracle[x][:, :n]) for x in range(32)) < 1e-6
        # aligned: each A(x) A(x-1)^H is Hermitian positive semidefinite (P = I solves the Procrustes problem)
        for x in range(1, 32):
            c = a[x] @ a[x - 1].conj().T
            assert np.allclose(c, c.conj().T, atol=1e-10) and np.linalg.eigvalsh(c).min() > -1e-10


def test_auto_keeps_svds_coils_and_at_least_svds_energy(scan):
    w, _ = whitening_and_basis(scan)
    found, svd = compression_for(scan, "auto", "geometric", w), compression_for(scan, "auto", "svd", w)
    assert 1 < found.virtual == svd.virtual < scan.n_coils
    held = [compression_for(scan, n, "geometric", w).energy for n in range(1, found.virtual + 1)]
    assert found.energy == held[-1] >= 0.99 and all(a < b for a, b in zip(held, held[1:]))


# --- the data ---------------------------------------------------------------------------------------------------------


def test_the_compressed_scan_is_a_of_x_applied_in_hybrid_space(scan):
    ready, record = prepare_scan(scan, coil_maps="file", coil_compress=5, **GCC)
    w, _ = whitening_and_basis(scan)
    a = compression_for(scan, 5, "geometric", w).matrices @ w  # A(x) W
    assert record["coil_compress"] == 5 and record["coil_compress_method"] == "geometric"
    assert "12 coils compressed to 5 virtual coils per readout position" in record["coil_compress_note"]
    grid, _ = _lines(scan)
    e = _dft(scan.matrix[0])
    oracle = np.einsum("kx,xnc,clj,jx->nlk", e, a, grid, e.conj())  # FFT . A(x) W . IFFT, line by line
    ours, _ = _lines(ready)
    assert relative(ours, oracle) < 1e-6
    maps = np.einsum("xnc,cxy->nxy", a, scan.coil_maps.astype(np.complex128))  # S'(x, y) = A(x) W S(x, y)
    assert relative(ready.coil_maps, maps) < 1e-6
    assert relative(ready.noise, a[16] @ scan.noise) < 1e-6  # the readout centre's matrix
    np.testing.assert_allclose(noise_covariance(ready.noise), np.eye(5), atol=1e-5)  # still white


@pytest.mark.parametrize("lines", [1, 7, 22, 23], ids=lambda n: f"{n}-lines")
def test_readouts_compressed_in_blocks_give_the_same_k_space(scan, monkeypatch, lines):
    """Blocks of one line, of a number that does not divide the 22 lines, of all of them and of more."""
    import mri_recon.prep.geometric as geometric

    found = compression_for(scan, 4, "geometric")
    whole = found.kspace(scan.kspace, scan.trajectory)
    monkeypatch.setattr(geometric, "LINE_BYTES", lines * scan.n_coils * 32 * 8)
    assert relative(found.kspace(scan.kspace, scan.trajectory), whole) < 1e-6


@pytest.mark.parametrize("maps", ["file", "rss"])
@pytest.mark.parametrize("prewhiten", [True, False])
def test_a_unitary_per_position_leaves_the_image_unchanged(scan, maps, prewhiten):
    """N = C: a unitary per readout position, under which SENSE with the file's maps and root-sum-of-squares (in
    the receiver basis ``L A(x)^H``) give the uncompressed image to float32 rounding."""
    q = np.linalg.qr(np.random.default_rng(1).standard_normal((32, 12, 12)) + 0j)[0]
    full = GeometricCompression(12, 12, q, asked=12)
    plain = mri_recon.reconstruct(scan, coil_maps=maps, prewhiten=prewhiten, **FAST).image
    ready, record = prepare_scan(scan, coil_maps=maps, prewhiten=prewhiten, coil_compress=full)
    image = pipeline.reconstruct(ready, estimate_maps=record["estimate_maps"], maps_basis=record["maps_basis"],
                                 **FAST).image
    assert relative(image, plain) < 1e-5


def test_as_many_coils_as_the_scan_has_change_nothing(scan):
    plain = mri_recon.reconstruct(scan, **FAST)
    _, record, same = prepare_and_reconstruct(scan, coil_compress=12, **GCC, **FAST)
    assert np.array_equal(same.image, plain.image) and record["coil_compress"] == 12
    assert "not compressed" in record["coil_compress_note"]


def test_one_virtual_coil_is_combined_in_the_receivers_scale(scan):
    rss = mri_recon.reconstruct(scan, coil_maps="rss", **FAST).image
    one = mri_recon.reconstruct(scan, coil_maps="rss", coil_compress=1, **GCC, **FAST)
    assert one.combine == "single" and relative(np.abs(one.image), np.abs(rss)) < 0.3


# --- quality and scale ------------------------------------------------------------------------------------------------


def test_32_coils_compressed_to_8_to_12_keep_the_nrmse_within_2_percent():
    from mri_recon.io.outputs import nrmse_vs_truth

    big = ring_scan(n=48, coils=32, acs=24, seed=3)

    def error(choice, method="svd"):
        _, record, result = prepare_and_reconstruct(big, device="cpu", coil_maps="file", coil_compress=choice,
                                                    coil_compress_method=method, iterations=20)
        return nrmse_vs_truth(result.image, big.ground_truth, result)[1], record

    full, _ = error("none")
    for n in (8, 10, 12):
        compressed, record = error(n, "geometric")
        assert record["coil_compress"] == n and compressed <= 1.02 * full, (n, compressed, full)


@pytest.mark.parametrize("prewhiten", [True, False])
def test_compression_does_not_depend_on_the_data_scale(scan, prewhiten):
    reference = prepare_and_reconstruct(scan, coil_compress="auto", prewhiten=prewhiten, **GCC, **FAST)
    for factor in (1e-20, 1e20):
        scaled = scan.replace(kspace=(scan.kspace * np.float32(factor)).astype(np.complex64),
                              noise=(scan.noise * np.float32(factor)).astype(np.complex64))
        _, record, result = prepare_and_reconstruct(scaled, coil_compress="auto", prewhiten=prewhiten, **GCC, **FAST)
        assert record["coil_compress"] == reference[1]["coil_compress"]
        assert record["coil_compress_energy"] == pytest.approx(reference[1]["coil_compress_energy"], rel=1e-9)
        assert relative(result.image.astype(np.complex128) / factor, reference[2].image) < 1e-5, factor


# --- refusals ---------------------------------------------------------------------------------------------------------


def test_a_non_cartesian_scan_is_refused_naming_the_option():
    radial = simulate_scan((24, 24), "golden", coils=4, spokes=12, seed=1)
    message = r"coil_compress_method geometric \(.*\) takes cartesian scans, and this one is non-cartesian; use " \
              r"coil_compress_method svd"
    with pytest.raises(InvalidDataError, match=message):
        prepare_scan(radial, coil_compress=2, **GCC)
    with pytest.raises(InvalidDataError, match=message):
        prepare_on_device(radial, CPU, coil_compress=2, **GCC)


def test_incomplete_readouts_are_refused(scan):
    where = r"needs every phase-encode line to hold all 32 readout frequencies .* use coil_compress_method svd"
    with pytest.raises(InvalidDataError, match=where):
        prepare_scan(scan.replace(kspace=scan.kspace[:, 1:], trajectory=scan.trajectory[1:]), coil_compress=4, **GCC)
    off = scan.trajectory.copy()
    off[:, 0] = off[:, 0] * 0.5  # readout frequencies half as far apart: two per grid step are missing
    with pytest.raises(InvalidDataError, match=r"integer frequencies|readout frequencies"):
        prepare_scan(scan.replace(trajectory=off, attrs={"sampling": "cartesian"}), coil_compress=4, **GCC)
    echo = scan.kspace.copy()
    echo[:, scan.trajectory[:, 0] < -10] = 0  # a partial echo, zero-filled
    with pytest.raises(InvalidDataError, match=r"readout frequencies k = -16..-11 are zero in every line and coil"):
        prepare_scan(scan.replace(kspace=echo), coil_compress=4, **GCC)


def test_more_coils_than_calibration_samples_and_no_centre_are_refused(scan):
    with pytest.raises(InvalidDataError, match=r"holds 13 phase-encode samples per readout position, fewer than "
                                               r"14 virtual coils"):
        prepare_scan(ring_scan(coils=16), coil_compress=14, **GCC)
    keep = scan.trajectory[:, 1] != 0
    with pytest.raises(InvalidDataError, match=r"needs a sampled k-space centre"):
        prepare_scan(scan.replace(kspace=scan.kspace[:, keep], trajectory=scan.trajectory[keep]), coil_compress=4,
                     **GCC)


@pytest.mark.parametrize(("keywords", "message"), [
    ({"coil_compress_method": "geometric"}, r"coil_compress_method 'geometric' chooses how coils are compressed, and "
                                            r"coil_compress is none"),
    ({"coil_compress": 4, "coil_compress_method": "gcc"}, r"coil_compress_method must be one of svd, geometric"),
    ({"coil_compress": "gcc"}, r"coil_compress 'gcc': the method is coil_compress_method='geometric'"),
    ({"coil_compress": "GCC:8"}, r"the method is coil_compress_method='geometric'"),
    ({"coil_compress": "geometric"}, r"the method is coil_compress_method='geometric'"),
    ({"coil_compress": "ecc"}, r"ESPIRiT-based compression \(ECC, bart cc -E\) is not implemented"),
], ids=str)
def test_bad_settings_are_refused_by_name(keywords, message):
    with pytest.raises(InvalidDataError, match=message):
        ReconSettings(**keywords)


def test_the_preparation_refuses_a_method_without_compression(scan):
    with pytest.raises(InvalidDataError, match=r"coil_compress_method must be svd or geometric, found 'pca'"):
        prepare_scan(scan, coil_compress=4, coil_compress_method="pca")
    for prepare in (prepare_scan, lambda s, **k: prepare_on_device(s, CPU, **k)):
        with pytest.raises(InvalidDataError, match=r"'geometric' chooses how coils are compressed"):
            prepare(scan, **GCC)


def test_a_field_map_to_correct_is_refused_and_one_ignored_is_not(scan):
    """The phase of off-resonance during the readout breaks compression along it; ignored, nothing is broken."""
    mapped = scan.replace(field_map=np.full(scan.matrix, 40.0, np.float32),
                          times=np.linspace(0, 2e-3, scan.n_samples, dtype=np.float32))
    for prepare in (prepare_scan, lambda s, **k: prepare_on_device(s, CPU, **k)):
        with pytest.raises(InvalidDataError, match=r"off-resonance during the readout"):
            prepare(mapped, coil_maps="file", coil_compress=5, **GCC)
        ready, record = prepare(mapped, coil_maps="file", coil_compress=5, field_map="ignore", **GCC)
        assert ready.n_coils == 5 and record["field_map"] == "ignored"


def test_unwhitened_noise_is_dropped_whitened_noise_stays_white(scan):
    """Unwhitened, the compressed noise's covariance ``A(x) Psi A(x)^H`` depends on the readout position that
    noise samples lack: no samples are kept. Whitened, any orthonormal rows keep them white."""
    raw, _ = prepare_scan(scan, prewhiten=False, coil_maps="file", coil_compress=5, **GCC)
    white, _ = prepare_scan(scan, coil_maps="file", coil_compress=5, **GCC)
    assert raw.noise is None and white.noise.shape[0] == 5
    covariance = noise_covariance(white.noise)
    assert relative(covariance, np.eye(5) * np.trace(covariance).real / 5) < 1e-5  # whitened by these samples


@pytest.mark.parametrize("method", ["svd", "geometric"])
def test_root_sum_of_squares_of_fewer_virtual_coils_keeps_the_image(scan, method):
    """Root-sum-of-squares images of N < C virtual coils, in the receivers' units, against the uncompressed."""
    full = mri_recon.reconstruct(scan, coil_maps="rss", **FAST).image
    fewer = mri_recon.reconstruct(scan, coil_maps="rss", coil_compress=8, coil_compress_method=method, **FAST).image
    assert fewer.shape == full.shape and relative(np.abs(fewer), np.abs(full)) < 0.05


def test_the_planner_counts_the_working_blocks_and_they_bound_the_traced_peak():
    """The compression stage of the plan holds GCC's working blocks besides SVD's arrays, and the blocks bound
    what applying the matrices allocates beyond the compressed k-space (tracemalloc), within a factor 2; the
    Python objects of the call (a few kB, which the plan of arrays does not count) are allowed 16 KiB."""
    scan = ring_scan(n=64, coils=16)
    w, _ = whitening_and_basis(scan)
    compression = compression_for(scan, 4, "geometric", w)
    out = compression.kspace(scan.kspace, scan.trajectory, w)  # first-use loads stay out of the traces
    peak = smallest_traced_peak(lambda: compression.kspace(scan.kspace, scan.trajectory, w)) - out.nbytes
    working = COMPRESSION_METHODS["geometric"].working(scan.n_coils, scan.n_samples)
    assert working / 2 < peak <= working + 16 * 1024
    svd, gcc = (plan_prepared(scan, device="cpu", coil_compress=4, coil_compress_method=method)[2]
                for method in ("svd", "geometric"))
    assert gcc.stages["compress"] - svd.stages["compress"] == working


# --- every path -------------------------------------------------------------------------------------------------------


def _mrd(path, seed: int = 0):
    """A Cartesian MRD file of :func:`ring_grid` (32x32, 12 coils, every other line and 12 ACS lines, noise)."""
    rng = np.random.default_rng(seed)
    grid, _, _ = ring_grid(32, 12, seed)
    lines, acs = undersampling_mask(32, 2, 12)
    level = 2e-3 * np.abs(grid).max()
    noisy = grid + level * (rng.standard_normal(grid.shape) + 1j * rng.standard_normal(grid.shape))
    write_cartesian_ismrmrd(path, noisy[None], lines=lines, acs=acs,
                            noise=level * (rng.standard_normal((12, 512)) + 1j * rng.standard_normal((12, 512))))
    return path


def test_the_cli_writes_what_the_api_gives(tmp_path):
    path, out = _mrd(tmp_path / "c.h5"), tmp_path / "r.h5"
    result = CliRunner().invoke(main, ["reconstruct", str(path), "-o", str(out), "--coil-compress", "4",
                                       "--coil-compress-method", "geometric", "--device", "cpu", "--iterations", "8"])
    assert result.exit_code == 0, result.output
    assert "12 coils compressed to 4 virtual coils per readout position" in result.output
    api = mri_recon.reconstruct(mri_recon.load_scan(path), coil_compress=4, **GCC, **FAST).image
    with h5py.File(out) as f:
        assert np.array_equal(f["image"][()], api)
        assert f.attrs["coil_compress"] == 4 and f.attrs["coil_compress_method"] == "geometric"
    refused = CliRunner().invoke(main, ["reconstruct", str(path), "-o", str(tmp_path / "x.h5"),
                                        "--coil-compress-method", "geometric", "--device", "cpu"])
    assert refused.exit_code != 0 and "coil_compress is none" in refused.output
    assert not (tmp_path / "x.h5").exists()


def test_a_batch_compresses_every_scan_and_refuses_a_radial_one(tmp_path):
    paths = [_mrd(tmp_path / f"in{i}.h5", seed=i) for i in range(2)]
    report = reconstruct_many(paths, tmp_path / "out", coil_compress=4, cache_dir=str(tmp_path / "cache"), **GCC,
                              **FAST)
    assert report.ok and [o.status for o in report.outcomes] == ["done"] * 2
    for path, outcome in zip(paths, report.outcomes):
        with h5py.File(outcome.output) as f:
            assert f.attrs["coil_compress_method"] == "geometric"
            single = mri_recon.reconstruct(mri_recon.load_scan(path), coil_compress=4, **GCC, **FAST).image
            assert np.array_equal(f["image"][()], single)
    from server_helpers import make_scan

    radial = make_scan(tmp_path / "radial.mrd.h5", 3)
    report = reconstruct_many([radial], tmp_path / "out2", coil_compress=2, cache_dir=str(tmp_path / "cache"), **GCC,
                              **FAST)
    assert not report.ok and "coil_compress_method geometric" in report.outcomes[0].reason


def test_a_client_chooses_the_method_by_the_option_s_name():
    base = ReconSettings(device="cpu")
    chosen = configured(base, [("text", '{"coil_compress": 6, "coil-compress-method": "geometric"}')])
    assert chosen.coil_compress_method == "geometric" and chosen.coil_compress == 6
    with pytest.raises(ConfigError, match=r"coil_compress_method 'geometric' chooses how coils are compressed"):
        configured(base, [("text", '{"coil_compress_method": "geometric"}')])


def test_the_server_sends_what_reconstruct_writes(tmp_path):
    from server_helpers import assert_same_images, reference, running_server

    from mri_recon.server.client import send_scan

    path = _mrd(tmp_path / "s.mrd.h5")
    with running_server() as server:
        _, reply = send_scan(path, *server.address, settings='{"coil_compress": 3, "coil_compress_method": '
                                                             '"geometric"}')
    assert not reply.errors and len(reply.images) == 1
    assert_same_images(reply.images, reference(path, tmp_path, "--coil-compress", "3", "--coil-compress-method",
                                               "geometric"))


def test_a_time_series_is_compressed_with_one_set_of_matrices():
    frames = [ring_scan(acceleration=4, seed=s) for s in range(3)]
    frames = [f.replace(coil_maps=None, ground_truth=None, noise=frames[0].noise) for f in frames]
    series = TimeSeries(tuple(frames), "repetition", (0, 1, 2), source="series")
    ready, record = prepare_series(series, coil_compress=3, coil_maps="espirit", **GCC)
    averaged = series.averaged()
    w, _ = whitening_and_basis(averaged)
    shared = compression_for(averaged, 3, "geometric", w)
    assert record["coil_compress"] == 3 and record["coil_compress_method"] == "geometric"
    for raw, frame in zip(series.frames, ready.frames):
        assert relative(frame.kspace, shared.kspace(raw.kspace.astype(np.complex128), raw.trajectory, w)) < 1e-6
    assert record["maps_basis"].shape == (32, 12, 3)  # L A(x)^H per readout position


@pytest.mark.parametrize("virtual", [5, 40], ids=["5", "all"])
@pytest.mark.parametrize("maps", ["file", "espirit", "rss"])
def test_the_numpy_twin_compresses_as_prepare_scan(scan, maps, virtual):
    """Compressed to 5 coils, and asked for more than the scan has (every coil kept: the k-space and the scan's
    maps whitened after they went up)."""
    ready, record = prepare_on_device(scan, CPU, coil_maps=maps, coil_compress=virtual, **GCC)
    expected = prepare_scan(scan, coil_maps=maps, coil_compress=virtual, **GCC)
    assert_same_preparation(ready, record, *expected, 1e-10)


def test_every_method_is_reachable_from_the_settings():
    assert ReconSettings().coil_compress_method == next(iter(COMPRESSION_METHODS))
    for name in COMPRESSION_METHODS:
        assert ReconSettings(coil_compress=4, coil_compress_method=name).coil_compress_method == name


@pytest.mark.gpu
@pytest.mark.parametrize("maps", ["file", "espirit", "rss"])
def test_gpu_preparation_compresses_as_the_host(scan, maps):
    gpu = resolve_device("gpu")
    ready, record = prepare_on_device(scan, gpu, coil_maps=maps, coil_compress=5, **GCC)
    assert cupy_module().get_array_module(ready.kspace) is cupy_module()
    ref, ref_record = prepare_scan(scan, coil_maps=maps, coil_compress=5, **GCC)
    assert relative(to_host(ready.kspace), ref.kspace) < 1e-5
    if ref.coil_maps is not None:
        assert relative(to_host(ready.coil_maps), ref.coil_maps) < 1e-5
    assert record["coil_compress"] == ref_record["coil_compress"] == 5
    image = mri_recon.reconstruct(scan, device="gpu", coil_maps=maps, coil_compress=5, iterations=8, **GCC).image
    host = mri_recon.reconstruct(scan, device="cpu", coil_maps=maps, coil_compress=5, iterations=8, **GCC).image
    assert relative(np.abs(image), np.abs(host)) < 1e-3


# --- against BART -----------------------------------------------------------------------------------------------------


@pytest.mark.skipif(BART is None, reason="needs BART's command line (apt-get install bart)")
def test_the_subspaces_and_the_compressed_data_are_bart_cc_g(tmp_path):
    """``bart cc -G -M`` (its matrices per readout position, before alignment) spans our subspace at every
    position, and ``bart cc -G -p N`` (aligned) compresses the k-space as we do, up to one unitary of the N
    virtual coils (the phases of the eigenvectors at ``x = 0``, where both alignments start). A readout of 24: the
    calibration window is the whole readout for both (BART slides a shorter window to the most energy)."""
    cal = ring_scan(n=24, acceleration=4)  # a 12-line centre (BART's odd boxes sit one line lower than ours)
    k = np.rint(cal.trajectory).astype(int) + 12
    data = np.zeros((24, 24, 1, 12), dtype=np.complex64)
    data[k[:, 0], k[:, 1], 0] = cal.kspace.T
    write_cfl(tmp_path / "k", data)
    subprocess.run([BART, "cc", "-G", "-M", str(tmp_path / "k"), str(tmp_path / "m")], check=True, capture_output=True)
    theirs = np.asarray(read_cfl(tmp_path / "m")).reshape(24, 12, 12)  # (x, coil, virtual): columns
    scan = cartesian_scans("k", data.reshape(24, 24, 1, 12, *[1] * 12), None, None)[0][1]
    hybrid, _ = calibration_hybrid(scan.kspace, scan.trajectory, scan.matrix, None, "k")
    values = np.linalg.eigvalsh(hybrid @ hybrid.conj().transpose(0, 2, 1))[:, ::-1]
    for n in (2, 4, 6):
        ours = compression_for(scan, n, "geometric").matrices
        gap = (values[:, n - 1] - values[:, n]) / values[:, 0]  # float32's eigenvectors: eps / gap radians
        angles = np.array([_angle(theirs[x][:, :n], ours[x].conj().T) for x in range(24)])
        assert np.all(angles < np.maximum(1e-4, 1e-6 / gap)) and np.median(angles) < 1e-3, (n, angles, gap)
    subprocess.run([BART, "cc", "-G", "-p", "4", str(tmp_path / "k"), str(tmp_path / "c")], check=True,
                   capture_output=True)
    compressed = np.asarray(read_cfl(tmp_path / "c")).reshape(24, 24, 4)
    k = np.rint(scan.trajectory).astype(int) + 12
    bart = compressed[k[:, 0], k[:, 1]].T
    ours = compression_for(scan, 4, "geometric").kspace(scan.kspace, scan.trajectory)
    u, _, vh = np.linalg.svd(bart @ ours.conj().T)
    assert relative(bart, (u @ vh) @ ours) < 1e-3
