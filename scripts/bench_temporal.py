"""Time-resolved reconstruction of a beating phantom: temporal TV against frame-by-frame CG-SENSE and BART.

Data: :func:`mri_recon.sim.dynamic.simulate_series`, golden-angle radial, 128^2, 8 coils, 20 frames of 21
consecutive spokes (256 samples each, 2x readout oversampling), image-domain SNR 30, Pipe-Menon weights per
frame, the simulation's coil maps given to every method (a solver comparison: BART gets the same maps, not
``ecalib`` ones).

- Frame-by-frame CG-SENSE: ``mri_recon.reconstruct(series, temporal="none")`` (each frame's CG on its own normal
  operator, Tikhonov 1e-3), at its best iteration count of a sweep (CG on 21 spokes semi-converges).
- Temporal TV: ``mri_recon.reconstruct(series, temporal="tv", temporal_solver="admm" | "pdhg")``, 100
  iterations, over a sweep of the relative ``temporal_lam``; and the objective per iteration of both solvers
  against a long ADMM run.
- BART: ``bart pics -S -R T:1024:0:LAMBDA -i 100 -t traj -p pattern ksp sens out`` with ``pattern`` the square
  root of our density weights (pics multiplies the data and the model by it: the same weighted least
  squares), over a sweep of LAMBDA, timed as the command (process start and .cfl I/O included),
  ``OMP_NUM_THREADS=2``.
- Estimated maps (section ``ecalib``): BART with its own maps (``nufft -a`` of all spokes, ``fft -u 3``,
  ``ecalib -m1``) and ours with ESPIRiT of the time-averaged data (all spokes), each solver with its own.

NRMSE: of the magnitudes over all frames against the ground truth, as they come (both in the data's units:
BART with ``-S``) and after the best real scale. On a machine with a GPU the temporal TV solve (100 ADMM
iterations, upload and PSF excluded) is timed there too and compared with the CPU frames.

Usage: python scripts/bench_temporal.py OUT.json [--bart PATH] [--sections cg,tv,convergence,bart,ecalib,gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import mri_recon
from mri_recon.arrays.backend import cupy_module
from mri_recon.prep.frames import prepare_series
from mri_recon.sim.dynamic import simulate_series

FRAMES, SPOKES, MATRIX, COILS = 20, 21, 128, 8
TEMPORAL_LAMBDAS = (0.0025, 0.005, 0.01, 0.02, 0.04)
BART_LAMBDAS = (0.0001, 0.0003, 0.001, 0.003, 0.01)
SECTIONS = ("cg", "tv", "convergence", "bart", "ecalib", "gpu")
CG_ITERATIONS = (5, 10, 20, 40, 100)


def write_cfl(path: Path, array: np.ndarray) -> None:
    """BART's format: ``path.hdr`` (the dimensions) and ``path.cfl`` (complex64, Fortran order)."""
    dims = list(array.shape) + [1] * (16 - array.ndim)
    path.with_suffix(".hdr").write_text("# Dimensions\n" + " ".join(str(d) for d in dims) + "\n")
    np.asarray(array, dtype=np.complex64).ravel(order="F").tofile(path.with_suffix(".cfl"))


def read_cfl(path: Path) -> np.ndarray:
    dims = [int(v) for v in path.with_suffix(".hdr").read_text().splitlines()[1].split()]
    data = np.fromfile(path.with_suffix(".cfl"), dtype=np.complex64, count=int(np.prod(dims)))
    return data.reshape(dims, order="F")


def nrmse(image: np.ndarray, truth: np.ndarray) -> dict:
    """Magnitude NRMSE as it comes and after the best real scale."""
    a, b = np.abs(image).astype(np.float64).ravel(), np.abs(truth).astype(np.float64).ravel()
    scale = float(a @ b / max(a @ a, 1e-300))
    return {"raw": float(np.linalg.norm(a - b) / np.linalg.norm(b)),
            "fitted": float(np.linalg.norm(scale * a - b) / np.linalg.norm(b)), "scale": scale}


def bart_inputs(series, folder: Path) -> None:
    """traj (3, n, spokes, 1 x 7, T), ksp (1, n, spokes, C, 1 x 6, T), pattern, sens (X, Y, 1, C)."""
    n = int(series.attrs["samples"])
    t = series.n_frames
    traj = np.zeros((3, n, SPOKES, t), dtype=np.complex64)
    ksp = np.zeros((n, SPOKES, COILS, t), dtype=np.complex64)
    pattern = np.zeros((n, SPOKES, t), dtype=np.complex64)
    for i, frame in enumerate(series.frames):
        traj[:2, :, :, i] = frame.trajectory.reshape(SPOKES, n, 2).transpose(2, 1, 0)
        ksp[:, :, :, i] = frame.kspace.reshape(COILS, SPOKES, n).transpose(2, 1, 0)
        pattern[:, :, i] = np.sqrt(frame.weights).reshape(SPOKES, n).T
    traj = traj.reshape(3, n, SPOKES, *[1] * 7, t)  # the time axis is BART's dimension 10
    ksp = ksp.reshape(1, n, SPOKES, COILS, *[1] * 6, t)
    pattern = pattern.reshape(1, n, SPOKES, 1, *[1] * 6, t)
    write_cfl(folder / "traj", traj)
    write_cfl(folder / "ksp", ksp)
    write_cfl(folder / "pattern", pattern)
    write_cfl(folder / "sens", series.coil_maps.transpose(1, 2, 0)[:, :, None, :])


def bart_ecalib(bart: str, series, folder: Path) -> float:
    """BART's own maps: ``nufft -a`` of all spokes (every frame) onto the grid, ``fft -u 3``, ``ecalib -m1``,
    written as ``sens`` (replacing ours); returns the seconds."""
    n = int(series.attrs["samples"])
    spokes = SPOKES * series.n_frames
    traj = np.zeros((3, n, spokes), dtype=np.complex64)
    traj[:2] = np.concatenate([f.trajectory for f in series.frames]).reshape(spokes, n, 2).transpose(2, 1, 0)
    ksp = np.concatenate([f.kspace for f in series.frames], axis=1).reshape(COILS, spokes, n).transpose(2, 1, 0)
    write_cfl(folder / "traj_all", traj)
    write_cfl(folder / "ksp_all", ksp[None])
    start = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    for args in (["nufft", "-a", "-d", f"{MATRIX}:{MATRIX}:1", "traj_all", "ksp_all", "grid_img"],
                 ["fft", "-u", "3", "grid_img", "grid"], ["ecalib", "-m1", "grid", "sens"]):
        done = subprocess.run([bart, *args], cwd=folder, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"bart {args[0]} failed: {done.stderr.strip()[-300:]}")
    return time.perf_counter() - start


def run_bart(bart: str, folder: Path, lam: float, iterations: int) -> tuple[np.ndarray, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    start = time.perf_counter()
    done = subprocess.run([bart, "pics", "-S", "-R", f"T:1024:0:{lam}", "-i", str(iterations), "-t", "traj",
                           "-p", "pattern", "ksp", "sens", "out"], cwd=folder, env=env, capture_output=True,
                          text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"bart pics failed: {done.stderr.strip()[-300:]}")
    out = read_cfl(folder / "out")  # (X, Y, 1, ..., T)
    return np.moveaxis(out.reshape(MATRIX, MATRIX, -1), -1, 0), seconds


def ours(series, **options) -> tuple[np.ndarray, float, tuple]:
    """``mri_recon.reconstruct`` of the prepared series (temporal TV unless ``temporal`` is given), timed."""
    start = time.perf_counter()
    keywords = {"temporal": "tv", "prepare": False, "device": "cpu", **options}
    result = mri_recon.reconstruct(series, **keywords)
    return result.image, time.perf_counter() - start, result.residuals


def convergence(series, iterations: int) -> dict:
    """Relative objective per 10 iterations of ADMM (rho 0.5 and 2) and PDHG, and the iterations each needs to
    come within 1% of the lowest objective any of them reached (lambda 0.01)."""
    runs = {}
    for name, options in (("admm_rho_0.5", {"rho": 0.5}), ("admm_rho_2", {"rho": 2.0}),
                          ("pdhg", {"temporal_solver": "pdhg"})):
        _, seconds, history = ours(series, temporal_lam=0.01, iterations=iterations, **options)
        runs[name] = {"seconds": seconds, "history": list(history)}
    best = min(min(run["history"]) for run in runs.values())
    for run in runs.values():
        run["iterations_to_1pct"] = next((10 * i for i, h in enumerate(run["history"]) if i and h <= 1.01 * best),
                                         None)
    return {"lowest_objective": best, **runs}


def gpu_section(series, cpu_image: np.ndarray, lam: float) -> dict | None:
    cupy = cupy_module()
    if cupy is None or cupy.cuda.runtime.getDeviceCount() == 0:
        return None
    times = []
    for _ in range(6):
        result = mri_recon.reconstruct(series, prepare=False, device="gpu", temporal="tv", temporal_lam=lam,
                                       iterations=100)
        times.append(result.timings["iterations"])
    diff = float(np.linalg.norm(result.image - cpu_image) / np.linalg.norm(cpu_image))
    return {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "solve_seconds_median":
            statistics.median(times[1:]), "solve_seconds_min": min(times[1:]), "relative_difference_vs_cpu": diff,
            "timings_last": result.timings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--bart", default="/work/tools/bart")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated: " + ", ".join(SECTIONS))
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    start = time.perf_counter()
    raw = simulate_series((MATRIX, MATRIX), frames=FRAMES, spokes_per_frame=SPOKES, coils=COILS, snr=30, seed=0)
    series, _ = prepare_series(raw, coil_maps="file")
    truth = raw.ground_truth
    report = {"mri_recon": mri_recon.__version__, "machine": platform.node(), "cpus": os.cpu_count(),
              "load": os.getloadavg(), "frames": FRAMES, "spokes_per_frame": SPOKES, "matrix": MATRIX,
              "coils": COILS, "simulate_seconds": time.perf_counter() - start, "maps": "simulation's (both)"}

    def save(name: str, value) -> None:
        report[name] = value
        report["load_end"] = os.getloadavg()
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
        print(name, json.dumps(value, default=str)[:400], flush=True)

    if "cg" in sections:
        cg = {}
        for n in CG_ITERATIONS:
            image, seconds, _ = ours(series, temporal="none", iterations=n)
            cg[n] = {"nrmse": nrmse(image, truth), "seconds": seconds}
        save("cg_sense", cg)
    best_lam = 0.01
    if "tv" in sections:
        tv = {}
        for lam in TEMPORAL_LAMBDAS:
            image, seconds, history = ours(series, temporal_lam=lam, iterations=100)
            tv[lam] = {"nrmse": nrmse(image, truth), "seconds": seconds, "objective": history[-1]}
        best_lam = min(tv, key=lambda k: tv[k]["nrmse"]["fitted"])
        save("temporal_tv_admm", tv)
    if "convergence" in sections:
        save("convergence", convergence(series, 200))
    if "bart" in sections and Path(args.bart).exists():
        with tempfile.TemporaryDirectory() as folder:
            bart_inputs(series, Path(folder))
            runs = {}
            for lam in BART_LAMBDAS:
                image, seconds = run_bart(args.bart, Path(folder), lam, 100)
                runs[lam] = {"nrmse": nrmse(image, truth), "seconds": seconds}
                save("bart", runs)
    if "ecalib" in sections and Path(args.bart).exists():
        # each with its own estimated maps from all spokes: BART ecalib, ours ESPIRiT of the time-averaged data
        with tempfile.TemporaryDirectory() as folder:
            bart_inputs(series, Path(folder))
            runs = {"ecalib_seconds": bart_ecalib(args.bart, series, Path(folder))}
            for lam in (0.001, 0.003):
                image, seconds = run_bart(args.bart, Path(folder), lam, 100)
                runs[f"bart_{lam}"] = {"nrmse": nrmse(image, truth), "seconds": seconds}
        for lam in (0.005, 0.01):  # prepared as the CLI does: ESPIRiT of the time-averaged data
            image, seconds, _ = ours(raw, temporal_lam=lam, iterations=100, prepare=True, coil_maps="espirit")
            runs[f"ours_espirit_{lam}"] = {"nrmse": nrmse(image, truth), "seconds": seconds}
        save("estimated_maps", runs)
    if "gpu" in sections:
        cpu_image = ours(series, temporal_lam=best_lam, iterations=100)[0]
        save("gpu", gpu_section(series, cpu_image, best_lam))


if __name__ == "__main__":
    main()
