"""Linear operators of the encoding model, and the public functions built on them.

- :mod:`.base`: the protocol (:class:`LinearOperator` with ``.H``, ``.N``, ``@``) and generic operators
  (:class:`Scale`, :func:`Identity`, :class:`Multiply`, :func:`Sense`).
- :mod:`.engines`: the encoding protocol (:class:`Encoding`: name, device kind, capabilities, time and memory
  models, ``normal``), the engines on the CPU and the GPU, their rates (:mod:`.engines.cost`) and the registry
  with :func:`choose_engine`.
- :mod:`.normal`: F^H W F as a convolution on the 2x grid (:mod:`.normal.toeplitz`) and the fused CG-SENSE
  normal operator on the GPU (:mod:`.normal.gpu_toeplitz`).
- :mod:`.gpu`: cuFFT plans and the GPU launchers' shared helpers.
- :mod:`.public`: :func:`fhd`, :func:`forward`, :func:`psf` for NumPy or CuPy input (their plans kept in the
  per-device LRU of :mod:`.memo`: :func:`plan_cache_info`, :func:`plan_cache_clear`).
- :mod:`.planned`: :class:`EncodingOperator`, the encoding planned once and applied many times, with its
  Toeplitz normal operator (:meth:`EncodingOperator.normal`).
- Compressed sensing: :class:`FiniteDifference` (:mod:`.finite_difference`, total variation) and
  :class:`Wavelet` (:mod:`.wavelet`, orthogonal Daubechies).
- :mod:`.offres`: off-resonance (the exact :class:`OffresEncoding`, time segmentation, the choice in a
  reconstruction, :func:`fhd_offres`, :func:`forward_offres`).
"""

from __future__ import annotations

from .base import Identity, LinearOperator, Multiply, Scale, Sense
from .engines import Encoding, FinufftEncoding, GpuExactEncoding, GpuNufftEncoding, NudftEncoding, choose_engine
from .finite_difference import FiniteDifference
from .memo import PlanCacheInfo, plan_cache_clear, plan_cache_info
from .offres.model import OffresEncoding
from .offres.public import fhd_offres, forward_offres
from .planned import EncodingOperator, PlannedNormal
from .public import fhd, forward, psf, resolve
from .wavelet import Wavelet

__all__ = ["Encoding", "EncodingOperator", "FiniteDifference", "FinufftEncoding", "GpuExactEncoding",
           "GpuNufftEncoding", "Identity", "LinearOperator", "Multiply", "NudftEncoding", "OffresEncoding",
           "PlanCacheInfo", "PlannedNormal", "Scale", "Sense", "Wavelet", "choose_engine", "fhd", "fhd_offres",
           "forward", "forward_offres", "plan_cache_clear", "plan_cache_info", "psf", "resolve"]
