"""Linear operators of the encoding model, and the public functions built on them.

- :mod:`.base`: the protocol (:class:`LinearOperator` with ``.H``, ``.N``, ``@``) and generic operators
  (:class:`Scale`, :func:`Identity`, :class:`Multiply`, :func:`Sense`).
- :mod:`.encoding`: the encoding operator F per engine and :func:`choose_engine`.
- :mod:`.toeplitz`: F^H W F as a convolution on the 2x grid (:class:`Toeplitz`) and the CG-SENSE normal
  operator (:func:`normal_operator`); :mod:`.gpu_toeplitz` is its fused GPU form.
- :mod:`.public`: :func:`fhd`, :func:`forward`, :func:`psf` for NumPy or CuPy input (their plans kept in the
  per-device LRU of :mod:`.memo`: :func:`plan_cache_info`, :func:`plan_cache_clear`).
- :mod:`.planned`: :class:`EncodingOperator`, the encoding planned once and applied many times, with its
  Toeplitz normal operator (:meth:`EncodingOperator.normal`).
- Compressed sensing: :class:`FiniteDifference` (:mod:`.finite_difference`, total variation) and
  :class:`Wavelet` (:mod:`.wavelet`, orthogonal Daubechies).
- Off-resonance: :mod:`.offres` (the model, :class:`OffresEncoding`, exact), :mod:`.gpu_offres` (its kernels),
  :mod:`.time_segments` (time segmentation), :mod:`.offres_setup` (the choice in a reconstruction),
  :mod:`.offres_public` (:func:`fhd_offres`, :func:`forward_offres`).
"""

from __future__ import annotations

from .base import Identity, LinearOperator, Multiply, Scale, Sense
from .engines.encoding import Encoding, FinufftEncoding, GpuExactEncoding, NudftEncoding, choose_engine
from .finite_difference import FiniteDifference
from .memo import PlanCacheInfo, plan_cache_clear, plan_cache_info
from .offres.model import OffresEncoding
from .offres.public import fhd_offres, forward_offres
from .planned import EncodingOperator, PlannedNormal
from .public import fhd, forward, psf, resolve
from .wavelet import Wavelet

__all__ = ["Encoding", "EncodingOperator", "FiniteDifference", "FinufftEncoding", "GpuExactEncoding", "Identity",
           "LinearOperator", "Multiply", "NudftEncoding", "OffresEncoding", "PlanCacheInfo", "PlannedNormal", "Scale",
           "Sense", "Wavelet", "choose_engine", "fhd", "fhd_offres", "forward", "forward_offres", "plan_cache_clear",
           "plan_cache_info", "psf", "resolve"]
