"""The device stages of a reconstruction: coil maps, the encoding, the right-hand side ``A^H W d``, the normal
operator (the PSF from the caller, the memo, the disk cache or computed) and the solve."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import numpy as np

from ..arrays.backend import Device, get_xp, to_device, to_host
from ..checks.scaling import power_of_two
from ..errors import InvalidDataError, SchemaError
from ..io.cache import PsfCache, psf_key
from ..operators import arith
from ..operators.arith import scaled
from ..operators.engines import Encoding
from ..operators.memo import spectrum_memo
from ..operators.normal.toeplitz import kernel_spectrum
from ..operators.reads import rss_peak
from ..solvers.sparse import data_energy
from .options import Options
from .state import Encoded, FrameData, FrameNormal, Maps, Planned, RightHandSide, Uploaded


def coil_maps(options: Options, planned: Planned, data: tuple[FrameData, ...]) -> Maps:
    """Estimate the coil maps from the uploaded k-space centre (the preparation's coil-map stage): one scan's
    with its weights, or a time series' time-averaged data (every frame's samples, unweighted)."""
    if planned.series is None:
        frame = data[0]
        weights, kspace, trajectory = (frame.w if frame.scan.weights is not None else None), frame.kspace, \
            frame.trajectory
    else:
        xp = get_xp(data[0].kspace)
        weights = None
        kspace = xp.concatenate([d.kspace for d in data], axis=1)
        trajectory = xp.concatenate([d.trajectory for d in data])
    maps, basis_scale = options.maps.run(kspace, trajectory, planned.scan.matrix, weights, planned.device)
    return Maps(maps, basis_scale=basis_scale)


def scale_maps(options: Options, planned: Planned, maps: Maps) -> Maps:
    """The maps divided by a power of two near their largest root-sum-of-squares (refuse maps zero everywhere):
    the scan's maps' peak was read with the upload's scales, estimated maps' is read now."""
    if maps.array is None:
        return maps
    maps_peak = rss_peak(maps.array) if options.maps.method is not None else maps.peak
    if maps_peak == 0.0:
        raise InvalidDataError(f"{planned.scan.source}: the coil maps are zero everywhere")
    unit = power_of_two(maps_peak)
    array = scaled(maps.array, 1.0 / unit) if unit != 1.0 else maps.array
    # the peak a power of two: the peak of the scaled maps, without a second pass
    return Maps(array, unit / maps.basis_scale, maps_peak / unit, maps.basis_scale)


def _lookup_psf(psf_cache: PsfCache, trajectory: np.ndarray, weights: np.ndarray | None,
                matrix: tuple[int, ...], engine: str) -> tuple[str, np.ndarray | None]:
    """The cache key of the PSF of these (scaled) weights by ``engine`` and the cached PSF (None when absent
    or refused)."""
    key = psf_key(trajectory, weights, matrix, engine)
    return key, psf_cache.load(key, tuple(2 * n for n in matrix))


def encoding(options: Options, planned: Planned, data: tuple[FrameData, ...],
             stack: ExitStack) -> tuple[Encoded, ...]:
    """Each frame's encoding operator: the memo's (one scan whose trajectory and weights are bit-identical to
    those still on this GPU) or a new one of the engine, with off-resonance when the scan has a field map; start
    the PSF cache lookups on a host thread (hashing and reading release the GIL; joined when ``stack`` closes)
    when the engine's PSF is worth caching."""
    memo = options.psf is None and planned.device.is_gpu and not planned.offres and planned.engine.memo and \
        planned.series is None
    cache_used = options.psf_cache is not None and planned.engine.caches_psf and planned.offres is None and \
        options.psf is None
    pool = stack.enter_context(ThreadPoolExecutor(1)) if cache_used else None
    return tuple(_encoded(options, planned, frame, memo, pool) for frame in data)


def _encoded(options: Options, planned: Planned, frame: FrameData, use_memo: bool,
             pool: ThreadPoolExecutor | None) -> Encoded:
    scan = frame.scan
    memo = spectrum_memo(planned.device) if use_memo else None
    kept = memo.lookup(planned.engine.key, scan.matrix, frame.trajectory, frame.w) if use_memo else None
    plain = (planned.engine(frame.trajectory, scan.matrix, scan.n_coils) if kept is None
             else kept[0].batched(scan.n_coils))
    encoding = plain if planned.offres is None else planned.offres.encoding(plain)
    lookup = None
    if pool is not None and kept is None and encoding.caches_psf:
        key_weights = frame.weights if scan.weights is not None else None
        lookup = pool.submit(_lookup_psf, options.psf_cache, scan.trajectory, key_weights, scan.matrix, encoding.key)
    return Encoded(encoding, kept, memo, lookup)


def right_hand_side(options: Options, planned: Planned, uploaded: Uploaded, maps: Maps,
                    encoded: tuple[Encoded, ...]) -> RightHandSide:
    """``A^H (W d) = sum_c conj(S_c) F^H (W d_c)`` (shape ``matrix``) of each frame, or ``F^H (W d)`` per coil
    without maps, coils ``coil_batch`` at a time (bounds the memory of the coil images); each frame's
    ``d^H W d`` for the sparse and joint solvers and the peak of its normal operator."""
    energy = bool(options.sparse or options.temporal.joint)
    data_scale, coil_batch, parts, energies = uploaded.data_scale, planned.budget.coil_batch, [], []
    for group in frame_groups(uploaded.data, planned.scan.matrix, coil_batch):
        weighted = [arith.weighted(uploaded.data[t].kspace, uploaded.data[t].w, 1.0 / data_scale) for t in group]
        parts += _rhs_frames([encoded[t].encoding for t in group], weighted, maps.array, coil_batch)
        energies += [data_energy(uploaded.data[t].kspace, w, data_scale) if energy else 0.0
                     for t, w in zip(group, weighted)]
        del weighted
    b = parts[0] if planned.series is None else get_xp(parts[0]).stack(parts)
    # lam relative to the largest diagonal entry of the normal operator solved (scaled units)
    peaks = tuple(frame.weight_sum * maps.peak ** 2 for frame in uploaded.data)
    return RightHandSide(b, tuple(energies), peaks)


FRAME_GROUP_BYTES = 256 << 20
"""Bytes of one group of a time series' right-hand side at most (one frame at least): :func:`frame_groups`."""


def frame_groups(data: tuple[FrameData, ...], matrix: tuple[int, ...], coil_batch: int) -> list[range]:
    """Consecutive frames in groups that take at most :data:`FRAME_GROUP_BYTES` together: per frame its
    ``coil_batch`` coil images and three copies of its samples (weighted, gathered for the launch, its records),
    one frame at least per group."""
    image = 8 * coil_batch * math.prod(matrix)
    groups, start, used = [], 0, 0
    for t, frame in enumerate(data):
        need = image + 3 * 8 * int(frame.kspace.size)
        if t > start and used + need > FRAME_GROUP_BYTES:
            groups.append(range(start, t))
            start, used = t, 0
        used += need
    return [*groups, range(start, len(data))]


def _rhs_frames(encodings: list[Encoding], weighted: list[Any], maps: Any, coil_batch: int) -> list[Any]:
    """Each frame's ``A^H (W d)`` (with maps) or per-coil ``F^H (W d)``, coils ``coil_batch`` at a time, the
    frames' F^H together (:meth:`Encoding.adjoint_frames`: one launch per coil group on the exact GPU engine)."""
    adjoint = type(encodings[0]).adjoint_frames
    if maps is None:
        return adjoint(encodings, weighted)
    xp = get_xp(weighted[0])
    out = [xp.empty(e.matrix, dtype=np.complex64) for e in encodings]
    for start in range(0, weighted[0].shape[0], coil_batch):
        part = slice(start, start + coil_batch)
        for images, target in zip(adjoint(encodings, [w[part] for w in weighted]), out):
            arith.combine_coils(maps[part], images, target, accumulate=start > 0)
    return out


def normal_operator(options: Options, planned: Planned, uploaded: Uploaded, maps: Maps,
                    encoded: tuple[Encoded, ...], peaks: tuple[float, ...]) -> tuple[FrameNormal, ...]:
    """Each frame's normal operator: with off-resonance the encoding's own (segment PSFs, or A and A^H every
    iteration); otherwise the kernel spectrum of the PSF (the memo's, the caller's, the cache's or computed now,
    and then stored in the cache and the memo) and, for CG, the engine's Toeplitz operator ``A^H W A + lam I``."""
    spectra = _series_spectra(options, planned, uploaded, maps.array, encoded)
    return tuple(_frame_normal(options, planned, uploaded.weight_scale, maps.array, frame, frame_encoded, peak,
                               spectra[t] if spectra else None)
                 for t, (frame, frame_encoded, peak) in enumerate(zip(uploaded.data, encoded, peaks)))


def _series_spectra(options: Options, planned: Planned, uploaded: Uploaded, maps: Any,
                    encoded: tuple[Encoded, ...]) -> list[Any] | None:
    """A time series' kernel spectra computed together (:meth:`Encoding.spectra_frames`: the exact GPU engine's
    PSFs in one launch), where every frame's is computed now (no off-resonance, no given or cached PSF); else
    None (frame by frame)."""
    if planned.series is None or planned.offres is not None or options.psf is not None or \
            any(e.lookup is not None or e.kept is not None for e in encoded):
        return None
    encodings = [e.encoding for e in encoded]
    return type(encodings[0]).spectra_frames(encodings, [frame.w for frame in uploaded.data], maps)


def _frame_normal(options: Options, planned: Planned, weight_scale: float, maps: Any, frame: FrameData,
                  encoded: Encoded, peak: float, spectrum: Any = None) -> FrameNormal:
    """One frame's normal operator record; ``spectrum`` when its series' spectra were computed together."""
    lam, encoding, batch = options.lam * peak, encoded.encoding, planned.budget.coil_batch
    if planned.offres is not None:
        return FrameNormal(None, encoding.normal(frame.w, maps, lam, coil_batch=batch))
    cache_state = None
    if spectrum is None and encoded.kept is not None:
        spectrum, cache_state = encoded.kept[1], "memory"
    elif spectrum is None:
        spectrum, cache_state = _spectrum(options, planned, weight_scale, maps, frame, encoded)
        if encoded.memo is not None:
            encoded.memo.store(planned.engine.key, frame.scan.matrix, frame.trajectory, frame.w, encoding, spectrum)
    # a time series' frames get theirs in the solve, one at a time (each holds work buffers on a GPU)
    solved_here = not options.sparse and not options.temporal.joint and planned.series is None
    operator = encoding.normal(frame.w, maps, lam, coil_batch=batch, spectrum=spectrum) if solved_here else None
    return FrameNormal(spectrum, operator, cache_state)


def _spectrum(options: Options, planned: Planned, weight_scale: float, maps: Any, frame: FrameData,
              encoded: Encoded) -> tuple[Any, str | None]:
    """The kernel spectrum: of the caller's or the cache's PSF, else the engine's own (:meth:`Encoding.spectrum`:
    of its PSF on the 2x grid, or the FFT engines' sampling mask on the image grid with maps); and the cache's
    word on it."""
    if options.psf is None and encoded.lookup is None:
        return encoded.encoding.spectrum(frame.w, maps), None
    psf, cache_state = _point_spread(options, planned.device, weight_scale, frame, encoded)
    return kernel_spectrum(psf), cache_state


def _point_spread(options: Options, device: Device, weight_scale: float, frame: FrameData,
                  encoded: Encoded) -> tuple[Any, str | None]:
    """The PSF on the 2x grid: the caller's (unscaled weights), the cache's (scaled weights; on a miss computed
    by one process at a time, the others wait, then read it), checked and uploaded, or computed now."""
    encoding, matrix, cache_state = encoded.encoding, frame.scan.matrix, None
    given = None if options.psf is None else options.psf / np.float32(weight_scale)
    if encoded.lookup is not None:
        key, given = encoded.lookup.result()
        cache_state = "hit" if given is not None else "miss"
        if cache_state == "miss":
            given, cache_state = options.psf_cache.fill(key, tuple(2 * n for n in matrix),
                                                        lambda: to_host(encoding.psf(frame.w)))
    if given is None:
        return encoding.psf(frame.w), cache_state
    shape = tuple(2 * n for n in matrix)
    if tuple(given.shape) != shape:
        raise SchemaError(f"psf must have shape {shape} (twice the matrix {list(matrix)}), "
                          f"found {tuple(given.shape)}")
    return to_device(given, device).astype(np.complex64, copy=False), cache_state
