"""Where the whole call ``mri_recon.reconstruct(scan)`` spends its time on the GPU: the stage timings, the host
time outside them, and a cProfile of the calls (host functions by their own time and by cumulative time).

Problems: ``scripts/bench_prepare.py``'s 2D 256^2 8-coil scan (file weights and maps, correlated noise); with
``--problem 3d128``, its 3D kooshball; with ``--problem sweep --matrix 64x64 --coils 1``, a row of its host-share
sweep (random k-space, ramp weights computed on the device). 30 CG iterations, lambda 1e-3. After two warm-up
calls, ``--repeats`` calls are timed (device synchronized around each), then as many are profiled. Writes the
text report to OUT.
Usage: python scripts/profile_call.py OUT.txt [--problem 2d|3d128|sweep] [--matrix NxN[xN]] [--coils C]
       [--repeats N] [--top N] [--steps]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import importlib
import io
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_prepare  # noqa: E402 - the problems live there
import bench_recon  # noqa: E402

import mri_recon  # noqa: E402
from mri_recon.arrays.backend import resolve_device, synchronize  # noqa: E402

STEPS = (r"api.py.*\(prepare_and_reconstruct\)|pipeline.py.*\(reconstruct\)|state.py.*\(plan\)"
         r"|device.py.*\(prepare_on_device\)")
"""The functions whose callees the report lists: the call, the pipeline, its plan and the device preparation."""


def timed_calls(scan, dev, repeats: int, settings: dict) -> tuple[list[float], list[dict]]:
    walls, timings = [], []
    for _ in range(repeats):
        synchronize(dev)
        start = time.perf_counter()
        result = mri_recon.reconstruct(scan, device=dev, **settings)
        synchronize(dev)
        walls.append(time.perf_counter() - start)
        timings.append(dict(result.timings))
    return walls, timings


def profiled(scan, dev, repeats: int, top: int, settings: dict) -> str:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(repeats):
        mri_recon.reconstruct(scan, device=dev, **settings)
        synchronize(dev)
    profile.disable()
    out = io.StringIO()
    for key in ("tottime", "cumulative"):
        out.write(f"\n--- by {key} ({repeats} calls) ---\n")
        pstats.Stats(profile, stream=out).sort_stats(key).print_stats(top)
    out.write(f"\n--- what the call's steps call, cumulative ({repeats} calls) ---\n")
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_callees(STEPS)
    return out.getvalue()


STEP_TARGETS = (("mri_recon.api", ("prepare_and_reconstruct", "plan_prepared", "prefetch", "prepare_on_device")),
                ("mri_recon.prep.device", ("whitening_of", "_weights", "upload", "upload_columns", "_read_checks")),
                ("mri_recon.pipeline", ("reconstruct",)),
                ("mri_recon.stages", ("plan", "upload", "coil_maps", "scale_maps", "encoding", "right_hand_side",
                                      "normal_operator", "solve", "combine", "download", "result")))
"""The steps of the call whose wall clock ``--steps`` reports: the API's, then the pipeline's stages."""


@contextlib.contextmanager
def step_clocks(totals: dict[str, float]):
    """Each function of STEP_TARGETS wrapped to add its wall clock to ``totals`` (restored on exit)."""
    saved = []
    for module_name, names in STEP_TARGETS:
        module = importlib.import_module(module_name)
        for name in names:
            original = getattr(module, name)
            saved.append((module, name, original))
            key = f"{module_name.rsplit('.', 1)[-1]}.{name}"

            def clocked(*args, _f=original, _key=key, **kwargs):
                start = time.perf_counter()
                try:
                    return _f(*args, **kwargs)
                finally:
                    totals[_key] = totals.get(_key, 0.0) + time.perf_counter() - start
            setattr(module, name, clocked)
    try:
        yield totals
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


def step_report(scan, dev, repeats: int, settings: dict) -> str:
    """The median call's wall clock and each step's mean wall clock per call, without cProfile."""
    totals: dict[str, float] = {}
    with step_clocks(totals):
        walls, _ = timed_calls(scan, dev, repeats, settings)
    lines = [f"\n--- wall clock of the call's steps, mean per call ({repeats} calls, whole median "
             f"{statistics.median(walls) * 1e3:.3f} ms) ---"]
    lines += [f"  {key:32s} {value / repeats * 1e3:8.3f} ms" for key, value in totals.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--problem", choices=("2d", "3d128", "sweep"), default="2d")
    parser.add_argument("--matrix", default="64x64", help="the sweep row's matrix")
    parser.add_argument("--coils", type=int, default=1, help="the sweep row's coils")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--steps", action="store_true", help="also each step's wall clock, without cProfile")
    args = parser.parse_args()
    dev = resolve_device("gpu")
    settings = dict(bench_prepare.SETTINGS)
    if args.problem == "sweep":
        matrix = tuple(int(n) for n in args.matrix.split("x"))
        scan, settings["dcf"] = bench_prepare.synthetic(matrix, args.coils), "ramp"
    else:
        scan = bench_prepare.with_noise(bench_recon.problem() if args.problem == "2d" else bench_recon.problem_3d(128))
    timed_calls(scan, dev, 2, settings)
    walls, timings = timed_calls(scan, dev, args.repeats, settings)
    stages = {k: statistics.median(t.get(k, 0.0) for t in timings) for k in timings[0]}
    whole = statistics.median(walls)
    inside = sum(stages.values())
    name = f"{args.problem} {args.matrix} x {args.coils}" if args.problem == "sweep" else args.problem
    lines = [f"{name}: whole call median {whole * 1e3:.2f} ms (min {min(walls) * 1e3:.2f}), "
             f"stages {inside * 1e3:.2f} ms, outside the stages {(whole - inside) * 1e3:.2f} ms"]
    lines += [f"  {k}: {v * 1e3:.3f} ms" for k, v in stages.items()]
    steps = step_report(scan, dev, args.repeats, settings) if args.steps else ""
    report = "\n".join(lines) + "\n" + steps + profiled(scan, dev, args.repeats, args.top, settings)
    print("\n".join(lines) + "\n" + steps, flush=True)
    with open(args.out, "w") as f:
        f.write(report)


if __name__ == "__main__":
    main()
