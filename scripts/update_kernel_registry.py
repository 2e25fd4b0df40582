"""Rewrite ``mri_recon/kernels/registry.json`` from the launchers: every configuration they can build
(:func:`mri_recon.operators.gpu.configurations.launcher_configurations`, the one list).

Run after changing a kernel's ``-D`` contract or a launcher's choices; ``tests/test_kernel_registry.py``
fails until the file matches. Usage: python scripts/update_kernel_registry.py
"""

from __future__ import annotations

import json

from mri_recon.kernels import registry
from mri_recon.operators.gpu.configurations import launcher_configurations


def main() -> int:
    configs = launcher_configurations()
    text = "[\n" + ",\n".join(json.dumps([f, d], sort_keys=True) for f, d in configs) + "\n]\n"
    registry.REGISTRY_FILE.write_text(text)
    print(f"wrote {len(configs)} configurations to {registry.REGISTRY_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
