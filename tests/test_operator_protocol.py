"""The linear-operator protocol: adjointness of every concrete operator, .H, .N, composition, shape errors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import adjoint_gap

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import SchemaError
from mri_recon.operators import (
    FinufftEncoding,
    Identity,
    LinearOperator,
    Multiply,
    NudftEncoding,
    Scale,
    Sense,
    choose_engine,
)
from mri_recon.operators.base import Adjoint, Compose, Sum
from mri_recon.operators.engines import engines
from mri_recon.operators.normal.toeplitz import Toeplitz, ToeplitzNormal, kernel_spectrum, normal_operator


def crandn(rng, *shape) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def trajectory(rng, matrix, m) -> np.ndarray:
    return ((rng.random((m, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)


def assert_adjoint(op: LinearOperator, rng, xp=np, tol: float = 1e-5) -> None:
    """<A x, y> = <x, A^H y> on fresh random inputs, shapes checked before the dot products; the gap measured
    against the Cauchy-Schwarz bound (:func:`helpers.adjoint_gap`), which cancellation in ``<A x, y>`` cannot
    shrink."""
    x = xp.asarray(crandn(rng, *op.ishape))
    y = xp.asarray(crandn(rng, *op.oshape))
    ax, ahy = op(x), op.H(y)
    assert tuple(ax.shape) == op.oshape and tuple(ahy.shape) == op.ishape
    host = cupy_module().asnumpy if xp is not np else np.asarray
    assert adjoint_gap(host(x), host(ahy), host(y), host(ax)) <= tol


def _spectrum(rng, matrix):
    k = trajectory(rng, matrix, 90)
    w = rng.uniform(0.5, 1.5, k.shape[0]).astype(np.float32)
    return kernel_spectrum(NudftEncoding(k, matrix).psf(w)), k, w


MATRICES = [(12, 10), (6, 5, 4)]


def _engine_params() -> list:
    """Every registered engine (:func:`mri_recon.operators.engines.engines`), named by its key; the GPU ones
    under the ``gpu`` marker."""
    return [pytest.param(e, id=e.key, marks=[pytest.mark.gpu] if e.device_kind == "gpu" else [])
            for e in engines()]


def engine_trajectory(rng, engine, matrix, m) -> np.ndarray:
    """``m`` random samples of a sampling the engine serves (integer frequencies for Cartesian-only engines)."""
    if "non-cartesian" in engine.samplings:
        return trajectory(rng, matrix, m)
    return np.stack([rng.integers(-(n // 2), n - n // 2, m) for n in matrix], axis=1).astype(np.float32)


@pytest.mark.parametrize("matrix", MATRICES, ids=["2d", "3d"])
@pytest.mark.parametrize("engine", _engine_params())
def test_every_registered_engine_is_adjoint_and_its_normal_operator_is_a_h_w_a(rng, engine, matrix):
    if len(matrix) not in engine.dims:
        pytest.skip(f"{engine.key} serves {engine.dims}-D images")
    xp = cupy_module() if engine.device_kind == "gpu" else np
    k = engine_trajectory(rng, engine, matrix, 77)
    op = engine(xp.asarray(k), matrix, 3)
    assert op.ishape == (3, *matrix) and op.oshape == (3, 77)
    assert_adjoint(op, rng, xp)
    maps = xp.asarray(crandn(rng, 3, *matrix))
    sense = op @ Sense(maps)
    assert_adjoint(sense, rng, xp)
    w = xp.asarray(rng.uniform(0.5, 1.5, 77).astype(np.float32))
    normal = op.normal(w, maps, 0.2)
    assert_adjoint(normal, rng, xp, tol=1e-4)
    x = xp.asarray(crandn(rng, *matrix))
    direct = sense.H(sense(x) * w) + 0.2 * x
    host = cupy_module().asnumpy if xp is not np else np.asarray
    assert np.linalg.norm(host(normal(x) - direct)) <= 1e-4 * np.linalg.norm(host(direct))


def test_generic_operators_adjointness(rng):
    maps = crandn(rng, 4, 6, 5)
    assert_adjoint(Sense(maps), rng)
    assert_adjoint(Multiply((6, 5), rng.random((6, 5)).astype(np.float32)), rng)
    assert_adjoint(Scale((7,), 2.5 - 1j), rng)
    assert_adjoint(Identity((3, 2)), rng)
    op = NudftEncoding(trajectory(rng, (6, 5), 40), (6, 5), 4) @ Sense(maps)
    assert isinstance(op, Compose) and op.ishape == (6, 5) and op.oshape == (4, 40)
    assert_adjoint(op, rng)
    assert_adjoint(op.N + Scale(op.ishape, 0.3), rng)


@pytest.mark.parametrize("matrix", [(8, 6), (7, 5), (4, 5, 3)], ids=["2d", "2d-odd", "3d"])
def test_toeplitz_operators_adjointness_and_normal(rng, matrix):
    spectrum, k, w = _spectrum(rng, matrix)
    assert_adjoint(Toeplitz(spectrum, (2, *matrix)), rng)
    maps = crandn(rng, 3, *matrix)
    sense = normal_operator(spectrum, coil_maps=maps, lam=0.2)
    assert isinstance(sense, ToeplitzNormal) and sense.H is sense
    assert_adjoint(sense, rng)
    # Toeplitz embedding equals the composed normal operator A^H W A + lam I
    a = NudftEncoding(k, matrix, 3) @ Sense(maps)
    x = crandn(rng, *matrix)
    direct = a.H(a(x) * w) + 0.2 * x
    assert np.linalg.norm(sense(x) - direct) <= 1e-4 * np.linalg.norm(direct)


def test_protocol_pieces(rng):
    op = NudftEncoding(trajectory(rng, (6, 5), 30), (6, 5), 2)
    assert isinstance(op.H, Adjoint) and op.H.H is op and op.H.ishape == op.oshape
    n = op.N  # the engine's own normal operator: Toeplitz on the 2x grid, complex64 FFTs
    x = crandn(rng, 2, 6, 5)
    direct = op.H(op(x))
    assert np.linalg.norm(n(x) - direct) / np.linalg.norm(direct) < 1e-5
    assert isinstance(op.H @ op + Identity(op.ishape), Sum)
    np.testing.assert_array_equal(op @ x, op(x))  # an operator applied to an array, as SciPy's A @ x
    np.testing.assert_array_equal(op.H @ (op @ x), op.H(op(x)))
    np.testing.assert_allclose((2 * op)(x), 2 * op(x), rtol=1e-6)
    out = np.empty(op.oshape, dtype=np.complex64)
    op.apply_into(x, out)
    np.testing.assert_array_equal(out, op(x))
    assert not op.writes_into and "NudftEncoding" in repr(op)
    assert op.batched(2) is op and op.batched(5).ishape == (5, 6, 5)


def test_shape_errors(rng):
    op = NudftEncoding(trajectory(rng, (6, 5), 30), (6, 5), 2)
    with pytest.raises(SchemaError, match=r"NudftEncoding input must have shape \(2, 6, 5\), found \(6, 5\)"):
        op(crandn(rng, 6, 5))
    with pytest.raises(SchemaError, match=r"cannot compose .* \(2, 6, 5\) != \(3, 6, 5\)"):
        op @ Identity((3, 6, 5))
    with pytest.raises(SchemaError, match=r"NudftEncoding input must have shape \(2, 6, 5\), found \(6, 5\)"):
        op @ crandn(rng, 6, 5)
    with pytest.raises(TypeError):
        op @ "x"
    with pytest.raises(SchemaError, match="cannot add"):
        op + Identity((2, 6, 5))
    with pytest.raises(NotImplementedError, match="does not implement its forward map"):
        LinearOperator((2,), (2,))(np.zeros(2))
    with pytest.raises(NotImplementedError, match="does not implement its adjoint"):
        LinearOperator((2,), (3,)).H(np.zeros(3))


def test_choose_engine_names():
    dev, engine = choose_engine("cpu", "exact")
    assert not dev.is_gpu and engine is NudftEncoding and engine.name == "exact"
    assert choose_engine("cpu")[1] is FinufftEncoding and choose_engine("auto", "nufft")[1].name == "nufft"


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(12, 10), (7, 6, 5)], ids=["2d", "3d"])
def test_gpu_operators_adjointness(rng, matrix):
    from mri_recon.operators import GpuExactEncoding
    from mri_recon.operators.normal.gpu_toeplitz import FusedSenseNormal

    cupy = cupy_module()
    k = trajectory(rng, matrix, 77)
    op = GpuExactEncoding(cupy.asarray(k), matrix, 3)
    assert_adjoint(op, rng, cupy)
    assert_adjoint(op @ Sense(cupy.asarray(crandn(rng, 3, *matrix))), rng, cupy)
    spectrum, _, _ = _spectrum(rng, matrix)
    assert_adjoint(Toeplitz(cupy.asarray(spectrum), (2, *matrix)), rng, cupy)
    maps = crandn(rng, 3, *matrix)
    fused = normal_operator(cupy.asarray(spectrum), coil_maps=cupy.asarray(maps), lam=0.2, coil_batch=2)
    assert isinstance(fused, FusedSenseNormal) and fused.writes_into
    assert_adjoint(fused, rng, cupy)
    x = crandn(rng, *matrix)
    out = cupy.full(matrix, cupy.nan, dtype=cupy.complex64)
    fused.apply_into(cupy.asarray(x), out)
    ref = normal_operator(spectrum, coil_maps=maps, lam=0.2)(x)
    assert np.linalg.norm(cupy.asnumpy(out) - ref) <= 1e-5 * np.linalg.norm(ref)


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(32, 30), (17, 16, 15)], ids=["2d", "3d-odd"])
def test_gpu_nufft_engine_adjointness_and_accuracy(rng, matrix):
    from mri_recon.operators import GpuExactEncoding
    from mri_recon.operators.engines import GpuNufftEncoding

    cupy = cupy_module()
    k = cupy.asarray(trajectory(rng, matrix, 2000))
    op = GpuNufftEncoding(k, matrix, 3)
    assert_adjoint(op, rng, cupy)
    exact = GpuExactEncoding(k, matrix, 3)
    y = cupy.asarray(crandn(rng, 3, 2000))
    ref = cupy.asnumpy(exact.H(y))
    assert np.linalg.norm(cupy.asnumpy(op.H(y)) - ref) <= 1e-5 * np.linalg.norm(ref)
    assert op.batched(1).plan is op.plan  # one sort per trajectory
    w = cupy.asarray(rng.uniform(0.5, 1.5, 2000).astype(np.float32))
    ref = cupy.asnumpy(exact.psf(w))
    assert np.linalg.norm(cupy.asnumpy(op.psf(w)) - ref) <= 1e-5 * np.linalg.norm(ref)


def _offres_operators(rng, matrix, xp=np):
    """The off-resonance encodings (exact and time-segmented) and their normal operators on ``xp`` arrays."""
    from mri_recon.operators import OffresEncoding
    from mri_recon.operators.offres.model import EncodingNormal
    from mri_recon.operators.offres.segmented import (
        SegmentedNormal,
        TimeSegmentedEncoding,
        segment_spectra,
        segmented_normal,
    )
    from mri_recon.operators.offres.time_segments import interpolators

    k = trajectory(rng, matrix, 80)
    f = (80 * rng.standard_normal(matrix)).astype(np.float32)
    t = np.sort(rng.random(80) * 8e-3).astype(np.float32)
    b, tau, _ = interpolators(f, t, 3)
    phases = np.exp(-2j * np.pi * f[None].astype(np.float64) * tau.reshape(-1, *([1] * len(matrix))))
    engine = FinufftEncoding if xp is np else choose_engine("gpu", "nufft")[1]
    exact = OffresEncoding(*(xp.asarray(a) for a in (k, f, t)), batch=2)
    segmented = TimeSegmentedEncoding(engine(xp.asarray(k), matrix, 2), xp.asarray(b.astype(np.complex64)),
                                      xp.asarray(phases.astype(np.complex64)))
    w = xp.asarray(rng.uniform(0.5, 1.5, 80).astype(np.float32))
    maps = xp.asarray(crandn(rng, 2, *matrix))
    spectra = segment_spectra(segmented, w)
    normals = [EncodingNormal(exact, w, coil_maps=maps, lam=0.1),
               SegmentedNormal(spectra, segmented.phases, coil_maps=maps, lam=0.1),
               segmented_normal(spectra, segmented.phases, coil_maps=maps, lam=0.1, coil_batch=1),  # fused on a GPU
               exact.normal(w, maps, 0.1), segmented.normal(w, maps, 0.1, coil_batch=1)]  # through the protocol
    return exact, segmented, normals


@pytest.mark.parametrize("matrix", MATRICES, ids=["2d", "3d"])
def test_offres_operators_adjointness(rng, matrix):
    exact, segmented, normals = _offres_operators(rng, matrix)
    assert exact.ishape == segmented.ishape == (2, *matrix) and exact.oshape == segmented.oshape == (2, 80)
    for op in (exact, segmented, *normals):
        assert_adjoint(op, rng)


@pytest.mark.gpu
@pytest.mark.parametrize("matrix", [(12, 10), (7, 6, 5)], ids=["2d", "3d"])
def test_gpu_offres_operators_adjointness(rng, matrix):
    exact, segmented, normals = _offres_operators(rng, matrix, cupy_module())
    # the device forms every phase 2 pi (k.x + f t) in float32, up to about 50 rad here (an ulp of 3.8e-6), and
    # the forward and adjoint kernels round them apart: 1e-5 failed at 1.4e-5 on one seed of the H200's
    for op in (exact, segmented, *normals):
        assert_adjoint(op, rng, cupy_module(), tol=5e-5)
