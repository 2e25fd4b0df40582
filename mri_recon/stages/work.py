"""The device stages of a reconstruction: coil maps, the encoding, the right-hand side ``A^H W d``, the normal
operator (the PSF from the caller, the memo, the disk cache or computed) and the solve."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..backend import get_xp, to_device, to_host
from ..errors import InvalidDataError, SchemaError
from ..io.cache import PsfCache, psf_key
from ..operators import arith
from ..operators.arith import scaled
from ..operators.engines import Encoding
from ..operators.memo import spectrum_memo
from ..operators.normal.toeplitz import kernel_spectrum
from ..operators.reads import rss_peak
from ..scaling import power_of_two
from ..solvers.cg import cg
from ..solvers.sparse import data_energy, solve_regularized
from .options import Options
from .state import State


def coil_maps(options: Options, state: State) -> None:
    """Estimate the coil maps from the uploaded k-space centre (the preparation's coil-map stage)."""
    weights = state.w if state.scan.weights is not None else None
    state.maps, state.basis_scale = options.maps.run(state.kspace, state.trajectory, state.scan.matrix, weights,
                                                     state.device)


def scale_maps(options: Options, state: State) -> None:
    """Divide the maps by a power of two near their largest root-sum-of-squares (refuse maps zero everywhere):
    the scan's maps' peak was read with the upload's scales, estimated maps' is read now."""
    if state.maps is None:
        return
    maps_peak = rss_peak(state.maps) if options.maps.method is not None else state.maps_peak
    if maps_peak == 0.0:
        raise InvalidDataError(f"{state.scan.source}: the coil maps are zero everywhere")
    unit = power_of_two(maps_peak)
    if unit != 1.0:
        state.maps = scaled(state.maps, 1.0 / unit)
    state.maps_scale = unit / state.basis_scale
    state.maps_peak = maps_peak / unit  # a power of two: the peak of the scaled maps, without a second pass


def _lookup_psf(psf_cache: PsfCache, trajectory: np.ndarray, weights: np.ndarray | None,
                matrix: tuple[int, ...], engine: str) -> tuple[str, np.ndarray | None]:
    """The cache key of the PSF of these (scaled) weights by ``engine`` and the cached PSF (None when absent
    or refused)."""
    key = psf_key(trajectory, weights, matrix, engine)
    return key, psf_cache.load(key, tuple(2 * n for n in matrix))


def encoding(options: Options, state: State) -> None:
    """The encoding operator: the memo's (a bit-identical trajectory and weights still on this GPU) or a new
    one of the engine, with off-resonance when the scan has a field map; start the PSF cache lookup on a host
    thread (hashing and reading release the GIL) when the engine's PSF is worth caching."""
    scan, dev, offres = state.scan, state.device, state.offres
    use_memo = options.psf is None and dev.is_gpu and not offres and state.engine.memo
    state.memo = spectrum_memo(dev) if use_memo else None
    state.kept = state.memo.lookup(state.engine.key, scan.matrix, state.trajectory, state.w) if use_memo else None
    plain = (state.engine(state.trajectory, scan.matrix, scan.n_coils) if state.kept is None
             else state.kept[0].batched(scan.n_coils))
    state.encoding = plain if offres is None else offres.encoding(plain)
    cache_used = options.psf_cache is not None and state.encoding.caches_psf and offres is None
    if options.psf is None and cache_used and state.kept is None:
        key_weights = state.weights if scan.weights is not None else None
        state.lookup = state.stack.enter_context(ThreadPoolExecutor(1)).submit(
            _lookup_psf, options.psf_cache, scan.trajectory, key_weights, scan.matrix, state.encoding.key)


def right_hand_side(options: Options, state: State) -> None:
    """``A^H (W d) = sum_c conj(S_c) F^H (W d_c)`` (shape ``matrix``), or ``F^H (W d)`` per coil without maps,
    coils ``coil_batch`` at a time (bounds the memory of the coil images); ``d^H W d`` for the sparse solvers;
    the normal operator's peak."""
    weighted = arith.weighted(state.kspace, state.w, 1.0 / state.data_scale)
    state.rhs = _rhs(state.encoding, weighted, state.maps, state.budget.coil_batch)
    state.energy = data_energy(state.kspace, weighted, state.data_scale) if options.sparse else 0.0
    del weighted
    # lam relative to the largest diagonal entry of the normal operator solved (scaled units)
    state.peak = state.weight_sum * state.maps_peak ** 2


def _rhs(encoding: Encoding, weighted: Any, maps: Any, coil_batch: int) -> Any:
    xp = get_xp(weighted)
    if maps is None:
        return encoding.batched(weighted.shape[0]).H(weighted)
    out = xp.empty(encoding.matrix, dtype=np.complex64)
    for start in range(0, weighted.shape[0], coil_batch):
        part = slice(start, start + coil_batch)
        images = encoding.batched(weighted[part].shape[0]).H(weighted[part])
        arith.combine_coils(maps[part], images, out, accumulate=start > 0)
    return out


def normal_operator(options: Options, state: State) -> None:
    """The normal operator: with off-resonance the encoding's own (segment PSFs, or A and A^H every iteration);
    otherwise the kernel spectrum of the PSF (the memo's, the caller's, the cache's or computed now, and then
    stored in the cache and the memo) and, for l2, the engine's Toeplitz operator ``A^H W A + lam I``."""
    lam = options.lam * state.peak
    if state.offres is not None:
        state.operator = state.encoding.normal(state.w, state.maps, lam, coil_batch=state.budget.coil_batch)
        return
    if state.kept is not None:
        state.spectrum, state.cache_state = state.kept[1], "memory"
    else:
        state.spectrum = _spectrum(options, state)
        if state.memo is not None:
            state.memo.store(state.engine.key, state.scan.matrix, state.trajectory, state.w, state.encoding,
                             state.spectrum)
    if not options.sparse:
        state.operator = state.encoding.normal(state.w, state.maps, lam, coil_batch=state.budget.coil_batch,
                                               spectrum=state.spectrum)


def _spectrum(options: Options, state: State) -> Any:
    """The kernel spectrum: of the caller's or the cache's PSF, else the engine's own (:meth:`Encoding.spectrum`:
    of its PSF on the 2x grid, or the FFT engines' sampling mask on the image grid with maps)."""
    if options.psf is None and state.lookup is None:
        return state.encoding.spectrum(state.w, state.maps)
    return kernel_spectrum(_point_spread(options, state))


def _point_spread(options: Options, state: State) -> Any:
    """The PSF on the 2x grid: the caller's (unscaled weights), the cache's (scaled weights; on a miss computed
    by one process at a time, the others wait, then read it), checked and uploaded, or computed now."""
    encoding, matrix = state.encoding, state.scan.matrix
    given = None if options.psf is None else options.psf / np.float32(state.weight_scale)
    if state.lookup is not None:
        key, given = state.lookup.result()
        state.cache_state = "hit" if given is not None else "miss"
        if state.cache_state == "miss":
            given, state.cache_state = options.psf_cache.fill(key, tuple(2 * n for n in matrix),
                                                              lambda: to_host(encoding.psf(state.w)))
    if given is None:
        return encoding.psf(state.w)
    shape = tuple(2 * n for n in matrix)
    if tuple(given.shape) != shape:
        raise SchemaError(f"psf must have shape {shape} (twice the matrix {list(matrix)}), "
                          f"found {tuple(given.shape)}")
    return to_device(given, state.device).astype(np.complex64, copy=False)


def solve(options: Options, state: State) -> None:
    """CG on the normal operator (l2), or ADMM / FISTA for tv and wavelet on the engine's Toeplitz operators."""
    callback = state.clock.callback()
    if options.sparse:
        encoding, spectrum, maps, batch = state.encoding, state.spectrum, state.maps, state.budget.coil_batch
        state.x, state.residuals, state.extra = solve_regularized(
            spectrum, maps, state.rhs, options.lam, state.peak, state.energy, options.iterations, batch, callback,
            normal=lambda lam: encoding.toeplitz_normal(spectrum, maps, lam, batch), **options.sparse)
        return
    state.x, state.residuals = cg(state.operator, state.rhs, max_iterations=options.iterations,
                                  tolerance=options.tol, callback=callback)
    state.extra = {"regularizer": "l2"}
