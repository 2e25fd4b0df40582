"""README's two opening commands exist, CI runs the second one verbatim, and its Python examples run."""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    install_and_demo, tests = blocks[0].strip(), blocks[1].strip()
    assert "data/demo_radial.h5" in install_and_demo and "--png" in install_and_demo
    assert "pytest" in tests
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()
    assert (ROOT / "data" / "demo_radial.h5").is_file()


def _example() -> str:
    return re.findall(r"```python\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)[0]


def test_the_readme_python_example_runs(monkeypatch):
    # the public API as the README shows it (on the CPU here)
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(_example(), "README.md", "exec"), namespace)
    assert namespace["result"].image.shape == (128, 128) and namespace["raw"].image.shape == (64, 64)
    assert namespace["data"].shape == namespace["sim"].kspace.shape


def test_the_readme_scan_from_arrays_example_runs(monkeypatch, capsys):
    # the path of BART and SigPy users: a Scan built from k-space, trajectory, matrix, weights and maps
    (example,) = [b for b in re.findall(r"```python\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
                  if "mri_recon.Scan(" in b]
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    scan, result = namespace["scan"], namespace["result"]
    assert scan.kspace.shape == (2, namespace["trajectory"].shape[0]) and scan.coil_maps is not None
    assert result.image.shape == scan.matrix and result.combine == "sense"
    assert namespace["error"] < 0.1 and f"NRMSE {namespace['error']:.3f}" in capsys.readouterr().out


def _cli_image(path: Path, out: Path) -> np.ndarray:
    from click.testing import CliRunner

    from mri_recon.cli import main

    result = CliRunner().invoke(main, ["reconstruct", str(path), "-o", str(out), "--device", "cpu", "-q"])
    assert result.exit_code == 0, result.output
    with h5py.File(out) as f:
        return f["image"][()]


def test_the_python_api_gives_the_cli_image_bit_for_bit(tmp_path, monkeypatch):
    import mri_recon
    from mri_recon.io.ismrmrd_write import write_ismrmrd

    monkeypatch.setenv("MRI_RECON_CACHE_DIR", str(tmp_path / "cache"))
    sim = mri_recon.simulate_scan((48, 40), "golden", coils=4, snr=30, seed=3)
    mrd = tmp_path / "noise_no_maps.mrd.h5"
    write_ismrmrd(mrd, sim.replace(coil_maps=None, ground_truth=None))
    for path in (ROOT / "data" / "demo_radial.h5", mrd):
        scan = mri_recon.load_scan(path)
        assert scan.noise is not None
        api = mri_recon.reconstruct(scan, device="cpu")
        assert np.array_equal(api.image, _cli_image(path, tmp_path / f"{path.name}.recon.h5")), path.name
    assert api.combine == "sense" and api.parameters["coil_maps"] == "walsh"  # the MRD file has no maps


def test_the_flat_simulate_module_is_gone():
    from importlib.machinery import PathFinder

    import mri_recon

    assert PathFinder.find_spec("mri_recon.simulate", mri_recon.__path__) is None  # the package's own folder
    assert mri_recon.simulate_scan.__module__ == "mri_recon.sim.simulate"


def test_the_api_refuses_what_the_preparation_decides():
    import pytest

    import mri_recon
    from mri_recon.errors import InvalidDataError

    sim = mri_recon.simulate_scan((16, 16), "golden", coils=2, spokes=12, seed=1)
    with pytest.raises(InvalidDataError, match="estimate_maps come from the preparation"):
        mri_recon.reconstruct(sim, device="cpu", estimate_maps="walsh")
    raw = mri_recon.reconstruct(sim, prepare=False, device="cpu", iterations=2, estimate_maps="walsh")
    assert raw.combine == "sense" and raw.parameters["coil_maps"] == "walsh"
