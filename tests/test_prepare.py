"""prepare_scan: prewhitening, density weights and coil-map choices, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from mri_recon.errors import InvalidDataError, SchemaError
from mri_recon.prep import prepare_scan
from mri_recon.sim.simulate import simulate_scan


@pytest.fixture(scope="module")
def scan():
    return simulate_scan((32, 32), "golden", coils=3, snr=40.0, seed=5)


def test_choices_are_recorded_and_applied(scan):
    ready, record = prepare_scan(scan, dcf="none", coil_maps="walsh")
    basis = record.pop("maps_basis")  # the noise covariance's Cholesky factor, for the estimated maps' scale
    noise = scan.noise.astype(np.complex128)
    np.testing.assert_allclose(basis @ basis.conj().T, noise @ noise.conj().T / noise.shape[1], rtol=1e-10)
    assert np.allclose(basis, np.tril(basis))
    assert record == {"prewhitened": True, "dcf": "none", "coil_maps": "walsh", "estimate_maps": "walsh"}
    assert ready.weights is None and ready.coil_maps is None
    ready, record = prepare_scan(scan, prewhiten=False, dcf="ramp", coil_maps="file")
    assert not record["prewhitened"] and record["estimate_maps"] is None and record["maps_basis"] is None
    assert ready.weights is not None and not np.array_equal(ready.weights, scan.weights)
    np.testing.assert_array_equal(ready.coil_maps, scan.coil_maps)


def test_bad_choices_and_missing_datasets(scan):
    with pytest.raises(InvalidDataError, match="unknown density compensation 'voronoi'"):
        prepare_scan(scan, dcf="voronoi")
    with pytest.raises(InvalidDataError, match="unknown coil-map choice 'pca'"):
        prepare_scan(scan, coil_maps="pca")
    bare = scan.replace(weights=None, coil_maps=None)
    with pytest.raises(SchemaError, match="--dcf file needs a 'weights' dataset"):
        prepare_scan(bare, dcf="file")
    with pytest.raises(SchemaError, match="--coil-maps file needs a 'coil_maps' dataset"):
        prepare_scan(bare, coil_maps="file")


def test_a_field_map_is_kept_for_correction_or_dropped_on_purpose(scan):
    with_map = scan.replace(field_map=np.ones(scan.matrix, np.float32),
                            times=np.linspace(0, 1e-3, scan.n_samples, dtype=np.float32))
    ready, record = prepare_scan(with_map)
    assert np.array_equal(ready.field_map, with_map.field_map) and np.array_equal(ready.times, with_map.times)
    assert "field_map" not in record
    ready, record = prepare_scan(with_map, field_map="ignore")
    assert ready.field_map is None and ready.times is None and record["field_map"] == "ignored"
    assert ready.attrs["field_map_correction"] == "ignored"
    with pytest.raises(InvalidDataError, match=r"has 'times' but no 'field_map'.*--no-field-map"):
        prepare_scan(scan.replace(times=with_map.times))
    with pytest.raises(InvalidDataError, match=r"has 'field_map' but no 'times'.*needs both"):
        prepare_scan(scan.replace(field_map=with_map.field_map))
    ready, record = prepare_scan(scan.replace(times=with_map.times), field_map="ignore")
    assert ready.times is None and record["field_map"] == "ignored"
    with pytest.raises(InvalidDataError, match="unknown field-map choice 'apply'"):
        prepare_scan(scan, field_map="apply")


def test_density_compensation_that_comes_out_zero_is_refused(scan, monkeypatch):
    from mri_recon.prep import dcf

    monkeypatch.setattr(dcf, "pipe_menon", lambda trajectory, matrix: np.zeros(len(trajectory), np.float32))
    with pytest.raises(InvalidDataError, match=r"density compensation 'pipe' gave all-zero weights"):
        prepare_scan(scan, dcf="pipe")
    with pytest.raises(InvalidDataError, match="weights are all zero"):
        scan.replace(weights=np.zeros(scan.n_samples, np.float32))


def test_a_trajectory_well_past_nyquist_is_warned_about_and_recorded(caplog):
    import logging

    from mri_recon.prep import prepare_scan
    from mri_recon.sim.simulate import simulate_scan

    scan = simulate_scan((32, 32), "golden", coils=2, spokes=40)
    wide = scan.replace(trajectory=(scan.trajectory * 1.99).astype(np.float32))
    with caplog.at_level(logging.WARNING, logger="mri_recon"):
        _, record = prepare_scan(wide)
    assert "reaches 1.99x the Nyquist extent on axis" in record["trajectory_beyond_nyquist"]
    assert any("readout oversampling" in r.getMessage() for r in caplog.records)
    _, plain = prepare_scan(scan)
    assert "trajectory_beyond_nyquist" not in plain


def test_a_normalized_trajectory_is_refused_with_the_units_to_pass():
    from mri_recon.errors import TrajectoryUnitsError
    from mri_recon.sim.simulate import simulate_scan

    scan = simulate_scan((32, 32), "golden", coils=2, spokes=40)
    with pytest.raises(TrajectoryUnitsError, match=r"looks normalized .* --traj-units normalized .*to_cycles_per_fov"):
        scan.replace(trajectory=(scan.trajectory / 32).astype(np.float32))
