"""An encoding's ``.N`` is its own normal operator (:meth:`Encoding.normal` with unit weights, no maps), not the
generic ``A.H @ A``: ``enc.N(x) = enc.H(enc(x))`` to float32 rounding against the NumPy oracle (the float64
sums of ``NudftEncoding``), for every registered engine (the GPU ones on a GPU), the off-resonance encodings
and the planned operator."""

from __future__ import annotations

import numpy as np
import pytest

import mri_recon
from mri_recon.arrays.backend import cupy_module, to_host
from mri_recon.operators import NudftEncoding
from mri_recon.operators.base import Compose
from mri_recon.operators.engines import registry
from mri_recon.operators.offres import segmented as seg
from mri_recon.operators.offres import time_segments as ts
from mri_recon.operators.offres.model import EncodingNormal, OffresEncoding

MATRICES = [(12, 10), (6, 5, 4)]


def crandn(rng, *shape) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def relative(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def trajectory(rng, engine, matrix, m: int) -> np.ndarray:
    """``m`` samples in cycles per field of view: anywhere, or distinct integer frequencies for an engine that
    serves Cartesian scans only."""
    if "non-cartesian" in engine.samplings:
        return ((rng.random((m, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    grid = np.stack(np.meshgrid(*(np.arange(n) - n // 2 for n in matrix), indexing="ij"), -1).reshape(-1, len(matrix))
    return grid[rng.choice(len(grid), size=min(m, len(grid) // 2), replace=False)].astype(np.float32)


def oracle_normal(k, matrix, x) -> np.ndarray:
    oracle = NudftEncoding(k, matrix, x.shape[0])
    return oracle.H(oracle(x))


@pytest.mark.parametrize("matrix", MATRICES, ids=["2d", "3d"])
@pytest.mark.parametrize("engine", [pytest.param(e, id=e.key, marks=[pytest.mark.gpu] * (e.device_kind == "gpu"))
                                    for e in registry.engines()])
def test_an_engine_normal_is_its_own_toeplitz_operator(rng, engine, matrix):
    if len(matrix) not in engine.dims:
        pytest.skip(f"{engine.key} serves {engine.dims}-D images")
    xp = cupy_module() if engine.device_kind == "gpu" else np
    k = trajectory(rng, engine, matrix, 90)
    x = crandn(rng, 2, *matrix)
    enc = engine(xp.asarray(k), matrix, 2)
    normal = enc.N
    assert not isinstance(normal, Compose) and normal.hermitian
    got = to_host(normal(xp.asarray(x)))
    assert got.shape == x.shape
    assert relative(got, oracle_normal(k, matrix, x)) < 1e-5
    assert relative(got, to_host(enc.H(enc(xp.asarray(x))))) < 1e-5


def test_the_off_resonance_encodings_normals(rng):
    matrix = (10, 12)
    k = trajectory(rng, NudftEncoding, matrix, 150)
    field = rng.uniform(-60.0, 60.0, matrix).astype(np.float32)
    times = np.linspace(0.0, 8e-3, k.shape[0], dtype=np.float32)
    x = crandn(rng, 2, *matrix)
    exact = OffresEncoding(k, field, times, 2)
    assert isinstance(exact.N, EncodingNormal)
    assert relative(exact.N(x), exact.H(exact(x))) < 1e-5
    b, tau, _ = ts.interpolators(field, times, 4)
    phases = np.exp(-2j * np.pi * field[None].astype(np.float64) * tau.reshape(-1, 1, 1)).astype(np.complex64)
    segmented = seg.TimeSegmentedEncoding(NudftEncoding(k, matrix, 2), b.astype(np.complex64), phases)
    assert isinstance(segmented.N, seg.SegmentedNormal)
    assert relative(segmented.N(x), segmented.H(segmented(x))) < 1e-5


@pytest.mark.parametrize("coils", [1, 3])
def test_the_planned_operator_normal(rng, coils):
    matrix = (12, 10)
    k = trajectory(rng, NudftEncoding, matrix, 90)
    op = mri_recon.EncodingOperator(k, matrix, coils=coils, device="cpu", method="exact")
    normal = op.N
    assert normal.ishape == op.ishape and not isinstance(normal, Compose)
    x = crandn(rng, coils, *matrix)
    assert relative(normal(x), oracle_normal(k, matrix, x)) < 1e-5
    if coils == 1:
        assert relative(normal(x[0]), oracle_normal(k, matrix, x)[0]) < 1e-5
