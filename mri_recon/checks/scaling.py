"""Scale-free arithmetic: powers of two near an array's magnitude, and exact rescaling by them.

Dividing data by a power of two close to its largest value brings it near 1 without rounding anything
(powers of two are exact in floating point), so float32 holds every intermediate value (squares, sums of
products) of data of any magnitude float32 can represent, and the result of a computation done in these
units does not depend on the data's scale. :mod:`mri_recon.pipeline` solves in such units; the coil-map
estimation (:mod:`mri_recon.prep.coilmaps`) and the receiver basis of prewhitened data use the same helpers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..arrays.backend import get_xp

MIN_EXPONENT, MAX_EXPONENT = -126, 127
"""Exponents of the scale factors: their powers of two and the reciprocals are normal float32 numbers."""


def power_of_two(value: float) -> float:
    """The power of two nearest to ``value`` (> 0) on a log scale, within float32's normal range
    (2^-126 .. 2^127, so that it and its reciprocal are finite float32); 1 for 0 (nothing to scale)."""
    if not value > 0 or not math.isfinite(value):
        return 1.0
    return math.ldexp(1.0, min(MAX_EXPONENT, max(MIN_EXPONENT, round(math.log2(value)))))


def largest(array: Any) -> float:
    """``max |Re|, |Im|`` of a complex (or ``max |.|`` of a real) array: one reduction, one number back
    (0 for an empty array)."""
    xp = get_xp(array)
    if array.size == 0:
        return 0.0
    if array.dtype.kind == "c":
        array = xp.ascontiguousarray(array)
        array = array.view(np.float32 if array.dtype == np.complex64 else np.float64)
    return float(xp.max(xp.abs(array)))


def rescale(array: Any, factor: float) -> Any:
    """``array *= factor`` for a power of two ``factor`` that float32 may not hold (up to 2^254), in steps
    that it does; exact unless the result leaves float32's range."""
    with np.errstate(over="ignore"):  # an overflow is reported by the caller's finiteness check
        for step in rescale_steps(factor):
            array *= step
    return array


def rescale_steps(factor: float) -> list[np.float32]:
    """The float32 powers of two whose product is the power of two ``factor`` (none for 1), each a normal
    float32 (2^-126 .. 2^127)."""
    exponent, steps = round(math.log2(factor)), []
    while exponent:
        step = max(MIN_EXPONENT, min(MAX_EXPONENT, exponent))
        steps.append(np.float32(math.ldexp(1.0, step)))
        exponent -= step
    return steps


def unit_scale(array: Any) -> tuple[Any, float]:
    """``(array / s, s)`` with ``s = power_of_two(largest(array))``: a copy whose largest component is within
    a factor of sqrt(2) of 1 (the input's precision kept; an all-zero array is returned with ``s = 1``)."""
    scale = power_of_two(largest(array))
    if scale == 1.0:
        return array, scale
    real = np.float32 if array.dtype in (np.complex64, np.float32) else np.float64
    return array * real(1.0 / scale), scale
