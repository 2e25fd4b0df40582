"""Cartesian MRD reconstruction: exactness, quality against BART ``ecalib`` + ``pics``, and time.

Problem: 256 x 256 Shepp-Logan phantom, 8 coils, analytic k-space on the Cartesian grid (no inverse crime),
written as MRD acquisitions without trajectory (:func:`mri_recon.io.cartesian_write.write_cartesian_ismrmrd`)
and read back through :func:`mri_recon.load_scans`, as a user's file would be.

1. ``exact``: fully sampled, readout oversampled 2x (512 readout samples): the root-sum-of-squares image of the
   per-coil reconstruction (lambda 0) against the float64 NumPy inverse FFT of the oversampled k-space cropped
   to the recon FOV (relative L2; target <= 1e-5).
2. ``quality``: 4x undersampled (every 4th phase encode) with 24 ACS lines, complex noise at ``--snr``; ours:
   ESPIRiT maps from the ACS + CG-SENSE (``--coil-maps auto``, 30 iterations, lambda 1e-3); BART: ``ecalib -m 1``
   + ``pics -l2 -r R -i 30`` with ``R = lambda * M / prod(matrix)`` (BART's unitary FFT), on the same k-space.
   NRMSE of the magnitude against the phantom after the best real scale; target: ours <= 1.1 x BART's.
3. ``time``: the quality problem's reconstruction with the maps given (median of ``--repeats``): CPU always,
   and the GPU (CuPy) when one is present, with the CG stage alone and the whole call.

Usage: ``python scripts/bench_cartesian.py [OUT.json] [--repeats 5] [--snr 30] [--no-bart] [--matrix 256]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import mri_recon
from mri_recon.arrays.backend import gpu_available
from mri_recon.io import load_scans
from mri_recon.io.cartesian_write import write_cartesian_ismrmrd
from mri_recon.pipeline import reconstruct
from mri_recon.sim.cartesian import cartesian_kspace, undersampling_mask
from mri_recon.sim.phantom import add_noise, shepp_logan_image

COILS, ITERATIONS, LAM = 8, 30, 1e-3


def _write_cfl(path: Path, array: np.ndarray) -> None:
    path.with_suffix(".hdr").write_text("# Dimensions\n" + " ".join(str(n) for n in array.shape) + "\n")
    np.asarray(array, dtype=np.complex64).ravel(order="F").tofile(path.with_suffix(".cfl"))


def _read_cfl(path: Path) -> np.ndarray:
    dims = [int(v) for v in path.with_suffix(".hdr").read_text().splitlines()[1].split()]
    return np.fromfile(path.with_suffix(".cfl"), dtype=np.complex64, count=int(np.prod(dims))).reshape(
        dims, order="F")


def magnitude_nrmse(image: np.ndarray, truth: np.ndarray) -> float:
    """Relative L2 error of ``|image|`` against ``truth`` after the best real scale."""
    a, t = np.abs(np.asarray(image, dtype=np.complex128)), np.abs(np.asarray(truth)).astype(np.float64)
    return float(np.linalg.norm(a * (np.vdot(a, t) / np.vdot(a, a)) - t) / np.linalg.norm(t))


def exactness(n: int, folder: Path) -> dict:
    """Fully sampled, 2x readout oversampling: ours against the float64 inverse FFT."""
    kspace = cartesian_kspace((n, n), COILS, oversampling=2)
    path = folder / "full.h5"
    write_cartesian_ismrmrd(path, kspace[None], matrix=(n, n))
    (_, scan), = load_scans(path)
    result = mri_recon.reconstruct(scan, coil_maps="rss", lam=0.0, iterations=3, device="cpu")
    k64 = kspace.astype(np.complex128)
    image = np.fft.fftshift(np.fft.ifftn(np.fft.ifftshift(k64, axes=(1, 2)), axes=(1, 2)), axes=(1, 2))
    cropped = image[:, n - n // 2:n - n // 2 + n]  # the centre n of 2n readout voxels
    reference = np.sqrt((np.abs(cropped) ** 2).sum(axis=0))
    error = float(np.linalg.norm(result.image - reference) / np.linalg.norm(reference))
    return {"relative_l2": error, "target": 1e-5, "met": error <= 1e-5, "method": result.parameters["method"],
            "readout_oversampling_removed": scan.attrs["readout_oversampling_removed"]}


def undersampled(n: int, snr: float, folder: Path) -> tuple[object, np.ndarray, np.ndarray]:
    """The 4x, 24-ACS scan (read back from MRD), its k-space on the grid with zeros, and the truth."""
    rng = np.random.default_rng(0)
    kspace = cartesian_kspace((n, n), COILS)
    if snr:
        kspace = add_noise(kspace, snr, rng)[0]
    lines, acs = undersampling_mask(n, 4, 24)
    path = folder / "r4.h5"
    write_cartesian_ismrmrd(path, kspace[None], lines=lines, acs=acs)
    (_, scan), = load_scans(path)
    return scan, kspace * lines[None, None, :], shepp_logan_image((n, n))


def bart_image(kspace: np.ndarray, n_samples: int, n: int, folder: Path) -> np.ndarray:
    """BART ``ecalib -m 1`` then ``pics -l2`` (30 iterations) on the zero-filled k-space."""
    bart = shutil.which("bart") or "/work/tools/bart"
    _write_cfl(folder / "ksp", np.moveaxis(kspace, 0, -1)[:, :, None, :])
    lam = LAM * n_samples / (n * n)
    for command in (["ecalib", "-m", "1", "ksp", "sens"],
                    ["pics", "-S", "-l2", "-r", f"{lam:.6g}", "-i", str(ITERATIONS), "ksp", "sens", "out"]):
        done = subprocess.run([bart, *command], cwd=folder, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"bart {command[0]} failed: {done.stderr.strip()[-300:]}")
    return _read_cfl(folder / "out").reshape(n, n)


def timing(scan, repeats: int, device: str) -> dict:
    """The reconstruction with maps given (ESPIRiT from the ACS, computed once): median wall and CG stage."""
    ours = mri_recon.reconstruct(scan, iterations=ITERATIONS, lam=LAM, device=device)  # warm-up; maps
    from mri_recon.prep.cartesian_maps import cartesian_coil_maps  # noqa: PLC0415

    maps = np.asarray(cartesian_coil_maps(scan.kspace, scan.trajectory, scan.matrix, "espirit", device="cpu"))
    given = scan.replace(coil_maps=maps.astype(np.complex64))
    walls, stages = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        result = reconstruct(given, iterations=ITERATIONS, tol=0.0, lam=LAM, device=device)
        walls.append(time.perf_counter() - start)
        stages.append(result.timings)
    return {"device": result.device, "method": result.parameters["method"], "wall_ms": 1e3 * statistics.median(walls),
            "iterations_ms": 1e3 * statistics.median(s["iterations"] for s in stages),
            "stages_ms": {k: 1e3 * statistics.median(s[k] for s in stages) for k in stages[0]},
            "with_espirit_ms": 1e3 * sum(ours.timings.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--snr", type=float, default=30.0)
    parser.add_argument("--matrix", type=int, default=256)
    parser.add_argument("--no-bart", action="store_true")
    args = parser.parse_args()
    n = args.matrix
    report: dict = {"matrix": [n, n], "coils": COILS, "iterations": ITERATIONS, "lambda": LAM,
                    "mri_recon": mri_recon.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        report["exact"] = exactness(n, folder)
        print(f"exact: relative L2 {report['exact']['relative_l2']:.2e} (target 1e-5)", file=sys.stderr)
        scan, zero_filled, truth = undersampled(n, args.snr, folder)
        ours = mri_recon.reconstruct(scan, iterations=ITERATIONS, lam=LAM, device="cpu")
        quality = {"ours_nrmse": magnitude_nrmse(ours.image, truth), "coil_maps": ours.parameters["coil_maps"],
                   "samples_per_coil": scan.n_samples}
        if not args.no_bart:
            quality["bart_nrmse"] = magnitude_nrmse(bart_image(zero_filled, scan.n_samples, n, folder), truth)
            quality["ratio"] = quality["ours_nrmse"] / quality["bart_nrmse"]
            quality["met"] = quality["ratio"] <= 1.1
        report["quality"] = quality
        print(f"quality: NRMSE ours {quality['ours_nrmse']:.4f}, BART {quality.get('bart_nrmse', float('nan')):.4f}",
              file=sys.stderr)
        report["time"] = {"cpu": timing(scan, args.repeats, "cpu")}
        if gpu_available():
            report["time"]["gpu"] = timing(scan, args.repeats, "gpu")
        for name, entry in report["time"].items():
            print(f"time {name}: {entry['wall_ms']:.2f} ms whole call, {entry['iterations_ms']:.2f} ms CG "
                  f"({entry['method']}, {entry['device']})", file=sys.stderr)
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
