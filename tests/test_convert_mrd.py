"""MRD raw data from every input: ``simulate x.mrd.h5`` writes MRD (it wrote schema v1 under that name),
``convert`` writes MRD from schema v1 (twix: tests/test_twix.py), and refuses what MRD cannot hold."""

from __future__ import annotations

import h5py
from click.testing import CliRunner
from helpers import relative

from mri_recon.cli import main
from mri_recon.io import load_scan
from mri_recon.io.readers import reader_of
from mri_recon.sim.simulate import simulate_scan


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_simulate_writes_mrd_for_an_mrd_name(tmp_path):
    out = tmp_path / "s.mrd.h5"
    done = _run("simulate", out, "--matrix", "24", "--coils", "2", "--spokes", "20", "--seed", "3")
    assert done.exit_code == 0 and "MRD raw data" in done.output, done.output
    assert reader_of(out, False)[0].name == "ismrmrd"
    scan = load_scan(out)
    expected = simulate_scan((24, 24), "golden", coils=2, spokes=20, seed=3)
    assert relative(scan.kspace, expected.kspace) < 1e-6 and relative(scan.trajectory, expected.trajectory) < 1e-5


def test_simulate_refuses_a_field_map_in_mrd(tmp_path):
    done = _run("simulate", tmp_path / "s.mrd.h5", "--matrix", "16", "--coils", "1", "--field-map", "50")
    assert done.exit_code == 2 and "MRD raw data has no place for a field map" in done.output
    assert not (tmp_path / "s.mrd.h5").exists()


def test_convert_writes_mrd_from_schema_v1(tmp_path):
    source, out = tmp_path / "s.h5", tmp_path / "s.mrd.h5"
    assert _run("simulate", source, "--matrix", "24", "--coils", "2", "--spokes", "20", "-q").exit_code == 0
    done = _run("convert", source, out)
    assert done.exit_code == 0, done.output
    before, after = load_scan(source), load_scan(out)
    assert relative(after.kspace, before.kspace) < 1e-6 and relative(after.weights, before.weights) < 1e-6
    with h5py.File(out) as f:
        assert "dataset" in f
    done = _run("convert", source, tmp_path / "other.h5")
    assert done.exit_code == 1 and "as MRD raw data (a name ending .mrd.h5 or .mrd)" in done.output
