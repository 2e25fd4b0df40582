"""The reconstruction pipeline on small synthetic problems: recovery, residuals, scaling, combination, errors."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

import mri_recon
from mri_recon import pipeline as recon
from mri_recon.arrays.backend import Device
from mri_recon.errors import InvalidDataError, ResourceError, SchemaError
from mri_recon.operators import psf
from mri_recon.operators.engines import finufft as nufft_cpu
from mri_recon.pipeline import STAGES, Result, memory_plan, reconstruct
from mri_recon.scan import Scan


def rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def radial(matrix: tuple[int, ...], oversampling: float = 1.2) -> tuple[np.ndarray, np.ndarray]:
    """Well-sampled 2D radial trajectory over [-N/2, N/2) at 0.5 cycles/FOV, and ramp weights |k|."""
    n = max(matrix)
    spokes = int(np.ceil(oversampling * np.pi / 2 * n))
    readout = (np.arange(2 * n) - n) / 2
    angles = np.pi * np.arange(spokes) / spokes
    k = np.stack([np.outer(np.cos(angles), readout), np.outer(np.sin(angles), readout)], axis=-1)
    k = k.reshape(-1, 2) * (np.asarray(matrix) / n)
    weights = np.maximum(np.hypot(*(k / (np.asarray(matrix) / n)).T), 0.125)
    return k.astype(np.float32), weights.astype(np.float32)


def smooth_image(rng, matrix: tuple[int, ...]) -> np.ndarray:
    """Random low-frequency image: random Fourier coefficients under a Gaussian envelope."""
    freqs = np.meshgrid(*[np.fft.fftfreq(n) * n for n in matrix], indexing="ij")
    envelope = np.exp(-sum(f**2 for f in freqs) / (2 * 3.0**2))
    coefficients = (rng.standard_normal(matrix) + 1j * rng.standard_normal(matrix)) * envelope
    return np.fft.ifftn(coefficients).astype(np.complex64)


def coil_maps(matrix: tuple[int, ...], coils: int) -> np.ndarray:
    """Smooth sensitivities peaking on a circle around the image, normalized to sum |S|^2 = 1."""
    x, y = np.meshgrid(*[(np.arange(n) - n / 2) / n for n in matrix], indexing="ij")
    angles = 2 * np.pi * np.arange(coils) / coils
    maps = np.stack([np.exp(-((x - 0.6 * np.cos(a)) ** 2 + (y - 0.6 * np.sin(a)) ** 2) / 0.5 + 1j * a)
                     for a in angles])
    return (maps / np.sqrt((np.abs(maps) ** 2).sum(axis=0))).astype(np.complex64)


@pytest.fixture
def sense_scan(rng) -> tuple[Scan, np.ndarray]:
    matrix = (24, 25)
    k, w = radial(matrix)
    truth = smooth_image(rng, matrix)
    maps = coil_maps(matrix, 4)
    kspace = nufft_cpu.forward(maps * truth, k).astype(np.complex64)
    return Scan(kspace=kspace, trajectory=k, matrix=matrix, weights=w, coil_maps=maps), truth


def test_cg_sense_recovers_the_image(sense_scan):
    scan, truth = sense_scan
    result = reconstruct(scan, iterations=40, tol=1e-6, lam=0.0, progress=False)
    assert isinstance(result, Result)
    assert result.image.shape == scan.matrix and result.image.dtype == np.complex64
    assert result.combine == "sense" and result.device == "cpu"
    assert rel(result.image, truth) < 1e-3
    residuals = result.residuals
    assert result.iterations == len(residuals) - 1 and residuals[0] == 1.0
    assert residuals[-1] < 1e-4 and residuals[10] < 1e-2 * residuals[1]
    assert set(result.timings) == set(STAGES) and all(t >= 0 for t in result.timings.values())
    assert result.parameters["lam_abs"] == 0.0 and result.parameters["method"] == "nufft"


def test_the_whole_call_times_its_preparation_as_a_stage(sense_scan, caplog):
    """mri_recon.reconstruct: the preparation is the run's first stage, logged and within the call's wall time;
    the solver alone has none."""
    scan, _ = sense_scan
    start = time.perf_counter()
    with caplog.at_level(logging.INFO, logger="mri_recon.pipeline"):
        result = mri_recon.reconstruct(scan, iterations=3, tol=0.0)
    wall = time.perf_counter() - start
    assert result.timings["prepare"] > 0 and sum(result.timings.values()) <= wall
    assert [r.getMessage().split()[0] for r in caplog.records][1] == "prepare"
    assert mri_recon.reconstruct(scan, prepare=False, iterations=3, tol=0.0).timings["prepare"] == 0.0
    assert reconstruct(scan, iterations=3, tol=0.0).timings["prepare"] == 0.0


def jittered_grid(rng, matrix: tuple[int, ...]) -> np.ndarray:
    """The Nyquist grid, each point moved by up to a quarter cycle/FOV: well conditioned without weights."""
    grid = np.meshgrid(*[np.arange(n) - n // 2 for n in matrix], indexing="ij")
    k = np.stack([g.reshape(-1) for g in grid], axis=1)
    return (k + rng.uniform(-0.25, 0.25, k.shape)).astype(np.float32)


def test_without_weights_and_exact_method(rng):
    matrix = (12, 11)
    k = jittered_grid(rng, matrix)
    truth = smooth_image(rng, matrix)
    scan = Scan(kspace=nufft_cpu.forward(truth[None], k), trajectory=k, matrix=matrix)
    fast = reconstruct(scan, iterations=60, tol=1e-7, lam=0.0, progress=False)
    exact = reconstruct(scan, iterations=60, tol=1e-7, lam=0.0, progress=False, method="exact")
    assert fast.combine == exact.combine == "single" and fast.parameters["weights"] == "ones"
    assert rel(fast.image, truth) < 1e-3
    assert rel(exact.image, fast.image) < 1e-4


def test_three_dimensions(rng):
    matrix = (8, 8, 6)
    k = jittered_grid(rng, matrix)
    truth = smooth_image(rng, matrix)
    scan = Scan(kspace=nufft_cpu.forward(truth[None], k), trajectory=k, matrix=matrix)
    result = reconstruct(scan, iterations=50, tol=1e-7, lam=0.0, progress=False)
    assert result.image.shape == matrix
    assert rel(result.image, truth) < 1e-3


def test_scaling_the_data_scales_only_the_image(sense_scan, rng):
    scan, _ = sense_scan
    factor = float(10 ** rng.uniform(-3, 3))
    settings = {"iterations": 15, "tol": 0.0, "lam": 1e-2, "progress": False}
    base = reconstruct(scan, **settings)
    scaled = reconstruct(scan.replace(kspace=scan.kspace * factor), **settings)
    assert rel(scaled.image, factor * base.image) < 1e-4
    np.testing.assert_allclose(scaled.residuals, base.residuals, rtol=1e-3, atol=1e-7)
    assert scaled.parameters == base.parameters and scaled.iterations == base.iterations


def test_lam_is_relative_to_the_weights(sense_scan, rng):
    scan, _ = sense_scan
    factor = float(10 ** rng.uniform(-3, 3))
    settings = {"iterations": 15, "tol": 0.0, "lam": 0.5, "progress": False}
    base = reconstruct(scan, **settings)
    reweighted = reconstruct(scan.replace(weights=scan.weights * factor), **settings)
    assert rel(reweighted.image, base.image) < 1e-4
    assert reweighted.parameters["lam_abs"] == pytest.approx(factor * base.parameters["lam_abs"], rel=1e-5)
    weaker = reconstruct(scan, **{**settings, "lam": 0.05})
    assert np.linalg.norm(base.image) < np.linalg.norm(weaker.image)  # Tikhonov shrinks the image


def test_rss_without_coil_maps(sense_scan):
    scan, truth = sense_scan
    result = reconstruct(scan.replace(coil_maps=None), iterations=40, tol=1e-6, lam=0.0, progress=False)
    assert result.combine == "rss"
    assert result.image.shape == scan.matrix and result.image.dtype == np.complex64
    assert np.all(result.image.imag == 0)
    expected = np.sqrt((np.abs(scan.coil_maps * truth) ** 2).sum(axis=0))
    assert rel(result.image, expected) < 1e-3


def test_given_psf_and_memory_batches(sense_scan, monkeypatch):
    scan, _ = sense_scan
    settings = {"iterations": 10, "tol": 0.0, "lam": 1e-3, "progress": False}
    base = reconstruct(scan, **settings)
    given = reconstruct(scan, psf=psf(scan.trajectory, scan.matrix, scan.weights), **settings)
    assert given.parameters["psf"] == "given"
    assert rel(given.image, base.image) < 1e-5
    real_plan = recon.plan
    monkeypatch.setattr(recon, "plan", lambda *a, **kw: real_plan(*a, **{**kw, "max_coil_batch": 1}))
    batched = reconstruct(scan, **settings)
    assert batched.parameters["coil_batch"] == 1
    assert rel(batched.image, base.image) < 1e-5


def test_library_prints_nothing_and_logs_stages_and_iterations(sense_scan, capsys, caplog):
    scan, _ = sense_scan
    with caplog.at_level(logging.DEBUG, logger="mri_recon"):
        reconstruct(scan, iterations=3, tol=0.0)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""  # no printing, whatever the log level
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    stages = [m.split()[0] for m in info[1:]]
    assert stages == ["upload", "fhd", "psf", "iterations", "download"]
    assert all(m.endswith(" s") for m in info[1:]) and "engine nufft on cpu" in info[0]
    assert [m.split()[:2] for m in debug] == [["iteration", f"{k}/3"] for k in (1, 2, 3)]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mri_recon"):
        reconstruct(scan, iterations=3, tol=0.0)
    assert caplog.records == [] and capsys.readouterr().err == ""


def test_progress_callback_gets_stage_and_iteration_events_in_order(sense_scan):
    scan, _ = sense_scan
    events = []
    result = reconstruct(scan, iterations=4, tol=0.0, progress=lambda *event: events.append(event))
    iterations = [e for e in events if e[1] is not None]
    assert [e[:3] for e in iterations] == [("iterations", k, 4) for k in (1, 2, 3, 4)]
    assert [e[3] for e in iterations] == pytest.approx(result.residuals[1:])
    ends = [e for e in events if e[1] is None]
    assert ends == [(s, None, None, None) for s in ("upload", "fhd", "psf", "iterations", "download")]
    assert events.index(("psf", None, None, None)) < events.index(iterations[0]) < events.index(ends[3])


def test_progress_must_be_callable(sense_scan):
    scan, _ = sense_scan
    with pytest.raises(InvalidDataError, match="progress must be None or a callable .* found str"):
        reconstruct(scan, iterations=2, progress="yes")


def test_post_filter(sense_scan):
    filters = pytest.importorskip("mri_recon.filters")
    scan, _ = sense_scan
    plain = reconstruct(scan, iterations=5, tol=0.0, progress=False)
    smoothed = reconstruct(scan, iterations=5, tol=0.0, progress=False, filter_sigma=1.0)
    assert smoothed.parameters["filter_sigma"] == 1.0
    assert rel(smoothed.image, np.asarray(filters.smooth(plain.image, 1.0, device="cpu"))) < 1e-5
    side = max(scan.matrix)
    assert reconstruct(scan, iterations=1, progress=False, filter_sigma=side).parameters["filter_sigma"] == side
    with pytest.raises(InvalidDataError, match=rf"filter_sigma 1e\+06 voxels is wider than the image \("
                                               rf"{scan.matrix[0]}x{scan.matrix[1]} voxels\)"):
        reconstruct(scan, iterations=1, progress=False, filter_sigma=1e6)  # a slip: it ran for a minute


def test_errors(sense_scan, monkeypatch):
    scan, _ = sense_scan
    with pytest.raises(InvalidDataError, match="lam must be a finite number >= 0, found -1"):
        reconstruct(scan, lam=-1, progress=False)
    with pytest.raises(InvalidDataError, match="pipeline.reconstruct: unexpected keyword argument 'iters'"):
        reconstruct(scan, iters=3)
    with pytest.raises(SchemaError, match=r"psf must have shape \(48, 50\) .* found \(24, 25\)"):
        reconstruct(scan, psf=np.zeros(scan.matrix, dtype=np.complex64), progress=False)
    monkeypatch.setattr(recon, "host_memory_available", lambda: 2**14)
    with pytest.raises(ResourceError, match="too large for host memory: needs at least .* is available"):
        reconstruct(scan, progress=False)
    monkeypatch.setattr(recon, "device_memory", lambda device: (2**14, 2**34))
    with pytest.raises(ResourceError, match=r"too large for GPU memory \(gpu:0\)"):
        memory_plan(scan, Device(0), 30)


@pytest.mark.gpu
def test_gpu_twin(sense_scan):
    scan, truth = sense_scan
    cpu = reconstruct(scan, iterations=20, tol=0.0, device="cpu", progress=False)
    gpu = reconstruct(scan, iterations=20, tol=0.0, device="gpu", progress=False)
    assert gpu.device == "gpu:0" and isinstance(gpu.image, np.ndarray)
    assert rel(gpu.image, cpu.image) < 1e-4
    np.testing.assert_allclose(gpu.residuals[:10], cpu.residuals[:10], rtol=1e-2)


def test_short_reprs_name_shapes_not_values(sense_scan):
    scan, _ = sense_scan
    text = repr(scan)
    assert text.startswith(f"Scan(matrix={list(scan.matrix)}, coils={scan.n_coils}, samples={scan.n_samples}, ")
    assert f"coil_maps=complex64{[scan.n_coils, *scan.matrix]}" in text and "source='<memory>'" in text
    result = reconstruct(scan, iterations=2, tol=0.0)
    assert repr(result) == (f"Result(image=complex64{list(scan.matrix)}, iterations=2, "
                            f"residual={result.residuals[-1]:.2e}, device='cpu', engine='nufft', combine='sense')")
    assert len(text) < 300 and len(repr(result)) < 200


def test_result_shows_itself_in_notebooks(sense_scan, monkeypatch):
    import struct
    import sys

    from mri_recon.errors import OutputError
    from mri_recon.io.png import encode_png, montage

    scan, _ = sense_scan
    result = reconstruct(scan, iterations=2, tol=0.0)
    png = result._repr_png_()
    assert png == encode_png(montage(result.image)[0])
    width_height = tuple(scan.matrix)[::-1]  # width = axis 1
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == width_height
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # matplotlib stays optional: a clear message
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(OutputError, match="Result.show needs matplotlib"):
        result.show()


def test_progress_true_prints_the_events(sense_scan, capsys):
    scan, _ = sense_scan
    reconstruct(scan, iterations=2, tol=0.0, progress=True)
    err = capsys.readouterr().err
    assert "iteration 1/2  residual " in err and "iterations done" in err
    reconstruct(scan, iterations=2, tol=0.0, progress=False)
    assert capsys.readouterr().err == ""
