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
from .lowrank import LocalLowRank, global_nuclear_norm, global_svt


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
    splits: ClassVar[int] = 1
    """Frames-sized split, dual and update triples the joint solve keeps for the term (the planner's count; the
    proximal map's own temporaries counted as further triples)."""
    options: ClassVar[tuple[str, ...]] = ()
    """The settings fields of this term alone (None: the term's default); set with another term, refused."""

    def sparsity(self, shape: tuple[int, ...]) -> Sparsity:
        """The :class:`~.admm.Sparsity` of the term for frames of ``shape = (T, *matrix)``."""
        raise NotImplementedError(f"temporal term {self.name} has no transform")

    def configured(self, settings: Any) -> TemporalTerm:
        """The term with its :attr:`options` taken from ``settings`` (a ``ReconSettings``)."""
        return self


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


def identity_sparsity(shape: tuple[int, ...], prox, penalty, dual_prox=None) -> Sparsity:
    """A term on the frames themselves (``K = I``) with the norm given by ``prox`` and ``penalty``."""
    return Sparsity(forward=lambda x: x, adjoint_rhs=lambda b, q, rho: b + rho * q, gram=lambda x: x, groups=0,
                    shape=tuple(shape), prox=prox, penalty=penalty, dual_prox=dual_prox)


class GlobalLowRank(TemporalTerm):
    """``||C(x)||_*``: the nuclear norm of the Casorati matrix (one row per frame, one column per voxel), the
    proximal map singular value soft-thresholding (:mod:`.lowrank`)."""

    name = "lowrank"
    lam_default = 2.0
    """The lowest NRMSE of the weights tried on the beating phantom (docs/temporal.md)."""
    norm_squared = 1.0
    splits = 2

    def sparsity(self, shape: tuple[int, ...]) -> Sparsity:
        return identity_sparsity(shape, global_svt, global_nuclear_norm)


class LocallyLowRank(TemporalTerm):
    """``sum_blocks ||C(x_block)||_*``: the nuclear norms of the Casorati matrices of blocks of ``block^d``
    voxels (:class:`~.lowrank.LocalLowRank`), as BART's ``pics -R L``. ADMM shifts the block grid at random at
    every iteration (seeded by ``seed``: the same seed, the same images); the primal-dual method keeps the
    unshifted grid, whose penalty is also the one reported."""

    name = "llr"
    options = ("temporal_block",)
    lam_default = 0.3
    """The lowest NRMSE of the weights tried on the beating phantom (docs/temporal.md)."""
    norm_squared = 1.0
    splits = 3
    """Beside the split's own triple, two for the proximal map's frames-sized copies (the shifted frames, the
    blocks, their thresholded copy and the way back; :func:`~.lowrank.svt` bounds its ``T x T`` temporaries by
    the blocks' size)."""

    def __init__(self, block: int = 8, seed: int = 0) -> None:
        self.block, self.seed = int(block), int(seed)

    def configured(self, settings: Any) -> LocallyLowRank:
        block = settings.temporal_block
        return self if block is None else LocallyLowRank(block, self.seed)

    def sparsity(self, shape: tuple[int, ...]) -> Sparsity:
        blocks = LocalLowRank(self.block, self.seed)
        return identity_sparsity(shape, blocks.prox, blocks.penalty, blocks.fixed_prox)


TEMPORAL_TERMS: dict[str, TemporalTerm] = {
    term.name: term for term in (NoTemporalTerm(), TemporalTv(), GlobalLowRank(), LocallyLowRank())}
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
