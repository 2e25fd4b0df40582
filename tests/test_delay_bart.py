"""Gradient delays on BART's own data beside BART's own estimate (skipped where the ``bart`` command is not
installed; Debian: ``apt-get install bart``): ``bart traj -q y:x:yx -O`` and ``bart phantom -k``, a random
phase per spoke, our ``auto`` against the truth and our opposed-spoke estimate against ``bart estdelay``'s
(the same method, the same bias on anisotropic delays)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from mri_recon.io.cfl import read_cfl
from mri_recon.io.cfl_scan import load_cfl_scans
from mri_recon.prep.adaptive import estimate_delay as opposed_estimate
from mri_recon.prep.gradient_delay import correct_gradient_delay

BART = shutil.which("bart")
pytestmark = pytest.mark.skipif(BART is None, reason="needs BART's command line (apt-get install bart)")


def bart(folder, *args: str) -> str:
    return subprocess.run([BART, *args], cwd=folder, capture_output=True, text=True, check=True).stdout.strip()


def test_bart_made_delays_are_found_and_read_in_barts_order(tmp_path, rng):
    q = (float(rng.uniform(-1, 1)), float(rng.uniform(-1, 1)), float(rng.uniform(-0.2, 0.2)))
    options = ["-x", "256", "-y", "69", "-D"]
    bart(tmp_path, "traj", *options, "traj")
    bart(tmp_path, "traj", *options, "-q", ":".join(f"{v:.4f}" for v in q), "-O", "trajd")
    bart(tmp_path, "phantom", "-k", "-s", "8", "-t", "trajd", "ksp")
    theirs = [float(v) for v in bart(tmp_path, "estdelay", "traj", "ksp").split(":")]
    [(_, scan)] = load_cfl_scans(tmp_path / "ksp", trajectory=tmp_path / "traj", matrix=(256, 256))
    phase = np.exp(2j * np.pi * rng.random(69))
    scan = scan.replace(kspace=(scan.kspace.reshape(8, 69, 256) * phase[None, :, None]).reshape(8, -1))
    _, record = correct_gradient_delay(scan, "auto")
    x, y, xy = record["gradient_delay_samples"]
    assert np.max(np.abs(np.subtract((y, x, xy), q))) < 0.02, (q, record["gradient_delay_note"])
    x, y, xy = opposed_estimate(scan).parameters  # our port of BART's default, its bias included
    # the port differs from BART by up to 0.006 at equal delays near a sample and by up to 2% of |q_x - q_y|
    # more on anisotropic ones (0.030 at 1.74; 60 draws); x and y read in each other's place differ by
    # |q_x - q_y| itself
    tolerance = 0.01 + 0.025 * abs(q[0] - q[1])
    assert np.max(np.abs(np.subtract((y, x, xy), theirs))) < tolerance, (theirs, (y, x, xy))
    trajectory = np.asarray(read_cfl(tmp_path / "trajd")).reshape(3, -1, order="F")[:2].T.real
    corrected, _ = correct_gradient_delay(scan, ":".join(f"{v:.4f}" for v in q))  # BART's numbers, as written
    assert np.max(np.abs(corrected[0].trajectory - trajectory)) < 1e-3
