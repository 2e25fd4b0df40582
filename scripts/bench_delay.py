"""Gradient-delay estimation (RING) on simulated scans with known delays, against BART ``estdelay -R``.

For golden-angle and uniform radial 128 x 128, 8 coils, SNR 30 (mri_recon.simulate_scan, analytic k-space at
the delayed positions, nominal trajectory stored) and delays 0, (0.3, -0.2), (1.0, 0.5) samples: our estimate
and its time, BART's (default region and ``-r 3``) on the same data written as cfl files, and the NRMSE of
CG-SENSE without correction, corrected, corrected along the spokes only (BART ``traj -q`` without ``-O``) and
of the same scan simulated without delays. Then stack of stars, a kooshball, fewer spokes and lower SNR.

    PYTHONPATH=. python scripts/bench_delay.py [--bart /work/tools/bart] [--json docs/gradient_delay.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import mri_recon
from mri_recon.prep import delay, fit, ring
from mri_recon.sim.simulate import simulate_scan

DELAYS = [(0.0, 0.0), (0.3, -0.2), (1.0, 0.5)]


def write_cfl(stem: Path, array: np.ndarray) -> None:
    """BART's format: ``stem.hdr`` (dims, text) and ``stem.cfl`` (complex64, Fortran order)."""
    dims = list(array.shape) + [1] * (16 - array.ndim)
    stem.with_suffix(".hdr").write_text("# Dimensions\n" + " ".join(str(d) for d in dims) + "\n")
    np.asarray(array, dtype=np.complex64).ravel(order="F").tofile(stem.with_suffix(".cfl"))


def bart_estdelay(bart: str, scan, samples: int, extra: list[str]) -> tuple[list[float], float]:
    """BART ``estdelay -R`` of a 2D radial scan (or the kz = 0 partition of a stack of stars), as our
    parameters ``(Sxx, Syy, Sxy)`` (BART prints ``y:x:yx``), and its time."""
    k = np.asarray(scan.trajectory, dtype=np.float64)
    data = np.asarray(scan.kspace)
    if k.shape[1] == 3:  # stack of stars: the central partition
        keep = np.abs(k[:, 2]) < 1e-6
        k, data = k[keep, :2], data[:, keep]
    spokes = len(k) // samples
    traj = np.zeros((3, samples, spokes), dtype=np.complex64)
    traj[:2] = k.reshape(spokes, samples, 2).transpose(2, 1, 0)
    ksp = data.reshape(data.shape[0], spokes, samples).transpose(2, 1, 0)[None]  # (1, samples, spokes, C)
    with tempfile.TemporaryDirectory() as folder:
        write_cfl(Path(folder) / "t", traj)
        write_cfl(Path(folder) / "k", ksp)
        started = time.perf_counter()
        out = subprocess.run([bart, "estdelay", "-R", *extra, str(Path(folder) / "t"), str(Path(folder) / "k")],
                             capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - started
    y, x, yx = (float(v) for v in out.stdout.strip().splitlines()[-1].split(":"))
    return [x, y, yx], seconds


def nrmse(scan, **options) -> float:
    result = mri_recon.reconstruct(scan, device="cpu", **options)
    truth = scan.ground_truth
    return float(np.linalg.norm(result.image - truth) / np.linalg.norm(truth))


def error(estimate, truth) -> float:
    """Largest error of the parameters (Sxx, Syy, Sxy, ...) against the true diagonal delays."""
    plane = len(truth)
    want = delay.parameters_of(np.diag(np.asarray(truth, dtype=np.float64)))
    return float(np.max(np.abs(np.asarray(estimate[: len(want)]) - want))) if len(estimate) >= plane else np.nan


def radial_case(kind: str, truth, bart: str | None) -> dict:
    scan = simulate_scan((128, 128), kind, coils=8, snr=30, seed=3, gradient_delay=truth)
    clean = simulate_scan((128, 128), kind, coils=8, snr=30, seed=3)
    started = time.perf_counter()
    found = ring.estimate_delay(scan)
    ours_s = time.perf_counter() - started
    readouts = delay.radial_readouts(scan.trajectory, delay.readout_length(scan))
    along = scan.replace(trajectory=delay.shift_trajectory(scan.trajectory, readouts, found.tensor, transverse=False))
    row = {"kind": kind, "truth": list(truth), "ours": found.parameters, "ours_error": error(found.parameters, truth),
           "ours_s": ours_s, "nrmse_no_delay": nrmse(clean), "nrmse_uncorrected": nrmse(scan),
           "nrmse_corrected": nrmse(scan, gradient_delay="ring"), "nrmse_corrected_along_spokes": nrmse(along)}
    row["corrected_over_no_delay"] = row["nrmse_corrected"] / row["nrmse_no_delay"]
    if bart:
        for name, extra in (("bart", []), ("bart_r3", ["-r", "3"])):
            values, seconds = bart_estdelay(bart, scan, readouts.samples, extra)
            row.update({name: values, f"{name}_error": error(values, truth), f"{name}_s": seconds})
    return row


def other_cases(bart: str | None):
    """Rows, one at a time: fewer spokes, lower SNR, stack of stars, kooshball."""
    least, fit.MIN_SPOKES["radial"] = fit.MIN_SPOKES["radial"], 4  # below the threshold, to show why it is there
    for spokes in (6, 8, 12, 16, 32):
        worst = []
        for seed in range(5):
            scan = simulate_scan((128, 128), "golden", spokes=spokes, snr=3, seed=seed, gradient_delay=(1.0, 0.5))
            worst.append(error(ring.estimate_delay(scan).parameters, (1.0, 0.5)))
        yield {"case": f"golden {spokes} spokes, SNR 3, 5 seeds", "ours_worst_error": max(worst)}
    fit.MIN_SPOKES["radial"] = least
    least, fit.MIN_SPOKES["kooshball"] = fit.MIN_SPOKES["kooshball"], 4
    for spokes in (32, 64, 128):
        worst = []
        for seed in range(3):
            scan = simulate_scan((32, 32, 32), "kooshball", spokes=spokes, snr=10, seed=seed,
                                 gradient_delay=(1.0, 0.5, -0.4))
            worst.append(error(ring.estimate_delay(scan).parameters, (1.0, 0.5, -0.4)))
        yield {"case": f"kooshball 32^3 {spokes} spokes, SNR 10, 3 seeds", "ours_worst_error": max(worst)}
    fit.MIN_SPOKES["kooshball"] = least
    for snr in (10, 3):
        scan = simulate_scan((128, 128), "golden", snr=snr, seed=5, gradient_delay=(1.0, 0.5))
        found = ring.estimate_delay(scan)
        row = {"case": f"golden SNR {snr}", "ours": found.parameters, "ours_error": error(found.parameters, (1.0, 0.5))}
        if bart:
            values, _ = bart_estdelay(bart, scan, 256, ["-r", "3"])
            row.update(bart_r3=values, bart_r3_error=error(values, (1.0, 0.5)))
        yield row
    scan = simulate_scan((128, 128, 16), "stack-of-stars", snr=30, seed=6, gradient_delay=(0.3, -0.2))
    started = time.perf_counter()
    found = ring.estimate_delay(scan)
    row = {"case": "stack of stars 128x128x16", "ours": found.parameters,
           "ours_error": error(found.parameters, (0.3, -0.2)), "ours_s": time.perf_counter() - started}
    if bart:
        values, _ = bart_estdelay(bart, scan, 256, [])
        row.update(bart=values, bart_error=error(values, (0.3, -0.2)))
    yield row
    for truth in ((0.3, -0.2, 0.1), (1.0, 0.5, -0.4)):
        scan = simulate_scan((64, 64, 64), "kooshball", snr=30, seed=7, gradient_delay=truth)
        started = time.perf_counter()
        found = ring.estimate_delay(scan, max_spokes=1024)
        yield {"case": f"kooshball 64^3 {scan.attrs['spokes']} spokes, delay {truth}", "ours": found.parameters,
               "ours_error": error(found.parameters, truth), "ours_s": time.perf_counter() - started,
               "nrmse_uncorrected": nrmse(scan, iterations=10),
               "nrmse_corrected": nrmse(scan, iterations=10, gradient_delay="ring"),
               "nrmse_no_delay": nrmse(simulate_scan((64, 64, 64), "kooshball", snr=30, seed=7), iterations=10)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bart", default=shutil.which("bart") or "/work/tools/bart")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--part", choices=["all", "radial", "other"], default="all",
                        help="radial: the 2D radial table; other: spokes, noise, stack of stars, kooshball")
    args = parser.parse_args()
    bart = args.bart if Path(args.bart).exists() else None
    rows = []
    for kind in ("golden", "radial") if args.part != "other" else ():
        for truth in DELAYS:
            rows.append(radial_case(kind, truth, bart))
            print(json.dumps({k: (np.round(v, 4).tolist() if isinstance(v, (list, float)) else v)
                              for k, v in rows[-1].items()}), flush=True)
    if args.part != "radial":
        for row in other_cases(bart):
            rows.append(row)
            print(json.dumps({k: (np.round(v, 4).tolist() if isinstance(v, (list, float)) else v)
                              for k, v in row.items()}), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"bart": bart, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
