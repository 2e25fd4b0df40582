"""The package as installed: ``python -m mri_recon`` and the typing marker (PEP 561)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from mri_recon import __version__
from mri_recon.cli import main

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


def test_the_console_script_ends_with_the_commands_status():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "mri_recon", "info", "no-such-scan.h5"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 1
    assert "no-such-scan.h5" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("enabled", [True, False])
def test_loading_a_command_leaves_the_collector_as_it_was(enabled):
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        assert main.get_command(None, "info") is not None
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_the_server_package_loads_its_modules_on_use():
    code = ("import sys, mri_recon.server as s; before = 'mri_recon.server.service' in sys.modules; "
            "s.Server; print(before, 'mri_recon.server.service' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True"], done.stderr
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        import mri_recon.server  # noqa: PLC0415 - the package object itself

        mri_recon.server.Nothing  # noqa: B018 - the access is the test
