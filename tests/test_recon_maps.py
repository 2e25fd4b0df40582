"""Coil maps estimated inside the reconstruction equal maps estimated beforehand, on every device."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.errors import InvalidDataError, listed
from mri_recon.pipeline import reconstruct
from mri_recon.prep.coilmaps import estimate_coil_maps
from mri_recon.prep.maps_methods import estimated
from mri_recon.sim.simulate import simulate_scan


@pytest.fixture(scope="module")
def scan():
    return simulate_scan((32, 32), "golden", coils=4, snr=40.0, seed=3)


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("method", estimated())
def test_estimated_in_pipeline_equals_estimated_before(scan, device, method):
    bare = scan.replace(coil_maps=None)
    before = bare.replace(coil_maps=estimate_coil_maps(bare, method, device=device))
    expected = reconstruct(before, iterations=8, device=device, progress=False)
    result = reconstruct(bare, iterations=8, device=device, progress=False, estimate_maps=method)
    assert result.combine == "sense" and result.parameters["coil_maps"] == method
    assert result.timings["coil_maps"] > 0
    assert _rel(result.image, expected.image) < 1e-4


def test_unknown_estimation_method_is_refused(scan):
    with pytest.raises(InvalidDataError, match=f"estimate_maps must be None, {listed(estimated(), quote=True)}, "
                                               f"found 'pca'"):
        reconstruct(scan, iterations=2, device="cpu", progress=False, estimate_maps="pca")
