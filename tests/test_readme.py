"""README's two opening commands exist, and CI runs the second one verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    install_and_demo, tests = blocks[0].strip(), blocks[1].strip()
    assert "data/demo_radial.h5" in install_and_demo and "--png" in install_and_demo
    assert "pytest" in tests
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()
    assert (ROOT / "data" / "demo_radial.h5").is_file()


def test_the_readme_python_example_runs():
    # the public API as the README shows it (on the CPU here)
    code = re.findall(r"```python\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)[0]
    namespace: dict = {}
    exec(compile(code.replace('progress=False)', 'progress=False, device="cpu")'), "README.md", "exec"),
         namespace)
    assert namespace["result"].image.shape == (64, 64)
    assert namespace["data"].shape == namespace["scan"].kspace.shape


def test_the_flat_simulate_module_still_imports_with_a_warning():
    import importlib
    import sys

    import pytest

    sys.modules.pop("mri_recon.simulate", None)
    with pytest.warns(DeprecationWarning, match="mri_recon.simulate moved to mri_recon.sim.simulate"):
        module = importlib.import_module("mri_recon.simulate")
    from mri_recon import simulate_scan

    assert module.simulate_scan is simulate_scan
