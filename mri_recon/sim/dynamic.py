"""A moving phantom with exact k-space per frame: the Shepp-Logan ellipses, some of them beating.

Frame ``t`` of ``T`` shows the phantom at cardiac phase ``s_t = (1 - cos(2 pi cycles t / T)) / 2`` (0 at
the start, 1 at peak contraction): the two large inner ellipses (the dark "ventricles") contract by
:data:`CONTRACTION` of their semi-axes and move ``SHIFT`` of the field of view along x; the three small
ellipses at the bottom move along y with them. The outer ellipses are still. Each frame is sampled by its
own consecutive readouts of one golden-angle stream (2-D radial, or stack-of-stars in 3-D), and its k-space
is the exact continuous Fourier transform of ``coil map x frame`` at those readouts, as in
:mod:`mri_recon.sim.phantom` (the object is taken as still during one frame). The ground truth of every
frame is rasterized with 4 sub-samples per voxel and axis.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..checks.grid import axis_positions
from ..checks.validation import positive_int, validate_matrix
from ..errors import InvalidDataError
from ..io.frames import TimeSeries
from ..prep import dcf as _dcf
from ..scan import Scan
from . import phantom, trajectories
from .trajectories import delayed_positions

CONTRACTION = 0.3
"""Relative shrink of the beating ellipses' semi-axes at peak contraction."""
SHIFT = 0.04
"""Their displacement at peak contraction, in fields of view."""
BEATING = (2, 3)
"""Rows of the ellipse table that contract (the large inner ellipses)."""
MOVING = (7, 8, 9)
"""Rows that move along y with the contraction (the small ellipses)."""
KINDS = ("golden", "stack-of-stars")


def phase_of(frames: int, cycles: float = 1.0) -> np.ndarray:
    """Contraction ``s_t`` in [0, 1] of each frame (see the module docstring)."""
    t = np.arange(frames, dtype=np.float64)
    return 0.5 * (1.0 - np.cos(2.0 * np.pi * cycles * t / frames))


def shapes_at(ndim: int, s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ellipse (ellipsoid) table at contraction ``s``: intensities, semi-axes, centres, rotations."""
    intensity, axes, centres, rot = phantom.ellipse_shapes(ndim)
    axes, centres = axes.copy(), centres.copy()
    for row in BEATING:
        axes[row, :2] *= 1.0 - CONTRACTION * s
        centres[row, 0] += SHIFT * s * np.sign(centres[row, 0])
    for row in MOVING:
        centres[row, 1] += SHIFT * s
    return intensity, axes, centres, rot


def _ft(k: np.ndarray, shapes: tuple) -> np.ndarray:
    """Continuous Fourier transform of the ellipses ``shapes`` at ``k`` (M, D): complex128 (M,)."""
    ndim = k.shape[1]
    out = np.zeros(len(k), dtype=np.complex128)
    for a, ax, c, rm in zip(*shapes):
        q = np.sqrt(np.sum(((k @ rm) * ax) ** 2, axis=1))
        out += (a * np.prod(ax)) * phantom.unit_ft(q, ndim) * np.exp(-2j * np.pi * (k @ c))
    return out


def frame_kspace(trajectory: np.ndarray, matrix: tuple[int, ...], coils: int, s: float) -> np.ndarray:
    """Exact k-space of ``S_c x frame(s)``: complex64 ``(C, M)`` (the coil model of :func:`phantom.coil_model`)."""
    k = np.asarray(trajectory, dtype=np.float64)
    freqs, coeffs = phantom.coil_model(len(matrix), coils)
    shapes = shapes_at(len(matrix), s)
    shifted = np.stack([_ft(k - g, shapes) for g in freqs])
    return (np.prod(matrix) * (coeffs @ shifted)).astype(np.complex64)


def frame_image(matrix: tuple[int, ...], s: float, oversample: int = 4) -> np.ndarray:
    """The frame at contraction ``s`` rasterized on ``matrix`` (mean of ``oversample^D`` point samples)."""
    intensity, axes, centres, rot = shapes_at(len(matrix), s)
    steps = [((np.arange(oversample) + 0.5) / oversample - 0.5) / n for n in matrix]
    total = np.zeros(matrix)
    for offset in itertools.product(*steps):
        grids = np.meshgrid(*[axis_positions(n) + o for n, o in zip(matrix, offset)], indexing="ij")
        r = np.stack(grids, axis=-1)
        for a, ax, c, rm in zip(intensity, axes, centres, rot):
            u = ((r - c) @ rm) / ax
            total += a * (np.einsum("...d,...d->...", u, u) <= 1.0)
    return (total / oversample ** len(matrix)).astype(np.complex64)


def _readouts(kind: str, matrix: tuple[int, ...], total: int, samples: int | None) -> tuple[np.ndarray, int]:
    """Every readout of the stream in acquisition order, ``(R, n, D)``, and the readouts per spoke."""
    if kind == "golden":
        k = trajectories.radial(matrix, total, samples, golden=True)
        return k.reshape(total, -1, 2), 1
    k = trajectories.stack_of_stars(matrix, total, samples).reshape(matrix[2], total, -1, 3)
    return np.ascontiguousarray(k.transpose(1, 0, 2, 3)).reshape(total * matrix[2], -1, 3), matrix[2]


def simulate_series(matrix, trajectory: str = "golden", *, frames: int, spokes_per_frame: int, coils: int = 8,
                    snr: float | None = 30.0, samples: int | None = None, seed: int = 0, dcf: str | None = "pipe",
                    cycles: float = 1.0, frame_ms: float | None = None, gradient_delay=None) -> TimeSeries:
    """A :class:`~mri_recon.io.frames.TimeSeries` of the moving phantom (see the module docstring).

    ``frames`` frames of ``spokes_per_frame`` consecutive golden-angle spokes each (stack-of-stars: each spoke
    on every partition); ``cycles`` beats over the series; noise as in
    :func:`mri_recon.sim.simulate.simulate_scan` (image-domain SNR of the first frame); ``dcf`` each frame's
    own density weights; ``frame_ms`` the frame duration (default: 3.5 ms per readout, a golden-angle FLASH);
    ``gradient_delay`` delays as for :func:`~mri_recon.sim.simulate.simulate_scan` (the data those of the
    delayed positions, every frame's trajectory the nominal one; attribute ``gradient_delay_samples``).
    """
    if trajectory not in KINDS:
        raise InvalidDataError(f"a moving phantom is simulated on {', '.join(KINDS)}, found {trajectory!r}")
    matrix = validate_matrix(matrix, "simulate_series")
    if len(matrix) != (2 if trajectory == "golden" else 3):
        raise InvalidDataError(f"trajectory {trajectory!r} needs a {2 if trajectory == 'golden' else 3}-D "
                               f"matrix, found {list(matrix)}")
    frames, k = positive_int("frames", frames), positive_int("spokes_per_frame", spokes_per_frame)
    coils = positive_int("coils", coils)
    readouts, per_spoke = _readouts(trajectory, matrix, frames * k, samples)
    maps = phantom.coil_maps(matrix, coils)
    phases = phase_of(frames, cycles)
    truth = np.stack([frame_image(matrix, s) for s in phases])
    rng = np.random.default_rng(int(seed))
    sigma = phantom.noise_std_for(np.zeros(1), math.inf if snr is None else snr,
                                  signal=phantom.cartesian_signal(maps * truth[0]))
    noise = phantom.noise_samples(coils, 1024, sigma, rng) if sigma > 0 else None
    block = k * per_spoke
    duration = (3.5 * block if frame_ms is None else float(frame_ms)) * 1e-3
    step_ms = 1e3 * duration / block  # one readout
    out, delayed = [], {}
    for t, s in enumerate(phases):
        traj = readouts[t * block:(t + 1) * block].reshape(-1, len(matrix))
        sampled, delayed = delayed_positions(traj, trajectory, gradient_delay, {"samples": readouts.shape[1]})
        clean = frame_kspace(sampled, matrix, coils, s)
        data = clean if sigma == 0 else (clean + phantom.noise_samples(coils, clean.shape[1], sigma, rng))
        weights = None if dcf is None else (_dcf.ramp if dcf == "ramp" else _dcf.pipe_menon)(
            traj, matrix, **({"axes": (0, 1)} if trajectory == "stack-of-stars" else {}))
        out.append(Scan(kspace=data, trajectory=traj, matrix=matrix, weights=weights, noise=noise,
                        attrs={"frame": t, "samples": readouts.shape[1],
                               "readout_time_ms": step_ms * np.arange(t * block, (t + 1) * block)},
                        source="simulate_series"))
    attrs = {"trajectory_kind": trajectory, "snr": math.inf if snr is None else float(snr), "seed": int(seed),
             "noise_std": float(sigma), "coils": coils, "frames": frames, "spokes_per_frame": k,
             "samples": int(readouts.shape[1]), "cycles": float(cycles), "dcf": dcf or "none",
             "phantom": "shepp-logan, beating",
             **{k: v for k, v in delayed.items() if k == "gradient_delay_samples"}}
    return TimeSeries(frames=tuple(out), axis="readouts", labels=tuple(range(frames)), coil_maps=maps,
                      ground_truth=truth, frame_duration_s=duration, attrs=attrs, source="simulate_series")
