"""Shared fixtures: a fresh random generator per test, and GPU skipping."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.backend import gpu_available


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs CuPy and an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    """A generator seeded from the OS: every run draws fresh inputs."""
    return np.random.default_rng()
