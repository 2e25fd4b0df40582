"""What a connection's config messages may choose: a named preset (CONFIG_FILE) or JSON settings (CONFIG_TEXT),
applied to the server's own :class:`~mri_recon.settings.ReconSettings`.

A CONFIG_FILE message names a preset of :data:`PRESETS` (``default``, ``fast``, ``tv``, ...); nothing is read
from the server's disk. A CONFIG_TEXT message is a JSON object of settings named as ``mri-recon
reconstruct``'s options (dashes or underscores), e.g. ``{"iterations": 20, "regularizer": "tv", "lambda":
0.01}``, optionally with ``"preset"``. Only the options in :data:`ALLOWED` may be chosen (the fields of
:data:`CLIENT_FIELDS`: not the device, paths, outputs or what the reader may open). An unknown name is
refused by :func:`mri_recon.settings.refuse_unknown` (naming the valid ones and the closest), a value by
:class:`~mri_recon.settings.ReconSettings`' own checks (type, choices, range), so a client's settings are
checked exactly as the library's and the command line's are.

One choice is the stream's, not :class:`~mri_recon.settings.ReconSettings`': ``spokes_per_frame`` (a whole
number >= 1, or null for image groups; :data:`STREAM_ALLOWED`) cuts the data into frames of K consecutive
readouts, each reconstructed and sent as soon as its K-th readout arrives (:mod:`mri_recon.server.frames`).
:func:`chosen` returns both as :class:`Choices`. ``temporal`` (the joint temporal TV of ``reconstruct
--temporal tv``) is refused: it needs every frame before the first image.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidDataError, MriReconError, printable
from ..settings import FIELDS, ReconSettings, default_of, option_of, refuse_unknown


class ConfigError(MriReconError):
    """A config message that names no preset, is not a JSON object of known settings, or sets a bad value."""


CLIENT_FIELDS = (*(name for section in ("solve", "prepare") for name in FIELDS
                   if option_of(name).section == section and not option_of(name).series),
                 "traj_units", "magnitude", "cache")
"""The fields of :class:`~mri_recon.settings.ReconSettings` a client may choose: the solver's and the
preparation's, the trajectory units, magnitude images and the PSF cache's use (not ``device``, the paths,
the output format, the image choice or ``allow_external``: those are the server's)."""


def typed_name(name: str) -> str:
    """The field ``name`` as a client names it: its ``reconstruct`` option with underscores (``lam``:
    ``lambda``, ``prewhiten``: ``no_prewhiten``)."""
    spec = option_of(name)
    return (spec.flag or spec.cli or f"--{name}").lstrip("-").replace("-", "_")


FIELD_OF = {typed_name(name): name for name in CLIENT_FIELDS}
"""The field of each name a client may use."""
ALLOWED = tuple(FIELD_OF)
"""Settings a client may choose: ``reconstruct``'s options of these names (``lambda`` is ``--lambda``)."""

STREAM_ALLOWED = ("spokes_per_frame",)
"""Choices of the stream itself a client may make besides :data:`ALLOWED`."""
MAX_SPOKES_PER_FRAME = 1_000_000
"""The most readouts a frame may take."""

TEXT_LIMIT = 200
"""The longest text value a client may send (no option takes more)."""


@dataclass(frozen=True)
class Bounds:
    """The largest values a client may choose for the settings that set how long a reconstruction holds the
    device (``serve --max-iterations``, ``--max-inner-iterations``, ``--max-filter-sigma``); the server's own
    settings are not bounded. With the defaults a TV reconstruction runs at most 500 x 50 inner CG steps."""

    iterations: int = 500
    inner_iterations: int = 50
    filter_sigma: float = 32.0

    def check(self, base: ReconSettings, settings: ReconSettings) -> None:
        """Refuse a setting a client raised above its bound, naming the bound and the option that sets it."""
        for field, option in (("iterations", "--max-iterations"), ("inner_iterations", "--max-inner-iterations"),
                              ("filter_sigma", "--max-filter-sigma")):
            value, cap = getattr(settings, field), getattr(self, field)
            if value is not None and value != getattr(base, field) and value > cap:
                raise ConfigError(f"{typed_name(field)} {value:g} is over this server's limit of {cap:g} "
                                  f"(serve {option})")


DEFAULT_BOUNDS = Bounds()
"""The :class:`Bounds` of ``serve`` without options."""


def _checked(presets: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for name, chosen in presets.items():  # a preset that ReconSettings refuses is a mistake here
        ReconSettings.from_keywords(chosen, f"preset {name!r}", CLIENT_FIELDS)
    return presets


PRESETS: dict[str, dict[str, Any]] = _checked({
    "default": {},
    "mri-recon": {},
    "fast": {"iterations": 10},
    "tv": {"regularizer": "tv"},
    "wavelet": {"regularizer": "wavelet"},
    "rss": {"coil_maps": "rss"},
    "magnitude": {"magnitude": True},
})
"""Named settings for CONFIG_FILE messages, as fields of :class:`~mri_recon.settings.ReconSettings`
(``default`` and ``mri-recon``: the server's own settings)."""


def _value(name: str, field: str, value: Any) -> Any:
    """The field's value of a client's ``name: value`` (a flag such as ``no_prewhiten``: true sets it)."""
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise ConfigError(printable(f"setting {name!r}: expected a number, text or true/false, found "
                                    f"{json.dumps(value)[:80]}"))
    if isinstance(value, str) and len(value) > TEXT_LIMIT:
        raise ConfigError(printable(f"setting {name!r}: text of {len(value)} characters; no option takes more "
                                    f"than {TEXT_LIMIT}"))
    spec = option_of(field)
    if spec.flag is None:
        return value
    if not isinstance(value, bool):
        raise ConfigError(printable(f"setting {name!r} must be true or false, found {json.dumps(value)[:80]}"))
    return spec.flag_value if value else default_of(field)


def client_keywords(chosen: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`~mri_recon.settings.ReconSettings` keywords of a client's settings (names as typed,
    dashes or underscores); an unknown name refused, with the valid ones."""
    named = {str(name)[:100].replace("-", "_"): value for name, value in chosen.items()}
    if "temporal" in named or "temporal_lambda" in named:
        raise ConfigError("CONFIG_TEXT: the joint temporal reconstruction (a temporal term) needs every frame "
                          "before its first image and is not streamed; use spokes_per_frame (frame by frame) "
                          "or reconstruct the file with reconstruct --temporal tv")
    try:
        refuse_unknown(named, (*ALLOWED, *STREAM_ALLOWED), "CONFIG_TEXT settings")
    except InvalidDataError as exc:
        raise ConfigError(printable(exc)) from None
    return {FIELD_OF[name]: _value(name, FIELD_OF[name], value) for name, value in named.items()
            if name not in STREAM_ALLOWED}  # the stream's choices: stream_spokes()


def preset(name: str) -> dict[str, Any]:
    """The settings of a named preset (a CONFIG_FILE name), as ReconSettings keywords. ``NAME.xml`` names the
    preset ``NAME``: Gadgetron's client sends configuration file names (``default.xml`` when none is given)."""
    if name.endswith(".xml") and name[:-4] in PRESETS:
        name = name[:-4]
    if name not in PRESETS:
        raise ConfigError(printable(f"unknown config {name[:100]!r}: expected a preset name "
                                    f"({', '.join(PRESETS)}) or CONFIG_TEXT with JSON settings"))
    return PRESETS[name]


def json_settings(text: str) -> dict[str, Any]:
    """The settings of a CONFIG_TEXT message (a JSON object, its ``"preset"`` first), as ReconSettings
    keywords."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"CONFIG_TEXT is not JSON ({exc}); expected an object of settings such as "
                          f'{{"iterations": 20, "regularizer": "tv"}}') from None
    except RecursionError:  # the parser recurses once per bracket
        raise ConfigError('CONFIG_TEXT nests its JSON too deeply; expected a flat object of settings such as '
                          '{"iterations": 20}') from None
    if not isinstance(value, dict):
        raise ConfigError(f"CONFIG_TEXT is JSON but not an object (found {type(value).__name__}); expected "
                          f'settings such as {{"iterations": 20}}')
    chosen = {name: v for name, v in value.items() if str(name).replace("-", "_") not in STREAM_ALLOWED}
    named = chosen.pop("preset", None)
    if named is not None and not isinstance(named, str):
        raise ConfigError("CONFIG_TEXT: \"preset\" must be a preset's name")
    return {**(preset(named) if named is not None else {}), **client_keywords(chosen)}


def configured(base: ReconSettings, configs: Sequence[tuple[str, str]],
               bounds: Bounds = DEFAULT_BOUNDS) -> ReconSettings:
    """``base`` with a connection's config messages applied in order (later ones win), within ``bounds``;
    ``configs`` holds ``("file", name)`` for CONFIG_FILE and ``("text", text)`` for CONFIG_TEXT messages."""
    settings = base
    for kind, text in configs:
        chosen = preset(text) if kind == "file" else json_settings(text)
        try:
            settings = settings.replace(**chosen)
        except InvalidDataError as exc:  # ReconSettings' check of a value
            raise ConfigError(printable(f"config: {exc}")) from None
    bounds.check(base, settings)
    return settings


def checked_spokes(value: Any, what: str = "spokes_per_frame") -> int | None:
    """``value`` as readouts per frame: a whole number from 1 to :data:`MAX_SPOKES_PER_FRAME`, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SPOKES_PER_FRAME:
        raise ConfigError(printable(f"{what} must be a whole number >= 1 and <= {MAX_SPOKES_PER_FRAME} (or null "
                                    f"for image groups), found {json.dumps(value)[:80]}"))
    return value


def stream_spokes(configs: Sequence[tuple[str, str]], default: int | None) -> int | None:
    """The readouts per frame the CONFIG_TEXT messages choose (later ones win), else ``default``."""
    spokes = default
    for kind, text in configs:
        value = json.loads(text) if kind == "text" else None  # parsed and checked by configured() first
        for name, given in (value.items() if isinstance(value, dict) else ()):
            if str(name).replace("-", "_") == "spokes_per_frame":
                spokes = checked_spokes(given)
    return spokes


@dataclass(frozen=True)
class Choices:
    """A connection's choices: its reconstruction settings and the readouts per streamed frame (None: the
    image groups of the MRD indices)."""

    settings: ReconSettings
    spokes_per_frame: int | None = None


def chosen(base: ReconSettings, spokes_per_frame: int | None, bounds: Bounds,
           configs: Sequence[tuple[str, str]]) -> Choices:
    """The :class:`Choices` of a connection: :func:`configured` and :func:`stream_spokes`."""
    return Choices(configured(base, configs, bounds), stream_spokes(configs, spokes_per_frame))


def configurator(base: ReconSettings, spokes_per_frame: int | None = None, bounds: Bounds = DEFAULT_BOUNDS
                 ) -> Callable[[Sequence[tuple[str, str]]], Choices]:
    """The :data:`~mri_recon.server.session.Configure` of a server whose own settings are ``base`` and
    ``spokes_per_frame``, its clients' settings within ``bounds``."""
    return functools.partial(chosen, base, checked_spokes(spokes_per_frame, "--spokes-per-frame"), bounds)
