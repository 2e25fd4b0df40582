"""The stages of one reconstruction, each a small function of ``(options, state)``:
:func:`mri_recon.pipeline.reconstruct` runs them in order and times them.

plan -> upload -> coil maps (the preparation's device stage) -> encoding -> right-hand side -> normal operator
-> solve -> combine -> filter -> download -> result. :mod:`.options` checks the settings once
(:class:`Options`), :mod:`.state` holds what the stages pass on (:class:`State`, with one record per frame)
and plans and uploads, :mod:`.work` does the device work, :mod:`.solve` the solve, :mod:`.finish` the image
and the result.
A time series (:class:`~mri_recon.io.frames.TimeSeries`) runs the same stages with one record per frame.
"""

from __future__ import annotations

from .finish import combine, download, post_filter, result
from .options import Options, check_frames
from .solve import solve
from .state import SOLVER_KERNELS, State, gpu_lock, held, plan, run_kernels, sources, upload
from .work import coil_maps, encoding, normal_operator, right_hand_side, scale_maps

__all__ = ["SOLVER_KERNELS", "Options", "State", "check_frames", "coil_maps", "combine", "download", "encoding",
           "gpu_lock", "held",
           "normal_operator", "plan", "post_filter", "result", "right_hand_side", "run_kernels", "scale_maps", "solve",
           "sources", "upload"]
