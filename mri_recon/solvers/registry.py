"""The solvers, one registry: :data:`SOLVERS`, what each is called, which options it takes and how it runs.

A regularizer names the solvers that may run it (:attr:`~.regularizers.base.Regularizer.solvers`); a sparse
one is solved by the solver's :attr:`Solver.run` (:func:`mri_recon.solvers.sparse.solve_sparse`), a time
series' joint problem by its :attr:`Solver.joint` (ADMM and PDHG, :mod:`mri_recon.solvers.temporal`). ``cg``
runs the Tikhonov problem on the normal equations (the pipeline's CG stage). Nothing else compares solver
names: it asks the record (``solver(name).penalty``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidDataError
from .admm import Callback, Sparsity, admm


@dataclass(frozen=True)
class SparseProblem:
    """What a sparse solve is given: ``min ||W^(1/2) (A x - d)||^2 + lam R(K x)`` in the problem's units."""

    normal: Callable[[float], Any]
    """``mu -> A^H W A + mu I``."""
    rhs: Any
    """``A^H W d``."""
    sparsity: Sparsity
    """``K``, ``K^H`` and ``K^H K`` (:class:`~mri_recon.solvers.admm.Sparsity`)."""
    transform: Any
    """``K`` as an orthogonal operator (wavelets), None when ``K`` is not orthogonal."""
    x_update: Callable[[float], Any]
    """``rho -> A^H W A + rho K^H K``: ADMM's x-update operator."""
    lam: float
    rho: float
    iterations: int
    inner_iterations: int
    data_energy: float
    callback: Callback | None = None
    check_every: int = 10


def _admm(problem: SparseProblem) -> tuple[Any, tuple[float, ...]]:
    return admm(problem.x_update(problem.rho), problem.rhs, problem.sparsity, lam=problem.lam, rho=problem.rho,
                iterations=problem.iterations, inner_iterations=problem.inner_iterations,
                data_energy=problem.data_energy, callback=problem.callback, check_every=problem.check_every)


def _fista(problem: SparseProblem) -> tuple[Any, tuple[float, ...]]:
    from .fista import fista  # noqa: PLC0415 - loaded on use

    return fista(problem.normal(0.0), problem.rhs, problem.transform, lam=problem.lam,
                 iterations=problem.iterations, data_energy=problem.data_energy, callback=problem.callback,
                 check_every=problem.check_every)


def _joint_admm(normals: Any, rhs: Any, terms: Any, *, rho: float, inner_iterations: int,
                **common: Any) -> tuple[Any, tuple[float, ...]]:
    from .temporal import joint_admm  # noqa: PLC0415 - time series only

    return joint_admm(normals, rhs, terms, rho=rho, inner_iterations=inner_iterations, **common)


def _joint_pdhg(normals: Any, rhs: Any, terms: Any, *, rho: float | None, inner_iterations: int | None,
                **common: Any) -> tuple[Any, tuple[float, ...]]:
    from .temporal import joint_pdhg  # noqa: PLC0415 - time series only

    del rho, inner_iterations  # ADMM's; refused for this solver by the settings' check
    return joint_pdhg(normals, rhs, terms, **common)


@dataclass(frozen=True)
class Solver:
    """One solver."""

    name: str
    """What users write (``solver=``, ``--solver``)."""
    label: str
    """Its name in prose and in the progress bar."""
    penalty: bool = False
    """Takes ADMM's penalty ``rho`` and its CG steps per x-update (``inner_iterations``)."""
    run: Callable[[SparseProblem], tuple[Any, tuple[float, ...]]] | None = None
    """``problem -> (x, objective history)`` for a sparse regularizer; None: not a sparse solver here."""
    joint: Callable[..., tuple[Any, tuple[float, ...]]] | None = None
    """``(normals, rhs, terms, *, rho, inner_iterations, iterations, data_energy, callback) -> (frames,
    objective history)``: a time series' joint problem with a temporal term (:mod:`.temporal`); None: not a
    joint solver."""


SOLVERS: dict[str, Solver] = {s.name: s for s in (
    Solver("cg", "CG"),
    Solver("admm", "ADMM", penalty=True, run=_admm, joint=_joint_admm),
    Solver("fista", "FISTA", run=_fista),
    Solver("pdhg", "PDHG", joint=_joint_pdhg),
)}
"""Every solver by name."""


def joint_names() -> tuple[str, ...]:
    """The solvers of a time series' joint problem (``temporal_solver=``), the default first."""
    return tuple(name for name, s in SOLVERS.items() if s.joint is not None)


def solver(name: str) -> Solver:
    """The solver called ``name``; :class:`~mri_recon.errors.InvalidDataError` listing them."""
    found = SOLVERS.get(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidDataError(f"solver must be one of {', '.join(SOLVERS)}, found {name!r}")
    return found
