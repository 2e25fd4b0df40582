"""Where the wall time of a time-segmented reconstruction goes (cProfile of one warm run); diagnostic."""
import cProfile
import io
import pstats
import sys
import time

import cupy

import mri_recon

scan = mri_recon.simulate_scan((256, 256), "spiral", coils=8, snr=30, field_map_peak=150, readout_ms=16)
base = {"iterations": 30, "tol": 0.0, "lam": 1e-3, "device": "gpu", "progress": False}
for _ in range(2):
    mri_recon.reconstruct(scan, field_map_correction="segmented", **base)
cupy.cuda.Device().synchronize()
t = time.perf_counter()
r = mri_recon.reconstruct(scan, field_map_correction="segmented", **base)
print("wall", time.perf_counter() - t, r.timings, file=sys.stderr)
prof = cProfile.Profile()
prof.enable()
mri_recon.reconstruct(scan, field_map_correction="segmented", **base)
cupy.cuda.Device().synchronize()
prof.disable()
s = io.StringIO()
pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(45)
print(s.getvalue()[:9000], file=sys.stderr)
pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
open(sys.argv[1], "w").write(s.getvalue())
