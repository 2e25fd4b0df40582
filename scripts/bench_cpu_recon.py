"""CPU benchmark of CG-SENSE against BART ``pics`` on the same data.

Problem: 128 x 128 Shepp-Logan phantom (analytic multi-coil k-space, no inverse crime), 2D radial
201 spokes x 256 samples (2x readout oversampling: [-64, 64) at 0.5 cycles/FOV), 8 coils with the
phantom's own coil maps, ramp density compensation, 30 CG iterations, lam = 1e-3 (relative to the
normal operator's peak).
Ours also runs without density weights: the same least-squares problem as BART's (with noise, ``--snr``,
density weights amplify high-frequency noise, so that is the fair NRMSE comparison).

Ours is timed in-process after one warm-up run (FINUFFT and FFT set-up): median of ``--repeats`` runs of
:func:`mri_recon.reconstruct` and of each stage; runs of ours and of BART alternate, so that both see
the same load on a shared machine. BART is timed as the ``bart pics`` command (process
start and .cfl I/O included; a trivial ``bart`` command is timed too, to show that overhead), same data, same
coil maps, 30 iterations, l2 regularization with the comparable weight ``lam * M / prod(matrix)`` (BART's
operator carries a 1/sqrt(prod(matrix)) factor and uses no density weights). NRMSE against the phantom is
reported raw and after the best complex scale (BART's images differ from ours by its operator's scale).
The ceiling of the CG stage is the time of its FFTs alone: one padded forward and inverse 2x-grid FFT per
coil per iteration.

``--problem 3d64``: 64^3, 3D kooshball of 1,608 spokes x 128 samples (205,952 per coil), 4 coils, the same
settings (issue 12: ``method="auto"`` on the CPU, FINUFFT, no slower than BART ``pics``).

Usage: ``python scripts/bench_cpu_recon.py [OUT.json] [--repeats 7] [--snr S] [--no-bart] [--problem 2d|3d64]``;
JSON goes to OUT.json, or to stdout without it; a summary goes to stderr.
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
import scipy

import mri_recon
from mri_recon.operators import psf
from mri_recon.operators.normal.toeplitz import kernel_spectrum, toeplitz_apply
from mri_recon.pipeline import reconstruct
from mri_recon.prep import dcf
from mri_recon.scan import Scan
from mri_recon.sim import phantom, trajectories

PROBLEMS = {
    "2d": {"matrix": (128, 128), "spokes": 201, "samples": 256, "coils": 8},
    # issue 12's CPU case: 3D kooshball at its Nyquist spoke count pi/2 (N/2)^2, 2N samples per spoke
    "3d64": {"matrix": (64, 64, 64), "spokes": 1608, "samples": 128, "coils": 4},
}
MATRIX = (128, 128)
SPOKES = 201
SAMPLES = 256
COILS = 8
ITERATIONS = 30
LAM = 1e-3


def use_problem(name: str) -> None:
    """Set the module's problem constants (``--problem``)."""
    global MATRIX, SPOKES, SAMPLES, COILS  # noqa: PLW0603 - the script's configuration
    chosen = PROBLEMS[name]
    MATRIX, SPOKES, SAMPLES, COILS = chosen["matrix"], chosen["spokes"], chosen["samples"], chosen["coils"]


def problem(snr: float | None, seed: int = 0) -> Scan:
    """The benchmark scan, with the rasterized phantom as ground truth."""
    if len(MATRIX) == 3:
        k = trajectories.kooshball(MATRIX, SPOKES, SAMPLES)
    else:
        k = trajectories.radial(MATRIX, SPOKES, SAMPLES, oversampling=2.0)
    kspace = phantom.coil_kspace(k, MATRIX, COILS)
    if snr is not None:
        kspace, _ = phantom.add_noise(kspace, snr, np.random.default_rng(seed))
    return Scan(kspace=kspace, trajectory=k, matrix=MATRIX, weights=dcf.ramp(k, MATRIX),
                coil_maps=phantom.coil_maps(MATRIX, COILS), ground_truth=phantom.shepp_logan_image(MATRIX))


def nrmse(image: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Relative L2 error, raw and after the best complex scale ``s = <x, t> / <x, x>``."""
    image = np.asarray(image, dtype=np.complex128)
    truth = np.asarray(truth, dtype=np.complex128)
    scale = np.vdot(image, truth) / np.vdot(image, image)
    norm = np.linalg.norm(truth)
    return {"raw": float(np.linalg.norm(image - truth) / norm),
            "scaled": float(np.linalg.norm(scale * image - truth) / norm),
            "best_scale_abs": float(abs(scale))}


def median(values: list[float]) -> float:
    return float(statistics.median(values))


SETTINGS = {"iterations": ITERATIONS, "tol": 0.0, "lam": LAM, "device": "cpu", "progress": False}


def ours_once(scan: Scan):
    """One timed reconstruction: (seconds, Result)."""
    start = time.perf_counter()
    result = reconstruct(scan, **SETTINGS)
    return time.perf_counter() - start, result


def fft_floor(scan: Scan, repeats: int) -> float:
    """Seconds of the CG stage's FFTs alone: ITERATIONS padded 2x-grid FFT pairs over all coils."""
    x = (np.random.default_rng(1).standard_normal((COILS, *MATRIX)) * (1 + 1j)).astype(np.complex64)
    spectrum = kernel_spectrum(psf(scan.trajectory, MATRIX, scan.weights, device="cpu"))
    times = []
    for _ in range(max(5, repeats)):
        start = time.perf_counter()
        toeplitz_apply(x, spectrum)
        times.append(time.perf_counter() - start)
    return ITERATIONS * median(times)


def summarize_ours(times: list[float], results: list, scan: Scan, floor: float) -> dict:
    stages = [r.timings for r in results]
    iterations = median([s["iterations"] for s in stages])
    last = results[-1]
    return {
        "seconds_median": median(times),
        "seconds_min": min(times),
        "seconds_all": times,
        "stages_median": {name: median([s[name] for s in stages]) for name in stages[0]},
        "iterations": last.iterations,
        "final_residual": last.residuals[-1],
        "combine": last.combine,
        "nrmse": nrmse(last.image, scan.ground_truth),
        "cg_fft_floor_seconds": floor,
        "cg_stage_over_fft_floor": iterations / floor,
    }


def _write_cfl(path: Path, array: np.ndarray) -> None:
    array = np.asarray(array, dtype=np.complex64)
    path.with_suffix(".hdr").write_text("# Dimensions\n" + " ".join(str(n) for n in array.shape) + "\n")
    array.ravel(order="F").tofile(path.with_suffix(".cfl"))


def _read_cfl(path: Path) -> np.ndarray:
    dims = [int(v) for v in path.with_suffix(".hdr").read_text().splitlines()[1].split()]
    data = np.fromfile(path.with_suffix(".cfl"), dtype=np.complex64, count=int(np.prod(dims)))
    return data.reshape(dims, order="F")


def _run(command: list[str], folder: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    return seconds


class Bart:
    """``bart pics`` on the benchmark scan, its .cfl inputs written once to a temporary folder."""

    def __init__(self, scan: Scan, folder: str) -> None:
        self.binary = shutil.which("bart")
        self.folder = folder
        self.scan = scan
        self.lam = LAM * scan.n_samples / int(np.prod(MATRIX))
        root = Path(folder)
        dim = len(MATRIX)
        k = scan.trajectory.reshape(SPOKES, SAMPLES, dim)
        traj = np.zeros((3, SAMPLES, SPOKES), dtype=np.complex64)
        for axis in range(dim):
            traj[axis] = k[:, :, axis].T
        _write_cfl(root / "traj", traj)
        _write_cfl(root / "ksp", scan.kspace.reshape(COILS, SPOKES, SAMPLES).transpose(2, 1, 0)[None])
        maps = np.moveaxis(scan.coil_maps, 0, -1)
        _write_cfl(root / "sens", maps[:, :, None, :] if dim == 2 else maps)
        self.command = [self.binary, "pics", "-S", "-l2", "-r", f"{self.lam:.6g}", "-i", str(ITERATIONS),
                        "-t", "traj", "ksp", "sens", "out"]

    def once(self) -> float:
        return _run(self.command, self.folder)

    def summary(self, times: list[float], repeats: int) -> dict:
        version = subprocess.run([self.binary, "version"], capture_output=True, text=True,
                                 check=False).stdout.strip()
        startup = median([_run([self.binary, "ones", "2", "1", "1", "one"], self.folder)
                          for _ in range(repeats)])
        image = _read_cfl(Path(self.folder) / "out").reshape(MATRIX)
        return {"available": True, "version": version, "command": " ".join(self.command), "lambda": self.lam,
                "seconds_median": median(times), "seconds_min": min(times), "seconds_all": times,
                "process_startup_seconds": startup,
                "threads": os.environ.get("OMP_NUM_THREADS", f"default ({os.cpu_count()} cores)"),
                "nrmse": nrmse(image, self.scan.ground_truth)}


def run_all(scan: Scan, repeats: int, with_bart: bool) -> tuple[dict, dict, dict]:
    """Warm everything up, then alternate the runs so that all see the same machine load.

    Ours runs twice per round: with the scan's density weights (the default pipeline) and without weights,
    which is the least-squares problem ``bart pics`` solves (same data term, same relative lambda).
    """
    if with_bart and shutil.which("bart") is None:
        with_bart = False
        peer = {"available": False, "reason": "bart not found on PATH (Debian: apt-get install bart)"}
    elif not with_bart:
        peer = {"available": False, "reason": "skipped (--no-bart)"}
    unweighted = scan.replace(weights=None)
    with tempfile.TemporaryDirectory(prefix="bench_bart_") as folder:
        bart = Bart(scan, folder) if with_bart else None
        ours_once(scan)  # warm-up: FINUFFT and FFT set-up
        ours_once(unweighted)
        if bart is not None:
            bart.once()  # warm-up: page cache, shared libraries
        runs: dict[str, tuple[list, list]] = {"weighted": ([], []), "unweighted": ([], [])}
        bart_times = []
        for _ in range(repeats):
            for name, case in (("weighted", scan), ("unweighted", unweighted)):
                seconds, result = ours_once(case)
                runs[name][0].append(seconds)
                runs[name][1].append(result)
            if bart is not None:
                bart_times.append(bart.once())
        floor = fft_floor(scan, repeats)
        ours = summarize_ours(*runs["weighted"], scan, floor)
        same = summarize_ours(*runs["unweighted"], scan, floor)
        if bart is not None:
            peer = bart.summary(bart_times, repeats)
    return ours, same, peer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", default=None, help="JSON file (default: stdout)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--snr", type=float, default=None, help="add noise at this SNR (default: none)")
    parser.add_argument("--no-bart", action="store_true", help="skip the BART peer")
    parser.add_argument("--problem", choices=sorted(PROBLEMS), default="2d")
    args = parser.parse_args(argv)
    use_problem(args.problem)

    scan = problem(args.snr)
    ours, same, peer = run_all(scan, args.repeats, with_bart=not args.no_bart)
    report = {
        "benchmark": "cpu_cg_sense",
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpu_count": os.cpu_count(), "python": platform.python_version()},
        "versions": {"mri_recon": mri_recon.__version__, "numpy": np.__version__, "scipy": scipy.__version__,
                     "finufft": _version("finufft")},
        "problem": {"name": args.problem, "matrix": list(MATRIX), "spokes": SPOKES, "samples_per_spoke": SAMPLES,
                    "readout_spacing_cycles_per_fov": 0.5, "coils": COILS, "iterations": ITERATIONS,
                    "lam": LAM, "snr": args.snr, "weights": "dcf.ramp", "phantom": "shepp_logan_image",
                    "kspace": "phantom.coil_kspace (analytic)", "repeats": args.repeats},
        "ours": ours,
        "ours_without_weights": same,
        "bart": peer,
    }
    if peer.get("available"):
        report["ours_over_bart_time"] = ours["seconds_median"] / peer["seconds_median"]
        report["target"] = {
            "time_within_2x_of_bart": report["ours_over_bart_time"] <= 2.0,
            "nrmse_scaled_not_worse_weighted": ours["nrmse"]["scaled"] <= peer["nrmse"]["scaled"],
            "nrmse_scaled_not_worse_same_problem": same["nrmse"]["scaled"] <= peer["nrmse"]["scaled"],
        }
    text = json.dumps(report, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    else:
        print(text)
    line = (f"ours {ours['seconds_median']:.3f} s (CG {ours['stages_median']['iterations']:.3f} s, FFT floor "
            f"{ours['cg_fft_floor_seconds']:.3f} s), NRMSE {ours['nrmse']['raw']:.4f} raw / "
            f"{ours['nrmse']['scaled']:.4f} scaled; without weights {same['seconds_median']:.3f} s, NRMSE "
            f"{same['nrmse']['scaled']:.4f} scaled")
    if peer.get("available"):
        line += (f"; bart pics {peer['seconds_median']:.3f} s (process start {peer['process_startup_seconds']:.3f}"
                 f" s), NRMSE {peer['nrmse']['scaled']:.4f} scaled; ratio {report['ours_over_bart_time']:.2f}")
    print(line, file=sys.stderr)
    return 0


def _version(name: str) -> str:
    try:
        return str(__import__(name).__version__)
    except Exception:  # noqa: BLE001 - report, do not fail
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
