"""Bundled kernels on the GPU: the same bytes as CuPy's NVRTC build, the same results bit for bit, PTX too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import load_script, random_problem, relative

import mri_recon
import mri_recon.kernels as kernels
from mri_recon.arrays.backend import cupy_module
from mri_recon.kernels import bundle as kb
from mri_recon.operators.engines.nudft import nudft_adjoint, nudft_forward

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
FILES = {"fhd.cu", "forward.cu", "cg.cu", "toeplitz.cu"}
LOAD = kb.load


def _script():
    return load_script("build_kernels")


def _capability() -> int:
    return int(cupy_module().cuda.Device(0).compute_capability)


@pytest.fixture(scope="module")
def device_bundle(tmp_path_factory):
    """A bundle of FILES for the target this GPU runs (its CUBIN)."""
    targets = kb.targets_for(_capability())
    if not targets or not targets[0].startswith("sm_"):
        pytest.skip(f"no CUBIN target for compute capability {_capability()}")
    out = tmp_path_factory.mktemp("device") / "bundle"
    _script().build(out, FILES, targets=(targets[0],))
    return out, targets[0]


def _use(monkeypatch, directory, switch):
    """Load from the bundle at ``directory`` (``switch`` "1") or compile with NVRTC ("0"), with no module or plan
    kept from before; returns the list that records, per module of FILES built, whether the bundle served it."""
    served: list[bool] = []

    def spy(cupy, filename, defines, device_index):
        module = LOAD(cupy, filename, defines, device_index)
        if filename in FILES:
            served.append(module is not None)
        return module

    monkeypatch.setattr(kb, "load", spy)
    monkeypatch.setattr(kb, "installed", lambda: kb.Bundle(directory))
    monkeypatch.setenv(kb.ENV_SWITCH, switch)
    monkeypatch.setattr(kernels, "_BUILT", {})
    mri_recon.plan_cache_clear()
    return served


def test_bundled_cubin_is_the_bytes_cupy_compiles(device_bundle, tmp_path):
    """CuPy's own NVRTC build (a fresh kernel cache in a child process) writes the very CUBINs of the bundle."""
    out, target = device_bundle
    code = ("import mri_recon.kernels as k\n"
            "k.get_module('cg.cu'); k.get_module('toeplitz.cu')\n")
    env = dict(os.environ, CUPY_CACHE_DIR=str(tmp_path / "cache"), MRI_RECON_PRECOMPILED="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    cached = {p.read_bytes()[40:] for p in (tmp_path / "cache").rglob("*.cubin")}  # SHA-1 hex, then the CUBIN
    bundle = kb.Bundle(out)
    for filename in ("cg.cu", "toeplitz.cu"):
        found = bundle.binary(filename, {}, _capability(), int(cupy_module().cuda.runtime.driverGetVersion()))
        assert found is not None and found[0] == target
        assert found[1] in cached, f"{filename}: the bundled {target} differs from CuPy's NVRTC build"


@pytest.mark.parametrize(("matrix", "coils"), [((33, 30), 1), ((33, 30), 3), ((9, 7, 5), 8)], ids=str)
def test_bundled_kernels_give_the_nvrtc_results_bit_for_bit(device_bundle, monkeypatch, rng, matrix, coils):
    cupy = cupy_module()
    traj, data = random_problem(rng, matrix, coils, 700)
    image = (rng.standard_normal((coils, *matrix)) + 1j * rng.standard_normal((coils, *matrix))).astype(np.complex64)
    results = {}
    for switch in ("1", "0"):
        served = _use(monkeypatch, device_bundle[0], switch)
        adjoint = mri_recon.fhd(cupy.asarray(data), cupy.asarray(traj), matrix, device="gpu", method="exact")
        fwd = mri_recon.forward(cupy.asarray(image), cupy.asarray(traj), device="gpu", method="exact")
        results[switch] = (cupy.asnumpy(adjoint), cupy.asnumpy(fwd))
        assert served and all(served) == (switch == "1"), served
    for bundled, compiled in zip(results["1"], results["0"]):
        np.testing.assert_array_equal(bundled.view(np.float32), compiled.view(np.float32))
    assert relative(results["1"][0], nudft_adjoint(data, traj, matrix)) < 2e-5
    assert relative(results["1"][1], nudft_forward(image, traj)) < 2e-5


def test_ptx_is_loaded_and_computes_the_transform(monkeypatch, rng, tmp_path):
    """A bundle holding only PTX of the device's own architecture: the driver translates it; the result is the
    float64 sum to float32 accuracy (and, the same PTX passing through ptxas, what NVRTC's CUBIN gives)."""
    cupy = cupy_module()
    ptx = f"compute_{_capability()}"
    if ptx not in {f"compute_{a}" for a in (80, 86, 89, 90, 100, 103, 120, 121)}:
        pytest.skip(f"NVRTC may not know {ptx}")
    script = _script()
    if not kb.driver_accepts(ptx, script.nvrtc_version(), int(cupy.cuda.runtime.driverGetVersion())):
        pytest.skip(f"the driver is older than NVRTC {script.nvrtc_version()}: it would refuse its PTX")
    script.build(tmp_path / "ptx", {"fhd.cu"}, targets=(ptx,))
    matrix, coils = (20, 17), 2
    traj, data = random_problem(rng, matrix, coils, 500)
    results = {}
    for switch in ("1", "0"):
        monkeypatch.setattr(kb, "targets_for", lambda capability, available=kb.TARGETS: [ptx])
        served = _use(monkeypatch, tmp_path / "ptx", switch)
        out = mri_recon.fhd(cupy.asarray(data), cupy.asarray(traj), matrix, device="gpu", method="exact")
        results[switch] = cupy.asnumpy(out)
        assert served and all(served) == (switch == "1"), served
    assert relative(results["1"], nudft_adjoint(data, traj, matrix)) < 2e-5
    assert relative(results["1"], results["0"]) < 1e-6


def test_a_reconstruction_loads_its_modules_from_the_bundle(device_bundle, monkeypatch, rng):
    """The exact engine's reconstruction (F^H d, PSF, Toeplitz, CG): every module from the bundle, the image
    the NVRTC-built one to float32 rounding (CG's float atomics make neither run bit-reproducible)."""
    from mri_recon.scan import Scan

    matrix = (24, 25)
    traj, data = random_problem(rng, matrix, 4, 1500, reach=0.45)
    scan = Scan(kspace=data, trajectory=traj, matrix=matrix)
    images = {}
    for switch in ("1", "0"):
        served = _use(monkeypatch, device_bundle[0], switch)
        result = mri_recon.reconstruct(scan, prepare=False, iterations=10, tol=0.0, device="gpu", method="exact",
                                       progress=False)
        images[switch] = np.asarray(result.image)
        assert served and all(served) == (switch == "1"), served
    assert relative(images["1"], images["0"]) < 1e-5


COUNT_SAVES = """import atexit, json, sys
from cupy.cuda import compiler
backend, real_save, compiled = compiler._kernel_cache_backend, compiler._kernel_cache_backend.save, []
def save(name, cubin, source):
    if "mri_recon_" not in source:
        compiled.append(name)
    return real_save(name, cubin, source)
backend.save = save
atexit.register(lambda: open(sys.argv[1], "w").write(json.dumps(compiled)))
from mri_recon.cli import main
main(sys.argv[2:])
"""
"""``mri-recon ARGS`` writing to ``sys.argv[1]`` the CuPy kernels this process compiled (its cache saves)."""


def test_warm_up_compiles_cupy_kernels_before_first_use(tmp_path):
    """A reconstruction in a fresh process with an empty CUPY_CACHE_DIR: the warm-up's workers compile every
    recorded kernel (counted as scripts/cold_start.py counts: CUPY_CACHE_SAVE_CUDA_SOURCE keeps the source of
    each kernel compiled), mark the cache, and the main process compiles none of CuPy's kernels itself."""
    from mri_recon.kernels import cupy_kernels as ck
    from mri_recon.kernels import warmup

    cupy = cupy_module()
    version, requests = ck.recorded()
    if version != cupy.__version__ or not requests:
        pytest.skip(f"the record is of CuPy {version or 'nothing'}, this is {cupy.__version__}")
    if warmup.workers(len(requests)) == 0:
        pytest.skip("one CPU: no warm-up")
    cache, scan, compiled = tmp_path / "cache", tmp_path / "scan.h5", tmp_path / "compiled.json"
    env = dict(os.environ, CUPY_CACHE_DIR=str(cache), CUPY_CACHE_SAVE_CUDA_SOURCE="1",
               MRI_RECON_CACHE_DIR=str(tmp_path / "psf"), PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get(
                   "PYTHONPATH", "")]))
    for name in ("MRI_RECON_PRECOMPILED", warmup.ENV_SWITCH, "CUPY_CACHE_IN_MEMORY", "CUPY_CUDA_COMPILE_WITH_DEBUG"):
        env.pop(name, None)
    subprocess.run([sys.executable, "-m", "mri_recon.cli", "simulate", str(scan), "--matrix", "64", "--coils", "1",
                    "-q"], env=dict(env, CUPY_CACHE_DIR=str(tmp_path / "simulate")), check=True, timeout=300)
    subprocess.run([sys.executable, "-c", COUNT_SAVES, str(compiled), "reconstruct", str(scan), "--device", "gpu",
                    "--method", "auto", "-q", "-o", str(tmp_path / "out.h5")], env=env, check=True, timeout=300)
    assert len(list(cache.glob("mri-recon-warmup-*"))) == 1, sorted(p.name for p in cache.iterdir())
    counted = load_script("cold_start").count_kernels(cache)
    assert counted["cupy_kernels"] == len(requests), counted["cupy_names"]  # all by the workers, nothing more
    # the record covers this scan (record_cupy_kernels.py reconstructs it): the main process compiles none itself
    assert json.loads(compiled.read_text()) == []
