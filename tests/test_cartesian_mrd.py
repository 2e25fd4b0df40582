"""Cartesian MRD files (acquisitions without trajectory) and stack-of-stars MRD with kz in encode_step_2."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import relative

import mri_recon
from mri_recon.cli import main
from mri_recon.errors import InvalidDataError, SchemaError
from mri_recon.io import load_scan, load_scans
from mri_recon.io.cartesian import remove_oversampling
from mri_recon.io.cartesian_write import write_cartesian_ismrmrd
from mri_recon.prep.cartesian_maps import acs_region, cartesian_coil_maps
from mri_recon.sim.cartesian import cartesian_kspace, undersampling_mask
from mri_recon.sim.phantom import shepp_logan_image
from mri_recon.solvers.sparse import sparse_names


def _centred_ifft(k: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """The float64 inverse FFT of centred k-space (index N // 2 at k = 0) onto centred voxels."""
    k = np.asarray(k, dtype=np.complex128)
    return np.fft.fftshift(np.fft.ifftn(np.fft.ifftshift(k, axes=axes), axes=axes), axes=axes)


def _random_kspace(rng, shape) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _rss(images: np.ndarray) -> np.ndarray:
    return np.sqrt((np.abs(images) ** 2).sum(axis=0))


@pytest.mark.parametrize("shape", [(2, 32, 24), (1, 17, 9)], ids=str)
def test_fully_sampled_2d_reconstructs_to_the_inverse_fft(tmp_path, shape):
    kspace = _random_kspace(np.random.default_rng(), shape)
    write_cartesian_ismrmrd(tmp_path / "c.h5", kspace[None])
    scan = load_scan(tmp_path / "c.h5")
    assert scan.attrs["sampling"] == "cartesian" and scan.matrix == shape[1:]
    result = mri_recon.reconstruct(scan, coil_maps="rss", lam=0.0, iterations=3, device="cpu")
    assert result.parameters["method"] == "fft"
    reference = _rss(_centred_ifft(kspace, (1, 2))) if shape[0] > 1 else _centred_ifft(kspace, (1, 2))[0]
    assert relative(result.image, reference) < 1e-5


@pytest.mark.parametrize("chunk", [2048, 5], ids=["one-chunk", "chunks-of-5"])
def test_readout_oversampling_is_removed_after_the_readout_fft(tmp_path, monkeypatch, chunk):
    import mri_recon.io.cartesian as cartesian_io  # noqa: PLC0415

    monkeypatch.setattr(cartesian_io, "CHUNK", chunk)
    rng = np.random.default_rng()
    n, coils = 16, 2
    kspace = _random_kspace(rng, (coils, 2 * n, 12))
    write_cartesian_ismrmrd(tmp_path / "os.h5", kspace[None], matrix=(n, 12))
    scan = load_scan(tmp_path / "os.h5")
    assert scan.matrix == (n, 12) and scan.attrs["readout_oversampling_removed"]
    result = mri_recon.reconstruct(scan, coil_maps="rss", lam=0.0, iterations=3, device="cpu")
    full = _centred_ifft(kspace, (1, 2))
    assert relative(result.image, _rss(full[:, n - n // 2:n - n // 2 + n])) < 1e-5
    line = kspace[0, :, 0]
    cropped = remove_oversampling(line[None], n)[0]  # crop of the readout image, back to k-space
    image = _centred_ifft(line[None], (1,))[0][n - n // 2:n - n // 2 + n]
    assert relative(_centred_ifft(cropped[None], (1,))[0], image) < 1e-6


def test_3d_cartesian_and_two_slices(tmp_path):
    rng = np.random.default_rng()
    volume = _random_kspace(rng, (2, 8, 6, 5))
    write_cartesian_ismrmrd(tmp_path / "v.h5", volume[None])
    scan = load_scan(tmp_path / "v.h5")
    assert scan.matrix == (8, 6, 5)
    result = mri_recon.reconstruct(scan, coil_maps="rss", lam=0.0, iterations=3, device="cpu")
    assert relative(result.image, _rss(_centred_ifft(volume, (1, 2, 3)))) < 1e-5
    slices = _random_kspace(rng, (2, 1, 10, 8))
    write_cartesian_ismrmrd(tmp_path / "s.h5", slices)
    scans = load_scans(tmp_path / "s.h5")
    assert [key["slice"] for key, _ in scans] == [0, 1]
    for (_, one), k in zip(scans, slices):
        image = mri_recon.reconstruct(one, coil_maps="rss", lam=0.0, iterations=3, device="cpu").image
        assert relative(image, _centred_ifft(k, (1, 2))[0]) < 1e-5


def test_partial_fourier_is_zero_filled_and_said_so(tmp_path, caplog):
    rng = np.random.default_rng()
    kspace = _random_kspace(rng, (1, 16, 32))
    lines = np.arange(32) >= 10  # 22 of 32 phase encodes: k from -6 to 15
    write_cartesian_ismrmrd(tmp_path / "pf.h5", kspace[None], lines=lines, readout=slice(5, 16))
    with caplog.at_level(logging.INFO, logger="mri_recon.io.cartesian"):
        scan = load_scan(tmp_path / "pf.h5")
    assert "zero-filled" in scan.attrs["partial_fourier"] and "partial Fourier" in caplog.text
    assert "encode step 1: k -6..15" in scan.attrs["partial_fourier"]
    assert "readout: k -3..7" in scan.attrs["partial_fourier"]
    _, record, result = mri_recon.api.prepare_and_reconstruct(scan, coil_maps="rss", lam=0.0, iterations=5,
                                                              device="cpu")
    assert record["partial_fourier"] == scan.attrs["partial_fourier"]
    filled = np.zeros_like(kspace)
    filled[:, 5:16, lines] = kspace[:, 5:16, lines]
    assert relative(result.image, _centred_ifft(filled, (1, 2))[0]) < 1e-5


def test_result_scales_with_the_data(tmp_path):
    kspace = cartesian_kspace((32, 32), 4)
    lines, acs = undersampling_mask(32, 2, 12)
    images = []
    for factor in (1.0, 2.0 ** 40 * 3.0):
        write_cartesian_ismrmrd(tmp_path / "x.h5", kspace[None] * np.float32(factor), lines=lines, acs=acs)
        scan = load_scan(tmp_path / "x.h5")
        images.append(mri_recon.reconstruct(scan, iterations=10, device="cpu").image / np.float32(factor))
    assert relative(images[1], images[0]) < 1e-5


def test_espirit_maps_from_the_acs_give_a_sense_image(tmp_path):
    n = 64
    kspace = cartesian_kspace((n, n), 6)
    lines, acs = undersampling_mask(n, 4, 24)
    write_cartesian_ismrmrd(tmp_path / "r4.h5", kspace[None], lines=lines, acs=acs)
    scan = load_scan(tmp_path / "r4.h5")
    result = mri_recon.reconstruct(scan, iterations=30, device="cpu")
    assert result.parameters["coil_maps"] == "espirit"
    truth = shepp_logan_image((n, n))
    zero_filled = _rss(_centred_ifft(kspace * lines[None, None], (1, 2)))

    def error(image):
        a = np.abs(image).astype(np.float64)
        return relative(a * (np.vdot(a, truth) / np.vdot(a, a)), truth)

    assert error(result.image) < 0.7 * error(zero_filled)


def test_acs_region_holds_the_samples_and_is_refused_without_one():
    rng = np.random.default_rng()
    n = 32
    kspace = _random_kspace(rng, (3, n, n))
    lines, _ = undersampling_mask(n, 4, 10)
    kx, ky = np.meshgrid(np.arange(n) - n // 2, np.arange(n) - n // 2, indexing="ij")
    keep = np.broadcast_to(lines[None, :], (n, n)).reshape(-1)
    traj = np.stack([kx.reshape(-1), ky.reshape(-1)], axis=1)[keep].astype(np.float32)
    data = kspace.reshape(3, -1)[:, keep]
    region = acs_region(data, traj, (n, n))
    assert region.shape == (3, 24, 10)  # the readout's 24, the 10 ACS lines
    assert relative(region, kspace[:, n // 2 - 12:n // 2 + 12, n // 2 - 5:n // 2 + 5]) < 1e-7
    sparse = undersampling_mask(n, 4, 0)[0]
    keep = np.broadcast_to(sparse[None, :], (n, n)).reshape(-1)
    traj = np.stack([kx.reshape(-1), ky.reshape(-1)], axis=1)[keep].astype(np.float32)
    with pytest.raises(InvalidDataError, match="no fully sampled calibration"):
        cartesian_coil_maps(kspace.reshape(3, -1)[:, keep], traj, (n, n), device="cpu")


def test_noise_acquisitions_prewhiten_cartesian_data(tmp_path):
    rng = np.random.default_rng()
    kspace = _random_kspace(rng, (2, 16, 16))
    mixing = np.array([[1.0, 0.0], [0.6, 0.3]], dtype=np.complex64)
    noise = mixing @ _random_kspace(rng, (2, 400))
    write_cartesian_ismrmrd(tmp_path / "n.h5", kspace[None], noise=noise)
    scan = load_scan(tmp_path / "n.h5")
    assert scan.noise.shape == (2, 400)
    _, record, _ = mri_recon.api.prepare_and_reconstruct(scan, coil_maps="rss", lam=0.0, iterations=3, device="cpu")
    assert record["prewhitened"]


def test_cartesian_refusals(tmp_path):
    rng = np.random.default_rng()
    import ismrmrd  # noqa: PLC0415

    kspace = _random_kspace(rng, (1, 8, 8))
    write_cartesian_ismrmrd(tmp_path / "r.h5", kspace[None])
    with ismrmrd.File(str(tmp_path / "r.h5"), "r+") as f:
        acquisitions = f["dataset"].acquisitions[:]
        acquisitions[2].set_flag(ismrmrd.ACQ_IS_REVERSE)
        del f["dataset"]["data"]
        f["dataset"].acquisitions = acquisitions
    with pytest.raises(InvalidDataError, match="reversed readouts"):
        load_scan(tmp_path / "r.h5")
    write_cartesian_ismrmrd(tmp_path / "fov.h5", kspace[None], fov_mm=(8.0, 8.0))
    with ismrmrd.File(str(tmp_path / "fov.h5"), "r+") as f:
        header = f["dataset"].header
        header.encoding[0].encodedSpace.fieldOfView_mm.y = 16.0
        f["dataset"].header = header
    with pytest.raises(InvalidDataError, match="phase oversampling is not supported"):
        load_scan(tmp_path / "fov.h5")


def test_cli_reconstructs_a_cartesian_file(tmp_path):
    kspace = cartesian_kspace((32, 32), 2)
    write_cartesian_ismrmrd(tmp_path / "c.h5", kspace[None])
    out = tmp_path / "out.h5"
    run = CliRunner().invoke(main, ["reconstruct", str(tmp_path / "c.h5"), "-o", str(out), "-q", "--device", "cpu"])
    assert run.exit_code == 0, run.output
    import h5py  # noqa: PLC0415

    with h5py.File(out) as f:
        assert f.attrs["param_method"] == "fft" and f.attrs["param_coil_maps"] == "espirit"


# ------------------------------------------------------------------------------------------------------
# Stack of stars: a 2-D radial trajectory per acquisition, the partition in kspace_encode_step_2


def _write_stack_of_stars(path, scan, partitions: int, columns: int) -> None:
    """The 3-D stack-of-stars scan as MRD: ``columns`` 2 (kz from encode_step_2) or 3 (kz stored)."""
    import ismrmrd  # noqa: PLC0415

    from mri_recon.io.ismrmrd_write import write_ismrmrd  # noqa: PLC0415

    write_ismrmrd(path, scan, samples_per_readout=scan.attrs["samples"])
    if columns == 3:
        return
    with ismrmrd.File(str(path), "r+") as f:
        old = f["dataset"].acquisitions[:]
        new = []
        for acq in old:
            if acq.is_flag_set(ismrmrd.ACQ_IS_NOISE_MEASUREMENT):
                new.append(acq)
                continue
            traj = acq.traj
            part = int(round(float(traj[0, 2]))) + partitions // 2 if partitions > 1 else 0
            fresh = ismrmrd.Acquisition.from_array(acq.data, np.ascontiguousarray(traj[:, :2]),
                                                   center_sample=acq.center_sample)
            fresh.idx.kspace_encode_step_1 = acq.idx.kspace_encode_step_1
            fresh.idx.kspace_encode_step_2 = part
            new.append(fresh)
        header = f["dataset"].header
        header.encoding[0].encodingLimits.kspace_encoding_step_2 = ismrmrd.xsd.limitType(
            minimum=0, maximum=partitions - 1, center=partitions // 2)
        del f["dataset"]["data"]
        f["dataset"].acquisitions = new
        f["dataset"].header = header


def test_stack_of_stars_with_partitions_in_encode_step_2_is_3d(tmp_path):
    from mri_recon.sim.simulate import simulate_scan  # noqa: PLC0415

    scan = simulate_scan((16, 16, 8), trajectory="stack-of-stars", coils=2, snr=np.inf, seed=1)
    _write_stack_of_stars(tmp_path / "three.h5", scan, 8, 3)
    _write_stack_of_stars(tmp_path / "two.h5", scan, 8, 2)
    three, two = load_scan(tmp_path / "three.h5"), load_scan(tmp_path / "two.h5")
    assert two.matrix == (16, 16, 8) and two.attrs["partitions"] == "kspace_encode_step_2"
    assert relative(two.trajectory, three.trajectory) < 1e-7
    assert relative(two.kspace, three.kspace) == 0.0
    image_two = mri_recon.reconstruct(two, coil_maps="rss", dcf="none", iterations=5, device="cpu").image
    image_three = mri_recon.reconstruct(three, coil_maps="rss", dcf="none", iterations=5, device="cpu").image
    assert relative(image_two, image_three) < 1e-6


def test_stack_of_stars_needs_several_partitions(tmp_path):
    from mri_recon.sim.simulate import simulate_scan  # noqa: PLC0415

    scan = simulate_scan((16, 16, 4), trajectory="stack-of-stars", coils=1, snr=np.inf, seed=2)
    _write_stack_of_stars(tmp_path / "flat.h5", scan, 1, 2)
    with pytest.raises(SchemaError, match="needs its partitions in kspace_encode_step_2"):
        load_scan(tmp_path / "flat.h5")


@pytest.mark.gpu
def test_gpu_cartesian_reconstruction_matches_the_cpu(tmp_path):
    kspace = cartesian_kspace((64, 64), 4)
    lines, acs = undersampling_mask(64, 4, 24)
    write_cartesian_ismrmrd(tmp_path / "g.h5", kspace[None], lines=lines, acs=acs)
    scan = load_scan(tmp_path / "g.h5")
    cpu = mri_recon.reconstruct(scan, iterations=20, device="cpu")
    gpu = mri_recon.reconstruct(scan, iterations=20, device="gpu")
    assert gpu.parameters["method"] == "fft" and str(gpu.device).startswith("gpu")
    assert relative(gpu.image, cpu.image) < 1e-4
    for regularizer in sparse_names():
        cpu = mri_recon.reconstruct(scan, iterations=10, device="cpu", regularizer=regularizer)
        gpu = mri_recon.reconstruct(scan, iterations=10, device="gpu", regularizer=regularizer)
        assert relative(gpu.image, cpu.image) < 1e-3


def test_3d_undersampled_with_an_acs_box_reconstructs_with_espirit(tmp_path):
    n = (24, 24, 20)
    kspace = cartesian_kspace(n, 4)
    ky, kz = np.meshgrid(np.arange(n[1]) - n[1] // 2, np.arange(n[2]) - n[2] // 2, indexing="ij")
    acs = (np.abs(ky + 0.5) < 6) & (np.abs(kz + 0.5) < 6)  # 12 x 12 fully sampled centre
    lines = acs | ((ky % 2 == 0) & (kz % 2 == 0))
    write_cartesian_ismrmrd(tmp_path / "v.h5", kspace[None], lines=lines, acs=acs)
    scan = load_scan(tmp_path / "v.h5")
    region = acs_region(scan.kspace, scan.trajectory, scan.matrix)
    assert region.shape == (4, 16, 12, 12)
    result = mri_recon.reconstruct(scan, iterations=20, device="cpu")
    assert result.parameters["coil_maps"] == "espirit" and result.image.shape == n
    truth = shepp_logan_image(n)
    zero_filled = _rss(_centred_ifft(kspace * lines[None, None], (1, 2, 3)))

    def error(image):
        a = np.abs(image).astype(np.float64)
        return relative(a * (np.vdot(a, truth) / np.vdot(a, a)), truth)

    assert error(result.image) < error(zero_filled)


def test_sense_on_the_image_grid_equals_the_exact_engine(tmp_path):
    kspace = cartesian_kspace((24, 20), 4)
    lines, acs = undersampling_mask(20, 2, 10)
    write_cartesian_ismrmrd(tmp_path / "s.h5", kspace[None], lines=lines, acs=acs)
    scan = load_scan(tmp_path / "s.h5")
    from mri_recon.sim.phantom import coil_maps  # noqa: PLC0415

    given = scan.replace(coil_maps=coil_maps((24, 20), 4))
    for regularizer in ("l2", "tv"):
        fft = mri_recon.reconstruct(given, iterations=15, device="cpu", regularizer=regularizer)
        exact = mri_recon.reconstruct(given, iterations=15, device="cpu", regularizer=regularizer, method="exact")
        assert fft.parameters["method"] == "fft" and exact.parameters["method"] == "exact"
        assert relative(fft.image, exact.image) < 1e-4
