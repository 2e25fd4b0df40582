"""The ``mri-recon`` command: a thin click layer over the library, one module per command.

Library errors (:class:`~mri_recon.errors.MriReconError`) become one-line messages and exit code 1; the
command never prints a traceback for bad input. Outputs are written to a temporary file and renamed, and
never replace the input. The options of ``reconstruct`` come from :class:`~mri_recon.settings.ReconSettings`
(:mod:`.options`).
"""

from __future__ import annotations

import click

from .._version import __version__
from .cache import cache
from .convert import convert
from .doctor import doctor
from .info import info
from .reconstruct import reconstruct
from .serve import send, serve
from .simulate import simulate

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mri-recon")
def main() -> None:
    """Exact non-Cartesian MRI reconstruction (radial, spiral, 3D) on NVIDIA GPUs, with a CPU twin."""


for _command in (reconstruct, simulate, info, convert, doctor, cache, serve, send):
    main.add_command(_command)
