"""Encoding engines: the protocol (:mod:`.encoding`), the engines (:mod:`.cpu`, :mod:`.gpu`, and the FFT
engines of Cartesian scans, :mod:`.cartesian`), their rates (:mod:`.cost`) and the registry that lists them
and chooses among them (:mod:`.registry`). The kernels' launchers and host-side layouts live beside them
(:mod:`.nudft`, :mod:`.finufft`, :mod:`.gpu_exact`, :mod:`.gpu_layout`, :mod:`.gpu_nufft`,
:mod:`.nufft_launch`, :mod:`.nufft_params`)."""

from __future__ import annotations

from .cpu import FinufftEncoding, NudftEncoding
from .encoding import GPU_NUFFT_EPS, NUFFT_EPS, Encoding
from .gpu import GpuExactEncoding, GpuNufftEncoding
from .registry import ALIASES, choose_engine, engine, engines, fastest, methods

__all__ = ["ALIASES", "GPU_NUFFT_EPS", "NUFFT_EPS", "Encoding", "FinufftEncoding", "GpuExactEncoding",
           "GpuNufftEncoding", "NudftEncoding", "choose_engine", "engine", "engines", "fastest", "methods"]
