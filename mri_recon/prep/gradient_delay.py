"""The preparation's gradient-delay step: ``gradient_delay="auto" | "ring" | "none" | (X, Y[, Z])``.

:func:`correct_gradient_delay` returns the scan with its trajectory corrected (BART ``traj -q``: each spoke
moved by the delay tensor applied to its step, :mod:`mri_recon.prep.delay`) and the record entries
``gradient_delay`` (``"ring"``, ``"given"`` or ``"none"``), ``gradient_delay_samples`` (the tensor's
parameters ``Sxx, Syy, Sxy`` or in 3D ``Sxx, Syy, Szz, Sxy, Sxz, Syz``, samples; absent for ``"none"``)
and ``gradient_delay_note`` (one sentence: what was estimated from what, or why nothing was done); a RING
estimate adds ``gradient_delay_std`` (standard errors) and ``gradient_delay_spokes``. ``"none"`` (the
default) records nothing.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..errors import InvalidDataError
from ..scan import Scan
from .delay import given_tensor, parameters_of, parse_gradient_delay, radial_readouts, readout_length, shift_trajectory
from .ring import MIN_SPOKES, estimate_delay

log = logging.getLogger("mri_recon.prep")


def correct_gradient_delay(scans, gradient_delay="none") -> tuple[list[Scan], dict[str, Any]]:
    """``(scans with corrected trajectories, record)`` for one scan or the frames of one acquisition: one
    estimate from all of them (pairs within each), applied to each. ``"auto"`` estimates only a radial scan
    (2D radial, stack of stars or kooshball, spokes through the centre) with at least
    :data:`~mri_recon.prep.ring.MIN_SPOKES` spokes and otherwise leaves it as it is; ``"ring"`` estimates
    or raises :class:`~mri_recon.errors.InvalidDataError` saying why it cannot."""
    scans = [scans] if isinstance(scans, Scan) else list(scans)
    choice, values = parse_gradient_delay(gradient_delay)
    if choice == "none":
        return scans, {}  # the default: nothing done, nothing recorded
    try:
        readouts = [radial_readouts(s.trajectory, readout_length(s)) for s in scans]
    except InvalidDataError as exc:
        return _not_radial(scans, choice, str(exc))
    kind = readouts[0].kind
    if choice == "given":
        tensor = given_tensor(values, readouts[0])
        note = f"given gradient delay {_listed(parameters_of(tensor))} samples applied ({kind})"
        return _applied(scans, readouts, tensor, "given", note)
    spokes = min(_spokes(r) for r in readouts)
    if choice == "auto" and spokes < MIN_SPOKES[kind]:
        note = (f"auto: {kind} scan with {spokes} spokes{' per partition' if kind == 'stack-of-stars' else ''}, "
                f"fewer than the {MIN_SPOKES[kind]} RING needs; no gradient-delay correction")
        log.info("%s", note)
        return scans, {"gradient_delay": "none", "gradient_delay_note": note}
    try:
        found = estimate_delay(scans)
    except InvalidDataError as exc:
        if choice != "auto":
            raise
        log.info("auto: %s; no gradient-delay correction", exc)
        return scans, {"gradient_delay": "none", "gradient_delay_note": f"auto: {exc}; no gradient-delay correction"}
    note = (f"{'auto: ' if choice == 'auto' else ''}RING estimate from {found.spokes} spokes ({found.pairs} "
            f"pairs, {kind}{', ' + str(len(scans)) + ' frames' if len(scans) > 1 else ''}): "
            f"{_listed(found.parameters)} samples (+- {_listed(found.std)}), residual {found.rms:.2g}; applied")
    record = {"gradient_delay_std": [float(v) for v in found.std], "gradient_delay_spokes": found.spokes}
    scans, done = _applied(scans, readouts, found.tensor, "ring", note)
    return scans, {**done, **record}


def _spokes(readouts) -> int:
    if readouts.partition is None:
        return readouts.count
    return min(int(np.sum(np.round(readouts.partition, 6) == v)) for v in np.unique(np.round(readouts.partition, 6)))


def _not_radial(scans: list[Scan], choice: str, why: str) -> tuple[list[Scan], dict[str, Any]]:
    if choice != "auto":
        what = "RING estimates" if choice == "ring" else "a given gradient delay applies to"
        raise InvalidDataError(f"{scans[0].source}: {what} radial scans only (2D radial, stack of stars, "
                               f"kooshball): {why}")
    note = f"auto: not a radial scan ({why}); no gradient-delay correction"
    log.info("%s", note)
    return scans, {"gradient_delay": "none", "gradient_delay_note": note}


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

