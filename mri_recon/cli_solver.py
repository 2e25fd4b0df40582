"""The options of ``mri-recon reconstruct`` that set the solver (one place for the single-scan command and
batches): iterations, the regularizer and its weights, the stopping tolerance, the post-filter, the
off-resonance correction and the engine.

:func:`solver_options` adds them to a command, which receives them in ``**solver``; :func:`solver_settings`
turns those into the keyword arguments of :func:`mri_recon.pipeline.reconstruct`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import click

from .solvers.sparse import lam_help


def finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Refuse NaN and infinity for a float option, naming the option (click's ranges let NaN through)."""
    del ctx
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number, found {value}", param=param)
    return value


OPTIONS = [
    click.option("--iterations", type=click.IntRange(1, 10000), default=30, show_default=True,
                 help="Maximum CG iterations (tv, wavelet: outer iterations)."),
    click.option("--lambda", "lam", type=click.FloatRange(min=0.0), default=None, callback=finite,
                 help="Regularization weight. l2: relative to the largest diagonal entry of the normal operator "
                      "(max over voxels of sum_c |S_c|^2 times the sum of the weights); tv, wavelet: relative to "
                      "max |A^H W d|. Default: the regularizer's (" + lam_help() + ")."),
    click.option("--regularizer", type=click.Choice(["l2", "tv", "wavelet"]), default="l2", show_default=True,
                 help="l2 (Tikhonov, CG), tv (total variation, ADMM) or wavelet (l1 of db4 wavelets, FISTA)."),
    click.option("--inner-iterations", type=click.IntRange(1, 1000), default=None,
                 help="ADMM (tv, or wavelet with --solver admm): CG steps per x-update (default 1 with density "
                      "weights, 5 without)."),
    click.option("--rho", type=click.FloatRange(min=0.0, min_open=True), default=None, callback=finite,
                 help="ADMM penalty, relative like the l2 lambda (default 1 with density weights, 0.3 without)."),
    click.option("--anisotropic", is_flag=True, help="tv: anisotropic total variation (sum of |differences|)."),
    click.option("--solver", type=click.Choice(["admm", "fista"]), default=None,
                 help="wavelet: admm or fista (default fista); tv: admm."),
    click.option("--tol", type=click.FloatRange(min=0.0), default=1e-6, show_default=True, callback=finite,
                 help="l2: stop when the relative CG residual falls below this (tv and wavelet run every "
                      "iteration)."),
    click.option("--filter-sigma", type=click.FloatRange(min=0.0, min_open=True), default=None, callback=finite,
                 help="Gaussian post-filter width in voxels (off by default)."),
    click.option("--field-map-correction", type=click.Choice(["auto", "exact", "segmented"]), default="auto",
                 show_default=True, help="With a field map: exact, segmented (time segmentation) or auto."),
    click.option("--segments", type=click.IntRange(min=1), default=None,
                 help="Time segments L (default: the fewest with interpolation error <= 1e-3)."),
    click.option("--method", type=click.Choice(["auto", "exact", "nufft"]), default="auto", show_default=True,
                 help="F^H d and PSF engine: exact sums, NUFFT (GPU NUFFT or CPU FINUFFT), or auto (the faster "
                      "one on a GPU by a cost model; FINUFFT on the CPU). The output records the engine used."),
]

SETTINGS = ("iterations", "lam", "regularizer", "inner_iterations", "rho", "anisotropic", "solver", "tol",
            "filter_sigma", "field_map_correction", "segments", "method")
"""The parameter names of :data:`OPTIONS`, as :func:`mri_recon.pipeline.reconstruct` takes them."""


def solver_options(func: Callable) -> Callable:
    """Add :data:`OPTIONS` to a click command, in that order, and the time-series options (:mod:`.cli_temporal`)."""
    from .cli_temporal import reconstruct_options  # noqa: PLC0415 - a module of its own

    for option in reversed(OPTIONS):
        func = option(func)
    return reconstruct_options(func)


def simulate_options(func: Callable) -> Callable:
    """The time-series options of ``simulate`` (:mod:`.cli_temporal`)."""
    from .cli_temporal import simulate_options as add  # noqa: PLC0415 - a module of its own

    return add(func)


def solver_settings(params: Mapping[str, Any]) -> dict[str, Any]:
    """The solver keyword arguments among a command's ``params``."""
    return {name: params[name] for name in SETTINGS if name in params}
