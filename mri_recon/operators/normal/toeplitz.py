"""The normal operator F^H W F as a convolution on the 2x grid (works on NumPy and CuPy arrays).

(F^H W F x)[j] = sum_j' h[j - j'] x[j'] with h[d] = sum_m w_m exp(+i 2 pi k_m . d / N) for d in (-N, N):
a linear convolution, computed exactly as a circular one on a grid of 2N per axis. The PSF of
:func:`mri_recon.operators.psf` holds h[j - N] at index j, so the kernel's spectrum is
``fftn(ifftshift(p))``, computed once; each product is then zero-pad to 2N, FFT, multiply, inverse FFT, crop.
No sample is touched inside the CG loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...arrays import fft
from ...arrays.backend import get_xp
from ..arith import alternate
from ..base import LinearOperator


def _padded_fft(x: Any, shape: tuple[int, ...], axes: tuple[int, ...]) -> Any:
    """FFT over ``axes`` of ``x`` zero-padded (at the end) to ``shape``.

    On the CPU the axes are transformed one at a time, each padded just before its own pass, so the
    rows that are still all zeros are never transformed (3/4 of the work of a full 2-D FFT, 7/12 in 3-D).
    """
    if get_xp(x) is not np:
        return fft.fftn(x, axes, shape=shape)
    y = x
    for axis, n in zip(axes, shape):
        y = fft.fftn(y, (axis,), shape=(n,), overwrite=y is not x)
    return y


def _cropped_ifft(y: Any, crop: tuple[int, ...], axes: tuple[int, ...]) -> Any:
    """Inverse FFT over ``axes`` of ``y`` (overwritten), keeping the first ``crop`` entries per axis.

    On the CPU each axis is cropped right after its own pass, so discarded rows are not transformed.
    """
    if get_xp(y) is not np:
        out = fft.fftn(y, axes, inverse=True)
        return out[(Ellipsis, *(slice(0, n) for n in crop))]
    for axis, n in reversed(tuple(zip(axes, crop))):
        y = fft.fftn(y, (axis,), inverse=True, overwrite=True)
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
    return kernel_spectra(psf[None])[0]


def kernel_spectra(psfs: Any) -> Any:
    """:func:`kernel_spectrum` of each of a stack of PSFs ``(B, *big)``, in one batched transform."""
    xp = get_xp(psfs)
    axes = tuple(range(1, psfs.ndim))
    if xp is not np:  # fftn(ifftshift(p)) = (-1)^(sum of indices) fftn(p) on the even 2N grid
        from cupy.cuda import cufft  # noqa: PLC0415 - GPU only

        from ..gpu.fft import fft_plan  # noqa: PLC0415 - GPU only

        grids = xp.ascontiguousarray(psfs, dtype=np.complex64)
        spectra = xp.empty_like(grids)
        fft_plan(tuple(grids.shape), int(grids.device.id)).fft(grids, spectra, cufft.CUFFT_FORWARD)
        return alternate(spectra, 1.0)
    shifted = xp.fft.ifftshift(xp.asarray(psfs, dtype=np.complex64), axes=axes)
    return fft.fftn(shifted, axes).astype(np.complex64, copy=False)


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


class Toeplitz(LinearOperator):
    """F^H W F of one image (or a batch of images) as the 2x-grid convolution; Hermitian.

    Parameters
    ----------
    spectrum
        complex64 ``tuple(2 * n for n in matrix)`` from :func:`kernel_spectrum`.
    ishape
        ``matrix`` or ``(batch, *matrix)``.
    """

    hermitian = True

    def __init__(self, spectrum: Any, ishape: tuple[int, ...]) -> None:
        super().__init__(ishape, ishape)
        self.spectrum = spectrum

    def _apply(self, x: Any) -> Any:
        return toeplitz_apply(x, self.spectrum)


class ToeplitzNormal(LinearOperator):
    """The CG operator ``A x = sum_c conj(S_c) T(S_c x) + lam x`` (NumPy or CuPy, unfused).

    Without maps, ``A x = T x + lam x`` on images with any leading batch axes (one image per coil, each
    solved independently): ``ishape`` is ``matrix`` and only the trailing axes are checked.
    The coils go through the 2x-grid FFTs ``coil_batch`` at a time. Hermitian positive (semi-)definite.
    On a GPU with maps, :func:`normal_operator` returns the fused
    :class:`mri_recon.operators.normal.gpu_toeplitz.FusedSenseNormal` instead.
    """

    hermitian = True

    def __init__(self, spectrum: Any, matrix: tuple[int, ...], *, coil_maps: Any = None, lam: float = 0.0,
                 coil_batch: int | None = None) -> None:
        super().__init__(matrix, matrix)
        self.spectrum, self.maps, self.lam = spectrum, coil_maps, float(lam)
        self.coil_batch = coil_batch

    def _check(self, array: Any, shape: tuple[int, ...], what: str) -> None:
        ndim = len(shape)
        if self.maps is None and array.ndim > ndim:
            shape = (*array.shape[:array.ndim - ndim], *shape)
        super()._check(array, shape, what)

    def _apply(self, x: Any) -> Any:
        xp = get_xp(x)
        if self.maps is None:
            step = self.coil_batch
            if step is None or x.ndim == self.spectrum.ndim or x.shape[0] <= step:
                y = toeplitz_apply(x, self.spectrum)
            else:
                step = max(1, int(step))
                y = xp.concatenate([toeplitz_apply(x[i:i + step], self.spectrum)
                                    for i in range(0, x.shape[0], step)])
            if self.lam:
                y += self.lam * x
            return y
        n_coils = int(self.maps.shape[0])
        step = n_coils if self.coil_batch is None else max(1, min(n_coils, int(self.coil_batch)))
        out = self.lam * x if self.lam else xp.zeros_like(x)
        for start in range(0, n_coils, step):
            part = self.maps[start:start + step]
            y = toeplitz_apply(part * x, self.spectrum)
            y *= xp.conj(part)
            out += y.sum(axis=0)
        return out


def normal_operator(spectrum: Any, *, coil_maps: Any = None, lam: float = 0.0,
                    coil_batch: int | None = None) -> LinearOperator:
    """The CG operator: ``A x = sum_c conj(S_c) T(S_c x) + lam x``, or ``A x = T x + lam x`` without maps.

    The one place that chooses a Toeplitz normal operator by array type: every engine's
    :meth:`~mri_recon.operators.engines.encoding.Encoding.toeplitz_normal` comes here.

    Parameters
    ----------
    spectrum
        Toeplitz kernel spectrum from :func:`kernel_spectrum` on the 2x grid, or, with maps, one of the maps'
        image shape (a Cartesian sampling mask's, circular convolution on the image grid).
    coil_maps
        complex64 ``(C, *matrix)`` sensitivities S (CG-SENSE, x has shape ``matrix``), or None (x has any
        leading batch axes, e.g. one image per coil, each solved independently).
    lam
        Absolute Tikhonov weight (already scaled by the caller).
    coil_batch
        Coils pushed through the FFTs at once (bounds the work memory); None: all.

    Returns
    -------
    LinearOperator
        Hermitian positive (semi-)definite; the fused GPU operator (which writes into a given array, for
        CUDA-graph CG) when the maps are CuPy arrays.
    """
    if coil_maps is not None and get_xp(coil_maps) is not np:
        from .gpu_toeplitz import FusedSenseNormal  # noqa: PLC0415 - GPU only

        return FusedSenseNormal(spectrum, coil_maps, lam, coil_batch)
    image_grid = coil_maps is not None and tuple(spectrum.shape) == tuple(coil_maps.shape[1:])
    matrix = tuple(spectrum.shape) if image_grid else tuple(n // 2 for n in spectrum.shape)
    return ToeplitzNormal(spectrum, matrix, coil_maps=coil_maps, lam=lam, coil_batch=coil_batch)
