"""The package as installed: ``python -m mri_recon`` and the typing marker (PEP 561)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tomllib

from mri_recon import __version__

ROOT = Path(__file__).resolve().parents[1]


def test_python_dash_m_runs_the_command():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "mri_recon", "--version"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"mri-recon, version {__version__}"
    done = subprocess.run([sys.executable, "-m", "mri_recon", "simulate", "--help"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("Usage: mri-recon simulate"), done.stdout


def test_the_typing_marker_is_in_the_package_and_shipped():
    assert (ROOT / "mri_recon" / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["mri_recon"]
