"""What the commands share: library errors as one-line messages, the result lines on stderr, the options
that several commands take."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from ..errors import MriReconError, printable


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


def say(quiet: bool, message: str) -> None:
    """A result line on stderr, unless ``quiet``."""
    if not quiet:
        click.echo(message, err=True)


QUIET = click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
