"""Host time of the time-segmentation set-up (``plan_correction``: the segment count, the interpolators of every
sample, the segment phase maps) on the problem of scripts/bench_offres.py ``recon_256``; no GPU needed.

Usage: python scripts/bench_segment_fit.py [OUT.json] [--runs N]

Problem: 256 x 256 spiral (32 interleaves, 309,120 samples), 8 coils, 16 ms readouts, field map +-150 Hz
(``simulate_scan``), ``correction="segmented"``, ``gpu=True`` (L chosen for 1e-3: 10). Median and minimum of
the wall time over ``--runs`` runs after one warm-up, and the same for the stages: the fit
(``SegmentFit``), the search over L, the interpolators of the chosen L, the phase maps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform

import numpy as np
from benchtools import wall_timed

import mri_recon
from mri_recon.operators.offres import time_segments
from mri_recon.operators.offres.setup import plan_correction


def timed(fn, runs: int) -> dict:
    median, times, _ = wall_timed(fn, runs)
    return {"median_s": median, "min_s": min(times), "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("output", nargs="?")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    scan = mri_recon.simulate_scan((256, 256), "spiral", coils=8, snr=30, field_map_peak=150, readout_ms=16)
    field_map, times = scan.field_map, scan.times
    plan = plan_correction(field_map, times, 8, gpu=True, correction="segmented")
    fit = time_segments.SegmentFit(field_map, times)
    tau = time_segments.segment_times(times, plan.segments)
    results = {
        "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "numpy": np.__version__, "mri_recon": mri_recon.__version__,
        "samples": scan.n_samples, "unique_times": len(fit.unique), "chebyshev_points": len(fit.points),
        "segments": plan.segments, "error": plan.error,
        "plan_correction": timed(lambda: plan_correction(field_map, times, 8, gpu=True, correction="segmented"),
                                 args.runs),
        "fit": timed(lambda: time_segments.SegmentFit(field_map, times), args.runs),
        "choose": timed(lambda: fit.choose(time_segments.DEFAULT_TOL, time_segments.RIDGE), args.runs),
        "interpolators": timed(lambda: fit.interpolators(plan.segments, time_segments.RIDGE, np.complex64),
                               args.runs),
        "phases": timed(lambda: time_segments.segment_phases(field_map, tau), args.runs),
    }
    text = json.dumps(results, indent=1)
    print(text)
    if args.output:
        with open(args.output, "w") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
