"""Compressed sensing on the Toeplitz normal operator: total variation and l1-wavelet regularization.

``solve_sparse`` minimizes ``||W^(1/2) (A x - d)||^2 + lam R(x)`` given what the pipeline already built:
the kernel spectrum of ``A^H W A`` (maps applied on the fly), the right-hand side ``b = A^H W d`` and
``d^H W d``. ``R`` is

- ``"tv"``: isotropic total variation ``sum_i ||(D x)_i||_2`` over the image axes (anisotropic: ``sum |D_a x|``);
- ``"wavelet"``: ``||Psi x||_1`` with ``Psi`` the orthogonal ``db4`` transform (every coefficient);

each an object of the registry :mod:`.regularizers` (one module each), which states its transform, its
solvers and its default lambda.

Solvers: ADMM (:mod:`.admm`) for both, FISTA (:mod:`.fista`) for wavelets (the default there). Images with a
leading batch axis (per-coil images without maps) are regularized image by image.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..arrays.backend import get_xp
from ..errors import InvalidDataError, listed
from ..operators.normal.toeplitz import normal_operator
from .admm import Callback, Sparsity
from .cg import inner
from .registry import SparseProblem
from .registry import solver as solver_of
from .regularizers import names, registry
from .regularizers import regularizer as find


class _LamDefaults(Mapping):
    """Each regularizer's ``lam_default``, read from the registry at each access."""

    def __getitem__(self, name: str) -> dict[bool, float]:
        if name not in registry():
            raise KeyError(name)
        return registry()[name].lam_default

    def __iter__(self) -> Iterator[str]:
        return iter(names())

    def __len__(self) -> int:
        return len(registry())


LAM_DEFAULTS: Mapping[str, dict[bool, float]] = _LamDefaults()
"""The ``lam`` of each regularizer when none is given (``lam=None``; CLI: no ``--lambda``), for a scan with
density weights (True) and without (False). ``l2``: relative to the normal operator's peak, 1e-3 as it always
was. ``tv`` and ``wavelet``: relative to ``max |A^H W d|``, the lambda of lowest NRMSE on 4x undersampled
128^2 radial phantoms with 8 coils at SNR 10, 30 and 100 (``scripts/cs_lambda_table.py``, the table in
docs/compressed_sensing.md), with Pipe-Menon weights and without. Without weights ``A^H A`` is far from a
multiple of the identity (the centre of k-space dominates), so TV's best lambda is smaller there (hence its two
defaults); the wavelets' one default is close to the best either way (docs/compressed_sensing.md)."""


def resolve_lam(regularizer: str, lam: float | None, weighted: bool = True) -> float:
    """``lam`` itself, or for None the default of ``regularizer`` for a scan with (``weighted``) or without
    density weights (:data:`LAM_DEFAULTS`): the one place a default lambda is chosen (the library, the CLI
    and batches pass None on).

    Raises
    ------
    InvalidDataError
        An unknown regularizer, or a lambda that is not a finite number >= 0.
    """
    chosen = find(regularizer)
    if lam is None:
        return chosen.lam_default[bool(weighted)]
    if not math.isfinite(lam):
        raise InvalidDataError(f"lam must be a finite number, found {lam}")
    if lam < 0:
        raise InvalidDataError(f"lam must be >= 0, found {lam}")
    return float(lam)


def lam_help() -> str:
    """The defaults of :data:`LAM_DEFAULTS` in words (for the CLI's help)."""
    parts = []
    for name, by_weights in LAM_DEFAULTS.items():
        if by_weights[True] == by_weights[False]:
            parts.append(f"{name} {by_weights[True]:g}")
        else:
            parts.append(f"{name} {by_weights[True]:g} with density weights, {by_weights[False]:g} without")
    return "; ".join(parts)


def default_solver(regularizer: str) -> str:
    """The solver used when none is named (the regularizer's ``default_solver``): ADMM for TV, FISTA for
    wavelets, whose proximal map is exact and which reached the optimum far sooner per normal-operator product
    (docs/compressed_sensing.md)."""
    return find(regularizer).default_solver


def sparsity_of(regularizer: str, shape: tuple[int, ...], ndim: int, *,
                anisotropic: bool = False) -> tuple[Sparsity, Any]:
    """The :class:`~.admm.Sparsity` of ``regularizer`` for images of ``shape`` (``ndim`` image axes), and its
    orthogonal transform (None for TV): :meth:`.regularizers.Regularizer.sparsity`."""
    chosen = find(regularizer)
    if not chosen.sparse:
        raise InvalidDataError(f"regularizer must be one of {', '.join(sparse_names())} here, found {regularizer!r}")
    return chosen.sparsity(shape, ndim, anisotropic=anisotropic)


def sparse_names() -> list[str]:
    """The sparse regularizers' names (ADMM or FISTA; the others run CG)."""
    return [r.name for r in registry().values() if r.sparse]


def solver_names() -> tuple[str, ...]:
    """Every solver a sparse regularizer may run (``admm``, ``fista``), in the registry's order."""
    return tuple(dict.fromkeys(name for r in registry().values() if r.sparse for name in r.solvers))


def dense_names() -> list[str]:
    """The names of the regularizers CG solves (Tikhonov)."""
    return [r.name for r in registry().values() if not r.sparse]


def regularizer_help() -> str:
    """The regularizers with what each is (``--regularizer``'s help)."""
    return listed(f"{r.name} ({r.help})" if r.help else r.name for r in registry().values()) + "."


def solver_help() -> str:
    """The solvers of each sparse regularizer and its default (``--solver``'s help)."""
    parts = [f"{r.name}: {listed(r.solvers)}" + (f" (default {r.default_solver})" if len(r.solvers) > 1 else "")
             for r in registry().values() if r.sparse]
    return "; ".join(parts) + "."


def penalty_help() -> str:
    """The regularizers that run a solver with a penalty (ADMM), and when: ``"tv, wavelet with --solver admm"``."""
    parts = []
    for r in registry().values():
        takes = [name for name in r.solvers if solver_of(name).penalty]
        if takes:
            parts.append(r.name if solver_of(r.default_solver).penalty else
                         f"{r.name} with --solver {listed(takes)}")
    return ", ".join(parts)


def solve_sparse(spectrum: Any, maps: Any, rhs: Any, *, regularizer: str, lam: float, rho: float,
                 iterations: int, inner_iterations: int, data_energy: float, coil_batch: int | None = None,
                 anisotropic: bool = False, solver: str | None = None, callback: Callback | None = None,
                 check_every: int = 10, normal: Callable[[float], Any] | None = None
                 ) -> tuple[Any, tuple[float, ...], str]:
    """Minimize ``||W^(1/2) (A x - d)||^2 + lam R(x)`` (``R`` named by ``regularizer``).

    Parameters
    ----------
    spectrum, maps, coil_batch
        As for :func:`mri_recon.operators.normal.toeplitz.normal_operator` (maps None: ``rhs`` has a batch axis).
    rhs
        ``A^H W d``: ``matrix``, or ``(C, *matrix)`` without maps.
    lam, rho
        Absolute weights in the problem's units (the pipeline makes them from relative ones).
    iterations, inner_iterations
        Outer iterations; CG steps per ADMM x-update (unused by FISTA).
    data_energy
        ``d^H W d`` (for the relative objective).
    anisotropic
        TV only: ``sum_a |D_a x|`` instead of ``sum ||D x||_2``.
    solver
        ``"admm"`` or (wavelets) ``"fista"``; None: :func:`default_solver`.
    normal
        ``lam -> A^H W A + lam I`` (the engine's Toeplitz operator on this spectrum and these maps:
        ``Encoding.toeplitz_normal``); None: :func:`~mri_recon.operators.normal.toeplitz.normal_operator`.

    Returns
    -------
    x, history, solver
        The solution, the relative objective at the checks and the solver used.
    """
    if regularizer not in sparse_names():
        raise InvalidDataError(f"regularizer must be {' or '.join(map(repr, sparse_names()))} here, found "
                               f"{regularizer!r}")
    solver = _check_solver(regularizer, solver, anisotropic)
    ndim = spectrum.ndim
    if normal is None:
        def normal(lam: float) -> Any:
            return normal_operator(spectrum, coil_maps=maps, lam=lam, coil_batch=coil_batch)
    sparsity, psi = sparsity_of(regularizer, tuple(rhs.shape), ndim, anisotropic=anisotropic)
    chosen = find(regularizer)
    problem = SparseProblem(normal, rhs, sparsity, psi, lambda mu: chosen.x_update(normal, mu, ndim), lam=lam,
                            rho=rho, iterations=iterations, inner_iterations=inner_iterations,
                            data_energy=data_energy, callback=callback, check_every=check_every)
    x, history = solver_of(solver).run(problem)
    return x, history, solver


def _check_solver(regularizer: str, solver: str | None, anisotropic: bool) -> str:
    """The solver of a tv or wavelet regularizer (None: :func:`default_solver`), refused when it or
    ``anisotropic`` does not apply."""
    solver = solver or default_solver(regularizer)
    solvers = find(regularizer).solvers
    if solver not in solvers:
        raise InvalidDataError(f"solver for {regularizer} must be one of {', '.join(solvers)}, found {solver!r}")
    if anisotropic and not find(regularizer).anisotropic:
        raise InvalidDataError("anisotropic applies to total variation only")
    return solver


ADMM_DEFAULTS = {True: (1.0, 1), False: (0.3, 5)}
"""ADMM's ``(rho, inner_iterations)`` with density weights (True) and without (False); rho relative to the
peak of the normal operator like Tikhonov's ``lam``. Measured (docs/compressed_sensing.md): with density
weights the x-update is well conditioned and one CG step per iteration reaches a given objective with the
fewest operator products; without them the system is dominated by the centre of k-space and needs about
five steps, with a smaller penalty."""


def check_sparse(regularizer: str, rho: float | None, inner_iterations: int | None, anisotropic: bool,
                 solver: str | None, weighted: bool = True, matrix: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Validate the regularization settings of :func:`mri_recon.reconstruct`; ``{}`` for ``"l2"`` (plain
    CG), else the keyword arguments of :func:`solve_regularized`. ``rho`` and ``inner_iterations`` None:
    :data:`ADMM_DEFAULTS` for a scan with (``weighted``) or without density weights. With ``matrix``, a
    wavelet regularizer is refused here (before any work) when the matrix has no wavelet level."""
    chosen = find(regularizer)
    if not chosen.sparse:
        if anisotropic or solver not in (None, *chosen.solvers) or rho is not None or inner_iterations is not None:
            raise InvalidDataError(f"rho, inner_iterations, anisotropic and solver apply to the "
                                   f"{listed(sparse_names(), 'and')} regularizers, not {regularizer}")
        return {}
    if rho is not None and not (math.isfinite(rho) and rho > 0):
        raise InvalidDataError(f"rho must be a positive finite number, found {rho}")
    if inner_iterations is not None and int(inner_iterations) < 1:
        raise InvalidDataError(f"inner_iterations must be >= 1, found {inner_iterations}")
    solver = _check_solver(regularizer, solver, anisotropic)
    if not solver_of(solver).penalty:
        takes = listed((s for s in chosen.solvers if solver_of(s).penalty), quote=True)
        if rho is not None:
            raise InvalidDataError(f"rho is ADMM's penalty; {regularizer} runs {solver} (choose solver {takes} to "
                                   f"set it)")
        if inner_iterations is not None:
            raise InvalidDataError(f"inner_iterations are ADMM's CG steps; {regularizer} runs {solver} (choose "
                                   f"solver {takes} to set them)")
    if matrix is not None:
        chosen.check(tuple(matrix))  # e.g. a wavelet regularizer refuses a matrix without a wavelet level
    auto_rho, auto_inner = ADMM_DEFAULTS[bool(weighted)]
    return {"regularizer": regularizer, "rho": auto_rho if rho is None else float(rho),
            "inner_iterations": auto_inner if inner_iterations is None else int(inner_iterations),
            "anisotropic": bool(anisotropic), "solver": solver}


def data_energy(kspace: Any, weighted: Any, data_scale: float) -> float:
    """``d^H W d`` in the problem's units, from the k-space and ``weighted = W d / data_scale``."""
    return inner(kspace, weighted).real / data_scale


def solve_regularized(spectrum: Any, maps: Any, rhs: Any, lam: float, peak: float, energy: float,
                      iterations: int, coil_batch: int | None, callback: Callback | None, *, regularizer: str,
                      rho: float, inner_iterations: int, anisotropic: bool, solver: str,
                      normal: Callable[[float], Any] | None = None,
                      **solver_options: Any) -> tuple[Any, tuple[float, ...], dict[str, Any]]:
    """The pipeline's regularized solve with dimensionless weights: ``lam_abs = lam * max|A^H W d|`` and
    ``rho_abs = rho * peak`` (``peak``: the normal operator's largest diagonal entry); ``solver_options``
    (the settings marked for the solver, e.g. ``check_every``) go to :func:`solve_sparse` as they are.

    Returns the solution, the relative objective history and the parameters to record (``lam_abs`` in the
    problem's units, for the caller to convert).
    """
    xp = get_xp(rhs)
    lam_abs = lam * float(xp.abs(rhs).max())
    x, history, used = solve_sparse(spectrum, maps, rhs, regularizer=regularizer, lam=lam_abs, rho=rho * peak,
                                    iterations=iterations, inner_iterations=inner_iterations, data_energy=energy,
                                    coil_batch=coil_batch, anisotropic=anisotropic, solver=solver,
                                    callback=callback, normal=normal, **solver_options)
    penalty = solver_of(used).penalty
    record = {"regularizer": regularizer, "solver": used, "lam_abs": lam_abs, "rho": rho if penalty else None,
              "inner_iterations": inner_iterations if penalty else None,
              "anisotropic": anisotropic if find(regularizer).anisotropic else None, "objective": float(history[-1])}
    return x, history, record
