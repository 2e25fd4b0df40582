"""The encoding operator on PyTorch tensors, with autograd (the optional ``torch`` extra).

``from mri_recon.torch import TorchEncoding`` needs PyTorch (``pip install 'mri-recon[torch]'``); ``import
mri_recon`` never imports it. CPU tensors go through NumPy and CUDA tensors through DLPack into CuPy (the
``gpu`` extra), without copies where the memory allows it (:mod:`.tensors`); :mod:`.encoding` has the operator
and its conventions. See docs/torch.md.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401 - the torch extra: this subpackage is its only user
except ImportError as exc:
    raise ImportError(
        "mri_recon.torch needs PyTorch: pip install 'mri-recon[torch]' (or a torch build of your choice, CPU or CUDA)"
    ) from exc

from .encoding import TorchEncoding
from .tensors import as_array, as_tensor

__all__ = ["TorchEncoding", "as_array", "as_tensor"]
