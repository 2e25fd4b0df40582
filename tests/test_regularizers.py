"""The regularizer and solver registries: the shipped regularizers, and the worked example of
docs/architecture.md ("Where to add a regularizer", docs/examples/l1.py) registered with one entry and checked
against the closed-form minimizer of ``||x - b||^2 + lam ||x||_1`` (soft thresholding of ``b`` at ``lam / 2``)."""

from __future__ import annotations

import numpy as np
import pytest
from examples import forget, register_regularizer
from helpers import relative

import mri_recon
from mri_recon.errors import InvalidDataError
from mri_recon.operators import Scale
from mri_recon.solvers import regularizers
from mri_recon.solvers.registry import SOLVERS as SOLVER_REGISTRY
from mri_recon.solvers.registry import solver
from mri_recon.solvers.sparse import (
    LAM_DEFAULTS,
    check_sparse,
    resolve_lam,
    solve_sparse,
    sparse_names,
    sparsity_of,
)


def test_the_registry_lists_the_shipped_regularizers():
    assert regularizers.names()[:3] == ("l2", "tv", "wavelet")  # in MODULES order, any added one's after them
    assert {name: regularizers.regularizer(name).solvers for name in ("tv", "wavelet")} == \
        {"tv": ("admm",), "wavelet": ("admm", "fista")}
    assert LAM_DEFAULTS["tv"] == {True: 3e-2, False: 3e-3} and LAM_DEFAULTS["l2"][True] == 1e-3
    assert list(LAM_DEFAULTS) == list(regularizers.names()) and len(LAM_DEFAULTS) == len(regularizers.names())
    with pytest.raises(KeyError, match="l7"):
        LAM_DEFAULTS["l7"]
    assert regularizers.regularizer("wavelet").default_solver == "fista"
    with pytest.raises(InvalidDataError, match=f"regularizer must be one of {', '.join(regularizers.names())}, "
                                               f"found 'l7'"):
        regularizers.regularizer("l7")
    with pytest.raises(InvalidDataError, match=f"regularizer must be one of {', '.join(sparse_names())} here, "
                                               f"found 'l2'"):
        sparsity_of("l2", (8, 8), 2)


def test_every_solver_a_regularizer_names_is_registered():
    for chosen in regularizers.registry().values():
        assert chosen.default_solver in chosen.solvers, chosen.name
        assert all(solver(name).run is not None for name in chosen.solvers if chosen.sparse), chosen.name
    with pytest.raises(InvalidDataError, match=f"solver must be one of {', '.join(SOLVER_REGISTRY)}, found 'newton'"):
        solver("newton")


@pytest.fixture
def image_l1(monkeypatch):
    """The worked example of docs/architecture.md (docs/examples/l1.py), registered as ``l1`` (one more entry
    in MODULES)."""
    yield register_regularizer(monkeypatch).REGULARIZER
    monkeypatch.undo()
    forget()


def _soft(b: np.ndarray, t: float) -> np.ndarray:
    magnitude = np.abs(b.astype(np.complex128))
    return np.where(magnitude > t, 1 - t / np.maximum(magnitude, 1e-300), 0) * b


@pytest.mark.parametrize("solver", ["fista", "admm"])
def test_the_documented_example_solves_the_l1_problem(rng, image_l1, solver):
    shape, lam = (12, 9), 0.8
    b = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    assert regularizers.regularizer("l1") is image_l1 and resolve_lam("l1", None) == 5e-3
    options = check_sparse("l1", None, None, False, solver, True, shape)
    assert options["solver"] == solver
    x, history, used = solve_sparse(np.zeros((24, 18), np.complex64), None, b, regularizer="l1", lam=lam,
                                    rho=1.0, iterations=200, inner_iterations=3, data_energy=float(np.vdot(b, b).real),
                                    anisotropic=False, solver=solver, normal=lambda mu: Scale(shape, 1.0 + mu))
    expected = _soft(b, lam / 2)  # argmin ||x - b||^2 + lam ||x||_1 (N = I)
    assert used == solver and relative(x, expected) < 1e-4
    assert history[-1] <= history[0]


def test_the_documented_example_runs_in_a_reconstruction(image_l1):
    scan = mri_recon.simulate_scan((24, 24), "golden", coils=2, seed=7)
    result = mri_recon.reconstruct(scan, device="cpu", iterations=4, regularizer="l1", progress=False)
    assert result.parameters["regularizer"] == "l1" and result.parameters["solver"] == "fista"
    assert np.isfinite(result.image).all() and np.abs(result.image).max() > 0
    with pytest.raises(InvalidDataError, match="anisotropic applies to total variation only"):
        mri_recon.reconstruct(scan, device="cpu", regularizer="l1", anisotropic=True)


def test_the_documented_example_reaches_a_time_series(image_l1):
    """A regularizer added as the documents say changes a time series' image (it is a spatial term of the joint
    solve, by the registry), and its weight matters."""
    from mri_recon.sim.dynamic import simulate_series

    series = simulate_series((16, 16), frames=3, spokes_per_frame=6, coils=2, seed=5)
    common = {"temporal": "tv", "iterations": 8, "device": "cpu"}
    plain = mri_recon.reconstruct(series, **common)
    l1 = mri_recon.reconstruct(series, regularizer="l1", lam=0.05, **common)
    stronger = mri_recon.reconstruct(series, regularizer="l1", lam=0.5, **common)
    assert l1.parameters["regularizer"] == "l1"
    assert np.linalg.norm(l1.image - plain.image) > 1e-3 * np.linalg.norm(plain.image)
    assert np.linalg.norm(stronger.image - l1.image) > 1e-3 * np.linalg.norm(l1.image)
