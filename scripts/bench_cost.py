"""Measure the two GPU engines over a sweep of problems and fit the cost model of ``method="auto"``.

For each problem (matrix, samples, coils) it times what a reconstruction pays: F^H d of every coil and the
Toeplitz PSF, once with the exact kernels and once with the GPU NUFFT (a fresh plan each time: its sort is
part of the price). It then fits the constants of :mod:`mri_recon.operators.engines.cost` by least squares, and
reports for every problem the measured and predicted times and whether the model picks the faster engine.
Usage: python scripts/bench_cost.py OUT.json
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time

import numpy as np
from benchtools import wall_timed

from mri_recon import __version__
from mri_recon.arrays.backend import cupy_module
from mri_recon.operators.engines import GpuExactEncoding, GpuNufftEncoding, cost, fastest
from mri_recon.sim.trajectories import kooshball, radial


def problems() -> list[tuple[tuple[int, ...], str, float, int]]:
    """(matrix, kind, sampling fraction, coils): radial in 2D, kooshball in 3D, full and 1/4 sampling."""
    out = []
    for n in (32, 64, 128, 256):
        for fraction in (1.0, 0.25):
            for coils in (1, 8):
                out.append(((n, n), "radial", fraction, coils))
    for n in (16, 32, 48, 64):
        for fraction in (1.0, 0.25):
            for coils in (1, 8):
                out.append(((n, n, n), "kooshball", fraction, coils))
    return out


def trajectory(matrix: tuple[int, ...], kind: str, fraction: float) -> np.ndarray:
    n = matrix[0]
    if kind == "radial":
        return radial(matrix, max(4, round(fraction * math.pi / 2 * n)), 2 * n, golden=True)
    return kooshball(matrix, max(8, round(fraction * math.pi / 2 * (n / 2) ** 2)))


def median_time(fn, cupy, repeats: int) -> float:
    return wall_timed(fn, repeats, lambda: cupy.cuda.Device().synchronize())[0]


def measure(matrix, kind, fraction, coils, cupy, rng) -> dict:
    k = cupy.asarray(trajectory(matrix, kind, fraction))
    m = int(k.shape[0])
    data = cupy.asarray((rng.standard_normal((coils, m)) + 1j * rng.standard_normal((coils, m))).astype(np.complex64))
    w = cupy.asarray(rng.uniform(0.5, 1.5, m).astype(np.float32))

    def exact():
        GpuExactEncoding(k, matrix, coils).H(data)
        GpuExactEncoding(k, matrix, 1).psf(w)

    def nufft():
        GpuNufftEncoding(k, matrix, coils).H(data)
        GpuNufftEncoding(k, matrix, 1).psf(w)

    work = math.prod(matrix) * m * coils
    repeats = 3 if work > 5e11 else 7
    return {"matrix": list(matrix), "kind": kind, "samples": m, "coils": coils,
            "exact_s": median_time(exact, cupy, repeats), "nufft_s": median_time(nufft, cupy, repeats)}


def features(row: dict) -> tuple[list[float], list[float]]:
    """Linear features of the two models (see mri_recon.operators.engines.cost)."""
    matrix, m, c = tuple(row["matrix"]), row["samples"], row["coils"]
    n, dim = math.prod(matrix), len(matrix)
    groups = -(-c // cost.MAX_GROUP)
    g = c / groups
    exact = [groups * n * m, groups * n * m * (g - 1), 2 ** dim * n * m, groups + 1]
    spread = m * cost.NUFFT_WIDTH ** dim
    nufft = [2.0, 2.0 * m, (c + 0.5) * spread, c * 2 ** dim * n + 4 ** dim * n / 2]
    return exact, nufft


def fit(rows: list[dict]) -> dict:
    """Non-negative least squares on relative errors (each row weighted by 1 / measured time)."""
    from scipy.optimize import nnls  # noqa: PLC0415

    a_e = np.array([features(r)[0] for r in rows]) / np.array([[r["exact_s"]] for r in rows])
    a_n = np.array([features(r)[1] for r in rows]) / np.array([[r["nufft_s"]] for r in rows])
    ce, _ = nnls(a_e, np.ones(len(rows)))
    cn, _ = nnls(a_n, np.ones(len(rows)))
    return {"R_EXACT": 1 / ce[0], "EXACT_COIL_SHARE": ce[1] / ce[0], "R_PSF": 1 / ce[2], "EXACT_LAUNCH_S": ce[3],
            "NUFFT_SETUP_S": cn[0], "NUFFT_SETUP_PER_SAMPLE": cn[1], "NUFFT_SPREAD_S": cn[2], "NUFFT_FFT_S": cn[3]}


def main(argv: list[str]) -> int:
    cupy = cupy_module()
    rng = np.random.default_rng(0)
    rows = []
    for matrix, kind, fraction, coils in problems():
        row = measure(matrix, kind, fraction, coils, cupy, rng)
        row["predicted_exact_s"] = cost.exact_seconds(tuple(matrix), row["samples"], coils)
        row["predicted_nufft_s"] = cost.nufft_seconds(tuple(matrix), row["samples"], coils)
        row["faster"] = "exact" if row["exact_s"] <= row["nufft_s"] else "nufft"
        row["chosen"] = fastest("gpu", tuple(matrix), row["samples"], coils).name
        rows.append(row)
        print(f"{str(matrix):<16} M {row['samples']:>8} C {coils}  exact {row['exact_s'] * 1e3:9.3f} ms "
              f"(model {row['predicted_exact_s'] * 1e3:9.3f})  nufft {row['nufft_s'] * 1e3:8.3f} ms "
              f"(model {row['predicted_nufft_s'] * 1e3:8.3f})  faster {row['faster']:<9} chosen {row['chosen']}",
              flush=True)
    fitted = fit(rows)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    report = {"device": name, "date": time.strftime("%Y-%m-%d"), "mri_recon": __version__,
              "cupy": cupy.__version__, "python": platform.python_version(), "rows": rows, "fitted": fitted,
              "model_in_use": {k: getattr(cost, k) for k in fitted},
              "right_choices": sum(r["faster"] == r["chosen"] for r in rows), "problems": len(rows),
              "time_lost_by_wrong_choices_s": sum(abs(r["exact_s"] - r["nufft_s"]) for r in rows
                                                  if r["faster"] != r["chosen"])}
    with open(argv[1], "w") as f:
        json.dump(report, f, indent=2)
    print("fitted:", json.dumps(fitted))
    print(f"model in use picks the faster engine in {report['right_choices']} of {len(rows)} problems; "
          f"time lost {report['time_lost_by_wrong_choices_s'] * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
