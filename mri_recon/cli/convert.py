"""``mri-recon convert``: an ISMRMRD file to schema v1, one file per image; BART k-space to MRD or schema v1."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import OutputError
from ..settings import ReconSettings
from .common import QUIET, friendly, say
from .options import settings_from, settings_option


@click.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("output", type=click.Path(path_type=Path))
@settings_option("traj_units", help="Units of the ISMRMRD / BART trajectory.")
@settings_option("trajectory")
@settings_option("sensitivities")
@settings_option("matrix")
@settings_option("choice", verb="convert")
@settings_option("allow_external")
@QUIET
@friendly
def convert(source: Path, output: Path, quiet: bool, **options: Any) -> None:
    """Convert SOURCE to MRD raw data (OUTPUT ending .mrd.h5 or .mrd: every image in one file) from any input
    (schema v1, ISMRMRD, Siemens twix, BART .cfl), or to schema v1 from ISMRMRD (one OUTPUT file per image:
    slice, contrast, phase, set and repetition; the indices that vary are appended to OUTPUT's name) or BART
    .cfl (one image)."""
    from ..io.files import same_file
    from ..io.schema import check_scan_name

    settings = settings_from(options)
    if any(same_file(output, path) for path in settings.read_paths(source)):  # a BART file: its pair too
        raise OutputError(f"{output}: output would overwrite the input file; choose another path")
    check_scan_name(output)
    run, keywords = _converter(source, output, settings)
    for path in run(source, output, **keywords):
        say(quiet, f"wrote {path}")


def _converter(source: Path, output: Path, settings: ReconSettings) -> tuple[Callable[..., list], dict[str, Any]]:
    """The converter of ``source`` (BART's for a .cfl pair, else the ISMRMRD one) and its keywords: the reader
    keywords, BART's refused for another input (:func:`mri_recon.io.readers.reader_options`)."""
    from ..io.readers import reader_of, reader_options

    keywords = settings.reader_keywords()
    allow_external = keywords.pop("allow_external")
    reader, _ = reader_of(source, allow_external)
    keywords = {**reader_options(reader, source, keywords), "allow_external": allow_external}
    if reader.name == "cfl":
        from ..io.cfl_scan import convert_cfl

        return convert_cfl, keywords
    from ..io.convert import convert_to_mrd, refuse_schema_output
    from ..io.ismrmrd_write import convert as run
    from ..io.mrd_image import is_mrd_name

    if is_mrd_name(output):
        return convert_to_mrd, keywords
    if reader.name != "ismrmrd":
        return functools.partial(refuse_schema_output, reader=reader.name), keywords
    return run, keywords
