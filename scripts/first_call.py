"""The first reconstruction in a process (a notebook's first cell) against the warm calls after it (issue 45).

Each run is a new Python process that times, from its own start: ``import mri_recon``, ``load_scan(SCAN)``, the
first ``mri_recon.reconstruct(scan)`` (the README's call, device synchronized at its end) with its stage
timings, then ``--warm`` more calls (their median). The disk caches (CuPy's kernels, the bundle's modules) are
those of the runs before it, as in a notebook opened on a machine that has reconstructed before; one priming
process runs first and is not counted. The row's figure is ``first - warm``: CUDA's context, CuPy's and
cuFFT's first uses, the kernel modules loaded, the memory pool grown. Without ``--scan`` the issue's 2D problem
is written first (``scripts/bench_prepare.py``'s 256^2 8-coil scan with noise, file weights and maps).

Usage: python scripts/first_call.py OUT.json [--scan SCAN.h5] [--runs N] [--warm N] [--device gpu|cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import mri_recon
imported = time.perf_counter()
scan = mri_recon.load_scan(sys.argv[1])
loaded = time.perf_counter()

def call():
    began = time.perf_counter()
    result = mri_recon.reconstruct(scan, device=sys.argv[2])
    if sys.argv[2] == "gpu":
        import cupy
        cupy.cuda.Device().synchronize()
    return time.perf_counter() - began, dict(result.timings)

first, stages = call()
warm = sorted(call()[0] for _ in range(int(sys.argv[3])))
print(json.dumps({"import_s": imported - start, "load_s": loaded - imported, "first_s": first,
                  "first_stages_s": stages, "warm_s": warm[len(warm) // 2]}))
"""


def write_scan(folder: Path) -> str:
    """The issue's 2D scan (bench_prepare's, with noise) as a schema-v1 HDF5 file."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_prepare  # noqa: PLC0415 - the benchmark's problem
    import bench_recon  # noqa: PLC0415

    import mri_recon  # noqa: PLC0415

    path = folder / "first_call_2d.h5"
    mri_recon.save_scan(path, bench_prepare.with_noise(bench_recon.problem()))
    return str(path)


def run_child(scan: str, device: str, warm: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, scan, device, str(warm)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"child failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--scan", default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warm", type=int, default=7)
    parser.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scan = args.scan or write_scan(Path(folder))
        run_child(scan, args.device, 1)  # priming: the disk caches filled, as on a machine used before
        runs = [run_child(scan, args.device, args.warm) for _ in range(args.runs)]
    median = {key: statistics.median(r[key] for r in runs) for key in ("import_s", "load_s", "first_s", "warm_s")}
    median["first_minus_warm_s"] = statistics.median(r["first_s"] - r["warm_s"] for r in runs)
    report = {"scan": args.scan or "bench_prepare 2D 256^2 x 8 coils", "device": args.device, "runs": runs,
              "median": median}
    print(json.dumps(median, indent=1))
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
