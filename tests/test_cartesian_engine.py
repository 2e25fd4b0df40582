"""The FFT encoding engine of Cartesian samples against the float64 NumPy DFT (the oracle), on CPU and GPU."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import adjoint_gap, relative

from mri_recon.errors import InvalidDataError
from mri_recon.operators.engines import choose_engine, engine, nudft
from mri_recon.operators.engines.cartesian import (
    CartesianEncoding,
    GpuCartesianEncoding,
    cartesian_engine,
    is_cartesian,
)

SIZES = [(8, 6), (7, 5), (1, 9), (4, 5, 3), (16, 16)]


def _problem(rng, matrix, samples, batch=2, reach=1):
    """Integer frequencies in ``reach`` * [-N, N) (beyond the grid too: the DFT is periodic) and data."""
    k = np.stack([rng.integers(-reach * n, reach * n, samples) for n in matrix], axis=1).astype(np.float32)
    x = (rng.standard_normal((batch, *matrix)) + 1j * rng.standard_normal((batch, *matrix))).astype(np.complex64)
    y = (rng.standard_normal((batch, samples)) + 1j * rng.standard_normal((batch, samples))).astype(np.complex64)
    return k, x, y


@pytest.mark.parametrize("matrix", SIZES, ids=str)
@pytest.mark.parametrize("samples", [1, 37])
def test_fft_engine_matches_the_float64_dft(matrix, samples):
    rng = np.random.default_rng()
    k, x, y = _problem(rng, matrix, samples)
    engine = CartesianEncoding(k, matrix, 2)
    assert relative(engine(x), nudft.nudft_forward(x.astype(np.complex128), k.astype(np.float64))) < 1e-6
    assert relative(engine.H(y), nudft.nudft_adjoint(y.astype(np.complex128), k.astype(np.float64), matrix)) < 1e-6


@pytest.mark.parametrize("matrix", SIZES, ids=str)
def test_fft_engine_psf_and_mask_normal_are_exact(matrix):
    rng = np.random.default_rng()
    k, x, _ = _problem(rng, matrix, 29, batch=1, reach=1)
    w = rng.random(29).astype(np.float32)
    engine = CartesianEncoding(k, matrix, 1)
    big = tuple(2 * n for n in matrix)
    psf = nudft.nudft_adjoint(w[None].astype(np.complex128), 2 * k.astype(np.float64), big)[0]
    assert relative(engine.psf(w), psf) < 1e-6
    x64 = x.astype(np.complex128)
    normal = nudft.nudft_adjoint(w * nudft.nudft_forward(x64, k.astype(np.float64)), k.astype(np.float64), matrix)
    assert relative(engine.normal(w)(x), normal) < 1e-6


def test_fft_engine_is_adjoint_with_repeated_samples():
    rng = np.random.default_rng()
    matrix = (12, 10)
    k, x, y = _problem(rng, matrix, 50)
    k = np.concatenate([k, k[:20]])  # averages: the same frequencies twice
    y = np.concatenate([y, y[:, :20]], axis=1)
    engine = CartesianEncoding(k, matrix, 2)
    assert not engine.unique
    assert adjoint_gap(x, engine.H(y), y, engine(x)) < 1e-5
    assert engine.batched(3).ishape == (3, *matrix)


def test_fft_engine_refuses_samples_off_the_grid():
    k = np.array([[0.0, 0.0], [1.5, 2.0]], dtype=np.float32)
    assert not is_cartesian(k)
    assert is_cartesian(np.rint(k))
    with pytest.raises(InvalidDataError, match="integer frequencies.*lies 0.5 from the nearest"):
        CartesianEncoding(k, (8, 8), 1)


def test_engine_choice_by_device():
    assert cartesian_engine(False) is CartesianEncoding
    assert cartesian_engine(True) is GpuCartesianEncoding
    assert GpuCartesianEncoding.name == "fft" and CartesianEncoding.name == "fft"  # named as exact and nufft
    assert GpuCartesianEncoding.key == "fft-gpu" and CartesianEncoding.key == "fft-cpu"
    assert engine("gpu-fft", "gpu") is GpuCartesianEncoding  # the old name, for the planner
    assert engine("fft", "gpu") is GpuCartesianEncoding and engine("fft", "cpu") is CartesianEncoding


@pytest.mark.parametrize("matrix", [(64, 64), (8, 6), (24, 24, 20)], ids=str)
def test_auto_picks_the_fft_engine_for_cartesian_scans_only(matrix):
    problem = (matrix, int(np.prod(matrix)) // 2, 8)
    assert choose_engine("cpu", "auto", problem=problem, sampling="cartesian")[1] is CartesianEncoding
    assert choose_engine("cpu", "auto", problem=problem)[1] is not CartesianEncoding
    assert choose_engine("cpu", "fft")[1] is CartesianEncoding
    assert not CartesianEncoding.caches_psf and not CartesianEncoding.memo


def test_a_scan_is_cartesian_only_when_its_reader_says_so():
    from mri_recon import simulate_scan  # noqa: PLC0415
    from mri_recon.operators.engines.registry import sampling_of  # noqa: PLC0415

    scan = simulate_scan((16, 16), "radial", coils=2, seed=0)
    assert sampling_of(scan) == "non-cartesian"
    assert sampling_of(scan.replace(attrs={**scan.attrs, "sampling": "cartesian"})) == "cartesian"
    for odd in (np.array(["cartesian", "cartesian"]), 1, b"cartesian"):  # attributes from a file: any type
        assert sampling_of(scan.replace(attrs={**scan.attrs, "sampling": odd})) == "non-cartesian"


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", SIZES, ids=str)
def test_gpu_fft_engine_matches_numpy(matrix):
    import cupy  # noqa: PLC0415

    rng = np.random.default_rng()
    k, x, y = _problem(rng, matrix, 41)
    w = rng.random(41).astype(np.float32)
    cpu, gpu = CartesianEncoding(k, matrix, 2), GpuCartesianEncoding(cupy.asarray(k), matrix, 2)
    assert relative(cupy.asnumpy(gpu(cupy.asarray(x))), cpu(x)) < 1e-6
    assert relative(cupy.asnumpy(gpu.H(cupy.asarray(y))), cpu.H(y)) < 1e-6
    assert relative(cupy.asnumpy(gpu.psf(cupy.asarray(w))), cpu.psf(w)) < 1e-6
    assert relative(cupy.asnumpy(gpu.normal(cupy.asarray(w))(cupy.asarray(x))), cpu.normal(w)(x)) < 1e-6


def _sense_problem(rng, matrix, coils=3, samples=60):
    k, x, _ = _problem(rng, matrix, samples, batch=1)
    maps = (rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix))).astype(np.complex64)
    return k, x[0], maps, rng.random(samples).astype(np.float32)


def _sense_oracle(k, x, maps, w, lam):
    """``sum_c conj(S_c) F^H W F (S_c x) + lam x`` by the float64 DFT."""
    k64, out = k.astype(np.float64), lam * x.astype(np.complex128)
    coil = maps.astype(np.complex128) * x
    y = nudft.nudft_forward(coil, k64) * w
    return out + (np.conj(maps) * nudft.nudft_adjoint(y, k64, x.shape)).sum(axis=0)


@pytest.mark.parametrize("matrix", [(8, 6), (7, 5), (4, 5, 3)], ids=str)
def test_mask_spectrum_runs_the_sense_normal_operator_on_the_image_grid(matrix):
    rng = np.random.default_rng()
    k, x, maps, w = _sense_problem(rng, matrix)
    engine = CartesianEncoding(k, matrix, 1)
    spectrum = engine.mask_spectrum(w)
    assert spectrum.shape == matrix
    assert np.array_equal(engine.spectrum(w, maps), spectrum)  # the engine's own spectrum with maps
    operator = CartesianEncoding.toeplitz_normal(spectrum, maps, lam=0.3, coil_batch=2)
    assert relative(operator(x), _sense_oracle(k, x, maps, w, 0.3)) < 1e-5
    assert relative(engine.normal(w, maps, 0.3, coil_batch=2)(x), _sense_oracle(k, x, maps, w, 0.3)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(8, 6), (7, 5), (4, 5, 3)], ids=str)
def test_gpu_fused_sense_normal_takes_the_mask_spectrum(matrix):
    import cupy  # noqa: PLC0415

    rng = np.random.default_rng()
    k, x, maps, w = _sense_problem(rng, matrix)
    spectrum = GpuCartesianEncoding(cupy.asarray(k), matrix, 1).mask_spectrum(cupy.asarray(w))
    operator = GpuCartesianEncoding.toeplitz_normal(spectrum, cupy.asarray(maps), lam=0.3, coil_batch=2)
    assert relative(cupy.asnumpy(operator(cupy.asarray(x))), _sense_oracle(k, x, maps, w, 0.3)) < 1e-5
