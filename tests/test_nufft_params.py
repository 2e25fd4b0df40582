"""NUFFT parameters and the NumPy model of the algorithm (CPU): against FINUFFT and the direct sum."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import random_problem, relative
from scipy import integrate

from mri_recon.errors import InvalidDataError, SchemaError
from mri_recon.operators.engines import nufft_params as npar
from mri_recon.operators.engines.nudft import nudft_adjoint, nudft_forward

MATRICES = [(16, 12), (9, 7), (8, 6, 5), (7, 5, 3), (1, 6), (10, 1, 4)]






@pytest.mark.parametrize(("eps", "width"), [(1e-2, 3), (1e-5, 6), (1e-6, 7), (1e-9, 10), (1e-20, 16)])
def test_kernel_width_is_finufft_rule(eps, width):
    assert npar.kernel_width(eps) == width


@pytest.mark.parametrize("eps", [0.0, 1.0, -1e-6, float("nan"), "1e-6"])
def test_bad_eps_is_rejected(eps):
    with pytest.raises(InvalidDataError, match="eps must be a number in"):
        npar.kernel_width(eps)


def test_beta_follows_finufft():
    assert npar.kernel_beta(7) == pytest.approx(16.1)
    assert npar.kernel_beta(2) == pytest.approx(4.4)


@pytest.mark.parametrize(("n", "smooth"), [(1, 2), (7, 8), (14, 16), (22, 24), (512, 512), (514, 540), (98, 100)])
def test_next_smooth_even(n, smooth):
    assert npar.next_smooth_even(n) == smooth


@pytest.mark.parametrize("n", [1, 5, 6, 100, 128, 255, 256, 384])
def test_fine_size_is_even_smooth_and_large_enough(n):
    fine = npar.fine_size(n, 7)
    assert fine % 2 == 0 and fine >= 2 * n and fine >= 14
    rest = fine
    for p in (2, 3, 5):
        while rest % p == 0:
            rest //= p
    assert rest == 1
    assert npar.fine_size(256, 7) == 512 and npar.fine_size(128, 7) == 256


def test_params_validate_matrix():
    with pytest.raises(SchemaError, match="2 or 3 axes"):
        npar.nufft_params((8,))
    with pytest.raises(SchemaError, match="2 or 3 axes"):
        npar.nufft_params((8, 0))


@pytest.mark.parametrize("width", [4, 7, 10])
def test_fourier_coefficients_match_dense_integration(width):
    beta = npar.kernel_beta(width)
    n, fine = 24, 48
    coeffs = npar.fourier_coefficients(n, fine, width, beta)
    for j in (0, 5, 12, 23):
        mode = j - n // 2

        def integrand(z, mode=mode):
            return float(npar.es_kernel(np.array(z), beta)) * math.cos(math.pi * mode * width * z / fine)

        dense, _ = integrate.quad(integrand, -1.0, 1.0, epsabs=1e-14, epsrel=1e-13, limit=200)
        assert coeffs[j] == pytest.approx(width / 2 * dense, rel=1e-11)


def test_es_kernel_shape():
    z = np.linspace(-1.5, 1.5, 31)
    phi = npar.es_kernel(z, 16.1)
    assert phi[15] == 1.0 and np.all(phi[np.abs(z) > 1] == 0) and np.allclose(phi, phi[::-1])


@pytest.mark.parametrize("matrix", MATRICES, ids=str)
def test_reference_adjoint_matches_direct_sum(rng, matrix):
    traj, data = random_problem(rng, matrix, 2, 150)
    exact = npar.direct_adjoint(data, traj, matrix)
    assert relative(npar.reference_adjoint(data, traj, matrix, 1e-6), exact) < 3e-6
    assert relative(npar.reference_adjoint(data, traj, matrix, 1e-9), exact) < 1e-8


@pytest.mark.parametrize("matrix", MATRICES, ids=str)
def test_reference_forward_matches_direct_sum(rng, matrix):
    traj, _ = random_problem(rng, matrix, 1, 150)
    image = (rng.standard_normal((2, *matrix)) + 1j * rng.standard_normal((2, *matrix)))
    exact = npar.direct_forward(image, traj)
    assert relative(npar.reference_forward(image, traj, 1e-6), exact) < 3e-6


@pytest.mark.parametrize("matrix", [(8, 6), (6, 4, 8)], ids=str)
def test_direct_sum_is_the_project_oracle_for_even_sizes(rng, matrix):
    traj, data = random_problem(rng, matrix, 2, 60)
    assert relative(npar.direct_adjoint(data, traj, matrix), nudft_adjoint(data, traj, matrix)) < 1e-12
    image = npar.direct_adjoint(data, traj, matrix)
    assert relative(npar.direct_forward(image, traj), nudft_forward(image, traj)) < 1e-12


@pytest.mark.parametrize("matrix", MATRICES, ids=str)
def test_reference_matches_finufft(rng, matrix):
    finufft = pytest.importorskip("finufft", reason="FINUFFT is the CPU accuracy reference")
    traj, data = random_problem(rng, matrix, 1, 200, reach=1.0)  # the PSF's reach: |k| up to N
    coords = [2 * np.pi * traj[:, d].astype(np.float64) / n for d, n in enumerate(matrix)]
    type1 = {2: finufft.nufft2d1, 3: finufft.nufft3d1}[len(matrix)]
    type2 = {2: finufft.nufft2d2, 3: finufft.nufft3d2}[len(matrix)]
    ref1 = type1(*coords, data[0].astype(np.complex128), n_modes=matrix, eps=1e-12, isign=+1)
    assert relative(npar.reference_adjoint(data, traj, matrix, 1e-6)[0], ref1) < 3e-6
    image = rng.standard_normal(matrix) + 1j * rng.standard_normal(matrix)
    ref2 = type2(*coords, image, eps=1e-12, isign=-1)
    assert relative(npar.reference_forward(image[None], traj, 1e-6)[0], ref2) < 3e-6


def test_psf_is_type1_on_the_doubled_grid(rng):
    matrix = (6, 5)
    traj, _ = random_problem(rng, matrix, 1, 80)
    weights = rng.random(80)
    big = tuple(2 * n for n in matrix)
    psf = npar.reference_adjoint(weights[None], 2 * traj, big, 1e-9)[0]
    j = np.stack(np.meshgrid(*[np.arange(2 * n) for n in matrix], indexing="ij"), axis=-1).reshape(-1, 2)
    r = (j - np.asarray(matrix)) / np.asarray(matrix)
    exact = (weights @ np.exp(2j * np.pi * traj.astype(np.float64) @ r.T)).reshape(big)
    assert relative(psf, exact) < 1e-8
