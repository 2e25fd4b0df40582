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
