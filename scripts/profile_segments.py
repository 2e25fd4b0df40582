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
from mri_recon.operators import gpu_segments

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
step, grid_size, sizes, segments = op._step, op._grid_size, op._sizes, np.int32(op.segments)
count = min(step, op._n_coils)
part = op._maps[:count]
work = op._work[:count * op.segments]
stages = {
    "expand": lambda: op._expand(op._blocks(count * grid_size), (gpu_segments.BLOCK,),
                                 (part, op._phases, x, work, np.int32(count), segments, *sizes)),
    "fft": lambda: op._plans[count].fft(work, work, gpu_segments.FORWARD),
    "mix": lambda: op.mix(work, count),
    "ifft": lambda: op._plans[count].fft(work, work, gpu_segments.INVERSE),
    "reduce": lambda: op._reduce(op._blocks(op._nvox), (gpu_segments.BLOCK,),
                                 (part, op._phases, work, x, out, np.int32(count), segments, *sizes, op._lam,
                                  np.int32(1))),
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
