"""The preparation of a time series: its frames prepared as one scan is, with what they share done once.

One gradient-delay estimate from every frame's readouts (:func:`~.gradient_delay.correct_gradient_delay`),
one coil-map choice made on the time-averaged data (every frame's samples: the file's maps, whitened, or an
estimate the pipeline's coil-map stage runs on those data), one coil compression from the time-averaged data
(:mod:`.compress`), then each frame prewhitened with the shared noise, compressed with that one matrix and
given its own density weights: ``dcf`` itself, or for ``"auto"`` the frame's file weights, else Pipe-Menon
of its trajectory (a frame of a few spokes is far from uniform density).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidDataError, listed
from ..io.frames import TimeSeries
from ..scan import Scan
from . import FIELD_MAP_CHOICES, coil_map_method, prepare_scan
from .compress import planned_coils, wanted
from .compress_methods import check_method, compression_for
from .gradient_delay import correct_gradient_delay
from .maps_methods import COIL_MAPS
from .noise import whitening_and_basis


def prepare_series(series: TimeSeries, *, prewhiten: bool = True, dcf: str = "auto", coil_maps: str = "auto",
                   field_map: str = "correct", gradient_delay: Any = "none",
                   coil_compress: Any = "none", coil_compress_method: str = "svd") -> tuple[TimeSeries, dict[str, Any]]:
    """``(prepared series, record)``: see the module docstring. The record has :func:`prepare_scan`'s keys of
    the coil-map stage (``estimate_maps``, ``maps_basis``) for the pipeline, and those of coil compression.

    Raises
    ------
    InvalidDataError
        ``coil_maps="rss"`` (a time series is solved with coil maps; one coil without maps has maps of ones),
        or frames with field maps to correct (``field_map="correct"``).
    """
    if field_map == FIELD_MAP_CHOICES[0] and any(f.field_map is not None for f in series.frames):
        raise InvalidDataError(f"{series.source}: a time series is reconstructed without off-resonance correction "
                               f"(one correction per frame is not implemented); drop its field maps on purpose "
                               f"(field_map='ignore', --no-field-map)")
    frames, delays = correct_gradient_delay(list(series.frames), gradient_delay)
    series = series.replace_frames(frames)
    averaged = series.averaged()
    compression = shared_compression(averaged, coil_compress, prewhiten, coil_compress_method)
    method = COIL_MAPS[coil_map_method(averaged, coil_maps, planned_coils(compression, averaged.n_coils))]
    if not method.sense and method.offered:
        raise InvalidDataError(f"{series.source}: a time series is reconstructed with coil maps ("
                               f"{listed([m.name for m in COIL_MAPS.values() if m.sense and m.offered], 'or')}), "
                               f"not {method.name}")
    averaged, record = prepare_scan(averaged, prewhiten=prewhiten, dcf="none", coil_maps=coil_maps,
                                    field_map=field_map, coil_compress=compression)
    ready = []
    for frame in series.frames:
        choice = dcf if dcf != "auto" else ("file" if frame.weights is not None else "pipe")
        ready.append(prepare_scan(frame, prewhiten=prewhiten, dcf=choice, coil_maps="rss", field_map=field_map,
                                  coil_compress=compression)[0])
    maps, basis = None if averaged.coil_maps is None else np.asarray(averaged.coil_maps, np.complex64), \
        record["maps_basis"]
    if not method.sense:  # one coil without maps: its image is the frame, in the receiver's units
        maps, basis = one_coil_maps(series.matrix, basis), None
    used = {**delays, "prewhitened": record["prewhitened"], "coil_maps": record["coil_maps"], "dcf": dcf,
            "coil_maps_from": "time-averaged data (all frames)" if record["estimate_maps"] else "scan",
            "estimate_maps": record["estimate_maps"], "maps_basis": basis,
            **{k: v for k, v in record.items() if k.startswith("coil_compress")}}
    return series.replace_frames(ready, coil_maps=maps), used


def one_coil_maps(matrix: tuple[int, ...], basis: Any) -> np.ndarray:
    """The map of one (whitened or virtual) coil: ``1 / ||b||`` with ``b`` the receiver basis' column (the
    noise's Cholesky factor, times the compression's row; per position along the first image axis after
    geometric compression), so that the frames are in the receiver's units as a one-coil scan's image is; ones
    without a basis."""
    if basis is None:
        return np.ones((1, *matrix), dtype=np.complex64)
    basis = np.asarray(basis, dtype=np.complex128)
    scale = np.linalg.norm(basis[..., 0], axis=-1).reshape(-1, *[1] * (len(matrix) - 1))  # (1 or X, 1, ...)
    inverse = np.where(scale > 0, 1.0 / np.where(scale > 0, scale, 1.0), 1.0)
    return np.broadcast_to(inverse, matrix)[None].astype(np.complex64)


def shared_compression(averaged: Scan, coil_compress: Any, prewhiten: bool, method: str = "svd") -> Any:
    """The coil compression (:mod:`.compress`, by ``method``) of the time-averaged data, whitened with the
    series' noise when ``prewhiten``, which every frame shares ("none": none)."""
    check_method(coil_compress, method)
    whitening = None
    if prewhiten and averaged.noise is not None and wanted(coil_compress):
        whitening, _ = whitening_and_basis(averaged)
    return compression_for(averaged, coil_compress, method, whitening) or "none"
