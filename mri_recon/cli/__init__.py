"""The ``mri-recon`` command: a thin click layer over the library, one module per command.

Library errors (:class:`~mri_recon.errors.MriReconError`) become one-line messages and exit code 1; the
command never prints a traceback for bad input. Outputs are written to a temporary file and renamed, and
never replace the input. The options of ``reconstruct`` come from :class:`~mri_recon.settings.ReconSettings`
(:mod:`.options`).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import time
from collections.abc import Iterator

import click

from .._version import __version__

__all__ = ["main", "run"]

STARTED = time.perf_counter()
"""When the command started (this package is imported first): the result lines give the time since."""

COMMANDS = {"reconstruct": "reconstruct", "simulate": "simulate", "info": "info", "convert": "convert",
            "doctor": "doctor", "cache": "cache", "serve": "serve", "send": "serve"}
"""Each command and the module of this package that defines it, imported when the command runs (so that
``mri-recon --version`` and ``--help`` of one command load only what they need)."""


class _Commands(click.Group):
    """The commands of :data:`COMMANDS`, each imported on first use."""

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        del ctx
        return list(COMMANDS)

    def get_command(self, ctx: click.Context | None, name: str) -> click.Command | None:
        del ctx
        if name not in COMMANDS:
            return None
        with _collector_paused():
            return getattr(importlib.import_module(f".{COMMANDS[name]}", __name__), name)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off (if it was on) for the block: a command's imports allocate the
    libraries' objects by the ten thousand, and the collections they trigger find nothing to free."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mri-recon")
def main() -> None:
    """Exact non-Cartesian MRI reconstruction (radial, spiral, 3D) on NVIDIA GPUs, with a CPU twin."""


def run() -> None:
    """The ``mri-recon`` console script: :func:`main`, then every object left is frozen out of the collector
    (``gc.freeze``), so that the interpreter's exit does not walk the imported libraries' objects once more.
    Exit handlers still run (a batch's shared Dask cluster closes in one), but garbage caught in a reference
    cycle at that point is not finalized: nothing a command writes waits for that (outputs are written, flushed
    and renamed by explicit calls, files closed by ``with`` blocks)."""
    try:
        main(prog_name="mri-recon")
    finally:
        gc.freeze()
