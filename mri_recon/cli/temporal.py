"""``mri-recon reconstruct`` and ``simulate`` of a time series: their options and what they run.

``reconstruct`` with ``--temporal tv``, ``--temporal-axis`` or ``--spokes-per-frame`` reconstructs the file
as one time series (:func:`mri_recon.series.reconstruct_series`); without them nothing here runs and the
command is what it was. ``simulate --frames N --spokes-per-frame K`` writes the beating phantom
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
from .common import check_log_json, check_outputs


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    del ctx
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number, found {value}", param=param)
    return value


RECONSTRUCT_OPTIONS = [
    click.option("--temporal", type=click.Choice(["none", "tv"]), default="none", show_default=True,
                 help="Time series: tv adds temporal-lambda ||D_t x||_1 over all frames, solved jointly."),
    click.option("--temporal-lambda", "temporal_lam", type=click.FloatRange(min=0.0), default=None,
                 callback=_finite, help="Temporal TV weight relative to max |A^H W d| (default 0.005)."),
    click.option("--temporal-axis", type=click.Choice(["repetition", "phase"]), default=None,
                 help="The MRD index whose values are the frames (default: the one with several values)."),
    click.option("--spokes-per-frame", type=click.IntRange(min=1), default=None,
                 help="Cut one continuous acquisition into frames of K consecutive readouts."),
    click.option("--frames", type=click.IntRange(min=1), default=None, help="Keep the first N frames."),
    click.option("--temporal-solver", type=click.Choice(["admm", "pdhg"]), default="admm", show_default=True,
                 help="Joint solver: ADMM or primal-dual (Condat-Vu)."),
]
NAMES = ("temporal", "temporal_lam", "temporal_axis", "spokes_per_frame", "frames", "temporal_solver")

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
        if kwargs.get("frames") is not None or kwargs.get("temporal_lam") is not None:
            raise click.UsageError("--frames and --temporal-lambda apply to a time series (--temporal tv, "
                                   "--temporal-axis or --spokes-per-frame)")
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
    others += ["--temporal"] if params.get("temporal", "none") != "none" else []
    others += ["--temporal-solver"] if params.get("temporal_solver", "admm") != "admm" else []
    if others:
        raise click.UsageError(f"{', '.join(others)}: pipe mode streams frames one by one (--spokes-per-frame "
                               f"alone); a joint time series needs the whole file: reconstruct FILE instead")
    return True


def is_temporal(params: Mapping[str, Any]) -> bool:
    """True when the options ask for a time series."""
    return params.get("temporal", "none") != "none" or params.get("temporal_axis") is not None or \
        params.get("spokes_per_frame") is not None


HONOURED = frozenset({"format", "complex_", "magnitude", "iterations", "lam", "regularizer", "inner_iterations", "rho",
                      "anisotropic", "tol", "method", "device", "coil_maps", "dcf", "prewhiten", "traj_units",
                      "allow_external", "cache", "cache_dir", "choice", "trajectory", "sensitivities", "matrix",
                      "gradient_delay"})
"""The settings a time-series reconstruction takes; any other set away from its default is refused."""
ALSO_REFUSED = ("workers", "scheduler")
"""Options of the command that a time series does not take (a batch)."""


def refuse_unhonoured(settings: Any, params: Mapping[str, Any]) -> None:
    """A one-line refusal of every option given that the time-series reconstruction would not honour."""
    from ..settings import FIELDS, default_of, option_of  # noqa: PLC0415

    given = [option_of(name).cli or "--" + name.replace("_", "-") for name in FIELDS
             if name not in HONOURED and getattr(settings, name) != default_of(name)]
    given += ["--" + name.replace("_", "-") for name in ALSO_REFUSED if params.get(name)]
    if given:
        raise click.UsageError(f"{', '.join(given)}: not available with a time series (--temporal, "
                               f"--spokes-per-frame); reconstruct the frames without them, or drop them")


def run_reconstruct(params: Mapping[str, Any], echo: Callable[[str], None]) -> None:
    """``reconstruct`` of one file as a time series, with the command's ``params``."""
    from ..console import cli_logging, delay_words  # noqa: PLC0415
    from ..io.frames import load_series  # noqa: PLC0415
    from ..io.geometry import geometry_of  # noqa: PLC0415
    from ..series import reconstruct_series, write_series  # noqa: PLC0415
    from .options import settings_from  # noqa: PLC0415

    scan = params["scans"][0]
    if len(params["scans"]) > 1:
        raise click.UsageError("a time series is one scan file; give one")
    output = params["output"] or Path(scan).with_suffix(".recon.h5")
    started = time.perf_counter()
    settings = settings_from(params)
    refuse_unhonoured(settings, params)
    if params["temporal"] != "none" and not _given("iterations"):
        from ..series import TEMPORAL_ITERATIONS  # noqa: PLC0415

        settings = settings.replace(iterations=TEMPORAL_ITERATIONS)  # a joint solve's own default
    inputs = settings.read_paths(scan)
    check_outputs(inputs, Path(output), params["png"], settings.format)  # every name, before any work
    check_log_json(inputs, params.get("log_json"), Path(output), params["png"], settings.format)
    with cli_logging(params["verbose"], params["quiet"]):
        series = load_series(scan, temporal_axis=params["temporal_axis"], spokes_per_frame=params["spokes_per_frame"],
                             frames=params["frames"], **settings.reader_keywords())
        series, delays = _corrected(series, settings.gradient_delay)
        geometry = geometry_of(series.matrix, series.frames[0].attrs, str(scan))
        result = reconstruct_series(
            series, temporal=params["temporal"], temporal_lam=params["temporal_lam"],
            regularizer=settings.regularizer, lam=settings.lam, solver=params["temporal_solver"],
            iterations=settings.iterations, rho=settings.rho, inner_iterations=settings.inner_iterations or 1,
            anisotropic=settings.anisotropic, tol=settings.tol, device=settings.device, method=settings.method,
            prewhiten=settings.prewhiten, dcf=settings.dcf, coil_maps=settings.coil_maps)
        chosen = write_series(output, result, geometry, format=settings.format, complex_=settings.complex_,
                              magnitude=settings.magnitude, protect=inputs)
        shown = ""
        if params["png"] is not None:
            from ..io.series_files import write_series_png  # noqa: PLC0415

            shown = f" and {params['png']} ({write_series_png(params['png'], result.image, protect=inputs)})"
    seconds = time.perf_counter() - started
    if params.get("log_json") is not None:
        from ..console import series_log, write_run_log  # noqa: PLC0415

        logged = {k: v for k, v in params.items() if k not in ("quiet", "verbose")}
        write_run_log(params["log_json"], series_log({**logged, "output": output}, result, delays, seconds),
                      protect=inputs)
        shown += f" and {params['log_json']}"
    error = result.nrmse()
    dropped = f", {series.dropped_readouts} readout(s) dropped" if series.dropped_readouts else ""
    echo(f"wrote {output} ({chosen}, time series){shown}: {series.n_frames} frames along {series.axis}{dropped}, "
         f"{result.parameters['solver']} {result.iterations} iterations, final objective {result.history[-1]:.1e}"
         + (f", NRMSE {error:.4f} vs ground truth" if error is not None else "")
         + f", {result.parameters['method']} on {result.device}, {seconds:.2f} s{delay_words(delays)}")


def _given(name: str) -> bool:
    """True when the command line gave option ``name`` (not its default)."""
    ctx = click.get_current_context(silent=True)
    source = None if ctx is None else ctx.get_parameter_source(name)
    return source is not None and source is not click.core.ParameterSource.DEFAULT


def _corrected(series: Any, gradient_delay: Any) -> tuple[Any, dict]:
    """The series with every frame's trajectory corrected by one gradient-delay estimate from all the frames
    (:func:`mri_recon.prep.gradient_delay.correct_gradient_delay`), and its record."""
    import dataclasses  # noqa: PLC0415

    from ..prep.gradient_delay import correct_gradient_delay  # noqa: PLC0415

    frames, record = correct_gradient_delay(list(series.frames), gradient_delay)
    return (dataclasses.replace(series, frames=tuple(frames)) if record else series), record


def run_simulate(params: Mapping[str, Any], echo: Callable[[str], None]) -> None:
    """``simulate --frames N``: the beating phantom as MRD raw data with its true frames."""
    from ..io.series_files import save_series_mrd  # noqa: PLC0415
    from ..sim.dynamic import simulate_series  # noqa: PLC0415

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
    sizes = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
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
