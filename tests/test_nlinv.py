"""NLINV: the model's derivative and adjoint, maps against the true sensitivities, scale, the CLI, BART.

The maps are compared with the true sensitivities per voxel by ``|<S, T>| / (|S| |T|)`` (1 when they are
equal up to one complex factor per voxel: the phase NLINV leaves in the image, the norm the
normalization sets) inside the object; images by the NRMSE of their magnitudes after the best scalar fit.
"""

from __future__ import annotations

import functools
import math
import shutil
import subprocess

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import mri_recon
from mri_recon.arrays.backend import cupy_module
from mri_recon.cli import main
from mri_recon.errors import InvalidDataError
from mri_recon.io import load_scan
from mri_recon.io.cfl import read_cfl
from mri_recon.operators.engines.nudft import nudft_forward
from mri_recon.pipeline import reconstruct
from mri_recon.prep import cartesian_maps
from mri_recon.prep.coilmaps import estimate_coil_maps
from mri_recon.prep.nlinv import NlinvModel, nlinv, sobolev_weights, toeplitz_spectrum
from mri_recon.scan import Scan
from mri_recon.sim import phantom, trajectories
from mri_recon.sim.cartesian import cartesian_kspace, cartesian_trajectory, undersampling_mask
from mri_recon.sim.dynamic import simulate_series
from mri_recon.sim.simulate import simulate_scan
from mri_recon.solvers.cg import inner

BART = shutil.which("bart")
MATRIX, COILS, SPOKES = (64, 64), 8, 24


@functools.cache
def _radial():
    """Noise-free analytic k-space of the coil-weighted phantom on few golden-angle spokes (no inverse crime)."""
    traj = trajectories.radial(MATRIX, SPOKES, golden=True)
    kspace = phantom.coil_kspace(traj, MATRIX, COILS).astype(np.complex64)
    return traj, kspace, phantom.coil_maps(MATRIX, COILS), phantom.shepp_logan_image(MATRIX)


def _complex(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _correlation(estimate, truth):
    num = np.abs(np.sum(np.conj(estimate) * truth, axis=0))
    return num / np.maximum(np.linalg.norm(estimate, axis=0) * np.linalg.norm(truth, axis=0), 1e-30)


def _nrmse(image, truth, mask):
    a, b = np.abs(image[mask]), np.abs(truth[mask])
    return float(np.linalg.norm(a * (a @ b) / (a @ a) - b) / np.linalg.norm(b))


def _model(rng, matrix=(12, 10), coils=3):
    traj = ((rng.random((300, len(matrix))) - 0.5) * np.array(matrix)).astype(np.float32)
    return NlinvModel(toeplitz_spectrum(traj, matrix, "cpu"), matrix, coils), traj


# --------------------------------------------------------------------------------------------------------
# The model


def test_sobolev_weights_are_one_at_the_centre_and_fall_with_the_frequency():
    w = sobolev_weights((8, 6))
    k2 = np.fft.fftfreq(8)[:, None] ** 2 + np.fft.fftfreq(6)[None, :] ** 2
    np.testing.assert_allclose(w, (1 + 220 * k2) ** -16, rtol=1e-6)
    assert w[0, 0] == 1 and w.dtype == np.float32


def test_the_derivative_is_the_bilinear_models_first_order_term(rng):
    """G(x + e dx) = G(x) + e DG[dx] + e^2 drho dc exactly: rho c_j is bilinear in (rho, chat)."""
    model, _ = _model(rng)
    x, dx = _complex(rng, model.size), _complex(rng, model.size)
    e = np.float32(0.25)
    _, dchat = model.split(dx)
    second = model.split(dx)[0] * model.sensitivities(dchat)
    expected = model.coil_images(x) + e * model.derivative(x, dx) + e * e * second
    got = model.coil_images(x + e * dx)
    assert np.linalg.norm(got - expected) <= 1e-5 * np.linalg.norm(got)
    central = (model.coil_images(x + e * dx) - model.coil_images(x - e * dx)) / (2 * e)
    assert np.linalg.norm(central - model.derivative(x, dx)) <= 1e-5 * np.linalg.norm(central)


def test_the_derivatives_adjoint_satisfies_the_inner_product_identity(rng):
    model, _ = _model(rng)
    x, dx = _complex(rng, model.size), _complex(rng, model.size)
    u = _complex(rng, (model.coils, *model.matrix))
    lhs, rhs = inner(model.derivative(x, dx), u), inner(dx, model.derivative_adjoint(x, u))
    bound = np.linalg.norm(model.derivative(x, dx)) * np.linalg.norm(u)
    assert abs(lhs - rhs) <= 1e-5 * bound


def test_gauss_newton_operator_is_dg_h_dg_with_the_exact_encoding(rng):
    """<A D dy, A D dx> / prod(matrix) = <dy, (DG^H DG) dx> with A the exact NUDFT."""
    model, traj = _model(rng)
    x, dx, dy = (_complex(rng, model.size) for _ in range(3))
    encode = [
        nudft_forward(image.astype(np.complex128), traj) for image in (model.derivative(x, dx), model.derivative(x, dy))
    ]
    expected = np.vdot(encode[1], encode[0]) / math.prod(model.matrix)
    got = inner(dy, model.gauss_newton(x)(dx))
    assert abs(got - expected) <= 1e-4 * abs(expected)
    regularized = model.gauss_newton(x, 0.5)(dx) - model.gauss_newton(x)(dx)
    assert np.linalg.norm(regularized - 0.5 * dx) <= 1e-5 * np.linalg.norm(dx)


# --------------------------------------------------------------------------------------------------------
# Maps and images


def test_maps_from_few_spokes_span_the_true_sensitivities(rng):
    traj, kspace, truth, image = _radial()
    noisy, _ = phantom.add_noise(kspace, 30.0, rng)
    result = nlinv(noisy.astype(np.complex64), traj, MATRIX, device="cpu")
    inside = np.abs(image) > 0.05
    c = _correlation(result.maps, truth)[inside]
    assert c.mean() > 0.999 and c.min() > 0.99, (c.mean(), c.min())
    np.testing.assert_allclose(np.linalg.norm(result.maps, axis=0), 1.0, rtol=1e-5)
    assert result.residuals[-1] < 0.05 * result.residuals[0]
    assert _nrmse(result.image, image, inside) < 0.25
    a, b = np.abs(result.image[inside]), np.abs(image[inside])
    assert abs((a @ b) / (a @ a) - 1) < 0.05  # in the data's units


def test_cg_sense_with_nlinv_maps_is_as_good_as_with_the_true_maps(rng):
    traj, kspace, truth, image = _radial()
    noisy, _ = phantom.add_noise(kspace, 30.0, rng)
    scan = Scan(kspace=noisy, trajectory=traj, matrix=MATRIX)
    inside = np.abs(image) > 0.05
    errors = {}
    for name in ("true", "nlinv"):
        maps = truth if name == "true" else estimate_coil_maps(scan, "nlinv", device="cpu")
        result = reconstruct(scan.replace(coil_maps=maps), iterations=20, device="cpu", progress=False)
        errors[name] = _nrmse(result.image, image, inside)
    # The true maps are not smooth enough for the Sobolev basis at the object's edge: NLINV's fit better.
    assert errors["nlinv"] <= 1.1 * errors["true"] + 0.01, errors


@pytest.mark.parametrize("factor", [1e-20, 3.0, 1e20])
def test_maps_do_not_depend_on_the_datas_scale(factor):
    traj, kspace, _, _ = _radial()
    reference = nlinv(kspace, traj, MATRIX, device="cpu")
    scaled = nlinv((kspace * np.float32(factor)).astype(np.complex64), traj, MATRIX, device="cpu")
    assert np.linalg.norm(scaled.maps - reference.maps) <= 1e-3 * np.linalg.norm(reference.maps)
    difference = scaled.image / np.float32(factor) - reference.image
    assert np.linalg.norm(difference) <= 5e-3 * np.linalg.norm(reference.image)


def test_a_power_of_two_changes_nothing_but_the_images_scale():
    traj, kspace, _, _ = _radial()
    reference = nlinv(kspace, traj, MATRIX, device="cpu")
    scaled = nlinv(kspace * np.float32(2.0**-70), traj, MATRIX, device="cpu")
    np.testing.assert_array_equal(scaled.maps, reference.maps)
    np.testing.assert_array_equal(scaled.image * np.float32(2.0**70), reference.image)


def test_cartesian_maps_come_from_the_acs_region_alone():
    matrix = (48, 48)
    full = cartesian_kspace(matrix, 6)
    sampled, _ = undersampling_mask(matrix[1], 3, 20)
    keep = np.broadcast_to(sampled[None, :], matrix).reshape(-1)
    traj = cartesian_trajectory(matrix)[keep]
    maps = cartesian_maps.cartesian_coil_maps(full.reshape(6, -1)[:, keep], traj, matrix, "nlinv", device="cpu")
    truth, inside = phantom.coil_maps(matrix, 6), np.abs(phantom.shepp_logan_image(matrix)) > 0.05
    c = _correlation(maps, truth)[inside]
    assert maps.shape == truth.shape and c.mean() > 0.999, c.mean()
    with pytest.raises(InvalidDataError, match="no fully sampled calibration \\(ACS\\) region"):
        far = np.abs(traj[:, 1]) > 3
        cartesian_maps.cartesian_coil_maps(full.reshape(6, -1)[:, keep][:, far], traj[far], matrix, "nlinv")


def test_parameters_are_checked():
    traj, kspace, _, _ = _radial()
    with pytest.raises(
        InvalidDataError,
        match="nlinv needs steps >= 1, alpha > 0 and reduction >= 1, found steps=0, alpha=1.0, reduction=2.0",
    ):
        nlinv(kspace, traj, MATRIX, steps=0)
    with pytest.raises(InvalidDataError, match="nlinv needs data: the k-space is zero"):
        nlinv(np.zeros_like(kspace), traj, MATRIX, device="cpu")


# --------------------------------------------------------------------------------------------------------
# The command line


def test_the_command_line_reconstructs_with_nlinv_maps(tmp_path):
    scan_file, out = tmp_path / "scan.h5", tmp_path / "r.h5"
    made = CliRunner().invoke(
        main, ["simulate", str(scan_file), "--matrix", "48", "--coils", "4", "--spokes", "24", "--snr", "40", "--quiet"]
    )
    assert made.exit_code == 0, made.output
    result = CliRunner().invoke(
        main,
        [
            "reconstruct",
            str(scan_file),
            "-o",
            str(out),
            "--coil-maps",
            "nlinv",
            "--iterations",
            "15",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    import h5py  # noqa: PLC0415 - the output's reader, here only

    with h5py.File(out) as f:
        assert f.attrs["param_coil_maps"] == "nlinv"
        truth = load_scan(scan_file).ground_truth
        assert _nrmse(f["image"][()], truth, np.abs(truth) > 0.05) < 0.2


# --------------------------------------------------------------------------------------------------------
# BART


@pytest.mark.skipif(BART is None, reason="needs BART's command line (apt-get install bart)")
def test_image_is_at_least_as_close_to_the_phantom_as_barts_nlinv(tmp_path):
    """BART's radial phantom data (8 coils, 24 spokes, 64^2): both images against ``bart phantom``'s."""

    def bart(*args):
        subprocess.run([BART, *args], cwd=tmp_path, capture_output=True, check=True)

    bart("traj", "-r", "-x", "128", "-y", "24", "t")
    bart("scale", "0.5", "t", "traj")
    bart("phantom", "-k", "-s", "8", "-t", "traj", "ksp")
    bart("phantom", "-x", "64", "truth")
    bart("nlinv", "-t", "traj", "ksp", "theirs")
    traj = np.asarray(read_cfl(tmp_path / "traj")).reshape(3, -1, order="F").real.T[:, :2].astype(np.float32)
    ksp = np.asarray(read_cfl(tmp_path / "ksp"))
    kspace = ksp.reshape(-1, ksp.shape[3], order="F").T.astype(np.complex64)
    truth = np.asarray(read_cfl(tmp_path / "truth")).reshape(64, 64, order="F")
    theirs = np.asarray(read_cfl(tmp_path / "theirs")).reshape(64, 64, order="F")
    ours = nlinv(kspace, traj, (64, 64), device="cpu").image
    everywhere = np.ones(truth.shape, dtype=bool)
    assert _nrmse(ours, truth, everywhere) <= _nrmse(theirs, truth, everywhere)


# --------------------------------------------------------------------------------------------------------
# GPU


@pytest.mark.gpu
def test_gpu_matches_cpu():
    """The GPU takes the CPU's Gauss-Newton steps (the same CG iterations in each, its residuals within float32
    rounding of the sums), and NumPy inputs give it the bits of CuPy inputs."""
    cp = cupy_module()
    traj, kspace, truth, image = _radial()
    cpu = nlinv(kspace, traj, MATRIX, device="cpu")
    gpu = nlinv(cp.asarray(kspace), cp.asarray(traj), MATRIX, device="gpu")
    assert isinstance(gpu.maps, cp.ndarray)
    assert gpu.iterations == cpu.iterations
    np.testing.assert_allclose(gpu.residuals, cpu.residuals, rtol=1e-3, atol=1e-4)  # float32 sums: 1e-4 of |A^H y|
    assert cp.array_equal(nlinv(kspace, traj, MATRIX, device="gpu").maps, gpu.maps)
    inside = np.abs(image) > 0.05
    assert _correlation(cp.asnumpy(gpu.maps), cpu.maps)[inside].min() > 0.999
    assert _correlation(cp.asnumpy(gpu.maps), truth)[inside].mean() > 0.999


def test_tv_and_a_time_series_take_nlinv_maps():
    scan = simulate_scan((48, 48), "golden", coils=4, spokes=30, snr=40, seed=1).replace(coil_maps=None)
    truth = scan.ground_truth
    tv = mri_recon.reconstruct(scan, device="cpu", coil_maps="nlinv", regularizer="tv", progress=False)
    assert tv.parameters["coil_maps"] == "nlinv"
    assert _nrmse(tv.image, truth, np.abs(truth) > 0.05) < 0.2
    series = simulate_series((32, 32), frames=3, spokes_per_frame=13, coils=4)
    result = mri_recon.reconstruct(series, device="cpu", coil_maps="nlinv", temporal="tv", progress=False)
    assert result.parameters["coil_maps"] == "nlinv" and result.image.shape == (3, 32, 32)


def test_a_batch_and_the_server_reconstruct_with_nlinv_maps(tmp_path):
    """A batch writes what one call gives; the server sends what the command line writes."""
    from server_helpers import assert_same_images, make_scan, reference, running_server

    from mri_recon.batch import reconstruct_many
    from mri_recon.io import save_scan
    from mri_recon.server.client import send_scan

    scan = simulate_scan((24, 24), "golden", coils=4, spokes=16, snr=40.0, seed=5).replace(coil_maps=None)
    save_scan(tmp_path / "in.h5", scan)
    keywords = {"coil_maps": "nlinv", "iterations": 5, "device": "cpu"}
    report = reconstruct_many([tmp_path / "in.h5"], tmp_path / "out", cache_dir=str(tmp_path / "cache"), **keywords)
    assert report.ok and report.outcomes[0].status == "done"
    with h5py.File(report.outcomes[0].output) as f:
        assert f.attrs["coil_maps"] == "nlinv"
        assert np.array_equal(f["image"][()], mri_recon.reconstruct(load_scan(tmp_path / "in.h5"), **keywords).image)
    path = make_scan(tmp_path / "s.mrd.h5", 7)
    with running_server() as server:
        _, reply = send_scan(path, *server.address, settings='{"coil_maps": "nlinv"}')
    assert not reply.errors and len(reply.images) == 1
    assert_same_images(reply.images, reference(path, tmp_path, "--coil-maps", "nlinv"))
