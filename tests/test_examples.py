"""The worked examples of docs/architecture.md, kept as files in docs/examples/ (:mod:`examples` loads and
registers them): an output format and an engine, each run here after its one registry entry (the regularizer's
tests are in test_regularizers.py); each follows the package's rules (test_layers.py); and with all of them
registered (``pytest --with-examples``) the tests that list engines, formats, regularizers and solvers still
pass, the new engine adjointness-tested and self-tested by ``doctor`` without a line of test."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from examples import EXAMPLES, forget, register_engine, register_output
from helpers import relative
from test_layers import MAX_FUNCTION_LINES, MAX_MODULE_LINES, VOCABULARIES, _compares, _functions, _length

import mri_recon
from mri_recon import api, doctor
from mri_recon.batch.inputs import output_name
from mri_recon.cli import main
from mri_recon.io import writers
from mri_recon.operators.engines import registry
from mri_recon.operators.engines.nudft import nudft_adjoint, nudft_forward
from mri_recon.settings import ReconSettings
from mri_recon.sim.simulate import simulate_scan

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("scans") / "s.h5"
    mri_recon.save_scan(path, simulate_scan((20, 18), "golden", coils=2, spokes=14, seed=7))
    return path


@pytest.fixture
def npy(monkeypatch):
    """docs/examples/npy_image.py as ``io/npy_image.py``, its ``FORMAT`` in ``OUTPUTS``."""
    yield register_output(monkeypatch).FORMAT


@pytest.fixture
def dense_engine(monkeypatch):
    """docs/examples/dense.py as ``operators/engines/dense.py``, ``"dense"`` in ``ENGINE_MODULES``."""
    yield register_engine(monkeypatch).DenseEncoding
    monkeypatch.undo()
    forget()


def test_the_output_format_example_writes_and_is_chosen_by_name(npy, scan_file, tmp_path):
    assert writers.output_format(tmp_path / "x.NPY") == "npy" and "npy" in writers.formats()
    settings = ReconSettings(iterations=3, device="cpu", cache=False)
    done = api.reconstruct_file(scan_file, tmp_path / "x.npy", settings)
    image = done.results[0][3].image
    assert np.array_equal(np.load(tmp_path / "x.npy"), np.abs(image)) and done.written == [tmp_path / "x.npy"]
    api.reconstruct_file(scan_file, tmp_path / "c.bin", settings.replace(format="npy", complex_=True))
    assert np.array_equal(np.load(tmp_path / "c.bin"), image)
    result = CliRunner().invoke(main, ["reconstruct", str(scan_file), "-o", str(tmp_path / "cli.npy"), "--iterations",
                                       "3", "--device", "cpu", "--no-cache", "-q"])
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(tmp_path / "cli.npy"), np.abs(image))
    assert output_name(scan_file, "npy") == "s.recon.npy"


def test_the_engine_example_is_registered_and_exact(dense_engine, rng):
    assert registry.engine("dense", "cpu") is dense_engine and "dense" in registry.methods()
    matrix, m = (9, 8), 120
    k = ((rng.random((m, 2)) - 0.5) * np.asarray(matrix)).astype(np.float32)
    y = (rng.standard_normal((2, m)) + 1j * rng.standard_normal((2, m))).astype(np.complex64)
    x = (rng.standard_normal((2, *matrix)) + 1j * rng.standard_normal((2, *matrix))).astype(np.complex64)
    op = dense_engine(k, matrix, 2)
    assert relative(op.H(y), nudft_adjoint(y, k, matrix)) < 1e-6 and relative(op(x), nudft_forward(x, k)) < 1e-6
    checks = [c for c in doctor.cpu_self_test(rng) if c.name.startswith(dense_engine.key)]
    assert [c.name for c in checks] == [f"dense-cpu {what} {d}d" for d in (2, 3) for what in ("fhd", "fwd")]
    assert all(c.passed for c in checks), checks


def test_the_engine_example_reconstructs_as_the_exact_sums(dense_engine, scan_file, tmp_path):
    scan = mri_recon.load_scan(scan_file)
    ours = mri_recon.reconstruct(scan, device="cpu", method="dense", iterations=5)
    exact = mri_recon.reconstruct(scan, device="cpu", method="exact", iterations=5)
    assert ours.parameters["method"] == "dense" and relative(ours.image, exact.image) < 1e-5
    result = CliRunner().invoke(main, ["reconstruct", str(scan_file), "-o", str(tmp_path / "m.h5"), "--method",
                                       "dense", "--iterations", "5", "--device", "cpu", "--no-cache", "-q"])
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "m.h5") as f:
        assert f.attrs["param_method"] == "dense" and relative(f["image"][()], ours.image) < 1e-6


@pytest.mark.parametrize("file", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_follows_the_package_rules(file):
    text = (EXAMPLES / file).read_text()
    assert len(text.splitlines()) <= MAX_MODULE_LINES
    tree = ast.parse(text)
    assert not [f.name for f in _functions(EXAMPLES / file) if _length(f) > MAX_FUNCTION_LINES]
    assert ast.get_docstring(tree) and "docs/architecture.md" in ast.get_docstring(tree)
    for kind, vocabulary in VOCABULARIES.items():
        assert not _compares(tree, vocabulary, vocabulary.names()), (file, kind)


VOCABULARY_TESTS = [
    "tests/test_operator_protocol.py", "tests/test_operators.py", "tests/test_settings.py",
    "tests/test_output_names.py", "tests/test_regularizers.py", "tests/test_layers.py",
    "tests/test_nifti.py::test_output_format_choice", "tests/test_cli.py::test_doctor_without_gpu_reports_versions",
    "tests/test_cli.py::test_doctor_fails_with_a_nonzero_exit_when_a_check_fails",
    "tests/test_sparse_recon.py::test_bad_settings_are_refused",
    "tests/test_sparse_recon.py::test_lambda_is_scale_free",
    "tests/test_lambda_defaults.py::test_lambda_is_resolved_in_one_place",
    "tests/test_lambda_defaults.py::test_cli_uses_and_records_the_regularizers_default",
]
"""The tests that list engines, output formats, regularizers or solvers (from the registries)."""


@pytest.mark.slow
def test_the_tests_that_list_vocabularies_pass_with_every_example_registered():
    command = [sys.executable, "-m", "pytest", "--with-examples", "-q", "-p", "no:cacheprovider", *VOCABULARY_TESTS]
    collected = subprocess.run([*command, "--collect-only"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "dense-cpu" in collected.stdout and "l1" in collected.stdout, collected.stdout[-2000:]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
