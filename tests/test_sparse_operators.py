"""Operators and proximal maps of compressed sensing: wavelets against PyWavelets, finite differences and
their adjoint, the TV gradient by finite differences, the proximal maps by their optimality conditions;
on a GPU each kernel against its NumPy twin."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import relative

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import InvalidDataError
from mri_recon.operators import finite_difference as fd
from mri_recon.operators.wavelet import Wavelet, analysis_filters, daubechies, wavelet_levels
from mri_recon.solvers.proximal import group_threshold, shrink_update, soft_threshold


def crandn(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


# -- wavelets ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("order", range(1, 11))
def test_daubechies_filters_are_pywavelets(order):
    pywt = pytest.importorskip("pywt")
    assert relative(daubechies(order), np.array(pywt.Wavelet(f"db{order}").rec_lo)) < 1e-12
    lo, hi = analysis_filters(order)
    assert relative(lo, pywt.Wavelet(f"db{order}").dec_lo) < 1e-12
    assert relative(hi, pywt.Wavelet(f"db{order}").dec_hi) < 1e-12


@pytest.mark.parametrize("shape", [(64, 64), (32, 48), (16, 32, 64), (24, 40)], ids=str)
@pytest.mark.parametrize("order", [2, 4])
def test_wavelet_coefficients_are_pywavelets(rng, shape, order):
    pywt = pytest.importorskip("pywt")
    x = crandn(rng, shape)
    psi = Wavelet(shape, len(shape), order=order)
    with warnings.catch_warnings():  # coarse levels see the periodic boundary everywhere: intended here
        warnings.simplefilter("ignore", UserWarning)
        coeffs = pywt.wavedecn(x, f"db{order}", mode="periodization", level=psi.levels)
    reference, _ = pywt.coeffs_to_array(coeffs)
    assert relative(psi(x), reference) < 1e-12


@pytest.mark.parametrize("shape", [(64, 64), (2, 32, 48), (16, 16, 32)], ids=str)
def test_wavelet_is_orthogonal_and_reconstructs(rng, shape):
    ndim = 2 if len(shape) == 2 or shape[0] == 2 else 3
    psi = Wavelet(shape, ndim)
    x = crandn(rng, shape, np.complex64)
    c = psi(x)
    assert relative(psi.H(c), x) < 1e-6  # perfect reconstruction in float32
    assert abs(np.linalg.norm(c) / np.linalg.norm(x) - 1) < 1e-6
    x64, y = x.astype(np.complex128), crandn(rng, shape)  # <Psi y, Psi x> = <y, x> in float64
    assert abs(np.vdot(psi(y), psi(x64)) - np.vdot(y, x64)) <= 1e-12 * np.linalg.norm(x64) * np.linalg.norm(y)


def test_wavelet_batch_axis_is_per_image(rng):
    x = crandn(rng, (3, 32, 32))
    batched = Wavelet(x.shape, 2)(x)
    single = Wavelet((32, 32), 2)
    for c in range(3):
        assert relative(batched[c], single(x[c])) < 1e-14


def test_wavelet_levels_from_the_matrix():
    assert wavelet_levels((256, 256), 4) == 6  # 256 .. 8: six halvings keep the box >= 8
    assert wavelet_levels((128, 96), 4) == 4  # 96 -> 48 -> 24 -> 12 -> 6: stops at 12 (6 < 8)
    assert wavelet_levels((64, 63), 4) == 0
    assert Wavelet((64, 64), 2, levels=2).levels == 2


def test_wavelet_refuses_what_it_cannot_transform():
    with pytest.raises(InvalidDataError, match="needs even image sizes"):
        Wavelet((63, 64), 2)
    with pytest.raises(InvalidDataError, match="levels must be 1..4"):
        Wavelet((64, 64), 2, levels=5)
    with pytest.raises(InvalidDataError, match="order must be 1..10"):
        daubechies(11)


# -- finite differences --------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,ndim", [((17, 12), 2), ((3, 9, 8), 2), ((6, 7, 5), 3)], ids=str)
def test_finite_difference_adjoint_and_laplacian(rng, shape, ndim):
    d = fd.FiniteDifference(shape, ndim)
    x, q = crandn(rng, shape), crandn(rng, d.oshape)
    dx = d(x)
    for a in range(ndim):  # forward differences with a zero last plane (Neumann)
        axis = len(shape) - ndim + a
        expected = np.zeros_like(x)
        inner = [slice(None)] * len(shape)
        inner[axis] = slice(0, shape[axis] - 1)
        expected[tuple(inner)] = np.diff(x, axis=axis)
        assert relative(dx[a], expected) < 1e-14
    assert abs(np.vdot(dx, q) - np.vdot(x, d.H(q))) <= 1e-12 * np.linalg.norm(dx) * np.linalg.norm(q)
    out = crandn(rng, shape)
    start = out.copy()
    fd.laplacian_add(x, out, 0.7, ndim)
    assert relative(out - start, 0.7 * d.H(d(x))) < 1e-13
    assert relative(fd.adjoint_rhs(start, q, 0.3, ndim), start + 0.3 * d.H(q)) < 1e-14


def _tv(x, ndim, anisotropic=False):
    g = fd.gradient(x, ndim)
    return float(np.abs(g).sum()) if anisotropic else float(np.sqrt((np.abs(g) ** 2).sum(axis=0)).sum())


@pytest.mark.parametrize("anisotropic", [False, True])
def test_tv_gradient_matches_finite_differences(rng, anisotropic):
    """d TV / d x = D^H (D x / |D x|) where no difference vanishes, checked by central differences of TV
    along random complex directions."""
    shape, ndim = (9, 11), 2
    x = crandn(rng, shape)
    g = fd.gradient(x, ndim)
    if anisotropic:
        unit = np.where(np.abs(g) > 0, g / np.maximum(np.abs(g), 1e-300), 0)
    else:
        norm = np.sqrt((np.abs(g) ** 2).sum(axis=0))
        unit = np.where(norm > 0, g / np.maximum(norm, 1e-300), 0)
    gradient = fd.divergence_adjoint(unit, ndim)  # Wirtinger: dTV = Re <gradient, dx>
    for _ in range(5):
        direction = crandn(rng, shape)
        h = 1e-6
        numeric = (_tv(x + h * direction, ndim, anisotropic) - _tv(x - h * direction, ndim, anisotropic)) / (2 * h)
        assert abs(numeric - np.vdot(gradient, direction).real) <= 1e-6 * max(1.0, abs(numeric))


# -- proximal maps -------------------------------------------------------------------------------------------

def test_soft_threshold_satisfies_its_optimality_condition(rng):
    """z = prox(v): v - z = t z / |z| where z != 0 and |v| <= t where z = 0; and no perturbation does better."""
    v = crandn(rng, 4000) * rng.choice([0.1, 1.0, 3.0], 4000)
    t = 0.8
    z = soft_threshold(v, t)
    on = np.abs(z) > 0
    assert np.allclose((v - z)[on], t * z[on] / np.abs(z[on]), atol=1e-12)
    assert (np.abs(v[~on]) <= t).all() and on.any() and (~on).any()

    def cost(w):
        return t * np.abs(w).sum() + 0.5 * np.linalg.norm(w - v) ** 2

    for _ in range(20):
        assert cost(z) <= cost(z + 1e-3 * crandn(rng, z.shape))


def test_group_threshold_satisfies_its_optimality_condition(rng):
    v = crandn(rng, (3, 500)) * rng.choice([0.1, 1.0, 3.0], 500)
    t = 1.1
    z = group_threshold(v, t)
    zn, vn = np.linalg.norm(z, axis=0), np.linalg.norm(v, axis=0)
    on = zn > 0
    assert np.allclose((v - z)[:, on], t * z[:, on] / zn[on], atol=1e-12)
    assert (vn[~on] <= t).all() and on.any() and (~on).any()


@pytest.mark.parametrize("threshold", [soft_threshold, group_threshold])
def test_a_threshold_far_above_every_value_gives_zeros_quietly(threshold):
    """A weight that dwarfs the data (``--lambda 1e6``) thresholds everything to 0, without the overflow of
    ``t / |v|`` in the entries it discards reaching the user as a RuntimeWarning; 0 leaves ``v`` as it is."""
    v = np.array([[1e-30, 2.0, 0.0], [3e-20, -1.0, 0.0]], dtype=np.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not np.any(threshold(v, 3e38))
        assert np.array_equal(threshold(v, 0.0), v)


@pytest.mark.parametrize("groups", [0, 2])
def test_shrink_update_is_prox_then_dual_step(rng, groups):
    kx, u = crandn(rng, (2, 40, 30)), crandn(rng, (2, 40, 30))
    z = np.empty_like(kx)
    v = kx + u
    shrink_update(kx, u, z, 0.9, groups=groups)
    expected = group_threshold(v, 0.9) if groups else soft_threshold(v, 0.9)
    assert relative(z, expected) < 1e-14 and relative(u, v - expected) < 1e-14


# -- GPU kernels against the NumPy twins ---------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape,ndim", [((64, 64), 2), ((3, 32, 48), 2), ((16, 32, 24), 3), ((2, 16, 16, 16), 3)],
                         ids=str)
def test_gpu_wavelet_matches_numpy(rng, shape, ndim):
    cp = cupy_module()
    psi = Wavelet(shape, ndim)
    x = crandn(rng, shape, np.complex64)
    assert relative(psi(cp.asarray(x)).get(), psi(x.astype(np.complex128))) < 1e-6
    assert relative(psi.H(cp.asarray(x)).get(), psi.H(x.astype(np.complex128))) < 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("shape,ndim", [((17, 12), 2), ((3, 33, 8), 2), ((6, 7, 5), 3), ((2, 9, 4, 3), 3)], ids=str)
def test_gpu_finite_differences_match_numpy(rng, shape, ndim):
    cp = cupy_module()
    x = crandn(rng, shape, np.complex64)
    q = crandn(rng, (ndim, *shape), np.complex64)
    out = crandn(rng, shape, np.complex64)
    x64, q64, out64 = (a.astype(np.complex128) for a in (x, q, out))
    assert relative(fd.gradient(cp.asarray(x), ndim).get(), fd.gradient(x64, ndim)) < 1e-6
    assert relative(fd.adjoint_rhs(cp.asarray(out), cp.asarray(q), 0.6, ndim).get(),
                    fd.adjoint_rhs(out64, q64, 0.6, ndim)) < 1e-6
    device_out = cp.asarray(out)
    fd.laplacian_add(cp.asarray(x), device_out, 1.3, ndim)
    fd.laplacian_add(x64, out64, 1.3, ndim)
    assert relative(device_out.get(), out64) < 1e-6
    assert relative(fd.FiniteDifference(shape, ndim).H(cp.asarray(q)).get(), fd.divergence_adjoint(q64, ndim)) < 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("groups", [0, 2, 3])
def test_gpu_shrink_update_matches_numpy(rng, groups):
    cp = cupy_module()
    shape = (max(groups, 1), 1000 + 7)
    kx = crandn(rng, shape, np.complex64)
    u = crandn(rng, shape, np.complex64) * np.float32(0.5)
    z_ref, u_ref = np.empty_like(kx, dtype=np.complex128), u.astype(np.complex128)
    shrink_update(kx.astype(np.complex128), u_ref, z_ref, 0.7, groups=groups)
    kx_d, u_d = cp.asarray(kx), cp.asarray(u)
    z_d = cp.empty_like(kx_d)
    shrink_update(kx_d, u_d, z_d, 0.7, groups=groups)
    assert relative(z_d.get(), z_ref) < 1e-6 and relative(u_d.get(), u_ref) < 1e-6


def test_compressed_sensing_launchers_build_registered_kernels():
    import ast
    from pathlib import Path

    from mri_recon.kernels import registry

    package = Path(__file__).resolve().parents[1] / "mri_recon"
    registered = {f for f, _ in registry.configurations()}
    for module in ("operators/wavelet.py", "operators/finite_difference.py", "solvers/proximal.py",
                   "solvers/gpu_cg.py"):
        tree = ast.parse((package / module).read_text())
        names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and n.value.endswith(".cu")}
        assert names and names <= registered, module
    assert {("tv.cu", ()), ("prox.cu", ()), ("wavelet.cu", ())} <= {(f, tuple(d)) for f, d in registry.configurations()}
