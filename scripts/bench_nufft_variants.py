"""The GPU NUFFT's kernels under tuning options, one JSON line per problem, option set and coil count.

Usage: python scripts/bench_nufft_variants.py LABEL ['{"2d": [OPTIONS, ...], "3d": [OPTIONS, ...]}']

OPTIONS are keyword arguments of ``GpuNufft`` (``warps``, ``bins``, ``shared_limit``, ``spread``, ...) plus
``interp_step``: coils per interpolation launch (instead of ``launch_coils``' choice). Default: the defaults.
Problems: 2D 256^2 golden-angle radial (256 x 1024 samples) and 3D 128^3 kooshball (4,096 x 256 samples); 1 and
8 coils of random complex64 data. Per line: the plan's setup (wall clock), ``adjoint`` and ``forward`` (CUDA
events, median of 15 after warm-up), ``adjoint_real`` for one coil (the PSF's spreading), and the adjoint's
relative L2 error against the float64 sum at 256 random voxels (first coil). LABEL names the tree measured.
"""

from __future__ import annotations

import json
import math
import sys
import time

import numpy as np
from benchtools import cuda_timed, exact_adjoint, radial_2d

from mri_recon.arrays.backend import cupy_module
from mri_recon.operators.engines import gpu_nufft
from mri_recon.sim.trajectories import kooshball

RUNS = 15


def crandn(cupy, shape):
    return (cupy.random.standard_normal(shape, dtype=np.float32)
            + 1j * cupy.random.standard_normal(shape, dtype=np.float32)).astype(np.complex64)


def measure(cupy, plan, k, matrix, coils, voxels) -> dict:
    m = plan.n_samples
    d, x = crandn(cupy, (coils, m)), crandn(cupy, (coils, *matrix))
    out, fo = cupy.empty((coils, *matrix), np.complex64), cupy.empty((coils, m), np.complex64)
    res = {"adjoint_ms": 1e3 * cuda_timed(lambda: plan.adjoint(d, out=out), RUNS)["median_s"],
           "forward_ms": 1e3 * cuda_timed(lambda: plan.forward(x, out=fo), RUNS)["median_s"]}
    if coils == 1:
        w = cupy.abs(cupy.random.standard_normal(m, dtype=np.float32))
        o1 = cupy.empty(matrix, np.complex64)
        res["real_ms"] = 1e3 * cuda_timed(lambda: plan.adjoint_real(w, out=o1), RUNS)["median_s"]
    ref = exact_adjoint(cupy, d[:1], k, matrix, voxels)
    got = out[:1].reshape(1, -1)[:, cupy.asarray(voxels)]
    res["err"] = float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))
    return res


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    cupy = cupy_module()
    table = json.loads(argv[2]) if len(argv) > 2 else {}
    default_launch = gpu_nufft.launch_coils
    rng = np.random.default_rng(1)
    problems = [("2d", (256, 256), radial_2d(256, 256, 1024)), ("3d", (128,) * 3, kooshball((128,) * 3, 4096, 256))]
    for name, matrix, traj in problems:
        k = cupy.asarray(traj)
        voxels = np.sort(rng.choice(math.prod(matrix), 256, replace=False))
        for options in table.get(name, [{}]):
            opts = dict(options)
            step = opts.pop("interp_step", None)
            gpu_nufft.launch_coils = (lambda c, _=0, s=step: min(s, c)) if step else default_launch
            start = time.perf_counter()
            plan = gpu_nufft.GpuNufft(k, matrix, **opts)
            cupy.cuda.Device().synchronize()
            setup = time.perf_counter() - start
            for coils in (1, 8):
                line = {"label": argv[1], "problem": name, "coils": coils, "var": options, "setup_ms": 1e3 * setup}
                line.update(measure(cupy, plan, k, matrix, coils, voxels))
                print(json.dumps(line), flush=True)
    gpu_nufft.launch_coils = default_launch
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
