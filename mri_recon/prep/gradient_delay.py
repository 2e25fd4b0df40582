"""The preparation's gradient-delay step: ``gradient_delay="auto" | "ring" | "opposed" | "none"``, delays
``"X,Y[,Z]"`` in our axis order, or BART's ``"y:x:yx"`` as ``bart estdelay`` prints it.

:func:`correct_gradient_delay` returns the scan with its trajectory corrected (BART ``traj -q ... -O``: each
spoke moved by the delay tensor applied to its step, :mod:`mri_recon.prep.delay`) and the record entries
``gradient_delay`` (an estimator's name, ``"given"`` or ``"none"``), ``gradient_delay_samples`` (the tensor's
parameters ``Sxx, Syy, Sxy`` or in 3D ``Sxx, Syy, Szz, Sxy, Sxz, Syz``, samples; absent when nothing was
applied) and ``gradient_delay_note`` (one sentence: what was estimated from what, or why nothing was done).
An estimate adds ``gradient_delay_std`` (standard errors), ``gradient_delay_spokes`` and
``gradient_delay_halves`` (:attr:`~mri_recon.prep.fit.DelayEstimate.halves`); one that was not applied is
recorded as ``gradient_delay_estimate``. ``"none"`` (the default) records nothing.

The estimators (:data:`ESTIMATORS`): RING (:mod:`~mri_recon.prep.ring`) and BART's default, opposed spokes
(:mod:`~mri_recon.prep.adaptive`). ``auto`` runs every estimator the scan allows and applies the first of
:data:`ESTIMATORS` (RING, whose model includes the transverse shift of each spoke) whose estimate the data
support: its two halves agree within :data:`HALVES_TOL` and its equations fit within :data:`RMS_TOL`; then
the estimators that pass agree (:data:`AGREE_REL`), and some delay exceeds :data:`NEGLIGIBLE`. A named
estimator whose estimate fails the first two tests raises :class:`~mri_recon.errors.InvalidDataError`
naming the figure.
"""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidDataError
from ..scan import Scan
from .delay import from_bart, given_tensor, parameters_of, radial_readouts, readout_length, shift_trajectory, tensor_of

if TYPE_CHECKING:
    from .fit import DelayEstimate

log = logging.getLogger("mri_recon.prep")

ESTIMATORS = {"ring": "ring", "opposed": "adaptive"}
"""Gradient-delay estimators by name: the module of :mod:`mri_recon.prep` whose ``estimate_delay(scans) ->
DelayEstimate`` it is (:func:`estimator`; the modules load when an estimate is asked for)."""
CHOICES = ("auto", *ESTIMATORS, "none")
"""The named choices of ``gradient_delay=``; else delays."""
HALVES_TOL = 0.1
"""Samples: the largest disagreement between the even and the odd spokes' estimates that is applied."""
AGREE_TOL = 0.05
AGREE_REL = 0.15
"""Under ``auto``, two estimators agree when they differ by at most ``AGREE_TOL`` samples plus ``AGREE_REL``
times the largest delay: the opposed-spoke method ignores the shift of each spoke across its line, which
biases it by up to about a tenth of a strongly anisotropic delay (docs/gradient_delay.md)."""
RMS_TOL = 0.2
"""Samples: the largest RMS residual of the estimate's equations that is applied."""
NEGLIGIBLE = 0.02
"""Samples: under ``auto``, an estimate with no parameter larger than this is not applied."""
MAX_DELAY = 16.0
"""Samples: the largest delay accepted (a gradient delay is a few samples at most)."""
_FORMS = "auto, ring, opposed, none, X,Y[,Z] (samples, our axes) or BART's y:x:yx (as bart estdelay prints it)"


def estimator(name: str) -> Callable[..., DelayEstimate]:
    """The estimator ``name`` of :data:`ESTIMATORS`: ``f(scans) -> DelayEstimate`` for one scan or the frames of
    one acquisition."""
    return importlib.import_module(f".{ESTIMATORS[name]}", __package__).estimate_delay


def parse_gradient_delay(value) -> tuple[str, tuple[float, ...] | None]:
    """``(choice, None)`` for a name of :data:`CHOICES`, ``("given", (X, Y[, Z]))`` for delays ``"X,Y[,Z]"``
    or a sequence of 2 or 3 numbers, ``("bart", (Sxx, Syy, Sxy))`` for BART's ``"y:x:yx"`` (optionally
    ``"bart:y:x:yx"``); anything else raises :class:`~mri_recon.errors.InvalidDataError`."""
    if value is None:
        return "none", None
    if isinstance(value, str):
        text = value.strip().lower()
        if text in CHOICES:
            return text, None
        if ":" in text:
            return "bart", from_bart(_numbers(value, text.removeprefix("bart:").split(":"), (3,)))
        return "given", _numbers(value, text.split(","), (2, 3))
    if isinstance(value, (tuple, list, np.ndarray)):
        return "given", _numbers(value, list(value), (2, 3))
    raise InvalidDataError(f"gradient delay must be {_FORMS}, found {value!r}")


def _numbers(value, parts: list, counts: tuple[int, ...]) -> tuple[float, ...]:
    numbers = [_number(p) for p in parts]
    if None in numbers or len(numbers) not in counts:
        raise InvalidDataError(f"gradient delay must be {_FORMS}, with finite numbers; found {value!r}")
    if max(abs(v) for v in numbers) > MAX_DELAY:
        raise InvalidDataError(f"gradient delay {value!r} is out of range: a delay is at most {MAX_DELAY:g} "
                               f"samples (a few samples at most on a scanner)")
    return tuple(numbers)


def _number(text) -> float | None:
    if isinstance(text, bool):
        return None
    try:
        number = float(text.strip() if isinstance(text, str) else text)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def correct_gradient_delay(scans, gradient_delay="none") -> tuple[list[Scan], dict[str, Any]]:
    """``(scans with corrected trajectories, record)`` for one scan or the frames of one acquisition: one
    estimate from all of them (pairs within each), applied to each. ``"auto"`` estimates only a radial scan
    (2D radial, stack of stars or kooshball, spokes through the centre) with at least
    :data:`~mri_recon.prep.fit.MIN_SPOKES` spokes and applies only what the data support; an estimator's
    name estimates or raises :class:`~mri_recon.errors.InvalidDataError` saying why it cannot."""
    scans = [scans] if isinstance(scans, Scan) else list(scans)
    choice, values = parse_gradient_delay(gradient_delay)
    if choice == "none":
        return scans, {}  # the default: nothing done, nothing recorded
    try:
        readouts = [radial_readouts(s.trajectory, readout_length(s)) for s in scans]
    except InvalidDataError as exc:
        return _not_radial(scans, choice, str(exc))
    if choice in ("given", "bart"):
        tensor = _given(values, readouts[0], choice)
        note = f"given gradient delay {_listed(parameters_of(tensor))} samples applied ({readouts[0].kind})"
        return _applied(scans, readouts, tensor, "given", note)
    if choice == "auto":
        return _auto(scans, readouts)
    found = estimator(choice)(scans)
    trouble = _trouble(found)
    if trouble:
        raise InvalidDataError(f"{scans[0].source}: the {choice} gradient-delay estimate {_listed(found.parameters)} "
                               f"is not supported by the data: {trouble}; not applied (try --gradient-delay auto, "
                               f"the other estimator, or give the delays)")
    return _estimated(scans, readouts, found, "")


def _auto(scans: list[Scan], readouts: list) -> tuple[list[Scan], dict[str, Any]]:
    """Every estimator the scan allows; the first of :data:`ESTIMATORS` whose estimate the data support,
    applied when the others that pass agree with it."""
    from .fit import MIN_SPOKES  # noqa: PLC0415 - the estimators' model, loaded when one runs

    kind = readouts[0].kind
    spokes = min(_spokes(r) for r in readouts)
    if spokes < MIN_SPOKES[kind]:
        per = " per partition" if kind == "stack-of-stars" else ""
        return _left(scans, f"auto: {kind} scan with {spokes} spokes{per}, fewer than the {MIN_SPOKES[kind]} "
                            f"an estimate needs; no gradient-delay correction")
    found, refused = [], []
    for name in ESTIMATORS:
        try:
            found.append(estimator(name)(scans))
        except InvalidDataError as exc:
            refused.append(f"{name}: {exc}")
    if not found:
        return _left(scans, f"auto: {'; '.join(refused)}; no gradient-delay correction")
    sound = [f for f in found if not _trouble(f)]
    best = sound[0] if sound else found[0]
    trouble = _trouble(best) or _disagreement(sound)
    if trouble:
        return _left(scans, f"auto: {_described(best)}, not applied: {trouble}", best)
    if max(abs(v) for v in best.parameters) <= NEGLIGIBLE:
        return _left(scans, f"auto: {_described(best)}, no delay above {NEGLIGIBLE:g} samples: not applied", best)
    return _estimated(scans, readouts, best, "auto: ")


def _trouble(found: DelayEstimate) -> str:
    """Why the data do not support the estimate ``found`` (empty when they do)."""
    if not found.halves <= HALVES_TOL:
        return (f"its even and odd spokes' estimates differ by {found.halves:.3g} samples (at most "
                f"{HALVES_TOL:g} is applied)")
    if not found.rms <= RMS_TOL:
        return f"its equations' RMS residual is {found.rms:.3g} samples (at most {RMS_TOL:g} is applied)"
    return ""


def _disagreement(found: list[DelayEstimate]) -> str:
    """Why estimates that each pass :func:`_trouble` cannot be applied together (empty when they agree)."""
    apart = max(np.max(np.abs(np.subtract(f.parameters, found[0].parameters))) for f in found)
    allowed = AGREE_TOL + AGREE_REL * max(abs(v) for v in found[0].parameters)
    if apart <= allowed:
        return ""
    names = " and ".join(f"{f.method} {_listed(f.parameters)}" for f in found)
    return f"the estimators disagree by {apart:.3g} samples ({names}; at most {allowed:.3g} is applied)"


def _described(found: DelayEstimate) -> str:
    return (f"{found.method} estimate {_listed(found.parameters)} samples (+- {_listed(found.std)}, halves "
            f"{found.halves:.2g}, residual {found.rms:.2g}) from {found.spokes} spokes")


def _estimated(scans: list[Scan], readouts: list, found: DelayEstimate, prefix: str):
    frames = f", {len(scans)} frames" if len(scans) > 1 else ""
    note = f"{prefix}{_described(found)} ({readouts[0].kind}{frames}); applied"
    scans, done = _applied(scans, readouts, found.tensor, found.method, note)
    return scans, {**done, **_figures(found)}


def _figures(found: DelayEstimate) -> dict[str, Any]:
    return {"gradient_delay_std": [float(v) for v in found.std], "gradient_delay_spokes": found.spokes,
            "gradient_delay_halves": found.halves}


def _left(scans: list[Scan], note: str, found: DelayEstimate | None = None) -> tuple[list[Scan], dict[str, Any]]:
    """The scans as they are, and the record of why (with the estimate that was not applied)."""
    log.info("%s", note)
    record = {"gradient_delay": "none", "gradient_delay_note": note}
    if found is not None:
        record = {**record, "gradient_delay_estimate": found.parameters, **_figures(found)}
    return scans, record


def _given(values: tuple[float, ...], readouts, choice: str) -> np.ndarray:
    if choice == "given":
        return given_tensor(values, readouts)
    if readouts.plane != 2:
        raise InvalidDataError(f"BART's y:x:yx delays are in-plane; a {readouts.kind} scan takes X,Y,Z")
    return tensor_of(values, 2)


def _spokes(readouts) -> int:
    """Spokes of the smallest group an estimate uses (a stack of stars: of its central partitions)."""
    from .fit import estimated_groups  # noqa: PLC0415 - the estimators' model, loaded when one runs

    return min(len(group) for group in estimated_groups(readouts))


def _not_radial(scans: list[Scan], choice: str, why: str) -> tuple[list[Scan], dict[str, Any]]:
    if choice != "auto":
        what = f"the {choice} estimate takes" if choice in ESTIMATORS else "a given gradient delay applies to"
        raise InvalidDataError(f"{scans[0].source}: {what} radial scans only (2D radial, stack of stars, "
                               f"kooshball): {why}")
    return _left(scans, f"auto: not a radial scan ({why}); no gradient-delay correction")


def _applied(scans: list[Scan], readouts: list, tensor: np.ndarray, how: str, note: str):
    log.info("%s", note)
    out = [s.replace(trajectory=shift_trajectory(s.trajectory, r, tensor)) for s, r in zip(scans, readouts)]
    return out, {"gradient_delay": how, "gradient_delay_samples": parameters_of(tensor), "gradient_delay_note": note}


def _listed(values) -> str:
    return "(" + ", ".join(f"{float(v):.4f}" for v in values) + ")"


def shared_gradient_delay(images: list, gradient_delay="none") -> tuple[list, dict[str, Any]]:
    """``(images, record)`` for the ``(key, scan)`` images of one file (slices, repetitions, phases: frames):
    one estimate from all of them, applied to each (:func:`correct_gradient_delay`). One image, or
    ``"none"``: the images as they are and ``{}`` (:func:`~mri_recon.prep.prepare_scan` corrects one alone)."""
    if len(images) < 2 or parse_gradient_delay(gradient_delay)[0] == "none":
        return images, {}
    scans, record = correct_gradient_delay([scan for _, scan in images], gradient_delay)
    return [(key, scan) for (key, _), scan in zip(images, scans)], record
