"""The ``mri-recon`` command: a thin click layer over the library, one module per command.

Library errors (:class:`~mri_recon.errors.MriReconError`) become one-line messages and exit code 1; the
command never prints a traceback for bad input. Outputs are written to a temporary file and renamed, and
never replace the input. The options of ``reconstruct`` come from :class:`~mri_recon.settings.ReconSettings`
(:mod:`.options`).
"""

from __future__ import annotations

import importlib
import time

import click

from .._version import __version__

__all__ = ["main"]

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
        return getattr(importlib.import_module(f".{COMMANDS[name]}", __name__), name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mri-recon")
def main() -> None:
    """Exact non-Cartesian MRI reconstruction (radial, spiral, 3D) on NVIDIA GPUs, with a CPU twin."""
