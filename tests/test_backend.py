"""The array backend's answers while CuPy is absent, installed, or half imported."""

from __future__ import annotations

import sys
import types

import numpy as np

from mri_recon.arrays.backend import get_xp


def test_a_cupy_module_still_being_imported_is_not_taken_for_cupy(monkeypatch):
    """While one thread imports CuPy, ``sys.modules`` holds a module without ``ndarray`` yet: another thread asking
    a NumPy array's module gets NumPy, not an AttributeError (no CuPy array can exist before the import ends)."""
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    assert get_xp(np.zeros(3)) is np
