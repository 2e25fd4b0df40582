"""Linear operators of the encoding model and the public functions built on them."""

from __future__ import annotations

from .public import apply_adjoint, apply_forward, apply_psf, fhd, forward, psf, resolve

__all__ = ["apply_adjoint", "apply_forward", "apply_psf", "fhd", "forward", "psf", "resolve"]
