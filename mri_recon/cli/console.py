"""What the command line shows and records: log records on stderr, the progress bar, the JSON run log.

The library only logs (logger ``mri_recon``) and calls a progress callback; this module, used by
:mod:`mri_recon.cli`, turns those into a tqdm bar and lines on stderr, and writes ``--log-json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import printable
from ..io.files import write_file

LOGGER = "mri_recon"


class _TqdmHandler(logging.Handler):
    """Writes records to the current ``sys.stderr``, through ``tqdm.write`` once a bar may be drawn (tqdm is
    imported only for a bar, :func:`new_bar`), so a bar is not broken."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = "\n".join(printable(line) for line in self.format(record).split("\n"))
            tqdm = sys.modules.get("tqdm")
            if tqdm is None:
                sys.stderr.write(text + "\n")
            else:
                tqdm.tqdm.write(text, file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging's own convention
            self.handleError(record)


@contextlib.contextmanager
def cli_logging(verbose: int, quiet: bool) -> Iterator[None]:
    """Show the library's log on stderr for one command: warnings by default, INFO with ``verbose == 1``,
    DEBUG with 2 or more, errors only when ``quiet``. The logger's level and handlers are restored after."""
    logger = logging.getLogger(LOGGER)
    level = logging.ERROR if quiet else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    handler = _TqdmHandler(level)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s" if level == logging.DEBUG else "%(message)s"))
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def bar_shown(enabled: bool) -> bool:
    """Whether a progress bar is drawn: asked for (not ``--quiet``) and stderr is a terminal. A bar redraws
    itself with carriage returns, which a log file or a pipe would keep as garbage lines."""
    isatty = getattr(sys.stderr, "isatty", None)
    return enabled and isatty is not None and bool(isatty())


class _HiddenBar:
    """What a bar that is not drawn needs of tqdm's interface: it counts and shows nothing."""

    disable = True

    def __init__(self, total: int) -> None:
        self.total, self.n = total, 0

    def update(self, step: int = 1) -> None:
        self.n += step

    def set_description(self, *args: Any, **kwargs: Any) -> None:
        pass

    set_postfix = set_postfix_str = refresh = close = set_description


def new_bar(enabled: bool, total: int, **options: Any) -> Any:
    """A tqdm bar on stderr with ``options`` when it is drawn (:func:`bar_shown`), else a :class:`_HiddenBar`:
    a run that draws no bar does not import tqdm."""
    if not bar_shown(enabled):
        return _HiddenBar(total)
    from tqdm import tqdm  # noqa: PLC0415 - imported for a bar only

    return tqdm(total=total, file=sys.stderr, **options)


@contextlib.contextmanager
def sample_bar(quiet: bool) -> Iterator[Any]:
    """A tqdm bar on stderr over the samples a simulation computes (a ``progress(done, total)`` callback),
    drawn only on a terminal and not with ``quiet``."""
    bar = new_bar(not quiet, 0, unit="sample", unit_scale=True, desc="k-space", leave=False)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        yield progress
    finally:
        bar.close()


class ProgressBar:
    """One tqdm bar on stderr over the CG iterations of every image of a run (a progress callback), drawn only
    on a terminal (:func:`bar_shown`).

    The bar's total is ``images * iterations``; when CG stops early, the iterations it did not run are taken
    off the total, so the bar ends full and its count is the number of iterations run.
    """

    def __init__(self, images: int, iterations: int, *, enabled: bool = True, value: str = "residual",
                 name: str = "CG") -> None:
        self.images = images
        self.name = name  # the solver, as the bar's label
        self.value = value  # what the solver reports: CG's residual, or the regularized objective
        self.iterations = iterations
        self.count = 0
        self._in_image = 0
        self.bar = new_bar(enabled, images * iterations, unit="it", dynamic_ncols=True, leave=True,
                           desc=name if images == 1 else f"{name}, image 1/{images}")
        self._ticking = threading.Event()
        if not self.bar.disable:  # redraw every second, so the elapsed time runs through a long stage
            threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self) -> None:
        while not self._ticking.wait(1.0):
            self.bar.refresh()

    def start_image(self, index: int) -> None:
        """Image ``index`` (from 0) of the stack begins."""
        self._in_image = 0
        if self.images > 1:
            self.bar.set_description(f"{self.name}, image {index + 1}/{self.images}", refresh=False)

    def __call__(self, stage: str, iteration: int | None, total: int | None, residual: float | None) -> None:
        del total
        if stage != "iterations":  # a stage before the iterations ended: say so (the timer shows the next one)
            if self._in_image == 0:  # after them the bar keeps the solver's last value
                self.bar.set_postfix_str(f"{stage} done", refresh=True)
            return
        if iteration is None:  # CG ended: the iterations it did not run leave the total
            self.bar.total -= self.iterations - self._in_image
            self.bar.refresh()
            return
        step = iteration - self._in_image
        self._in_image = iteration
        self.count += step
        self.bar.set_postfix({self.value: f"{residual:.4g}" if self.value == "objective" else f"{residual:.1e}"},
                             refresh=False)
        self.bar.update(step)

    def close(self) -> None:
        self._ticking.set()
        self.bar.close()


def typed_settings(command: Any, params: Mapping[str, Any], leave: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``params`` of a click ``command`` for ``--log-json``, each under the name it is typed with
    (``--format`` as ``format``, ``--lambda`` as ``lambda``, ``--log-json`` as ``log_json``), not its Python
    parameter name (``format_``, ``lam``); those named in ``leave`` are left out."""
    names = {p.name: max(p.opts, key=len).lstrip("-").replace("-", "_") for p in command.params}
    return {names.get(k, k): v for k, v in params.items() if k not in leave}


def _plain(value: Any) -> Any:
    """JSON for NumPy scalars and arrays (everything else as text)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def truth_errors(results: list) -> list[tuple[str, float] | None]:
    """Per image, ``(kind, NRMSE)`` against its scan's ground truth
    (:func:`mri_recon.io.outputs.nrmse_vs_truth`, the value of the HDF5 output's ``nrmse_vs_ground_truth``), or
    None for a scan without one. ``results`` as for :func:`run_log`."""
    from ..io.outputs import nrmse_vs_truth

    return [None if scan.ground_truth is None else
            nrmse_vs_truth(np.asarray(result.image, dtype=np.complex64), scan.ground_truth, result)
            for _, scan, _, result in results]


def truth_summary(results: list) -> str:
    """The result line's words on the NRMSE against the ground truth (empty when no scan has one)."""
    errors = [e for e in truth_errors(results) if e is not None]
    if not errors:
        return ""
    kind, value = max(errors, key=lambda e: e[1])
    return f", {'largest ' if len(errors) > 1 else ''}NRMSE vs ground truth {value:.3g} ({kind})"


def delay_summary(results: list) -> str:
    """The result line's words on the gradient delay: what was applied, or that an estimate was not and why
    (empty when no image's preparation dealt with it). ``results`` as for :func:`run_log`."""
    records = [record for _, _, record, _ in results if record.get("gradient_delay")]
    return delay_words(records[0]) if records else ""  # one estimate is shared by the images of a file


def delay_words(record: Mapping[str, Any]) -> str:
    """:func:`delay_summary` of one preparation record (empty when it has no gradient-delay entries)."""
    if not record.get("gradient_delay"):
        return ""
    if record["gradient_delay"] == "none":
        return f"; gradient delay not applied ({record['gradient_delay_note'].removeprefix('auto: ')})"
    samples = record["gradient_delay_samples"]
    values = ", ".join(f"{v:.3f}" for v in samples)
    again = ""
    if len(samples) == 3:  # in-plane (Sxx, Syy, Sxy): BART's y:x:yx gives it again, cross term included
        again = f"; --gradient-delay {samples[1]:.4f}:{samples[0]:.4f}:{samples[2]:.4f} gives it again"
    return f"; gradient delay ({values}) samples applied ({record['gradient_delay']}{again})"


def compress_summary(results: list) -> str:
    """The result line's words on coil compression (empty when no image's preparation compressed): ``; 32 coils
    compressed to 8 virtual coils``, or the range of virtual coils when the images differ (``auto``)."""
    return compress_words([record for _, _, record, _ in results])


def compress_words(records: list[Mapping[str, Any]]) -> str:
    """:func:`compress_summary` of preparation records."""
    counts = sorted({record["coil_compress"] for record in records if "coil_compress" in record})
    if not counts:
        return ""
    if len(counts) > 1:
        return f"; coils compressed to {counts[0]}-{counts[-1]} virtual coils"
    first = next(record for record in records if "coil_compress" in record)
    return "; " + first["coil_compress_note"].split(" (")[0]


def run_log(settings: Mapping[str, Any], results: list, seconds: float) -> dict[str, Any]:
    """The record of a reconstruction run: settings, and per image its key, engine, device, iterations,
    residuals, stage timings, the pipeline's parameters and the preparation record, and the NRMSE against the
    ground truth of a scan that has one (``nrmse_vs_ground_truth``, ``nrmse_kind``); the stage timings summed.

    ``results`` holds ``(key, scan, record, result)`` per image, as for :func:`mri_recon.io.writers.write_result`.
    """
    images, totals = [], {}
    for (key, _, record, result), error in zip(results, truth_errors(results)):
        truth = {} if error is None else {"nrmse_vs_ground_truth": error[1], "nrmse_kind": error[0]}
        images.append({"key": dict(key), "engine": result.parameters.get("method"), "device": result.device,
                       "iterations": result.iterations, "final_residual": float(result.residuals[-1]),
                       "residuals": [float(r) for r in result.residuals], "timings_s": dict(result.timings),
                       "parameters": dict(result.parameters), "preparation": dict(record),
                       "combine": result.combine, **truth})
        for stage, value in result.timings.items():
            totals[stage] = totals.get(stage, 0.0) + float(value)
    return {"mri_recon_version": __version__, "settings": dict(settings), "images": images,
            "timings_s": totals, "wall_s": seconds}


def series_log(settings: Mapping[str, Any], result: Any, record: Mapping[str, Any], seconds: float,
               error: float | None = None) -> dict:
    """The record of a time-series run (a :class:`~mri_recon.result.Result` with ``frames``): the settings,
    the frames, solver, residual history, timings and parameters, the preparation ``record`` (the gradient
    delay shared by the frames) and the NRMSE ``error`` against a simulated series' truth."""
    frames = result.frames
    series = {"frames": len(frames.labels), "axis": frames.axis, "labels": list(frames.labels),
              "device": result.device, "iterations": result.iterations,
              "history": [float(h) for h in result.history], "timings_s": dict(result.timings),
              "parameters": dict(result.parameters), "preparation": dict(record),
              **({} if error is None else {"nrmse_vs_ground_truth": float(error)})}
    return {"mri_recon_version": __version__, "settings": dict(settings), "series": series, "wall_s": seconds}


def write_run_log(path: str | os.PathLike, log: Mapping[str, Any], *, protect: tuple = ()) -> None:
    """Write ``log`` as JSON to ``path`` (temporary file, renamed; ``protect`` files are never replaced)."""
    text = json.dumps(log, indent=2, default=_plain, allow_nan=True) + "\n"
    write_file(path, text.encode(), protect=protect)
