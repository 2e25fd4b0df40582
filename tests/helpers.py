"""Helpers shared by the tests: random problems and the relative error against a float64 reference."""

from __future__ import annotations

import numpy as np


def relative(out, ref) -> float:
    """``||out - ref|| / ||ref||`` in float64, after checking that the shapes agree."""
    out = np.asarray(out, dtype=np.complex128)
    ref = np.asarray(ref, dtype=np.complex128)
    assert out.shape == ref.shape
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def random_problem(rng, matrix, coils, samples, reach=0.5):
    """Trajectory uniform in reach * [-N, N) per axis (0.5: Nyquist), complex64 data of ``coils`` coils."""
    traj = ((rng.random((samples, len(matrix))) - 0.5) * 2 * reach * np.asarray(matrix)).astype(np.float32)
    data = (rng.standard_normal((coils, samples)) + 1j * rng.standard_normal((coils, samples))).astype(np.complex64)
    return traj, data
