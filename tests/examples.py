"""The worked examples of docs/architecture.md, kept as files in docs/examples/: each is loaded into the package
where the document says it goes and registered with its one entry, for the tests of test_examples.py and, with
``pytest --with-examples``, for a whole run (the tests that read the registries then cover them too)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


def load(file: str, package: str, patch: pytest.MonkeyPatch) -> ModuleType:
    """``docs/examples/FILE`` as the module ``PACKAGE.STEM`` (its relative imports resolve in ``package``)."""
    name = f"{package}.{Path(file).stem}"
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / file)
    module = importlib.util.module_from_spec(spec)
    patch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def register_regularizer(patch: pytest.MonkeyPatch) -> ModuleType:
    """``l1.py`` as ``solvers/regularizers/l1.py``, and ``"l1"`` added to ``MODULES``."""
    from mri_recon.solvers import regularizers

    module = load("l1.py", regularizers.__name__, patch)
    patch.setattr(regularizers, "MODULES", (*regularizers.MODULES, "l1"))
    regularizers.registry.cache_clear()
    return module


def register_output(patch: pytest.MonkeyPatch) -> ModuleType:
    """``npy_image.py`` as ``io/npy_image.py``, and its ``FORMAT`` added to ``OUTPUTS``."""
    from mri_recon.io import writers

    module = load("npy_image.py", "mri_recon.io", patch)
    patch.setitem(writers.OUTPUTS, module.FORMAT.name, module.FORMAT)
    return module


def register_engine(patch: pytest.MonkeyPatch) -> ModuleType:
    """``dense.py`` as ``operators/engines/dense.py``, and ``"dense"`` added to ``ENGINE_MODULES``."""
    from mri_recon.operators.engines import registry

    module = load("dense.py", "mri_recon.operators.engines", patch)
    patch.setattr(registry, "ENGINE_MODULES", (*registry.ENGINE_MODULES, "dense"))
    registry.engines.cache_clear()
    return module


REGISTER = {"regularizer": register_regularizer, "output": register_output, "engine": register_engine}
"""Each example's registration, by what it adds."""


def forget() -> None:
    """Clear the registries' caches (after a registration is undone)."""
    from mri_recon.operators.engines import registry
    from mri_recon.solvers import regularizers

    regularizers.registry.cache_clear()
    registry.engines.cache_clear()
