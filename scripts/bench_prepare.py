"""The whole call ``mri_recon.reconstruct(scan)`` with the preparation on the device (issue 25), against the
preparation on the host (``prepare_scan`` then ``pipeline.reconstruct``: the call before), the solver alone
(``prepare=False``) and the GPU stages inside it.

Problems: ``scripts/bench_recon.py``'s 2D 256^2 radial scan (8 coils, 262,144 samples per coil, Pipe-Menon
weights and coil maps from the file) and its 3D 128^3 kooshball (8 coils, 1,647,104 samples per coil), each
given correlated receiver noise (4096 samples per coil) so that the preparation prewhitens; 30 CG iterations,
lambda 1e-3. Preparations timed: the default (the scan's weights and maps, prewhitened) and ``dcf="ramp"``.

Reported per case (medians after one warm-up): ``whole`` (wall of the call, device synchronized), ``stages``
(the sum of the call's stage timings, ``Result.timings``: prepare, upload, coil maps, F^H d, PSF, CG, download,
each synchronized at its end), ``prep`` (the preparation alone, synchronized: for reference) and the host share of
the whole call: ``host_share`` = 1 - stages / whole (the wall time outside the call's timed stages) and
``host_share_upper`` = 1 - (stages but the preparation) / whole (the preparation counted as host time: an upper
bound). The images of the two preparations are compared (relative L2) and against the ground truth (NRMSE).
Also: the k-space upload by ``prep.upload.upload_columns`` and ``to_device`` (staged) against one pageable copy.
``--sweep`` adds the host share (same figures) for matrices 64^2 to 512^2 and 64^3 to 256^3 with 1 to 64 coils
(random k-space, file maps, ramp weights computed, prewhitened), printed as a Markdown table.
``--compare-pageable`` adds each sweep row's whole call with every copy up by one pageable ``set`` (the copy
before the staged one of ``mri_recon.arrays.staging``), in the same process, the two calls taken in turn.
Usage: python scripts/bench_prepare.py OUT.json [--repeats N] [--problem 2d|3d128|all|none] [--sweep]
       [--compare-pageable]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_recon  # noqa: E402 - the problems live there

import mri_recon  # noqa: E402
from mri_recon import pipeline  # noqa: E402
from mri_recon.arrays import staging  # noqa: E402
from mri_recon.arrays.backend import cupy_module, resolve_device, synchronize, to_device  # noqa: E402
from mri_recon.prep import prepare_scan, upload  # noqa: E402
from mri_recon.prep.device import prepare_on_device  # noqa: E402
from mri_recon.scan import Scan  # noqa: E402

SETTINGS = {"iterations": 30, "lam": 1e-3, "tol": 0.0}


def with_noise(scan: Scan, seed: int = 1, samples: int = 4096) -> Scan:
    """``scan`` with correlated receiver noise of about the k-space noise's level."""
    rng = np.random.default_rng(seed)
    c = scan.n_coils
    mix = np.eye(c) + 0.2 * (rng.standard_normal((c, c)) + 1j * rng.standard_normal((c, c)))
    level = float(np.median(np.abs(scan.kspace[:, -1000:]))) or 1.0
    white = (rng.standard_normal((c, samples)) + 1j * rng.standard_normal((c, samples))) * level
    return scan.replace(noise=(mix @ white).astype(np.complex64))


def median_of(fn, repeats: int, sync):
    out = fn()
    sync()
    times, outs = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - start)
        outs.append(out)
    return statistics.median(times), outs


def host_prepared(scan: Scan, dev, choices: dict):
    ready, record = prepare_scan(scan, **choices)
    return pipeline.reconstruct(ready, device=dev, estimate_maps=record["estimate_maps"],
                                maps_basis=record["maps_basis"], **SETTINGS)


def stage_sums(results) -> tuple[float, float]:
    """Medians of the calls' stage timings summed: all of them, and all but the preparation."""
    return (statistics.median(sum(r.timings.values()) for r in results),
            statistics.median(sum(r.timings.values()) - r.timings["prepare"] for r in results))


def case(scan: Scan, dev, choices: dict, repeats: int, sync) -> dict:
    """One preparation choice: the whole call (device preparation), the host preparation, their stages."""
    whole, new = median_of(lambda: mri_recon.reconstruct(scan, device=dev, **choices, **SETTINGS), repeats, sync)
    before, old = median_of(lambda: host_prepared(scan, dev, choices), repeats, sync)
    prep_device, _ = median_of(lambda: prepare_on_device(scan, dev, **choices), repeats, sync)
    prep_host, _ = median_of(lambda: prepare_scan(scan, **choices), repeats, sync)
    (s_new, solver_new), (s_old, _) = stage_sums(new), stage_sums(old)
    truth = scan.ground_truth
    return {
        "choices": choices,
        "device_prep": {"whole_s": whole, "stages_s": s_new, "prep_s": prep_device,
                        "host_share": 1 - s_new / whole, "host_share_upper": 1 - solver_new / whole,
                        "timings": new[-1].timings},
        "host_prep": {"whole_s": before, "stages_s": s_old, "prep_s": prep_host, "host_share": 1 - s_old / before,
                      "timings": old[-1].timings},
        "image_difference": bench_recon.nrmse(new[-1].image, old[-1].image),
        "nrmse_device_prep": None if truth is None else bench_recon.nrmse(new[-1].image, truth),
        "nrmse_host_prep": None if truth is None else bench_recon.nrmse(old[-1].image, truth),
    }


@contextlib.contextmanager
def pageable_uploads():
    """Every copy up by one pageable ``set`` (as before the staged copy), for a comparison in the same process."""
    threads, staging.THREADS = staging.THREADS, 1
    try:
        yield
    finally:
        staging.THREADS = threads


def uploads(scan: Scan, dev, repeats: int, sync) -> dict:
    with pageable_uploads():
        pageable, _ = median_of(lambda: to_device(scan.kspace, dev), repeats, sync)
    staged, _ = median_of(lambda: to_device(scan.kspace, dev), repeats, sync)
    columns, _ = median_of(lambda: upload.upload_columns(scan.kspace, dev), repeats, sync)
    return {"bytes": int(scan.kspace.nbytes), "pageable_s": pageable, "staged_s": staged,
            "upload_columns_s": columns}


def run(name: str, scan: Scan, repeats: int) -> dict:
    dev = resolve_device("gpu")

    def sync():
        synchronize(dev)

    solver, _ = median_of(lambda: mri_recon.reconstruct(scan, prepare=False, device=dev, **SETTINGS), repeats, sync)
    out = {"problem": name, "matrix": list(scan.matrix), "coils": scan.n_coils, "samples": scan.n_samples,
           "solver_alone_s": solver, "upload": uploads(scan, dev, repeats, sync),
           "cases": [case(scan, dev, choices, repeats, sync) for choices in ({}, {"dcf": "ramp"})]}
    for c in out["cases"]:
        d, h = c["device_prep"], c["host_prep"]
        print(f"{name} {c['choices'] or 'default'}: whole {d['whole_s'] * 1e3:.1f} ms (host prep "
              f"{h['whole_s'] * 1e3:.1f} ms), stages {d['stages_s'] * 1e3:.1f} ms, prep {d['prep_s'] * 1e3:.1f} ms "
              f"(host {h['prep_s'] * 1e3:.1f} ms), host share {d['host_share']:.0%}..{d['host_share_upper']:.0%} "
              f"(before {h['host_share']:.0%}), images differ by {c['image_difference']:.1e}", flush=True)
    return out


SWEEP = [((64, 64), 1), ((64, 64), 8), ((64, 64), 64), ((256, 256), 1), ((256, 256), 8), ((256, 256), 32),
         ((256, 256), 64), ((512, 512), 1), ((512, 512), 8), ((512, 512), 64), ((64, 64, 64), 1), ((64, 64, 64), 8),
         ((64, 64, 64), 32), ((64, 64, 64), 64), ((128, 128, 128), 1), ((128, 128, 128), 8), ((128, 128, 128), 32),
         ((256, 256, 256), 1), ((256, 256, 256), 8)]


def synthetic(matrix: tuple[int, ...], coils: int, seed: int = 0) -> Scan:
    """A scan of the sweep: golden-angle radial (2D, N spokes of 2N samples) or kooshball (3D, pi/2 (N/2)^2
    spokes of 2N samples), random k-space (only the time is measured), the phantom's coil maps, ramp weights
    left to the preparation, correlated noise."""
    import math

    from mri_recon.sim.phantom import coil_maps
    from mri_recon.sim.trajectories import kooshball, radial

    rng = np.random.default_rng(seed)
    n = matrix[0]
    traj = radial(matrix, n, 2 * n, golden=True) if len(matrix) == 2 else kooshball(
        matrix, math.ceil(math.pi / 2 * (n // 2) ** 2))
    shape = (coils, len(traj))
    kspace = (rng.standard_normal(shape, dtype=np.float32) + 1j * rng.standard_normal(shape, dtype=np.float32))
    scan = Scan(kspace=kspace.astype(np.complex64), trajectory=traj, matrix=matrix, coil_maps=coil_maps(matrix, coils))
    return with_noise(scan, seed)


def sweep_row(scan: Scan, dev, repeats: int, compare: bool) -> dict:
    def sync():
        synchronize(dev)

    def call():
        return mri_recon.reconstruct(scan, device=dev, dcf="ramp", **SETTINGS)

    if compare:
        whole, outs, pageable = staged_and_pageable(call, repeats, sync)
    else:
        (whole, outs), pageable = median_of(call, repeats, sync), None
    prep, _ = median_of(lambda: prepare_on_device(scan, dev, dcf="ramp"), repeats, sync)
    stages, solver = stage_sums(outs)
    row = {"matrix": list(scan.matrix), "coils": scan.n_coils, "samples": scan.n_samples, "whole_s": whole,
           "stages_s": stages, "prep_in_call_s": statistics.median(r.timings["prepare"] for r in outs),
           "prep_s": prep, "host_share": 1 - stages / whole, "host_share_upper": 1 - solver / whole}
    return row | ({"whole_pageable_s": pageable} if compare else {})


def staged_and_pageable(fn, repeats: int, sync):
    """:func:`median_of` for ``fn`` as it is and with :func:`pageable_uploads`, the two taken in turn (so that a
    drift of the machine's speed falls on both): (staged median, staged outputs, pageable median)."""
    staged, pageable, outs = [], [], []
    for turn in range(repeats + 1):  # the first turn warms both up
        for times, copy in ((staged, contextlib.nullcontext), (pageable, pageable_uploads)):
            with copy():
                start = time.perf_counter()
                out = fn()
                sync()
            if turn:
                times.append(time.perf_counter() - start)
                outs += [out] if times is staged else []
    return statistics.median(staged), outs, statistics.median(pageable)


def sweep(repeats: int, compare: bool) -> list[dict]:
    """Host share of the whole call (file maps, ramp weights computed, prewhitened) over matrices and coils."""
    dev = resolve_device("gpu")
    rows = []
    print("| matrix | coils | whole (ms) | stages (ms) | of which prepare (ms) | prepare alone (ms) | host share "
          "| prepare counted as host |" + (" whole, pageable uploads (ms) |" if compare else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|" if compare else ""))
    for matrix, coils in SWEEP:
        row = sweep_row(synthetic(matrix, coils), dev, repeats, compare)
        rows.append(row)
        print(f"| {'x'.join(map(str, matrix))} | {coils} | {row['whole_s'] * 1e3:.1f} | {row['stages_s'] * 1e3:.1f} "
              f"| {row['prep_in_call_s'] * 1e3:.1f} | {row['prep_s'] * 1e3:.1f} | {row['host_share']:.1%} "
              f"| {row['host_share_upper']:.0%} |"
              + (f" {row['whole_pageable_s'] * 1e3:.1f} |" if compare else ""), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--problem", choices=("2d", "3d128", "all", "none"), default="all")
    parser.add_argument("--sweep", action="store_true", help="also the host share over matrices and coil counts")
    parser.add_argument("--compare-pageable", action="store_true",
                        help="the sweep's whole call also with every copy up pageable (the staged copy's gain)")
    args = parser.parse_args()
    cupy = cupy_module()
    if cupy is None:
        raise SystemExit("bench_prepare.py needs CuPy and a GPU")
    results = []
    if args.problem in ("2d", "all"):
        results.append(run("2d256", with_noise(bench_recon.problem()), args.repeats))
    if args.problem in ("3d128", "all"):
        results.append(run("3d128", with_noise(bench_recon.problem_3d(128)), max(3, args.repeats // 2)))
    table = sweep(max(3, args.repeats // 2), args.compare_pageable) if args.sweep else []
    props = cupy.cuda.runtime.getDeviceProperties(0)
    report = {"device": props["name"].decode(), "cupy": cupy.__version__, "mri_recon": mri_recon.__version__,
              "python": platform.python_version(), "settings": SETTINGS, "results": results,
              "sweep": table}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
