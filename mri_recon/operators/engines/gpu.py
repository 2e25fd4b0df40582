"""The GPU engines: :class:`GpuExactEncoding` (``exact``: direct summation in the CUDA kernels of
:mod:`.gpu_exact`) and :class:`GpuNufftEncoding` (``nufft``: the GPU NUFFT of :mod:`.gpu_nufft` at tolerance
:data:`~.encoding.GPU_NUFFT_EPS`, its error against the exact sum within the exact kernel's own float32
error), with their time models (:mod:`.cost`, fitted by ``scripts/bench_cost.py``), memory models and the fused
SENSE normal operator (:class:`~mri_recon.operators.normal.gpu_toeplitz.FusedSenseNormal`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from . import cost
from .encoding import GPU_NUFFT_EPS, Encoding
from .nufft_launch import nufft_configurations

COMPLEX64 = 8
PSF_GROUP_BYTES = 256 << 20
"""PSFs of a time series' frames at most in one launch of :meth:`GpuExactEncoding.spectra_frames` (one frame at
least)."""
NUFFT_MAX_GROUP = 8
"""Most coils the GPU NUFFT spreads onto fine grids at once."""


class GpuEncoding(Encoding):
    """What the GPU engines share: CuPy arrays on the current device (with CuPy maps,
    :meth:`~.encoding.Encoding.toeplitz_normal` gives the fused SENSE normal operator)."""

    device_kind = "gpu"


class GpuExactEncoding(GpuEncoding):
    """F by exact direct summation on the GPU (CuPy arrays on the current device)."""

    name = "exact"

    @classmethod
    def seconds(cls, matrix: tuple[int, ...], samples: int, coils: int, psf: bool = True) -> float:
        return cost.exact_seconds(tuple(int(v) for v in matrix), samples, coils, psf)

    @classmethod
    def kernel_configs(cls, dim: int, coils: int) -> list[tuple[str, dict[str, int]]]:
        from ...kernels.configs import adjoint_defines, frames_defines, psf_defines  # noqa: PLC0415 - GPU only
        from .gpu_layout import coil_groups  # noqa: PLC0415

        sizes = sorted({size for _, size in coil_groups(coils)})
        one = [*(adjoint_defines(dim, s, multi=True, recur=True) for s in sizes), psf_defines(dim)]
        return [("fhd.cu", d) for d in one] + [("fhd.cu", frames_defines(d)) for d in one]  # frames: a series

    def _apply(self, x: Any) -> Any:
        from . import gpu_exact  # noqa: PLC0415 - needs CuPy and a GPU

        return gpu_exact.forward_gpu(x, self.trajectory)

    def _adjoint(self, y: Any) -> Any:
        from . import gpu_exact  # noqa: PLC0415 - needs CuPy and a GPU

        return gpu_exact.fhd_gpu(y, self.trajectory, self.matrix)

    def psf(self, weights: Any) -> Any:
        from . import gpu_exact  # noqa: PLC0415 - needs CuPy and a GPU

        return gpu_exact.psf_gpu(self.trajectory, weights, self.matrix)

    @classmethod
    def adjoint_frames(cls, encodings: Sequence[Encoding], data: Sequence[Any]) -> list[Any]:
        """Several frames in one launch per coil group (:func:`~.gpu_frames.fhd_frames_gpu`)."""
        from . import gpu_frames  # noqa: PLC0415 - needs CuPy and a GPU

        if not 2 <= len(encodings) <= gpu_frames.MAX_FRAMES or any(type(e) is not cls for e in encodings):
            return super().adjoint_frames(encodings, data)
        return list(gpu_frames.fhd_frames_gpu(list(data), [e.trajectory for e in encodings], encodings[0].matrix))

    @classmethod
    def spectra_frames(cls, encodings: Sequence[Encoding], weights: Sequence[Any], maps: Any = None) -> list[Any]:
        """The frames' PSFs in one launch per group of :data:`PSF_GROUP_BYTES` (:func:`~.gpu_frames.psf_frames_gpu`),
        then each one's kernel spectrum."""
        from ..normal.toeplitz import kernel_spectrum  # noqa: PLC0415
        from . import gpu_frames  # noqa: PLC0415 - needs CuPy and a GPU

        if len(encodings) < 2 or any(type(e) is not cls for e in encodings):
            return super().spectra_frames(encodings, weights, maps)
        matrix = encodings[0].matrix
        size = min(max(1, PSF_GROUP_BYTES // (COMPLEX64 * 2 ** len(matrix) * math.prod(matrix))), gpu_frames.MAX_FRAMES)
        spectra = []
        for start in range(0, len(encodings), size):
            part = slice(start, start + size)
            psfs = gpu_frames.psf_frames_gpu([e.trajectory for e in encodings[part]], list(weights[part]), matrix)
            spectra += [kernel_spectrum(p) for p in psfs]
        return spectra


class _PlannedPsf:
    """The GPU NUFFT's PSF from a plan on the 2x grid made once (:func:`.gpu_nufft.psf` without its plan)."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan

    def __call__(self, weights: Any) -> Any:
        return self.plan.adjoint_real(weights)


class GpuNufftEncoding(GpuEncoding):
    """F by the GPU NUFFT (CuPy arrays on the plan's GPU). The plan (the samples sorted into bins, the fine
    grids, the cuFFT plans) is made on first use and shared by :meth:`batched` copies."""

    name = "nufft"
    caches_psf = False
    """It computes a PSF about as fast as the cache hashes, reads and checks one, or much faster
    (docs/benchmarks.md): the disk cache serves the exact engines only."""

    def __init__(self, trajectory: Any, matrix: tuple[int, ...], batch: int = 1, plan: Any = None) -> None:
        super().__init__(trajectory, matrix, batch)
        self._plan = plan

    @classmethod
    def seconds(cls, matrix: tuple[int, ...], samples: int, coils: int, psf: bool = True) -> float:
        return cost.nufft_seconds(tuple(int(v) for v in matrix), samples, coils, psf)

    @classmethod
    def stage_bytes(cls, matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, fixed: int,
                    workers: int, trajectory: Any = None) -> dict[str, int]:
        """The plan's sort buffers and trajectory copy, up to :data:`NUFFT_MAX_GROUP` fine grids (F^H d), the
        PSF's fine grid on the 2x grid, on top of the ``fixed`` arrays."""
        from .nufft_params import nufft_params  # noqa: PLC0415 - plain Python

        d, m, c = len(matrix), n_samples, n_coils
        big = tuple(2 * n for n in matrix)
        fine = math.prod(nufft_params(matrix, GPU_NUFFT_EPS).fine)
        fine2 = math.prod(nufft_params(big, GPU_NUFFT_EPS).fine)
        per_sample = 12 + 8 * d + 4 * d  # the plan's sort buffers and its copy of the trajectory
        group = min(c, NUFFT_MAX_GROUP)
        fhd = m * per_sample + group * fine * COMPLEX64 + c * m * COMPLEX64  # + the weighted samples
        psf = m * (per_sample + 4 * d) + fine2 * COMPLEX64 + math.prod(big) * COMPLEX64
        return {"fhd": int(fixed + fhd), "psf": int(fixed + psf)}

    @classmethod
    def kernel_configs(cls, dim: int, coils: int) -> list[tuple[str, dict[str, int]]]:
        return nufft_configurations(dim, GPU_NUFFT_EPS)

    @property
    def plan(self) -> Any:
        if self._plan is None:
            from .gpu_nufft import GpuNufft  # noqa: PLC0415 - needs CuPy and a GPU

            self._plan = GpuNufft(self.trajectory, self.matrix, eps=GPU_NUFFT_EPS, checked=True)
        return self._plan

    def batched(self, batch: int) -> Encoding:
        if batch == self.ishape[0]:
            return self
        return GpuNufftEncoding(self.trajectory, self.matrix, batch, plan=self.plan)

    def transforms_into(self) -> tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]:
        plan = self.plan  # its fine grids and cuFFT plans are kept with it
        return (lambda x, out: plan.forward(x, out=out)), (lambda y, out: plan.adjoint(y, out=out))

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


ENGINES = (GpuExactEncoding, GpuNufftEncoding)
