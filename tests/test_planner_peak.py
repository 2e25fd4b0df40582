"""The plan against the peak resident memory of a whole run (``mri_recon.reconstruct``, as the CLI runs it) on
the CPU, in a fresh process: a 3-D scan of one coil, whose peak is the PSF stage (FINUFFT's fine grid of the 2x
grid, the subgrid its spreading fills beside it, the complex128 PSF)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mri_recon.io import save_scan
from mri_recon.sim.simulate import simulate_scan

finufft = pytest.importorskip("finufft")

ROOT = Path(__file__).resolve().parents[1]
MARGIN = 1.05
"""The measured peak may exceed the plan by 5%: library state the plan does not count (FFT plans, thread
stacks, allocator arenas) after the warm-up, and pages of the heap that glibc keeps."""
RUN = """
import gc, json, sys
from mri_recon import api
from mri_recon.io import load_scan
from mri_recon.sim.simulate import simulate_scan

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

warm = simulate_scan((12, 12, 12), "kooshball", coils=1, snr=30.0, seed=2, dcf="ramp")
api.reconstruct(warm, device="cpu", iterations=2, progress=False)  # libraries loaded, thread pools made
del warm
gc.collect()
start = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak RSS starts again from here
scan = load_scan(sys.argv[1])
_, _, plan = api.plan_prepared(scan, device="cpu", iterations=2)
api.reconstruct(scan, device="cpu", iterations=2, tol=0.0, progress=False)
print(json.dumps({"peak": status("VmHWM") - start, "plan": plan.peak_bytes, "stages": dict(plan.stages),
                  "samples": scan.n_samples}))
"""


def _peak_and_plan(path: Path) -> dict:
    """Run :data:`RUN` on the scan file ``path`` in a fresh interpreter (this checkout first on its path)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-c", RUN, str(path)], capture_output=True, text=True, env=env,
                         timeout=300, check=True).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("matrix, trajectory", [((48, 48, 48), "kooshball"), ((40, 40, 40), "stack-of-stars")],
                         ids=["kooshball-one-subproblem", "stack-of-stars-several"])
def test_peak_resident_memory_of_a_3d_one_coil_run_is_within_its_plan(tmp_path, matrix, trajectory):
    """Measured growth of the peak RSS from before the scan is read to the end of the run, against the plan
    (before FINUFFT's spreading subgrid was counted, the kooshball read 1.6 of it: its 86,880 samples are
    one subproblem, whose subgrid is the whole 2x grid's fine grid plus the kernel's width)."""
    scan = simulate_scan(matrix, trajectory, coils=1, snr=30.0, seed=1, dcf="ramp")
    save_scan(tmp_path / "scan.h5", scan.replace(ground_truth=None))
    found = _peak_and_plan(tmp_path / "scan.h5")
    assert (found["samples"] <= 100_000) == (trajectory == "kooshball")  # FINUFFT's samples per subproblem
    assert max(found["stages"], key=found["stages"].get) == "psf"
    assert found["peak"] <= MARGIN * found["plan"], found
    assert found["peak"] >= 0.6 * found["plan"], found  # and the plan is not far above it


def _finufft_subgrids(trajectory, grid: tuple[int, ...], matrix: tuple[int, ...]) -> list[int]:
    """The bytes of the subgrid of each subproblem of FINUFFT's type 1 of these samples onto ``grid`` (read
    from its spreading's debug output), in the order it spreads them; coordinates as :mod:`.finufft` makes."""
    import re
    import tempfile

    from mri_recon.operators.engines import finufft as wrapper

    coords = wrapper._scaled(trajectory, matrix)  # the PSF's: k on matrix, transformed onto twice the matrix
    fn = {2: finufft.nufft2d1, 3: finufft.nufft3d1}[len(grid)]
    with tempfile.TemporaryFile() as log:
        saved = os.dup(1)
        os.dup2(log.fileno(), 1)
        try:
            fn(*coords, np.ones(len(trajectory), complex), n_modes=grid, eps=1e-7, nthreads=1,
               upsampfac=wrapper.upsampfac(1e-7), spread_max_sp_size=wrapper.MAX_SUBPROBLEM, spread_debug=2)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        text = log.read().decode()
    return [16 * math.prod(int(v) for v in size.split(",")) for size in re.findall(r"siz ([\d,]+)", text)]


def _held_at_once(subgrids: list[int]) -> int:
    """The most bytes of one thread's subgrid vector resident at once: a subproblem larger than the vector's
    capacity reallocates it, holding the old one (written as far as the largest before) and the new one."""
    capacity = written = size = peak = 0
    for need in subgrids:
        if need > capacity:
            peak = max(peak, written + need)
            capacity, written = max(2 * size, need), need
        written = max(written, need)
        peak = max(peak, written)
        size = need
    return peak


@pytest.mark.parametrize("matrix, trajectory, spokes", [
    ((48, 48, 48), "kooshball", None), ((64, 64, 64), "kooshball", None), ((48, 48, 48), "stack-of-stars", None),
    ((256, 256), "golden", None), ((64, 64, 64), "kooshball", 40), ((64, 64, 64), "kooshball", 2)],
    ids=["kooshball-one", "kooshball-three", "stack-of-stars", "golden-2d", "sparse", "a-subproblem-per-sample"])
def test_spread_bytes_bound_finufft_s_subgrids(matrix, trajectory, spokes):
    """The planner's count of FINUFFT's spreading subgrids is at least what FINUFFT holds (its own subgrid
    sizes), for the F^H d grid and the PSF's, with and without the trajectory; with one subproblem, within 10%."""
    from mri_recon.operators.engines.finufft import MAX_SUBPROBLEM, fine_grid_shape
    from mri_recon.operators.engines.finufft_spread import spread_bytes, subproblem_spans
    from mri_recon.sim.simulate import _trajectory

    k = _trajectory(trajectory, matrix, spokes, None, None)[0].astype(np.float32)
    m = len(k)
    spans = subproblem_spans(k, matrix[0])
    held = m * 8 + min(m, MAX_SUBPROBLEM) * (len(matrix) + 2) * 8  # the sort order, a subproblem's copies
    for grid in (matrix, tuple(2 * n for n in matrix)):
        fine = fine_grid_shape(grid, 1e-7)
        found = _held_at_once(_finufft_subgrids(k, grid, matrix))
        planned = spread_bytes(fine, 1e-7, m, spans) - held
        assert found <= planned <= spread_bytes(fine, 1e-7, m) - held, (grid, spans, found, planned)
        if m <= MAX_SUBPROBLEM and spokes is None:
            assert planned <= 1.1 * found, (grid, found, planned)


def test_the_psf_s_coordinates_are_the_doubled_trajectory_s(rng):
    """The PSF takes its FINUFFT coordinates from k on the matrix (2 pi k / N), not from a doubled float64 copy
    of the trajectory on twice the matrix (2 pi 2k / 2N): the same doubles, so the same PSF bit for bit."""
    from mri_recon.operators.engines import finufft as wrapper

    for matrix in [(40, 48), (20, 24, 16)]:
        k = ((rng.random((5000, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
        w = rng.random(5000).astype(np.float32)
        doubled = wrapper.adjoint(w.astype(np.complex128)[None], 2 * k.astype(np.float64),
                                  tuple(2 * n for n in matrix), eps=1e-7)[0]
        assert np.array_equal(wrapper.psf(w, k, matrix, eps=1e-7), doubled)
