"""What the commands share: library errors as one-line messages, the result lines on stderr, the options
that several commands take."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from ..errors import MriReconError, OutputError, printable


def friendly(func: Callable) -> Callable:
    """Turn library errors into click errors (one line, exit code 1, no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except MriReconError as exc:
            raise click.ClickException(printable(exc)) from None
        except click.ClickException as exc:  # strings from files escaped here too, the last line of defence
            exc.message = printable(exc.message)
            raise
        except MemoryError:
            raise click.ClickException("out of host memory; try a smaller problem or --device gpu") from None

    return wrapper


def is_pipe(scans: tuple) -> bool:
    """``reconstruct -``: pipe mode (:func:`mri_recon.cli.serve.run_pipe`)."""
    return len(scans) == 1 and str(scans[0]) == "-"


def say(quiet: bool, message: str) -> None:
    """A result line on stderr, unless ``quiet``."""
    if not quiet:
        click.echo(message, err=True)


def parse_matrix(text: str) -> tuple[int, ...]:
    """``"128"``, ``"128x96"``, ``"64,64,64"`` as sizes (every part a whole number: ``"64x"`` is refused)."""
    parts = text.replace("x", ",").split(",")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise click.BadParameter(f"expected N, NxM or NxMxK, got {text!r}") from None
    return values


QUIET = click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")


def check_log_json(inputs: tuple, log_json: Any, output: Any, png: Any, format: str | None = None) -> None:
    """Fail before any work when the JSON log cannot be written, would replace another output (both files of
    a BART output) or one of the run's ``inputs``."""
    from ..io.cfl import cfl_pair, is_cfl_name
    from ..io.files import check_output, same_file

    if log_json is None:
        return
    outputs = [output, *cfl_pair(output)] if format == "cfl" or is_cfl_name(output) else [output]
    for other, option in [*((o, "-o") for o in outputs), (png, "--png")]:
        if other is not None and same_file(log_json, other):
            raise OutputError(f"{log_json}: --log-json names the same file as {option}; choose another path")
    check_output(log_json, protect=inputs)


def check_outputs(inputs: tuple, output: Any, png: Any, format: str | None = None) -> None:
    """Fail before any work when an output cannot be written or would replace one of the run's ``inputs``
    (the same checks the writers make; a folder output, ``--format dicom``, by its format's ``check``)."""
    from ..io.files import check_output, same_file
    from ..io.png import check_png_name
    from ..io.writers import OUTPUTS

    if png is not None and same_file(png, output):
        raise OutputError(f"{png}: --png names the same file as the output (-o); choose another PNG path")
    checks = ((output, OUTPUTS[format].check if format in OUTPUTS else check_output), (png, check_output))
    for target, check in checks:
        if target is not None:
            check(target, protect=inputs)
    if png is not None:
        check_png_name(png)
