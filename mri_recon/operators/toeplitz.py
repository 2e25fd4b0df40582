"""The normal operator F^H W F as a convolution on the 2x grid (works on NumPy and CuPy arrays).

(F^H W F x)[j] = sum_j' h[j - j'] x[j'] with h[d] = sum_m w_m exp(+i 2 pi k_m . d / N) for d in (-N, N):
a linear convolution, computed exactly as a circular one on a grid of 2N per axis. The PSF of
:func:`mri_recon.operators.psf` holds h[j - N] at index j, so the kernel's spectrum is
``fftn(ifftshift(p))``, computed once; each product is then zero-pad to 2N, FFT, multiply, inverse FFT, crop.
No sample is touched inside the CG loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import get_xp


def _scipy_fft():
    import scipy.fft  # noqa: PLC0415 - import cost paid only when used

    return scipy.fft


def _fftn(x: Any, axes: tuple[int, ...]) -> Any:
    """n-D FFT over ``axes`` in the input's precision (scipy.fft on every core, or cuFFT)."""
    if get_xp(x) is np:
        return _scipy_fft().fftn(x, axes=axes, workers=-1)
    return get_xp(x).fft.fftn(x, axes=axes)


def _padded_fft(x: Any, shape: tuple[int, ...], axes: tuple[int, ...]) -> Any:
    """FFT over ``axes`` of ``x`` zero-padded (at the end) to ``shape``.

    On the CPU the axes are transformed one at a time, each padded just before its own pass, so the
    rows that are still all zeros are never transformed (3/4 of the work of a full 2-D FFT, 7/12 in 3-D).
    """
    xp = get_xp(x)
    if xp is not np:
        return xp.fft.fftn(x, s=shape, axes=axes)
    fft = _scipy_fft()
    y = x
    for axis, n in zip(axes, shape):
        y = fft.fft(y, n=n, axis=axis, workers=-1, overwrite_x=y is not x)
    return y


def _cropped_ifft(y: Any, crop: tuple[int, ...], axes: tuple[int, ...]) -> Any:
    """Inverse FFT over ``axes`` of ``y`` (overwritten), keeping the first ``crop`` entries per axis.

    On the CPU each axis is cropped right after its own pass, so discarded rows are not transformed.
    """
    xp = get_xp(y)
    if xp is not np:
        out = xp.fft.ifftn(y, axes=axes)
        return out[(Ellipsis, *(slice(0, n) for n in crop))]
    fft = _scipy_fft()
    for axis, n in reversed(tuple(zip(axes, crop))):
        y = fft.ifft(y, axis=axis, workers=-1, overwrite_x=True)
        index = [slice(None)] * y.ndim
        index[axis] = slice(0, n)
        y = y[tuple(index)]
    return y


def kernel_spectrum(psf: Any) -> Any:
    """The spectrum of the Toeplitz kernel: ``fftn(ifftshift(psf))`` as complex64.

    Parameters
    ----------
    psf
        complex ``tuple(2 * n for n in matrix)`` from :func:`mri_recon.operators.psf` (NumPy or CuPy).

    Returns
    -------
    array
        complex64 of the same shape and array type.
    """
    xp = get_xp(psf)
    shifted = xp.fft.ifftshift(xp.asarray(psf, dtype=np.complex64))
    return _fftn(shifted, axes=tuple(range(psf.ndim))).astype(np.complex64, copy=False)


def toeplitz_apply(x: Any, spectrum: Any) -> Any:
    """F^H W F x through the 2x-grid convolution.

    Parameters
    ----------
    x
        complex64 ``(..., *matrix)``: any leading axes (coils) are a batch.
    spectrum
        complex64 ``tuple(2 * n for n in matrix)`` from :func:`kernel_spectrum`, same array type as ``x``.

    Returns
    -------
    array
        complex64 of the shape of ``x``.
    """
    ndim = spectrum.ndim
    axes = tuple(range(x.ndim - ndim, x.ndim))
    padded = _padded_fft(x, tuple(spectrum.shape), axes)
    padded *= spectrum
    return get_xp(x).ascontiguousarray(_cropped_ifft(padded, tuple(x.shape[-ndim:]), axes))


def normal_operator(spectrum: Any, *, coil_maps: Any = None, lam: float = 0.0,
                    coil_batch: int | None = None) -> Callable[[Any], Any]:
    """The CG operator: ``A x = sum_c conj(S_c) T(S_c x) + lam x``, or ``A x = T x + lam x`` without maps.

    Parameters
    ----------
    spectrum
        Toeplitz kernel spectrum from :func:`kernel_spectrum`.
    coil_maps
        complex64 ``(C, *matrix)`` sensitivities S (CG-SENSE, x has shape ``matrix``), or None (x has any
        leading batch axes, e.g. one image per coil, each solved independently).
    lam
        Absolute Tikhonov weight (already scaled by the caller).
    coil_batch
        Coils pushed through the 2x-grid FFTs at once (bounds the work memory); None: all.

    Returns
    -------
    callable
        ``x -> A x``, Hermitian positive (semi-)definite; same array type and shape as ``x``.
    """
    lam = float(lam)
    if coil_maps is None:
        def apply(x: Any) -> Any:
            if coil_batch is None or x.ndim == spectrum.ndim or x.shape[0] <= coil_batch:
                y = toeplitz_apply(x, spectrum)
            else:
                step = max(1, int(coil_batch))
                y = get_xp(x).concatenate([toeplitz_apply(x[i:i + step], spectrum)
                                           for i in range(0, x.shape[0], step)])
            if lam:
                y += lam * x
            return y

        return apply

    xp = get_xp(coil_maps)
    if xp is not np:
        from ..backend import Device  # noqa: PLC0415
        from .gpu_toeplitz import sense_operator  # noqa: PLC0415 - GPU only

        return sense_operator(spectrum, coil_maps, lam, coil_batch, Device(int(coil_maps.device.id)))
    conj_maps = xp.conj(coil_maps)
    n_coils = int(coil_maps.shape[0])
    step = n_coils if coil_batch is None else max(1, min(n_coils, int(coil_batch)))

    def apply_sense(x: Any) -> Any:
        out = lam * x if lam else xp.zeros_like(x)
        for start in range(0, n_coils, step):
            part = slice(start, start + step)
            y = toeplitz_apply(coil_maps[part] * x, spectrum)
            y *= conj_maps[part]
            out += y.sum(axis=0)
        return out

    return apply_sense
