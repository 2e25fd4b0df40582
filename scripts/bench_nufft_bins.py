"""The 2D GPU NUFFT's adjoint under spreading options, measured in interleaved rounds (one JSON line per option).

Usage: python scripts/bench_nufft_bins.py '[OPTIONS, ...]' [ROUNDS]

OPTIONS are keyword arguments of ``GpuNufft`` (``bins``, ``warps``, ``shared_limit``, ``subproblem``, ``spread``);
``{}`` is the default. Problem: 2D 256^2 golden-angle radial, 256 spokes of 1,024 samples, random complex64 data.
Every round times every option once (CUDA events, median of 20 after warm-up), so that a drift of the device's
clocks falls on all options alike; the line holds the median over the rounds of the 8-coil adjoint (``a8``), the
1-coil adjoint (``a1``), the real (PSF) spreading (``real``) and the 8-coil spreading alone (``spread8``), in ms,
the relative L2 distance of the 8-coil adjoint from the first option's, and the spreading launch (coils per
launch, shared bytes per block, threads per block).
"""

from __future__ import annotations

import json
import statistics
import sys

import numpy as np
from benchtools import cuda_timed, radial_2d

from mri_recon.arrays.backend import cupy_module
from mri_recon.operators.engines.gpu_nufft import GpuNufft

MATRIX = (256, 256)
RUNS = 20


def plan(cupy, k, options: dict) -> GpuNufft:
    return GpuNufft(k, MATRIX, **{key: (tuple(v) if key == "bins" else v) for key, v in options.items()})


def one_round(cupy, p: GpuNufft, data, weights) -> dict:
    o8 = cupy.empty((8, *MATRIX), np.complex64)
    o1 = cupy.empty((1, *MATRIX), np.complex64)
    real = cupy.empty(MATRIX, np.complex64)
    grid = p._grid(8)
    return {"a8": cuda_timed(lambda: p.adjoint(data, out=o8), RUNS)["median_s"],
            "a1": cuda_timed(lambda: p.adjoint(data[:1], out=o1), RUNS)["median_s"],
            "real": cuda_timed(lambda: p.adjoint_real(weights, out=real), RUNS)["median_s"],
            "spread8": cuda_timed(lambda: p._spread(data, grid, 8, False), RUNS)["median_s"]}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    cupy = cupy_module()
    options = json.loads(argv[1])
    rounds = int(argv[2]) if len(argv) > 2 else 5
    k = cupy.asarray(radial_2d(MATRIX[0], 256, 1024))
    m = int(k.shape[0])
    data = (cupy.random.standard_normal((8, m), dtype=np.float32)
            + 1j * cupy.random.standard_normal((8, m), dtype=np.float32)).astype(np.complex64)
    weights = cupy.abs(cupy.random.standard_normal(m, dtype=np.float32))
    plans = [plan(cupy, k, o) for o in options]
    reference = plans[0].adjoint(data)
    times: list[dict[str, list[float]]] = [{} for _ in plans]
    for _ in range(rounds):
        for p, record in zip(plans, times):
            for key, value in one_round(cupy, p, data, weights).items():
                record.setdefault(key, []).append(1e3 * value)
    for o, p, record in zip(options, plans, times):
        distance = float(cupy.linalg.norm(p.adjoint(data) - reference) / cupy.linalg.norm(reference))
        print(json.dumps({"var": o, **{key: round(statistics.median(v), 4) for key, v in record.items()},
                          "distance": distance, "launch": list(p._spreader(8, False)[1:])}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
