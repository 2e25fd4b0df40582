"""NLINV: image and coil sensitivities estimated together from the data (Uecker et al. 2008), with the
sampling's Toeplitz point-spread function as BART's non-Cartesian ``nlinv`` uses it.

The unknowns are an image ``rho`` on the matrix and, per coil, Fourier coefficients ``chat_j`` on the 2x grid;
the sensitivities are ``c_j = crop(F^-1 (w chat_j))`` with ``F`` the unitary FFT of the 2x grid, ``crop`` its
central ``matrix`` and ``w = (1 + a |k|^2)^(-b/2)`` the Sobolev weights (``k`` in cycles per 2x-grid sample,
[-0.5, 0.5); BART's a = 220, b = 32): sensitivities are smooth by construction and need not be periodic in the
field of view. The forward model is ``G(x)_j = A(rho c_j)`` with ``A`` the encoding divided by
``sqrt(prod(matrix))`` (so that a fully sampled Cartesian scan has ``A^H A = I``).

Only ``A^H A`` and ``A^H y`` are needed: ``A^H A`` is the Toeplitz convolution of the PSF on the 2x grid
(:mod:`mri_recon.operators.normal.toeplitz`) and ``A^H y`` the coils' adjoint images, computed once. Each
Gauss-Newton step solves ``(DG^H DG + alpha_n I) h = DG^H (y - G(x_n)) - alpha_n x_n`` by conjugate gradients
(:func:`mri_recon.solvers.cg.cg`) and sets ``x_{n+1} = x_n + h``; ``alpha_n = alpha_0 / q^n`` (BART's
``irgnm``: alpha_0 = 1, q = 2, from ``rho = 1``, ``chat = 0``; 11 steps, BART 8). Samples are not density
compensated, as in BART. The data are first scaled so that ``||A^H y|| =`` :data:`DATA_NORM` (as BART
normalizes its data), so the result does not depend on their scale.

The maps returned are the sensitivities divided by their root-sum-of-squares per voxel (unit norm
everywhere, no mask); their phase is NLINV's own: the joint estimate leaves the smooth phase in the maps
and the image's phase in ``rho``. Everything is written against the array module of the input, so NumPy and
CuPy run the same code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import fft
from ..arrays.backend import Device, get_xp, resolve_device_like, to_device
from ..checks.scaling import unit_scale
from ..errors import InvalidDataError
from ..operators.normal.toeplitz import kernel_spectrum, toeplitz_apply
from ..solvers.cg import cg, inner

SOBOLEV_A, SOBOLEV_B = 220.0, 32.0
"""The Sobolev weights ``(1 + a |k|^2)^(-b/2)`` of the sensitivities' coefficients (BART's ``-a``, ``-b``)."""
NEWTON_STEPS = 11
"""Gauss-Newton steps (BART's ``nlinv -i`` default is 8, which leaves a 3-D kooshball's maps short of
convergence)."""
ALPHA, REDUCTION = 1.0, 2.0
"""The first step's regularization and the factor it is divided by at each step (BART's defaults)."""
CG_ITERATIONS, CG_TOLERANCE = 30, 0.1
"""Most CG iterations of each step's linear problem, and its relative residual tolerance, tested after every
iteration on every device: where CG stops is part of the method, so the GPU takes the CPU's steps."""
DATA_NORM = 1000.0
"""``||A^H y||`` the data are scaled to, as BART scales its gridded data to 100 in its own
units; this value sets the balance of data and regularization."""


@dataclass(frozen=True)
class NlinvResult:
    """What :func:`nlinv` found."""

    image: Any
    """complex64 ``matrix``: ``rho`` times the sensitivities' root-sum-of-squares, in the data's units (the
    image SENSE with :attr:`maps` would give, up to the regularization)."""
    maps: Any
    """complex64 ``(C, *matrix)``: the sensitivities with unit root-sum-of-squares per voxel."""
    residuals: tuple[float, ...]
    """``||A^H (y - G(x_n))|| / ||A^H y||`` before each step and after the last."""
    iterations: tuple[int, ...] = ()
    """CG iterations of each step."""


def sobolev_weights(grid: Sequence[int], xp: Any = np, a: float = SOBOLEV_A, b: float = SOBOLEV_B) -> Any:
    """``(1 + a |k|^2)^(-b/2)`` on ``grid`` in FFT order (``k`` per axis ``fftfreq(n)``), float32."""
    squared = 0.0
    for axis, n in enumerate(grid):
        shape = [1] * len(grid)
        shape[axis] = n
        squared = squared + (np.fft.fftfreq(n) ** 2).reshape(shape)
    return xp.asarray(((1.0 + a * squared) ** (-b / 2)).astype(np.float32))


def _fft(x: Any, axes: tuple[int, ...], inverse: bool) -> Any:
    """Unitary n-D FFT (or its inverse) over ``axes``, in the input's precision."""
    return fft.fftn(x, axes, inverse=inverse, norm="ortho")


class NlinvModel:
    """The model ``x = (rho, chat) -> rho c_j`` (the coil images before encoding), its derivative and the
    derivative's adjoint, with ``A^H A`` as the Toeplitz convolution of ``spectrum`` divided by ``prod(matrix)``.

    ``x`` is one flat complex64 vector: ``rho`` (``prod(matrix)`` entries) then ``chat`` (``C`` times
    ``prod(2 matrix)``, FFT order). Dividing ``spectrum`` by the matrix size makes ``A`` the encoding divided
    by ``sqrt(prod(matrix))``.
    """

    def __init__(self, spectrum: Any, matrix: Sequence[int], coils: int) -> None:
        self.matrix = tuple(int(n) for n in matrix)
        self.grid = tuple(2 * n for n in self.matrix)
        self.coils = int(coils)
        self.spectrum = spectrum * np.float32(1.0 / math.prod(self.matrix))
        self.xp = get_xp(spectrum)
        self.weights = sobolev_weights(self.grid, self.xp)
        self.axes = tuple(range(1, len(self.matrix) + 1))
        self.box = (slice(None), *(slice(n // 2, n // 2 + n) for n in self.matrix))

    @property
    def size(self) -> int:
        """Entries of ``x``."""
        return math.prod(self.matrix) + self.coils * math.prod(self.grid)

    def split(self, x: Any) -> tuple[Any, Any]:
        """Views ``(rho, chat)`` of ``x``: ``matrix`` and ``(C, *2 matrix)``."""
        n = math.prod(self.matrix)
        return x[:n].reshape(self.matrix), x[n:].reshape(self.coils, *self.grid)

    def initial(self) -> Any:
        """``rho = 1``, ``chat = 0`` (BART's start)."""
        x = self.xp.zeros(self.size, dtype=np.complex64)
        x[: math.prod(self.matrix)] = 1
        return x

    def sensitivities(self, chat: Any) -> Any:
        """``c_j = crop(F^-1 (w chat_j))``: complex64 ``(C, *matrix)``."""
        big = _fft(chat * self.weights, self.axes, inverse=True)
        return self.xp.ascontiguousarray(self.xp.fft.fftshift(big, axes=self.axes)[self.box])

    def sensitivities_adjoint(self, u: Any) -> Any:
        """The adjoint of :meth:`sensitivities`: ``w F pad(u_j)`` on the 2x grid."""
        big = self.xp.zeros((u.shape[0], *self.grid), dtype=np.complex64)
        big[self.box] = u
        big = _fft(self.xp.fft.ifftshift(big, axes=self.axes), self.axes, inverse=False)
        big *= self.weights
        return big

    def coil_images(self, x: Any) -> Any:
        """``rho c_j``: complex64 ``(C, *matrix)``."""
        rho, chat = self.split(x)
        return rho * self.sensitivities(chat)

    def derivative(self, x: Any, dx: Any) -> Any:
        """``D(rho c_j)[dx] = drho c_j + rho dc_j`` at ``x``."""
        rho, chat = self.split(x)
        drho, dchat = self.split(dx)
        return drho * self.sensitivities(chat) + rho * self.sensitivities(dchat)

    def derivative_adjoint(self, x: Any, images: Any, coils: Any = None) -> Any:
        """The adjoint of :meth:`derivative` at ``x`` applied to coil images ``(C, *matrix)``: a flat vector
        ``(sum_j conj(c_j) u_j, w F pad(conj(rho) u_j))``; ``coils``: ``c_j`` when already computed."""
        rho, chat = self.split(x)
        coils = self.sensitivities(chat) if coils is None else coils
        out = self.xp.empty(self.size, dtype=np.complex64)
        out_rho, out_chat = self.split(out)
        out_rho[...] = (self.xp.conj(coils) * images).sum(axis=0)
        out_chat[...] = self.sensitivities_adjoint(self.xp.conj(rho) * images)
        return out

    def normal(self, images: Any) -> Any:
        """``A^H A`` of each coil image (the Toeplitz convolution)."""
        return toeplitz_apply(images, self.spectrum)

    def gauss_newton(self, x: Any, alpha: float = 0.0) -> Any:
        """``dx -> (DG^H DG + alpha I) dx`` at ``x``, its sensitivities computed once."""
        rho, chat = self.split(x)
        coils = self.sensitivities(chat)
        alpha = np.float32(alpha)

        def apply(dx: Any) -> Any:
            drho, dchat = self.split(dx)
            images = drho * coils + rho * self.sensitivities(dchat)
            out = self.derivative_adjoint(x, self.normal(images), coils)
            out += alpha * dx
            return out

        return apply


def nlinv(
    kspace: Any,
    trajectory: Any,
    matrix: Sequence[int],
    *,
    device: str | int | Device | None = "auto",
    spectrum: Any = None,
    adjoint: Any = None,
    steps: int = NEWTON_STEPS,
    alpha: float = ALPHA,
    reduction: float = REDUCTION,
    cg_iterations: int = CG_ITERATIONS,
    cg_tolerance: float = CG_TOLERANCE,
) -> NlinvResult:
    """Image and sensitivities of ``kspace`` (complex ``(C, M)``) at ``trajectory`` (float ``(M, D)``, cycles
    per field of view) on ``matrix``, by regularized Gauss-Newton (see the module doc).

    ``spectrum`` (the Toeplitz kernel of the unweighted PSF, :func:`toeplitz_spectrum`) and ``adjoint`` (the
    coils' ``F^H y``, complex ``(C, *matrix)``) may be given when already computed; otherwise they are computed
    on ``device`` (as :func:`mri_recon.operators.fhd`'s). The solve runs on ``device`` (``"auto"``: the
    k-space's GPU for a CuPy k-space), whatever array types the inputs come in; the results are its arrays. The
    other parameters are those of BART's ``nlinv``.
    """
    matrix = tuple(int(n) for n in matrix)
    if steps < 1 or not alpha > 0 or not reduction >= 1:
        raise InvalidDataError(
            f"nlinv needs steps >= 1, alpha > 0 and reduction >= 1, found steps={steps}, "
            f"alpha={alpha}, reduction={reduction}"
        )
    dev = resolve_device_like(device, kspace)
    # on the device first: the same arithmetic whatever array types the inputs come in
    kspace, trajectory = to_device(kspace, dev), to_device(trajectory, dev)
    if spectrum is None:
        spectrum = toeplitz_spectrum(trajectory, matrix, dev)
    if adjoint is None:
        adjoint = coil_adjoint(kspace, trajectory, matrix, dev)
    spectrum, adjoint = to_device(spectrum, dev), to_device(adjoint, dev)
    model = NlinvModel(spectrum, matrix, adjoint.shape[0])
    data, scale = scaled_adjoint(adjoint)
    x = model.initial()
    data_norm = math.sqrt(inner(data, data).real)
    residuals, iterations = [], []
    for _ in range(steps):
        images = model.coil_images(x)
        back = data - model.normal(images)
        residuals.append(math.sqrt(inner(back, back).real) / data_norm)
        rhs = model.derivative_adjoint(x, back)
        rhs -= np.float32(alpha) * x
        operator = model.gauss_newton(x, alpha)
        h, history = cg(operator, rhs, max_iterations=cg_iterations, tolerance=cg_tolerance, check_every=1)
        x = x + h.astype(np.complex64, copy=False)
        iterations.append(len(history) - 1)
        alpha /= reduction
    back = data - model.normal(model.coil_images(x))
    residuals.append(math.sqrt(inner(back, back).real) / data_norm)
    rho, chat = model.split(x)
    maps, rss = normalized(model.sensitivities(chat))
    image = rho * rss * np.float32(scale / math.prod(matrix))  # A^H A / prod(matrix): back to the data's units
    return NlinvResult(
        image=image.astype(np.complex64), maps=maps, residuals=tuple(residuals), iterations=tuple(iterations)
    )


def normalized(coils: Any) -> tuple[Any, Any]:
    """``(coils / rss, rss)``: sensitivities with unit root-sum-of-squares per voxel (0 where all are 0)."""
    xp = get_xp(coils)
    rss = xp.sqrt((coils.real**2 + coils.imag**2).sum(axis=0))
    inverse = xp.where(rss > 0, 1.0 / xp.where(rss > 0, rss, 1), 0).astype(np.float32)
    return (coils * inverse).astype(np.complex64), rss.astype(np.float32)


def scaled_adjoint(adjoint: Any) -> tuple[Any, float]:
    """``(z, s)``: the coils' adjoint images divided by ``s`` so that ``||z|| =`` :data:`DATA_NORM`, complex64.

    The images are first divided by a power of two near their largest value (:func:`unit_scale`: exact, and
    float32 then holds the norm's squares whatever the data's scale), then by the factor that sets the norm:
    the balance of data and regularization, and so the result, is then the same at any scale (bit for bit
    when the scales differ by a power of two)."""
    unit, first = unit_scale(adjoint)
    norm = math.sqrt(inner(unit, unit).real)
    if norm == 0:
        raise InvalidDataError("nlinv needs data: the k-space is zero")
    z = unit.astype(np.complex64) * np.float32(DATA_NORM / norm)
    return z, first * norm / DATA_NORM


def toeplitz_spectrum(trajectory: Any, matrix: Sequence[int], device: str | int | Device | None = "auto") -> Any:
    """The Toeplitz kernel spectrum of the unweighted samples (:func:`mri_recon.operators.psf`) on ``device``."""
    from ..operators.public import psf  # noqa: PLC0415 - the operators' public layer, only when estimating

    return kernel_spectrum(psf(trajectory, matrix, device=device))


def coil_adjoint(
    kspace: Any, trajectory: Any, matrix: Sequence[int], device: str | int | Device | None = "auto"
) -> Any:
    """``F^H y`` of every coil on ``device``: complex64 ``(C, *matrix)``."""
    from ..operators.public import fhd  # noqa: PLC0415 - the operators' public layer, only when estimating

    return fhd(kspace, trajectory, matrix, device=device).astype(np.complex64, copy=False)
