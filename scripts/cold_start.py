"""The first GPU reconstruction in a fresh environment, with and without the warm-up and the bundle, against a warm one.

Each run is ``python -m mri_recon.cli reconstruct SCAN -o OUT -q`` in its own process, with CuPy's kernel cache
and mri-recon's PSF cache empty folders (what a fresh ``pip install`` has). "cold": the defaults, mri-recon's
modules from the precompiled bundle (``scripts/build_kernels.py``; docs/kernels.md) and CuPy's own kernels
compiled ahead on worker processes by the warm-up (``kernels.warmup``, from ``kernels/cupy_kernels.json``);
"cold_no_warmup": the same with ``MRI_RECON_WARMUP=0`` (CuPy compiles its own kernels on first use, one after
the other); "cold_nvrtc": with ``MRI_RECON_PRECOMPILED=0`` (every module compiled by NVRTC, on threads while the
data go up; the warm-up on); "warm": the "cold" run's folders again, now filled (median of ``--repeats`` runs);
"after doctor" (``--doctor``): empty folders, ``mri-recon doctor`` once, then one reconstruction.

The kernels in each cold run's CuPy cache are counted (``CUPY_CACHE_SAVE_CUDA_SOURCE=1`` keeps each source
beside its binary: mri-recon's own kernels carry the ``mri_recon_`` prefix, the rest are CuPy's elementwise,
reduction and CUB kernels; with the warm-up most of those were compiled by its workers, and ``warmup_marked``
says whether it finished). Each run's main process also counts, by kind, the seconds spent in CuPy's
compile-or-load-from-cache call (``compile_time``: ``*_compile_s``, ``*_compile_calls``) and the kernels it
compiled itself (``*_compiled_here``, CuPy's cache saves). With the warm-up, CuPy's kernels are compiled by the
worker processes, so the main process's "cupy" seconds are load time from the cache; the wait for the workers
(``warmup.ensure``, before the first kernel) is not in them, only in the run's total. Without ``--scan`` the issue's
2D problem is simulated first: 256^2, 8 coils, 512 spokes of 512 samples.

Usage: python scripts/cold_start.py OUT.json [--scan SCAN.h5] [--method auto|exact|nufft ...] [--repeats N]
       [--doctor]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIMED_CLI = r"""
import atexit, json, os, sys, threading, time
from cupy.cuda import compiler
real, lock = compiler._compile_with_cache_cuda, threading.Lock()
spent = {"mri_recon": [0.0, 0, 0], "cupy": [0.0, 0, 0]}
def timed(source, *args, **kwargs):
    start = time.perf_counter()
    try:
        return real(source, *args, **kwargs)
    finally:
        with lock:
            entry = spent["mri_recon" if "mri_recon_" in source else "cupy"]
            entry[0] += time.perf_counter() - start
            entry[1] += 1
compiler._compile_with_cache_cuda = timed
backend, real_save = compiler._kernel_cache_backend, compiler._kernel_cache_backend.save
def saved(name, cubin, source):
    with lock:
        spent["mri_recon" if "mri_recon_" in source else "cupy"][2] += 1
    return real_save(name, cubin, source)
backend.save = saved
atexit.register(lambda: open(os.environ["COLD_START_TIMES"], "w").write(json.dumps(spent)))
sys.argv[0] = "mri-recon"
from mri_recon.cli import main
main()
"""
"""``mri-recon`` with the seconds spent in CuPy's compile-or-load-from-cache call counted (summed over threads:
mri-recon's modules build on several at once; CuPy's own kernels one after the other on the main thread), and
the kernels this process compiled (CuPy's cache saves; the warm-up's workers are other processes)."""


def run_cli(args: list[str], env: dict[str, str], times: dict | None = None) -> float:
    """Seconds of one ``mri-recon ARGS`` process; ``times`` receives the compile seconds and calls by kind."""
    record = Path(env.get("CUPY_CACHE_DIR", tempfile.gettempdir())).parent / f"times-{time.monotonic_ns()}.json"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", TIMED_CLI, *args], env=dict(env, COLD_START_TIMES=str(record)),
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"mri-recon {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    if times is not None and record.is_file():
        spent = json.loads(record.read_text())
        times.update({f"{kind}_compile_s": round(value[0], 3) for kind, value in spent.items()})
        times.update({f"{kind}_compile_calls": value[1] for kind, value in spent.items()})
        times.update({f"{kind}_compiled_here": value[2] for kind, value in spent.items()})
    return seconds


def count_kernels(cache_dir: Path) -> dict:
    """The kernels whose source CuPy kept in ``cache_dir`` (compiled by any process: the warm-up's workers too),
    mri-recon's and CuPy's, and the binaries there."""
    ours, others = [], []
    for source in cache_dir.rglob("*.cu"):
        text = source.read_text(errors="replace")
        names = re.findall(r"__global__\s+void\s+(\w+)", text)
        (ours if "mri_recon_" in text else others).append(names[0] if names else source.name)
    return {"mri_recon_modules": len(ours), "cupy_kernels": len(others), "cupy_names": sorted(others),
            "binaries": sum(1 for p in cache_dir.rglob("*.cubin") if p.is_file()),
            "warmup_marked": any(cache_dir.glob("mri-recon-warmup-*"))}


def measure(scan: str, method: str, repeats: int, doctor: bool, work: Path) -> dict:
    def env_for(tag: str, **switches: str) -> tuple[dict[str, str], Path]:
        folder = work / f"{method}-{tag}"
        env = dict(os.environ, CUPY_CACHE_DIR=str(folder / "cupy"), MRI_RECON_CACHE_DIR=str(folder / "psf"),
                   CUPY_CACHE_SAVE_CUDA_SOURCE="1", MRI_RECON_PRECOMPILED="1", MRI_RECON_WARMUP="1")
        folder.mkdir(parents=True, exist_ok=True)
        return {**env, **switches}, folder

    args = ["reconstruct", scan, "--method", method, "-q", "-o"]
    runs = {"cold_nvrtc": {"MRI_RECON_PRECOMPILED": "0"}, "cold_no_warmup": {"MRI_RECON_WARMUP": "0"}, "cold": {}}
    times: dict[str, dict] = {tag: {} for tag in (*runs, "warm")}
    seconds, folders, envs = {}, {}, {}
    for tag, switches in runs.items():
        envs[tag], folders[tag] = env_for(tag, **switches)
        seconds[tag] = run_cli([*args, str(folders[tag] / "cold.h5")], envs[tag], times[tag])
    warm = [run_cli([*args, str(folders["cold"] / f"warm{i}.h5")], envs["cold"], times["warm"])
            for i in range(repeats)]
    median = statistics.median(warm)
    result = {"method": method, **{f"{tag}_s": value for tag, value in seconds.items()}, "warm_median_s": median,
              "warm_s": warm, **{f"{tag}_minus_warm_s": value - median for tag, value in seconds.items()},
              "compile_time": times, "compile_time_note": "with the warm-up on, cupy_compile_s is load time only "
              "(the workers compile; cupy_compiled_here counts what the main process compiled)",
              **{f"compiled_{tag}": count_kernels(folder / "cupy") for tag, folder in folders.items()}}
    if doctor:
        env, folder = env_for("doctor")
        result["doctor_s"] = run_cli(["doctor"], env)
        before = count_kernels(folder / "cupy")
        result["after_doctor_s"] = run_cli([*args, str(folder / "first.h5")], env)
        after = count_kernels(folder / "cupy")
        result["compiled_after_doctor"] = {
            "mri_recon_modules": after["mri_recon_modules"] - before["mri_recon_modules"],
            "cupy_kernels": after["cupy_kernels"] - before["cupy_kernels"],
            "cupy_names": sorted(set(after["cupy_names"]) - set(before["cupy_names"]))}
        result["after_doctor_minus_warm_s"] = result["after_doctor_s"] - median
    print(json.dumps({k: v for k, v in result.items() if not k.startswith(("warm_s", "compiled"))}), flush=True)
    return result


def bundle_info(cupy) -> dict:
    """What the installed bundle holds and whether it serves this device (the toeplitz.cu module as a probe)."""
    from mri_recon.kernels import bundle as kb

    installed = kb.installed()
    capability = int(cupy.cuda.Device(0).compute_capability)
    driver = int(cupy.cuda.runtime.driverGetVersion())
    probe = installed.binary("toeplitz.cu", {}, capability, driver)
    return {"entries": len(installed.entries), "nvrtc": installed.nvrtc, "capability": capability, "driver": driver,
            "compressed_bytes": sum((installed.directory / e["binary"]).stat().st_size
                                    for e in installed.entries.values()),
            "serves_this_device": probe[0] if probe else None, "cupy_record": cupy_record(cupy)}


def cupy_record(cupy) -> dict:
    """The recorded CuPy kernel requests the warm-up compiles (kernels/cupy_kernels.json): how many, for which
    CuPy, the architecture CuPy compiles for on this device and the warm-up's worker processes."""
    from cupy.cuda import compiler

    from mri_recon.kernels import cupy_kernels, warmup

    version, requests = cupy_kernels.recorded()
    return {"requests": len(requests), "cupy": version, "this_cupy": cupy.__version__,
            "nvrtc": ".".join(map(str, compiler._get_nvrtc_version())), "arch": str(compiler._get_arch()),
            "warmup_workers": warmup.workers(len(requests))}


def simulate(work: Path) -> str:
    """The issue's 2D problem: 256^2, 8 coils, 512 spokes x 512 samples (262,144 samples per coil)."""
    path = work / "scan_256.h5"
    done = subprocess.run([sys.executable, "-m", "mri_recon.cli", "simulate", str(path), "--matrix", "256",
                           "--coils", "8", "--spokes", "512", "--samples", "512", "-q"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"simulate failed: {done.stderr.strip()[-400:]}")
    return str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--scan", default=None, help="default: simulate the 2D problem (256^2, 8 coils)")
    parser.add_argument("--method", action="append", choices=("auto", "exact", "nufft"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--doctor", action="store_true", help="also time `doctor` and the first run after it")
    args = parser.parse_args()
    import cupy  # noqa: PLC0415 - GPU script

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        scan = args.scan or simulate(Path(tmp))
        for method in args.method or ["auto"]:
            results.append(measure(scan, method, args.repeats, args.doctor, Path(tmp)))
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    Path(args.out).write_text(json.dumps({
        "benchmark": "cold start", "device": name, "date": time.strftime("%Y-%m-%d"), "cupy": cupy.__version__,
        "python": platform.python_version(), "scan": args.scan or "simulated 256^2, 8 coils, 512 x 512 radial",
        "cpus": os.cpu_count(), "bundle": bundle_info(cupy), "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
