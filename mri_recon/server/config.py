"""What a connection's config messages may choose: a named preset (CONFIG_FILE) or JSON settings (CONFIG_TEXT).

A CONFIG_FILE message names a preset of :data:`PRESETS` (``default``, ``fast``, ``tv``, ...); nothing is read
from the server's disk. A CONFIG_TEXT message is a JSON object of settings named as ``mri-recon
reconstruct``'s options (dashes or underscores), e.g. ``{"iterations": 20, "regularizer": "tv", "lambda":
0.01}``, optionally with ``"preset"``. Only the options in :data:`ALLOWED` may be chosen (not the device,
paths or outputs). :func:`config_arguments` turns the messages into those options' command-line words, which
the command layer parses with the very options of ``reconstruct`` (the same checks and messages).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import MriReconError, printable


class ConfigError(MriReconError):
    """A config message that names no preset, is not a JSON object of known settings, or sets a bad value."""


ALLOWED = ("iterations", "lambda", "regularizer", "inner_iterations", "rho", "anisotropic", "solver", "tol",
           "filter_sigma", "field_map_correction", "segments", "method", "coil_maps", "dcf", "no_prewhiten",
           "no_field_map", "traj_units", "no_cache", "magnitude")
"""Settings a client may choose: ``reconstruct``'s options of these names (``lambda`` is ``--lambda``)."""

PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "mri-recon": {},
    "fast": {"iterations": 10},
    "tv": {"regularizer": "tv"},
    "wavelet": {"regularizer": "wavelet"},
    "rss": {"coil_maps": "rss"},
    "magnitude": {"magnitude": True},
}
"""Named settings for CONFIG_FILE messages (``default`` and ``mri-recon``: the server's own settings)."""


@dataclass(frozen=True)
class ReconSettings:
    """How a connection's images are reconstructed (from the server's options and the client's config).

    Attributes
    ----------
    prepare
        :func:`mri_recon.prepare_scan`'s choices: ``prewhiten``, ``dcf``, ``coil_maps``, ``field_map``.
    solver
        :func:`mri_recon.pipeline.reconstruct`'s solver settings (``iterations``, ``lam``, ``tol``, ...).
    traj_units
        ISMRMRD trajectory units (``auto``, ``cycles-per-fov``, ``normalized``).
    magnitude
        Send float32 magnitude images instead of complex64 ones.
    use_cache
        Read and write the PSF cache.
    """

    prepare: Mapping[str, Any] = field(default_factory=dict)
    solver: Mapping[str, Any] = field(default_factory=dict)
    traj_units: str = "auto"
    magnitude: bool = False
    use_cache: bool = True


def _option(name: str) -> str:
    key = name.replace("-", "_")
    if key not in ALLOWED:
        raise ConfigError(printable(f"unknown setting {name!r}; a client may set {', '.join(ALLOWED)}"))
    return "--" + key.replace("_", "-")


def _words(settings: Mapping[str, Any]) -> list[str]:
    words: list[str] = []
    for name, value in settings.items():
        option = _option(str(name))
        if isinstance(value, bool):
            words += [option] if value else []
        elif isinstance(value, (int, float, str)):
            words += [option, str(value)]
        else:
            raise ConfigError(printable(f"setting {name!r}: expected a number, text or true/false, found "
                                        f"{json.dumps(value)[:80]}"))
    return words


def preset(name: str) -> dict[str, Any]:
    """The settings of a named preset (a CONFIG_FILE name)."""
    if name not in PRESETS:
        raise ConfigError(printable(f"unknown config {name[:100]!r}: expected a preset name "
                                    f"({', '.join(PRESETS)}) or CONFIG_TEXT with JSON settings"))
    return PRESETS[name]


def json_settings(text: str) -> dict[str, Any]:
    """The settings of a CONFIG_TEXT message: a JSON object, its ``"preset"`` first."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"CONFIG_TEXT is not JSON ({exc}); expected an object of settings such as "
                          f'{{"iterations": 20, "regularizer": "tv"}}') from None
    if not isinstance(value, dict):
        raise ConfigError(f"CONFIG_TEXT is JSON but not an object (found {type(value).__name__}); expected "
                          f'settings such as {{"iterations": 20}}')
    chosen = dict(value)
    named = chosen.pop("preset", None)
    if named is not None and not isinstance(named, str):
        raise ConfigError("CONFIG_TEXT: \"preset\" must be a preset's name")
    return {**(preset(named) if named is not None else {}), **chosen}


def config_arguments(configs: Sequence[tuple[str, str]]) -> list[str]:
    """The ``reconstruct`` option words of a connection's config messages, in order (later ones win).

    ``configs`` holds ``("file", name)`` for CONFIG_FILE and ``("text", text)`` for CONFIG_TEXT messages.
    """
    words: list[str] = []
    for kind, text in configs:
        words += _words(preset(text) if kind == "file" else json_settings(text))
    return words
