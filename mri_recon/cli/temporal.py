"""``mri-recon reconstruct`` and ``simulate`` of a time series: their options and what they run.

``reconstruct`` with ``--temporal tv``, ``--temporal-axis`` or ``--spokes-per-frame`` reconstructs the file
as one time series (:func:`mri_recon.api.prepare_and_reconstruct` of a :class:`~mri_recon.io.frames.TimeSeries`:
the same preparation, stages, settings and writers as one scan); without them nothing here runs and the command
is what it was. ``simulate --frames N --spokes-per-frame K`` writes the beating phantom
(:func:`mri_recon.sim.dynamic.simulate_series`) as ISMRMRD raw data with one repetition per frame.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from ..errors import MriReconError, printable
from ..settings import default_of
from . import STARTED
from .common import check_log_json, check_outputs


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    del ctx
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number, found {value}", param=param)
    return value


RECONSTRUCT_OPTIONS = [
    click.option("--temporal-axis", type=click.Choice(["repetition", "phase"]), default=None,
                 help="The MRD index whose values are the frames (default: the one with several values)."),
    click.option("--spokes-per-frame", type=click.IntRange(min=1), default=None,
                 help="Cut one continuous acquisition into frames of K consecutive readouts."),
    click.option("--frames", type=click.IntRange(min=1), default=None, help="Keep the first N frames."),
]
NAMES = ("temporal_axis", "spokes_per_frame", "frames")
"""The options that read a file as a time series (the solve's temporal options are settings)."""

SIMULATE_OPTIONS = [
    click.option("--frames", type=click.IntRange(min=1), default=None,
                 help="A beating phantom of N frames (golden or stack-of-stars), written as MRD repetitions."),
    click.option("--spokes-per-frame", type=click.IntRange(min=1), default=None,
                 help="With --frames: consecutive golden-angle spokes per frame (default 21)."),
]


def _friendly(run: Callable[[], None]) -> None:
    """Library errors as one line and exit code 1, strings from files escaped (as the CLI's other commands)."""
    try:
        run()
    except MriReconError as exc:
        raise click.ClickException(printable(exc)) from None


def _echo(params: Mapping[str, Any]) -> Callable[[str], None]:
    return lambda message: None if params.get("quiet") else click.echo(message, err=True)


def _add(func: Callable, which: list) -> Callable:
    for option in reversed(which):
        func = option(func)
    return func


def reconstruct_options(func: Callable) -> Callable:
    """Add :data:`RECONSTRUCT_OPTIONS` to ``reconstruct``: with them, the file is reconstructed as a time
    series here; without them they are taken out of the command's parameters and ``func`` runs as before."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        params = click.get_current_context().params
        if _streamed(kwargs):  # reconstruct - -o - [--spokes-per-frame K]: pipe mode (.serve)
            for name in NAMES:
                kwargs.pop(name, None)
                if name != "spokes_per_frame":
                    params.pop(name, None)
            return func(*args, **kwargs)
        if is_temporal(kwargs):
            return _friendly(lambda: run_reconstruct(params, _echo(params)))
        if kwargs.get("frames") is not None:
            raise click.UsageError("--frames applies to a time series (--temporal tv, --temporal-axis or "
                                   "--spokes-per-frame)")
        for name in NAMES:
            kwargs.pop(name, None)
            params.pop(name, None)
        return func(*args, **kwargs)

    return _add(wrapper, RECONSTRUCT_OPTIONS)


def simulate_options(func: Callable) -> Callable:
    """Add :data:`SIMULATE_OPTIONS` to ``simulate``: with ``--frames`` it writes the beating phantom here."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        frames, spokes = kwargs.pop("frames", None), kwargs.pop("spokes_per_frame", None)
        if frames is None and spokes is None:
            return func(*args, **kwargs)
        params = {**kwargs, "frames": frames, "spokes_per_frame": spokes}
        return _friendly(lambda: run_simulate(params, _echo(params)))

    return _add(wrapper, SIMULATE_OPTIONS)


def _streamed(params: Mapping[str, Any]) -> bool:
    """True for pipe mode (``reconstruct -``), which streams frames one by one with ``--spokes-per-frame`` as
    ``serve --spokes-per-frame`` does; the joint time-series options need the whole file and are refused there
    (``--temporal none`` and the default ``--temporal-solver`` change nothing and pass)."""
    scans = params.get("scans") or ()
    if not (len(scans) == 1 and str(scans[0]) == "-"):
        return False
    others = [f"--{name.replace('_', '-')}" for name in ("temporal_axis", "frames", "temporal_lam")
              if params.get(name) is not None]
    others += [f"--{name.replace('_', '-')}" for name in ("temporal", "temporal_solver")
               if params.get(name, default_of(name)) != default_of(name)]
    if others:
        raise click.UsageError(f"{', '.join(others)}: pipe mode streams frames one by one (--spokes-per-frame "
                               f"alone); a joint time series needs the whole file: reconstruct FILE instead")
    return True


def is_temporal(params: Mapping[str, Any]) -> bool:
    """True when the options ask for a time series."""
    return params.get("temporal", default_of("temporal")) != default_of("temporal") or \
        params.get("temporal_axis") is not None or \
        params.get("spokes_per_frame") is not None


ALSO_REFUSED = ("workers", "scheduler")
"""Options of the command that a time series does not take (a batch)."""


def _settings(params: Mapping[str, Any]) -> Any:
    """The run's settings; a batch's options refused; a joint solve's own default number of iterations."""
    from ..solvers.temporal import ITERATIONS_DEFAULT  # noqa: PLC0415
    from ..solvers.temporal_terms import temporal_term  # noqa: PLC0415
    from .options import settings_from  # noqa: PLC0415

    given = ["--" + name.replace("_", "-") for name in ALSO_REFUSED if params.get(name)]
    if given:
        raise click.UsageError(f"{', '.join(given)}: not available with a time series (--temporal, "
                               f"--spokes-per-frame): a time series is one problem in this process")
    settings = settings_from(params)
    if temporal_term(settings.temporal).joint and not _given("iterations"):
        settings = settings.replace(iterations=ITERATIONS_DEFAULT)
    return settings


def run_reconstruct(params: Mapping[str, Any], echo: Callable[[str], None]) -> None:
    """``reconstruct`` of one file as a time series, with the command's ``params``: read, prepared and
    reconstructed by the same calls as one scan (:func:`mri_recon.api.prepare_and_reconstruct`), written in any
    output format."""
    from ..io.frames import load_series  # noqa: PLC0415
    from ..result import magnitude_nrmse  # noqa: PLC0415
    from .console import cli_logging, compress_words, delay_words  # noqa: PLC0415

    scan = params["scans"][0]
    if len(params["scans"]) > 1:
        raise click.UsageError("a time series is one scan file; give one")
    output = params["output"] or Path(scan).with_suffix(".recon.h5")
    started = time.perf_counter()
    settings = _settings(params)
    inputs = settings.read_paths(scan)
    check_outputs(inputs, Path(output), params["png"], settings.format)  # every name, before any work
    check_log_json(inputs, params.get("log_json"), Path(output), params["png"], settings.format)
    with cli_logging(params["verbose"], params["quiet"]):
        series = load_series(scan, temporal_axis=params["temporal_axis"], spokes_per_frame=params["spokes_per_frame"],
                             frames=params["frames"], **settings.reader_keywords())
        ready, record, result = _reconstructed(series, settings, Path(scan), Path(output), params["quiet"])
        error = magnitude_nrmse(result.image, series.ground_truth)
        chosen, shown = _write(output, result, ready, record, settings, params, error)
    seconds = time.perf_counter() - started
    if params.get("log_json") is not None:
        from .console import series_log, write_run_log  # noqa: PLC0415

        logged = {k: v for k, v in params.items() if k not in ("quiet", "verbose")}
        write_run_log(params["log_json"], series_log({**logged, "output": output}, result, record, seconds, error),
                      protect=inputs)
        shown += f" and {params['log_json']}"
    dropped = f", {series.dropped_readouts} readout(s) dropped" if series.dropped_readouts else ""
    delays = {k: v for k, v in record.items() if k.startswith("gradient_delay")}
    echo(f"wrote {output} ({chosen}, time series){shown}: {series.n_frames} frames along {series.axis}{dropped}, "
         f"{result.parameters['solver']} {result.iterations} iterations, final objective {result.history[-1]:.1e}"
         + (f", NRMSE vs ground truth {error:.3g} (magnitude)" if error is not None else "")
         + f", {result.parameters['method']} on {result.device}, {seconds:.2f} s ({time.perf_counter() - STARTED:.2f} "
         f"s since the command started){delay_words(delays)}" + compress_words([record]))


def _reconstructed(series: Any, settings: Any, scan: Path, output: Path, quiet: bool) -> tuple[Any, dict, Any]:
    """The series prepared and reconstructed, with the command's progress bar, PSF cache and the warning of an
    unplaced image for ``output``'s format."""
    from ..api import prepare_and_reconstruct  # noqa: PLC0415
    from ..io.cache import PsfCache  # noqa: PLC0415
    from ..io.writers import OUTPUTS, output_format  # noqa: PLC0415
    from .hooks import ProgressHooks  # noqa: PLC0415

    chosen = OUTPUTS[output_format(output, settings.format)]
    hooks = ProgressHooks(scan, chosen, settings, quiet)
    hooks.loaded([({}, series.frames[0])])
    hooks.image(0, {}, series.frames[0])
    cache = PsfCache(settings.cache_dir) if settings.cache else None
    try:
        return prepare_and_reconstruct(series, settings, progress=hooks, psf_cache=cache)
    finally:
        hooks.close()


def _write(output: Any, result: Any, ready: Any, record: dict, settings: Any, params: Mapping[str, Any],
           error: float | None) -> tuple[str, str]:
    """Write the frames (and the PNG montage); returns the format and the PNG's words."""
    from ..io.series_files import write_series, write_series_png  # noqa: PLC0415

    inputs = settings.read_paths(params["scans"][0])
    chosen = write_series(output, result, ready.frames, record, params["scans"][0], format=settings.format,
                          complex_=settings.complex_, magnitude=settings.magnitude, nrmse=error, protect=inputs)
    shown = ""
    if params["png"] is not None:
        shown = f" and {params['png']} ({write_series_png(params['png'], result.image, protect=inputs)})"
    return chosen, shown


def _given(name: str) -> bool:
    """True when the command line gave option ``name`` (not its default)."""
    ctx = click.get_current_context(silent=True)
    source = None if ctx is None else ctx.get_parameter_source(name)
    return source is not None and source is not click.core.ParameterSource.DEFAULT


def run_simulate(params: Mapping[str, Any], echo: Callable[[str], None]) -> None:
    """``simulate --frames N``: the beating phantom as MRD raw data with its true frames."""
    from ..io.schema import check_scan_name  # noqa: PLC0415 - the I/O modules load on use
    from ..io.series_files import save_series_mrd  # noqa: PLC0415
    from ..sim.dynamic import simulate_series  # noqa: PLC0415
    from .common import parse_matrix  # noqa: PLC0415 - with simulate's other modules

    check_scan_name(params["output"])  # MRD raw data in an HDF5 file: .mrd.h5, .mrd, .h5 or .hdf5
    if params["frames"] is None:
        raise click.UsageError("--spokes-per-frame of simulate needs --frames N")
    trajectory = params["trajectory"]
    if trajectory not in ("golden", "stack-of-stars"):
        raise click.UsageError(f"--frames simulates golden-angle radial or stack-of-stars, not {trajectory}")
    unhonoured = [name for name, given in (("--spokes", params.get("spokes") is not None),
                                           ("--interleaves", params.get("interleaves") is not None),
                                           ("--field-map", params.get("field_map") is not None),
                                           ("--readout-ms", params.get("readout_ms", 16.0) != 16.0)) if given]
    if unhonoured:
        raise click.UsageError(f"{', '.join(unhonoured)}: not available with --frames (a series has --frames x "
                               f"--spokes-per-frame golden-angle spokes and no field map); drop them")
    text = params["matrix"] or ("64" if trajectory == "stack-of-stars" else "128")  # simulate's defaults
    sizes = parse_matrix(text)
    size = sizes * (3 if trajectory == "stack-of-stars" else 2) if len(sizes) == 1 else sizes
    series = simulate_series(size, trajectory, frames=params["frames"],
                             spokes_per_frame=params.get("spokes_per_frame") or 21, coils=params["coils"],
                             snr=params["snr"], samples=params["samples"], seed=params["seed"],
                             dcf=None if params["dcf"] == "none" else params["dcf"],
                             gradient_delay=params.get("gradient_delay"))
    save_series_mrd(params["output"], series)
    echo(f"wrote {params['output']}: {series.n_frames} frames (MRD repetitions) of "
         f"{series.attrs['spokes_per_frame']} spokes, "
         f"matrix {list(series.matrix)}, {series.n_coils} coil(s), with the true frames")
