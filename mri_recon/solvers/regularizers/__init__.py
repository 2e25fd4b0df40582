"""The regularizers, one module each, and their registry.

Each module of :data:`MODULES` defines ``REGULARIZER``, an instance of :class:`~.base.Regularizer`; adding a
regularizer is one module and one entry in :data:`MODULES` (docs/architecture.md shows an example). The
solvers, the lambda defaults, the choice lists of the library and the command line are read from here.
"""

from __future__ import annotations

import functools
import importlib

from ...errors import InvalidDataError
from .base import Normal, Regularizer

MODULES = ("l2", "tv", "wavelet")
"""The regularizer modules of this folder, in the order they are listed to users."""


@functools.cache
def registry() -> dict[str, Regularizer]:
    """Every regularizer by name."""
    found = (importlib.import_module(f"{__package__}.{module}").REGULARIZER for module in MODULES)
    return {r.name: r for r in found}


def names() -> tuple[str, ...]:
    """The regularizers' names, in :data:`MODULES` order."""
    return tuple(registry())


def regularizer(name: str) -> Regularizer:
    """The regularizer called ``name``; :class:`~mri_recon.errors.InvalidDataError` listing the others."""
    found = registry().get(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidDataError(f"regularizer must be one of {', '.join(names())}, found {name!r}")
    return found


__all__ = ["MODULES", "Normal", "Regularizer", "names", "regularizer", "registry"]
