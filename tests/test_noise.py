"""Noise prewhitening: covariance, Cholesky whitening, and what prewhiten() does to a scan."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import InvalidDataError, SchemaError
from mri_recon.prep.noise import (
    apply_whitening,
    noise_covariance,
    prewhiten,
    prewhiten_with_basis,
    receiver_basis,
    whitening_and_basis,
    whitening_matrix,
)
from mri_recon.scan import Scan


def _complex(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) / np.sqrt(2)


def _mixing(rng, coils):
    """A random coupling matrix: correlated channels with unequal gains."""
    return np.eye(coils) * rng.uniform(0.5, 2.0, coils) + 0.3 * _complex(rng, (coils, coils))


def _scan(rng, coils=6, samples=300, noise_samples=20_000, maps=True):
    a = _mixing(rng, coils)
    noise = (a @ _complex(rng, (coils, noise_samples))).astype(np.complex64)
    traj = ((rng.random((samples, 2)) - 0.5) * 16).astype(np.float32)
    return Scan(kspace=_complex(rng, (coils, samples)).astype(np.complex64), trajectory=traj, matrix=(16, 16),
                noise=noise, coil_maps=_complex(rng, (coils, 16, 16)).astype(np.complex64) if maps else None), a


def test_covariance_is_the_sample_second_moment(rng):
    n = _complex(rng, (4, 50)).astype(np.complex64)
    expected = sum(np.outer(n[:, k], n[:, k].conj()) for k in range(50)) / 50
    np.testing.assert_allclose(noise_covariance(n), expected, rtol=1e-6, atol=1e-7)


def test_covariance_estimates_the_true_one(rng):
    """With K samples each entry has a standard error of about |Psi| / sqrt(K)."""
    coils, count = 5, 40_000
    a = _mixing(rng, coils)
    cov = noise_covariance(a @ _complex(rng, (coils, count)))
    truth = a @ a.conj().T
    assert np.max(np.abs(cov - truth)) < 6 * np.max(np.abs(truth)) / np.sqrt(count)


def test_whitening_matrix_inverts_the_cholesky_factor(rng):
    a = _mixing(rng, 7)
    cov = a @ a.conj().T
    w = whitening_matrix(cov)
    np.testing.assert_allclose(w @ cov @ w.conj().T, np.eye(7), atol=1e-10)
    np.testing.assert_allclose(np.triu(w, 1), 0)  # L^{-1} is lower triangular
    np.testing.assert_allclose(np.linalg.inv(w) @ np.linalg.inv(w).conj().T, cov, atol=1e-10)


def test_prewhiten_makes_the_noise_covariance_the_identity(rng):
    scan, a = _scan(rng)
    white = prewhiten(scan)
    # The samples that defined W: identity up to float32 rounding.
    np.testing.assert_allclose(noise_covariance(white.noise), np.eye(scan.n_coils), atol=2e-5)
    # Fresh noise through the same channels: identity up to the estimation error of K = 20000 samples.
    count = 20_000
    fresh = apply_whitening(whitening_matrix(noise_covariance(scan.noise)),
                            (a @ _complex(rng, (scan.n_coils, count))).astype(np.complex64))
    assert np.max(np.abs(noise_covariance(fresh) - np.eye(scan.n_coils))) < 8 / np.sqrt(count)
    assert white.attrs["prewhitened"] is True


def test_one_covariance_gives_the_whitening_and_the_receiver_basis(rng):
    """W = L^{-1} and L L^H = Psi, bit for bit what whitening_matrix and receiver_basis give one at a time."""
    scan, _ = _scan(rng)
    w, basis = whitening_and_basis(scan)
    cov = noise_covariance(scan.noise)
    np.testing.assert_array_equal(w, whitening_matrix(cov))
    np.testing.assert_array_equal(basis, receiver_basis(scan.noise))
    np.testing.assert_allclose(basis @ basis.conj().T, cov, rtol=1e-12, atol=1e-12 * np.abs(cov).max())
    np.testing.assert_allclose(w @ basis, np.eye(scan.n_coils), atol=1e-12)
    white, same = prewhiten_with_basis(scan)
    np.testing.assert_array_equal(white.kspace, prewhiten(scan).kspace)
    np.testing.assert_array_equal(same, basis)


def test_a_singular_covariance_names_the_scan(rng):
    scan, _ = _scan(rng)
    noise = scan.noise.copy()
    noise[1] = noise[0]  # a duplicated channel
    with pytest.raises(InvalidDataError, match=r"<memory>: noise covariance is singular"):
        whitening_and_basis(scan.replace(noise=noise))


def test_prewhiten_keeps_the_sense_model(rng):
    """W d = F (W S) x: k-space and maps are transformed by the same W over the coil axis."""
    scan, _ = _scan(rng)
    white = prewhiten(scan)
    w = whitening_matrix(noise_covariance(scan.noise))
    np.testing.assert_allclose(white.kspace, w @ scan.kspace, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(white.coil_maps, np.einsum("cd,dxy->cxy", w, scan.coil_maps), rtol=1e-5,
                               atol=1e-5)
    assert white.kspace.dtype == np.complex64 and white.coil_maps.dtype == np.complex64


def test_prewhitening_twice_changes_nothing(rng):
    scan, _ = _scan(rng, maps=False)
    once = prewhiten(scan)
    twice = prewhiten(once)
    assert twice.coil_maps is None
    np.testing.assert_allclose(twice.kspace, once.kspace, rtol=1e-4, atol=1e-4)


def test_errors(rng):
    scan, _ = _scan(rng)
    with pytest.raises(InvalidDataError, match="<memory>: no 'noise' dataset to prewhiten with"):
        prewhiten(scan.replace(noise=None))
    with pytest.raises(InvalidDataError, match=r"too few noise samples: 4 per channel for 6 channels"):
        prewhiten(scan.replace(noise=scan.noise[:, :4]))
    dead = scan.noise.copy()
    dead[2] = dead[1]  # a duplicated channel
    with pytest.raises(InvalidDataError, match="noise covariance is singular"):
        prewhiten(scan.replace(noise=dead))
    with pytest.raises(InvalidDataError, match="noise covariance is singular"):
        whitening_matrix(np.zeros((3, 3)))
    with pytest.raises(SchemaError, match=r"square \(C, C\), found \(3, 4\)"):
        whitening_matrix(np.ones((3, 4)))
    with pytest.raises(SchemaError, match=r"noise must have shape \(C, K\), found \(10,\)"):
        noise_covariance(np.ones(10, np.complex64))


@pytest.mark.gpu
def test_gpu_matches_numpy(rng):
    cp = cupy_module()
    scan, _ = _scan(rng)
    w = whitening_matrix(noise_covariance(scan.noise))
    w_gpu = whitening_matrix(noise_covariance(cp.asarray(scan.noise)))
    np.testing.assert_allclose(cp.asnumpy(w_gpu), w, rtol=1e-8, atol=1e-10)
    out = apply_whitening(w_gpu, cp.asarray(scan.kspace))
    np.testing.assert_allclose(cp.asnumpy(out), apply_whitening(w, scan.kspace), rtol=1e-5, atol=1e-5)
