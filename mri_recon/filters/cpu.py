"""The CPU path of the post-filter: ``scipy.ndimage`` in double precision, any filter size.

This is the reference the GPU path is tested against: ``scipy.ndimage.correlate`` for a dense filter, and
one ``scipy.ndimage.correlate1d`` per axis for a filter defined by its 1-D factors (the Gaussian of
:func:`mri_recon.filters.smooth`, which is then exactly ``scipy.ndimage.gaussian_filter``'s computation).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from .taps import Taps

SCIPY_MODES = {"zero": "constant", "nearest": "nearest"}
"""scipy's name of each boundary mode (``"zero"`` is ``mode="constant", cval=0``)."""


def correlate(image: np.ndarray, taps: Taps, mode: str) -> np.ndarray:
    """Correlate a float32 / complex64 NumPy ``image`` with validated ``taps``.

    Parameters
    ----------
    image : numpy.ndarray
        1-D, 2-D or 3-D, float32 or complex64 (see :func:`mri_recon.filters.taps.check_image`).
    taps : Taps
        Validated filter of the image's rank, any odd sizes.
    mode : {"zero", "nearest"}
        Ghost cells: 0, or the nearest edge element.

    Returns
    -------
    numpy.ndarray
        Same shape and dtype as ``image``: the double-precision result rounded once.
    """
    wide = image.astype(np.complex128 if image.dtype.kind == "c" else np.float64)
    scipy_mode = SCIPY_MODES[mode]
    if not taps.from_factors:
        out = ndimage.correlate(wide, taps.dense.astype(np.float64), mode=scipy_mode, cval=0.0)
    else:
        out = wide
        for axis, factor in enumerate(taps.factors):
            out = ndimage.correlate1d(out, factor.astype(np.float64), axis=axis, mode=scipy_mode, cval=0.0)
    return out.astype(image.dtype)
