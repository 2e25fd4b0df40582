"""Public F, F^H and PSF: FINUFFT against the oracle, adjointness, shape and dtype rules, errors, GPU twins."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import adjoint_gap

from mri_recon import operators
from mri_recon.arrays.backend import CPU, Device, cupy_module
from mri_recon.errors import InvalidDataError, SchemaError, TrajectoryUnitsError, listed
from mri_recon.operators import GpuExactEncoding, GpuNufftEncoding, fhd, forward, psf, resolve
from mri_recon.operators.engines import registry
from mri_recon.operators.engines.nudft import nudft_adjoint, nudft_forward

CASES = [((16, 16), 1.0), ((15, 17), 1.0), ((8, 10, 6), 1.0), ((7, 6, 5), 1.0), ((12, 9), 2.0)]
IDS = ["2d-even", "2d-odd", "3d-even", "3d-odd", "2d-2x-nyquist"]


def rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def crandn(rng: np.random.Generator, *shape: int, dtype=np.complex64) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def random_trajectory(rng, matrix, m, reach=1.0) -> np.ndarray:
    """Uniform samples over reach x the Nyquist box [-N/2, N/2) of each axis."""
    return ((rng.random((m, len(matrix))) - 0.5) * reach * np.asarray(matrix)).astype(np.float32)


@pytest.mark.parametrize(("matrix", "reach"), CASES, ids=IDS)
def test_finufft_matches_oracle(rng, matrix, reach):
    m, coils = 300, 2
    k = random_trajectory(rng, matrix, m, reach)
    d = crandn(rng, coils, m)
    x = crandn(rng, coils, *matrix)
    assert rel(fhd(d, k, matrix, method="nufft"), nudft_adjoint(d, k, matrix)) < 1e-6
    assert rel(forward(x, k, method="nufft"), nudft_forward(x, k)) < 1e-6
    assert rel(fhd(d, k, matrix, method="exact"), nudft_adjoint(d, k, matrix)) < 1e-6


@pytest.mark.parametrize(("matrix", "reach"), CASES, ids=IDS)
def test_adjointness(rng, matrix, reach):
    m = 257
    k = random_trajectory(rng, matrix, m, reach)
    x = crandn(rng, 3, *matrix)
    y = crandn(rng, 3, m)
    fx = forward(x, k)
    fhy = fhd(y, k, matrix)
    assert fx.shape == y.shape
    assert fhy.shape == x.shape
    assert adjoint_gap(x, fhy, y, fx) < 1e-5


def test_shapes_and_dtypes(rng):
    matrix, m = (10, 9), 120
    k = random_trajectory(rng, matrix, m)
    d2 = crandn(rng, 4, m, dtype=np.complex128)
    out = fhd(d2, k.astype(np.float64), matrix)
    assert isinstance(out, np.ndarray) and out.dtype == np.complex64 and out.shape == (4, *matrix)
    one = fhd(d2[1], k, list(matrix))
    assert one.shape == matrix and one.dtype == np.complex64
    assert rel(one, out[1]) < 1e-6
    x = crandn(rng, 4, *matrix)
    f = forward(x, k)
    assert f.dtype == np.complex64 and f.shape == (4, m)
    f1 = forward(x[2], k)
    assert f1.shape == (m,) and rel(f1, f[2]) < 1e-6


@pytest.mark.parametrize(("matrix", "reach"), CASES[:4], ids=IDS[:4])
def test_psf_definition(rng, matrix, reach):
    m = 60
    k = random_trajectory(rng, matrix, m, reach)
    w = rng.random(m).astype(np.float32)
    grids = np.meshgrid(*[(np.arange(2 * n) - n) / n for n in matrix], indexing="ij")
    offsets = np.stack([g.reshape(-1) for g in grids], axis=1)  # (j - N) / N
    expected = (np.exp(2j * np.pi * offsets @ k.astype(np.float64).T) @ w).reshape([2 * n for n in matrix])
    for method in ("auto", "exact"):
        p = psf(k, matrix, w, method=method)
        assert p.shape == tuple(2 * n for n in matrix) and p.dtype == np.complex64
        assert rel(p, expected) < 1e-6
    ones = psf(k, matrix)
    assert abs(ones[tuple(matrix)] - m) < 1e-4 * m  # the peak is the sum of the weights


def test_resolve():
    assert resolve("cpu", "auto") == (CPU, "nufft")
    assert resolve("cpu", "nufft") == (CPU, "nufft")
    assert resolve("cpu", "exact") == (CPU, "exact")
    expected = listed(registry.methods(), quote=True)
    with pytest.raises(InvalidDataError, match=f"unknown method 'fast': expected {expected}$"):
        resolve("cpu", "fast")


def test_gpu_engines_by_method(monkeypatch):
    monkeypatch.setattr(registry, "resolve_device_like", lambda device, like: Device(0))
    assert resolve("gpu", "exact") == (Device(0), "exact")
    assert resolve("gpu", "nufft") == (Device(0), "nufft")
    assert resolve("gpu", "auto") == (Device(0), "exact")  # no problem size: the exact kernels
    choose = operators.choose_engine
    # the cost model: the NUFFT for a 256^2, 8-coil radial scan, the exact sums for a small one
    assert choose("gpu", "auto", problem=((256, 256), 262144, 8))[1] is GpuNufftEncoding
    assert choose("gpu", "auto", problem=((128, 128, 128), 1647104, 8))[1] is GpuNufftEncoding
    assert choose("gpu", "auto", problem=((48, 48), 6000, 4))[1] is GpuExactEncoding
    assert choose("gpu", "exact", problem=((256, 256), 262144, 8))[1] is GpuExactEncoding
    assert GpuExactEncoding.key == "exact-gpu" and GpuNufftEncoding.key == "nufft-gpu"
    # device "auto" with a GPU present: "nufft" is the GPU NUFFT (it used to mean FINUFFT on the CPU)
    monkeypatch.setattr(registry, "resolve_device_like", lambda device, like: Device(0 if device == "auto" else -1))
    assert resolve("auto", "nufft") == (Device(0), "nufft")
    assert choose("auto", "nufft")[1] is GpuNufftEncoding


def test_the_registry_reads_the_engines():
    keys = [e.key for e in registry.engines()]
    shipped = ["exact-cpu", "nufft-cpu", "exact-gpu", "nufft-gpu", "fft-cpu", "fft-gpu"]
    assert keys[:len(shipped)] == shipped  # in the order of ENGINE_MODULES, any added module's after them
    assert len(set(keys)) == len(keys)
    assert registry.engine("auto", "cpu") is operators.FinufftEncoding  # the oracle is picked by name only
    assert registry.engine("exact", "cpu") is operators.NudftEncoding
    assert registry.engine("gpu", "gpu") is GpuExactEncoding and registry.engine("gpu-nufft", "gpu") is GpuNufftEncoding
    assert registry.engine("nufft-gpu", "cpu") is GpuNufftEncoding  # a key names one engine on any device
    assert not GpuNufftEncoding.caches_psf and GpuExactEncoding.caches_psf
    names = sorted({*registry.methods(), *registry.ALIASES, *keys})
    with pytest.raises(ValueError, match=f"unknown method 'fast': expected one of {', '.join(names)}$"):
        registry.engine("fast", "cpu")
    with pytest.raises(InvalidDataError, match="no encoding engine serves 1-D images on the gpu"):
        registry.fastest("gpu", (8,), 10, 1)
    # the time model the chooser reads is the one the planner's estimate adds the CG iterations to
    matrix, samples, coils = (64, 64), 20000, 4
    assert GpuExactEncoding.run_seconds(matrix, samples, coils, 0) == GpuExactEncoding.seconds(matrix, samples, coils)


def test_input_errors(rng):
    matrix, m = (12, 10), 50
    k = random_trajectory(rng, matrix, m)
    d = crandn(rng, 2, m)
    with pytest.raises(SchemaError, match="fhd: dataset 'kspace' must be complex64 .* found float32"):
        fhd(d.real, k, matrix)
    with pytest.raises(SchemaError, match=r"dataset 'kspace' must have rank 1 or 2, found shape \(1, 2, 50\)"):
        fhd(d[None], k, matrix)
    bad = d.copy()
    bad[1, 3] = np.nan
    with pytest.raises(InvalidDataError, match="dataset 'kspace' contains 1 NaN or Inf"):
        fhd(bad, k, matrix)
    with pytest.raises(SchemaError, match="trajectory has 49 samples but kspace has 50"):
        fhd(d, k[:-1], matrix)
    with pytest.raises(SchemaError, match=r"trajectory has D = 2 columns but matrix \[12, 10, 4\] needs D = 3"):
        fhd(d, k, (12, 10, 4))
    with pytest.raises(TrajectoryUnitsError, match="cycles per field of view"):
        fhd(d, k / np.asarray(matrix, dtype=np.float32), matrix)
    with pytest.raises(TrajectoryUnitsError, match="reaches"):
        fhd(d, 3 * k, matrix)
    with pytest.raises(InvalidDataError, match="'matrix' must be positive"):
        fhd(d, k, (12, 0))
    with pytest.raises(SchemaError, match="fhd: dataset 'trajectory' must be float32"):
        fhd(d, k.astype(np.int32), matrix)


def test_forward_and_psf_errors(rng):
    matrix, m = (12, 10), 50
    k = random_trajectory(rng, matrix, m)
    x = crandn(rng, *matrix)
    with pytest.raises(SchemaError, match=r"forward: trajectory must have D = 2 or 3 columns, found shape \(50, 4\)"):
        forward(x, np.zeros((m, 4), dtype=np.float32))
    with pytest.raises(SchemaError, match="dataset 'image' must have rank 2 or 3"):
        forward(x[0], k)
    with pytest.raises(TrajectoryUnitsError, match="forward: trajectory reaches"):
        forward(x[:4, :4], k)
    with pytest.raises(SchemaError, match="psf: weights has 49 samples but trajectory has 50"):
        psf(k, matrix, np.ones(m - 1, dtype=np.float32))
    with pytest.raises(SchemaError, match="psf: dataset 'weights' must have rank 1"):
        psf(k, matrix, np.ones((m, 1), dtype=np.float32))


# ---------------------------------------------------------------------------------------------- GPU twins


@pytest.mark.gpu
@pytest.mark.parametrize(("matrix", "reach"), CASES, ids=IDS)
def test_gpu_matches_oracle_and_keeps_cupy(rng, matrix, reach):
    cupy = cupy_module()
    m = 333
    k = random_trajectory(rng, matrix, m, reach)
    d = crandn(rng, 2, m)
    x = crandn(rng, 2, *matrix)
    w = rng.random(m).astype(np.float32)
    out = fhd(cupy.asarray(d), cupy.asarray(k), matrix)
    assert isinstance(out, cupy.ndarray) and out.dtype == np.complex64
    assert rel(cupy.asnumpy(out), nudft_adjoint(d, k, matrix)) < 2e-5
    f = forward(cupy.asarray(x), cupy.asarray(k))
    assert isinstance(f, cupy.ndarray)
    assert rel(cupy.asnumpy(f), nudft_forward(x, k)) < 2e-5
    p = psf(cupy.asarray(k), matrix, cupy.asarray(w))
    assert isinstance(p, cupy.ndarray)
    assert rel(cupy.asnumpy(p), psf(k, matrix, w, device="cpu", method="exact")) < 2e-5
    host = fhd(d, k, matrix, device="gpu")  # NumPy in: computed on the GPU, NumPy out
    assert isinstance(host, np.ndarray) and rel(host, nudft_adjoint(d, k, matrix)) < 2e-5
    back = fhd(cupy.asarray(d), cupy.asarray(k), matrix, device="cpu")  # CuPy in, CPU method: CuPy out
    assert isinstance(back, cupy.ndarray) and rel(cupy.asnumpy(back), host) < 2e-5


@pytest.mark.gpu
def test_gpu_input_errors(rng):
    cupy = cupy_module()
    matrix, m = (12, 10), 50
    k = cupy.asarray(random_trajectory(rng, matrix, m))
    d = cupy.asarray(crandn(rng, 2, m))
    with pytest.raises(SchemaError, match="fhd: dataset 'kspace' must be complex64 .* found float32"):
        fhd(d.real.copy(), k, matrix)
    with pytest.raises(SchemaError, match=r"dataset 'kspace' must have rank 1 or 2, found shape \(1, 2, 50\)"):
        fhd(d[None], k, matrix)
    with pytest.raises(InvalidDataError, match=r"dataset 'kspace' is empty \(shape \(2, 0\)\)"):
        fhd(d[:, :0], k[:0], matrix)
    bad = d.copy()
    bad[0, 7] = cupy.inf
    with pytest.raises(InvalidDataError, match="dataset 'kspace' contains 1 NaN or Inf"):
        fhd(bad, k, matrix)
    with pytest.raises(TrajectoryUnitsError, match="reaches"):
        fhd(d, 3 * k, matrix)
