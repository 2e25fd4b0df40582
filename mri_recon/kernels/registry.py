"""The one registry of kernel compile configurations: every ``(filename, defines)`` a launcher can build.

The list is data, ``registry.json`` beside this module, so that this layer imports none of the launchers
above it: ``python scripts/update_kernel_registry.py`` writes it from
:func:`mri_recon.operators.gpu.configurations.launcher_configurations`, the one list of what the launchers build
(the filter plans, for one, come from the filter package's planner). ``mri-recon doctor`` compiles each
configuration on the GPU, ``tests/test_kernels_compile.py`` compiles each with NVRTC (no GPU needed), and
``tests/test_kernel_registry.py`` fails when the file differs from that list, or when a ``.cu`` file of this
folder is missing from it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

REGISTRY_FILE = Path(__file__).resolve().parent / "registry.json"


def canonical(configs: list[tuple[str, dict[str, int]]]) -> list[tuple[str, dict[str, int]]]:
    """``configs`` without repeats, sorted by file and defines (the order of ``registry.json``)."""
    unique = {(f, tuple(sorted((k, int(v)) for k, v in d.items()))) for f, d in configs}
    return [(f, dict(d)) for f, d in sorted(unique)]


@functools.cache
def _load() -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    entries = json.loads(REGISTRY_FILE.read_text())
    return tuple((str(f), tuple(sorted((str(k), int(v)) for k, v in d.items()))) for f, d in entries)


def configurations() -> list[tuple[str, dict[str, int]]]:
    """Every configuration of the registry, each once, as ``(filename, defines)``."""
    return [(f, dict(d)) for f, d in _load()]


def contains(filename: str, defines: dict[str, int]) -> bool:
    """Whether ``(filename, defines)`` is in the registry."""
    return (filename, tuple(sorted((k, int(v)) for k, v in defines.items()))) in set(_load())
