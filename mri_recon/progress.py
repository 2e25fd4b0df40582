"""Stage timing and progress of a reconstruction: :class:`Clock` times the pipeline's stages (synchronizing the
device), logs them (logger ``mri_recon.pipeline``: stages at INFO, iterations at DEBUG) and forwards events to
an optional progress callback."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from .arrays.backend import Device, synchronize
from .errors import InvalidDataError

log = logging.getLogger("mri_recon.pipeline")

STAGES = ("prepare", "upload", "coil_maps", "fhd", "psf", "iterations", "filter", "download")


Progress = Callable[[str, int | None, int | None, float | None], None]
"""A progress callback: ``progress(stage, iteration, total, residual)``."""


class Clock:
    """Times the pipeline's stages (synchronizing the device), logs them and forwards progress events.

    Stage timings are logged at INFO and CG iterations at DEBUG on the ``mri_recon.pipeline`` logger; the
    optional ``progress`` callback receives ``(stage, None, None, None)`` when a stage ends and
    ``("iterations", k, iterations, residual)`` for CG iteration k.
    """

    def __init__(self, device: Device, progress: Progress | None, iterations: int) -> None:
        self.device = device
        self.progress = progress
        self.iterations = iterations
        self.timings = dict.fromkeys(STAGES, 0.0)
        self._start = time.perf_counter()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self._start = time.perf_counter()
        yield
        synchronize(self.device)
        self.record(name, time.perf_counter() - self._start)

    def record(self, name: str, seconds: float) -> None:
        """Stage ``name`` took ``seconds`` more (timed by the caller, the device synchronized): logged and
        reported like a stage timed here."""
        self.timings[name] += seconds
        log.info("%-10s  %.3f s", name, self.timings[name])
        if self.progress is not None:
            self.progress(name, None, None, None)

    def callback(self) -> Callable[[int, Any, float], None] | None:
        """The CG callback, or None when nobody listens (the solver then skips the calls altogether)."""
        if self.progress is None and not log.isEnabledFor(logging.DEBUG):
            return None
        return self.iteration

    def iteration(self, iteration: int, x: Any, residual: float) -> None:
        """CG callback: one event per iteration (the GPU solver calls it in batches at its checks, from the
        residuals it reads back anyway)."""
        del x
        log.debug("iteration %d/%d  residual %.1e  %.2f s", iteration, self.iterations, residual,
                  time.perf_counter() - self._start)
        if self.progress is not None:
            self.progress("iterations", iteration, self.iterations, residual)


def print_progress(stage: str, iteration: int | None, total: int | None, residual: float | None) -> None:
    """The ``progress=True`` callback: one line per stage and per CG iteration on stderr."""
    if iteration is None:
        print(f"{stage} done", file=sys.stderr, flush=True)
    else:
        print(f"iteration {iteration}/{total}  residual {residual:.1e}", file=sys.stderr, flush=True)


def progress_callback(progress: Any) -> Progress | None:
    """``progress`` as a callback: a callable as is, True as :func:`print_progress` (asked for on purpose),
    None or False as none."""
    if progress is True:
        return print_progress
    if progress is None or progress is False:
        return None
    if not callable(progress):
        raise InvalidDataError(f"progress must be None or a callable (stage, iteration, total, residual), "
                               f"found {type(progress).__name__}")
    return progress
