"""The stages of one reconstruction, each a small function of the checked settings and the records it needs,
returning a frozen record of what it made: :func:`mri_recon.pipeline.run` runs them in order, passes the records
on and times them.

plan -> upload -> coil maps (the preparation's device stage) -> encoding -> right-hand side -> normal operator
-> solve -> combine -> filter -> download -> result. :mod:`.options` checks the settings once
(:class:`Options`), :mod:`.state` defines the records the stages pass on (:class:`Planned`, :class:`Uploaded`,
:class:`Maps`, :class:`RightHandSide`, :class:`Solution`; per frame :class:`FrameData`, :class:`Encoded`,
:class:`FrameNormal`) and the run's resources (:class:`Context`: the clock, the device held) and plans and
uploads, :mod:`.work` does the device work, :mod:`.solve` the solve, :mod:`.finish` the image and the result.
A time series (:class:`~mri_recon.io.frames.TimeSeries`) runs the same stages with one record per frame.
"""

from __future__ import annotations

from .finish import combine, download, post_filter, result
from .options import Options, check_frames
from .solve import solve
from .state import (
    SOLVER_KERNELS,
    Context,
    Encoded,
    FrameData,
    FrameNormal,
    Maps,
    Planned,
    RightHandSide,
    Solution,
    Uploaded,
    gpu_lock,
    held,
    plan,
    run_kernels,
    sources,
    upload,
)
from .work import coil_maps, encoding, normal_operator, right_hand_side, scale_maps

__all__ = ["SOLVER_KERNELS", "Context", "Encoded", "FrameData", "FrameNormal", "Maps", "Options", "Planned",
           "RightHandSide", "Solution", "Uploaded", "check_frames", "coil_maps", "combine", "download", "encoding",
           "gpu_lock", "held", "normal_operator", "plan", "post_filter", "result", "right_hand_side", "run_kernels",
           "scale_maps", "solve", "sources", "upload"]
