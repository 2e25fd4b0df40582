"""Shared fixtures: a fresh random generator per test (its seed is printed when the test fails), skipping of
GPU tests on machines without CuPy or a GPU, and ``--with-examples``: the worked examples of docs/examples
registered for the whole run (:mod:`examples`)."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.arrays.backend import gpu_available


def pytest_addoption(parser):
    parser.addoption("--with-examples", action="store_true",
                     help="register the worked examples of docs/examples (a regularizer, an output format, an engine) "
                          "before collecting: the tests that read the registries then cover them")


def pytest_configure(config):
    if config.getoption("--with-examples"):
        from examples import REGISTER

        patch = pytest.MonkeyPatch()  # for the whole run
        for register in REGISTER.values():
            register(patch)


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs CuPy and an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    """A generator seeded from the OS: every run draws fresh inputs. A failing test reports its seed, so
    ``np.random.default_rng(seed)`` reproduces it."""
    seed = int(np.random.SeedSequence().entropy)
    request.node.user_properties.append(("rng_seed", seed))
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for name, value in item.user_properties:
            if name == "rng_seed":
                report.sections.append(("random seed", f"rng seed = {value}"))
