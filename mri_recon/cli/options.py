"""The command line's side of :class:`~mri_recon.settings.ReconSettings`: a click option for each of its
fields (:func:`settings_options`), and the settings from a command's parameters (:func:`settings_from`).

Nothing here names an option: type, range, choices, default and help come from the field's
:class:`~mri_recon.settings.Option`.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from ..io.stack import DIMENSIONS
from ..settings import FIELDS, SECTIONS, Option, ReconSettings, allowed, default_of, option_of


def finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Refuse NaN and infinity for a float option, naming the option (click's ranges let NaN through)."""
    del ctx
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number, found {value}", param=param)
    return value


def param_name(name: str) -> str:
    """The Python name click gives the field ``name``'s option: the flag's (``no_prewhiten``), else the
    field's, with ``_`` after a builtin's name (``format_``)."""
    spec = option_of(name)
    if spec.flag:
        return spec.flag.lstrip("-").replace("-", "_")
    return f"{name}_" if hasattr(builtins, name) and not name.endswith("_") else name


class RegistryChoice(click.Choice):
    """A :class:`click.Choice` of an option's choices as its registry holds them when the command runs (a
    registry that grew after the command was built, by an engine, format or regularizer added, is offered)."""

    def __init__(self, spec: Option) -> None:
        self.spec = spec
        super().__init__(allowed(spec))

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(allowed(self.spec))

    @choices.setter
    def choices(self, value: Any) -> None:
        del value  # read from the registry instead


def _click_type(spec: Option) -> Any:
    if spec.path:
        return click.Path(path_type=Path)
    if spec.choices is not None:
        return RegistryChoice(spec)
    if spec.kind is int:
        return click.IntRange(min=None if spec.low is None else int(spec.low),
                              max=None if spec.high is None else int(spec.high))
    if spec.kind is float:
        return click.FloatRange(min=spec.low, max=spec.high, min_open=spec.low_open)
    return None


def _choice_options(verb: str) -> list[Callable]:
    """``--slice``, ``--contrast``, ``--phase``, ``--set``, ``--repetition`` (:data:`DIMENSIONS`)."""
    text = option_of("choice").help
    return [click.option(f"--{name}", f"{name}_", type=click.IntRange(min=0), default=None,
                         help=text.format(verb=verb, name=name)) for name in DIMENSIONS]


def click_options(name: str, *, verb: str = "reconstruct", help: str | None = None) -> list[Callable]:
    """The click option(s) of the field ``name`` (the image choice is five), in ``--help`` order."""
    spec = option_of(name)
    if spec.kind is dict:
        return _choice_options(verb)
    decls = (spec.flag or spec.cli or f"--{name.replace('_', '-')}", param_name(name))
    kwargs: dict[str, Any] = {"help": spec.help if help is None else help}
    if spec.flag or spec.kind is bool:
        return [click.option(*decls, is_flag=True, **kwargs)]
    default = default_of(name)
    kwargs["default"] = default
    if (kind := _click_type(spec)) is not None:
        kwargs["type"] = kind
    if default is not None and spec.show_default:
        kwargs["show_default"] = True
    if spec.kind is float:
        kwargs["callback"] = finite
    return [click.option(*decls, **kwargs)]


def settings_options(*sections: str, verb: str = "reconstruct") -> Callable[[Callable], Callable]:
    """Add the options of every field of these ``sections`` (:data:`~mri_recon.settings.SECTIONS`) to a click
    command, in the order of the fields."""
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"no settings section {sorted(unknown)}: expected {', '.join(SECTIONS)}")
    chosen = [option for name in FIELDS if option_of(name).section in sections
              for option in click_options(name, verb=verb)]

    def decorate(func: Callable) -> Callable:
        for option in reversed(chosen):
            func = option(func)
        return func

    return decorate


def settings_option(name: str, *, verb: str = "reconstruct", help: str | None = None) -> Callable[[Callable], Callable]:
    """Add the option(s) of one field (``help``: another text, for another command)."""
    chosen = click_options(name, verb=verb, help=help)

    def decorate(func: Callable) -> Callable:
        for option in reversed(chosen):
            func = option(func)
        return func

    return decorate


def _from_param(name: str, params: Mapping[str, Any]) -> tuple[bool, Any]:
    """``(given, value)`` of the field ``name`` among a command's ``params``."""
    spec = option_of(name)
    if spec.kind is dict:
        found = {d: params[f"{d}_"] for d in DIMENSIONS if f"{d}_" in params}
        return bool(found), found
    param = param_name(name)
    if param not in params:
        return False, None
    value = params[param]
    if spec.flag:
        return True, spec.flag_value if value else default_of(name)
    return True, str(value) if spec.path and value is not None else value


def settings_from(params: Mapping[str, Any]) -> ReconSettings:
    """The :class:`~mri_recon.settings.ReconSettings` of a command's ``params`` (the fields it has no option
    for keep their defaults)."""
    values = {}
    for name in FIELDS:
        given, value = _from_param(name, params)
        if given:
            values[name] = value
    return ReconSettings(**values)
