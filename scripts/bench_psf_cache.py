"""The README's 2D call with and without ``psf_cache=`` in one process, calls interleaved (issue 45's row "the
same 2D call given psf_cache= no slower than without").

Problem: ``scripts/bench_prepare.py``'s 2D 256^2 8-coil scan (file weights and maps, correlated noise), 30 CG
iterations, lambda 1e-3, ``mri_recon.reconstruct(scan, device=...)`` as the README calls it. After two warm-up
calls of each, ``--rounds`` rounds each make one call without the cache and one with it (their order alternating
between rounds), the device synchronized around each call. Reports the median wall clock of each, their ratio,
the median stage timings (``Result.timings``), the record's ``psf_cache`` entry and whether the images are
identical.

Usage: python scripts/bench_psf_cache.py OUT.json [--rounds N] [--device gpu|cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_prepare  # noqa: E402 - the problem lives there
import bench_recon  # noqa: E402

import mri_recon  # noqa: E402
from mri_recon.arrays.backend import resolve_device, synchronize  # noqa: E402
from mri_recon.io.cache import PsfCache  # noqa: E402


def timed(scan, dev, settings: dict) -> tuple[float, object]:
    synchronize(dev)
    start = time.perf_counter()
    result = mri_recon.reconstruct(scan, device=dev, **settings)
    synchronize(dev)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--device", default="gpu")
    args = parser.parse_args()
    dev = resolve_device(args.device)
    scan = bench_prepare.with_noise(bench_recon.problem())
    with tempfile.TemporaryDirectory() as folder:
        variants = {"without": dict(bench_prepare.SETTINGS),
                    "with": {**bench_prepare.SETTINGS, "psf_cache": PsfCache(folder)}}
        for settings in variants.values():
            for _ in range(2):
                timed(scan, dev, settings)
        walls = {name: [] for name in variants}
        stages = {name: [] for name in variants}
        results = {}
        for k in range(args.rounds):
            order = list(variants) if k % 2 == 0 else list(reversed(variants))
            for name in order:
                seconds, results[name] = timed(scan, dev, variants[name])
                walls[name].append(seconds)
                stages[name].append(dict(results[name].timings))
    rows = {name: {"whole_median_s": statistics.median(walls[name]), "whole_s": walls[name],
                   "stages_median_s": {key: statistics.median(t[key] for t in stages[name]) for key in stages[name][0]},
                   "psf": results[name].parameters.get("psf")} for name in variants}
    report = {"device": str(dev), "rounds": args.rounds, "rows": rows,
              "ratio_with_over_without": rows["with"]["whole_median_s"] / rows["without"]["whole_median_s"],
              "images_identical": bool(np.array_equal(results["with"].image, results["without"].image))}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    for name, row in rows.items():
        print(f"{name} psf_cache: {row['whole_median_s'] * 1e3:.2f} ms, iterations "
              f"{row['stages_median_s'].get('iterations', 0) * 1e3:.2f} ms, psf {row['psf']!r}")
    print(f"ratio {report['ratio_with_over_without']:.3f}, images identical {report['images_identical']}")


if __name__ == "__main__":
    main()
