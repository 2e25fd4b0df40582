"""The whole CLI process against the whole ``bart pics`` process on the CPU, on the same files (issue 45).

Data made by BART (``bench_cs_bart.make_data``: radial S spokes x 256 samples scaled into a 128 grid, the
analytic 8-coil Shepp-Logan k-space, BART's maps divided by their root-sum-of-squares peak, the rasterized
phantom as the truth). Two problems, each solved by both programs from the same ``.cfl`` files:

- ``cg``: CG-SENSE, 201 spokes (Nyquist), 30 iterations, l2 weight ``lambda`` relative (ours) and its BART
  equivalent ``lambda * M / N`` (BART's NUFFT is ``F / sqrt(N)``; the maps peak at 1): ``bart pics -S -l2 -r``
  against ``mri-recon reconstruct ksp.cfl --trajectory traj.cfl --sensitivities sensn.cfl``;
- ``tv``: total variation, 40 spokes, BART ``pics -S -R T:3:0:1e-3 -i 100`` against ``--regularizer tv
  --lambda 1e-3`` (the best weight of each in ``bench_cs_bart``).

Each run is a process timed whole (start, imports, reading, the solve, writing), as a user meets it; runs of
the two alternate, after one warm-up of each (Python's bytecode cache written, the files in the page cache).
With ``--base PYTHON`` a second install of ours (an earlier tree) joins the alternation as ``base``, on the
same files, and the paired differences of ours and base are reported.
The child gets the environment of a user's shell: ``PYTHONDONTWRITEBYTECODE`` removed. NRMSE against the
truth after the best complex scale. Medians and minima of ``--repeats`` runs, with the load average.

Usage: python scripts/bench_cpu_process.py [OUT.json] [--repeats 5] [--python PATH] [--base PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_cs_bart import make_data, nrmse, read_cfl
from benchtools import child_env, write_report

import mri_recon

PROBLEMS = {
    "cg": {
        "spokes": 201,
        "ours": ["--iterations", "30", "--lambda", "1e-3", "--tol", "0"],
        "bart": ["-l2", "-r", "{lam_b}", "-i", "30"],
    },
    "tv": {
        "spokes": 40,
        "ours": ["--regularizer", "tv", "--lambda", "1e-3"],
        "bart": ["-R", "T:3:0:1e-3", "-i", "100"],
    },
}


def timed(command: list[str], folder: str, env: dict[str, str]) -> float:
    """Wall seconds of ``command`` run to completion in ``folder`` (it must succeed)."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()[-300:]}")
    return seconds


def commands(name: str, samples: int, python: str) -> tuple[list[str], list[str]]:
    """Our command line (run by the interpreter ``python``) and BART's for problem ``name`` with ``samples`` per
    coil."""
    problem = PROBLEMS[name]
    lam_b = f"{1e-3 * samples / 128**2:.6g}"
    ours = [
        python,
        "-m",
        "mri_recon",
        "reconstruct",
        "ksp.cfl",
        "--trajectory",
        "traj.cfl",
        "--sensitivities",
        "sensn.cfl",
        "-o",
        "ours.cfl",
        "--device",
        "cpu",
        "--quiet",
        *problem["ours"],
    ]
    theirs = [
        "bart",
        "pics",
        "-S",
        *(arg.format(lam_b=lam_b) for arg in problem["bart"]),
        "-t",
        "traj",
        "ksp",
        "sensn",
        "theirs",
    ]
    return ours, theirs


def environment(python: str) -> dict[str, str]:
    """The child's environment: a user's shell (``PYTHONDONTWRITEBYTECODE`` removed), with this checkout first on
    ``PYTHONPATH`` when ``python`` is this interpreter, and without ``PYTHONPATH`` for another install's, which
    then runs the package installed there."""
    env = child_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if python != sys.executable:
        env.pop("PYTHONPATH", None)
    return env


def installed(python: str) -> str:
    """Where ``python`` (run as :func:`environment` runs it, from a folder outside the checkout, as the timed
    processes are) imports ``mri_recon`` from, and its version."""
    code = "import mri_recon; print(mri_recon.__file__, mri_recon.__version__)"
    return subprocess.run([python, "-c", code], env=environment(python), cwd=tempfile.gettempdir(),
                          capture_output=True, text=True, check=True).stdout.strip()


def compare(name: str, repeats: int, python: str, base: str | None = None) -> dict:
    """Both processes on problem ``name`` (and ``base``'s install of ours when given), alternating, ``repeats``
    times each after one warm-up."""
    with tempfile.TemporaryDirectory() as folder:
        scan = make_data(PROBLEMS[name]["spokes"], folder)
        ours, theirs = commands(name, scan.kspace.shape[1], python)
        runs = {"ours": (ours, environment(python)), "bart": (theirs, environment(python))}
        if base is not None:
            earlier = commands(name, scan.kspace.shape[1], base)[0]
            runs["base"] = ([*earlier[:earlier.index("-o") + 1], "base.cfl", *earlier[earlier.index("-o") + 2:]],
                            environment(base))
        for command, env in runs.values():
            timed(command, folder, env)
        times: dict[str, list[float]] = {who: [] for who in runs}
        loads = []
        for _ in range(repeats):
            for who, (command, env) in runs.items():
                times[who].append(timed(command, folder, env))
            loads.append(os.getloadavg()[0])
        truth = scan.ground_truth
        outputs = {"ours": "ours", "bart": "theirs", "base": "base"}
        errors = {who: nrmse(read_cfl(Path(folder) / outputs[who]).reshape(truth.shape), truth) for who in runs}
    row = {
        who: {"median_s": statistics.median(t), "min_s": min(t), "all_s": t, "nrmse": errors[who]}
        for who, t in times.items()
    }
    return {
        "commands": {"ours": " ".join(ours[1:]), "bart": " ".join(theirs)},
        **row,
        "ratio_median": row["ours"]["median_s"] / row["bart"]["median_s"],
        **({"base_ratio_median": row["base"]["median_s"] / row["bart"]["median_s"],
            "ours_minus_base_paired_median_s": statistics.median(
                [a - b for a, b in zip(times["ours"], times["base"])])} if "base" in row else {}),
        "load_average": loads,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter of the mri-recon install to time (default: this one); a plain "
                             "'pip install .' has no editable-install import hook, as a user's")
    parser.add_argument("--base", default=None,
                        help="the interpreter of a second mri-recon install (an earlier tree), timed in the same "
                             "alternation as 'base'")
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    args = parser.parse_args()
    bart_version = subprocess.run(["bart", "version"], capture_output=True, text=True, check=True).stdout.strip()
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.platform(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "mri_recon": mri_recon.__version__,
        "bart": bart_version,
        "repeats": args.repeats,
        "python_of_ours": args.python,
        "mri_recon_of_ours": installed(args.python),
        **({"mri_recon_of_base": installed(args.base)} if args.base else {}),
        "problems": {name: compare(name, args.repeats, args.python, args.base) for name in args.problems},
    }
    for name, row in report["problems"].items():
        print(
            f"{name}: ours {row['ours']['median_s']:.3f} s (NRMSE {row['ours']['nrmse']:.4f}), BART "
            f"{row['bart']['median_s']:.3f} s (NRMSE {row['bart']['nrmse']:.4f}), ratio {row['ratio_median']:.2f}",
            file=sys.stderr,
        )
        if "base" in row:
            print(f"{name}: base {row['base']['median_s']:.3f} s (NRMSE {row['base']['nrmse']:.4f}), ratio "
                  f"{row['base_ratio_median']:.2f}; ours - base, paired median "
                  f"{row['ours_minus_base_paired_median_s'] * 1e3:+.1f} ms", file=sys.stderr)
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
