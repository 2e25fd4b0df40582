"""Where the whole call ``mri_recon.reconstruct(scan)`` spends its time on the GPU: the stage timings, the host
time outside them, and a cProfile of the calls (host functions by their own time and by cumulative time).

Problems: ``scripts/bench_prepare.py``'s 2D 256^2 8-coil scan (file weights and maps, correlated noise); with
``--problem 3d128``, its 3D kooshball; with ``--problem sweep --matrix 64x64 --coils 1``, a row of its host-share
sweep (random k-space, ramp weights computed on the device); with ``--problem compress``, the 512^2 32-coil scan of
``scripts/bench_coil_compress.py`` (ramp weights, its maps), compressed by ``--coil-compress``; with ``--problem
series`` / ``series256``, the time series of issue 45 (128^2, 20 frames of 21 spokes, 8 coils / 256^2, 30 of 13,
16 coils; prepared with the simulation's maps) solved with temporal TV, 100 ADMM iterations; with ``--problem
frame``, the MRD server's frames of issue 45 (128^2, 21 golden-angle spokes, 8 coils, no maps and no weights),
a new frame each call, with the default settings as the server has them (the maps estimated; ``--matrix`` and
``--coils`` do not apply). The others: 30 CG iterations, lambda 1e-3. After two warm-up calls, ``--repeats``
calls are timed (device synchronized around each), then as many are profiled. ``--grid-passes``: the fused
normal operators on the whole 2x grid everywhere (before the row passes). Writes the text report to OUT.
Usage: python scripts/profile_call.py OUT.txt [--problem 2d|3d128|sweep|compress|series|series256|frame]
       [--matrix NxN[xN]] [--coils C]
       [--coil-compress none|auto|N] [--psf-cache DIR] [--repeats N] [--top N] [--steps] [--grid-passes]
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

import bench_coil_compress  # noqa: E402 - the problems live there
import bench_prepare  # noqa: E402
import bench_recon  # noqa: E402

import mri_recon  # noqa: E402
from mri_recon.arrays.backend import resolve_device, synchronize  # noqa: E402

STEPS = (r"api.py.*\(prepare_and_reconstruct\)|pipeline.py.*\(reconstruct\)|state.py.*\(plan\)"
         r"|device.py.*\(prepare_on_device\)")
"""The functions whose callees the report lists: the call, the pipeline, its plan and the device preparation."""


def timed_calls(scans: list, dev, repeats: int, settings: dict) -> tuple[list[float], list[dict]]:
    """``repeats`` calls, each on the next of ``scans`` in turn."""
    walls, timings = [], []
    for i in range(repeats):
        synchronize(dev)
        start = time.perf_counter()
        result = mri_recon.reconstruct(scans[i % len(scans)], device=dev, **settings)
        synchronize(dev)
        walls.append(time.perf_counter() - start)
        timings.append(dict(result.timings))
    return walls, timings


def profiled(scans: list, dev, repeats: int, top: int, settings: dict) -> str:
    profile = cProfile.Profile()
    profile.enable()
    for i in range(repeats):
        mri_recon.reconstruct(scans[i % len(scans)], device=dev, **settings)
        synchronize(dev)
    profile.disable()
    out = io.StringIO()
    for key in ("tottime", "cumulative"):
        out.write(f"\n--- by {key} ({repeats} calls) ---\n")
        pstats.Stats(profile, stream=out).sort_stats(key).print_stats(top)
    out.write(f"\n--- what the call's steps call, cumulative ({repeats} calls) ---\n")
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_callees(STEPS)
    return out.getvalue()


STEP_TARGETS = (("mri_recon.api", ("prepare_and_reconstruct", "plan_prepared", "preparation_of", "prefetch",
                                   "prepare_on_device")),
                ("mri_recon.pipeline", ("choose_engine", "device_memory", "plan")),
                ("mri_recon.prep.device", ("whitening_of", "_weights", "upload", "_rows_up", "_compressed",
                                           "compression_task", "warm_up", "_read_checks", "reader_record",
                                           "extent_record")),
                ("mri_recon.prep.upload", ("upload_into", "upload_product", "whiten")),
                ("mri_recon.prep.compress", ("centre_energies",)),
                ("mri_recon.pipeline", ("reconstruct",)),
                ("mri_recon.stages", ("plan", "upload", "coil_maps", "scale_maps", "encoding", "right_hand_side",
                                      "normal_operator", "solve", "combine", "download", "result")))
"""The steps of the call whose wall clock ``--steps`` reports: the API's, the upload's copies and products (and
the compression matrix, on its host thread), then the pipeline's stages."""


@contextlib.contextmanager
def step_clocks(totals: dict[str, list[float]]):
    """Each function of STEP_TARGETS wrapped to append each call's wall clock to ``totals`` (restored on exit)."""
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
                    totals.setdefault(_key, []).append(time.perf_counter() - start)
            setattr(module, name, clocked)
    try:
        yield totals
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


def step_report(scans: list, dev, repeats: int, settings: dict) -> str:
    """The median call's wall clock and each step's total wall clock per call (and its longest single run),
    without cProfile."""
    totals: dict[str, list[float]] = {}
    with step_clocks(totals):
        walls, _ = timed_calls(scans, dev, repeats, settings)
    lines = [f"\n--- wall clock of the call's steps, total per call (a step may run several times a call) and "
             f"its longest run ({repeats} calls, whole median {statistics.median(walls) * 1e3:.3f} ms) ---"]
    lines += [f"  {key:32s} {sum(values) / repeats * 1e3:8.3f} ms  (longest {max(values) * 1e3:8.3f} ms, "
              f"{len(values)} runs)" for key, values in totals.items()]
    return "\n".join(lines) + "\n"


SERIES = {"series": ((128, 128), 20, 21, 8), "series256": ((256, 256), 30, 13, 16)}
"""The time series of issue 45: matrix, frames, spokes per frame, coils."""


def series_problem(name: str) -> tuple:
    """A prepared time series of :data:`SERIES` and the temporal TV settings of ``bench_temporal.py``."""
    from mri_recon.prep.frames import prepare_series
    from mri_recon.sim.dynamic import simulate_series

    matrix, frames, spokes, coils = SERIES[name]
    raw = simulate_series(matrix, frames=frames, spokes_per_frame=spokes, coils=coils, snr=30, seed=0)
    series, _ = prepare_series(raw, coil_maps="file")
    return series, {"prepare": False, "temporal": "tv", "temporal_lam": 0.01, "iterations": 100}


FRAME = ((128, 128), 21, 8)
"""The MRD server's frames of issue 45: matrix, spokes per frame, coils."""


def frame_problem(count: int) -> tuple[list, dict]:
    """``count`` consecutive frames of one golden-angle acquisition as the MRD server reconstructs them (each a
    new trajectory; no coil maps and no weights, as a stream brings them), with the default settings."""
    from mri_recon.io.frames import frames_by_readouts
    from mri_recon.sim.simulate import simulate_scan

    matrix, spokes, coils = FRAME
    scan = simulate_scan(matrix, "golden", coils=coils, snr=30.0, spokes=spokes * count, samples=2 * matrix[0],
                         seed=0, dcf=None)
    scan = scan.replace(coil_maps=None, attrs={**scan.attrs, "samples_per_readout": 2 * matrix[0]})
    return list(frames_by_readouts(scan, spokes).frames), {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--problem", choices=("2d", "3d128", "sweep", "compress", "series", "series256", "frame"),
                        default="2d")
    parser.add_argument("--coil-compress", default="none", help="the compress problem's coil_compress")
    parser.add_argument("--psf-cache", default=None, help="a PSF cache folder passed as psf_cache= (the API's)")
    parser.add_argument("--matrix", default="64x64", help="the sweep row's matrix")
    parser.add_argument("--coils", type=int, default=1, help="the sweep row's coils")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--steps", action="store_true", help="also each step's wall clock, without cProfile")
    parser.add_argument("--grid-passes", action="store_true",
                        help="the fused normal operators' whole-grid passes everywhere (the row passes' baseline)")
    args = parser.parse_args()
    if args.grid_passes:
        from mri_recon.operators.normal import gpu_toeplitz

        gpu_toeplitz.ROW_PASS_DIMS = ()
    dev = resolve_device("gpu")
    settings = dict(bench_prepare.SETTINGS)
    if args.problem == "sweep":
        matrix = tuple(int(n) for n in args.matrix.split("x"))
        scan, settings["dcf"] = bench_prepare.synthetic(matrix, args.coils), "ramp"
    elif args.problem.startswith("series"):
        scan, settings = series_problem(args.problem)
    elif args.problem == "frame":
        scans, settings = frame_problem(args.repeats + 2)
    elif args.problem == "compress":
        scan = bench_coil_compress.gpu_scan()
        settings["coil_compress"] = args.coil_compress
    else:
        scan = bench_prepare.with_noise(bench_recon.problem() if args.problem == "2d" else bench_recon.problem_3d(128))
    scans = scans if args.problem == "frame" else [scan]
    if args.psf_cache:
        from mri_recon.io.cache import PsfCache

        settings["psf_cache"] = PsfCache(args.psf_cache)
    timed_calls(scans[-2:], dev, 2, settings)
    walls, timings = timed_calls(scans, dev, args.repeats, settings)
    stages = {k: statistics.median(t.get(k, 0.0) for t in timings) for k in timings[0]}
    whole = statistics.median(walls)
    inside = sum(stages.values())
    name = {"sweep": f"sweep {args.matrix} x {args.coils}",
            "compress": f"compress {args.coil_compress}"}.get(args.problem, args.problem)
    name += " (grid passes)" if args.grid_passes else ""
    lines = [f"{name}: whole call median {whole * 1e3:.2f} ms (min {min(walls) * 1e3:.2f}), "
             f"stages {inside * 1e3:.2f} ms, outside the stages {(whole - inside) * 1e3:.2f} ms"]
    lines += [f"  {k}: {v * 1e3:.3f} ms" for k, v in stages.items()]
    steps = step_report(scans, dev, args.repeats, settings) if args.steps else ""
    report = "\n".join(lines) + "\n" + steps + profiled(scans, dev, args.repeats, args.top, settings)
    with open(args.out, "w") as f:  # written first: the caller may read only the first lines of the output
        f.write(report)
    print("\n".join(lines) + "\n" + steps, flush=True)


if __name__ == "__main__":
    main()
