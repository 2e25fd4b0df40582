"""Rewrite ``mri_recon/kernels/registry.json`` from the launchers: every configuration they can build.

Run after changing a kernel's ``-D`` contract or a launcher's choices; ``tests/test_kernel_registry.py``
fails until the file matches. Usage: python scripts/update_kernel_registry.py
"""

from __future__ import annotations

import json

from mri_recon.filters.gpu import compile_configurations as filter_configurations
from mri_recon.kernels import registry
from mri_recon.operators.engines.nufft_launch import compile_configurations as nufft_configurations


def launcher_configurations() -> list[tuple[str, dict[str, int]]]:
    """The exact transforms, the Toeplitz product, CG, the NUFFT and the post-filter, sorted, no repeats."""
    return registry.canonical([*registry.exact_configurations(), *nufft_configurations(), *filter_configurations()])


def main() -> int:
    configs = launcher_configurations()
    text = "[\n" + ",\n".join(json.dumps([f, d], sort_keys=True) for f, d in configs) + "\n]\n"
    registry.REGISTRY_FILE.write_text(text)
    print(f"wrote {len(configs)} configurations to {registry.REGISTRY_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
