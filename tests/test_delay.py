"""Gradient delays: the model against an independent oracle, RING estimates on fresh random delays (2D radial,
golden angle, stack of stars, kooshball, noise), the correction through prepare_scan / reconstruct and its
record, refusals and parsing."""

from __future__ import annotations

import numpy as np
import pytest

import mri_recon
from mri_recon.errors import InvalidDataError
from mri_recon.prep import delay, prepare_scan
from mri_recon.prep.gradient_delay import correct_gradient_delay, parse_gradient_delay
from mri_recon.prep.ring import estimate_delay
from mri_recon.sim import phantom, trajectories
from mri_recon.sim.simulate import simulate_scan


def _random_delay(rng, plane: int = 2) -> tuple[float, ...]:
    """Axis delays in [-1.2, 1.2] samples and a cross term in [-0.3, 0.3]."""
    axes = rng.uniform(-1.2, 1.2, plane)
    cross = rng.uniform(-0.3, 0.3, 1 if plane == 2 else 3)
    return tuple(axes) + tuple(cross)


def _oracle_radial(n: int, spokes: int, tensor: np.ndarray, golden: bool) -> np.ndarray:
    """Delayed 2D radial positions written out from the angles: ``(s - S/2)/2 dir + S dir / 2``."""
    theta = trajectories.spoke_angles(spokes, golden=golden)
    direction = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    radius = (np.arange(2 * n) - n) / 2.0
    k = radius[None, :, None] * direction[:, None, :] + (direction @ tensor.T)[:, None, :] / 2.0
    return k.reshape(-1, 2)


def test_simulated_delay_samples_the_true_positions_and_stores_the_nominal_ones(rng):
    values = _random_delay(rng)
    scan = simulate_scan((24, 24), "golden", coils=2, snr=None, spokes=12, dcf=None, gradient_delay=values)
    nominal = simulate_scan((24, 24), "golden", coils=2, snr=None, spokes=12, dcf=None)
    assert np.array_equal(scan.trajectory, nominal.trajectory)
    true = _oracle_radial(24, 12, delay.tensor_of(values, 2), golden=True)
    expected = phantom.coil_kspace(true, (24, 24), 2)
    assert np.linalg.norm(scan.kspace - expected) / np.linalg.norm(expected) < 1e-5
    assert np.allclose(scan.attrs["gradient_delay_samples"], values)


def test_shift_moves_each_spoke_by_the_tensor_and_back(rng):
    values = _random_delay(rng)
    k = trajectories.radial((32, 32), 10, golden=False)
    readouts = delay.radial_readouts(k, 64)
    tensor = delay.tensor_of(values, 2)
    moved = delay.shift_trajectory(k, readouts, tensor)
    assert np.allclose(moved, _oracle_radial(32, 10, tensor, golden=False), atol=1e-5)
    assert np.allclose(delay.shift_trajectory(moved, readouts, -tensor), k, atol=1e-5)  # same steps
    along = delay.shift_trajectory(k, readouts, tensor, transverse=False) - k  # BART traj -q without -O
    direction = readouts.steps / np.linalg.norm(readouts.steps, axis=1, keepdims=True)
    projected = np.einsum("rd,de,re->r", direction, tensor, direction) / 2.0
    assert np.allclose(along.reshape(10, 64, 2), (projected[:, None] * direction)[:, None, :], atol=1e-5)


@pytest.mark.parametrize("kind", ["golden", "radial"])
def test_ring_finds_fresh_random_delays(kind, rng):
    values = _random_delay(rng)
    scan = simulate_scan((64, 64), kind, coils=4, snr=30, seed=int(rng.integers(1000)), gradient_delay=values)
    found = estimate_delay(scan)
    assert np.max(np.abs(np.subtract(found.parameters, values))) < 0.02, (values, found.parameters)
    assert found.spokes == scan.attrs["spokes"] and found.equations > found.spokes


def test_ring_is_robust_to_noise(rng):
    values = _random_delay(rng)
    scan = simulate_scan((64, 64), "golden", coils=4, snr=3, seed=int(rng.integers(1000)), gradient_delay=values)
    found = estimate_delay(scan)
    assert np.max(np.abs(np.subtract(found.parameters, values))) < 0.05, (values, found.parameters)
    assert np.all(found.std < 0.05)


def test_ring_on_a_stack_of_stars(rng):
    values = _random_delay(rng)
    scan = simulate_scan((48, 48, 6), "stack-of-stars", coils=4, snr=30, spokes=40, seed=1, gradient_delay=values)
    found = estimate_delay(scan)
    assert found.tensor.shape == (2, 2) and found.spokes == 3 * 40  # the three central partitions
    assert np.max(np.abs(np.subtract(found.parameters, values))) < 0.02, (values, found.parameters)


def test_ring_on_a_kooshball(rng):
    values = _random_delay(rng, plane=3)
    scan = simulate_scan((32, 32, 32), "kooshball", coils=4, snr=30, spokes=500, seed=2, gradient_delay=values)
    found = estimate_delay(scan)
    assert found.tensor.shape == (3, 3)
    assert np.max(np.abs(np.subtract(found.parameters, values))) < 0.05, (values, found.parameters)


def test_one_estimate_for_the_frames_of_a_scan(rng):
    values = _random_delay(rng)
    frames = [simulate_scan((48, 48), "golden", coils=4, spokes=21, seed=s, gradient_delay=values) for s in (1, 2, 3)]
    corrected, record = correct_gradient_delay(frames, "ring")
    assert record["gradient_delay"] == "ring" and "3 frames" in record["gradient_delay_note"]
    assert record["gradient_delay_spokes"] == 63
    assert np.max(np.abs(np.subtract(record["gradient_delay_samples"], values))) < 0.03
    tensor = delay.tensor_of(record["gradient_delay_samples"], 2)
    for frame, done in zip(frames, corrected):
        expected = delay.shift_trajectory(frame.trajectory, delay.radial_readouts(frame.trajectory, 96), tensor)
        assert np.array_equal(done.trajectory, expected)


def test_prepare_scan_corrects_and_records(rng):
    values = _random_delay(rng)
    scan = simulate_scan((48, 48), "golden", coils=4, seed=4, gradient_delay=values)
    ready, record = prepare_scan(scan, gradient_delay="auto")
    assert record["gradient_delay"] == "ring" and record["gradient_delay_note"].startswith("auto: ring estimate")
    assert len(record["gradient_delay_samples"]) == 3 and len(record["gradient_delay_std"]) == 3
    truth = _oracle_radial(48, scan.attrs["spokes"], delay.tensor_of(values, 2), golden=True)
    assert np.max(np.abs(ready.trajectory - truth)) < 0.02
    same, none = prepare_scan(scan)  # the default: nothing done, nothing recorded
    assert np.array_equal(same.trajectory, scan.trajectory) and not any(k.startswith("gradient") for k in none)
    given, record = prepare_scan(scan, gradient_delay=values[:2])
    assert record["gradient_delay"] == "given" and record["gradient_delay_samples"] == [*values[:2], 0.0]


def test_corrected_reconstruction_matches_the_scan_without_delays():
    clean = simulate_scan((64, 64), "golden", coils=4, seed=5)
    scan = simulate_scan((64, 64), "golden", coils=4, seed=5, gradient_delay=(1.0, 0.5))

    def nrmse(s, **options):
        image = mri_recon.reconstruct(s, device="cpu", iterations=15, **options).image
        return np.linalg.norm(image - s.ground_truth) / np.linalg.norm(s.ground_truth)

    reference = nrmse(clean)
    assert nrmse(scan) > 1.5 * reference  # the delay matters ...
    assert nrmse(scan, gradient_delay="ring") < 1.05 * reference  # ... and is corrected


def test_auto_leaves_a_spiral_and_a_short_scan_alone_and_says_so():
    spiral = simulate_scan((32, 32), "spiral", coils=2, interleaves=4)
    ready, record = prepare_scan(spiral, gradient_delay="auto")
    assert np.array_equal(ready.trajectory, spiral.trajectory) and record["gradient_delay"] == "none"
    assert "not a radial scan" in record["gradient_delay_note"]
    short = simulate_scan((32, 32), "golden", coils=2, spokes=6)
    ready, record = prepare_scan(short, gradient_delay="auto")
    assert np.array_equal(ready.trajectory, short.trajectory) and "6 spokes" in record["gradient_delay_note"]
    with pytest.raises(InvalidDataError, match="at least 8 spokes"):
        prepare_scan(short, gradient_delay="ring")


@pytest.mark.parametrize("choice", ["ring", "0.5,0.5"])
def test_a_spiral_is_refused_by_ring_and_given_delays(choice):
    spiral = simulate_scan((32, 32), "spiral", coils=2, interleaves=4)
    with pytest.raises(InvalidDataError, match="radial scans only.*not straight"):
        prepare_scan(spiral, gradient_delay=choice)
    with pytest.raises(InvalidDataError, match="radial trajectories"):
        simulate_scan((32, 32), "spiral", coils=2, interleaves=4, gradient_delay=(0.5, 0.5))


@pytest.mark.parametrize("bad", ["1", "1,2,3,4", "a,b", "nan,1", "1,inf", "", "ring,1", True, 3.0, (1,), [1, "x"]])
def test_bad_delays_are_refused_with_the_accepted_forms(bad):
    with pytest.raises(InvalidDataError, match=r"auto, ring, opposed, none, X,Y\[,Z\] .* or BART's y:x:yx"):
        parse_gradient_delay(bad)


def test_parsing_and_the_number_of_values_per_kind():
    assert parse_gradient_delay(" Auto ") == ("auto", None)
    assert parse_gradient_delay("0.3,-0.2") == ("given", (0.3, -0.2))
    assert parse_gradient_delay((1, 2, 3)) == ("given", (1.0, 2.0, 3.0))
    stack = simulate_scan((16, 16, 4), "stack-of-stars", coils=2, spokes=20)
    with pytest.raises(InvalidDataError, match="stack-of-stars scan takes a gradient delay X,Y .*phase-encoded"):
        prepare_scan(stack, gradient_delay="1,2,3")
    koosh = simulate_scan((12, 12, 12), "kooshball", coils=2, spokes=40)
    with pytest.raises(InvalidDataError, match="kooshball scan takes a gradient delay X,Y,Z"):
        prepare_scan(koosh, gradient_delay="1,2")


def test_readout_length_without_attributes():
    scan = simulate_scan((24, 24), "radial", coils=2, spokes=10)
    bare = scan.replace(attrs={})
    assert delay.readout_length(bare) == 48
    assert delay.radial_readouts(bare.trajectory, 48).kind == "radial"


def test_centre_out_spokes_are_refused_by_ring_and_left_alone_by_auto():
    scan = simulate_scan((32, 32), "golden", coils=2, spokes=40)
    k = scan.trajectory.reshape(40, 64, 2)[:, 32:].reshape(-1, 2)  # the second half of every spoke
    half = scan.replace(trajectory=k, kspace=scan.kspace.reshape(2, 40, 64)[:, :, 32:].reshape(2, -1),
                        weights=None, attrs={**scan.attrs, "samples": 32})
    with pytest.raises(InvalidDataError, match="centre-out"):
        prepare_scan(half, gradient_delay="ring")
    ready, record = prepare_scan(half, gradient_delay="auto")
    assert np.array_equal(ready.trajectory, half.trajectory) and "centre-out" in record["gradient_delay_note"]


def test_pairs_within_a_window_of_a_golden_angle_stream(rng):
    values = _random_delay(rng)
    scan = simulate_scan((48, 48), "golden", coils=4, spokes=120, seed=8, gradient_delay=values)
    found = estimate_delay(scan, window=8)  # golden angle: a spoke within 4 readouts is 5 degrees from orthogonal
    assert np.max(np.abs(np.subtract(found.parameters, values))) < 0.02, (values, found.parameters)


def test_a_bart_style_trajectory_with_k0_between_samples(rng):
    """BART's ``traj -r`` puts k = 0 half a sample off sample S/2; the estimate does not depend on it."""
    values = _random_delay(rng)
    n, spokes, samples = 48, 60, 96
    theta = trajectories.spoke_angles(spokes, golden=True)
    direction = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    radius = (np.arange(samples) + 0.5 - samples / 2) / 2.0
    nominal = (radius[None, :, None] * direction[:, None, :]).reshape(-1, 2)
    true = nominal + np.repeat(direction @ delay.tensor_of(values, 2).T / 2.0, samples, axis=0)
    scan = mri_recon.Scan(kspace=phantom.coil_kspace(true, (n, n), 4), trajectory=nominal, matrix=(n, n))
    found = estimate_delay(scan)  # readouts found from the trajectory alone (no attributes)
    assert np.max(np.abs(np.subtract(found.parameters, values))) < 0.02, (values, found.parameters)


def test_an_anisotropic_matrix(rng):
    values = _random_delay(rng)
    scan = simulate_scan((64, 40), "golden", coils=4, seed=9, gradient_delay=values)
    found = estimate_delay(scan)
    assert np.max(np.abs(np.subtract(found.parameters, values))) < 0.02, (values, found.parameters)
