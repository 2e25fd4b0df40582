"""The cost of a bit-reproducible CPU F^H d and PSF: FINUFFT's default threading against one thread per
transform (coils spread over a thread pool), as :mod:`mri_recon.operators.engines.finufft` now runs.

Usage: ``python scripts/bench_finufft_determinism.py [--repeats 7] [--json out.json]``. Prints a table
(median seconds of ``--repeats`` runs after one warm-up, and whether every run gave the same bits).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import finufft
import numpy as np

from mri_recon.operators.engines import finufft as wrapper
from mri_recon.sim import trajectories

EPS = 1e-7  # the pipeline's NUFFT_EPS


def default_threading(kspace, trajectory, matrix):
    """The previous wrapper: one FINUFFT call, FINUFFT's own threads (not reproducible)."""
    coords, phase = wrapper._scaled(trajectory, matrix)
    data = np.ascontiguousarray(np.asarray(kspace, dtype=np.complex128) * phase)
    fn = {2: finufft.nufft2d1, 3: finufft.nufft3d1}[len(matrix)]
    return fn(*coords, data, n_modes=matrix, eps=EPS, isign=+1).reshape(data.shape[0], *matrix)


def reproducible(kspace, trajectory, matrix):
    return wrapper.adjoint(kspace, trajectory, matrix, eps=EPS)


def measure(fn, kspace, trajectory, matrix, repeats):
    fn(kspace, trajectory, matrix)
    times, outs = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        outs.append(fn(kspace, trajectory, matrix).astype(np.complex64))
        times.append(time.perf_counter() - start)
    return float(np.median(times)), all(np.array_equal(outs[0], o) for o in outs[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    r2 = trajectories.radial((128, 128), 201, golden=True)
    k3 = trajectories.kooshball((64, 64, 64), 2000)
    cases = [("F^H d 128^2 x 8 coils", r2, (128, 128), 8), ("PSF 128^2 (256^2 grid)", 2 * r2, (256, 256), 1),
             ("F^H d 64^3 x 1 coil", k3, (64, 64, 64), 1), ("F^H d 64^3 x 8 coils", k3, (64, 64, 64), 8),
             ("PSF 64^3 (128^3 grid)", 2 * k3, (128, 128, 128), 1)]
    rows = []
    print(f"{'case':<26} {'samples':>8} {'default s':>10} {'same bits':>9} {'1-thread s':>10} {'same bits':>9} "
          f"{'cost':>6}")
    for name, traj, matrix, coils in cases:
        kspace = (rng.standard_normal((coils, len(traj))) + 1j * rng.standard_normal((coils, len(traj))))
        old, old_same = measure(default_threading, kspace, traj, matrix, args.repeats)
        new, new_same = measure(reproducible, kspace, traj, matrix, args.repeats)
        rows.append({"case": name, "samples": len(traj), "default_s": old, "default_bit_identical": old_same,
                     "reproducible_s": new, "reproducible_bit_identical": new_same, "ratio": new / old})
        print(f"{name:<26} {len(traj):>8} {old:>10.4f} {str(old_same):>9} {new:>10.4f} {str(new_same):>9} "
              f"{new / old:>5.2f}x")
    info = {"cpus": len(os.sched_getaffinity(0)), "machine": platform.processor() or platform.machine(),
            "finufft": finufft.__version__, "numpy": np.__version__, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
