"""``mri-recon doctor``: versions, a self-test of the CPU path, kernel compilation and a short self-test
of every GPU kernel and of whole reconstructions.

Run once after installing the ``gpu`` extra, it also takes the first GPU reconstruction's compile time out of
the way: every registry configuration is built (on all CPU cores) and small reconstructions build the CuPy
kernels the pipeline uses, all kept in CuPy's on-disk kernel cache.

The CPU path is always tested: F^H d and F of every registered CPU engine (the NumPy sum, FINUFFT, the FFT
engine, and any engine added to :mod:`mri_recon.operators.engines.registry`) against the float64 NumPy DFT
on a small 2D and 3D problem, and a tiny CG-SENSE solve against ``numpy.linalg.solve`` (tolerance
:data:`CPU_TOLERANCE`). On a GPU every registered GPU engine is checked the same way.

Each GPU kernel runs on fresh random inputs and is compared with the float64 NumPy oracle (or
``scipy.ndimage.correlate`` for the filter). A CUDA, driver or compiler mismatch that produces silently
wrong results shows up here as a FAIL with the measured error.
"""

from __future__ import annotations

import importlib.metadata
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ._version import __version__
from .arrays.backend import Device, cupy_module, resolve_device
from .scan import Scan

CPU_TOLERANCE = 1e-5
"""Relative error allowed in the CPU self-test (FINUFFT runs at 1e-7; CG is run to convergence)."""
PACKAGES = ("numpy", "scipy", "h5py", "click", "finufft", "ismrmrd", "nibabel", "tqdm")
"""Distributions whose versions ``doctor`` prints (CuPy is reported separately)."""
CPU_MATRICES = ((12, 10), (6, 5, 4))
"""The image sizes of the CPU engines' checks."""
TOLERANCE = {"fhd": 2e-5, "forward": 2e-5, "psf": 2e-5, "filter": 1e-6, "cg": 1e-4, "recon": 1e-3}


@dataclass(frozen=True)
class Check:
    name: str
    error: float | None
    tolerance: float
    seconds: float
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.error is not None and bool(np.isfinite(self.error)) and self.error <= self.tolerance


def versions(device: Device | None) -> list[tuple[str, str]]:
    rows = [("mri-recon", __version__), ("python", platform.python_version())]
    for name in PACKAGES:
        try:
            rows.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            rows.append((name, "not installed"))
    cupy = cupy_module()
    if cupy is None:
        rows.append(("cupy", "not installed"))
        return rows
    rows.append(("cupy", cupy.__version__))
    try:
        rows.append(("cuda runtime", _cuda_version(cupy.cuda.runtime.runtimeGetVersion())))
        driver = cupy.cuda.runtime.driverGetVersion()  # 0: no driver installed (CUDA's convention)
        rows.append(("cuda driver", _cuda_version(driver) if driver > 0 else "no CUDA driver"))
        from cupy_backends.cuda.libs import nvrtc

        rows.append(("nvrtc", ".".join(str(v) for v in nvrtc.getVersion())))
    except Exception as exc:  # noqa: BLE001 - report, do not crash
        rows.append(("cuda", f"unavailable ({exc})"))
    if device is not None and device.is_gpu:
        props = cupy.cuda.runtime.getDeviceProperties(device.index)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        rows.append(("gpu", f"{device}: {name}, compute capability {props['major']}.{props['minor']}, "
                            f"{props['multiProcessorCount']} SMs, {props['totalGlobalMem'] / 2**30:.1f} GiB"))
    return rows


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _relative(out, ref) -> float:
    out = np.asarray(out, dtype=np.complex128)
    ref = np.asarray(ref, dtype=np.complex128)
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))


def _timed(name: str, tolerance: float, fn: Callable[[], float]) -> Check:
    start = time.perf_counter()
    try:
        error = fn()
        message = ""
    except Exception as exc:  # noqa: BLE001 - a failing kernel is a FAIL line, not a crash
        error, message = None, f"{type(exc).__name__}: {exc}"
    return Check(name, error, tolerance, time.perf_counter() - start, message)


def _compile_all(device: Device) -> float:
    """Build every configuration of :mod:`mri_recon.kernels.registry` on ``device``, on as many threads as
    there are CPU cores (CuPy's disk cache keeps them for later runs); 0.0 when all build, a compile error
    raises."""
    from .kernels import prefetch, registry

    for future in prefetch(registry.configurations(), device):
        future.result()
    return 0.0


def _pipeline_checks(device: Device, rng: np.random.Generator) -> list[Check]:
    """Small reconstructions the way ``mri-recon reconstruct`` runs them (prewhitening, each coil-map choice of
    :mod:`mri_recon.prep.maps_methods` but ``auto``, a PSF cache, a progress callback) on the GPU with each
    registered GPU engine that serves non-Cartesian scans, 2D and 3D, against the same reconstruction on the
    CPU (FINUFFT, 1e-7). Besides testing the whole path,
    this builds the CuPy kernels a reconstruction uses (elementwise, reductions, FFT plans), so that a first
    reconstruction after ``doctor`` finds them in CuPy's kernel cache."""
    import tempfile

    from .api import prepare_and_reconstruct
    from .io.cache import PsfCache
    from .operators.engines.registry import engines
    from .prep.maps_methods import AUTO
    from .prep.maps_methods import choices as coil_map_choices
    from .sim.simulate import simulate_scan

    checks = []
    seed = int(rng.integers(2**31))
    methods = [e.name for e in engines() if e.device_kind == "gpu" and "non-cartesian" in e.samplings]
    with tempfile.TemporaryDirectory(prefix="mri-recon-doctor-") as folder:
        cache = PsfCache(folder)
        # sizes at which CuPy's reductions take their full block size (>= 2048 elements), as on real scans
        for kind, matrix in (("golden", (64, 60)), ("kooshball", (16, 16, 14))):
            scan = simulate_scan(matrix, kind, coils=8, seed=seed, dcf="pipe")
            for maps in (name for name in coil_map_choices() if name != AUTO):
                settings = {"coil_maps": maps, "iterations": 6, "tol": 0.0}
                reference = prepare_and_reconstruct(scan, device="cpu", method="nufft", **settings)[2].image
                for method in methods:
                    def run(c: Scan = scan, m: str = method, s: dict = settings, r: np.ndarray = reference) -> float:
                        image = prepare_and_reconstruct(c, device=device, method=m, psf_cache=cache,
                                                        progress=lambda *event: None, **s)[2].image
                        return _relative(image, r)

                    checks.append(_timed(f"recon {len(matrix)}d {method} {maps}", TOLERANCE["recon"], run))
    return checks


def _operator_checks(matrix: tuple[int, ...], rng: np.random.Generator) -> list[Check]:
    """F^H d, F and the PSF, and F^H d and F with a field map, on one random problem, each against the float64
    oracle."""
    from .operators.engines import gpu_exact as gpu_fhd
    from .operators.engines.nudft import nudft_adjoint, nudft_forward

    cupy = cupy_module()
    m, coils = 1500, 3
    traj = ((rng.random((m, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    data = (rng.standard_normal((coils, m)) + 1j * rng.standard_normal((coils, m))).astype(np.complex64)
    image = (rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix))).astype(np.complex64)
    weights = rng.random(m).astype(np.float32)
    big = tuple(2 * n for n in matrix)
    d_traj = cupy.asarray(traj)
    tag = f"{len(matrix)}d"

    def fhd() -> float:
        out = gpu_fhd.fhd_gpu(cupy.asarray(data), d_traj, matrix)
        return _relative(cupy.asnumpy(out), nudft_adjoint(data, traj, matrix))

    def forward() -> float:
        out = gpu_fhd.forward_gpu(cupy.asarray(image), d_traj)
        return _relative(cupy.asnumpy(out), nudft_forward(image, traj))

    def psf() -> float:
        out = gpu_fhd.psf_gpu(d_traj, cupy.asarray(weights), matrix)
        return _relative(cupy.asnumpy(out), nudft_adjoint(weights.astype(np.complex64), 2 * traj, big))

    from .operators.offres import gpu_offres
    from .operators.offres.model import offres_adjoint, offres_forward

    fmap = (150 * (2 * rng.random(matrix) - 1)).astype(np.float32)
    times = (rng.random(m) * 16e-3).astype(np.float32)
    d_fmap, d_times = cupy.asarray(fmap), cupy.asarray(times)

    def fhd_offres() -> float:  # the default: the tensor cores for 3 coils where the GPU has them
        out = gpu_offres.fhd_offres_gpu(cupy.asarray(data), d_traj, matrix, d_fmap, d_times)
        return _relative(cupy.asnumpy(out), offres_adjoint(data, traj, fmap, times))

    def fhd_offres_phasor() -> float:
        out = gpu_offres.fhd_offres_gpu(cupy.asarray(data), d_traj, matrix, d_fmap, d_times, tensor=False)
        return _relative(cupy.asnumpy(out), offres_adjoint(data, traj, fmap, times))

    from .sim.offres import readout_times

    readouts = readout_times(m, m // 3, 16e-3)  # three readouts at a constant dwell time: the time recurrence
    d_readouts = cupy.asarray(readouts)

    def fhd_offres_recur() -> float:
        out = gpu_offres.fhd_offres_gpu(cupy.asarray(data), d_traj, matrix, d_fmap, d_readouts, recur=True,
                                        tensor=False)
        return _relative(cupy.asnumpy(out), offres_adjoint(data, traj, fmap, readouts))

    def forward_offres() -> float:
        out = gpu_offres.forward_offres_gpu(cupy.asarray(image), d_traj, d_fmap, d_times)
        return _relative(cupy.asnumpy(out), offres_forward(image, traj, fmap, times))

    return [_timed(f"fhd {tag}", TOLERANCE["fhd"], fhd), _timed(f"forward {tag}", TOLERANCE["forward"], forward),
            _timed(f"psf {tag}", TOLERANCE["psf"], psf),
            _timed(f"fhd offres {tag}", TOLERANCE["fhd"], fhd_offres),
            _timed(f"fhd offres phasor {tag}", TOLERANCE["fhd"], fhd_offres_phasor),
            _timed(f"fhd offres recur {tag}", TOLERANCE["fhd"], fhd_offres_recur),
            _timed(f"forward offres {tag}", TOLERANCE["forward"], forward_offres)]


def _filter_check(shape: tuple[int, ...], size: tuple[int, ...], rng: np.random.Generator, device: Device) -> Check:
    import scipy.ndimage as ndi

    from .filters import convolve

    cupy = cupy_module()
    img = rng.standard_normal(shape).astype(np.float32)
    taps = rng.standard_normal(size).astype(np.float32)

    def run_filter() -> float:
        out = cupy.asnumpy(convolve(cupy.asarray(img), taps, mode="zero", device=device))
        ref = ndi.correlate(img.astype(np.float64), taps.astype(np.float64), mode="constant", cval=0.0)
        return _relative(out, ref)

    return _timed(f"filter {'x'.join(map(str, shape))}", TOLERANCE["filter"], run_filter)


def _cg_check(matrix: tuple[int, ...], rng: np.random.Generator) -> Check:
    """CG-SENSE (the fused Toeplitz operator and CG kernels, graph replay included) against NumPy in float64."""
    from .operators.normal.toeplitz import normal_operator
    from .solvers.cg import cg

    cupy = cupy_module()
    coils, iterations = 3, 8
    # a real positive kernel spectrum makes the Toeplitz operator, and with it A, Hermitian positive definite
    spectrum = (np.abs(rng.standard_normal(tuple(2 * n for n in matrix))) + 1.0).astype(np.complex64)
    maps = ((rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix))) / coils).astype(
        np.complex64)
    rhs = (rng.standard_normal(matrix) + 1j * rng.standard_normal(matrix)).astype(np.complex64)

    def run_cg() -> float:
        op = normal_operator(cupy.asarray(spectrum), coil_maps=cupy.asarray(maps), lam=0.5)
        x, _ = cg(op, cupy.asarray(rhs), max_iterations=iterations, tolerance=0.0)
        ref, _ = cg(normal_operator(spectrum.astype(np.complex128), coil_maps=maps.astype(np.complex128), lam=0.5),
                    rhs.astype(np.complex128), max_iterations=iterations, tolerance=0.0)
        return _relative(cupy.asnumpy(x), ref)

    return _timed(f"cg-sense {len(matrix)}d", TOLERANCE["cg"], run_cg)


def _engine_trajectory(engine: type, matrix: tuple[int, ...], m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` random samples of a sampling ``engine`` serves: anywhere in the band, or on integer frequencies
    for an engine of Cartesian scans only."""
    if "non-cartesian" in engine.samplings:
        return ((rng.random((m, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    return np.stack([rng.integers(-(n // 2), n - n // 2, m) for n in matrix], axis=1).astype(np.float32)


def _engine_checks(engine: type, matrix: tuple[int, ...], rng: np.random.Generator) -> list[Check]:
    """F^H d and F of a registered ``engine`` on one random problem of its sampling, each against the float64
    NumPy DFT (on its device: CuPy arrays for a GPU engine)."""
    from .arrays.backend import to_host
    from .operators.engines.nudft import nudft_adjoint, nudft_forward

    m, coils = 400, 2
    traj = _engine_trajectory(engine, matrix, m, rng)
    data = (rng.standard_normal((coils, m)) + 1j * rng.standard_normal((coils, m))).astype(np.complex64)
    image = (rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix))).astype(np.complex64)
    up = cupy_module().asarray if engine.device_kind == "gpu" else np.asarray
    tolerance = CPU_TOLERANCE if engine.device_kind == "cpu" else TOLERANCE["fhd"]
    tag = f"{engine.key} {{}} {len(matrix)}d"

    def fhd() -> float:
        return _relative(to_host(engine(up(traj), matrix, coils).H(up(data))), nudft_adjoint(data, traj, matrix))

    def forward() -> float:
        return _relative(to_host(engine(up(traj), matrix, coils)(up(image))), nudft_forward(image, traj))

    return [_timed(tag.format("fhd"), tolerance, fhd), _timed(tag.format("fwd"), tolerance, forward)]


def engines_of(device_kind: str, matrix: tuple[int, ...]) -> list[type]:
    """The registered engines of ``device_kind`` that serve ``len(matrix)`` dimensions, in registry order."""
    from .operators.engines.registry import engines

    return [e for e in engines() if e.device_kind == device_kind and len(matrix) in e.dims]


def _cpu_cg_check(matrix: tuple[int, ...], rng: np.random.Generator) -> Check:
    """CG-SENSE on the CPU (Toeplitz normal operator with coil maps) against ``numpy.linalg.solve`` of the same
    operator written out as a dense matrix."""
    from .operators.normal.toeplitz import normal_operator
    from .solvers.cg import cg

    coils, n = 3, int(np.prod(matrix))
    spectrum = np.abs(rng.standard_normal(tuple(2 * k for k in matrix))) + 1.0  # real, positive: A is HPD
    maps = (rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix))) / coils
    rhs = rng.standard_normal(matrix) + 1j * rng.standard_normal(matrix)

    def run_cg() -> float:
        op = normal_operator(spectrum.astype(np.complex128), coil_maps=maps, lam=0.5)
        x, _ = cg(op, rhs, max_iterations=4 * n, tolerance=1e-12)
        dense = np.stack([op(np.eye(n, dtype=np.complex128)[j].reshape(matrix)).reshape(-1) for j in range(n)],
                         axis=1)
        return _relative(x, np.linalg.solve(dense, rhs.reshape(-1)).reshape(matrix))

    return _timed(f"cpu cg-sense {len(matrix)}d", CPU_TOLERANCE, run_cg)


def cpu_self_test(rng: np.random.Generator | None = None) -> list[Check]:
    """Every registered CPU engine against the NumPy DFT (2D and 3D) and a CPU CG-SENSE against
    ``numpy.linalg.solve``."""
    rng = rng or np.random.default_rng()
    checks = []
    for matrix in CPU_MATRICES:
        for engine in engines_of("cpu", matrix):
            checks += _engine_checks(engine, matrix, rng)
    checks.append(_cpu_cg_check((6, 5), rng))
    return checks


def self_test(device: Device, rng: np.random.Generator | None = None) -> list[Check]:
    """Compile every kernel, then run each once on small random inputs against the CPU oracle."""
    rng = rng or np.random.default_rng()
    checks = [_timed("compile kernels", 0.0, lambda: _compile_all(device))]
    with device.use():
        for matrix in ((23, 17), (9, 8, 7)):
            checks += _operator_checks(matrix, rng)
            for engine in engines_of("gpu", matrix):
                checks += _engine_checks(engine, matrix, rng)
        for shape, size in (((67, 45), (5, 3)), ((67, 48), (5, 5)), ((19, 17, 11), (3, 5, 3))):
            checks.append(_filter_check(shape, size, rng, device))  # (67, 48): the streaming kernel
        for matrix in ((24, 20), (8, 6, 5)):
            checks.append(_cg_check(matrix, rng))
        checks += _pipeline_checks(device, rng)
    return checks


def run(device: str = "auto") -> tuple[list[tuple[str, str]], list[Check], list[Check]]:
    """Versions, the CPU self-test and the GPU self-test (empty without a GPU)."""
    dev = resolve_device(device)
    rows = versions(dev)
    return rows, cpu_self_test(), self_test(dev) if dev.is_gpu else []
