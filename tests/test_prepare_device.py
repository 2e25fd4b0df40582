"""The preparation on the device (mri_recon.prep.device): its NumPy twin against prepare_scan, and on a GPU
the CuPy path against both (prepared arrays and final images)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers import relative

from mri_recon import pipeline
from mri_recon.api import prepare_and_reconstruct
from mri_recon.arrays.backend import CPU, cupy_module, resolve_device, to_host
from mri_recon.errors import InvalidDataError, SchemaError
from mri_recon.prep import dcf as dcf_module
from mri_recon.prep import prepare_scan, upload
from mri_recon.prep.device import DeviceScan, prepare_on_device
from mri_recon.prep.device_dcf import ramp_weights
from mri_recon.prep.noise import apply_whitening, noise_covariance, whitening_matrix
from mri_recon.scan import Scan
from mri_recon.sim.simulate import simulate_scan
from mri_recon.sim.trajectories import kooshball, radial

CHOICES = [
    {"dcf": "auto", "coil_maps": "auto"},
    {"dcf": "ramp", "coil_maps": "file"},
    {"dcf": "none", "coil_maps": "walsh"},
    {"dcf": "pipe", "coil_maps": "rss"},
    {"dcf": "file", "coil_maps": "espirit", "prewhiten": False},
]
IDS = ["auto", "ramp-file", "none-walsh", "pipe-rss", "file-espirit-raw"]


def _scan(seed: int, matrix=(24, 28), coils: int = 3, trajectory: str = "golden") -> Scan:
    """A simulated scan with correlated receiver noise (so that whitening mixes the channels), fresh
    random k-space and maps."""
    rng = np.random.default_rng(seed)
    scan = simulate_scan(matrix, trajectory, coils=coils, snr=30.0, seed=seed)
    mix = np.eye(coils) + 0.3 * (rng.standard_normal((coils, coils)) + 1j * rng.standard_normal((coils, coils)))
    noise = (mix @ scan.noise).astype(np.complex64)
    kspace = (scan.kspace + 0.1 * rng.standard_normal(scan.kspace.shape)).astype(np.complex64)
    return scan.replace(noise=noise, kspace=kspace)


def _compare(ready, record, ref, ref_record, tol: float) -> None:
    for name in ("kspace", "trajectory", "weights", "coil_maps"):
        ours, theirs = getattr(ready, name), getattr(ref, name)
        assert (ours is None) == (theirs is None), name
        if theirs is not None:
            assert relative(to_host(ours), theirs) <= tol, name
    np.testing.assert_allclose(ready.noise, ref.noise, rtol=1e-6, atol=1e-6 * np.abs(ref.noise).max())
    basis, ref_basis = record.pop("maps_basis"), ref_record.pop("maps_basis")
    assert (basis is None) == (ref_basis is None)
    if basis is not None:
        np.testing.assert_array_equal(basis, ref_basis)  # the same host computation
    assert record == ref_record and dict(ready.attrs) == dict(ref.attrs)


def test_column_chunks_cover_every_column_once():
    for rows, columns, chunk in [(3, 1, 64), (3, 10, 24), (3, 10, 25), (3, 10, 23), (8, 100, 8), (1, 7, 1)]:
        parts = upload.column_chunks(rows, columns, 8, chunk)
        assert [i for p in parts for i in range(p.start, p.stop)] == list(range(columns))
        assert all(p.stop - p.start >= 1 for p in parts)
        assert all(rows * 8 * (p.stop - p.start) <= max(chunk, rows * 8) for p in parts)


@pytest.mark.parametrize("columns", [1, 5, 6, 7, 1000])
def test_chunked_whitening_equals_the_whole(monkeypatch, columns):
    monkeypatch.setattr(upload, "_host_empty", lambda shape, dtype: np.full(shape, np.nan, dtype))
    rng = np.random.default_rng(columns)
    data = (rng.standard_normal((4, columns)) + 1j * rng.standard_normal((4, columns))).astype(np.complex64)
    noise = rng.standard_normal((4, 50)) + 1j * rng.standard_normal((4, 50))
    w = whitening_matrix(noise_covariance(noise))
    out = upload.upload_columns(data, CPU, w, chunk_bytes=4 * 8 * 6)
    reference = w @ data.astype(np.complex128)  # float64 oracle
    assert relative(out, reference) <= 1e-6
    assert relative(upload.upload(data, CPU, chunk_bytes=40), data) == 0.0
    with pytest.raises(ValueError, match="takes a 2-D array"):
        upload.upload_columns(data[0], CPU)


@pytest.mark.parametrize(("rows", "columns"), [(1, 1), (3, 5), (3, 6), (7, 1000)])
def test_chunked_compression_equals_the_product(monkeypatch, rows, columns):
    """A matrix of fewer rows than the array (coil compression) gives the product's rows, chunk by chunk."""
    monkeypatch.setattr(upload, "_host_empty", lambda shape, dtype: np.full(shape, np.nan, dtype))
    rng = np.random.default_rng(rows * columns)
    data = (rng.standard_normal((8, columns)) + 1j * rng.standard_normal((8, columns))).astype(np.complex64)
    matrix = rng.standard_normal((rows, 8)) + 1j * rng.standard_normal((rows, 8))
    out = upload.upload_columns(data, CPU, matrix, chunk_bytes=8 * 8 * 2)
    assert out.shape == (rows, columns) and out.dtype == np.complex64
    assert relative(out, matrix @ data.astype(np.complex128)) <= 1e-6


@pytest.mark.parametrize("shape", [(9, 8), (3, 7), (3,), (0, 8)])
def test_a_matrix_that_does_not_fit_the_rows_is_refused(shape):
    data = np.zeros((8, 4), np.complex64)
    with pytest.raises(ValueError, match=r"multiplies 8 rows by a matrix of 1 to 8 rows and 8 columns"):
        upload.upload_columns(data, CPU, np.zeros(shape, np.complex64))


@pytest.mark.parametrize("trajectory", ["radial", "kooshball"])
def test_ramp_weights_match_the_host_ramp(trajectory):
    matrix = (32, 24) if trajectory == "radial" else (16, 16, 12)
    k = radial(matrix, 21, 48) if trajectory == "radial" else kooshball(matrix, 90)
    k = (k + np.random.default_rng(1).uniform(-0.2, 0.2, k.shape)).astype(np.float32)
    weights, moving, positive = ramp_weights(k, matrix)
    reference = dcf_module.ramp(k, matrix)
    assert bool(moving) and bool(positive)
    assert weights.dtype == np.float32 and relative(weights, reference) <= 1e-6
    _, moving, _ = ramp_weights(np.zeros((5, len(matrix)), np.float32), matrix)
    assert not bool(moving)


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(32, 24), (33, 17), (64, 64), (16, 16, 12), (15, 9, 4)])
def test_gpu_ramp_weights_match_the_host_ramp_and_the_numpy_twin(matrix):
    cupy = cupy_module()
    rng = np.random.default_rng(sum(matrix))
    k = radial(matrix, 23, 50) if len(matrix) == 2 else kooshball(matrix, 70)
    k = (k + rng.uniform(-0.3, 0.3, k.shape)).astype(np.float32)
    weights, moving, positive = ramp_weights(cupy.asarray(k), matrix)
    twin = ramp_weights(k, matrix)[0]
    assert weights.dtype == np.float32 and bool(moving) and bool(positive)
    assert relative(to_host(weights), dcf_module.ramp(k, matrix)) <= 1e-6
    assert relative(to_host(weights), twin) <= 1e-6
    centred = ramp_weights(cupy.zeros((7, len(matrix)), np.float32), matrix)
    assert not bool(centred[1]) and not bool(centred[2])  # no sample moves: both checks fail
    far = np.full((5, len(matrix)), 0.9, np.float32) * np.asarray(matrix, np.float32)  # beyond the blob's reach
    assert bool(ramp_weights(cupy.asarray(far), matrix)[1]) and not bool(ramp_weights(cupy.asarray(far), matrix)[2])


@pytest.mark.parametrize("choices", CHOICES, ids=IDS)
def test_numpy_twin_prepares_as_prepare_scan(choices):
    scan = _scan(3)
    ready, record = prepare_on_device(scan, CPU, **choices)
    ref, ref_record = prepare_scan(scan, **choices)
    _compare(ready, record, ref, ref_record, 1e-6)
    assert ready.to_scan().kspace.dtype == np.complex64


def test_numpy_twin_corrects_gradient_delays_as_prepare_scan():
    scan = simulate_scan((32, 32), "radial", coils=2, snr=30.0, seed=8)
    delays = tuple(np.random.default_rng(8).uniform(-0.5, 0.5, 2))
    ready, record = prepare_on_device(scan, CPU, gradient_delay=delays, dcf="ramp")
    ref, ref_record = prepare_scan(scan, gradient_delay=delays, dcf="ramp")
    assert relative(ready.trajectory, scan.trajectory) > 1e-4  # corrected
    _compare(ready, record, ref, ref_record, 1e-6)


@pytest.mark.parametrize("choices", CHOICES[:4], ids=IDS[:4])
def test_images_from_the_numpy_twin_match_the_host_preparation(choices):
    scan = _scan(4)
    ready, record = prepare_on_device(scan, CPU, **choices)
    image = pipeline.reconstruct(ready, device="cpu", iterations=6, estimate_maps=record["estimate_maps"],
                                 maps_basis=record["maps_basis"]).image
    reference = prepare_and_reconstruct(scan, device="cpu", iterations=6, **choices)[2].image
    assert relative(image, reference) <= 1e-5


def test_errors_match_prepare_scan():
    scan = _scan(5)
    bare = scan.replace(weights=None, coil_maps=None)
    dead = scan.noise.copy()
    dead[1] = dead[0]  # a duplicated channel: singular covariance
    at_centre = Scan(kspace=scan.kspace[:, :8], trajectory=np.zeros((8, 2), np.float32), matrix=(4, 4))
    cases = [
        (scan, {"dcf": "voronoi"}, InvalidDataError, "unknown density compensation 'voronoi'"),
        (scan, {"coil_maps": "pca"}, InvalidDataError, "unknown coil-map choice 'pca'"),
        (scan, {"field_map": "apply"}, InvalidDataError, "unknown field-map choice 'apply'"),
        (bare, {"dcf": "file"}, SchemaError, "--dcf file needs a 'weights' dataset"),
        (bare, {"coil_maps": "file"}, SchemaError, "--coil-maps file needs a 'coil_maps' dataset"),
        (scan.replace(noise=dead), {}, InvalidDataError, "noise covariance is singular"),
        (scan.replace(times=np.zeros(scan.n_samples, np.float32)), {}, InvalidDataError, "no 'field_map'"),
        (at_centre, {"dcf": "ramp"}, InvalidDataError, "need samples away from k = 0"),
        (at_centre, {"dcf": "ramp", "coil_maps": "file"}, InvalidDataError, "need samples away from k = 0"),
    ]
    for given, choices, kind, message in cases:
        with pytest.raises(kind, match=message):
            prepare_scan(given, **choices)
        with pytest.raises(kind, match=message):
            prepare_on_device(given, CPU, **choices)


def test_whitening_overflow_is_refused():
    scan = _scan(6)
    huge = (np.full(scan.kspace.shape, 3e38, np.float32) * (1 + 1j)).astype(np.complex64)
    quiet = (scan.noise * np.float32(1e-3)).astype(np.complex64)  # W ~ 1e3: W d beyond float32
    big = scan.replace(kspace=huge, noise=quiet)
    with pytest.raises(InvalidDataError, match="'kspace' contains"), np.errstate(all="ignore"):
        prepare_on_device(big, CPU)
    with pytest.raises(InvalidDataError, match="'kspace' contains"), np.errstate(all="ignore"):
        prepare_scan(big)


def test_device_scan_describes_itself_and_pickles_as_a_host_scan():
    scan = _scan(7)
    ready, _ = prepare_on_device(scan, CPU, dcf="ramp")
    back = pickle.loads(pickle.dumps(ready))
    assert isinstance(back, Scan) and back == ready.to_scan()
    assert relative(back.weights, prepare_scan(scan, dcf="ramp")[0].weights) <= 1e-6
    assert isinstance(ready, DeviceScan) and "coils=3" in repr(ready) and "on cpu" in repr(ready)
    assert ready.ndim == 2 and ready.n_samples == ready.trajectory.shape[0]


# --- on a GPU -------------------------------------------------------------------------------------------------


def _poison_pool():
    """Fill the free blocks of CuPy's pool with NaN, so that a buffer taken from it and left unwritten shows."""
    cupy = cupy_module()
    block = cupy.empty(64 << 20, cupy.uint8)
    block.fill(0xFF)
    del block


@pytest.mark.gpu
@pytest.mark.parametrize(("coils", "columns"), [(5, 1), (5, 7), (5, 100_003), (1, 300), (64, 1001), (130, 257)])
def test_device_upload_with_whitening_matches_numpy(monkeypatch, coils, columns):
    from helpers import poison_empty

    poison_empty(monkeypatch, upload)
    rng = np.random.default_rng(columns)
    shape, noise = (coils, columns), (coils, 3 * coils + 40)
    data = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    w = whitening_matrix(noise_covariance(rng.standard_normal(noise) + 1j * rng.standard_normal(noise)))
    out = upload.upload_columns(data, resolve_device("gpu"), w)  # 130 coils: more than a block's columns hold
    reference = w @ data.astype(np.complex128)  # float64 oracle
    assert relative(to_host(out), reference) <= 2e-6
    assert relative(to_host(out), apply_whitening(w, data)) <= 2e-6
    gpu = resolve_device("gpu")
    assert relative(to_host(upload.upload(data, gpu, chunk_bytes=100)), data) == 0.0


@pytest.mark.gpu
@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize(("rows", "coils", "columns"), [(1, 4, 1), (3, 8, 1001), (8, 32, 100_003)])
def test_device_upload_with_compression_matches_numpy(monkeypatch, staged, rows, coils, columns):
    """The product on the host on the way up, through one pageable copy or through the staging's pinned
    buffers (every array staged; one 2-D copy per buffer, or one copy per row where the rows are longer than a
    2-D copy's pitch allows), into a poisoned destination."""
    from helpers import poison_empty

    from mri_recon.arrays import staging

    poison_empty(monkeypatch, upload)
    monkeypatch.setattr(staging, "STAGED_ABOVE", 0 if staged else 1 << 40)
    per_row = staged and rows == 3  # the 2-D copy's pitch limit below a row's bytes: one copy per row
    monkeypatch.setattr(staging, "MAX_PITCH", 8 * columns - 1 if per_row else staging.MAX_PITCH)
    rng = np.random.default_rng(columns)
    data = (rng.standard_normal((coils, columns)) + 1j * rng.standard_normal((coils, columns))).astype(np.complex64)
    matrix = rng.standard_normal((rows, coils)) + 1j * rng.standard_normal((rows, coils))
    out = upload.upload_columns(data, resolve_device("gpu"), matrix)
    assert out.shape == (rows, columns) and out.dtype == np.complex64
    assert relative(to_host(out), matrix @ data.astype(np.complex128)) <= 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("choices", CHOICES, ids=IDS)
def test_gpu_preparation_matches_the_host_one(choices):
    _poison_pool()
    scan = _scan(11, matrix=(40, 36), coils=4)
    ready, record = prepare_on_device(scan, resolve_device("gpu"), **choices)
    assert cupy_module().get_array_module(ready.kspace) is cupy_module()
    ref, ref_record = prepare_scan(scan, **choices)
    _compare(ready, record, ref, ref_record, 1e-5)


def _rounding_spread(ready: Scan, record: dict, device: str) -> float:
    """How far the image moves when the prepared k-space moves by float32 rounding (a relative 2^-24 per
    sample): the agreement two preparations equal to float32 rounding can reach. Walsh maps of this noisy
    scan amplify it about 2400 times (1.4e-4 on the CPU), the other choices keep it near 5e-7."""
    rng = np.random.default_rng(3)
    noise = rng.standard_normal(ready.kspace.shape) + 1j * rng.standard_normal(ready.kspace.shape)
    moved = ready.replace(kspace=(ready.kspace * (1 + 2.0**-24 * noise)).astype(np.complex64))
    images = [pipeline.reconstruct(r, device=device, method="nufft", iterations=8,
                                   estimate_maps=record["estimate_maps"], maps_basis=record["maps_basis"]).image
              for r in (ready, moved)]
    return relative(images[1], images[0])


@pytest.mark.gpu
@pytest.mark.parametrize("choices", CHOICES[:4], ids=IDS[:4])
def test_gpu_images_match_cpu_and_host_preparation(choices):
    scan = _scan(12, matrix=(40, 36), coils=4)
    gpu = prepare_and_reconstruct(scan, device="gpu", method="nufft", iterations=8, **choices)
    assert isinstance(gpu[0], DeviceScan) and gpu[2].timings["prepare"] > 0
    host_ready, host_record = prepare_scan(scan, **choices)
    host_prep, again = (pipeline.reconstruct(host_ready, device="gpu", method="nufft", iterations=8,
                                             estimate_maps=host_record["estimate_maps"],
                                             maps_basis=host_record["maps_basis"]) for _ in range(2))
    cpu = prepare_and_reconstruct(scan, device="cpu", method="nufft", iterations=8, **choices)[2]
    # the spread of a 2^-24 move of the k-space, times how far the two preparations' k-spaces are apart in such
    # moves (float32 whitening on the device, float64 on the host), or the GPU NUFFT's run-to-run difference
    # (atomic sums): the Walsh maps amplify each alike
    apart = relative(to_host(gpu[0].kspace), host_ready.kspace) / 2.0**-24
    spread = max(_rounding_spread(host_ready, host_record, "cpu") * max(1.0, apart),
                 relative(again.image, host_prep.image))
    assert relative(gpu[2].image, host_prep.image) <= max(1e-5, 10 * spread)
    # GPU vs CPU NUFFT engines: their tolerance (1e-6) is about 17 float32 roundings (2^-24), which the Walsh
    # maps of this noisy scan amplify as they amplify the rounding spread
    assert relative(gpu[2].image, cpu.image) <= max(1e-4, 20 * spread)


@pytest.mark.gpu
def test_gpu_preparation_in_3d_and_with_the_psf_cache(tmp_path):
    from mri_recon.io.cache import PsfCache

    scan = _scan(13, matrix=(16, 16, 12), coils=2, trajectory="kooshball").replace(weights=None)
    for method in ("exact", "nufft"):
        gpu = prepare_and_reconstruct(scan, device="gpu", method=method, iterations=5, dcf="ramp",
                                      psf_cache=PsfCache(tmp_path))[2]
        cpu = prepare_and_reconstruct(scan, device="cpu", method="nufft", iterations=5, dcf="ramp")[2]
        assert relative(gpu.image, cpu.image) <= 1e-4


def test_the_numpy_twin_leaves_cupy_unimported():
    """The device preparation on the CPU (its NumPy twin, compression on the host thread included) asks nothing
    of CuPy: where CuPy is installed its import would cost the process a few tenths of a second, and a module
    half imported by one thread must not be taken for CuPy by another."""
    import subprocess
    import sys

    code = ("import sys\nfrom mri_recon.arrays.backend import CPU\n"
            "from mri_recon.prep.device import prepare_on_device\nfrom mri_recon.sim.simulate import simulate_scan\n"
            "scan = simulate_scan((24, 24), 'golden', coils=4, snr=40.0, seed=1)\n"
            "ready, record = prepare_on_device(scan, CPU, coil_compress=2)\n"
            "print(record['coil_compress'], sorted(m for m in sys.modules if m.split('.')[0] == 'cupy'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "2 []"


def test_the_preparation_and_the_products_run_blas_on_one_thread(monkeypatch):
    """The host's BLAS calls of the device preparation (the whitening, the compression matrix) and of a product
    on the way up run on one BLAS thread, and the limit is lifted after: BLAS's idle threads would spin on the
    cores the copies' threads use."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from mri_recon.arrays import backend
    from mri_recon.prep import device as device_module

    def blas_threads() -> list[int]:
        return [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"]

    seen: list[list[int]] = []
    whitening = device_module.whitening_of
    monkeypatch.setattr(device_module, "whitening_of", lambda scan: seen.append(blas_threads()) or whitening(scan))
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):  # several threads, whatever the host has
        before = blas_threads()
        assert before and all(count > 1 for count in before)
        prepare_on_device(_scan(3), CPU)
        assert seen == [[1] * len(before)] and blas_threads() == before
        monkeypatch.setattr(backend, "copy_product_up", lambda *a: seen.append(blas_threads()))
        backend.upload_product(None, None, None, CPU)
        assert seen[-1] == [1] * len(before) and blas_threads() == before
