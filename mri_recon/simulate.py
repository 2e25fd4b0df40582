"""Deprecated location of :func:`mri_recon.sim.simulate.simulate_scan` (use ``mri_recon.simulate_scan``).

Kept so that scripts written against the flat layout keep working; importing it warns.
"""

from __future__ import annotations

import warnings

from .sim.simulate import simulate_scan

warnings.warn("mri_recon.simulate moved to mri_recon.sim.simulate; use mri_recon.simulate_scan",
              DeprecationWarning, stacklevel=2)

__all__ = ["simulate_scan"]
