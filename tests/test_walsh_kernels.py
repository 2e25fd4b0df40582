"""Walsh's maps by the kernels of maps.cu: built for the host (tests/host/maps_host.cpp, no GPU needed) behind
walsh_gpu's own launches, against NumPy's box sums, LAPACK's eigenvectors in float64 and the array code of
``walsh``; and on a GPU, against the array code on the host."""

from __future__ import annotations

import contextlib
import ctypes

import host_kernels as host
import numpy as np
import pytest
from helpers import smallest_traced_peak

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import KernelError
from mri_recon.kernels.configs import MAPS_TIERS, maps_defines
from mri_recon.prep import walsh_gpu
from mri_recon.prep.walsh import walsh
from mri_recon.stages.state import default_kernels, maps_kernels


def _crandn(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _correlation(a, b):
    """|<a, b>| / (|a| |b|) per voxel over the coil axis."""
    num = np.abs(np.sum(np.conj(a) * b, axis=0))
    return num / np.maximum(np.linalg.norm(a, axis=0) * np.linalg.norm(b, axis=0), 1e-30)


def _coil_images(rng, coils, shape, noise=0.01):
    """Smooth coil sensitivities times a random object, plus noise: a dominant eigenvalue well above the rest."""
    grids = np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij")
    centres = rng.uniform(-1, 1, (coils, len(shape)))
    maps = np.stack([np.exp(-sum((g - c) ** 2 for g, c in zip(grids, centre)) + 2j * np.pi * rng.random())
                     for centre in centres])
    obj = rng.uniform(0.3, 1.0, shape) * np.exp(1j * rng.uniform(-0.5, 0.5, shape))
    return (maps * obj + noise * _crandn(rng, coils, *shape)).astype(np.complex64), maps


@pytest.fixture(scope="module")
def host_maps(tmp_path_factory):
    """maps.cu built for the host once per ``MAPS_COILS`` tier: ``get_kernel``'s twin."""
    folder = tmp_path_factory.mktemp("maps_host")
    libraries = {tier: host.build("maps_host.cpp", folder / f"maps{tier}.so", f"-DMAPS_COILS={tier}")
                 for tier in MAPS_TIERS}

    def get_kernel(filename, name, defines, device):
        assert filename == "maps.cu" and name.startswith("mri_recon_maps_")
        function = getattr(libraries[defines["MAPS_COILS"]], "emu_" + name.removeprefix("mri_recon_maps_"))

        def launch(grid, block, args):
            function(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), *(_argument(a) for a in args))

        return launch

    return get_kernel


def _argument(value):
    if isinstance(value, np.ndarray):
        return host.argument(np.ascontiguousarray(value)) if value.flags.c_contiguous else pytest.fail("strided")
    return host.argument(value)


@pytest.fixture
def on_host(monkeypatch, host_maps):
    """walsh_gpu's launches on NumPy arrays with the host-built kernels; every buffer poisoned with NaN."""
    walsh_gpu._kernel.cache_clear()
    monkeypatch.setattr(walsh_gpu, "cupy_module", lambda: np)
    monkeypatch.setattr(walsh_gpu, "get_kernel", host_maps)
    monkeypatch.setattr(walsh_gpu, "empty", lambda shape: np.full(shape, np.nan + 1j * np.nan, np.complex64))
    monkeypatch.setattr(walsh_gpu, "on_device", lambda index: contextlib.nullcontext())
    yield
    walsh_gpu._kernel.cache_clear()


def _box_sum(a, size, axes):
    """The centred box sum by explicit shifts in float64 (zero beyond the ends)."""
    out = a.astype(np.complex128)
    for axis in axes:
        n, acc = out.shape[axis], np.zeros_like(out)
        for shift in range(-(size // 2), size - size // 2):
            lo, hi = max(0, -shift), min(n, n - shift)
            if lo >= hi:
                continue
            target = [slice(None)] * out.ndim
            source = [slice(None)] * out.ndim
            target[axis], source[axis] = slice(lo, hi), slice(lo + shift, hi + shift)
            acc[tuple(target)] += out[tuple(source)]
        out = acc
    return out


def _expected_maps(images, size, ref):
    """Walsh's maps in float64: LAPACK's dominant eigenvector of each voxel's box-summed covariance, with
    coil ``ref`` made real and non-negative."""
    spatial = images.shape[1:]
    cov = np.einsum("i...,j...->...ij", images.astype(np.complex128), np.conj(images.astype(np.complex128)))
    cov = _box_sum(cov, size, range(len(spatial)))
    _, vectors = np.linalg.eigh(cov)
    top = np.moveaxis(vectors[..., -1], -1, 0)
    phase = np.conj(top[ref]) / np.maximum(np.abs(top[ref]), 1e-300)
    return top * phase, cov


@pytest.mark.parametrize("coils, shape, size", [
    (1, (7, 5), 3), (3, (16, 20), 3), (8, (9, 13), 5), (9, (6, 7), 1), (5, (8, 9, 10), 3), (2, (8, 1, 6), 3),
    (13, (5, 6), 3),
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_host_kernels_are_the_float64_dominant_eigenvectors(rng, on_host, coils, shape, size):
    """Every tier (1, 8, 9 and 13 coils), 2-D and 3-D, a box wider than an axis: the maps are LAPACK's dominant
    eigenvector of the float64 box sums (up to each voxel's phase, which the reference coil fixes), unit norm,
    every element written."""
    images, _ = _coil_images(rng, coils, shape)
    ref = int(rng.integers(coils))
    got = walsh_gpu.walsh_maps(host.HostMaps(images.shape, np.complex64, images), size, ref)
    want, cov = _expected_maps(images, size, ref)
    assert got.shape == images.shape and np.all(np.isfinite(got))
    values = np.linalg.eigvalsh(cov)
    clear = values[..., -1] > 1.5 * (values[..., -2] if coils > 1 else 0)  # a gap 65 products resolve
    assert clear.mean() > 0.9
    assert 1 - _correlation(got, want)[clear].min() < 1e-5
    np.testing.assert_allclose(np.linalg.norm(got, axis=0), 1.0, atol=1e-5)
    assert np.abs(got[ref].imag).max() < 1e-5 and got[ref].real.min() >= 0  # the reference coil is real


def test_host_kernels_agree_with_the_array_code(rng, on_host):
    """The kernels behind ``walsh`` against its NumPy array code on the same images: the same maps."""
    images, truth = _coil_images(rng, 6, (24, 20))
    cpu = walsh(images)
    got = walsh_gpu.walsh_maps(host.HostMaps(images.shape, np.complex64, images / np.abs(images).max()), 3,
                               int(np.argmax(np.sum(np.abs(images) ** 2, axis=(1, 2)))))
    assert np.linalg.norm(got - cpu) / np.linalg.norm(cpu) < 1e-4
    assert _correlation(got, truth).mean() > 0.99


def _packed(mats):
    """Hermitian ``(n, C, C)`` matrices as maps.cu stores them: pair ``j (j + 1) / 2 + i`` (i <= j) a row of n."""
    coils = mats.shape[1]
    return np.ascontiguousarray(np.stack([mats[:, i, j] for j in range(coils) for i in range(j + 1)]),
                                dtype=np.complex64)


def _eigen(mats, ref=0):
    coils, n = mats.shape[1], mats.shape[0]
    maps = walsh_gpu.empty((coils, n))
    walsh_gpu._launch("mri_recon_maps_eigen", coils, 0, n,
                      (_packed(mats), maps, np.int32(coils), np.int64(n), np.int32(ref), np.int32(walsh_gpu.STEPS)))
    return maps


def test_host_eigen_kernel_escapes_a_start_orthogonal_to_the_dominant_eigenvector(on_host):
    """R = v v^H + 0.9 e0 e0^H with v orthogonal to e0, whose diagonal entry is the largest: the power iteration
    from e0 stays on e0 (eigenvalue 0.9); the other start finds v (eigenvalue 1). And a v orthogonal to the
    other start's golden-ratio phases, with e0 then the way there."""
    golden = np.exp(2j * np.pi * ((0.6180339887 * np.arange(3)) % 1)) / np.sqrt(3)
    e0 = np.eye(3)[0]
    tilted = e0 - np.vdot(golden, e0) * golden
    cases = [(np.array([0, 1, 1]) / np.sqrt(2), 0.9 * np.outer(e0, e0)),
             (np.array([0, 1, -1]) / np.sqrt(2), 0.9 * np.outer(e0, e0)),
             (np.array([0, 1, 1j]) / np.sqrt(2), 0.9 * np.outer(e0, e0)),
             (tilted / np.linalg.norm(tilted), 0.5 * np.outer(golden, golden.conj()))]
    mats = np.stack([np.outer(v, v.conj()) + rest for v, rest in cases])
    got = _eigen(mats)
    for k, (v, _) in enumerate(cases):
        assert abs(np.vdot(v, got[:, k])) > 1 - 1e-5, k


def test_host_eigen_kernel_reaches_the_largest_eigenvalue_where_eigenvalues_nearly_tie(rng, on_host):
    """Covariances of noise alone (eigenvalues close together): the vector's Rayleigh quotient is within 1% of
    the largest eigenvalue, from LAPACK in float64."""
    samples = _crandn(rng, 400, 8, 30).astype(np.complex128)
    mats = samples @ samples.conj().transpose(0, 2, 1)
    got = _eigen(mats).astype(np.complex128)
    rayleigh = np.real(np.einsum("cn,ncd,dn->n", got.conj(), mats, got))
    assert np.all(rayleigh >= 0.99 * np.linalg.eigvalsh(mats)[:, -1])
    np.testing.assert_allclose(np.linalg.norm(got, axis=0), 1.0, atol=1e-5)


def test_host_kernels_give_zero_where_a_voxel_has_no_signal(rng, on_host):
    """A covariance of zero trace gives a zero map; the others are still unit vectors."""
    images, _ = _coil_images(rng, 4, (12, 12))
    images[:, :6] = 0
    got = walsh_gpu.walsh_maps(host.HostMaps(images.shape, np.complex64, images), 3, 0)
    assert np.all(got[:, :5] == 0)
    np.testing.assert_allclose(np.linalg.norm(got[:, 7:], axis=0), 1.0, atol=1e-5)


def test_box_sums_run_in_groups_of_pairs(rng, on_host, monkeypatch):
    """Scratch buffers smaller than the covariance: the pairs summed a few at a time give the same maps."""
    images, _ = _coil_images(rng, 5, (6, 5, 4))
    whole = walsh_gpu.walsh_maps(host.HostMaps(images.shape, np.complex64, images), 3, 1)
    monkeypatch.setattr(walsh_gpu, "MAPS_SCRATCH_BYTES", 2 * 8 * images[0].size)  # 2 of the 15 pairs at a time
    assert walsh_gpu.scratch_pairs(15, images[0].size) == 2
    grouped = walsh_gpu.walsh_maps(host.HostMaps(images.shape, np.complex64, images), 3, 1)
    np.testing.assert_array_equal(grouped, whole)


def test_tiers_hold_their_coils_and_refuse_more():
    assert [maps_defines(c)["MAPS_COILS"] for c in (1, 8, 9, 16)] == [8, 8, 16, 16]
    assert walsh_gpu.fits(16) and not walsh_gpu.fits(17) and not walsh_gpu.fits(0)
    with pytest.raises(KernelError, match="maps.cu holds at most 16 coils, asked for 17"):
        maps_defines(17)


@pytest.mark.gpu
@pytest.mark.parametrize("coils, shape", [(8, (64, 64)), (12, (40, 36)), (16, (24, 20)), (4, (20, 18, 16))])
def test_gpu_walsh_equals_the_array_code(rng, monkeypatch, coils, shape):
    """``walsh`` on CuPy images (the kernels) against ``walsh`` on the same NumPy images (the array code)."""
    cupy = cupy_module()
    images, truth = _coil_images(rng, coils, shape)
    calls = []
    kernels = walsh_gpu.walsh_maps
    monkeypatch.setattr(walsh_gpu, "walsh_maps", lambda *a: calls.append(a[1:]) or kernels(*a))
    got = cupy.asnumpy(walsh(cupy.asarray(images)))
    assert len(calls) == 1
    cpu = walsh(images)
    assert np.linalg.norm(got - cpu) / np.linalg.norm(cpu) < 1e-4
    assert _correlation(got, truth).mean() > 0.99


@pytest.mark.gpu
def test_gpu_walsh_beyond_the_last_tier_uses_the_array_code(rng, monkeypatch):
    """17 coils: more than maps.cu holds, so the array code runs on CuPy, with the same result as NumPy's."""
    cupy = cupy_module()
    images, _ = _coil_images(rng, 17, (12, 10))
    monkeypatch.setattr(walsh_gpu, "walsh_maps", lambda *a: pytest.fail("17 coils went to the kernels"))
    got = cupy.asnumpy(walsh(cupy.asarray(images)))
    assert np.linalg.norm(got - walsh(images)) / np.linalg.norm(got) < 1e-4


def test_the_pipeline_builds_the_maps_module_ahead_only_for_walsh():
    """Prefetched for Walsh's estimate where a tier holds the coils; shipped with the default modules."""
    assert maps_kernels("walsh", 12) == [("maps.cu", {"MAPS_COILS": 16})]
    assert maps_kernels("walsh", 17) == maps_kernels("espirit", 8) == maps_kernels("nlinv", 8) == []
    assert maps_kernels(None, 8) == []
    assert all(("maps.cu", {"MAPS_COILS": tier}) in default_kernels() for tier in MAPS_TIERS)


@pytest.mark.parametrize("coils, shape, scratch", [(8, (48, 40), None), (5, (12, 10, 8), 3 * 8 * 960)])
def test_the_planner_counts_what_the_kernels_hold(rng, on_host, monkeypatch, coils, shape, scratch):
    """The planner's Walsh model on a GPU (workers 0), less the caller's images and their scaled copy, against
    the traced peak of the kernels' own buffers (built for the host, loaded before the trace): the covariance,
    then the box sums' scratch buffers (whole, or in groups of pairs) or the maps."""
    from mri_recon.planning import preparation

    if scratch is not None:
        monkeypatch.setattr(walsh_gpu, "MAPS_SCRATCH_BYTES", scratch)
        monkeypatch.setattr(preparation, "MAPS_SCRATCH_BYTES", scratch)
    images, _ = _coil_images(rng, coils, shape)
    held = host.HostMaps(images.shape, np.complex64, images)
    walsh_gpu.walsh_maps(held, 3, 0)  # loads the kernels first: their loading is no buffer of the plan
    peak = smallest_traced_peak(lambda: walsh_gpu.walsh_maps(held, 3, 0))
    planned = preparation.walsh(shape, coils, 16, 16, 0) - 2 * images.nbytes
    assert abs(planned - peak) <= 0.05 * peak, (planned, peak)
