"""``mri-recon convert``: an ISMRMRD file to schema v1, one file per image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import OutputError
from ..io.stack import DIMENSIONS
from .common import QUIET, friendly, say
from .options import settings_option


@click.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("output", type=click.Path(path_type=Path))
@settings_option("traj_units", help="Units of the ISMRMRD trajectory.")
@settings_option("choice", verb="convert")
@settings_option("allow_external")
@QUIET
@friendly
def convert(source: Path, output: Path, traj_units: str, allow_external: bool, quiet: bool, **choice: Any) -> None:
    """Convert an ISMRMRD file SOURCE to schema v1 (one OUTPUT file per image: slice, contrast, phase, set
    and repetition; the indices that vary are appended to OUTPUT's name)."""
    from ..io.files import same_file
    from ..io.ismrmrd_write import convert as run

    if same_file(source, output):
        raise OutputError(f"{output}: output would overwrite the input file; choose another path")
    for path in run(source, output, traj_units=traj_units, allow_external=allow_external,
                    **{name: choice[f"{name}_"] for name in DIMENSIONS}):
        say(quiet, f"wrote {path}")
