"""Tikhonov regularization ``lam ||x||^2``: conjugate gradients on ``A^H W A + lam I``."""

from __future__ import annotations

from .base import Regularizer


class Tikhonov(Regularizer):
    name = "l2"
    help = "Tikhonov, CG"
    label = "CG"
    lam_default = {True: 1e-3, False: 1e-3}
    sparse = False
    solvers = ("cg",)
    default_solver = "cg"


REGULARIZER = Tikhonov()
