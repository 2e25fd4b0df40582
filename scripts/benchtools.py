"""Helpers shared by the GPU benchmark scripts (imported from scripts/ when a script runs as
``python scripts/NAME.py``): the golden-angle test trajectory and CUDA-event timing."""

from __future__ import annotations

import math
import statistics

import numpy as np

from mri_recon.backend import cupy_module


def radial_2d(n: int, spokes: int, samples: int) -> np.ndarray:
    """Golden-angle radial spokes through the centre, |k| < n/2 (cycles per field of view)."""
    radius = (np.arange(samples) - samples / 2) / samples * n
    angles = np.arange(spokes) * np.pi * (math.sqrt(5.0) - 1.0) / 2.0
    traj = np.stack([np.cos(angles)[:, None] * radius, np.sin(angles)[:, None] * radius], axis=-1)
    return traj.reshape(-1, 2).astype(np.float32)


def cuda_timed(fn, runs: int, warmup: int = 2) -> dict:
    """``fn``'s device time by CUDA events over ``runs`` runs after ``warmup`` (median, minimum, runs)."""
    cupy = cupy_module()
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(runs):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return {"median_s": statistics.median(times), "min_s": min(times), "runs": runs}
