"""The encoding operator F of every engine, and the one place that chooses an engine.

``F x = sum_n x_n exp(-i 2 pi k_m . r_n)`` maps images ``(C, *matrix)`` to samples ``(C, M)`` (C images at
once, e.g. coils); ``F^H d = sum_m d_m exp(+i 2 pi k_m . r_n)`` is its adjoint. The trajectory k is in
cycles per field of view and r_n is the voxel grid of :mod:`mri_recon.grid`.

Engines (subclasses of :class:`Encoding`, each with its ``name``):

- :class:`NudftEncoding` (``"exact"``): the float64 NumPy sum of :mod:`.nudft`, the oracle; CPU.
- :class:`FinufftEncoding` (``"nufft"``): FINUFFT at tolerance :data:`NUFFT_EPS`; CPU.
- :class:`GpuExactEncoding` (``"gpu"``): exact direct summation in the CUDA kernels of :mod:`.gpu_exact`.
- :class:`GpuNufftEncoding` (``"gpu-nufft"``): the GPU NUFFT of :mod:`.gpu_nufft` at tolerance
  :data:`GPU_NUFFT_EPS` (relative error about 2e-6 against the exact sum, within the exact kernel's own
  float32 error).

:func:`choose_engine` turns the user's ``device`` and ``method`` into a device and an engine class; on a GPU,
``method="auto"`` asks the cost model of :mod:`.cost` which of the two GPU engines is faster for the problem.
Encoding operators take arrays already validated and on their device: the public functions of
:mod:`.public` and the pipeline validate once, at the boundary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...backend import Device, is_gpu_array, resolve_device
from ...errors import InvalidDataError
from ..base import LinearOperator
from . import finufft, nudft

METHODS = ("auto", "exact", "nufft")
NUFFT_EPS = 1e-7
"""FINUFFT tolerance (relative, computed in double precision); below complex64 output rounding."""
GPU_NUFFT_EPS = 1e-6
"""GPU NUFFT tolerance: kernel width 7, measured relative error 1.2e-6..1.6e-6 against the float64 sum."""


class Encoding(LinearOperator):
    """F for a fixed trajectory: ``(batch, *matrix)`` complex64 -> ``(batch, M)`` complex64.

    Parameters
    ----------
    trajectory
        float32 ``(M, D)`` in cycles per field of view, on the engine's device.
    matrix
        Image size, D = ``len(matrix)``.
    batch
        Images transformed at once (coils).
    """

    name = "?"
    """The engine's name, recorded in outputs: ``"exact"``, ``"nufft"``, ``"gpu"`` or ``"gpu-nufft"``."""

    def __init__(self, trajectory: Any, matrix: tuple[int, ...], batch: int = 1) -> None:
        matrix = tuple(int(n) for n in matrix)
        super().__init__((batch, *matrix), (batch, int(trajectory.shape[0])))
        self.trajectory = trajectory
        self.matrix = matrix

    def batched(self, batch: int) -> Encoding:
        """The same operator for ``batch`` images at once (shares the trajectory and any plan)."""
        if batch == self.ishape[0]:
            return self
        return type(self)(self.trajectory, self.matrix, batch)

    @classmethod
    def kernel_configs(cls, dim: int, coils: int) -> list[tuple[str, dict[str, int]]]:
        """The ``(file, defines)`` of the CUDA modules F^H d and the PSF of this engine launch for ``coils``
        coils in ``dim`` dimensions (for :func:`mri_recon.kernels.prefetch`); none on the CPU."""
        return []

    def prepare(self) -> Encoding:
        """Make the engine's plan now rather than on first use (engines without a plan: nothing); ``self``."""
        return self

    def psf_plan(self) -> Callable[[Any], Any]:
        """``weights -> psf`` with the values of :meth:`psf`, for many weights of this trajectory. An engine
        whose PSF needs a plan of its own (the GPU NUFFT's, on the 2x grid) makes it once here and the
        callable holds it, with its memory (a fine grid of 4N per axis)."""
        return _EncodingPsf(self)

    def psf(self, weights: Any) -> Any:
        """The Toeplitz point-spread function on the 2x grid, ``p[j] = sum_m w_m exp(+i 2 pi k_m . (j - c)/N)``.

        ``c`` is the 2x grid's centre (index N per axis). It is F^H w with trajectory 2k on matrix 2N;
        ``weights`` is float32 ``(M,)``. Returns complex64 ``tuple(2 * n for n in matrix)``.
        """
        big = tuple(2 * n for n in self.matrix)
        data = weights.astype(np.complex64)[None, :]
        return type(self)(2 * self.trajectory, big, 1)._adjoint(data)[0]


class _EncodingPsf:
    """:meth:`Encoding.psf` of one encoding, as a callable."""

    def __init__(self, encoding: Encoding) -> None:
        self.encoding = encoding

    def __call__(self, weights: Any) -> Any:
        return self.encoding.psf(weights)


class _PlannedPsf:
    """The GPU NUFFT's PSF from a plan on the 2x grid made once (:func:`.gpu_nufft.psf` without its plan)."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan

    def __call__(self, weights: Any) -> Any:
        return self.plan.adjoint_real(weights)


class NudftEncoding(Encoding):
    """F by the float64 NumPy sum (the oracle), CPU only; results rounded to complex64."""

    name = "exact"

    def _apply(self, x: Any) -> Any:
        return nudft.nudft_forward(x, self.trajectory).astype(np.complex64)

    def _adjoint(self, y: Any) -> Any:
        return nudft.nudft_adjoint(y, self.trajectory, self.matrix).astype(np.complex64)

    def psf(self, weights: Any) -> Any:
        big = tuple(2 * n for n in self.matrix)
        data = np.asarray(weights, dtype=np.complex128)[None, :]
        out = nudft.nudft_adjoint(data, 2 * np.asarray(self.trajectory, dtype=np.float64), big)
        return out[0].astype(np.complex64)


class FinufftEncoding(Encoding):
    """F by FINUFFT (tolerance :data:`NUFFT_EPS`, double precision inside), CPU only."""

    name = "nufft"

    def _apply(self, x: Any) -> Any:
        return finufft.forward(x, self.trajectory, eps=NUFFT_EPS).astype(np.complex64)

    def _adjoint(self, y: Any) -> Any:
        return finufft.adjoint(y, self.trajectory, self.matrix, eps=NUFFT_EPS).astype(np.complex64)

    def psf(self, weights: Any) -> Any:
        big = tuple(2 * n for n in self.matrix)
        data = np.asarray(weights, dtype=np.complex128)[None, :]
        out = finufft.adjoint(data, 2 * np.asarray(self.trajectory, dtype=np.float64), big, eps=NUFFT_EPS)
        return out[0].astype(np.complex64)


class GpuExactEncoding(Encoding):
    """F by exact direct summation on the GPU (CuPy arrays on the current device)."""

    name = "gpu"

    @classmethod
    def kernel_configs(cls, dim: int, coils: int) -> list[tuple[str, dict[str, int]]]:
        from ...kernels.configs import adjoint_defines, psf_defines  # noqa: PLC0415 - GPU engines only
        from .gpu_layout import coil_groups  # noqa: PLC0415

        sizes = sorted({size for _, size in coil_groups(coils)})
        return [("fhd.cu", adjoint_defines(dim, s, multi=True, recur=True)) for s in sizes] + [
            ("fhd.cu", psf_defines(dim))]

    def _apply(self, x: Any) -> Any:
        from . import gpu_exact  # noqa: PLC0415 - needs CuPy and a GPU

        return gpu_exact.forward_gpu(x, self.trajectory)

    def _adjoint(self, y: Any) -> Any:
        from . import gpu_exact  # noqa: PLC0415 - needs CuPy and a GPU

        return gpu_exact.fhd_gpu(y, self.trajectory, self.matrix)

    def psf(self, weights: Any) -> Any:
        from . import gpu_exact  # noqa: PLC0415 - needs CuPy and a GPU

        return gpu_exact.psf_gpu(self.trajectory, weights, self.matrix)


class GpuNufftEncoding(Encoding):
    """F by the GPU NUFFT (CuPy arrays on the plan's GPU). The plan (the samples sorted into bins, the fine
    grids, the cuFFT plans) is made on first use and shared by :meth:`batched` copies."""

    name = "gpu-nufft"

    def __init__(self, trajectory: Any, matrix: tuple[int, ...], batch: int = 1, plan: Any = None) -> None:
        super().__init__(trajectory, matrix, batch)
        self._plan = plan

    @property
    def plan(self) -> Any:
        if self._plan is None:
            from .gpu_nufft import GpuNufft  # noqa: PLC0415 - needs CuPy and a GPU

            self._plan = GpuNufft(self.trajectory, self.matrix, eps=GPU_NUFFT_EPS, checked=True)
        return self._plan

    @classmethod
    def kernel_configs(cls, dim: int, coils: int) -> list[tuple[str, dict[str, int]]]:
        from .gpu_nufft import nufft_configurations  # noqa: PLC0415 - GPU engines only

        return nufft_configurations(dim, GPU_NUFFT_EPS)

    def batched(self, batch: int) -> Encoding:
        if batch == self.ishape[0]:
            return self
        return GpuNufftEncoding(self.trajectory, self.matrix, batch, plan=self.plan)

    def prepare(self) -> Encoding:
        _ = self.plan
        return self

    def psf_plan(self) -> Callable[[Any], Any]:
        from .gpu_nufft import GpuNufft  # noqa: PLC0415 - needs CuPy and a GPU

        big = tuple(2 * n for n in self.matrix)
        return _PlannedPsf(GpuNufft(2 * self.trajectory, big, eps=GPU_NUFFT_EPS, checked=True))

    def _apply(self, x: Any) -> Any:
        return self.plan.forward(x)

    def _adjoint(self, y: Any) -> Any:
        return self.plan.adjoint(y)

    def psf(self, weights: Any) -> Any:
        from .gpu_nufft import psf  # noqa: PLC0415 - needs CuPy and a GPU

        return psf(self.trajectory, weights, self.matrix, eps=GPU_NUFFT_EPS, checked=True)


def choose_engine(device: str | int | Device | None = "auto", method: str = "auto",
                  like: Any = None, problem: tuple[tuple[int, ...], int, int] | None = None
                  ) -> tuple[Device, type[Encoding]]:
    """The device to compute on and the encoding engine for it.

    Parameters
    ----------
    device
        ``"auto" | "cpu" | "gpu" | "gpu:N" | N | Device``. ``"auto"``: a CuPy input ``like`` keeps its own
        GPU; otherwise GPU 0 when CuPy and a GPU are present (for every method: ``"nufft"`` then means the
        GPU NUFFT, where it used to mean FINUFFT on the CPU), else the CPU.
    method
        ``"exact"``: exact sums (the GPU kernels on a GPU, the NumPy oracle on the CPU); ``"nufft"``: the
        GPU NUFFT on a GPU, FINUFFT on the CPU; ``"auto"``: FINUFFT on the CPU and, on a GPU, whichever of
        the exact kernels and the GPU NUFFT :func:`mri_recon.operators.engines.cost.fastest_gpu_engine` predicts
        faster for ``problem`` (the exact kernels when no problem is given).
    like
        An input array, consulted by ``device="auto"``.
    problem
        ``(matrix, samples, coils)`` of the work to do, for ``method="auto"`` on a GPU.
    """
    if method not in METHODS:
        raise InvalidDataError(f"unknown method {method!r}: expected 'auto', 'exact' or 'nufft'")
    auto = device is None or (isinstance(device, str) and device == "auto")
    if auto and is_gpu_array(like):
        dev = resolve_device(int(like.device.id))
    else:
        dev = resolve_device(device)
    if not dev.is_gpu:
        return dev, NudftEncoding if method == "exact" else FinufftEncoding
    if method == "exact":
        return dev, GpuExactEncoding
    if method == "nufft":
        return dev, GpuNufftEncoding
    if problem is None:
        return dev, GpuExactEncoding
    from .cost import fastest_gpu_engine  # noqa: PLC0415

    return dev, GpuNufftEncoding if fastest_gpu_engine(*problem) == "gpu-nufft" else GpuExactEncoding
