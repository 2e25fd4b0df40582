"""Benchmark of mri_recon.torch on the CPU: the wrapper's cost over the NumPy calls it makes.

Usage: python scripts/bench_torch.py [--out OUT.json] [--rounds N] [--method nufft|exact] [--torch-threads N]

Problem: 256^2, 8 coils, golden-angle radial, 16 spokes x 256 samples (M = 4,096), random complex64 images and
k-space, coil maps of :func:`mri_recon.sim.phantom.coil_maps`. Pairs, each a NumPy call and its torch twin on the
same values (tensors made with ``torch.from_numpy``, so they share the arrays' memory):

  F        EncodingOperator(coils=8)(x)                   TorchEncoding(coils=8)(x)
  F^H      op.H(y)                                         A.H(y)
  SENSE    op(S x)                                         TorchEncoding(maps=S)(x)
  SENSE^H  sum_c conj(S_c) op.H(y)_c                       A.H(y)
  normal   op.normal(None, S)(x) (Toeplitz)               A.normal(x)
  grad     op(S x) - y, then SENSE^H of it                 ||A x - y||^2 and its backward

The torch calls run under ``torch.no_grad()`` except ``grad``. Rounds: every configuration once per round, in
turn (NumPy and torch each first in every other round), after one warm-up round; the median wall time per
configuration, and the torch/NumPy ratio. The results are checked against the NumPy calls (relative L2).
Then the wrapper's fixed cost per call (:func:`fixed_cost`).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
import timeit
from pathlib import Path

import finufft
import numpy as np
import torch
from benchtools import radial_2d, write_report

import mri_recon
from mri_recon import EncodingOperator
from mri_recon.sim.phantom import coil_maps
from mri_recon.torch import TorchEncoding

MATRIX, COILS, SPOKES, SAMPLES = (256, 256), 8, 16, 256


def _complex(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def pairs(method: str) -> dict:
    """Per configuration: (NumPy call, torch call), each returning its result."""
    rng = np.random.default_rng(0)
    traj = radial_2d(MATRIX[0], SPOKES, SAMPLES)
    s = coil_maps(MATRIX, COILS).astype(np.complex64)
    x1, xc, y = _complex(rng, MATRIX), _complex(rng, (COILS, *MATRIX)), _complex(rng, (COILS, len(traj)))
    op = EncodingOperator(traj, MATRIX, coils=COILS, device="cpu", method=method)
    normal = op.normal(None, s)
    plain = TorchEncoding(traj, MATRIX, coils=COILS, device="cpu", method=method)
    sense = TorchEncoding(traj, MATRIX, maps=torch.from_numpy(s), device="cpu", method=method)
    t1, tc, ty = torch.from_numpy(x1), torch.from_numpy(xc), torch.from_numpy(y)

    def grad_numpy():
        return (np.conj(s) * op.H(2 * (op(s * x1) - y))).sum(axis=0)

    def grad_torch():
        x = t1.clone().requires_grad_()
        (sense(x) - ty).abs().square().sum().backward()
        return x.grad

    def no_grad(fn):
        def run():
            with torch.no_grad():
                return fn()

        return run

    return {
        "F": (lambda: op(xc), no_grad(lambda: plain(tc))),
        "F^H": (lambda: op.H(y), no_grad(lambda: plain.H(ty))),
        "SENSE": (lambda: op(s * x1), no_grad(lambda: sense(t1))),
        "SENSE^H": (lambda: (np.conj(s) * op.H(y)).sum(axis=0), no_grad(lambda: sense.H(ty))),
        "normal": (lambda: normal(x1), no_grad(lambda: sense.normal(t1))),
        "grad": (grad_numpy, grad_torch),
    }


def measure(configs: dict, rounds: int) -> dict:
    times = {name: ([], []) for name in configs}
    results = {}
    for r in range(rounds + 1):  # round 0: warm-up (plans, FFT caches, thread pools)
        for name, calls in configs.items():
            order = list(enumerate(calls)) if r % 2 else list(enumerate(calls))[::-1]  # each side first in turn
            for side, call in order:
                start = time.perf_counter()
                out = call()
                elapsed = time.perf_counter() - start
                if r:
                    times[name][side].append(elapsed)
                results[(name, side)] = out
    report = {}
    for name, (numpy_t, torch_t) in times.items():
        ref = np.asarray(results[(name, 0)], dtype=np.complex128)
        got = results[(name, 1)].detach().numpy().astype(np.complex128)
        report[name] = {
            "numpy_median_s": statistics.median(numpy_t),
            "torch_median_s": statistics.median(torch_t),
            "numpy_min_s": min(numpy_t),
            "torch_min_s": min(torch_t),
            "ratio": statistics.median(torch_t) / statistics.median(numpy_t),
            "overhead_s": statistics.median(torch_t) - statistics.median(numpy_t),
            "relative_l2": float(np.linalg.norm(got - ref) / np.linalg.norm(ref)),
            "numpy_s": numpy_t,
            "torch_s": torch_t,
        }
    return report


class _Stub:
    """Stands in for the EncodingOperator: gives back fixed arrays at once, so that only the wrapper is timed."""

    def __init__(self, image: np.ndarray, kspace: np.ndarray) -> None:
        self.image, self.kspace = image, kspace
        self.H = lambda y: self.image

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.kspace


def fixed_cost(calls: int = 2000, repeats: int = 15) -> dict:
    """The wrapper's own cost per call, apart from the transform: the torch operator of the 256^2 8-coil problem
    with its EncodingOperator replaced by :class:`_Stub`, F and F^H without maps (conversions and the autograd
    Function only), with maps (the maps' products in torch besides), and F with its backward (two calls); and
    NumPy's maps products of the same sizes, which the NumPy SENSE calls make.
    Median and minimum over ``repeats`` of the mean wall time of ``calls`` calls, and the median of this
    process's CPU time per call."""
    rng = np.random.default_rng(1)
    traj = radial_2d(MATRIX[0], SPOKES, SAMPLES)
    s = coil_maps(MATRIX, COILS).astype(np.complex64)
    stub = _Stub(_complex(rng, (COILS, *MATRIX)), _complex(rng, (COILS, len(traj))))
    plain = TorchEncoding(traj, MATRIX, coils=COILS, device="cpu", method="exact")
    sense = TorchEncoding(traj, MATRIX, maps=torch.from_numpy(s), device="cpu", method="exact")
    plain.operator = sense.operator = stub
    x1n = _complex(rng, MATRIX)
    x1, xc, y = (torch.from_numpy(a) for a in (x1n, stub.image, stub.kspace))

    def backward():
        t = x1.clone().requires_grad_()
        sense(t).real.sum().backward()

    configs = {
        "F": lambda: plain(xc),
        "F^H": lambda: plain.H(y),
        "SENSE": lambda: sense(x1),
        "SENSE^H": lambda: sense.H(y),
        "SENSE + backward": backward,
        "NumPy's maps products of SENSE": lambda: s * x1n,
        "NumPy's maps products of SENSE^H": lambda: (np.conj(s) * stub.image).sum(axis=0),
    }
    out = {}
    for name, call in configs.items():
        grad = torch.enable_grad() if "backward" in name else torch.no_grad()
        count = calls if "SENSE" not in name else calls // 20
        with grad:
            per, cpu = [], []
            for _ in range(repeats):
                start = time.process_time()
                per.append(timeit.timeit(call, number=count) / count)
                cpu.append((time.process_time() - start) / count)
        out[name] = {"median_s": statistics.median(per), "min_s": min(per), "cpu_median_s": statistics.median(cpu)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--method", default="nufft")
    parser.add_argument("--torch-threads", type=int, help="torch.set_num_threads (default: torch's own)")
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    load = os.getloadavg()[0]
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": {"cpu_cores": os.cpu_count(), "platform": platform.platform(), "load_before": load},
        "versions": {
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "torch": torch.__version__,
            "finufft": finufft.__version__,
            "mri_recon": mri_recon.__version__,
        },
        "torch_threads": torch.get_num_threads(),
        "problem": {"matrix": MATRIX, "coils": COILS, "samples": SPOKES * SAMPLES, "method": args.method},
        "rounds": args.rounds,
        "results": measure(pairs(args.method), args.rounds),
        "fixed_cost": fixed_cost(),
    }
    report["machine"]["load_after"] = os.getloadavg()[0]
    write_report(report, args.out)


if __name__ == "__main__":
    main()
