"""F^H d with off-resonance by the time recurrence (fhd.cu FHD_OFFRES 1 + FHD_RECUR 1): the host's runs of a
uniform step, the records and the per-voxel steps (CPU), the kernel's arithmetic emulated in float32 NumPy
on those records (CPU), and the kernel itself against the float64 oracle (GPU)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import adjoint_gap, kernel_offres_turns, kernel_phasor, poison_empty, relative

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import InvalidDataError
from mri_recon.kernels.configs import (
    OFFRES_RESEED,
    fhd_record_words,
    offres_adjoint_defines,
    offres_recur_positions,
    offres_rotates,
)
from mri_recon.operators.engines import gpu_layout as layout
from mri_recon.operators.offres import gpu_offres
from mri_recon.operators.offres.gpu_offres_layout import (
    RUN_SAMPLES,
    STEP_TOLERANCE_TURNS,
    adjoint_records,
    fixed_point_offres,
    prepare_offres,
    step_phasors,
    time_runs,
    uses_recurrence,
)
from mri_recon.operators.offres.model import offres_adjoint
from mri_recon.sim.offres import readout_times

TOL = 2e-5  # the exact kernels' accuracy requirement (relative L2 error against float64)
DWELL = 16e-3 / 1024  # 16 ms readouts of 1024 samples


def _field(rng, matrix, peak=150.0):
    return (peak * (2 * rng.random(matrix) - 1)).astype(np.float32)


def _problem(rng, matrix, coils, readouts, per_readout, peak=150.0, readout=16e-3, offset=0.0):
    """Random trajectory and data; times of ``readouts`` readouts of ``per_readout`` samples at a constant
    dwell time (float32, as the launchers take them), starting at ``offset`` s."""
    samples = readouts * per_readout
    k = ((rng.random((samples, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    t = (readout_times(samples, per_readout, readout) + np.float32(offset)).astype(np.float32)
    d = (rng.standard_normal((coils, samples)) + 1j * rng.standard_normal((coils, samples))).astype(np.complex64)
    return k, _field(rng, matrix, peak), t, d


# ----------------------------------------------------------------------------------------------------
# Runs of a uniform step (host, NumPy; the launchers run the same code on CuPy arrays)


def _runs(times, field):
    fixed, taus, _ = fixed_point_offres(field.reshape(-1), times)
    return fixed, taus, time_runs(taus, fixed)


def _worst_phase(taus, fixed, runs):
    """Largest |F| |(tau_a - tau_b) - (a - b) dtau| 2^-48 (turns) over pairs of samples between re-seeds."""
    tau = taus.astype(np.float64)
    seeds = np.flatnonzero(runs.flags)
    worst = 0.0
    for begin, end in zip(seeds, [*seeds[1:], len(tau)], strict=True):
        deviation = tau[begin:end] - tau[begin] - np.arange(end - begin) * runs.dtau
        worst = max(worst, float(deviation.max() - deviation.min()))
    return worst * float(np.abs(fixed.astype(np.int64)).max()) * 2.0**-48


@pytest.mark.parametrize("readouts, per_readout", [(1, 1), (1, 1000), (3, 200), (8, 64), (5, 7 * OFFRES_RESEED + 3)],
                         ids=str)
@pytest.mark.parametrize("offset", [0.0, -8e-3, 3e-3], ids=["from-0", "negative", "echo-time"])
def test_readouts_at_a_constant_dwell_time_form_one_run_each(rng, readouts, per_readout, offset):
    times = (readout_times(readouts * per_readout, per_readout, per_readout * DWELL)
             + np.float32(offset)).astype(np.float32)
    fixed, taus, runs = _runs(times, _field(rng, (6, 5)))
    assert runs is not None and runs.runs == readouts
    assert runs.flags.dtype == np.uint32 and runs.flags.shape == times.shape
    m = np.arange(len(times))
    np.testing.assert_array_equal(np.flatnonzero(runs.flags),
                                  np.flatnonzero((m % per_readout == 0) | (m % OFFRES_RESEED == 0)))
    if per_readout > 1:
        assert abs(runs.dtau - DWELL * 2.0**32) < 1e-3 * DWELL * 2.0**32  # the mean step, not an integer
    else:
        assert runs.dtau == 0.0
    assert _worst_phase(taus, fixed, runs) <= STEP_TOLERANCE_TURNS
    assert runs.steps.dtype == np.complex64 and runs.steps.shape == (30,)


def test_steps_are_the_phase_of_one_uniform_step(rng):
    fixed = np.concatenate([np.rint(rng.uniform(-3e4, 3e4, 50) * 65536), [0, 2**31 - 1, -(2**31) + 1]])
    fixed = fixed.astype(np.int32)
    dtau = DWELL * 2.0**32 + 0.37
    steps = step_phasors(fixed, dtau)
    exact = np.exp(2j * np.pi * fixed.astype(np.float64) * 2.0**-16 * dtau * 2.0**-32) - 1
    assert steps.dtype == np.complex64
    assert np.all(np.abs(steps - exact) <= 1e-7 * np.abs(exact))  # relative to r, not to 1 + r
    assert steps[50] == 0


def test_times_far_from_zero_lose_the_recurrence(rng):
    """float32 times near 0.3 s are 3e-8 s apart: beyond the tolerance at 150 Hz (the phasor kernel runs)."""
    times = (readout_times(2048, 1024, 16e-3) + np.float32(0.3)).astype(np.float32)
    assert _runs(times, _field(rng, (6, 5)))[2] is None


def test_irregular_times_have_no_runs(rng):
    times = np.sort(rng.random(500) * 16e-3).astype(np.float32)
    assert _runs(times, _field(rng, (6, 5)))[2] is None
    # steps alternating between two dwell times: every sample would start a run
    steps = np.where(np.arange(400) % 2 == 0, 1.0, 1.5) * DWELL
    assert _runs(np.cumsum(steps).astype(np.float32), _field(rng, (6, 5)))[2] is None


def test_short_readouts_take_the_phasor_kernel(rng):
    field = _field(rng, (6, 5))
    for per_readout, accepted in ((RUN_SAMPLES, True), (RUN_SAMPLES - 1, False)):
        times = readout_times(40 * per_readout, per_readout, per_readout * DWELL)
        runs = _runs(times, field)[2]
        assert (runs is not None) == accepted and (not accepted or runs.runs == 40)


def test_a_zero_field_makes_any_times_one_run(rng):
    times = (rng.random(300) * 16e-3).astype(np.float32)
    fixed, taus, runs = _runs(times, np.zeros((4, 4), np.float32))
    assert runs is not None and runs.runs == 1
    np.testing.assert_array_equal(runs.steps, np.zeros(16, np.complex64))
    assert np.flatnonzero(runs.flags).tolist() == list(range(0, 300, OFFRES_RESEED))


def test_few_irregular_samples_start_their_own_runs(rng):
    times = readout_times(2048, 1024, 16e-3)
    times[700] += np.float32(3e-6)  # one late sample: its step and the next are irregular
    fixed, taus, runs = _runs(times, _field(rng, (6, 5)))
    assert runs is not None and runs.runs == 4  # 0, 700, 701, 1024
    assert runs.flags[[0, 700, 701, 1024]].all()
    assert _worst_phase(taus, fixed, runs) <= STEP_TOLERANCE_TURNS


def test_a_run_off_the_grid_reseeds_at_every_sample(rng):
    """A readout with a slightly different dwell time passes the step test (its steps are within the
    tolerance of the median) but drifts off the common grid: its samples re-seed one by one."""
    field = _field(rng, (6, 5), peak=400.0)
    times = readout_times(16 * 1024, 1024, 16e-3).astype(np.float64)
    times[1024:2048] *= 1 + 2e-6
    fixed, taus, runs = _runs(times.astype(np.float32), field)
    assert runs is not None and runs.runs == 15 + 1024 and runs.flags[1024:2048].all()
    assert abs(runs.dtau - DWELL * 2.0**32) < 0.05  # the median run's step, unbiased by the odd readout
    assert _worst_phase(taus, fixed, runs) <= STEP_TOLERANCE_TURNS
    # four readouts at four dwell times: every sample its own run, beyond RUN_SAMPLES: the phasor kernel
    several = readout_times(1024, 256, 4e-3).astype(np.float64) * np.repeat(1 + 1e-5 * np.arange(4), 256)
    assert _runs(several.astype(np.float32), field)[2] is None


def test_strong_fields_tighten_the_tolerance(rng):
    """float32 times deviate from their grid by about 1e-9 s: within 2^-20 turns at 150 Hz, beyond it at
    30 kHz, where the phasor kernel is taken."""
    times = readout_times(2048, 1024, 16e-3)
    assert _runs(times, _field(rng, (6, 5), peak=150.0))[2] is not None
    assert _runs(times, _field(rng, (6, 5), peak=30000.0))[2] is None


def test_choice_follows_the_times(rng):
    field = _field(rng, (6, 5))
    uniform = prepare_offres(field, readout_times(400, 100, 16e-3))
    irregular = prepare_offres(field, (rng.random(400) * 16e-3).astype(np.float32))
    assert uniform.runs is not None and irregular.runs is None
    assert uses_recurrence(uniform, None) and uses_recurrence(uniform, True) and not uses_recurrence(uniform, False)
    assert not uses_recurrence(irregular, None) and not uses_recurrence(irregular, False)
    with pytest.raises(InvalidDataError, match="recur=True needs sample times in runs of one uniform step"):
        uses_recurrence(irregular, True)


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("coils", [1, 2, 3, 8])
def test_records_carry_time_and_flags(rng, dim, coils):
    matrix = (5, 4, 3)[:dim]
    k, field, t, d = _problem(rng, matrix, coils, 2, 50)
    prepared = prepare_offres(field, t)
    kfix = layout.fixed_point_turns(k, matrix)
    records = adjoint_records(kfix, prepared.taus, d, prepared.runs.flags)
    words = fhd_record_words(dim, coils, False, True, True)
    assert records.shape == (100, words) and records.dtype == np.uint32
    assert words == (4 if dim == 2 else 6) + 2 * coils  # K, tau, flags, padding to float2
    assert offres_adjoint_defines(dim, coils, True)["FHD_WORDS"] == words
    np.testing.assert_array_equal(records[:, :dim], kfix)
    np.testing.assert_array_equal(records[:, dim].view(np.int32), prepared.taus)
    np.testing.assert_array_equal(records[:, dim + 1], prepared.runs.flags)
    np.testing.assert_array_equal(records[:, words - 2 * coils:].view(np.float32).view(np.complex64), d.T)
    if dim == 3:
        assert not records[:, dim + 2:words - 2 * coils].any()


def test_configurations_by_coil_count():
    for dim in (2, 3):
        for coils in range(1, 9):
            defines = offres_adjoint_defines(dim, coils, True)
            assert defines["FHD_RECUR"] == 1 and defines["FHD_OFFRES"] == 1
            assert defines["FHD_ROTATE"] == int(offres_rotates(coils)) == int(coils == 1)
            assert defines["FHD_VOX"] == offres_recur_positions(coils)
            assert offres_adjoint_defines(dim, coils, True, not offres_rotates(coils))["FHD_ROTATE"] != \
                defines["FHD_ROTATE"]
            assert "FHD_ROTATE" not in offres_adjoint_defines(dim, coils)


# ----------------------------------------------------------------------------------------------------
# The kernel's arithmetic in float32 NumPy on the host records (no GPU)


def emulate_recur_adjoint(records, prepared, matrix, coils, vox, rotate, parts):
    """NumPy replica of fhd.cu's time recurrence in float32: the paired line list, the voxel and mirror of
    every position, E re-seeded at each row's first sample and at flagged samples, then walked by
    ``E (1 + r)`` (``rotate=False``: U += d exp(+i theta) E_o, W += d exp(-i theta) E_m), or rotating sums
    ``H <- H conj(1 + r) + d exp(+-i theta)`` moved out exactly at re-seeds and at the end (``rotate=True``).
    The samples split into ``parts`` row shares as in the kernel; exp(i theta) is the exact fixed-point
    phasor of each position (the angle-addition recurrence along the positions is the plain kernel's)."""
    dim, n_voxels = len(matrix), math.prod(matrix)
    lines = layout.line_list(matrix, True)
    per_line = -(-layout.line_positions(matrix, True) // vox) * vox
    own, mirror = (a.reshape(-1) for a in layout.position_voxels(matrix, lines, np.arange(per_line)))
    c2 = [2 * (n // 2) for n in matrix]
    q = [np.repeat(2 * lines[:, 0].astype(np.int64) - c2[0], per_line)]
    if dim == 3:
        q.append(np.repeat(2 * lines[:, 1].astype(np.int64) - c2[1], per_line))
    q.append(np.tile(2 * np.arange(per_line) - c2[-1], len(lines)))
    q = [(a % 2**32).astype(np.uint32) for a in q]
    fixed = np.append(prepared.fixed, np.int32(0))  # index n_voxels: an absent voxel, f = 0, r = 0
    steps = np.append(prepared.runs.steps, np.complex64(0))
    f_own, f_mirror = fixed[own], fixed[mirror]
    r_own, r_mirror = steps[own], steps[mirror]
    if rotate:
        r_own, r_mirror = (np.complex64(1) + r_own).conj(), (np.complex64(1) + r_mirror).conj()
    data = records[:, -2 * coils:].view(np.float32).view(np.complex64)  # (M, coils)
    taus, flags = records[:, dim].view(np.int32), records[:, dim + 1]

    def exact(f, tau):
        c, s = kernel_phasor(kernel_offres_turns(f, tau) + np.uint32(0x100))
        return (c + 1j * s).astype(np.complex64)

    n_samples = records.shape[0]
    share = -(-n_samples // parts)
    total_u = np.zeros((coils, own.size), np.complex64)
    total_w = np.zeros((coils, own.size), np.complex64)
    for part in range(parts):
        begin, end = min(n_samples, part * share), min(n_samples, (part + 1) * share)
        u = np.zeros((coils, own.size), np.complex64)
        w = np.zeros((coils, own.size), np.complex64)
        hu, hw = np.zeros_like(u), np.zeros_like(w)
        e_own = e_mirror = None
        for m in range(begin, end):
            turns = sum(records[m, axis] * q[axis] for axis in range(dim)) + np.uint32(0x100)
            c, s = kernel_phasor(turns.astype(np.uint32))
            plus = (c + 1j * s).astype(np.complex64)  # exp(+i theta) of the voxel; its mirror's is the conjugate
            if rotate:
                if m != begin and flags[m]:
                    u += exact(f_own, taus[m - 1]) * hu
                    w += exact(f_mirror, taus[m - 1]) * hw
                    hu[:], hw[:] = 0, 0
                hu = hu * r_own + data[m, :, None] * plus
                hw = hw * r_mirror + data[m, :, None] * plus.conj()
            else:
                if m == begin or flags[m]:
                    e_own, e_mirror = exact(f_own, taus[m]), exact(f_mirror, taus[m])
                else:
                    e_own, e_mirror = e_own + e_own * r_own, e_mirror + e_mirror * r_mirror
                u += data[m, :, None] * (plus * e_own)
                w += data[m, :, None] * (plus.conj() * e_mirror)
        if rotate and end > begin:
            u += exact(f_own, taus[end - 1]) * hu
            w += exact(f_mirror, taus[end - 1]) * hw
        total_u += u
        total_w += w
    out = np.full((coils, n_voxels + 1), np.nan, np.complex64)
    written = np.zeros(n_voxels + 1, int)
    np.add.at(written, own, 1)
    np.add.at(written, mirror, 1)
    assert (written[:n_voxels] == 1).all(), "every voxel is the own or mirror voxel of exactly one position"
    out[:, own] = total_u
    out[:, mirror] = total_w
    return (out[:, :n_voxels] * prepared.shift).reshape(coils, *matrix)


@pytest.mark.parametrize("matrix", [(6, 5), (9, 8), (1, 1), (7, 1), (4, 3, 5), (5, 4, 3)], ids=str)
@pytest.mark.parametrize("rotate", [False, True], ids=["walk", "rotate"])
@pytest.mark.parametrize("parts", [1, 3])
def test_emulated_recurrence_matches_the_oracle(rng, matrix, rotate, parts):
    coils = 2
    k, field, t, d = _problem(rng, matrix, coils, 3, 2 * OFFRES_RESEED + 11, peak=300.0, offset=-0.01)
    prepared = prepare_offres(field, t)
    assert prepared.runs is not None and prepared.runs.runs == 3
    records = adjoint_records(layout.fixed_point_turns(k, matrix), prepared.taus, d, prepared.runs.flags)
    vox = offres_recur_positions(coils)
    out = emulate_recur_adjoint(records, prepared, matrix, coils, vox, rotate, parts)
    assert relative(out, offres_adjoint(d, k, field, t)) < 5e-6


def test_emulated_recurrence_needs_the_reseeds(rng):
    """Without the flags (no re-seed but the first sample) the walk keeps its accuracy only as far as the
    float32 drift allows; the times are 4096 samples of one readout, so the rotating sums drift most."""
    matrix = (5, 4)
    k, field, t, d = _problem(rng, matrix, 1, 1, 4096, peak=150.0)
    prepared = prepare_offres(field, t)
    records = adjoint_records(layout.fixed_point_turns(k, matrix), prepared.taus, d, prepared.runs.flags)
    reference = offres_adjoint(d, k, field, t)
    seeded = relative(emulate_recur_adjoint(records, prepared, matrix, 1, 4, True, 1), reference)
    records[:, 3] = 0
    records[0, 3] = 1
    drifting = relative(emulate_recur_adjoint(records, prepared, matrix, 1, 4, True, 1), reference)
    assert seeded < 5e-6 and drifting > 3 * seeded


# ----------------------------------------------------------------------------------------------------
# GPU kernel


@pytest.fixture
def poisoned(monkeypatch):
    """Every buffer the kernels fill starts as NaN, so a voxel left unwritten shows."""
    from mri_recon.operators.engines import gpu_exact

    poison_empty(monkeypatch, gpu_exact, gpu_offres)


def _gpu(*arrays):
    cupy = cupy_module()
    return [cupy.asarray(a) for a in arrays]


CASES = [((6, 5), 1), ((33, 30), 3), ((1, 1), 1), ((7, 1), 8), ((32, 32), 8), ((4, 3, 5), 1), ((17, 16, 15), 3),
         ((9, 7, 2), 8), ((16, 16, 16), 1)]


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("rotate", [None, False, True], ids=["default", "walk", "rotate"])
@pytest.mark.parametrize("chunk", [None, 37])
def test_recurrence_kernel_against_the_oracle(rng, poisoned, case, rotate, chunk):
    matrix, coils = case
    k, field, t, d = _problem(rng, matrix, coils, 3, 2 * OFFRES_RESEED + 29, offset=-0.004)
    out = gpu_offres.fhd_offres_gpu(*_gpu(d, k), matrix, *_gpu(field, t), chunk=chunk, recur=True, rotate=rotate,
                                   tensor=False)
    assert out.shape == (coils, *matrix)
    assert relative(out.get(), offres_adjoint(d, k, field, t)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("coils", [1, 3, 8])
def test_default_path_follows_the_times(rng, poisoned, coils):
    """In fhd.cu (tensor=False), uniform steps take the recurrence, irregular times the phasor kernel: the
    default equals the explicit choice bit for bit (and repeats bit for bit), and both meet the oracle;
    recur=True is refused without runs whichever kernels would run."""
    matrix = (20, 19)
    k, field, t, d = _problem(rng, matrix, coils, 2, 300)
    gd, gk, gf, gt = _gpu(d, k, field, t)
    default = gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt, tensor=False).get()
    np.testing.assert_array_equal(default, gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt, recur=True,
                                                                     tensor=False).get())
    np.testing.assert_array_equal(default, gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt, tensor=False).get())
    phasor = gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gt, recur=False, tensor=False).get()
    reference = offres_adjoint(d, k, field, t)
    assert relative(default, reference) < TOL and relative(phasor, reference) < TOL
    irregular = (rng.random(t.shape) * 16e-3).astype(np.float32)
    gi = _gpu(irregular)[0]
    fallback = gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gi, tensor=False).get()
    np.testing.assert_array_equal(fallback, gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gi, recur=False,
                                                                      tensor=False).get())
    assert relative(fallback, offres_adjoint(d, k, field, irregular)) < TOL
    for tensor in (None, False):
        with pytest.raises(InvalidDataError, match="recur=True needs sample times in runs"):
            gpu_offres.fhd_offres_gpu(gd, gk, matrix, gf, gi, recur=True, tensor=tensor)


@pytest.mark.gpu
def test_host_runs_agree_on_cupy_and_numpy(rng):
    field = _field(rng, (12, 10))
    t = readout_times(3000, 1000, 16e-3)
    t[1500] += np.float32(1e-6)
    host = prepare_offres(field, t)
    device = prepare_offres(*_gpu(field, t))
    assert device.runs.runs == host.runs.runs == 5 and device.runs.dtau == pytest.approx(host.runs.dtau, rel=1e-12)
    np.testing.assert_array_equal(device.runs.flags.get(), host.runs.flags)
    np.testing.assert_allclose(device.runs.steps.get(), host.runs.steps, rtol=0, atol=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize("peak, readout", [(1000.0, 4e-3), (150.0, 50e-3), (5.0, 1e-3), (0.0, 16e-3)],
                         ids=["1kHz", "long", "tiny", "zero"])
def test_recurrence_keeps_its_accuracy_for_large_and_small_phases(rng, peak, readout):
    matrix = (40, 36)
    k, field, t, d = _problem(rng, matrix, 2, 4, 500, peak=peak, readout=readout)
    assert prepare_offres(field, t).runs is not None
    out = gpu_offres.fhd_offres_gpu(*_gpu(d, k), matrix, *_gpu(field, t), recur=True)
    assert relative(out.get(), offres_adjoint(d, k, field, t)) < TOL


@pytest.mark.gpu
def test_zero_field_recurrence_matches_the_plain_kernel(rng):
    from mri_recon.operators.engines.gpu_exact import fhd_gpu

    matrix = (32, 28)
    k, _, t, d = _problem(rng, matrix, 3, 2, 250)
    gd, gk = _gpu(d, k)
    zero = _gpu(np.zeros(matrix, np.float32), t)
    for rotate in (False, True):
        out = gpu_offres.fhd_offres_gpu(gd, gk, matrix, *zero, recur=True, rotate=rotate, tensor=False)
        assert relative(out.get(), fhd_gpu(gd, gk, matrix).get()) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("rotate", [False, True], ids=["walk", "rotate"])
def test_one_sample(rng, poisoned, rotate):
    matrix = (5, 6)
    k, field, t, d = _problem(rng, matrix, 2, 1, 1, offset=3e-3)
    out = gpu_offres.fhd_offres_gpu(*_gpu(d, k), matrix, *_gpu(field, t), recur=True, rotate=rotate)
    assert relative(out.get(), offres_adjoint(d, k, field, t)) < TOL


@pytest.mark.gpu
def test_encoding_with_readouts_is_adjoint(rng):
    """OffresEncoding prepares the runs once; its F^H (the recurrence) is the adjoint of its F."""
    from mri_recon.operators.offres.model import OffresEncoding

    matrix = (20, 24)
    k, field, t, d = _problem(rng, matrix, 2, 3, 100)
    x = (rng.standard_normal((2, *matrix)) + 1j * rng.standard_normal((2, *matrix))).astype(np.complex64)
    op = OffresEncoding(*_gpu(k, field, t), batch=2)
    assert op._prepared.runs is not None and op._prepared.runs.runs == 3
    gx, gd = _gpu(x, d)
    assert adjoint_gap(x, op.H(gd).get(), d, op(gx).get()) < 1e-5
