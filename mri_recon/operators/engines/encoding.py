"""The encoding protocol: :class:`Encoding`, F for a fixed trajectory, with what an engine knows of itself.

``F x = sum_n x_n exp(-i 2 pi k_m . r_n)`` maps images ``(C, *matrix)`` to samples ``(C, M)`` (C images at
once, e.g. coils); ``F^H d = sum_m d_m exp(+i 2 pi k_m . r_n)`` is its adjoint. The trajectory k is in
cycles per field of view and r_n is the voxel grid of :mod:`mri_recon.checks.grid`.

An engine is a subclass that states its ``name`` (what it computes: ``"exact"`` sums or a ``"nufft"``), its
``device_kind`` (``"cpu"`` or ``"gpu"``), its capabilities (``dims``, ``samplings``, ``caches_psf``, ``memo``,
``time_segmentation``, ``auto``), its time model (:meth:`Encoding.seconds`, from the rates of :mod:`.cost`) and
its memory model (:meth:`Encoding.stage_bytes`), and builds its own spectrum and normal operator
(:meth:`Encoding.spectrum`, :meth:`Encoding.normal`, like SigPy's ``_normal_linop``). The registry
(:mod:`.registry`) lists the engines and chooses among them; nothing else compares engine names. Encoding
operators take arrays already validated and on their device: the public functions of
:mod:`mri_recon.operators.public` and the pipeline validate once, at the boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from ...arrays.backend import get_xp
from ..base import LinearOperator
from ..normal.toeplitz import kernel_spectrum, normal_operator
from . import cost

NUFFT_EPS = 1e-7
"""FINUFFT tolerance (relative, computed in double precision); below complex64 output rounding."""
GPU_NUFFT_EPS = 1e-6
"""GPU NUFFT tolerance: kernel width 7 (its error against the float64 sum: docs/benchmarks.md, "GPU NUFFT
operators")."""


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

    name: ClassVar[str] = "?"
    """What the engine computes, recorded in outputs (``Result.parameters["method"]``): ``"exact"`` or
    ``"nufft"``."""
    device_kind: ClassVar[str] = "cpu"
    """Where it runs: ``"cpu"`` (NumPy arrays) or ``"gpu"`` (CuPy arrays)."""
    dims: ClassVar[tuple[int, ...]] = (2, 3)
    """Image dimensions it serves."""
    caches_psf: ClassVar[bool] = True
    """Whether the PSF disk cache pays (False: the engine computes a PSF about as fast as a cache read)."""
    time_segmentation: ClassVar[bool] = True
    """Whether time-segmented off-resonance correction can run over it
    (:class:`~mri_recon.operators.offres.segmented.TimeSegmentedEncoding`)."""
    samplings: ClassVar[tuple[str, ...]] = ("non-cartesian", "cartesian")
    """The scans' samplings it serves (:func:`~.registry.sampling_of`; the FFT engines: ``"cartesian"`` only)."""
    memo: ClassVar[bool] = True
    """Whether the GPU spectrum memo (:mod:`mri_recon.operators.memo`) pays for it."""
    auto: ClassVar[bool] = True
    """Whether ``method="auto"`` may pick it (the CPU's exact NumPy sum, the oracle, is picked by name only)."""
    key: ClassVar[str] = "?"
    """``name-device_kind``, unique in the registry: the PSF cache's and the memo's engine key."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.key = f"{cls.name}-{cls.device_kind}"

    def __init__(self, trajectory: Any, matrix: tuple[int, ...], batch: int = 1) -> None:
        matrix = tuple(int(n) for n in matrix)
        super().__init__((batch, *matrix), (batch, int(trajectory.shape[0])))
        self.trajectory = trajectory
        self.matrix = matrix

    # ---- what the engine knows of itself (class level: no instance needed to plan)

    @classmethod
    def seconds(cls, matrix: tuple[int, ...], samples: int, coils: int, psf: bool = True) -> float:
        """Predicted seconds of F^H d of ``coils`` coils (and the PSF): the CPU engines' rate
        (:func:`.cost.cpu_seconds`); GPU engines state their own."""
        return cost.cpu_seconds(samples, coils, psf)

    @classmethod
    def run_seconds(cls, matrix: tuple[int, ...], samples: int, coils: int, iterations: int) -> float:
        """Predicted seconds of a reconstruction: F^H d, the PSF and ``iterations`` CG iterations."""
        return cls.seconds(tuple(matrix), samples, coils) + cost.iteration_seconds(cls.device_kind, tuple(matrix),
                                                                                    coils, iterations)

    @classmethod
    def stage_bytes(cls, matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, fixed: int,
                    workers: int, trajectory: Any = None) -> dict[str, int]:
        """Bytes at the peaks of the F^H d and PSF stages beyond the planner's ``fixed`` arrays (the keys
        ``fhd``, ``psf``, ``spectrum`` it has work for; none: the planner's fixed arrays are the peak).
        ``trajectory``: the samples' ``(M, D)`` NumPy trajectory when the planner has it, for an engine whose
        memory depends on where the samples lie (None: the engine's bound for any trajectory)."""
        return {}

    @classmethod
    def kernel_configs(cls, dim: int, coils: int) -> list[tuple[str, dict[str, int]]]:
        """The ``(file, defines)`` of the CUDA modules F^H d and the PSF of this engine launch for ``coils``
        coils in ``dim`` dimensions (for :func:`mri_recon.kernels.prefetch`); none on the CPU."""
        return []

    # ---- the operator

    def batched(self, batch: int) -> Encoding:
        """The same operator for ``batch`` images at once (shares the trajectory and any plan)."""
        if batch == self.ishape[0]:
            return self
        return type(self)(self.trajectory, self.matrix, batch)

    def prepare(self) -> Encoding:
        """Make the engine's plan now rather than on first use (engines without a plan: nothing); ``self``."""
        return self

    def transforms_into(self) -> tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]] | None:
        """``(forward, adjoint)``, each ``(input, out) -> out`` writing a given complex64 output and, once it has
        run once, only launching work (no allocation, no synchronization; its buffers and plans held by the
        engine): what a CUDA graph can replay (:mod:`mri_recon.operators.replay`). None: the engine's
        transforms allocate or read back (the default)."""
        return None

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

    @classmethod
    def adjoint_frames(cls, encodings: Sequence[Encoding], data: Sequence[Any]) -> list[Any]:
        """F^H of every frame of a time series: ``encodings[t]`` (this engine's, one matrix) applied to
        ``data[t]`` ``(C, M_t)``, each result ``(C, *matrix)``. Frame by frame here; an engine that takes every
        frame in one launch overrides it."""
        return [e.batched(d.shape[0]).H(d) for e, d in zip(encodings, data, strict=True)]

    @classmethod
    def spectra_frames(cls, encodings: Sequence[Encoding], weights: Sequence[Any], maps: Any = None) -> list[Any]:
        """:meth:`spectrum` of every frame of a time series (``weights[t]`` for ``encodings[t]``), frame by
        frame here; an engine that takes every frame's PSF in one launch overrides it."""
        return [e.spectrum(w, maps) for e, w in zip(encodings, weights, strict=True)]

    def spectrum(self, weights: Any, maps: Any = None) -> Any:
        """The kernel spectrum of ``A^H W A`` that :meth:`toeplitz_normal` takes with these ``maps``: by default
        that of the PSF of ``weights`` on the 2x grid (the FFT engines: the image grid's with maps)."""
        return kernel_spectrum(self.psf(weights))

    def normal(self, weights: Any, maps: Any = None, lam: float = 0.0, *, coil_batch: int | None = None,
               spectrum: Any = None) -> LinearOperator:
        """The CG operator ``A^H W A + lam I`` with ``A = F S`` (maps ``(C, *matrix)``; None: one image per
        coil), by Toeplitz embedding: the PSF of ``weights`` on the 2x grid (or its ``spectrum``, when the
        caller has it from a cache) applied by FFTs. ``lam`` is absolute; coils go through the FFTs
        ``coil_batch`` at a time (None: all)."""
        if spectrum is None:
            spectrum = self.spectrum(weights, maps)
        return self.toeplitz_normal(spectrum, maps, lam, coil_batch)

    @classmethod
    def toeplitz_normal(cls, spectrum: Any, maps: Any = None, lam: float = 0.0,
                        coil_batch: int | None = None) -> LinearOperator:
        """The Toeplitz normal operator of a kernel ``spectrum`` (2x grid, or with maps the maps' image grid) on
        the arrays' device: :func:`~mri_recon.operators.normal.toeplitz.normal_operator` (the fused operator for
        CuPy maps)."""
        return normal_operator(spectrum, coil_maps=maps, lam=lam, coil_batch=coil_batch)

    @property
    def N(self) -> LinearOperator:  # noqa: N802 - the conventional name of the normal operator
        """``F^H F``: the engine's own normal operator, :meth:`normal` with unit weights and no maps (for the
        plain engines the Toeplitz embedding, exact up to float32 rounding). Like every normal operator without
        maps it takes images ``matrix`` with any leading axes, here the batch."""
        ones = get_xp(self.trajectory).ones(self.oshape[-1], dtype=np.float32)
        return self.normal(ones)


class _EncodingPsf:
    """:meth:`Encoding.psf` of one encoding, as a callable."""

    def __init__(self, encoding: Encoding) -> None:
        self.encoding = encoding

    def __call__(self, weights: Any) -> Any:
        return self.encoding.psf(weights)
