"""The time-segmentation fit (interpolators, error, segment count, segment phases) against a straightforward
float64 reference: the K x M phase matrix of every sample, the normal equations and the residual summed
directly."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import relative

import mri_recon
from mri_recon.operators.offres import time_segments as ts
from mri_recon.operators.offres.setup import plan_correction
from mri_recon.sim.offres import field_map as synthetic_field_map
from mri_recon.sim.offres import readout_times


def reference_fit(field_map, times, segments, ridge):
    """``(b (M, L), tau, error, fitted (K, M), target (K, M))``, every sample time on its own, in float64."""
    f = np.asarray(field_map, np.float64).reshape(-1)
    values, counts = np.unique(f, return_counts=True)
    if len(values) > ts.HISTOGRAM_BINS:
        counts, edges = np.histogram(f, bins=ts.HISTOGRAM_BINS)
        values = 0.5 * (edges[:-1] + edges[1:])
    root = np.sqrt(counts.astype(np.float64))[:, None]
    t = np.asarray(times, np.float64)
    tau = t.min() + (np.arange(segments) + 0.5) * (t.max() - t.min()) / segments
    target = root * np.exp(-2j * np.pi * np.outer(values, t))
    basis = root * np.exp(-2j * np.pi * np.outer(values, tau))
    gram = basis.conj().T @ basis + ridge * counts.sum() * np.eye(segments)
    b = np.linalg.solve(gram, basis.conj().T @ target)
    fitted = basis @ b
    error = math.sqrt(np.sum(np.abs(target - fitted) ** 2) / (counts.sum() * len(t)))
    return b.T, tau, error, fitted, target, basis


def _times(rng, kind):
    if kind == "readouts":  # 12 readouts of the same 700 times: unique times from one readout
        return readout_times(8400, 700, 16e-3)
    if kind == "random":  # 3000 distinct times, no repeats
        return (rng.random(3000) * 12e-3 + 2e-3).astype(np.float32)
    if kind == "few":  # fewer distinct times than Chebyshev points: solved at the times themselves
        return np.repeat(np.linspace(0, 10e-3, 9), 40).astype(np.float32)
    return np.concatenate([readout_times(4000, 500, 16e-3), [0.5e-3]]).astype(np.float32)  # almost periodic


@pytest.mark.parametrize("kind", ["readouts", "random", "few", "broken"])
@pytest.mark.parametrize("offset", [0.0, 250.0], ids=["centred", "offset"])
@pytest.mark.parametrize("segments", [1, 4, 9])
def test_fit_matches_the_direct_float64_fit(rng, kind, offset, segments):
    """The fitted phase factors ``A b`` agree with the direct fit to 1e-11. b itself only to what the normal
    equations determine (condition up to 1 / ridge: two float64 orders of the same sums differ by 1e-10 ..
    1e-7), and so the error, a misfit 1e3 .. 1e4 times below the phase factors, to about 1e-8."""
    field = synthetic_field_map((40, 36), 150.0) + np.float32(offset) + rng.normal(0, 3, (40, 36)).astype(np.float32)
    times = _times(rng, kind)
    b, tau, error = ts.interpolators(field, times, segments)
    ref_b, ref_tau, ref_error, fitted, target, basis = reference_fit(field, times, segments, ts.RIDGE)
    assert b.shape == (len(times), segments) and b.dtype == np.complex128
    np.testing.assert_allclose(tau, ref_tau, rtol=1e-15)
    assert relative(basis @ b.T, fitted) < 1e-11
    assert relative(b, ref_b) < 1e-6
    assert abs(error - ref_error) <= 1e-7 * ref_error
    assert ts.interpolation_error(field, times, segments) == error
    assert relative(fitted, target) == pytest.approx(ref_error, rel=1e-9)  # the error is the RMS of the misfit


def test_plain_least_squares_and_a_field_map_of_few_values(rng):
    """ridge 0 (the simulator's float64 use) and a map of fewer values than bins (fitted on the values)."""
    field = rng.choice(np.array([-90.0, -20.0, 0.0, 35.0, 140.0], np.float32), size=(30, 30))
    times = readout_times(6000, 600, 12e-3)
    for segments in (2, 5):
        b, _, error = ts.interpolators(field, times, segments, ridge=0.0)
        _, _, ref_error, fitted, _, basis = reference_fit(field, times, segments, 0.0)
        assert relative(basis @ b.T, fitted) < 1e-11
        assert abs(error - ref_error) <= 1e-7 * ref_error + 1e-13
    assert ts.interpolation_error(field, times, 5, ridge=0.0) < 1e-12  # 5 values, 5 segments: exact


def test_lagrange_blocks_give_the_same_fit(rng, monkeypatch):
    field = synthetic_field_map((24, 24), 120.0)
    times = (rng.random(5000) * 16e-3).astype(np.float32)
    whole = ts.interpolators(field, times, 6)
    monkeypatch.setattr(ts, "LAGRANGE_COLUMNS", 1000)
    blocks = ts.interpolators(field, times, 6)
    assert relative(blocks[0], whole[0]) < 1e-14 and blocks[2] == pytest.approx(whole[2], rel=1e-14)


def test_segment_count_search_agrees_with_the_direct_errors(rng):
    field = synthetic_field_map((32, 32), 150.0)
    times = readout_times(8000, 1000, 16e-3)
    for tol in (1e-2, 1e-3, 1e-4):
        count = ts.choose_segments(field, times, tol)
        assert reference_fit(field, times, count, ts.RIDGE)[2] <= tol < reference_fit(field, times, count - 1,
                                                                                       ts.RIDGE)[2]


@pytest.mark.parametrize("times", [
    np.tile(np.arange(5, dtype=np.float32), 4),                                  # 4 readouts
    np.array([0.0, 1.0, 0.0, 2.0], np.float32),                                  # t[0] repeats, not periodic
    np.concatenate([np.tile(np.arange(3.0), 3), [0.0, 1.0, 5.0]]).astype(np.float32),  # last copy differs
    np.array([3.0], np.float32),                                                 # one sample
    np.array([2.0, 1.0, 2.0, 1.0, 2.0, 1.0]),                                    # unsorted copies, float64
], ids=["periodic", "repeat-not-periodic", "broken-copy", "one", "unsorted"])
def test_unique_times_are_numpys(times):
    unique, inverse, counts, copies = ts._unique_times(times)
    ref_unique, ref_inverse, ref_counts = np.unique(times.astype(np.float64), return_inverse=True,
                                                    return_counts=True)
    assert np.array_equal(unique, ref_unique) and unique.dtype == np.float64
    assert np.array_equal(counts, ref_counts)
    assert np.array_equal(np.tile(inverse, copies), ref_inverse.reshape(-1))


@pytest.mark.parametrize("omega", [0.0, 0.3, 7.5, 15.0, 60.0])
def test_chebyshev_points_interpolate_the_exponentials(omega):
    """At the chosen n the interpolant of exp(i w x) is exact to rounding for |w| <= omega (also at the
    nodes themselves), and the bound 8 (omega/2)^n / n! holds."""
    n = ts._chebyshev_points(omega)
    assert n > omega and (omega == 0 or 8 * (omega / 2) ** n / math.factorial(n) <= ts.CHEBYSHEV_TAIL)
    nodes = np.cos(np.pi * np.arange(n) / (n - 1))
    x = np.concatenate([np.linspace(-1, 1, 2001), nodes[::3]])
    lagrange = ts._barycentric(nodes, x)
    assert np.isfinite(lagrange).all()
    for w in (omega, -0.7 * omega):
        exact = np.exp(1j * w * x)
        assert np.abs(np.exp(1j * w * nodes) @ lagrange - exact).max() < 1e-13


@pytest.mark.parametrize("segments", [1, 2, 3, 10])
def test_segment_phases_are_the_exponentials(rng, segments):
    field = (150 * rng.standard_normal((17, 9))).astype(np.float32)
    tau = ts.segment_times(np.array([0.0, 16e-3]), segments)
    direct = np.exp(-2j * np.pi * field.astype(np.float64)[None] * tau[:, None, None])
    assert relative(ts.segment_phases(field, tau, np.complex128), direct) < 1e-14
    single = ts.segment_phases(field, tau)
    assert single.dtype == np.complex64 and np.abs(single - direct).max() < 1.2e-7
    uneven = np.array([0.0, 1e-3, 5e-3, 6e-3])  # not equally spaced: one exponential each
    assert relative(ts.segment_phases(field, uneven, np.complex128),
                    np.exp(-2j * np.pi * field.astype(np.float64)[None] * uneven[:, None, None])) < 1e-15


def test_planned_correction_is_the_fit_of_the_chosen_segments():
    scan = mri_recon.simulate_scan((64, 64), "spiral", coils=2, snr=None, field_map_peak=150, readout_ms=16)
    plan = plan_correction(scan.field_map, scan.times, 2, gpu=True, correction="segmented")
    count = ts.choose_segments(scan.field_map, scan.times)
    b, tau, error = ts.interpolators(scan.field_map, scan.times, count)
    assert plan.segments == count and plan.error == error
    assert plan.b.dtype == np.complex64 and plan.b.shape == (scan.n_samples, count)
    assert relative(plan.b, b) < 1e-7
    direct = np.exp(-2j * np.pi * scan.field_map.astype(np.float64)[None] * tau[:, None, None])
    assert plan.phases.dtype == np.complex64 and relative(plan.phases, direct) < 1e-7


def test_planned_correction_carries_the_interpolators_of_the_distinct_times():
    scan = mri_recon.simulate_scan((32, 32), "spiral", coils=1, snr=None, field_map_peak=150, readout_ms=16)
    plan = plan_correction(scan.field_map, scan.times, 1, gpu=True, correction="segmented")
    assert plan.index.dtype == np.int32 and plan.index.shape == (scan.n_samples,)
    assert plan.table.shape == (len(np.unique(scan.times)), plan.segments) and len(plan.table) < scan.n_samples // 2
    np.testing.assert_array_equal(plan.b, plan.table[plan.index])


@pytest.mark.gpu
def test_uploaded_correction_makes_the_same_interpolators_and_phases_on_the_gpu():
    from mri_recon.arrays.backend import Device, to_host

    scan = mri_recon.simulate_scan((48, 40), "spiral", coils=1, snr=None, field_map_peak=150, readout_ms=16)
    host = plan_correction(scan.field_map, scan.times, 1, gpu=True, correction="segmented")
    b, phases = host.b.copy(), host.phases.copy()
    host.upload(Device(0))
    np.testing.assert_array_equal(to_host(host.b), b)  # a gather: the same bits
    assert relative(to_host(host.phases), phases) < 1e-7
