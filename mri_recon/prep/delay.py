"""Gradient delays of radial scans: the delay model, the readout geometry it acts on, and the correction.

Model (Moussavi et al., MRM 2014; Rosenzweig et al., MRM 2019): a readout whose nominal samples lie on the
straight line ``k_nom(s) = (s - c) dk`` (``dk`` the step per sample, cycles per FOV) is really sampled at
``k(s) = k_nom(s) + S dk``, with ``S`` a symmetric tensor in *samples* (the same for every readout of the
scan). Each gradient axis delayed by its own time gives a diagonal ``S``; the off-diagonal terms describe a
logical frame rotated against the physical gradient axes. The sign is BART's: ``S > 0`` moves the samples
forward along the readout, so the echo (k = 0) comes ``S`` samples *earlier* than nominal; a gradient that
lags by ``tau`` sample periods gives ``S = -tau``.

Parameters are listed as ``(Sxx, Syy, Sxy)`` in 2D (stack of stars: its in-plane axes) and
``(Sxx, Syy, Szz, Sxy, Sxz, Syz)`` in 3D, x and y being trajectory columns 0 and 1. BART's ``estdelay`` /
``traj -q`` print and take ``y:x:yx`` of *its* trajectory axes; for a BART trajectory ``(3, samples, spokes)``
whose dims 0 and 1 are our columns 0 and 1 that is ``(Syy, Sxx, Sxy)`` (:func:`from_bart`).

The correction moves every sample by ``S dk`` (all of the shift: BART's ``traj -q ... -O``); BART's plain
``traj -q`` keeps only its component along the readout, ``(dk . S dk / |dk|^2) dk``, which
:func:`shift_trajectory` gives with ``transverse=False``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidDataError

_LINEAR_TOL = 1e-3
"""A readout is straight and evenly spaced when no sample is farther than this many steps from its line."""
_CENTRE_TOL = 0.05
"""... and it passes through the centre when the line misses it by less than this many steps."""


@dataclass(frozen=True)
class Readouts:
    """The straight readouts of a radial trajectory ``(R * samples, D)``, readout-major."""

    kind: str
    """``"radial"`` (2D), ``"stack-of-stars"`` (2D radial on Cartesian kz partitions) or ``"kooshball"`` (3D)."""
    samples: int
    steps: np.ndarray
    """``(R, D)`` float64: the step per sample of each readout (cycles per FOV)."""
    centre: np.ndarray
    """``(R,)`` float64: the (fractional) sample index where the nominal readout crosses k = 0 (stack of
    stars: its partition's in-plane centre)."""
    partition: np.ndarray | None
    """``(R,)`` kz of each readout (stack of stars), else None."""

    @property
    def count(self) -> int:
        return len(self.steps)

    @property
    def plane(self) -> int:
        """Dimensions the delay acts in: 2 (radial, stack of stars) or 3 (kooshball)."""
        return 3 if self.kind == "kooshball" else 2


def from_bart(values) -> tuple[float, float, float]:
    """Our ``(Sxx, Syy, Sxy)`` from BART's ``y:x:yx`` (``estdelay``'s output, ``traj -q``'s argument)."""
    y, x, yx = (float(v) for v in values)
    return x, y, yx


def tensor_of(values, plane: int) -> np.ndarray:
    """The ``(plane, plane)`` tensor of parameters ``(Sxx, Syy, Sxy)`` (plane 2) or ``(Sxx, Syy, Szz, Sxy,
    Sxz, Syz)`` (plane 3); the axis delays alone (``(X, Y)`` or ``(X, Y, Z)``) give a diagonal tensor."""
    values = [float(v) for v in values]
    if len(values) == plane:
        return np.diag(values)
    pairs = [(0, 1)] if plane == 2 else [(0, 1), (0, 2), (1, 2)]
    if len(values) != plane + len(pairs):
        raise InvalidDataError(f"a {plane}-D gradient delay takes {plane} or {plane + len(pairs)} values, "
                               f"found {len(values)}")
    tensor = np.diag(values[:plane])
    for (p, q), v in zip(pairs, values[plane:]):
        tensor[p, q] = tensor[q, p] = v
    return tensor


def parameters_of(tensor: np.ndarray) -> list[float]:
    """The inverse of :func:`tensor_of`: the diagonal, then ``xy`` (and ``xz``, ``yz``)."""
    plane = len(tensor)
    pairs = [(0, 1)] if plane == 2 else [(0, 1), (0, 2), (1, 2)]
    return [float(tensor[d, d]) for d in range(plane)] + [float(tensor[p, q]) for p, q in pairs]


def readout_length(scan) -> int:
    """Samples per readout: the scan's ``samples_per_readout`` (MRD) or ``samples`` attribute, else the
    first change of the trajectory's step (straight readouts)."""
    for name in ("samples_per_readout", "samples"):
        value = scan.attrs.get(name)
        if value is not None and int(value) > 0 and scan.n_samples % int(value) == 0:
            return int(value)
    k = np.asarray(scan.trajectory, dtype=np.float64)
    step = np.diff(k, axis=0)
    if len(step) < 2:
        return len(k)
    jump = np.linalg.norm(step - step[0], axis=1) > _LINEAR_TOL * max(np.linalg.norm(step[0]), 1e-12)
    first = int(np.argmax(jump)) + 1 if jump.any() else len(k)
    return first if len(k) % first == 0 else len(k)


def radial_readouts(trajectory, samples: int) -> Readouts:
    """The readouts of ``trajectory`` split into lines of ``samples``, or :class:`InvalidDataError` saying
    why it is not radial (not straight, not evenly spaced, not through the centre)."""
    k = np.asarray(trajectory, dtype=np.float64)
    if len(k) % samples or samples < 8:
        raise InvalidDataError(f"{len(k)} samples do not form readouts of {samples} (at least 8) samples")
    lines = k.reshape(-1, samples, k.shape[1])
    steps = (lines[:, -1] - lines[:, 0]) / (samples - 1)
    size = np.linalg.norm(steps, axis=1)
    if not np.all(size > 0):
        raise InvalidDataError("a readout does not move through k-space")
    ramp = np.arange(samples, dtype=np.float64)[None, :, None]
    off = np.linalg.norm(lines - (lines[:, :1] + ramp * steps[:, None]), axis=2).max(axis=1)
    if np.any(off > _LINEAR_TOL * size + 1e-5):
        raise InvalidDataError("the readouts are not straight, evenly spaced lines")
    partition = None
    kind = "radial" if k.shape[1] == 2 else "kooshball"
    start = lines[:, 0].copy()
    if k.shape[1] == 3 and np.all(np.abs(steps[:, 2]) <= 1e-6 * size):
        kind, partition = "stack-of-stars", start[:, 2].copy()
        start[:, 2] = 0.0
    centre = -np.einsum("rd,rd->r", start, steps) / size**2
    miss = np.linalg.norm(start + centre[:, None] * steps, axis=1)
    if np.any(miss > _CENTRE_TOL * size):
        where = "its partition's centre" if partition is not None else "the k-space centre"
        raise InvalidDataError(f"the readouts are straight but do not pass through {where} (not centre-out or "
                               f"full-diameter spokes)")
    return Readouts(kind, samples, steps, centre, partition)


def shift_trajectory(trajectory, readouts: Readouts, tensor: np.ndarray, *, transverse: bool = True) -> np.ndarray:
    """``trajectory`` moved by the delay ``tensor`` (samples): every sample of readout r by ``S dk_r``
    (``transverse=False``: only its component along the readout, as BART's ``traj -q`` without ``-O``).
    Returns float32 of the trajectory's shape. ``-S`` undoes ``S``."""
    k = np.asarray(trajectory, dtype=np.float64)
    tensor = np.asarray(tensor, dtype=np.float64)
    full = np.zeros((k.shape[1], k.shape[1]))
    full[: len(tensor), : len(tensor)] = tensor
    move = readouts.steps @ full.T  # (R, D): S dk_r
    if not transverse:
        along = np.einsum("rd,rd->r", move, readouts.steps) / np.einsum("rd,rd->r", readouts.steps, readouts.steps)
        move = along[:, None] * readouts.steps
    lines = k.reshape(readouts.count, readouts.samples, k.shape[1]) + move[:, None, :]
    return lines.reshape(k.shape).astype(np.float32)


def given_tensor(values: tuple[float, ...], readouts: Readouts) -> np.ndarray:
    """The tensor of user delays ``X,Y[,Z]`` for this trajectory (a Z only for a kooshball, which needs it)."""
    if len(values) != readouts.plane:
        need = "X,Y,Z" if readouts.plane == 3 else "X,Y"
        why = " (its partitions are phase-encoded: no Z delay)" if readouts.kind == "stack-of-stars" else ""
        raise InvalidDataError(f"a {readouts.kind} scan takes a gradient delay {need}{why}, found "
                               f"{len(values)} values")
    return tensor_of(values, readouts.plane)
