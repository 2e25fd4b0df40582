"""End-to-end GPU reconstruction benchmark (issue: GPU CG-SENSE), with SigPy's SenseRecon beside it.

Problem: 256 x 256, golden-angle radial 256 spokes x 1024 samples (4x readout oversampling, k within
Nyquist: M = 262,144 per coil), 8 coils, analytic Shepp-Logan k-space with synthetic coil maps and noise,
Pipe-Menon density weights, 30 CG iterations, lambda = 1e-3 (relative to the normal operator's peak).

Timed: ours with the PSF computed in the run (quiet, and with the progress lines the CLI shows), ours
estimating the coil maps itself (Walsh, ESPIRiT) from the uploaded data, ours with a PSF-cache hit,
SigPy 0.1.27 SenseRecon on the GPU with the same maps, weights and iterations (its lambda mapped to the
same absolute regularization).
Medians of wall-clock times around the whole call (device synchronized), after one warm-up run each.
3D problems (``--problem 3d128`` / ``3d256``, issue: GPU NUFFT): kooshball with pi/2 (N/2)^2 spokes of 2N
samples (1,647,104 and 13,176,832 per coil), 8 coils, ramp density weights |k|^2, k-space computed on the GPU by
the NUFFT forward of the rasterized phantom times the coil maps (an inverse crime, accepted for timing:
both peers solve the same problem), noise at SNR 30. Ours with ``method="auto"`` (the cost model's choice)
with the PSF computed and cached, SigPy beside it; the peak of CuPy's pool against the planner's estimate.
Usage: python scripts/bench_recon.py OUT.json [--repeats N] [--data SCAN.h5] [--problem 2d|3d128|3d256]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np
from benchtools import wall_timed as timed

from mri_recon import __version__
from mri_recon.arrays.backend import cupy_module, resolve_device
from mri_recon.io import load_scan, save_scan
from mri_recon.io.cache import PsfCache
from mri_recon.pipeline import reconstruct
from mri_recon.prep.dcf import pipe_menon
from mri_recon.scan import Scan
from mri_recon.sim.phantom import add_noise, coil_kspace, coil_maps, shepp_logan_image
from mri_recon.sim.trajectories import radial

MATRIX, SPOKES, SAMPLES, COILS, ITERATIONS, LAM = (256, 256), 256, 1024, 8, 30, 1e-3


def problem(seed: int = 0, path: str | None = None) -> Scan:
    """The benchmark scan; read from ``path`` when that file exists (it is slow to simulate), else built
    (and written to ``path`` when one is given)."""
    if path and os.path.exists(path):
        return load_scan(path)
    rng = np.random.default_rng(seed)
    traj = radial(MATRIX, SPOKES, SAMPLES, golden=True, oversampling=4)
    kspace = coil_kspace(traj, MATRIX, COILS)
    noisy, _ = add_noise(kspace, 30.0, rng)
    scan = Scan(kspace=noisy, trajectory=traj, matrix=MATRIX, weights=pipe_menon(traj, MATRIX),
                coil_maps=coil_maps(MATRIX, COILS), ground_truth=shepp_logan_image(MATRIX))
    if path:
        save_scan(path, scan)
    return scan


def problem_3d(n: int, seed: int = 0) -> Scan:
    """The 3D kooshball benchmark scan of matrix n^3 (see the module docstring), built on the GPU."""
    import math

    from mri_recon.operators.engines import GpuNufftEncoding
    from mri_recon.sim.phantom import cartesian_signal, noise_std_for
    from mri_recon.sim.trajectories import kooshball

    cupy = cupy_module()
    matrix = (n, n, n)
    traj = kooshball(matrix, math.ceil(math.pi / 2 * (n // 2) ** 2))
    truth = shepp_logan_image(matrix, oversample=1).astype(np.complex64)
    maps = coil_maps(matrix, COILS)
    encode = GpuNufftEncoding(cupy.asarray(traj), matrix, COILS)
    clean = cupy.asnumpy(encode(cupy.asarray(maps * truth)))
    rng = np.random.default_rng(seed)
    sigma = noise_std_for(clean, 30.0, signal=cartesian_signal(maps * truth))  # image-domain SNR, as simulate
    noise = sigma * (rng.standard_normal(clean.shape, dtype=np.float32)
                     + 1j * rng.standard_normal(clean.shape, dtype=np.float32)) / np.sqrt(2)
    # ramp weights |k|^2 (unnormalized: lambda is relative, so the scale of the weights does not matter)
    radius2 = np.sum(traj.astype(np.float64) ** 2, axis=1)
    weights = np.maximum(radius2, 0.25 * float(np.min(radius2[radius2 > 0]))).astype(np.float32)
    return Scan(kspace=clean + noise.astype(np.complex64), trajectory=traj, matrix=matrix,
                weights=weights, coil_maps=maps, ground_truth=truth)


def nrmse(image: np.ndarray, truth: np.ndarray) -> float:
    return float(np.linalg.norm(image - truth) / np.linalg.norm(truth))


def ours_3d(scan: Scan, repeats: int, device, sync) -> dict:
    from mri_recon.operators.engines import choose_engine
    from mri_recon.pipeline import memory_plan

    cupy = cupy_module()
    pool = cupy.get_default_memory_pool()
    result = {}
    _, engine = choose_engine(device, "auto", problem=(scan.matrix, scan.n_samples, scan.n_coils))
    with tempfile.TemporaryDirectory() as folder:
        run = lambda: reconstruct(scan, iterations=ITERATIONS, lam=LAM, tol=0.0, device=device,  # noqa: E731
                                  progress=False)
        median, times, res = timed(run, repeats, sync)
        pool.free_all_blocks()
        before = pool.total_bytes()
        reconstruct(scan, iterations=ITERATIONS, lam=LAM, tol=0.0, device=device, progress=False)
        plan = memory_plan(scan, device, ITERATIONS, True, engine.name)
        result["psf_computed"] = {"median_s": median, "times_s": times, "nrmse": nrmse(res.image, scan.ground_truth),
                                  "stages_s": dict(res.timings), "method": res.parameters["method"],
                                  "peak_pool_bytes": int(pool.total_bytes() - before),
                                  "planned_peak_bytes": int(plan.peak_bytes), "planned_stages": plan.stages}
        cache = PsfCache(folder)
        reconstruct(scan, iterations=ITERATIONS, lam=LAM, tol=0.0, device=device, progress=False, psf_cache=cache)
        hit = lambda: reconstruct(scan, iterations=ITERATIONS, lam=LAM, tol=0.0, device=device,  # noqa: E731
                                  progress=False, psf_cache=cache)
        median, times, res = timed(hit, repeats, sync)
        result["psf_cached"] = {"median_s": median, "times_s": times, "nrmse": nrmse(res.image, scan.ground_truth),
                                "stages_s": dict(res.timings)}
    return result


def ours(scan: Scan, repeats: int, device, sync) -> dict:
    cupy = cupy_module()
    pool = cupy.get_default_memory_pool()
    result = {}
    with tempfile.TemporaryDirectory() as folder:
        cold = lambda: reconstruct(scan, iterations=ITERATIONS, lam=LAM, tol=0.0, device=device,  # noqa: E731
                                   progress=False)
        median, times, res = timed(cold, repeats, sync)
        pool.free_all_blocks()
        reconstruct(scan, iterations=ITERATIONS, lam=LAM, tol=0.0, device=device, progress=False)
        peak = pool.total_bytes()
        result["psf_computed"] = {"median_s": median, "times_s": times, "nrmse": nrmse(res.image, scan.ground_truth),
                                  "stages_s": dict(res.timings), "peak_pool_bytes": int(peak),
                                  "final_residual": float(res.residuals[-1]),
                                  "lam_abs": float(res.parameters["lam_abs"])}
        # the CLI's default: progress lines on stderr (here into a buffer), the GPU CG reporting at its checks
        shown = lambda: _with_progress(scan, device)  # noqa: E731
        median, times, res = timed(shown, repeats, sync)
        result["psf_computed_progress"] = {"median_s": median, "times_s": times,
                                           "nrmse": nrmse(res.image, scan.ground_truth)}
        bare = scan.replace(coil_maps=None)
        for method in ("walsh", "espirit"):
            run = lambda m=method: reconstruct(bare, iterations=ITERATIONS, lam=LAM, tol=0.0,  # noqa: E731
                                               device=device, progress=False, estimate_maps=m)
            median, times, res = timed(run, repeats, sync)
            result[f"maps_{method}"] = {"median_s": median, "times_s": times,
                                        "nrmse": nrmse(res.image, scan.ground_truth), "stages_s": dict(res.timings)}
        cache = PsfCache(folder)
        first = reconstruct(scan, iterations=ITERATIONS, lam=LAM, tol=0.0, device=device, progress=False,
                            psf_cache=cache)
        hit = lambda: reconstruct(scan, iterations=ITERATIONS, lam=LAM, tol=0.0, device=device,  # noqa: E731
                                  progress=False, psf_cache=cache)
        median, times, res = timed(hit, repeats, sync)
        result["psf_cached"] = {"median_s": median, "times_s": times, "nrmse": nrmse(res.image, scan.ground_truth),
                                "stages_s": dict(res.timings),
                                "bit_identical_to_first": bool(np.array_equal(first.image, res.image))}
    return result


def _with_progress(scan: Scan, device):
    buffer, saved = io.StringIO(), sys.stderr
    sys.stderr = buffer
    try:
        return reconstruct(scan, iterations=ITERATIONS, lam=LAM, tol=0.0, device=device, progress=True)
    finally:
        sys.stderr = saved


def sigpy_peer(scan: Scan, repeats: int, sync, lam_abs: float) -> dict:
    try:
        import sigpy as sp
        import sigpy.mri as mr
    except Exception as exc:  # noqa: BLE001
        return {"skipped": f"sigpy unavailable: {exc}"}
    cupy = cupy_module()
    n_vox = int(np.prod(scan.matrix))
    # SigPy's NUFFT is unitary-scaled (1/sqrt(N)); its weights enter as sqrt(w) on both sides. Same problem:
    # min ||W^1/2 (F S x - d)||^2 + lam_abs ||x||^2 with F ours = sqrt(N) F_sigpy, so x_sigpy = sqrt(N) x_ours
    # and lamda_sigpy = lam_abs / N.
    device = sp.Device(0)
    y = cupy.asarray(scan.kspace)
    mps = cupy.asarray(scan.coil_maps)
    coord = cupy.asarray(scan.trajectory)
    weights = cupy.asarray(scan.weights)

    def run():
        app = mr.app.SenseRecon(y, mps, lamda=lam_abs / n_vox, weights=weights, coord=coord, device=device,
                                max_iter=ITERATIONS, show_pbar=False)
        return app.run()

    median, times, out = timed(run, repeats, sync)
    image = cupy.asnumpy(out) / np.sqrt(n_vox)
    return {"median_s": median, "times_s": times, "nrmse": nrmse(image, scan.ground_truth),
            "version": getattr(sp, "__version__", "?")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--data", default=None, help="scan file to reuse (written on first use)")
    parser.add_argument("--make-data", action="store_true", help="only write --data and stop")
    parser.add_argument("--problem", choices=["2d", "3d128", "3d256"], default="2d")
    parser.add_argument("--sigpy-repeats", type=int, default=None, help="SigPy's repeats (default --repeats)")
    args = parser.parse_args()
    if args.make_data:
        problem(path=args.data)
        return 0
    device = resolve_device("gpu")
    cupy = cupy_module()
    sync = cupy.cuda.Device(device.index).synchronize
    props = cupy.cuda.runtime.getDeviceProperties(device.index)
    three_d = args.problem != "2d"
    scan = problem_3d(int(args.problem[2:])) if three_d else problem(path=args.data)
    report = {"device": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
              "date": time.strftime("%Y-%m-%d"), "mri_recon": __version__, "cupy": cupy.__version__,
              "numpy": np.__version__, "python": platform.python_version(),
              "problem": {"name": args.problem, "matrix": scan.matrix, "samples_per_coil": scan.n_samples,
                          "coils": COILS, "iterations": ITERATIONS, "lambda": LAM}}
    # SigPy solves the same problem with our absolute regularization weight (lam relative to the peak of the
    # normal operator: lam * max_n sum_c |S_c(n)|^2 * sum(w))
    lam_abs = LAM * float(np.max(np.sum(np.abs(scan.coil_maps) ** 2, axis=0))) * \
        float(np.sum(scan.weights, dtype=np.float64))
    run_ours = ours_3d if three_d else ours
    sigpy_repeats = args.repeats if args.sigpy_repeats is None else args.sigpy_repeats
    for name, fn in (("ours", lambda: run_ours(scan, args.repeats, device, sync)),
                     ("sigpy", lambda: sigpy_peer(scan, sigpy_repeats, sync, lam_abs))):
        try:
            report[name] = fn()
        except Exception as exc:  # noqa: BLE001 - record and go on
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2, default=str)
    o, s = report.get("ours", {}), report.get("sigpy", {})
    rows = (("ours, PSF computed", o.get("psf_computed", o)),
            ("ours, with progress", o.get("psf_computed_progress", {})), ("ours, PSF cached", o.get("psf_cached", {})),
            ("ours, Walsh maps", o.get("maps_walsh", {})), ("ours, ESPIRiT maps", o.get("maps_espirit", {})),
            ("sigpy SenseRecon", s))
    for label, entry in rows:
        if "median_s" in entry:
            print(f"{label:<20} {entry['median_s'] * 1e3:8.1f} ms  NRMSE {entry['nrmse']:.4f}")
        else:
            print(f"{label:<20} {entry}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
