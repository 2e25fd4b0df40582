"""The first GPU reconstruction in a fresh environment against a warm one (CLI, new process each run).

Each run is ``python -m mri_recon.cli reconstruct SCAN -o OUT -q`` in its own process. "cold": CuPy's kernel
cache and mri-recon's PSF cache are empty folders (what a fresh ``pip install`` has); "warm": the same
folders again, filled by the cold run (median of ``--repeats`` runs); "after doctor": empty folders, then
``mri-recon doctor`` once, then one reconstruction. The kernels compiled by the cold run are counted from
CuPy's cache folder (``CUPY_CACHE_SAVE_CUDA_SOURCE=1`` keeps each source beside its binary: mri-recon's own
kernels carry the ``mri_recon_`` prefix, the rest are CuPy's elementwise and reduction kernels).

Usage: python scripts/cold_start.py OUT.json --scan SCAN.h5 [--method auto|exact|nufft ...] [--repeats N]
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


def run_cli(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mri_recon.cli", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"mri-recon {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return seconds


def count_kernels(cache_dir: Path) -> dict:
    ours, others = [], []
    for source in cache_dir.rglob("*.cu"):
        text = source.read_text(errors="replace")
        names = re.findall(r"__global__\s+void\s+(\w+)", text)
        (ours if "mri_recon_" in text else others).append(names[0] if names else source.name)
    return {"mri_recon_modules": len(ours), "cupy_kernels": len(others), "cupy_names": sorted(others),
            "binaries": sum(1 for p in cache_dir.rglob("*") if p.is_file() and p.suffix != ".cu")}


def measure(scan: str, method: str, repeats: int, doctor: bool, work: Path) -> dict:
    def env_for(tag: str) -> tuple[dict[str, str], Path]:
        folder = work / f"{method}-{tag}"
        env = dict(os.environ, CUPY_CACHE_DIR=str(folder / "cupy"), MRI_RECON_CACHE_DIR=str(folder / "psf"),
                   CUPY_CACHE_SAVE_CUDA_SOURCE="1")
        return env, folder

    args = ["reconstruct", scan, "--method", method, "-q", "-o"]
    env, folder = env_for("fresh")
    cold = run_cli([*args, str(folder / "cold.h5")], env)
    kernels = count_kernels(folder / "cupy")
    warm = [run_cli([*args, str(folder / f"warm{i}.h5")], env) for i in range(repeats)]
    result = {"method": method, "cold_s": cold, "warm_median_s": statistics.median(warm), "warm_s": warm,
              "cold_minus_warm_s": cold - statistics.median(warm), "compiled": kernels}
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
        result["after_doctor_minus_warm_s"] = result["after_doctor_s"] - result["warm_median_s"]
    print(json.dumps({k: v for k, v in result.items() if k != "warm_s"}), flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--scan", required=True)
    parser.add_argument("--method", action="append", choices=("auto", "exact", "nufft"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--doctor", action="store_true", help="also time `doctor` and the first run after it")
    args = parser.parse_args()
    import cupy  # noqa: PLC0415 - GPU script

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for method in args.method or ["auto"]:
            results.append(measure(args.scan, method, args.repeats, args.doctor, Path(tmp)))
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    Path(args.out).write_text(json.dumps({
        "benchmark": "cold start", "device": name, "date": time.strftime("%Y-%m-%d"), "cupy": cupy.__version__,
        "python": platform.python_version(), "scan": args.scan, "cpus": os.cpu_count(), "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
