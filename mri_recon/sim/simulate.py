"""Simulated scans: the analytic Shepp-Logan phantom, coil maps and noise on any of the trajectories.

:func:`simulate_scan` returns a validated :class:`~mri_recon.scan.Scan` whose k-space is the exact
continuous Fourier transform of ``coil map x phantom`` at the trajectory (no inverse crime), plus circular
Gaussian noise; the rasterized phantom is stored as ``ground_truth``.
"""

from __future__ import annotations

import math

import numpy as np

from ..checks.validation import positive_int, validate_matrix
from ..errors import InvalidDataError
from ..prep import dcf as _dcf
from ..scan import Scan
from . import phantom, trajectories
from .trajectories import delayed_positions

KINDS = ("radial", "golden", "spiral", "kooshball", "stack-of-stars")
"""Trajectory kinds: uniform or golden-angle 2D radial, variable-density spiral, 3D radial, stack of stars."""
DCFS = ("pipe", "ramp", None)
NOISE_SAMPLES = 1024
"""Noise-only samples per coil stored in the ``noise`` dataset."""
_NDIM = {"radial": 2, "golden": 2, "spiral": 2, "kooshball": 3, "stack-of-stars": 3}


def default_spokes(kind: str, matrix: tuple[int, ...]) -> int:
    """Spokes used when none are given.

    2D radial and stack of stars: ``ceil(pi / 2 * N)``, the Nyquist count at the edge of k-space (N the
    largest in-plane axis). Kooshball: a quarter of the 3D Nyquist count ``pi / 2 * N^2``, which keeps
    the default quick (coil sensitivities carry the rest).
    """
    largest = max(matrix[:2]) if kind == "stack-of-stars" else max(matrix)
    if kind == "kooshball":
        return math.ceil(math.pi / 2 * largest**2 / 4)
    return math.ceil(math.pi / 2 * largest)


def default_interleaves(matrix: tuple[int, ...]) -> int:
    """Spiral interleaves used when none are given: ``ceil(N / 8)``."""
    return math.ceil(max(matrix) / 8)


def _choice(name: str, value, choices: tuple) -> None:
    if value not in choices:
        listed = ", ".join("None" if c is None else repr(c) for c in choices)
        raise InvalidDataError(f"{name} must be one of {listed}, found {value!r}")


def _snr(snr) -> float:
    if snr is None:
        return math.inf
    try:
        value = float(snr)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(snr, bool) or not value > 0:
        raise InvalidDataError(f"snr must be a positive number (inf or None: no noise), found {snr!r}")
    return value


def _trajectory(kind: str, matrix: tuple[int, ...], spokes, samples, interleaves) -> tuple[np.ndarray, dict]:
    """The trajectory of ``kind`` and the attributes that describe it."""
    if kind == "spiral":
        if spokes is not None:
            raise InvalidDataError("spokes apply to radial trajectories; for trajectory 'spiral' give "
                                   f"interleaves, found spokes={spokes!r}")
        interleaves = default_interleaves(matrix) if interleaves is None else positive_int(
            "interleaves", interleaves)
        k = trajectories.spiral(matrix, interleaves, samples)
        return k, {"interleaves": interleaves, "samples": len(k) // interleaves}
    if interleaves is not None:
        raise InvalidDataError(f"interleaves apply to trajectory 'spiral' only, found trajectory {kind!r} "
                               f"with interleaves={interleaves!r}")
    spokes = default_spokes(kind, matrix) if spokes is None else positive_int("spokes", spokes)
    if kind in ("radial", "golden"):
        k = trajectories.radial(matrix, spokes, samples, golden=kind == "golden")
    elif kind == "kooshball":
        k = trajectories.kooshball(matrix, spokes, samples)
    else:
        k = trajectories.stack_of_stars(matrix, spokes, samples)
    per_spoke = len(k) // spokes // (matrix[2] if kind == "stack-of-stars" else 1)
    return k, {"spokes": spokes, "samples": per_spoke}


def _weights(method: str | None, kind: str, k: np.ndarray, matrix: tuple[int, ...]) -> np.ndarray | None:
    axes = (0, 1) if kind == "stack-of-stars" else None
    if method is None:
        return None
    if method == "ramp":
        if kind == "spiral":
            raise InvalidDataError("dcf 'ramp' is the radial ramp and does not fit trajectory 'spiral'; "
                                   "use dcf='pipe' or None")
        return _dcf.ramp(k, matrix, axes=axes)
    return _dcf.pipe_menon(k, matrix, axes=axes)


def simulate_scan(matrix, trajectory: str = "golden", *, coils: int = 8, snr: float | None = 30.0,
                  spokes: int | None = None, samples: int | None = None, seed: int = 0,
                  dcf: str | None = "pipe", interleaves: int | None = None, field_map_peak: float | None = None,
                  readout_ms: float = 16.0, gradient_delay=None, frames: int | None = None,
                  spokes_per_frame: int | None = None, progress=None) -> Scan:
    """Simulate a Shepp-Logan scan with exact (analytic) multi-coil k-space.

    Parameters
    ----------
    matrix : sequence of int
        ``(Nx, Ny)`` for radial, golden and spiral; ``(Nx, Ny, Nz)`` for kooshball and stack-of-stars.
    trajectory : str
        ``"radial"`` (uniform angles), ``"golden"`` (golden-angle radial), ``"spiral"`` (variable density),
        ``"kooshball"`` (3D golden-means radial) or ``"stack-of-stars"`` (golden-angle radial on Cartesian
        partitions).
    coils : int
        Number of coils of :func:`mri_recon.sim.phantom.coil_model` (1: a uniform body coil).
    snr : float or None
        Image-domain SNR of each coil of an equivalent fully sampled Cartesian scan: RMS intensity of the
        coil images ``S_c x`` over the noise standard deviation of their inverse DFT (see
        :func:`mri_recon.sim.phantom.cartesian_signal`); it does not depend on the trajectory. ``inf`` or
        None: no noise (and no ``noise`` dataset).
    spokes, samples, interleaves : int, optional
        Trajectory size; defaults: :func:`default_spokes`, ``2 * N`` samples per spoke (oversampling 2),
        :func:`default_interleaves` and samples spaced 1/2 cycle per FOV at the edge for spirals.
    seed : int
        Seed of the noise generator; the same arguments give the same scan.
    dcf : str or None
        Density compensation stored as ``weights``: ``"pipe"`` (:func:`mri_recon.prep.dcf.pipe_menon`),
        ``"ramp"`` (:func:`mri_recon.prep.dcf.ramp`, radial kinds) or None (no weights).
    field_map_peak, readout_ms : float, optional
        Off-resonance (:mod:`mri_recon.sim.offres`): the peak (Hz) of a smooth synthetic field map, stored as
        ``field_map`` with the sample ``times`` (each readout ``readout_ms`` long), and the data computed with
        it on a finer grid. None: no off-resonance (no ``field_map`` or ``times``).
    gradient_delay : sequence of float, optional
        Radial kinds: delays ``(X, Y)`` (kooshball ``(X, Y, Z)``) in samples, or the full tensor's parameters
        (:mod:`mri_recon.prep.delay`): the k-space is that of the delayed, true sample positions while the
        stored trajectory (and the weights) stay nominal, as a scanner records them; attribute
        ``gradient_delay_samples``.
    frames, spokes_per_frame : int, optional
        A beating phantom of ``frames`` frames of ``spokes_per_frame`` (default 21) consecutive spokes
        instead (golden or stack-of-stars): returns a :class:`~mri_recon.io.frames.TimeSeries`
        (:func:`mri_recon.sim.dynamic.simulate_series`, with ``gradient_delay``; refuses ``spokes``,
        ``interleaves`` and ``field_map_peak``).
    progress : callable, optional
        ``progress(done, total)``, called as the k-space is computed.

    Returns
    -------
    Scan
        kspace ``(coils, M)``, trajectory, weights, coil_maps, noise ``(coils, 1024)``, ground_truth (the
        phantom rasterized with 4 sub-samples per voxel and axis) and attributes ``trajectory_kind``,
        ``snr``, ``seed``, ``noise_std``, ``dcf``, ``coils``, ``phantom`` and the trajectory size.
    """
    if frames is not None or spokes_per_frame is not None:  # a time series (mri_recon.sim.dynamic)
        unused = {"spokes": spokes, "interleaves": interleaves, "field_map_peak": field_map_peak}
        return _series(matrix, trajectory, frames, spokes_per_frame, unused, coils=coils, snr=snr,
                       samples=samples, seed=seed, dcf=dcf, gradient_delay=gradient_delay)
    matrix, coils = _checked(matrix, trajectory, dcf, coils, seed)
    snr_value = _snr(snr)
    k, sizes = _trajectory(trajectory, matrix, spokes, samples, interleaves)
    weights = _weights(dcf, trajectory, k, matrix)
    truth = phantom.shepp_logan_image(matrix)
    maps = phantom.coil_maps(matrix, coils)
    rng = np.random.default_rng(int(seed))
    sampled, sizes = delayed_positions(k, trajectory, gradient_delay, sizes)
    clean = phantom.coil_kspace(sampled, matrix, coils, progress=progress)
    clean, fmap, times = _off_resonance(clean, sampled, matrix, coils, field_map_peak, readout_ms, sizes)
    kspace, sigma = phantom.add_noise(clean, snr_value, rng, signal=phantom.cartesian_signal(maps * truth))
    noise = phantom.noise_samples(coils, NOISE_SAMPLES, sigma, rng) if sigma > 0 else None
    attrs = {"trajectory_kind": trajectory, "snr": snr_value, "seed": int(seed), "noise_std": float(sigma),
             "dcf": dcf or "none", "coils": coils, "phantom": "shepp-logan (modified, Toft)", **sizes}
    return Scan(kspace=kspace, trajectory=k, matrix=matrix, weights=weights, coil_maps=maps, noise=noise,
                ground_truth=truth, field_map=fmap, times=times, attrs=attrs, source="simulate_scan")


def _checked(matrix, trajectory: str, dcf: str | None, coils: int, seed: int) -> tuple[tuple[int, ...], int]:
    """``(matrix, coils)`` of a single scan, checked with its trajectory kind, density weights and seed."""
    _choice("trajectory", trajectory, KINDS)
    _choice("dcf", dcf, DCFS)
    matrix = validate_matrix(matrix, "simulate_scan")
    ndim = _NDIM[trajectory]
    if len(matrix) != ndim:
        raise InvalidDataError(f"trajectory {trajectory!r} needs a {ndim}-D matrix, found {list(matrix)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidDataError(f"seed must be a non-negative integer, found {seed!r}")
    return matrix, positive_int("coils", coils)


def _series(matrix, trajectory: str, frames: int | None, spokes_per_frame: int | None, unused: dict, **options):
    """:func:`~mri_recon.sim.dynamic.simulate_series` for ``simulate_scan(frames=...)``; the options a series
    does not simulate (``unused``, given) are refused by name."""
    from .dynamic import simulate_series  # noqa: PLC0415

    given = [name for name, value in unused.items() if value is not None]
    if given:
        raise InvalidDataError(f"{', '.join(given)}: not simulated for a time series (frames of spokes_per_frame "
                               f"golden-angle spokes, no field map); leave them out")
    return simulate_series(matrix, trajectory, frames=frames, spokes_per_frame=spokes_per_frame or 21, **options)


def _off_resonance(clean, sampled, matrix, coils, field_map_peak, readout_ms, sizes):
    """``(k-space, field map, times)``: the k-space with the off-resonance of a field of peak
    ``field_map_peak`` Hz (None: none, and no field map); the trajectory sizes updated."""
    if field_map_peak is None:
        return clean, None, None
    from . import offres  # noqa: PLC0415 - loaded on use

    peak = float(field_map_peak)
    if not (math.isfinite(peak) and peak >= 0):
        raise InvalidDataError(f"field_map_peak must be a non-negative number of Hz, found {field_map_peak!r}")
    times = offres.readout_times(len(sampled), sizes["samples"], float(readout_ms) * 1e-3)
    fmap = offres.field_map(matrix, peak)
    if peak > 0:
        clean = (clean + offres.perturbation(sampled, matrix, coils, peak, times)).astype(np.complex64)
    sizes.update(field_map_peak_hz=peak, readout_ms=float(readout_ms))
    return clean, fmap, times
