"""The one CG loop and its two kinds of steps: the host steps against a textbook CG in float64 and bit for bit
against the textbook loop's own operations, the warm-started fixed-step use (ADMM's x-update), and the device
steps' bookkeeping (iteration index, histories, checks, graph replay) run on the CPU through a NumPy model of
``kernels/cg.cu`` whose arithmetic follows the kernels' (float32 step sizes, float64 sums)."""

from __future__ import annotations

from types import SimpleNamespace

import host_kernels as host
import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module
from mri_recon.errors import InvalidDataError
from mri_recon.solvers import cg as cg_module
from mri_recon.solvers import gpu_cg
from mri_recon.solvers.cg import HostSteps, WarmCg, cg, cg_steps, inner


def hpd(rng, n: int, condition: float = 50.0) -> np.ndarray:
    """A random Hermitian positive definite matrix with eigenvalues in [1, condition]."""
    q, _ = np.linalg.qr(rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n)))
    return (q * np.linspace(1.0, condition, n)) @ q.conj().T


def crandn(rng, *shape, dtype=np.complex128) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def textbook_cg(a, b, x0, steps):
    """Hestenes-Stiefel CG in float64 with NumPy's vdot: ``steps`` iterations from ``x0``."""
    x = x0.astype(np.complex128)
    r = b - a @ x
    p = r.copy()
    rr = np.vdot(r, r).real
    for _ in range(steps):
        ap = a @ p
        alpha = rr / np.vdot(p, ap).real
        x, r = x + alpha * p, r - alpha * ap
        rr, rr_old = np.vdot(r, r).real, rr
        p = r + (rr / rr_old) * p
    return x, r


def test_fixed_steps_are_textbook_cg_warm_started(rng):
    a, b = hpd(rng, 30), crandn(rng, 30)
    x = crandn(rng, 30)
    r = b - a @ x
    solve = WarmCg(lambda v: a @ v, b, 4)
    expected, expected_r = textbook_cg(a, b, x, 4)
    solve(x, r)
    np.testing.assert_allclose(x, expected, rtol=1e-12)
    np.testing.assert_allclose(r, expected_r, rtol=1e-9, atol=1e-12 * np.linalg.norm(b))
    p_buffer = solve.steps.p
    expected, _ = textbook_cg(a, b, x, 4)  # the next call restarts CG from the new x with the carried residual
    solve(x, r)
    np.testing.assert_allclose(x, expected, rtol=1e-12)
    np.testing.assert_allclose(r, b - a @ x, atol=1e-10 * np.linalg.norm(b))
    assert solve.steps.p is p_buffer  # allocated once


def textbook_loop_complex64(a, b, iterations):
    """The loop the host steps must reproduce bit for bit: its operations in its order, inner products by
    :func:`inner`, Python-float step sizes."""
    x, r = np.zeros_like(b), b.copy()
    p, rr = r.copy(), inner(r, r).real
    residuals = [np.sqrt(rr)]
    for _ in range(iterations):
        ap = (a @ p).astype(np.complex64)
        alpha = rr / inner(p, ap).real
        x += alpha * p
        r -= alpha * ap
        rr_new = inner(r, r).real
        residuals.append(np.sqrt(rr_new))
        p *= rr_new / rr
        p += r
        rr = rr_new
    return x, residuals


def test_host_steps_repeat_the_textbook_loop_bit_for_bit(rng):
    a, b = hpd(rng, 25).astype(np.complex64), crandn(rng, 25, dtype=np.complex64)
    expected, residuals = textbook_loop_complex64(a, b, 7)
    x, history = cg(lambda v: (a @ v).astype(np.complex64), b, max_iterations=7, tolerance=0.0)
    np.testing.assert_array_equal(x, expected)
    assert history == tuple(float(s / residuals[0]) for s in residuals)
    x, r = np.zeros_like(b), b.copy()
    WarmCg(lambda v: (a @ v).astype(np.complex64), b, 7)(x, r)
    np.testing.assert_array_equal(x, expected)


def test_fixed_steps_stop_changing_at_an_exact_solution(rng):
    b = crandn(rng, 3, 4)
    x, r = np.zeros_like(b), b.copy()
    WarmCg(lambda v: 2.0 * v, b, 3)(x, r)  # one step solves 2 x = b exactly; the others change nothing
    np.testing.assert_array_equal(x, b / 2.0)
    assert not np.any(r)


def test_fixed_steps_refuse_an_indefinite_operator(rng):
    b = crandn(rng, 6)
    with pytest.raises(InvalidDataError, match=r"positive definite operator, found <p, A p> = -.* at iteration 1"):
        WarmCg(lambda v: -v, b, 2)(np.zeros_like(b), b.copy())


def test_host_arrays_get_the_host_steps(rng):
    assert isinstance(cg_steps(lambda v: v, np.zeros(4, np.complex64), 3), HostSteps)


# The device steps on the CPU: cg.cu's three kernels as NumPy functions, the arrays NumPy arrays.

def _dot(grid, block, args):
    a, b, n, partial, counter, results, done = args
    assert n == a.size == b.size and partial.size == grid[0]
    results[done[0] + 1] = np.sum(a.real.astype(np.float64) * b.real + a.imag.astype(np.float64) * b.imag)


def _step(grid, block, args):
    x, r, p, ap, pap, rr, done, n, partial, counter = args
    i = done[0] + 1
    alpha = np.float32(rr[i - 1] / pap[i])
    x += alpha * p
    r -= alpha * ap
    rr[i] = np.sum(r.real.astype(np.float64) ** 2 + r.imag.astype(np.float64) ** 2)


def _direction(grid, block, args):
    p, r, rr, done, n, counter = args
    i = done[0] + 1
    p[...] = r + np.float32(rr[i] / rr[i - 1]) * p
    done[0] = i


KERNELS = {"mri_recon_cg_dot": _dot, "mri_recon_cg_step": _step, "mri_recon_cg_direction": _direction}


class Graph:
    """A captured iteration: the work itself, run at each launch."""

    def __init__(self, work):
        self.work, self.launches = work, 0

    def launch(self, stream):
        self.launches += 1
        self.work()


@pytest.fixture
def device_steps(monkeypatch):
    """``cg_steps`` answering with :class:`~mri_recon.solvers.gpu_cg.DeviceSteps` on NumPy arrays; returns the
    graphs captured."""
    graphs = []

    def capture(xp, work):
        graphs.append(Graph(work))
        return graphs[-1]

    def kernel(filename, name, defines, device):
        assert filename == "cg.cu" and defines is None and device.index == 0
        return KERNELS[name]

    monkeypatch.setattr(gpu_cg, "get_kernel", kernel)
    monkeypatch.setattr(gpu_cg, "capture", capture)
    monkeypatch.setattr(np, "cuda", SimpleNamespace(get_current_stream=lambda: None), raising=False)
    monkeypatch.setattr(cg_module, "cg_steps", lambda op, like, iterations, replay=False: gpu_cg.DeviceSteps(
        op, like.view(host.HostMaps), iterations, replay=replay))
    return graphs


class WritesInto:
    """``x -> A x`` that writes into a given array (the device steps may capture it)."""

    writes_into = True

    def __init__(self, a):
        self.a, self.calls = a, 0

    def apply_into(self, x, out):
        self.calls += 1
        out[...] = self.a @ x

    def __call__(self, x):
        return (self.a @ x).astype(np.complex64)


def test_device_steps_solve_as_the_host_steps(rng, device_steps):
    a, b = hpd(rng, 40).astype(np.complex64), crandn(rng, 40, dtype=np.complex64)
    x_host, res_host = cg(lambda v: (a @ v).astype(np.complex64), b, max_iterations=12, tolerance=0.0)
    assert isinstance(cg_module.cg_steps(lambda v: v, b, 1), gpu_cg.DeviceSteps)
    seen = []
    x, residuals = cg(lambda v: (a @ v).astype(np.complex64), b, max_iterations=12, tolerance=0.0, check_every=5,
                      callback=lambda i, x, r: seen.append((i, r, x.copy())))
    assert len(residuals) == 13 and not device_steps  # a plain callable is not captured
    np.testing.assert_allclose(residuals, res_host, rtol=1e-4)
    np.testing.assert_allclose(x, x_host, rtol=0, atol=1e-5 * np.linalg.norm(x_host))
    assert [i for i, _, _ in seen] == list(range(1, 13)) and [r for _, r, _ in seen] == list(residuals[1:])
    for i, _, x_seen in seen:  # each batch of calls comes at a check, with the x of the check
        check = min(-(-i // 5) * 5, 12)
        np.testing.assert_array_equal(x_seen, seen[check - 1][2])


def test_device_steps_stop_at_the_first_check_past_the_tolerance(rng, device_steps):
    a, b = hpd(rng, 40).astype(np.complex64), crandn(rng, 40, dtype=np.complex64)
    _, full = cg(lambda v: (a @ v).astype(np.complex64), b, max_iterations=30, tolerance=0.0)
    met = next(i for i, r in enumerate(full) if r <= 1e-2)
    _, residuals = cg(lambda v: (a @ v).astype(np.complex64), b, max_iterations=30, tolerance=1e-2, check_every=4)
    assert len(residuals) - 1 == -(-met // 4) * 4 and residuals == full[:len(residuals)]
    _, residuals = cg(lambda v: (a @ v).astype(np.complex64), b, max_iterations=30, tolerance=2.0)
    assert len(residuals) == 1 and residuals[0] == pytest.approx(1.0, rel=1e-12)


def test_device_steps_replay_the_captured_iteration(rng, device_steps):
    a, b = hpd(rng, 24).astype(np.complex64), crandn(rng, 24, dtype=np.complex64)
    eager, eager_res = cg(lambda v: (a @ v).astype(np.complex64), b, max_iterations=9, tolerance=0.0)
    operator = WritesInto(a)
    x, residuals = cg(operator, b, max_iterations=9, tolerance=0.0, check_every=4)
    (graph,) = device_steps
    assert graph.launches == 8 and operator.calls == 9  # the first iteration queued, the others replayed
    np.testing.assert_array_equal(x, eager)
    assert residuals == eager_res


def test_device_steps_report_an_indefinite_operator_at_the_check(rng, device_steps):
    a, b = hpd(rng, 8).astype(np.complex64), crandn(rng, 8, dtype=np.complex64)
    with pytest.raises(InvalidDataError, match=r"positive definite operator, found <p, A p> = -.* at iteration 1"):
        cg(lambda v: -(a @ v), b, max_iterations=6, tolerance=1e-6, check_every=3)


def test_device_fixed_steps_read_nothing_back(rng, device_steps, monkeypatch):
    a, b = hpd(rng, 30).astype(np.complex64), crandn(rng, 30, dtype=np.complex64)
    expected, expected_r = textbook_cg(a.astype(np.complex128), b.astype(np.complex128), np.zeros(30), 3)
    monkeypatch.setattr(gpu_cg, "to_host", lambda array: pytest.fail("the fixed steps read back"))
    solve = WarmCg(WritesInto(a), b, 3)
    x, r = np.zeros_like(b), b.copy()
    solve(x, r)
    assert not device_steps  # the x-update does not capture: its operator may allocate
    np.testing.assert_allclose(x, expected, rtol=0, atol=1e-5 * np.linalg.norm(expected))
    np.testing.assert_allclose(r, expected_r, rtol=0, atol=1e-5 * np.linalg.norm(b))
    buffers = (solve.steps.p, solve.steps.ap, solve.steps.histories)
    expected, _ = textbook_cg(a.astype(np.complex128), b.astype(np.complex128), x, 3)
    solve(x, r)
    np.testing.assert_allclose(x, expected, rtol=0, atol=1e-5 * np.linalg.norm(expected))
    assert (solve.steps.p, solve.steps.ap, solve.steps.histories) == buffers


@pytest.mark.gpu
def test_gpu_fixed_steps_are_textbook_cg(rng):
    cupy = cupy_module()
    a, b = hpd(rng, 30).astype(np.complex64), crandn(rng, 30, dtype=np.complex64)
    ad = cupy.asarray(a)
    solve = WarmCg(lambda v: ad @ v, cupy.asarray(b), 4)
    assert isinstance(solve.steps, gpu_cg.DeviceSteps)
    x0 = crandn(rng, 30, dtype=np.complex64)
    x, r = cupy.asarray(x0), cupy.asarray(b - a @ x0)
    solve(x, r)
    expected, expected_r = textbook_cg(a.astype(np.complex128), b.astype(np.complex128), x0, 4)
    assert np.linalg.norm(cupy.asnumpy(x) - expected) <= 1e-5 * np.linalg.norm(expected)
    assert np.linalg.norm(cupy.asnumpy(r) - expected_r) <= 1e-5 * np.linalg.norm(b)
