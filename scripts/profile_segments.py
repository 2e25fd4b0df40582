"""Time each launch of the fused time-segmented normal operator (expand, FFT, mix, inverse FFT, reduce) on the
problem of scripts/bench_offres.py ``recon_256``, with CUDA events; a diagnostic, not a benchmark.

Usage: python scripts/profile_segments.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys

import cupy
import numpy as np

import mri_recon
from mri_recon.operators.offres import gpu_segments

captured = []
original = gpu_segments.FusedSegmentedNormal.__init__


def capture(self, *args, **kwargs):
    original(self, *args, **kwargs)
    captured.append(self)


gpu_segments.FusedSegmentedNormal.__init__ = capture
scan = mri_recon.simulate_scan((256, 256), "spiral", coils=8, snr=30, field_map_peak=150, readout_ms=16)
mri_recon.reconstruct(scan, field_map_correction="segmented", iterations=30, tol=0.0, lam=1e-3, device="gpu",
                      progress=False)
op = captured[-1]
x = cupy.asarray((np.random.default_rng(0).standard_normal(op.ishape) + 0j).astype(np.complex64))
out = cupy.empty_like(x)
step, grid_size = op._step, op._grid_size
count = min(step, op._n_coils)
work = op.expand(x, 0, count)
stages = {
    "expand": lambda: op.expand(x, 0, count),
    "fft": lambda: op._plans[count].fft(work, work, gpu_segments.FORWARD),
    "mix": lambda: op.mix(work, count),
    "ifft": lambda: op._plans[count].fft(work, work, gpu_segments.INVERSE),
    "reduce": lambda: op.reduce(x, out, 0, count, True),
    "apply_into": lambda: op.apply_into(x, out),
}
result = {"segments": int(op.segments), "coils": int(op._n_coils), "step": int(step), "grid": int(grid_size)}
for name, fn in stages.items():
    fn()
    times = []
    for _ in range(20):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cupy.cuda.get_elapsed_time(a, b) * 1e-3)
    result[name] = statistics.median(times)
moved = 8 * grid_size * count * op.segments
result["fft_gb_per_s_2pass"] = 4 * moved / result["fft"] / 1e9
print(json.dumps(result, indent=1), file=sys.stderr)
open(sys.argv[1], "w").write(json.dumps(result, indent=1))
