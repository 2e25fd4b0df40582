"""NLINV coil calibration: mri-recon's ``nlinv`` beside ``bart nlinv`` (non-Cartesian), image quality and time.

    python scripts/bench_nlinv.py [--bart bart] [--repeats 3] [--out docs/results/bench_nlinv.json] [--device gpu]

Two scans of 192^2 with 69 radial spokes of 384 samples (2x readout oversampling):

- ``bart``: BART's own data, ``bart traj -r -x 384 -y 69``, ``bart scale 0.5``, ``bart phantom -k -s 8 -t traj``
  (BART simulates at most 8 coils); the truth is ``bart phantom -x 192``.
- ``sim16``: 16 coils of mri-recon's simulator (analytic k-space of the coil-weighted Shepp-Logan phantom on
  the same spokes, uniform angles, no noise), written as BART files; the truth is
  :func:`mri_recon.sim.phantom.shepp_logan_image`.

Each is reconstructed by ``bart nlinv -t traj ksp img`` (its defaults; wall time of the command, files read
and written included) and by :func:`mri_recon.prep.nlinv.nlinv` (the whole call: PSF, adjoint, Gauss-Newton);
mri-recon's CG-SENSE image with the nlinv maps (``mri_recon.reconstruct``, its defaults) is scored too. Images are
compared with the truth by the NRMSE of their magnitudes after the best real scale,
``min_s || s |x| - |t| || / || |t| ||``, over the whole field of view and inside the support (``|t| > 0``).
Times are medians of ``--repeats`` runs after one warm-up run of each; the machine's one-minute load average
before and after each case is recorded (other jobs on the machine slow both tools). ``--device gpu`` runs ours
on the GPU (the image and maps downloaded inside the timed call); without BART installed only ``sim16`` runs,
ours alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import mri_recon  # noqa: E402
from mri_recon.arrays.backend import to_host  # noqa: E402
from mri_recon.io.cfl import read_cfl, write_cfl  # noqa: E402
from mri_recon.prep.nlinv import nlinv  # noqa: E402
from mri_recon.scan import Scan  # noqa: E402
from mri_recon.sim import phantom, trajectories  # noqa: E402

N, SPOKES, READOUT = 192, 69, 384


def bart_run(bart: str, folder: Path, *args: str) -> str:
    """The BART command's standard output (it must succeed)."""
    return subprocess.run([bart, *args], cwd=folder, capture_output=True, text=True, check=True).stdout


def nrmse(image: np.ndarray, truth: np.ndarray, mask: np.ndarray) -> float:
    """``min_s || s |x| - |t| || / || |t| ||`` over ``mask``."""
    a, b = np.abs(image[mask]).astype(np.float64), np.abs(truth[mask]).astype(np.float64)
    return float(np.linalg.norm(a * (a @ b) / (a @ a) - b) / np.linalg.norm(b))


def scores(image: np.ndarray, truth: np.ndarray) -> dict:
    return {
        "nrmse_fov": nrmse(image, truth, np.ones(truth.shape, bool)),
        "nrmse_support": nrmse(image, truth, np.abs(truth) > 0),
    }


def median_time(function, repeats: int) -> tuple[float, object]:
    """Median wall time of ``function()`` over ``repeats`` runs after one warm-up, and its last result."""
    result = function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


def read_inputs(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(kspace (C, M), trajectory (M, 2))`` of BART's ``ksp`` and ``traj``."""
    traj = np.asarray(read_cfl(folder / "traj"))
    trajectory = traj.reshape(3, -1, order="F").real.T[:, :2].astype(np.float32)
    ksp = np.asarray(read_cfl(folder / "ksp"))
    coils = ksp.shape[3]
    return ksp.reshape(-1, coils, order="F").T.astype(np.complex64), trajectory


def make_bart(bart: str, folder: Path) -> np.ndarray:
    """BART's scan in ``folder``; returns its truth."""
    bart_run(bart, folder, "traj", "-r", "-x", str(READOUT), "-y", str(SPOKES), "t")
    bart_run(bart, folder, "scale", "0.5", "t", "traj")
    bart_run(bart, folder, "phantom", "-k", "-s", "8", "-t", "traj", "ksp")
    bart_run(bart, folder, "phantom", "-x", str(N), "truth")
    return np.asarray(read_cfl(folder / "truth")).reshape(N, N, order="F")


def make_sim16(folder: Path) -> np.ndarray:
    """16 coils of mri-recon's simulator on the same spokes, as BART files in ``folder``; returns the truth."""
    traj = trajectories.radial((N, N), SPOKES, READOUT).astype(np.float32)
    kspace = phantom.coil_kspace(traj, (N, N), 16).astype(np.complex64)
    bart_traj = np.zeros((3, traj.shape[0]), np.complex64)
    bart_traj[:2] = traj.T
    write_cfl(folder / "traj", bart_traj[:, :, None])
    write_cfl(folder / "ksp", kspace.T[None, :, None, :])
    return phantom.shepp_logan_image((N, N))


def ours_nlinv(kspace: np.ndarray, trajectory: np.ndarray, device: str) -> tuple[np.ndarray, np.ndarray, list]:
    """The whole call on ``device``, its image and maps downloaded: ``(image, maps, CG iterations)``."""
    result = nlinv(kspace, trajectory, (N, N), device=device)
    return to_host(result.image), to_host(result.maps), list(result.iterations)


def case(bart: str | None, folder: Path, truth: np.ndarray, repeats: int, device: str) -> dict:
    """Both tools on the scan in ``folder`` (BART's ``nlinv`` only where ``bart`` is installed), ours on
    ``device``."""
    kspace, trajectory = read_inputs(folder)
    row: dict = {"coils": int(kspace.shape[0]), "samples": int(kspace.shape[1]), "device": device}
    if bart is not None:
        bart_time, _ = median_time(lambda: bart_run(bart, folder, "nlinv", "-t", "traj", "ksp", "img"), repeats)
        theirs = np.asarray(read_cfl(folder / "img")).reshape(N, N, order="F")
        row["bart_nlinv"] = {"time_s": bart_time, **scores(theirs, truth)}
    ours_time, (image, maps, iterations) = median_time(lambda: ours_nlinv(kspace, trajectory, device), repeats)
    scan = Scan(kspace=kspace, trajectory=trajectory, matrix=(N, N), coil_maps=maps)
    start = time.perf_counter()
    sense = mri_recon.reconstruct(scan, device=device, progress=False)
    sense_time = time.perf_counter() - start
    return {
        **row,
        "mri_recon_nlinv": {
            "time_s": ours_time,
            "cg_iterations": iterations,
            **scores(image, truth),
        },
        "mri_recon_cg_sense_with_nlinv_maps": {
            "time_s": sense_time,
            "iterations": sense.iterations,
            **scores(sense.image, truth),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bart", default=shutil.which("bart") or "bart")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "bench_nlinv.json"))
    parser.add_argument("--device", default="cpu", help="where ours runs: cpu, gpu (BART runs on the CPU)")
    args = parser.parse_args()
    bart = shutil.which(args.bart)
    version = bart_run(bart, Path.cwd(), "version").strip() if bart else None
    results = {
        "matrix": [N, N],
        "spokes": SPOKES,
        "readout": READOUT,
        "repeats": args.repeats,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "bart_version": version,
        "mri_recon_version": mri_recon.__version__,
        "numpy_version": np.__version__,
        "python": platform.python_version(),
        "cases": {},
    }
    makers = {"bart": lambda f: make_bart(bart, f), "sim16": make_sim16}
    for name, make in ((n, m) for n, m in makers.items() if bart or n != "bart"):  # BART's phantom needs BART
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            truth = make(folder)
            load = os.getloadavg()[0]
            results["cases"][name] = case(bart, folder, truth, args.repeats, args.device)
            results["cases"][name]["load_average_1min"] = [load, os.getloadavg()[0]]
            print(name, json.dumps(results["cases"][name]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
