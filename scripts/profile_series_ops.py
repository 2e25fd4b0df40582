"""Where an ADMM iteration of temporal TV spends the GPU's time: each operation of the iteration timed alone
by CUDA events (median of ``--runs`` after two warm-ups), and 100 iterations of ``joint_admm`` timed by wall
clock and by events.

Problem: random complex64 frames ``(T, N, N)``, coil maps ``(C, N, N)`` and kernel spectra ``(T, 2N, 2N)`` on
the GPU (the sizes of issue 45's rows: ``--matrix 128 --frames 20 --coils 8`` and ``--matrix 256 --frames 30
--coils 16``). Steps: the fused normal product and its five steps (expand, forward FFT, filter, inverse FFT,
reduce; the filter of the row passes holds the last axis' transforms), the product with either pass kind,
temporal TV's products (``D x``, ``b + rho D^H q``, ``out += rho D^H D x``), the shrinkage, one CG step on the
ADMM operator, the objective. Writes JSON to OUT and prints it.

Usage: python scripts/profile_series_ops.py OUT.json [--matrix N] [--frames T] [--coils C] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from benchtools import cuda_timed

from mri_recon.arrays.backend import cupy_module
from mri_recon.operators.gpu.fft import FORWARD, INVERSE
from mri_recon.operators.normal import gpu_toeplitz
from mri_recon.solvers.cg import WarmCg
from mri_recon.solvers.temporal import BatchedSeriesNormal, Term, joint_admm, series_objective
from mri_recon.solvers.temporal_terms import TemporalTv


def random(cupy, rng, shape):
    return cupy.asarray((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64))


def normal_steps(fused, x, out, runs: int) -> dict:
    """The fused product's steps one by one (the first frame batch)."""
    coils, count = fused._n_coils, min(fused._frame_step, fused._frames)
    grids, passes, frames = coils * count, fused._passes, slice(0, count)
    launches = {
        "expand": lambda: passes.expand(fused._maps, x[frames], coils, grids),
        "fft_forward": lambda: passes.transform(grids, FORWARD),
        "filter": lambda: passes.filter(fused._scaled[frames], coils, grids),
        "fft_inverse": lambda: passes.transform(grids, INVERSE),
        "reduce": lambda: passes.reduce(fused._maps, x[frames], out[frames], coils, count, True),
    }
    return {name: cuda_timed(fn, runs)["median_s"] * 1e3 for name, fn in launches.items()}


def passes_compared(spectra, maps, x, runs: int) -> dict:
    """The normal product with each pass kind on this problem (same arrays): time, kind, and the relative
    difference of their outputs."""
    cupy = cupy_module()
    report, outputs = {}, {}
    for name, dims in (("rows", gpu_toeplitz.ROW_PASS_DIMS), ("grid", ())):
        saved = gpu_toeplitz.ROW_PASS_DIMS
        gpu_toeplitz.ROW_PASS_DIMS = dims
        try:
            operator = BatchedSeriesNormal(spectra, maps, 1e-3)
        finally:
            gpu_toeplitz.ROW_PASS_DIMS = saved
        out = cupy.empty_like(x)
        report[name] = {"passes": type(operator.fused._passes).__name__,
                        "normal_ms": cuda_timed(lambda op=operator, o=out: op.apply_into(x, o), runs)["median_s"] * 1e3,
                        "steps_ms": normal_steps(operator.fused, x, out, runs)}
        operator.apply_into(x, out)
        outputs[name] = out
    report["relative_difference"] = float(cupy.linalg.norm(outputs["rows"] - outputs["grid"])
                                          / cupy.linalg.norm(outputs["grid"]))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--matrix", type=int, default=128)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--coils", type=int, default=8)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    cupy = cupy_module()
    rng = np.random.default_rng(0)
    n, t, c = args.matrix, args.frames, args.coils
    x, b = random(cupy, rng, (t, n, n)), random(cupy, rng, (t, n, n))
    maps = random(cupy, rng, (c, n, n)) / np.float32(np.sqrt(c))
    spectra = cupy.abs(random(cupy, rng, (t, 2 * n, 2 * n))).astype(cupy.complex64)
    operator = BatchedSeriesNormal(spectra, maps, 1e-3)
    out = cupy.empty_like(x)
    term = TemporalTv().sparsity((t, n, n))
    q, z, u = (random(cupy, rng, (t - 1, n, n)) for _ in range(3))
    rho = 0.5
    admm_operator = operator.with_penalty(rho, lambda v, o, r: term.add_gram(v, o, r))
    solve = WarmCg(admm_operator, b, 1)
    r = b.copy()
    ops = {
        "normal": lambda: operator.apply_into(x, out),
        "admm_operator": lambda: admm_operator.apply_into(x, out),
        "time_difference": lambda: term.forward(x),
        "adjoint_rhs": lambda: term.adjoint_rhs(b, z - u, rho),
        "laplacian_add": lambda: term.add_gram(x, out, rho),
        "shrink": lambda: term.shrink(term.forward(x), u, z, 0.01),
        "cg_step": lambda: solve(x, r),
        "objective": lambda: series_objective(operator, x, b, 1.0, [Term(term, 0.01, 4.0)]),
    }
    report = {"matrix": n, "frames": t, "coils": c, "grid_bytes_per_pass": int(t * c * 4 * n * n * 8),
              "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
              "ops_ms": {name: cuda_timed(fn, args.runs)["median_s"] * 1e3 for name, fn in ops.items()},
              "normal_passes": type(operator.fused._passes).__name__,
              "normal_steps_ms": normal_steps(operator.fused, x, out, args.runs),
              "passes_compared": passes_compared(spectra, maps, x, args.runs)}
    terms = [Term(term, 0.01 * float(cupy.abs(b).max()), 4.0)]
    admm = lambda: joint_admm(operator, b, terms, rho=rho, iterations=100, inner_iterations=1,  # noqa: E731
                              data_energy=1.0)
    report["admm_100_events_ms"] = cuda_timed(admm, 3, warmup=1)["median_s"] * 1e3
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    admm()
    cupy.cuda.Device().synchronize()
    report["admm_100_wall_ms"] = (time.perf_counter() - start) * 1e3
    text = json.dumps(report, indent=1)
    print(text)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
