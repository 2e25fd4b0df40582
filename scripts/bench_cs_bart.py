"""CPU benchmark of total-variation reconstruction against BART ``pics -R T`` on data made by BART (issue 14).

Data, made by BART itself (v0.8.00): ``bart traj -r -x 256 -y S t; bart scale 0.5 t traj`` (radial, S spokes
x 256 samples, 2x readout oversampling, in cycles per FOV of a 128 matrix: BART's trajectory unit divided by
two, as for ``tests/data/bart_radial_64.h5``), ``bart phantom -k -s 8 -t traj ksp`` (analytic k-space of
the Shepp-Logan phantom times 8 coil sensitivities, no noise), ``bart phantom -S 8 -x 128 sens`` (those
sensitivities), ``bart phantom -x 128 img`` (the ground truth). S = 40 and 24 spokes (Nyquist: pi/2 * 128 =
201). The arrays are read from .cfl (Fortran order) into our layout: trajectory ``(S * 256, 2)``, k-space
``(8, S * 256)``, maps ``(8, 128, 128)``.

BART: ``bart pics -S -R T:3:0:LAMBDA -i ITER -t traj ksp sensn out`` (``sensn``: BART's maps divided by their
root-sum-of-squares peak, given to both) (isotropic TV over the two image axes,
ADMM, BART's own data scaling) over a sweep of LAMBDA, timed as the command (process start and .cfl I/O
included). Ours: ``reconstruct(regularizer="tv", device="cpu")`` without density weights (BART's least-squares
problem) over a sweep of our relative lambda, timed in-process after one warm-up. NRMSE against ``img`` after
the best complex scale (BART's maps carry magnitudes near 1.2e5, so both images differ from ``img`` by a
global factor). Runs of ours and BART alternate within each sweep point. 2-core machine, shared: the median
and the minimum of the repeats are both recorded, with the load average.

Usage: python scripts/bench_cs_bart.py OUT.json [--iterations N] [--bart-iterations N] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import mri_recon
from mri_recon.pipeline import reconstruct
from mri_recon.scan import Scan

MATRIX, SAMPLES, COILS = 128, 256, 8
OURS_LAMBDAS = (3e-4, 1e-3, 3e-3, 1e-2)
BART_LAMBDAS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)


def read_cfl(path: Path) -> np.ndarray:
    dims = [int(v) for v in path.with_suffix(".hdr").read_text().splitlines()[1].split()]
    data = np.fromfile(path.with_suffix(".cfl"), dtype=np.complex64, count=int(np.prod(dims)))
    while len(dims) > 1 and dims[-1] == 1:  # BART writes 16 dimensions
        dims.pop()
    return data.reshape(dims, order="F")


def bart(*args: str, folder: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(["bart", *args], cwd=folder, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"bart {' '.join(args)} failed: {done.stderr.strip()[-300:]}")
    return seconds


def make_data(spokes: int, folder: str) -> Scan:
    """BART's phantom data (see the module docstring) as a Scan with the rasterized phantom as truth."""
    bart("traj", "-r", "-x", str(SAMPLES), "-y", str(spokes), "t", folder=folder)
    bart("scale", "0.5", "t", "traj", folder=folder)
    bart("phantom", "-k", "-s", str(COILS), "-t", "traj", "ksp", folder=folder)
    bart("phantom", "-S", str(COILS), "-x", str(MATRIX), "sens", folder=folder)
    bart("phantom", "-x", str(MATRIX), "img", folder=folder)
    root = Path(folder)
    traj = read_cfl(root / "traj")  # (3, samples, spokes)
    ksp = read_cfl(root / "ksp")  # (1, samples, spokes, coils)
    sens = read_cfl(root / "sens")  # (x, y, 1, coils)
    img = read_cfl(root / "img")  # (x, y)
    trajectory = np.ascontiguousarray(traj[:2].real.transpose(2, 1, 0).reshape(-1, 2), dtype=np.float32)
    kspace = np.ascontiguousarray(ksp[0].transpose(2, 1, 0).reshape(COILS, -1), dtype=np.complex64)
    # BART's maps peak near 1.8e5 in root-sum-of-squares; pics' lambda is not relative to the maps, so its TV
    # term vanished against the data term (every lambda gave the same image). Both get the maps divided by
    # their peak (`sensn`): the images scale by that factor and nothing else changes for ours.
    peak = float(np.sqrt((np.abs(sens[:, :, 0, :]) ** 2).sum(axis=-1)).max())
    sens = (sens / peak).astype(np.complex64)
    (root / "sensn.hdr").write_text((root / "sens.hdr").read_text())
    sens.ravel(order="F").tofile(root / "sensn.cfl")
    maps = np.ascontiguousarray(np.moveaxis(sens[:, :, 0, :], -1, 0), dtype=np.complex64)
    return Scan(kspace=kspace, trajectory=trajectory, matrix=(MATRIX, MATRIX), coil_maps=maps,
                ground_truth=np.ascontiguousarray(img.reshape(MATRIX, MATRIX), dtype=np.complex64))


def nrmse(image: np.ndarray, truth: np.ndarray) -> float:
    """Relative L2 error after the best complex scale ``<x, t> / <x, x>``."""
    image, truth = np.asarray(image, np.complex128), np.asarray(truth, np.complex128)
    scale = np.vdot(image, truth) / np.vdot(image, image)
    return float(np.linalg.norm(scale * image - truth) / np.linalg.norm(truth))


def sweep(scan: Scan, folder: str, iterations: int, bart_iterations: int, repeats: int) -> dict:
    ours, theirs = {}, {}
    reconstruct(scan, iterations=iterations, lam=OURS_LAMBDAS[0], device="cpu", regularizer="tv")  # warm-up
    bart("pics", "-S", "-R", f"T:3:0:{BART_LAMBDAS[0]}", "-i", str(bart_iterations), "-t", "traj", "ksp", "sensn",
         "out", folder=folder)
    for index in range(max(len(OURS_LAMBDAS), len(BART_LAMBDAS))):
        if index < len(OURS_LAMBDAS):
            lam = OURS_LAMBDAS[index]
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                result = reconstruct(scan, iterations=iterations, lam=lam, device="cpu", regularizer="tv")
                times.append(time.perf_counter() - start)
            ours[lam] = {"seconds": statistics.median(times), "seconds_min": min(times), "seconds_all": times,
                         "nrmse": nrmse(result.image, scan.ground_truth),
                         "objective": float(result.parameters["objective"])}
        if index < len(BART_LAMBDAS):
            lam = BART_LAMBDAS[index]
            command = ["pics", "-S", "-R", f"T:3:0:{lam}", "-i", str(bart_iterations), "-t", "traj", "ksp", "sensn",
                       "out"]
            times = [bart(*command, folder=folder) for _ in range(repeats)]
            image = read_cfl(Path(folder) / "out").reshape(MATRIX, MATRIX)
            theirs[lam] = {"seconds": statistics.median(times), "seconds_min": min(times), "seconds_all": times,
                           "nrmse": nrmse(image, scan.ground_truth), "command": "bart " + " ".join(command)}
    best_ours = min(ours, key=lambda k: ours[k]["nrmse"])
    best_bart = min(theirs, key=lambda k: theirs[k]["nrmse"])
    return {"ours": {"sweep": {str(k): v for k, v in ours.items()}, "best_lambda": best_ours, **ours[best_ours]},
            "bart": {"sweep": {str(k): v for k, v in theirs.items()}, "best_lambda": best_bart, **theirs[best_bart]}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--iterations", type=int, default=20,
                        help="our outer ADMM iterations (5 CG steps each without density weights)")
    parser.add_argument("--bart-iterations", type=int, default=100, help="bart pics -i")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("bart") is None:
        print("bart not found on PATH", file=sys.stderr)
        return 1
    version = subprocess.run(["bart", "version"], capture_output=True, text=True, check=False).stdout.strip()
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "bart": version, "mri_recon": mri_recon.__version__,
              "numpy": np.__version__, "python": platform.python_version(), "cpu_count": os.cpu_count(),
              "platform": platform.platform(), "iterations": args.iterations,
              "bart_iterations": args.bart_iterations, "repeats": args.repeats, "cases": {}}
    for spokes in (40, 24):
        with tempfile.TemporaryDirectory(prefix="bench_cs_bart_") as folder:
            scan = make_data(spokes, folder)
            case = sweep(scan, folder, args.iterations, args.bart_iterations, args.repeats)
        report["cases"][f"{spokes}_spokes"] = case
        o, b = case["ours"], case["bart"]
        print(f"{spokes} spokes: ours NRMSE {o['nrmse']:.4f} in {o['seconds']:.3f} s (min {o['seconds_min']:.3f}, "
              f"lambda {o['best_lambda']}); BART {b['nrmse']:.4f} in {b['seconds']:.3f} s (min {b['seconds_min']:.3f}, "
              f"lambda {b['best_lambda']}); load average {os.getloadavg()[0]:.1f}")
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
