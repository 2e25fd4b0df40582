"""The options of BART ``.cfl`` input (``reconstruct`` and ``convert``): ``--trajectory``, ``--sensitivities``
and ``--matrix``, turned into the keyword arguments of :func:`mri_recon.io.cfl_scan.load_cfl_scans`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import click

from .units import TRAJ_UNITS

OPTIONS = [
    click.option("--trajectory", "bart_trajectory", type=click.Path(path_type=Path), default=None,
                 help="BART input: the trajectory (3, RO, SPOKES) .cfl of SCAN's k-space (1, RO, SPOKES, COILS)."),
    click.option("--sensitivities", "bart_sensitivities", type=click.Path(path_type=Path), default=None,
                 help="BART input: coil sensitivities (X, Y, Z, COILS) .cfl; they give the matrix."),
    click.option("--matrix", "bart_matrix", default=None,
                 help="BART input without --sensitivities: the image size NxM or NxMxK."),
]


def BART_INPUT(func: Callable) -> Callable:  # noqa: N802 - a decorator named like the other option groups
    """Add :data:`OPTIONS` to a click command."""
    for option in reversed(OPTIONS):
        func = option(func)
    return func


def trajectory_options(help: str, *, bart: bool = True) -> Callable:  # noqa: A002 - click's word
    """``--traj-units`` (:data:`~mri_recon.units.TRAJ_UNITS`) with this help, and with ``bart`` the
    :data:`OPTIONS` of BART input."""

    def decorate(func: Callable) -> Callable:
        func = BART_INPUT(func) if bart else func
        return click.option("--traj-units", type=click.Choice(TRAJ_UNITS), default="auto", show_default=True,
                            help=help)(func)

    return decorate


def parse_matrix(text: str) -> tuple[int, ...]:
    """``"128x96"`` / ``"64,64,32"`` as sizes; :class:`click.BadParameter` otherwise."""
    parts = [p for p in text.replace("x", ",").split(",") if p.strip()]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise click.BadParameter(f"expected NxM or NxMxK, got {text!r}", param_hint="--matrix") from None
    if len(values) not in (2, 3):
        raise click.BadParameter(f"expected NxM or NxMxK, got {text!r}", param_hint="--matrix")
    return values


def bart_options(scan: Path, params: dict) -> dict:
    """Pop the BART options from a command's ``params``; the keyword arguments for ``scan`` (none when it is
    not a BART file; a BART option given for another scan is refused, :func:`~mri_recon.io.cfl_scan.cfl_options`)."""
    from .io.cfl_scan import cfl_options  # noqa: PLC0415 - on use

    matrix = params.pop("bart_matrix", None)
    return cfl_options(scan, params.pop("bart_trajectory", None), params.pop("bart_sensitivities", None),
                       None if matrix is None else parse_matrix(matrix))


def converter(source: Path, params: dict, convert: Callable) -> Callable:
    """``convert`` (the ISMRMRD one), or for BART input :func:`mri_recon.io.cfl_scan.convert_cfl` with the
    BART options of ``params``."""
    from .io.cfl_scan import convert_cfl  # noqa: PLC0415 - on use

    bart = bart_options(source, params)
    return functools.partial(convert_cfl, **bart) if bart else convert
