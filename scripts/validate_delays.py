"""Gradient delays on BART's own data, beside BART's own estimates: ``bart traj -q y:x:yx -O`` makes the
delayed trajectory, ``bart phantom -k -s COILS -t`` the k-space, and each case is estimated by BART's
``estdelay`` (its default, Block and Uecker's method; ``-R``, RING; ``-R -B``, RING with a phase per pair)
and by ours (``ring``, ``opposed`` and what ``auto`` applies), as it is and with a random phase per spoke
(the effect of B0 drift and eddy currents on a real scan). Errors are the largest parameter error in samples.

    python scripts/validate_delays.py [--bart bart] [--json docs/results/validate_delays.json] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from mri_recon.io.cfl import read_cfl, write_cfl
from mri_recon.io.cfl_scan import load_cfl_scans
from mri_recon.prep.gradient_delay import ESTIMATORS, correct_gradient_delay, estimator

CASES = [
    # (name, traj options, delays y:x:yx as BART takes them, coils: at most 8 in BART 0.8's phantom)
    ("full circle, 69 spokes", ["-x", "384", "-y", "69", "-D"], (-0.617, -0.648, 0.05), 8),
    ("full circle, 69 spokes, no delay", ["-x", "384", "-y", "69", "-D"], (0.0, 0.0, 0.0), 8),
    ("full circle, 29 spokes", ["-x", "384", "-y", "29", "-D"], (1.2, -0.9, 0.3), 8),
    ("half circle, 69 spokes", ["-r", "-x", "384", "-y", "69"], (-0.617, -0.648, 0.05), 8),
    ("golden angle, 400 spokes", ["-x", "256", "-y", "400", "-G"], (1.5, -1.4, -0.4), 8),
    ("golden angle, 40 spokes", ["-x", "256", "-y", "40", "-G"], (0.4, 0.9, 0.2), 8),
]
BART_METHODS = {"bart estdelay": [], "bart estdelay -R": ["-R"]}  # 0.8 has no -B


def run(bart: str, *args: str, cwd: Path) -> str:
    done = subprocess.run([bart, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def bart_case(bart: str, folder: Path, options: list[str], q: tuple[float, ...], coils: int) -> None:
    """``traj`` (nominal), ``ksp`` (the phantom at the delayed positions) in ``folder``."""
    run(bart, "traj", *options, "traj", cwd=folder)
    run(bart, "traj", *options, "-q", ":".join(f"{v:g}" for v in q), "-O", "trajd", cwd=folder)
    run(bart, "phantom", "-k", "-s", str(coils), "-t", "trajd", "ksp", cwd=folder)


def with_spoke_phase(folder: Path, seed: int, snr: float = 20.0) -> None:
    """``kspp``: ``ksp`` with one random phase per spoke and complex noise (``snr``: RMS of the data over the
    noise's standard deviation)."""
    rng = np.random.default_rng(seed)
    ksp = np.asarray(read_cfl(folder / "ksp"))
    shape = [1] * ksp.ndim
    shape[2] = ksp.shape[2]
    phased = ksp * np.exp(2j * np.pi * rng.random(ksp.shape[2])).reshape(shape)
    sigma = np.sqrt(np.mean(np.abs(ksp) ** 2)) / snr / np.sqrt(2)
    noisy = phased + sigma * (rng.standard_normal(ksp.shape) + 1j * rng.standard_normal(ksp.shape))
    write_cfl(folder / "kspp", noisy.astype(np.complex64))


def ours(folder: Path, data: str, samples: int) -> dict[str, list[float] | str]:
    """Our estimates as BART's y:x:yx, and what auto applied."""
    [(_, scan)] = load_cfl_scans(folder / data, trajectory=folder / "traj", matrix=(samples, samples))
    out: dict[str, list[float] | str] = {}
    for name in ESTIMATORS:
        try:
            x, y, xy = estimator(name)(scan).parameters
            out[f"ours {name}"] = [y, x, xy]
        except Exception as exc:  # noqa: BLE001 - a refusal is a row of the table
            out[f"ours {name}"] = f"refused: {str(exc)[:60]}"
    _, record = correct_gradient_delay(scan, "auto")
    if "gradient_delay_samples" in record:
        x, y, xy = record["gradient_delay_samples"]
        out["ours auto"] = [y, x, xy]
    else:
        out["ours auto"] = "not applied"
    return out


def case_rows(bart: str, name: str, options: list[str], q: tuple[float, ...], coils: int, seed: int) -> list[dict]:
    samples = int(options[options.index("-x") + 1])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bart_case(bart, folder, options, q, coils)
        with_spoke_phase(folder, seed)
        for data, label in (("ksp", "as made"), ("kspp", "phase per spoke, SNR 20")):
            row = {"case": name, "data": label, "truth": list(q), "coils": coils}
            for method, extra in BART_METHODS.items():
                try:
                    row[method] = [float(v) for v in run(bart, "estdelay", *extra, "traj", data, cwd=folder).split(":")]
                except subprocess.CalledProcessError as exc:
                    row[method] = f"failed: {exc.stderr.strip()[:60]}"
            row.update(ours(folder, data, samples))
            rows.append(row)
    return rows


def error(values, truth) -> float | None:
    return None if isinstance(values, str) else float(np.max(np.abs(np.subtract(values, truth))))


def markdown(rows: list[dict]) -> str:
    methods = [*BART_METHODS, *(f"ours {m}" for m in ESTIMATORS), "ours auto"]
    lines = ["| case | data | truth y:x:yx | " + " | ".join(methods) + " |",
             "|---|---|---|" + "---|" * len(methods)]
    for row in rows:
        cells = []
        for m in methods:
            e = error(row[m], row["truth"])
            cells.append(row[m] if e is None else f"{e:.4f}")
        lines.append(f"| {row['case']}, {row['coils']} coils | {row['data']} | "
                     f"{':'.join(f'{v:g}' for v in row['truth'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bart", default="bart")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--markdown", action="store_true", help="print the table for docs/validation.md")
    args = parser.parse_args()
    bart = shutil.which(args.bart)
    if bart is None:
        raise SystemExit(f"{args.bart}: BART is not installed (Debian: apt-get install bart)")
    version = run(bart, "version", cwd=Path.cwd())
    rows = [r for i, case in enumerate(CASES) for r in case_rows(bart, *case, seed=i)]
    if args.json:
        args.json.write_text(json.dumps({"bart": version, "rows": rows}, indent=2) + "\n")
    print(f"BART {version}; largest parameter error, samples")
    print(markdown(rows))


if __name__ == "__main__":
    main()
