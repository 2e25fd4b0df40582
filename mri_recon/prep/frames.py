"""The preparation of a time series: its frames prepared as one scan is, with what they share done once.

One gradient-delay estimate from every frame's readouts (:func:`~.gradient_delay.correct_gradient_delay`),
one coil-map choice made on the time-averaged data (every frame's samples: the file's maps, whitened, or an
estimate the pipeline's coil-map stage runs on those data), then each frame prewhitened with the shared noise
and given its own density weights: ``dcf`` itself, or for ``"auto"`` the frame's file weights, else Pipe-Menon
of its trajectory (a frame of a few spokes is far from uniform density).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidDataError, listed
from ..io.frames import TimeSeries
from . import coil_map_method, prepare_scan
from .gradient_delay import correct_gradient_delay
from .maps_methods import COIL_MAPS


def prepare_series(series: TimeSeries, *, prewhiten: bool = True, dcf: str = "auto", coil_maps: str = "auto",
                   field_map: str = "correct", gradient_delay: Any = "none") -> tuple[TimeSeries, dict[str, Any]]:
    """``(prepared series, record)``: see the module docstring. The record has :func:`prepare_scan`'s keys of
    the coil-map stage (``estimate_maps``, ``maps_basis``) for the pipeline.

    Raises
    ------
    InvalidDataError
        ``coil_maps="rss"`` (a time series is solved with coil maps; one coil without maps has maps of ones).
    """
    method = COIL_MAPS[coil_map_method(series.averaged(), coil_maps)]
    if not method.sense and method.offered:
        raise InvalidDataError(f"{series.source}: a time series is reconstructed with coil maps ("
                               f"{listed([m.name for m in COIL_MAPS.values() if m.sense and m.offered], 'or')}), "
                               f"not {method.name}")
    frames, delays = correct_gradient_delay(list(series.frames), gradient_delay)
    series = series.replace_frames(frames)
    averaged, record = prepare_scan(series.averaged(), prewhiten=prewhiten, dcf="none", coil_maps=coil_maps,
                                    field_map=field_map)
    ready = []
    for frame in series.frames:
        choice = dcf if dcf != "auto" else ("file" if frame.weights is not None else "pipe")
        ready.append(prepare_scan(frame, prewhiten=prewhiten, dcf=choice, coil_maps="rss", field_map=field_map)[0])
    maps = None if averaged.coil_maps is None else np.asarray(averaged.coil_maps, dtype=np.complex64)
    if not method.sense:  # one coil without maps: its image is the frame
        maps = np.ones((1, *series.matrix), dtype=np.complex64)
    used = {**delays, "prewhitened": record["prewhitened"], "coil_maps": record["coil_maps"], "dcf": dcf,
            "coil_maps_from": "time-averaged data (all frames)" if record["estimate_maps"] else "scan",
            "estimate_maps": record["estimate_maps"], "maps_basis": record["maps_basis"]}
    return series.replace_frames(ready, coil_maps=maps), used
