"""Where a planned operator's call spends its time: ``op.H(y)`` of ``mri_recon.EncodingOperator`` on the GPU.

Problem: 2D 256^2 golden-angle radial, 256 spokes x 1024 samples, 8 coils (bench_public.py's), random complex64
k-space on the GPU. Reports, as JSON on stdout and in OUT:
  wall        median wall clock of op.H(y) with the device synchronized after it (bench_public.py's measure)
  device      median CUDA-event time from before the call's first launch to after its last
  steps       CUDA-event times of the transform's steps (zero, spread, FFT, deconvolution) launched one by one
and a cProfile of ``--calls`` calls by own time.
Usage: python scripts/profile_operator.py OUT.json [--coils C] [--calls N]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time

import numpy as np
from benchtools import cuda_timed, radial_2d

import mri_recon
from mri_recon.arrays.backend import cupy_module, resolve_device, synchronize


def wall(fn, dev, runs: int) -> float:
    times = []
    for _ in range(runs):
        synchronize(dev)
        t0 = time.perf_counter()
        fn()
        synchronize(dev)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def steps(nufft, data, runs: int) -> dict:
    """Device times of the adjoint's steps on one group of coils (the plan's own buffers)."""
    cupy = cupy_module()
    coils = data.shape[0]
    grid = nufft._grid(coils)
    out = cupy.empty((coils, *nufft.matrix), dtype=np.complex64)
    deconv = nufft._kernel("mri_recon_nufft_deconv_adjoint")

    def zero():
        grid.fill(0)

    def deconvolve():
        deconv(nufft._deconv_blocks(nufft.matrix), (128,), (grid, out, nufft._ker, np.int32(coils), *nufft._sizes()))

    return {"zero": cuda_timed(zero, runs)["median_s"],
            "spread": cuda_timed(lambda: nufft._spread(data, grid, coils, False), runs)["median_s"],
            "fft": cuda_timed(lambda: nufft._fft(grid, inverse=True), runs)["median_s"],
            "deconvolve": cuda_timed(deconvolve, runs)["median_s"],
            "whole": cuda_timed(lambda: nufft.adjoint(data), runs)["median_s"]}


def profiled(fn, calls: int, top: int) -> str:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        fn()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--coils", type=int, default=8)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    cupy = cupy_module()
    dev = resolve_device("gpu")
    matrix = (256, 256)
    k = cupy.asarray(radial_2d(256, 256, 1024))
    rng = cupy.random.default_rng(0)
    y = (rng.standard_normal((args.coils, k.shape[0]), dtype=np.float32)
         + 1j * rng.standard_normal((args.coils, k.shape[0]), dtype=np.float32)).astype(np.complex64)
    op = mri_recon.EncodingOperator(k, matrix, coils=args.coils, device=dev)
    for _ in range(5):
        op.H(y)
    report = {"problem": f"2D 256^2, {k.shape[0]} samples, {args.coils} coils", "engine": op.name,
              "wall_s": wall(lambda: op.H(y), dev, args.calls),
              "device_s": cuda_timed(lambda: op.H(y), args.calls)["median_s"]}
    inner = getattr(op._encoding, "plan", None) or getattr(op._encoding, "_nufft", None)
    if inner is not None and hasattr(inner, "_spread"):
        report["steps_s"] = steps(inner, y, args.calls)
    report["profile"] = profiled(lambda: op.H(y), args.calls, args.top)
    print(json.dumps({k: v for k, v in report.items() if k != "profile"}, indent=1))
    print(report["profile"])
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
