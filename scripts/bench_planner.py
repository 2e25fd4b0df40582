"""The memory planner against measured peaks on the CPU: max RSS of a reconstruction in a fresh process,
minus that of a process that only imports what the reconstruction imports.

Each case runs in its own subprocess (``os.wait4`` gives that child's ``ru_maxrss``, as
``getrusage(RUSAGE_CHILDREN)`` would after it alone). The scans are simulated first, in another process,
and written to a temporary folder; the measured process reads one, reconstructs it (no PSF cache, no
PNG) and exits. Usage: ``python scripts/bench_planner.py [--json out.json] [--only NAME]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from benchtools import child_rss

ROOT = Path(__file__).resolve().parents[1]
_child = partial(child_rss, root=ROOT)
"""Run code in a fresh interpreter with this repository on its path: its max RSS in bytes and its stdout."""
# name: (matrix, trajectory, coils, spokes or interleaves, samples, method, coil maps)
CASES = {
    "2d-nufft-1coil": ((1024, 1024), "golden", 1, 805, 2048, "nufft", False),
    "2d-nufft-8coils": ((512, 512), "golden", 8, 403, 1024, "nufft", True),
    "3d-nufft-1coil": ((128, 128, 128), "kooshball", 1, 8000, 256, "nufft", False),
    "3d-nufft-4coils": ((96, 96, 96), "kooshball", 4, 6000, 192, "nufft", True),
    "2d-exact-1coil": ((96, 96), "golden", 1, 151, 192, "exact", False),
    "2d-exact-4coils": ((80, 80), "golden", 4, 126, 160, "exact", True),
    "3d-exact-1coil": ((16, 16, 16), "kooshball", 1, 400, 32, "exact", False),
}
IMPORTS = ("import h5py, numpy, scipy.fft, finufft; "
           "import mri_recon.pipeline, mri_recon.io, mri_recon.operators.engines.finufft")
MAKE = """
import sys, numpy as np
from mri_recon.io import save_scan
from mri_recon.sim.simulate import simulate_scan
matrix, kind, coils, spokes, samples, maps = eval(sys.argv[2])
extra = {"interleaves": spokes} if kind == "spiral" else {"spokes": spokes}
scan = simulate_scan(tuple(matrix), kind, coils=coils, samples=samples, snr=30.0, seed=1, dcf="ramp", **extra)
scan = scan.replace(ground_truth=None, noise=None, coil_maps=scan.coil_maps if maps else None)
save_scan(sys.argv[1], scan)
print(scan.n_samples)
"""
RUN = IMPORTS + """
import sys, time
from mri_recon.io import load_scan
from mri_recon.pipeline import reconstruct
scan = load_scan(sys.argv[1])
start = time.perf_counter()
reconstruct(scan, iterations=10, tol=0.0, device="cpu", method=sys.argv[2], progress=False, psf_cache=None)
print(time.perf_counter() - start)
"""





def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default=None)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from mri_recon.planning.planner import human_bytes, plan  # noqa: PLC0415 - after the path is set

    baseline = min(_child(IMPORTS)[0] for _ in range(3))
    rows = []
    print(f"baseline (imports only): {human_bytes(baseline)}")
    print(f"{'case':<17} {'matrix':<14} {'coils':>5} {'samples':>8} {'plan':>10} {'measured':>10} "
          f"{'ratio':>6} {'peak stage':>10} {'time s':>7}")
    with tempfile.TemporaryDirectory() as folder:
        for name, (matrix, kind, coils, spokes, samples, method, maps) in CASES.items():
            if args.only and args.only not in name:
                continue
            path = str(Path(folder) / f"{name}.h5")
            _, m = _child(MAKE, path, repr((list(matrix), kind, coils, spokes, samples, maps)))
            m = int(m)
            p = plan(matrix, coils, m, sense=maps or coils == 1, iterations=10, available_bytes=None, gpu=False,
                     method=method)
            rss, seconds = _child(RUN, path, method)
            measured = rss - baseline
            stage = max(p.stages, key=p.stages.get)
            rows.append({"case": name, "matrix": list(matrix), "coils": coils, "samples": m, "method": method,
                         "plan_bytes": p.peak_bytes, "measured_bytes": measured, "ratio": measured / p.peak_bytes,
                         "stages": dict(p.stages), "seconds": float(seconds)})
            print(f"{name:<17} {'x'.join(map(str, matrix)):<14} {coils:>5} {m:>8} {human_bytes(p.peak_bytes):>10} "
                  f"{human_bytes(measured):>10} {measured / p.peak_bytes:>6.2f} {stage:>10} {float(seconds):>7.1f}",
                  flush=True)
            os.unlink(path)
    info = {"date": time.strftime("%Y-%m-%d"), "cpus": len(os.sched_getaffinity(0)),
            "machine": platform.machine(), "python": platform.python_version(), "baseline_bytes": baseline,
            "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
