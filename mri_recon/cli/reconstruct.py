"""``mri-recon reconstruct``: one scan file through :func:`mri_recon.api.reconstruct_file` (or a batch,
:mod:`.batch`), with the checks before any work, the progress bar, the PNG preview, the JSON log and the
result line."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from ..batch.inputs import output_name
from ..settings import ReconSettings
from ..solvers.registry import solver as solver_of
from ..solvers.regularizers import regularizer as regularizer_of
from . import STARTED
from .batch import batch_options, is_batch, run_batch
from .common import check_log_json, check_outputs, friendly, is_pipe, say
from .hooks import ProgressHooks
from .options import settings_from, settings_options
from .temporal import reconstruct_options

log = logging.getLogger("mri_recon.cli")


@click.command()
@click.argument("scans", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Several scans: the output folder (default: beside each scan). One scan: the output file: "
                   "NIfTI for .nii / .nii.gz, MRD images for .mrd.h5 / .mrd, HDF5 for .h5 / .hdf5, BART for .cfl "
                   "(--format dicom: the series folder); another extension is refused unless --format is given "
                   "(default: SCAN's name with .recon.h5, or .recon.nii.gz / .recon.mrd.h5 with --format, beside it).")
@settings_options("output", "solve", "device")
@click.option("--png", type=click.Path(path_type=Path), default=None,
              help="Also write a PNG preview (.png): the image, or a montage of a stack's images or a 3D "
                   "image's slices.")
@click.option("--png-axis", type=click.IntRange(0, 2), default=2, show_default=True,
              help="3-D images: the PNG montage shows the slices across this axis.")
@settings_options("prepare", "input", "cache", "access")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no result line (errors only).")
@click.option("-v", "--verbose", count=True, help="Show the log on stderr: -v stages and timings, -vv iterations too.")
@click.option("--log-json", type=click.Path(path_type=Path), default=None,
              help="Write the run's settings, engine, stages, timings and residuals to this JSON file.")
@batch_options
@reconstruct_options
@friendly
def reconstruct(scans: tuple[Path, ...], output: Path | None, png: Path | None, png_axis: int, quiet: bool,
                verbose: int, log_json: Path | None, workers: int | None, scheduler: str | None,
                **options: Any) -> None:
    """Reconstruct SCANS (schema-v1 HDF5 or ISMRMRD: files, folders or 'patterns*.h5') into image files.

    The images of an ISMRMRD file (every slice, contrast, phase, set and repetition, or those chosen) are
    reconstructed one by one and arranged on named leading axes of the HDF5 image, in that order (attribute
    `axes`); a NIfTI image has them on its 4th axis, MRD output one image record each. Several scans, a
    folder or a pattern run as a batch (one output each in -o OUTDIR, failures reported, complete outputs
    skipped), on a Dask cluster with --workers or --scheduler.
    """
    del options  # the settings, read from the context with the others
    ctx = click.get_current_context()
    if png is None and ctx.get_parameter_source("png_axis") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--png-axis chooses the slices of the --png montage; give --png FILE.png too")
    if is_pipe(scans):  # reconstruct - -o -: an MRD stream on stdin, its images on stdout (.serve)
        from .serve import run_pipe

        return run_pipe(ctx)
    if is_batch(scans, workers, scheduler):
        return run_batch(ctx.params)
    from .console import typed_settings

    if quiet and verbose:
        raise click.UsageError("--quiet and --verbose contradict each other; give one")
    logged = typed_settings(ctx.command, ctx.params, leave=("quiet", "verbose"))
    settings = settings_from(ctx.params)
    output = _output_path(scans[0], output, settings.format)
    checked = _checked(scans[0], output, png, log_json, settings)
    reconstruct_one(scans[0], output, settings, png=png, png_axis=png_axis, quiet=quiet, verbose=verbose,
                    log_json=log_json, logged=logged, values=checked)
    return None


def _output_path(scan: Path, output: Path | None, format: str | None) -> Path:
    """``-o``: a file; an existing folder (but a DICOM series, which is a folder itself) holds
    ``NAME.recon.h5`` as a batch's OUTDIR does; none: that name beside the scan."""
    if output is None:
        return scan.with_name(output_name(scan, format))
    try:
        folder = format != "dicom" and output.is_dir()
    except OSError:  # a name the system cannot look up (too long): the output checks say so
        folder = False
    return output / output_name(scan, format) if folder else output


def _checked(scan: Path, output: Path, png: Path | None, log_json: Path | None, settings: ReconSettings) -> str:
    """Refuse before any work what cannot be written; returns what the output will hold."""
    from ..io.writers import output_format, output_values

    inputs = settings.read_paths(scan)
    check_outputs(inputs, output, png, settings.format)
    check_log_json(inputs, log_json, output, png, settings.format)
    chosen = output_format(output, settings.format)  # a name of no output format: refused before work
    return output_values(chosen, complex_=settings.complex_, magnitude=settings.magnitude)


def reconstruct_one(scan: Path, output: Path, settings: ReconSettings, *, png: Path | None, png_axis: int,
                    quiet: bool, verbose: int, log_json: Path | None, logged: dict, values: str) -> None:
    """Reconstruct one scan file into ``output`` (and ``png``, ``log_json``), then print the result line."""
    from ..api import reconstruct_file
    from ..io.writers import OUTPUTS, output_format
    from .console import cli_logging, run_log, write_run_log

    chosen = OUTPUTS[output_format(output, settings.format)]
    with cli_logging(verbose, quiet):
        started = time.perf_counter()
        run = ProgressHooks(scan, chosen, settings, quiet)
        try:
            done = reconstruct_file(scan, output, settings, progress=run, on_load=run.loaded,
                                    on_image=run.image, on_done=run.close)
        finally:
            run.close()
        inputs = settings.read_paths(scan)
        shown = "" if png is None else f" and {png} ({write_preview(png, done.results, png_axis, inputs)})"
        seconds = time.perf_counter() - started
        if log_json is not None:
            write_run_log(log_json, run_log({**logged, "output": output}, done.results, seconds), protect=inputs)
    say(quiet, result_line(output, done.written, chosen.describe(values), shown, log_json, done.results,
                           settings.regularizer, seconds))


def write_preview(png: Path, results: list, axis: int, inputs: tuple) -> str:
    """Write the PNG preview of ``results`` (never over one of the run's ``inputs``); returns what it shows."""
    from ..io.png import write_png

    images = [r.image for _, _, _, r in results]
    return write_png(png, images[0] if len(images) == 1 else np.stack(images), stacked=len(images) > 1,
                     axis=axis, protect=inputs)


def result_line(output: Path, written: list[Path], what: str, shown: str, log_json: Path | None, results: list,
                regularizer: str, seconds: float) -> str:
    """``wrote OUT (HDF5): 1 image(s), 30 CG iterations, final residual ..., ENGINE on DEVICE, S s``."""
    from .console import compress_summary, delay_summary, truth_summary

    last = results[-1][3]
    chosen = regularizer_of(regularizer)
    solved = (f"{regularizer} iterations, final objective " if chosen.sparse else
              f"{solver_of(chosen.default_solver).label} iterations, final residual ")
    files = str(output) if len(written) == 1 else f"{len(written)} files {written[0]} .. {written[-1].name}"
    return (f"wrote {files} ({what}){shown}" + (f" and {log_json}" if log_json else "")
            + f": {len(results)} image(s), {sum(r.iterations for *_, r in results)} "
            + solved
            + f"{max(r.residuals[-1] for *_, r in results):.1e}{truth_summary(results)}, "
            f"{last.parameters['method']} on {last.device}, "
            f"{seconds:.2f} s ({time.perf_counter() - STARTED:.2f} s since the command started)"
            f"{delay_summary(results)}{compress_summary(results)}")


