"""``Scan`` equality by content and its explicit unhashability."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.io import load_scan, save_scan
from mri_recon.scan import ARRAYS, Scan

MATRIX = (12, 10)


def _fields(rng, m=40, coils=2) -> dict:
    def cplx(*shape):
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)

    return {"kspace": cplx(coils, m), "trajectory": (rng.random((m, 2)) - 0.5) * np.asarray(MATRIX),
            "matrix": MATRIX, "weights": rng.random(m), "coil_maps": cplx(coils, *MATRIX),
            "field_map": rng.standard_normal(MATRIX), "times": rng.random(m) * 1e-3, "noise": cplx(coils, 30),
            "ground_truth": cplx(*MATRIX), "attrs": {"note": "x", "voxel_size_mm": rng.uniform(1, 2, 3)}}


def _copy(fields: dict) -> dict:
    return {k: (v.copy() if isinstance(v, np.ndarray) else dict(v) if isinstance(v, dict) else v)
            for k, v in fields.items()}


def test_scans_with_the_same_content_are_equal_wherever_they_come_from(rng):
    fields = _fields(rng)
    a, b = Scan(**fields), Scan(**_copy(fields), source="elsewhere.h5")
    assert a is not b and a.kspace is not b.kspace
    assert a == b and not a != b and a == a
    assert a in [b] and a != "a scan" and a.replace() == a


@pytest.mark.parametrize("name", ARRAYS)
def test_one_changed_or_missing_array_makes_scans_unequal(rng, name):
    fields = _fields(rng)
    a = Scan(**fields)
    changed = _copy(fields)
    changed[name].flat[int(rng.integers(changed[name].size))] += 0.5
    assert a != Scan(**changed)
    if name not in ("kspace", "trajectory"):
        assert a != a.replace(**{name: None}) and a.replace(**{name: None}) != a


def test_attrs_count_with_their_arrays_dtypes_and_shapes(rng):
    fields = _fields(rng)
    a = Scan(**fields)
    voxel = fields["attrs"]["voxel_size_mm"]
    assert a != a.replace(attrs={**a.attrs, "note": "y"}) and a != a.replace(attrs={"note": "x"})
    assert a != a.replace(attrs={**a.attrs, "voxel_size_mm": voxel.astype(np.float32)})
    assert a != a.replace(attrs={**a.attrs, "voxel_size_mm": voxel[None]})
    assert a != a.replace(attrs={**a.attrs, "voxel_size_mm": list(voxel)})


def test_a_saved_scan_reads_back_equal(rng, tmp_path):
    scan = Scan(**{**_fields(rng), "attrs": {"note": "x"}})
    save_scan(tmp_path / "s.h5", scan)
    back = load_scan(tmp_path / "s.h5")
    assert back == scan.replace(attrs={**scan.attrs, "schema_version": 1})


def test_scans_are_unhashable(rng):
    scan = Scan(**_fields(rng))
    with pytest.raises(TypeError, match="unhashable type: 'Scan'"):
        hash(scan)
    with pytest.raises(TypeError, match="unhashable type: 'Scan'"):
        {scan}  # noqa: B018
