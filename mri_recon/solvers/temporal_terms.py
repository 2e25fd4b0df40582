"""The temporal terms of a time series, and their registry.

A time series ``x = (x_0, ..., x_{T-1})`` is reconstructed with an optional temporal term ``lam_t R_t(K_t x)``
beside the spatial regularizer of every frame (:mod:`.regularizers`). Each term here states its transform
``K_t`` (a :class:`~.admm.Sparsity`), a bound on ``||K_t||^2`` (the primal-dual steps) and its default weight;
``"none"`` has no term, and each frame is then reconstructed as a single image is. Adding a temporal term is one
class here and one entry in :data:`TEMPORAL_TERMS`; the settings' choices, the command line and the solve stage
read this registry.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..arrays.backend import get_xp
from ..errors import InvalidDataError
from .admm import Sparsity


def time_difference(x: Any) -> Any:
    """``D_t x``: ``x[1:] - x[:-1]`` along axis 0, shape ``(T-1, ...)``."""
    return x[1:] - x[:-1]


def time_difference_adjoint(q: Any) -> Any:
    """``D_t^H q`` for ``q`` of shape ``(T-1, ...)``: ``out[t] = q[t-1] - q[t]`` (0 beyond the ends)."""
    xp = get_xp(q)
    out = xp.zeros((q.shape[0] + 1, *q.shape[1:]), dtype=q.dtype)
    out[1:] += q
    out[:-1] -= q
    return out


class TemporalTerm:
    """One temporal term ``lam_t R_t(K_t x)`` over frames of shape ``(T, *matrix)``."""

    name: ClassVar[str] = "?"
    """What users write (``temporal=``, ``--temporal``)."""
    joint: ClassVar[bool] = True
    """True: the frames are solved together (ADMM or primal-dual); False: no term, each frame alone."""
    lam_default: ClassVar[float] = 0.0
    """``temporal_lam`` when none is given, relative to ``max |A^H W d|`` over all frames."""
    norm_squared: ClassVar[float] = 1.0
    """An upper bound on ``||K_t||^2``."""

    def sparsity(self, shape: tuple[int, ...]) -> Sparsity:
        """The :class:`~.admm.Sparsity` of the term for frames of ``shape = (T, *matrix)``."""
        raise NotImplementedError(f"temporal term {self.name} has no transform")


class NoTemporalTerm(TemporalTerm):
    name = "none"
    joint = False


class TemporalTv(TemporalTerm):
    """``||D_t x||_1``: forward differences along time (no wrap-around), the sum of complex moduli, as BART's
    ``pics -R T``."""

    name = "tv"
    lam_default = 0.005
    """The lowest NRMSE of the weights tried on the beating phantom (docs/temporal.md)."""
    norm_squared = 4.0

    def sparsity(self, shape: tuple[int, ...]) -> Sparsity:
        return Sparsity(forward=time_difference,
                        adjoint_rhs=lambda b, q, rho: b + rho * time_difference_adjoint(q),
                        gram=lambda x: time_difference_adjoint(time_difference(x)), groups=0,
                        shape=(shape[0] - 1, *shape[1:]))


TEMPORAL_TERMS: dict[str, TemporalTerm] = {term.name: term for term in (NoTemporalTerm(), TemporalTv())}
"""Every temporal term by name, in the order they are listed to users."""


def temporal_names() -> tuple[str, ...]:
    """The temporal terms' names."""
    return tuple(TEMPORAL_TERMS)


def temporal_term(name: str) -> TemporalTerm:
    """The temporal term called ``name``; :class:`~mri_recon.errors.InvalidDataError` listing the others."""
    found = TEMPORAL_TERMS.get(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidDataError(f"temporal must be one of {', '.join(temporal_names())}, found {name!r}")
    return found
