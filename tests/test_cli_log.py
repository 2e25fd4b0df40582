"""What ``reconstruct`` records and prints: ``--log-json`` settings under the typed option names, the NRMSE
against a ground truth, and a progress bar only on a terminal."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mri_recon.cli import main


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    path = tmp_path_factory.mktemp("scans") / "s.h5"
    result = CliRunner().invoke(main, ["simulate", str(path), "--matrix", "24", "--coils", "2", "--quiet"])
    assert result.exit_code == 0, result.output
    return path


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_log_json_settings_use_the_option_names_the_user_types(scan, tmp_path):
    record = tmp_path / "run.json"
    result = _run("reconstruct", scan, "-o", tmp_path / "r.h5", "--format", "hdf5", "--lambda", "0.002",
                  "--iterations", "2", "--device", "cpu", "--log-json", record, "--quiet")
    assert result.exit_code == 0, result.output
    settings = json.loads(record.read_text())["settings"]
    assert settings["format"] == "hdf5" and settings["lambda"] == 0.002 and settings["complex"] is False
    assert {"slice", "contrast", "phase", "set", "repetition"} <= set(settings)
    assert settings["slice"] is None and settings["log_json"] == str(record)
    assert not [name for name in settings if name.endswith("_")]
    typed = _run("reconstruct", "--help").output
    for name in set(settings) - {"scans"}:
        assert f"--{name.replace('_', '-')}" in typed, name
