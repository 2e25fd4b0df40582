"""l1 of the image, ``lam ||x||_1``: FISTA (exact proximal map) or ADMM.

The worked example of docs/architecture.md, "Where to add a regularizer": this file is
``mri_recon/solvers/regularizers/l1.py`` with one entry, ``"l1"``, in ``MODULES`` of
``mri_recon/solvers/regularizers/__init__.py``. ``tests/test_examples.py`` loads it there and runs it.
"""

from __future__ import annotations

from typing import Any

from ...operators.base import Identity
from ..admm import Sparsity
from .base import Regularizer


class ImageL1(Regularizer):
    name = "l1"
    help = "l1 of the image, FISTA"
    lam_default = {True: 5e-3, False: 5e-3}  # with density weights, without; tune with scripts/cs_lambda_table.py
    solvers = ("admm", "fista")
    default_solver = "fista"
    orthogonal = True

    def sparsity(self, shape: tuple[int, ...], ndim: int, *, anisotropic: bool = False) -> tuple[Sparsity, Any]:
        return Sparsity(forward=lambda x: x, adjoint_rhs=lambda b, q, rho: b + rho * q,
                        gram=lambda x: x, groups=0, shape=shape), Identity(shape)


REGULARIZER = ImageL1()
