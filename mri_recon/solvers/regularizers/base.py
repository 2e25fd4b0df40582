"""The regularizer protocol: what a solver needs of ``R`` in ``min ||W^(1/2) (A x - d)||^2 + lam R(x)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from ..admm import Sparsity

Normal = Callable[[float], Any]
"""``mu -> A^H W A + mu I``: the engine's Toeplitz normal operator with an identity shift."""


class Regularizer:
    """One regularizer. A sparse one states ``R(x) = ||K x||_1`` (or a sum of group norms) through
    :meth:`sparsity` (``K``, ``K^H``, ``K^H K``) and the operator of ADMM's x-update (:meth:`x_update`);
    ``l2`` (Tikhonov, solved by CG on ``A^H W A + lam I``) has no ``K``."""

    name: ClassVar[str] = "?"
    """What users write (``regularizer=``, ``--regularizer``)."""
    help: ClassVar[str] = ""
    """What it is and its default solver, in the command line's help (``"total variation, ADMM"``)."""
    label: ClassVar[str] = ""
    """What the progress bar calls its iterations (default: :attr:`name`)."""
    lam_default: ClassVar[dict[bool, float]] = {}
    """Dimensionless ``lam`` when none is given, for a scan with density weights (True) and without (False)."""
    sparse: ClassVar[bool] = True
    """False: Tikhonov (plain CG); True: ADMM or FISTA on :meth:`sparsity`."""
    solvers: ClassVar[tuple[str, ...]] = ("admm",)
    """The solvers that may run it."""
    default_solver: ClassVar[str] = "admm"
    anisotropic: ClassVar[bool] = False
    """Whether the ``anisotropic`` option applies."""
    orthogonal: ClassVar[bool] = False
    """Whether ``K`` is orthogonal (``K^H K = I``): FISTA's proximal map is then exact, and ADMM's x-update
    operator is ``A^H W A + rho I``."""

    def norm_squared(self, ndim: int) -> float:
        """An upper bound on ``||K||^2`` for images of ``ndim`` axes (the primal-dual steps of a time series):
        1 for an orthogonal ``K``."""
        del ndim
        return 1.0

    def check(self, matrix: tuple[int, ...]) -> None:
        """Refuse a matrix the regularizer cannot serve, before any work (default: every matrix)."""

    def sparsity(self, shape: tuple[int, ...], ndim: int, *, anisotropic: bool = False) -> tuple[Sparsity, Any]:
        """The :class:`~mri_recon.solvers.admm.Sparsity` for images of ``shape`` (``ndim`` image axes), and the
        orthogonal transform ``K`` for FISTA (None when ``K`` is not orthogonal)."""
        raise NotImplementedError(f"{self.name} has no sparsifying transform")

    def x_update(self, normal: Normal, rho: float, ndim: int) -> Any:
        """ADMM's x-update operator ``A^H W A + rho K^H K``; for an orthogonal ``K`` it is ``normal(rho)``."""
        return normal(rho)
