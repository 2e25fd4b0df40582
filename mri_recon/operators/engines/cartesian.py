"""The encoding operator F of Cartesian samples by FFT: pocketfft on the CPU, cuFFT on the GPU.

Samples sit on integer frequencies ``k`` (cycles per field of view) of the image's own grid, and F is the same
sum as every other engine's (:mod:`.encoding`): ``F x = sum_n x_n exp(-i 2 pi k_m . r_n)`` with
``r_n = (n - N // 2) / N`` (:mod:`mri_recon.checks.grid`), unnormalized, so lambda and the scale of the data mean
what they mean for the non-Cartesian engines. On the grid that sum is a DFT::

    (F x)_m = fftn(ifftshift(x))[k_m mod N]          (F^H d) = fftshift(N * ifftn(G)),  G[q] = sum_{k_m = q} d_m

(``ifftshift`` moves voxel ``N // 2`` to index 0, and the sum is N-periodic in k, so every integer k is
exact; repeated frequencies, e.g. averages, add up in G). The samples form a sampling mask on the grid.
:meth:`CartesianEncoding.normal` is ``F^H W F`` itself, ``N ifftn(M_w fftn(x))`` with the mask's summed
weights ``M_w``: no 2x grid is needed. With coil maps the engine's spectrum (:meth:`CartesianEncoding.spectrum`)
is :meth:`CartesianEncoding.mask_spectrum` on the image grid, which its Toeplitz operators take (fused on the
GPU); without maps it is the kernel spectrum of the PSF of :meth:`Encoding.psf`, exact here too (trajectory 2k
on the 2x grid, again integers). The engines serve Cartesian scans only (``samplings``), neither cache their PSF
on disk nor keep it in the GPU memo: the mask costs less than a lookup.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...arrays import fft
from ...arrays.backend import get_xp
from ...errors import InvalidDataError
from ..base import LinearOperator
from ..normal.toeplitz import kernel_spectrum
from . import cost
from .encoding import Encoding
from .gpu import GpuEncoding

COMPLEX64 = 8

INTEGER_TOLERANCE = 1e-3
"""Largest distance (cycles per FOV) of a sample from an integer frequency for the FFT engines to take it."""


def _fft(x: Any, axes: tuple[int, ...], inverse: bool) -> Any:
    """Unnormalized n-D FFT (``inverse``: the sum with ``exp(+i ...)``, no 1/N) in the input's precision."""
    return fft.fftn(x, axes, inverse=inverse, norm="forward" if inverse else "backward")


def off_grid(trajectory: Any) -> tuple[Any, float]:
    """``trajectory`` ``(M, D)`` (float64) rounded to integer frequencies, and the largest distance of a sample
    from its rounding (cycles per FOV; 0 without samples): a scan is Cartesian where it is at most
    :data:`INTEGER_TOLERANCE`."""
    xp = get_xp(trajectory)
    k = xp.asarray(trajectory, dtype=xp.float64)
    rounded = xp.rint(k)
    return rounded, float(xp.max(xp.abs(k - rounded))) if k.size else 0.0


def grid_indices(trajectory: Any, matrix: tuple[int, ...]) -> Any:
    """The C-order flat index on the unshifted FFT grid of each sample: ``sum_d (k_d mod N_d) * stride_d``.

    Raises :class:`~mri_recon.errors.InvalidDataError` when a sample is not on an integer frequency.
    """
    xp = get_xp(trajectory)
    rounded, far = off_grid(trajectory)
    if far > INTEGER_TOLERANCE:
        raise InvalidDataError(f"the FFT engine takes samples on integer frequencies (cycles per FOV); a sample "
                               f"lies {far:.4g} from the nearest: use a non-Cartesian engine (method exact or nufft)")
    flat = xp.zeros(rounded.shape[0], dtype=xp.int64)
    for axis, n in enumerate(matrix):
        flat = flat * int(n) + xp.mod(rounded[:, axis].astype(xp.int64), int(n))
    return flat


def scatter_sum(indices: Any, values: Any, size: int) -> Any:
    """complex64 ``(B, size)``: the values ``(B, M)`` summed at their ``indices`` (repeated ones add up), by
    ``bincount`` of the real and imaginary parts (float64 sums; NumPy and CuPy alike)."""
    xp = get_xp(values)
    out = xp.empty((values.shape[0], size), dtype=np.complex64)
    for row in range(values.shape[0]):
        real = xp.bincount(indices, weights=values[row].real.astype(np.float64), minlength=size)
        imag = xp.bincount(indices, weights=values[row].imag.astype(np.float64), minlength=size)
        out[row] = real + 1j * imag
    return out


def is_cartesian(trajectory: Any) -> bool:
    """Whether every sample of ``trajectory`` ``(M, D)`` lies on an integer frequency."""
    return bool(len(trajectory)) and off_grid(trajectory)[1] <= INTEGER_TOLERANCE


class CartesianEncoding(Encoding):
    """F of samples on integer frequencies by FFT (pocketfft on the CPU), ``(batch, *matrix) -> (batch, M)``.

    Parameters
    ----------
    trajectory
        float32 ``(M, D)`` integer frequencies in cycles per field of view (any integer: the DFT is periodic).
    matrix
        Image size.
    batch
        Images transformed at once (coils).
    """

    name = "fft"
    device_kind = "cpu"
    samplings = ("cartesian",)
    caches_psf = False
    memo = False

    @classmethod
    def seconds(cls, matrix: tuple[int, ...], samples: int, coils: int, psf: bool = True) -> float:
        return cost.fft_seconds(cls.device_kind, tuple(int(v) for v in matrix), coils, psf)

    @classmethod
    def stage_bytes(cls, matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, fixed: int,
                    workers: int, trajectory: Any = None) -> dict[str, int]:
        """F^H d: the coils' grids and images and the samples' grid indices; the PSF (without maps): the 2x
        grid and its spectrum; with maps the mask spectrum on the image grid."""
        n_vox = math.prod(matrix)
        grid2 = 2 ** len(matrix) * n_vox
        fhd = 2 * n_coils * n_vox * COMPLEX64 + n_samples * 8
        psf = n_vox * (COMPLEX64 + 8) if sense else 2 * grid2 * COMPLEX64 + n_samples * 8
        return {"fhd": int(fixed + fhd), "psf": int(fixed + psf)}

    def __init__(self, trajectory: Any, matrix: tuple[int, ...], batch: int = 1, indices: Any = None) -> None:
        super().__init__(trajectory, matrix, batch)
        xp = get_xp(trajectory)
        self.indices = grid_indices(trajectory, self.matrix) if indices is None else indices
        self.unique = int(xp.unique(self.indices).size) == int(self.indices.size)
        self._axes = tuple(range(1, len(self.matrix) + 1))

    def batched(self, batch: int) -> Encoding:
        if batch == self.ishape[0]:
            return self
        return type(self)(self.trajectory, self.matrix, batch, indices=self.indices)

    def _apply(self, x: Any) -> Any:
        xp = get_xp(x)
        spectrum = _fft(xp.fft.ifftshift(x, axes=self._axes), self._axes, inverse=False)
        out = spectrum.reshape(x.shape[0], -1)[:, self.indices]
        return out.astype(np.complex64, copy=False)

    def scatter(self, y: Any) -> Any:
        """``G``: the samples ``(B, M)`` added onto the unshifted grid ``(B, *matrix)``."""
        xp = get_xp(y)
        if not self.unique:
            return scatter_sum(self.indices, y, math.prod(self.matrix)).reshape(y.shape[0], *self.matrix)
        grid = xp.zeros((y.shape[0], math.prod(self.matrix)), dtype=np.complex64)
        grid[:, self.indices] = y
        return grid.reshape(y.shape[0], *self.matrix)

    def _adjoint(self, y: Any) -> Any:
        xp = get_xp(y)
        image = _fft(self.scatter(y), self._axes, inverse=True)
        return xp.fft.fftshift(image, axes=self._axes).astype(np.complex64, copy=False)

    def mask(self, weights: Any = None) -> Any:
        """The sampling mask ``M_w`` on the unshifted grid (float32 ``matrix``): the weights summed per
        frequency (each sample counts 1 without weights)."""
        xp = get_xp(self.indices)
        w = xp.ones(self.indices.size, dtype=np.float64) if weights is None else xp.asarray(weights, np.float64)
        flat = xp.bincount(self.indices, weights=w, minlength=math.prod(self.matrix))
        return flat.astype(np.float32).reshape(self.matrix)

    def mask_spectrum(self, weights: Any = None) -> Any:
        """complex64 ``matrix``: ``prod(matrix) * mask``, the spectrum with which the Toeplitz operators of
        `mri_recon.operators.normal.toeplitz` (their FFT, product, inverse FFT with 1/N) compute ``F^H W F`` on
        the image grid itself: no padding, a quarter of the 2x grid's FFT work in 2-D, an eighth in 3-D."""
        return (self.mask(weights) * np.float32(math.prod(self.matrix))).astype(np.complex64)

    def spectrum(self, weights: Any, maps: Any = None) -> Any:
        """With maps :meth:`mask_spectrum` on the image grid; without, the 2x grid's kernel spectrum."""
        return kernel_spectrum(self.psf(weights)) if maps is None else self.mask_spectrum(weights)

    def normal(self, weights: Any = None, maps: Any = None, lam: float = 0.0, *, coil_batch: int | None = None,
               spectrum: Any = None) -> LinearOperator:
        """``F^H W F + lam I`` on the image grid: :class:`MaskNormal` of :meth:`mask` without maps and
        spectrum; otherwise the Toeplitz operator of ``spectrum`` (default :meth:`spectrum`) with the maps."""
        if maps is None and spectrum is None:
            return MaskNormal(self.mask(weights), self.ishape, lam)
        spectrum = self.spectrum(weights, maps) if spectrum is None else spectrum
        return self.toeplitz_normal(spectrum, maps, lam, coil_batch)


class GpuCartesianEncoding(CartesianEncoding, GpuEncoding):
    """:class:`CartesianEncoding` on CuPy arrays (cuFFT through ``cupy.fft``); with maps the fused SENSE
    normal operator, whose kernels take the image grid as well as the 2x grid."""

    name = "fft"
    device_kind = "gpu"


class MaskNormal(LinearOperator):
    """``x -> N ifftn(M fftn(x))`` over the trailing axes: ``F^H W F`` of Cartesian samples (Hermitian).

    The FFT's shifts cancel: ``F^H W F`` is a circular convolution, which commutes with the cyclic shift
    ``ifftshift``. ``mask`` is the float32 unshifted-grid mask of :meth:`CartesianEncoding.mask`.
    """

    hermitian = True

    def __init__(self, mask: Any, ishape: tuple[int, ...], lam: float = 0.0) -> None:
        super().__init__(ishape, ishape)
        self.mask_values, self.lam = mask, float(lam)
        self._axes = tuple(range(len(ishape) - mask.ndim, len(ishape)))

    def _apply(self, x: Any) -> Any:
        spectrum = _fft(x, self._axes, inverse=False)
        spectrum *= self.mask_values
        out = _fft(spectrum, self._axes, inverse=True).astype(np.complex64, copy=False)
        if self.lam:
            out += np.float32(self.lam) * x
        return out


def cartesian_engine(gpu: bool) -> type[CartesianEncoding]:
    """The FFT engine of a device: :class:`GpuCartesianEncoding` on a GPU, :class:`CartesianEncoding` else."""
    return GpuCartesianEncoding if gpu else CartesianEncoding


ENGINES = (CartesianEncoding, GpuCartesianEncoding)
