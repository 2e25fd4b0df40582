"""The temporal terms of a time series, and their registry.

A time series ``x = (x_0, ..., x_{T-1})`` is reconstructed with an optional temporal term ``lam_t R_t(K_t x)``
beside the spatial regularizer of every frame (:mod:`.regularizers`). Each term here states its transform
``K_t`` (a :class:`~.admm.Sparsity`), a bound on ``||K_t||^2`` (the primal-dual steps) and its default weight;
``"none"`` has no term, and each frame is then reconstructed as a single image is. Adding a temporal term is one
class here and one entry in :data:`TEMPORAL_TERMS`; the settings' choices, the command line and the solve stage
read this registry.

``"subspace"`` is a model rather than a penalty: the frames are confined to the span of K temporal basis
functions (:mod:`.subspace`), so the unknowns become K coefficient images and there is no temporal weight or
transform. It is an entry of the same registry all the same, so that the vocabulary of the frames' coupling is
one list for users (``--temporal``), the settings and the checks, each term with its own options
(:attr:`TemporalTerm.options`); the solve stage asks :attr:`TemporalTerm.subspace` which problem to build.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidDataError, printable
from ..io.basis import read_basis
from ..operators.finite_difference import first_axis_adjoint_rhs, first_axis_laplacian_add
from ..operators.finite_difference import first_axis_difference as time_difference
from ..operators.finite_difference import first_axis_difference_adjoint as time_difference_adjoint
from .admm import Sparsity
from .lowrank import LocalLowRank, global_nuclear_norm, global_svt


class TemporalTerm:
    """One temporal term ``lam_t R_t(K_t x)`` over frames of shape ``(T, *matrix)``."""

    name: ClassVar[str] = "?"
    """What users write (``temporal=``, ``--temporal``)."""
    summary: ClassVar[str] = ""
    """What it does, in the option's help."""
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
    subspace: ClassVar[bool] = False
    """True: a model, not a penalty: the frames are ``Phi c`` for a ``T x K`` basis ``Phi`` and the unknowns the
    coefficient images ``c`` (:class:`Subspace`); no weight, no transform."""

    def sparsity(self, shape: tuple[int, ...]) -> Sparsity:
        """The :class:`~.admm.Sparsity` of the term for frames of ``shape = (T, *matrix)``."""
        raise NotImplementedError(f"temporal term {self.name} has no transform")

    def configured(self, settings: Any, frames: int) -> TemporalTerm:
        """The term with its :attr:`options` taken from ``settings`` (a ``ReconSettings``), for a series of
        ``frames`` frames (what depends on their number is checked here, before any work)."""
        return self


class NoTemporalTerm(TemporalTerm):
    name = "none"
    joint = False


class TemporalTv(TemporalTerm):
    """``||D_t x||_1``: forward differences along time (no wrap-around), the sum of complex moduli, as BART's
    ``pics -R T``."""

    name = "tv"
    summary = "temporal-lambda ||D_t x||_1"
    lam_default = 0.005
    """The lowest NRMSE of the weights tried on the beating phantom (docs/temporal.md)."""
    norm_squared = 4.0

    def sparsity(self, shape: tuple[int, ...]) -> Sparsity:
        return Sparsity(forward=time_difference, adjoint_rhs=first_axis_adjoint_rhs,
                        gram=lambda x: time_difference_adjoint(time_difference(x)), groups=0,
                        shape=(shape[0] - 1, *shape[1:]), gram_add=first_axis_laplacian_add, replayable=True)


def identity_sparsity(shape: tuple[int, ...], prox, penalty, dual_prox=None) -> Sparsity:
    """A term on the frames themselves (``K = I``) with the norm given by ``prox`` and ``penalty``."""
    return Sparsity(forward=lambda x: x, adjoint_rhs=lambda b, q, rho: b + rho * q, gram=lambda x: x, groups=0,
                    shape=tuple(shape), prox=prox, penalty=penalty, dual_prox=dual_prox)


class GlobalLowRank(TemporalTerm):
    """``||C(x)||_*``: the nuclear norm of the Casorati matrix (one row per frame, one column per voxel), the
    proximal map singular value soft-thresholding (:mod:`.lowrank`)."""

    name = "lowrank"
    summary = "the nuclear norm of the frames' Casorati matrix"
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
    summary = "of its blocks of B^d voxels, --temporal-block, shifted at random"
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

    def configured(self, settings: Any, frames: int) -> LocallyLowRank:
        block = settings.temporal_block
        return self if block is None else LocallyLowRank(block, self.seed)

    def sparsity(self, shape: tuple[int, ...]) -> Sparsity:
        blocks = LocalLowRank(self.block, self.seed)
        return identity_sparsity(shape, blocks.prox, blocks.penalty, blocks.fixed_prox)


SUBSPACE_RANK_DEFAULT = 4
"""``temporal_rank`` of a subspace when neither a rank nor a basis is given (docs/temporal.md, "Subspace")."""


class Subspace(TemporalTerm):
    """The frames in the span of K temporal basis functions, ``x_t = sum_k Phi[t, k] c_k`` (:mod:`.subspace`;
    BART's ``pics -B``): the basis of a file (``temporal_basis``, read by :func:`~mri_recon.io.basis.read_basis`,
    its columns orthonormalized; ``temporal_rank`` keeps its first K), or estimated from the frames' k-space
    centres in the solve (:func:`mri_recon.prep.temporal_basis.estimate_basis`; ``temporal_rank`` K, default
    :data:`SUBSPACE_RANK_DEFAULT`). The coefficients take the spatial regularizer of a series (none or l2: CG; tv or
    wavelet: the joint solver, on each coefficient image)."""

    name = "subspace"
    summary = "the frames confined to K temporal basis functions, --temporal-rank or --temporal-basis"
    options = ("temporal_rank", "temporal_basis")
    subspace = True
    splits = 0

    def __init__(self, rank: int = SUBSPACE_RANK_DEFAULT, basis: np.ndarray | None = None,
                 source: str = "estimated") -> None:
        self.rank, self.basis, self.source = int(rank), basis, source

    def configured(self, settings: Any, frames: int) -> Subspace:
        rank, path = settings.temporal_rank, settings.temporal_basis
        if path is None:
            rank = SUBSPACE_RANK_DEFAULT if rank is None else int(rank)
            if rank > frames:
                raise InvalidDataError(f"temporal_rank {rank} exceeds the series' {frames} frames")
            return Subspace(rank)
        basis = read_basis(path, frames, rank, allow_external=settings.allow_external)
        return Subspace(basis.shape[1], basis, printable(os.fspath(path)))


TEMPORAL_TERMS: dict[str, TemporalTerm] = {
    term.name: term for term in (NoTemporalTerm(), TemporalTv(), GlobalLowRank(), LocallyLowRank(), Subspace())}
"""Every temporal term by name, in the order they are listed to users."""


def temporal_help() -> str:
    """The help of ``--temporal``: each term's :attr:`~TemporalTerm.summary`."""
    terms = "; ".join(f"{t.name}: {t.summary}" for t in TEMPORAL_TERMS.values() if t.joint)
    return (f"Time series: a temporal term joining the frames, solved together ({terms}); none reconstructs each "
            f"frame as one image.")


def lam_help() -> str:
    """The help of ``--temporal-lambda``: each penalty's default weight."""
    defaults = ", ".join(f"{t.name} {t.lam_default:g}" for t in TEMPORAL_TERMS.values() if t.joint and not t.subspace)
    return f"Temporal term weight relative to max |A^H W d| over all frames (default: {defaults})."


def temporal_names() -> tuple[str, ...]:
    """The temporal terms' names."""
    return tuple(TEMPORAL_TERMS)


def temporal_term(name: str) -> TemporalTerm:
    """The temporal term called ``name``; :class:`~mri_recon.errors.InvalidDataError` listing the others."""
    found = TEMPORAL_TERMS.get(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidDataError(f"temporal must be one of {', '.join(temporal_names())}, found {name!r}")
    return found
