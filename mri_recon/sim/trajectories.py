"""Non-Cartesian trajectories in cycles per field of view: radial, spiral, kooshball, stack of stars.

Every function returns float32 ``(M, D)`` in the units of schema v1: axis d of size N is Nyquist-sampled on
``[-N/2, N/2)``. Readouts are spaced ``1 / oversampling`` (in units of the Nyquist step of the largest axis)
and scaled per axis, so an anisotropic matrix gets an elliptical coverage. A trajectory never exceeds the
schema limit ``|k_d| <= N_d`` (2x Nyquist, enforced by :func:`mri_recon.scan.check_trajectory_units`).

Sample order is readout-major: spoke (or interleaf, or partition and spoke) first, sample within the
readout last.
"""

from __future__ import annotations

import numpy as np

from ..checks.validation import positive_int, validate_matrix
from ..errors import InvalidDataError

GOLDEN_ANGLE = np.pi * (np.sqrt(5.0) - 1.0) / 2.0
"""Golden-angle increment of full-diameter radial spokes: 180 deg / golden ratio = 111.246 deg."""


def _golden_means() -> tuple[float, float]:
    """The 2D golden means (Chan et al., MRM 2009): ``1/l^2`` and ``1/l`` with ``l^3 = l^2 + 1``."""
    roots = np.roots([1.0, -1.0, 0.0, -1.0])
    lam = float(np.real(roots[np.argmin(np.abs(np.imag(roots)))]))
    return 1.0 / lam**2, 1.0 / lam


GOLDEN_MEANS = _golden_means()
"""(0.4656, 0.6823): increments of cos(polar angle) and azimuth / 2 pi of golden-means kooshball spokes."""


def _positive_float(name: str, value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not (np.isfinite(number) and number > 0):
        raise InvalidDataError(f"{name} must be a positive number, found {value!r}")
    return number


def _matrix(matrix, ndim: int, kind: str) -> tuple[int, ...]:
    matrix = validate_matrix(matrix, kind)
    if len(matrix) != ndim:
        shape = "[Nx, Ny]" if ndim == 2 else "[Nx, Ny, Nz]"
        raise InvalidDataError(f"{kind} needs a {ndim}-D matrix {shape}, found {list(matrix)}")
    return matrix


def _readout(samples: int | None, oversampling, matrix: tuple[int, ...], kind: str) -> np.ndarray:
    """Positions ``(s - S/2) / oversampling`` along one readout, in Nyquist steps of the largest axis."""
    oversampling = _positive_float("oversampling", oversampling)
    largest = max(matrix)
    if samples is None:
        samples = int(np.ceil(oversampling * largest))
    samples = positive_int("samples", samples)
    positions = (np.arange(samples) - samples / 2) / oversampling
    reach = float(np.max(np.abs(positions)))
    if reach > largest:
        most = int(2 * largest * oversampling)
        raise InvalidDataError(
            f"{kind}: {samples} samples at oversampling {oversampling:g} reach |k| = {reach:g} beyond the "
            f"schema limit {largest} (2x Nyquist); use at most {most} samples")
    return positions


def _axis_scale(matrix: tuple[int, ...]) -> np.ndarray:
    return np.asarray(matrix, dtype=np.float64) / max(matrix)


def spoke_angles(spokes: int, *, golden: bool = False) -> np.ndarray:
    """In-plane spoke angles (rad): ``pi i / spokes`` (uniform) or ``i * GOLDEN_ANGLE mod 2 pi``."""
    spokes = positive_int("spokes", spokes)
    index = np.arange(spokes, dtype=np.float64)
    if golden:
        return np.mod(index * GOLDEN_ANGLE, 2 * np.pi)
    return np.pi * index / spokes


def radial(matrix, spokes: int, samples: int | None = None, *, golden: bool = False,
           oversampling: float = 2.0) -> np.ndarray:
    """2D radial trajectory of full-diameter spokes.

    Parameters
    ----------
    matrix : sequence of int
        ``(Nx, Ny)``.
    spokes : int
        Number of spokes; ``ceil(pi / 2 * N)`` meets Nyquist at the edge of k-space.
    samples : int, optional
        Samples per spoke, at ``(s - samples/2) / oversampling`` (k = 0 is sample ``samples // 2`` for an
        even count); default ``ceil(oversampling * max(matrix))``, which covers ``[-N/2, N/2)``.
    golden : bool
        Golden-angle increments (111.246 deg) instead of uniform angles over 180 deg.
    oversampling : float
        Readout samples per Nyquist step.

    Returns
    -------
    numpy.ndarray
        float32 ``(spokes * samples, 2)`` in cycles per FOV.
    """
    matrix = _matrix(matrix, 2, "radial")
    readout = _readout(samples, oversampling, matrix, "radial")
    theta = spoke_angles(spokes, golden=golden)
    directions = np.stack([np.cos(theta), np.sin(theta)], axis=1) * _axis_scale(matrix)
    k = readout[None, :, None] * directions[:, None, :]
    return k.reshape(-1, 2).astype(np.float32)


def spiral(matrix, interleaves: int, samples: int | None = None, *, density: float = 1.5,
           oversampling: float = 2.0) -> np.ndarray:
    """2D variable-density spiral, ``k(t) = kmax t^density exp(i (w t + 2 pi l / L))``, t in [0, 1].

    ``kmax = max(matrix) / 2`` (scaled per axis) and ``w = 2 pi density kmax / L``, so the ``L``
    interleaves are one cycle per FOV apart at the edge of k-space (Nyquist) and closer inside:
    ``density = 1`` gives evenly spaced (Archimedean) arms; larger values bring the arms closer together
    towards the centre, their spacing scaling as ``(|k| / kmax)^((density - 1) / density)``. Samples are
    uniform in t (constant angular velocity), so a fraction ``(R / kmax)^(1 / density)`` of them lies
    within radius R.

    Parameters
    ----------
    matrix : sequence of int
        ``(Nx, Ny)``.
    interleaves : int
        Number of interleaves L, rotated by ``2 pi / L``.
    samples : int, optional
        Samples per interleaf, uniform in t. The default spaces the fastest part of the readout (the edge)
        ``1 / oversampling`` apart.
    density : float
        Exponent in ``[1, 4]``.
    oversampling : float
        Readout samples per Nyquist step at the edge (used for the default ``samples``).

    Returns
    -------
    numpy.ndarray
        float32 ``(interleaves * samples, 2)`` in cycles per FOV, ``|k| <= max(matrix) / 2``.
    """
    matrix = _matrix(matrix, 2, "spiral")
    interleaves = positive_int("interleaves", interleaves)
    density = _positive_float("density", density)
    if not 1.0 <= density <= 4.0:
        raise InvalidDataError(f"spiral density must be in [1, 4] (1: uniform), found {density:g}")
    oversampling = _positive_float("oversampling", oversampling)
    kmax = max(matrix) / 2
    omega = 2 * np.pi * density * kmax / interleaves
    if samples is None:
        speed = kmax * np.hypot(density, omega)  # |dk/dt| at t = 1, the largest
        samples = int(np.ceil(oversampling * speed)) + 1
    samples = positive_int("samples", samples)
    if samples < 2:
        raise InvalidDataError(f"spiral needs at least 2 samples per interleaf, found {samples}")
    t = np.arange(samples) / (samples - 1)
    phase = omega * t[None, :] + 2 * np.pi * np.arange(interleaves)[:, None] / interleaves
    radius = kmax * t[None, :] ** density
    k = np.stack([radius * np.cos(phase), radius * np.sin(phase)], axis=-1) * _axis_scale(matrix)
    return k.reshape(-1, 2).astype(np.float32)


def kooshball_directions(spokes: int) -> np.ndarray:
    """Golden-means spoke directions (Chan et al., MRM 2009): unit vectors ``(spokes, 3)``, z >= 0.

    Spoke i has ``cos(polar) = (i * 0.4656) mod 1`` and ``azimuth = 2 pi ((i * 0.6823) mod 1)``; full
    diameter spokes through the upper hemisphere cover the sphere, nearly uniformly for any prefix.
    """
    spokes = positive_int("spokes", spokes)
    index = np.arange(spokes, dtype=np.float64)
    z = np.mod(index * GOLDEN_MEANS[0], 1.0)
    azimuth = 2 * np.pi * np.mod(index * GOLDEN_MEANS[1], 1.0)
    rho = np.sqrt(1 - z**2)
    return np.stack([rho * np.cos(azimuth), rho * np.sin(azimuth), z], axis=1)


def kooshball(matrix, spokes: int, samples: int | None = None, *, oversampling: float = 2.0) -> np.ndarray:
    """3D radial ("kooshball") trajectory: full-diameter spokes along golden-means directions.

    ``spokes = ceil(pi / 2 * N^2)`` meets Nyquist at the edge of k-space. ``samples`` and
    ``oversampling`` are as for :func:`radial`. Returns float32 ``(spokes * samples, 3)``.
    """
    matrix = _matrix(matrix, 3, "kooshball")
    readout = _readout(samples, oversampling, matrix, "kooshball")
    directions = kooshball_directions(spokes) * _axis_scale(matrix)
    k = readout[None, :, None] * directions[:, None, :]
    return k.reshape(-1, 3).astype(np.float32)


def stack_of_stars(matrix, spokes: int, samples: int | None = None, *, golden: bool = True,
                   oversampling: float = 2.0) -> np.ndarray:
    """Stack of stars: the :func:`radial` pattern of ``(Nx, Ny)`` on every Cartesian partition.

    The partitions are ``kz = j - Nz // 2`` for ``j = 0 .. Nz-1`` (cycles per FOV, spacing 1: Nyquist).
    Returns float32 ``(Nz * spokes * samples, 3)``, partition-major.
    """
    matrix = _matrix(matrix, 3, "stack-of-stars")
    plane = radial(matrix[:2], spokes, samples, golden=golden, oversampling=oversampling).astype(np.float64)
    kz = np.arange(matrix[2], dtype=np.float64) - matrix[2] // 2
    k = np.concatenate([np.broadcast_to(plane[None], (len(kz), *plane.shape)),
                        np.broadcast_to(kz[:, None, None], (len(kz), len(plane), 1))], axis=-1)
    return k.reshape(-1, 3).astype(np.float32)


def delayed_positions(k: np.ndarray, kind: str, gradient_delay, sizes: dict) -> tuple[np.ndarray, dict]:
    """The true sample positions of the nominal trajectory ``k`` under ``gradient_delay`` (None: ``k``)."""
    if gradient_delay is None:
        return k, sizes
    from ..prep import delay  # noqa: PLC0415 - loaded on use

    if kind == "spiral":
        raise InvalidDataError("gradient_delay is simulated for radial trajectories (radial, golden, kooshball, "
                               "stack-of-stars), found trajectory 'spiral'")
    readouts = delay.radial_readouts(k, sizes["samples"])
    values = np.asarray(gradient_delay, dtype=np.float64).ravel()
    if not np.all(np.isfinite(values)):
        raise InvalidDataError(f"gradient_delay must be finite numbers of samples, found {gradient_delay!r}")
    tensor = delay.tensor_of(values, readouts.plane)  # the axis delays, or all of the tensor's parameters
    true = delay.shift_trajectory(k, readouts, tensor)
    return true, {**sizes, "gradient_delay_samples": delay.parameters_of(tensor)}
