"""Simulated scans: every trajectory kind, exact k-space, noise level, file round trip, argument checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mri_recon.errors import InvalidDataError
from mri_recon.io import load_scan, save_scan
from mri_recon.sim import phantom
from mri_recon.sim.simulate import default_interleaves, default_spokes, simulate_scan

KINDS = {
    "radial": ((24, 24), "radial", {"spokes": 20, "dcf": "ramp"}),
    "golden": ((24, 20), "golden", {"spokes": 16}),
    "spiral": ((24, 24), "spiral", {"interleaves": 4}),
    "kooshball": ((12, 12, 12), "kooshball", {"spokes": 40, "dcf": "ramp"}),
    "stack-of-stars": ((16, 16, 4), "stack-of-stars", {"spokes": 10}),
}


@pytest.mark.parametrize("name", list(KINDS), ids=list(KINDS))
def test_every_kind_gives_a_valid_scan(name):
    matrix, kind, options = KINDS[name]
    scan = simulate_scan(matrix, kind, coils=3, snr=25.0, **options)
    m = scan.n_samples
    assert scan.matrix == matrix and scan.kspace.shape == (3, m) and scan.trajectory.shape == (m, len(matrix))
    assert scan.weights.shape == (m,) and np.all(scan.weights >= 0)
    assert scan.coil_maps.shape == (3, *matrix) and scan.ground_truth.shape == matrix
    assert scan.noise.shape == (3, 1024)
    assert scan.attrs["trajectory_kind"] == kind and scan.attrs["coils"] == 3
    assert scan.attrs["dcf"] == options.get("dcf", "pipe")


def test_noiseless_kspace_is_the_analytic_kspace():
    scan = simulate_scan((20, 20), "golden", coils=2, snr=None, spokes=12, dcf=None)
    assert scan.noise is None and scan.weights is None and scan.attrs["noise_std"] == 0.0
    assert math.isinf(scan.attrs["snr"])
    expected = phantom.coil_kspace(scan.trajectory, (20, 20), 2)
    assert np.array_equal(scan.kspace, expected)
    assert np.array_equal(scan.coil_maps, phantom.coil_maps((20, 20), 2))
    assert np.array_equal(scan.ground_truth, phantom.shepp_logan_image((20, 20)))


def test_noise_level_matches_the_image_domain_snr():
    matrix, coils, snr = (32, 32), 4, 20.0
    scan = simulate_scan(matrix, "radial", coils=coils, snr=snr, spokes=40, dcf=None, seed=5)
    clean = phantom.coil_kspace(scan.trajectory, matrix, coils)
    sigma = scan.attrs["noise_std"]
    images = scan.coil_maps * scan.ground_truth
    assert sigma == pytest.approx(np.sqrt(32 * 32 * np.mean(np.abs(images) ** 2)) / snr, rel=1e-5)
    noise = scan.kspace - clean
    assert np.sqrt(np.mean(np.abs(noise) ** 2)) == pytest.approx(sigma, rel=0.02)
    assert np.sqrt(np.mean(np.abs(scan.noise) ** 2)) == pytest.approx(sigma, rel=0.05)


def test_seed_fixes_the_noise():
    a = simulate_scan((16, 16), "golden", coils=2, spokes=8, seed=7, dcf=None)
    b = simulate_scan((16, 16), "golden", coils=2, spokes=8, seed=7, dcf=None)
    c = simulate_scan((16, 16), "golden", coils=2, spokes=8, seed=8, dcf=None)
    assert np.array_equal(a.kspace, b.kspace) and np.array_equal(a.noise, b.noise)
    assert not np.array_equal(a.kspace, c.kspace)
    assert np.array_equal(a.trajectory, c.trajectory)


def test_round_trip_through_the_scan_file(tmp_path):
    scan = simulate_scan((20, 20), "spiral", coils=2, snr=15.0, interleaves=3, seed=11)
    path = tmp_path / "sim.h5"
    save_scan(path, scan)
    loaded = load_scan(path)
    assert loaded.matrix == scan.matrix
    for name in ("kspace", "trajectory", "weights", "coil_maps", "noise", "ground_truth"):
        assert np.array_equal(getattr(loaded, name), getattr(scan, name)), name
    for key in ("trajectory_kind", "snr", "seed", "noise_std", "dcf", "coils", "interleaves", "samples"):
        assert loaded.attrs[key] == scan.attrs[key], key


def test_defaults():
    assert default_spokes("radial", (64, 64)) == 101  # ceil(pi / 2 * 64)
    assert default_spokes("golden", (128, 96)) == 202
    assert default_spokes("kooshball", (32, 32, 32)) == 403  # a quarter of ceil(pi / 2 * 32^2)
    assert default_spokes("stack-of-stars", (64, 64, 8)) == 101
    assert default_interleaves((64, 64)) == 8
    scan = simulate_scan((16, 16), "radial", coils=1, dcf=None)
    assert scan.attrs["spokes"] == 26 and scan.attrs["samples"] == 32 and scan.n_samples == 26 * 32
    assert np.all(scan.coil_maps == 1)


@pytest.mark.parametrize("kwargs,match", [
    ({"trajectory": "cartesian"}, "trajectory must be one of 'radial', 'golden', 'spiral'"),
    ({"dcf": "voronoi"}, "dcf must be one of 'pipe', 'ramp', None, found 'voronoi'"),
    ({"matrix": (8, 8, 8)}, r"trajectory 'golden' needs a 2-D matrix, found \[8, 8, 8\]"),
    ({"matrix": (8, 8), "trajectory": "kooshball"}, "trajectory 'kooshball' needs a 3-D matrix"),
    ({"coils": 0}, "coils must be a positive integer, found 0"),
    ({"snr": -3.0}, "snr must be a positive number"),
    ({"snr": "loud"}, "snr must be a positive number"),
    ({"seed": -1}, "seed must be a non-negative integer, found -1"),
    ({"spokes": 0}, "spokes must be a positive integer"),
    ({"interleaves": 4}, "interleaves apply to trajectory 'spiral' only, found trajectory 'golden'"),
    ({"trajectory": "spiral", "spokes": 10}, "spokes apply to radial trajectories"),
    ({"trajectory": "spiral", "interleaves": 0}, "interleaves must be a positive integer"),
    ({"trajectory": "spiral", "dcf": "ramp"}, "dcf 'ramp' is the radial ramp and does not fit"),
    ({"samples": 100}, "beyond the schema limit 16"),
], ids=["kind", "dcf", "matrix-3d", "matrix-2d", "coils", "snr", "snr-text", "seed", "spokes",
        "interleaves", "spiral-spokes", "spiral-interleaves", "spiral-ramp", "samples"])
def test_bad_arguments_raise(kwargs, match):
    arguments = {"matrix": (16, 16), "trajectory": "golden", "dcf": None, **kwargs}
    matrix = arguments.pop("matrix")
    trajectory = arguments.pop("trajectory")
    with pytest.raises(InvalidDataError, match=match):
        simulate_scan(matrix, trajectory, **arguments)


def test_progress_reports_every_sample_of_the_k_space():
    seen = []
    scan = simulate_scan((16, 16, 16), "kooshball", coils=2, spokes=400, progress=lambda done, total: seen.append(
        (done, total)))
    assert seen and seen[-1] == (scan.n_samples, scan.n_samples) and all(b >= a for (a, _), (b, _) in
                                                                          zip(seen, seen[1:]))


def test_a_time_series_refuses_what_it_does_not_simulate():
    with pytest.raises(InvalidDataError, match="spokes, field_map_peak: not simulated for a time series"):
        simulate_scan((16, 16), "golden", frames=2, spokes=30, field_map_peak=20.0)
    series = simulate_scan((16, 16), "golden", coils=2, frames=2, spokes_per_frame=10, gradient_delay=(0.5, 0.2))
    assert np.allclose(series.attrs["gradient_delay_samples"], [0.5, 0.2, 0.0])


def test_default_3d_simulations_are_64_cubed(tmp_path):
    from click.testing import CliRunner

    from mri_recon.cli import main

    done = CliRunner().invoke(main, ["simulate", str(tmp_path / "k.h5"), "--trajectory", "kooshball", "--coils", "1",
                                     "--spokes", "50"])
    assert done.exit_code == 0 and "matrix [64, 64, 64]" in done.output
