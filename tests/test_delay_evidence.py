"""Gradient delays on data like a scanner's: a phase that changes from spoke to spoke (the effect that broke
RING on a real scan), full- and half-circle spokes at 2x oversampling, the opposed-spoke estimator (BART's
default), what ``auto`` applies and what it refuses to, and BART's order of the delays."""

from __future__ import annotations

import numpy as np
import pytest

import mri_recon
from mri_recon.errors import InvalidDataError
from mri_recon.prep import delay
from mri_recon.prep.adaptive import estimate_delay as opposed_estimate
from mri_recon.prep.gradient_delay import correct_gradient_delay, parse_gradient_delay
from mri_recon.prep.ring import estimate_delay as ring_estimate
from mri_recon.sim import phantom
from mri_recon.sim.simulate import simulate_scan


def spoke_scan(rng, values, *, spokes: int, coils: int, circle: str, golden: bool = False, n: int = 64,
               snr: float = 20.0, phase: bool = True) -> mri_recon.Scan:
    """A 2D radial scan of ``2 n`` samples per spoke (k = 0 at sample n, as ``bart traj``) over a half or a
    full circle, its data at the positions delayed by ``values`` (independently of the library's model: the
    delay tensor applied to each unit direction, half a cycle per FOV a sample), a random phase per spoke and
    complex noise."""
    turn = {"half": np.pi, "full": 2 * np.pi}[circle]
    index = np.arange(spokes)
    theta = np.mod(index * np.pi * (np.sqrt(5) - 1) / 2, turn) if golden else turn * index / spokes
    direction = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    radius = (np.arange(2 * n) - n) / 2.0
    nominal = (radius[None, :, None] * direction[:, None, :]).reshape(-1, 2)
    tensor = np.array([[values[0], values[2]], [values[2], values[1]]])
    true = nominal + np.repeat(direction @ tensor.T / 2.0, 2 * n, axis=0)
    data = phantom.coil_kspace(true, (n, n), coils).astype(np.complex128)
    if phase:
        data *= np.repeat(np.exp(2j * np.pi * rng.random(spokes)), 2 * n)[None, :]
    sigma = np.sqrt(np.mean(np.abs(data) ** 2)) / snr
    data += sigma / np.sqrt(2) * (rng.standard_normal(data.shape) + 1j * rng.standard_normal(data.shape))
    return mri_recon.Scan(kspace=data.astype(np.complex64), trajectory=nominal.astype(np.float32), matrix=(n, n))


def random_delays(rng) -> tuple[float, float, float]:
    """Axis delays up to +-1.5 samples and a cross term up to +-0.5."""
    return (*rng.uniform(-1.5, 1.5, 2), float(rng.uniform(-0.5, 0.5)))


CASES = [("full", False, 29, 8), ("full", True, 69, 16), ("full", False, 400, 8), ("half", False, 69, 16),
         ("half", True, 29, 8), ("half", True, 400, 16)]


@pytest.mark.parametrize(("circle", "golden", "spokes", "coils"), CASES,
                         ids=[f"{c}-{'golden' if g else 'uniform'}-{s}spokes-{n}coils" for c, g, s, n in CASES])
def test_a_phase_per_spoke_leaves_the_estimate_and_auto_applies_it(rng, circle, golden, spokes, coils):
    values = random_delays(rng)
    scan = spoke_scan(rng, values, spokes=spokes, coils=coils, circle=circle, golden=golden,
                      snr=float(rng.uniform(10, 30)))
    found = ring_estimate(scan)
    assert np.max(np.abs(np.subtract(found.parameters, values))) < 0.02, (values, found.parameters)
    assert found.halves < 0.05 and found.rms < 0.1
    _, record = correct_gradient_delay(scan, "auto")
    assert record["gradient_delay"] != "none", record["gradient_delay_note"]
    assert np.max(np.abs(np.subtract(record["gradient_delay_samples"], values))) < 0.02
    assert record["gradient_delay_note"].endswith("applied") and record["gradient_delay_halves"] < 0.05


def test_opposed_spokes_find_the_delays_of_a_full_circle_whatever_each_spoke_phase(rng):
    isotropic = float(rng.uniform(-1.5, 1.5))
    scan = spoke_scan(rng, (isotropic, isotropic, 0.0), spokes=70, coils=8, circle="full", snr=1e4)
    assert np.max(np.abs(np.subtract(opposed_estimate(scan).parameters, (isotropic, isotropic, 0.0)))) < 0.005
    values = random_delays(rng)  # the transverse part of an anisotropic delay biases it slightly (docs)
    found = opposed_estimate(spoke_scan(rng, values, spokes=69, coils=16, circle="full", snr=20))
    assert found.method == "opposed" and np.max(np.abs(np.subtract(found.parameters, values))) < 0.06


def test_opposed_spokes_refuse_a_half_circle(rng):
    scan = spoke_scan(rng, (0.5, 0.5, 0.0), spokes=69, coils=8, circle="half")
    with pytest.raises(InvalidDataError, match="have an opposed partner.*full circle"):
        opposed_estimate(scan)
    with pytest.raises(InvalidDataError, match="have an opposed partner"):
        correct_gradient_delay(scan, "opposed")


def test_a_scan_without_delay_gets_nothing_applied_and_says_so(rng):
    scan = spoke_scan(rng, (0.0, 0.0, 0.0), spokes=69, coils=8, circle="full")
    same, record = correct_gradient_delay(scan, "auto")
    assert same[0] is scan and record["gradient_delay"] == "none"
    assert np.max(np.abs(record["gradient_delay_estimate"])) <= 0.02
    assert "no delay above 0.02 samples: not applied" in record["gradient_delay_note"]


def test_an_estimate_the_data_do_not_support_is_refused_by_name_and_left_out_by_auto(rng):
    scan = spoke_scan(rng, (0.5, -0.5, 0.0), spokes=69, coils=8, circle="full", snr=0.05)  # noise alone
    same, record = correct_gradient_delay(scan, "auto")
    assert same[0] is scan and record["gradient_delay"] == "none" and "gradient_delay_samples" not in record
    assert "not applied: " in record["gradient_delay_note"] and "gradient_delay_estimate" in record
    with pytest.raises(InvalidDataError, match=r"the ring gradient-delay estimate .* is not supported by the data: "
                                               r"its (even and odd spokes' estimates differ|equations' RMS)"):
        correct_gradient_delay(scan, "ring")


def test_one_coil_ring_is_refused_and_auto_falls_back_to_opposed_spokes():
    """One coil and 30 spokes: RING's estimate is off by tenths of a sample, and its halves and residual say so,
    so it is never applied; the opposed-spoke estimate passes its own checks and is (said on the result line)."""
    scan = simulate_scan((64, 64), "golden", coils=1, spokes=30, gradient_delay=(0.7, -0.4))
    with pytest.raises(InvalidDataError, match=r"not supported by the data: its (even and odd|equations' RMS)"):
        correct_gradient_delay(scan, "ring")
    _, record = correct_gradient_delay(scan, "auto")
    assert record["gradient_delay"] == "opposed" and record["gradient_delay_note"].startswith("auto: opposed")
    assert np.max(np.abs(np.subtract(record["gradient_delay_samples"], (0.7, -0.4, 0.0)))) < 0.15


def test_bart_order_is_taken_as_bart_writes_it():
    assert parse_gradient_delay("-0.617:-0.648:0.05") == ("bart", (-0.648, -0.617, 0.05))
    assert parse_gradient_delay(" BART:1:2:3 ") == ("bart", (2.0, 1.0, 3.0))
    assert delay.from_bart((1.0, 2.0, 3.0)) == (2.0, 1.0, 3.0)
    for bad in ("1:2", "bart:1:2:3:4", "1:x:2", "bart:"):
        with pytest.raises(InvalidDataError, match=r"BART's y:x:yx"):
            parse_gradient_delay(bad)


@pytest.mark.parametrize("bad", ["100,100", "1e6,0", "1e30,1e30", "bart:20:0:0"])
def test_delays_out_of_range_get_their_own_message(bad):
    with pytest.raises(InvalidDataError, match="out of range: a delay is at most 16 samples"):
        parse_gradient_delay(bad)


def _bart_traj_q(spokes: int, samples: int, q: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """``(nominal, delayed)`` as BART 0.8's ``traj -x samples -y spokes -D -q y:x:yx -O`` writes them, our
    columns = BART's dims 0, 1 (transcribed from BART's traj.c: the quadratic form acts on euler's
    (cos, sin), then both vectors' first two entries are swapped)."""
    angle = 2 * np.pi * np.arange(spokes) / spokes
    euler = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    form = np.array([[q[0], q[2]], [q[2], q[1]]])
    d = (euler @ form.T)[:, ::-1]
    read_dir = euler[:, ::-1]
    read = np.arange(samples) - samples // 2
    nominal = read[None, :, None] * read_dir[:, None, :]
    return nominal.reshape(-1, 2), (nominal + d[:, None, :]).reshape(-1, 2)


def test_bart_delays_correct_a_bart_trajectory():
    q = (-0.617, -0.648, 0.05)
    nominal, true = _bart_traj_q(69, 96, q)
    scan = mri_recon.Scan(kspace=np.ones((1, len(nominal)), np.complex64), trajectory=nominal.astype(np.float32),
                          matrix=(96, 96))
    corrected, record = correct_gradient_delay(scan, "bart:" + ":".join(str(v) for v in q))
    assert np.max(np.abs(corrected[0].trajectory - true)) < 1e-5
    assert record["gradient_delay"] == "given" and np.allclose(record["gradient_delay_samples"], [-0.648, -0.617, 0.05])
    swapped, _ = correct_gradient_delay(scan, ",".join(str(v) for v in q[:2]))  # our X,Y: the other order
    assert np.max(np.abs(swapped[0].trajectory - true)) > 0.02


@pytest.mark.parametrize("factor", [1e-20, 1e20])
def test_estimates_do_not_depend_on_the_datas_scale(rng, factor):
    """RING's squares overflowed float32 at 1e20 (an estimate of 0 that passed its checks) and its damping
    weighed at 1e-20; the readouts are now scaled to unit RMS first."""
    scan = spoke_scan(rng, random_delays(rng), spokes=69, coils=8, circle="full", snr=30)
    scaled = scan.replace(kspace=(scan.kspace.astype(np.complex128) * factor).astype(np.complex64))
    for estimate in (ring_estimate, opposed_estimate):
        np.testing.assert_allclose(estimate(scaled).parameters, estimate(scan).parameters, atol=1e-5)
    assert correct_gradient_delay(scaled, "auto")[1]["gradient_delay_samples"] == pytest.approx(
        correct_gradient_delay(scan, "auto")[1]["gradient_delay_samples"], abs=1e-5)
