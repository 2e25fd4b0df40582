"""``doctor``'s version rows: the CUDA driver row says when there is no driver instead of a version 0.0."""

from __future__ import annotations

import types

import pytest

from mri_recon import doctor


def _fake_cupy(driver: int) -> types.SimpleNamespace:
    runtime = types.SimpleNamespace(runtimeGetVersion=lambda: 13000, driverGetVersion=lambda: driver)
    return types.SimpleNamespace(__version__="13.6.0", cuda=types.SimpleNamespace(runtime=runtime))


@pytest.mark.parametrize(("driver", "shown"), [(0, "no CUDA driver"), (12040, "12.4"), (13000, "13.0")])
def test_the_cuda_driver_row_is_its_version_or_says_there_is_none(monkeypatch, driver, shown):
    monkeypatch.setattr(doctor, "cupy_module", lambda: _fake_cupy(driver))
    rows = dict(doctor.versions(None))
    assert rows["cupy"] == "13.6.0" and rows["cuda runtime"] == "13.0"
    assert rows["cuda driver"] == shown
