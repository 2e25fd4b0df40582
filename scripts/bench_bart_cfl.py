"""A BART pipeline's files reconstructed by mri-recon and by ``bart pics`` at the same l2 regularization.

    python scripts/bench_bart_cfl.py [--bart /work/tools/bart] [--out docs/results/bench_bart_cfl.json]

BART makes the scan (``bart traj -r -x 256 -y 64``, scaled by ``bart scale 0.5`` into the 128 grid or not,
``bart phantom -k -s 8 -t traj ksp``, ``bart phantom -S 8 sens``); ``mri-recon reconstruct ksp.cfl --trajectory
traj.cfl --sensitivities sens.cfl -o x.cfl`` and ``bart pics -S -l2 -r LAMBDA -i ITER -t traj ksp sens``
reconstruct it, and the two images are compared by the NRMSE
after the best complex scale, ``min_s ||b - s a|| / ||b||``, computed here and by ``bart nrmse -s`` on mri-recon's
own ``x.cfl`` (which also checks that BART reads it; ``bart show -m`` prints its dimensions).

The regularization: BART's NUFFT is ``F / sqrt(N)`` (N = voxels: ``bart nufft -s`` equals our exact F times
``1 / sqrt(N)``), so ``pics -l2 -r lam_b`` solves ``(S^H F^H F S / N + lam_b) x = ...``; mri-recon's ``--lambda``
is relative to ``max_n sum_c |S_c(n)|^2 * M`` (M samples, no density weights), hence
``--lambda = lam_b * N / (M * max sum_c |S_c|^2)``. Both scale their data, which scales the image only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mri_recon.io.cfl import read_cfl  # noqa: E402


def run(command: list[str], cwd: Path) -> str:
    """The command's standard output (it must succeed)."""
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True).stdout


def nrmse_scaled(a: np.ndarray, b: np.ndarray) -> float:
    """``min_s ||b - s a|| / ||b||`` over complex s."""
    a, b = a.astype(np.complex128).ravel(), b.astype(np.complex128).ravel()
    s = np.vdot(a, b) / np.vdot(a, a)
    return float(np.linalg.norm(b - s * a) / np.linalg.norm(b))


def image(path: Path) -> np.ndarray:
    return np.asarray(read_cfl(path)).reshape(read_cfl(path).shape[:2], order="F")


def case(bart: str, folder: Path, lam_rel: float, iterations: int, matrix: int, ours_factor: float = 1.0) -> dict:
    """``bart pics`` at the BART lambda of ``lam_rel`` against mri-recon at ``ours_factor * lam_rel``."""
    sens = np.asarray(read_cfl(folder / "sens"))
    ksp_dims = read_cfl(folder / "ksp").shape
    samples = ksp_dims[1] * ksp_dims[2]
    peak = float(np.max(np.sum(np.abs(sens.astype(np.complex128)) ** 2, axis=3)))
    lam_b = float(f"{lam_rel * samples * peak / matrix**2:.6g}")
    tag = f"{lam_rel:g}_{iterations}"
    started = time.perf_counter()
    run([bart, "pics", "-S", "-l2", "-r", repr(lam_b), "-i", str(iterations), "-t", "traj", "ksp", "sens",
         f"pics_{tag}"], folder)
    bart_s = time.perf_counter() - started
    started = time.perf_counter()
    run([sys.executable, "-m", "mri_recon", "reconstruct", "ksp.cfl", "--trajectory", "traj.cfl", "--sensitivities",
         "sens.cfl", "-o", f"x_{tag}.cfl", "--lambda", repr(lam_b * matrix**2 / (samples * peak) * ours_factor),
         "--iterations", str(iterations), "--tol", "0",
         "--device", "cpu", "-q"], folder)
    ours_s = time.perf_counter() - started
    ours, theirs = image(folder / f"x_{tag}"), image(folder / f"pics_{tag}")
    said = run([bart, "nrmse", "-s", f"pics_{tag}", f"x_{tag}"], folder).strip()
    shown = run([bart, "show", "-m", f"x_{tag}"], folder).split("AoD:")[-1].split()
    return {"trajectory": " ".join(run([bart, "show", "-m", "traj"], folder).split("AoD:")[-1].split()[:3]),
            "bart_lambda": lam_b, "mri_recon_lambda": lam_rel * ours_factor, "iterations": iterations,
            "nrmse_scaled": nrmse_scaled(ours, theirs), "bart_nrmse_s": float(said.split()[0]),
            "bart_show_dims": [int(v) for v in shown], "bart_pics_s": bart_s, "mri_recon_s": ours_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bart", default="/work/tools/bart")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/results/bench_bart_cfl.json")
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args()
    matrix = 128
    pipelines = {"bart traj -r -x 256 -y 64; bart scale 0.5": True, "bart traj -r -x 256 -y 64": False}
    record = {"bart": run([args.bart, "version"], Path(".")).strip(), "matrix": [matrix, matrix], "cases": []}
    for name, inside in pipelines.items():
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            run([args.bart, "traj", "-r", "-x", str(2 * matrix), "-y", "64", "traj"], folder)
            if inside:  # 2x readout oversampling inside the grid: |k| <= matrix / 2
                run([args.bart, "scale", "0.5", "traj", "traj"], folder)
            run([args.bart, "phantom", "-k", "-s", "8", "-t", "traj", "ksp"], folder)
            run([args.bart, "phantom", "-S", "8", "-x", str(matrix), "sens"], folder)
            run([args.bart, "phantom", "-x", str(matrix), "rho"], folder)  # BART's NUFFT against its DFT
            run([args.bart, "nufft", "traj", "rho", "k_nufft"], folder)
            run([args.bart, "nufft", "-s", "traj", "rho", "k_dft"], folder)
            nufft_error = float(run([args.bart, "nrmse", "k_dft", "k_nufft"], folder).split()[0])
            cases = [(0.1, args.iterations, 1.0)]
            if inside:
                cases += [(0.01, args.iterations, 1.0), (0.1, 30, 1.0), (0.1, args.iterations, 0.5),
                          (0.1, args.iterations, 2.0)]
            for lam, iterations, factor in cases:
                row = case(args.bart, folder, lam, iterations, matrix, factor)
                record["cases"].append({"pipeline": name, "bart_nufft_vs_dft_nrmse": nufft_error, **row})
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print("| pipeline | pics -r | mri-recon --lambda | iterations | NRMSE (complex scale) | bart nrmse -s "
          "| BART nufft vs DFT | pics s | mri-recon s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in record["cases"]:
        print(f"| `{r['pipeline']}` | {r['bart_lambda']:.4g} | {r['mri_recon_lambda']:g} | {r['iterations']} "
              f"| {r['nrmse_scaled']:.2e} | {r['bart_nrmse_s']:.2e} | {r['bart_nufft_vs_dft_nrmse']:.2e} "
              f"| {r['bart_pics_s']:.1f} | {r['mri_recon_s']:.1f} |")

if __name__ == "__main__":
    main()
