"""mri_recon.torch: the encoding operator on torch tensors. Autograd checked by ``torch.autograd.gradcheck`` in
double precision (the float64 exact sums on the CPU) and in single precision (FINUFFT here, the GPU engines
under the ``gpu`` marker); values against the NumPy operator; the memory shared where it must be. The whole file
skips without torch (it is an optional extra, not in the test extra)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from examples import EXAMPLES
from helpers import random_problem, relative

torch = pytest.importorskip("torch")

from mri_recon import EncodingOperator  # noqa: E402 - after the skip
from mri_recon.errors import DeviceError, SchemaError  # noqa: E402
from mri_recon.operators.engines.nudft import nudft_adjoint, nudft_forward  # noqa: E402
from mri_recon.torch import TorchEncoding, as_array, as_tensor, tensors  # noqa: E402

MATRIX, COILS, SAMPLES = (6, 5), 3, 24
LOOSE = {"eps": 1e-2, "atol": 2e-2, "rtol": 2e-2, "nondet_tol": 1e-5}
"""float32 gradcheck: steps of 1e-2 (the map is linear, so the differences are exact but for rounding)."""


def _complex(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.fixture
def problem(rng):
    """Trajectory, maps and weights of a small SENSE problem."""
    traj, _ = random_problem(rng, MATRIX, COILS, SAMPLES)
    maps = _complex(rng, (COILS, *MATRIX), np.complex64)
    return traj, maps, rng.random(SAMPLES).astype(np.float32) + 0.5


def _op(problem, method="exact", maps=True, **options):
    traj, s, w = problem
    if maps:
        return TorchEncoding(
            torch.from_numpy(traj), MATRIX, maps=torch.from_numpy(s), weights=w, method=method, **options
        )
    return TorchEncoding(traj, MATRIX, coils=COILS, weights=w, method=method, **options)


def _input(rng, op, which, dtype=torch.complex128, batch=()):
    shape = op.kspace_shape if which == "adjoint" else op.image_shape
    return torch.from_numpy(_complex(rng, (*batch, *shape))).to(dtype).requires_grad_()


def _map(op, which):
    return {"forward": op, "adjoint": op.H, "normal": op.normal}[which]


@pytest.mark.parametrize("which", ["forward", "adjoint", "normal"])
@pytest.mark.parametrize("maps", [True, False], ids=["maps", "coils"])
def test_gradcheck_in_double_precision(problem, rng, which, maps):
    op = _op(problem, maps=maps, lam=0.3)
    assert torch.autograd.gradcheck(_map(op, which), (_input(rng, op, which),))


@pytest.mark.parametrize("which", ["forward", "adjoint", "normal"])
def test_gradcheck_of_a_batch_and_of_the_gradient(problem, rng, which):
    op = _op(problem)
    x = _input(rng, op, which, batch=(2,))
    assert torch.autograd.gradcheck(_map(op, which), (x,))
    assert torch.autograd.gradgradcheck(_map(op, which), (_input(rng, op, which),))


def test_gradcheck_of_a_real_input(problem, rng):
    op = _op(problem)
    x = torch.from_numpy(rng.standard_normal(MATRIX)).requires_grad_()
    assert torch.autograd.gradcheck(op, (x,))
    op(x).abs().sum().backward()
    assert x.grad.dtype == torch.float64


@pytest.mark.filterwarnings("ignore:Input #0 requires gradient and is not a double")
@pytest.mark.parametrize("which", ["forward", "adjoint", "normal"])
def test_gradcheck_in_single_precision_on_finufft(problem, rng, which):
    op = _op(problem, method="nufft", lam=0.3)
    assert torch.autograd.gradcheck(_map(op, which), (_input(rng, op, which, torch.complex64),), **LOOSE)


def test_the_gradient_follows_pytorchs_convention(problem, rng):
    # for a real loss L, x.grad is 2 dL/d(conj x): L = ||A x - y||^2 gives 2 A^H (A x - y)
    op = _op(problem)
    x = _input(rng, op, "forward")
    y = torch.from_numpy(_complex(rng, op.kspace_shape))
    (op(x) - y).abs().square().sum().backward()
    with torch.no_grad():
        expected = 2 * op.H(op(x) - y)
    assert relative(x.grad.numpy(), expected.numpy()) < 1e-12


def _numpy_sense(problem, method):
    """The NumPy operator with the maps applied in NumPy: forward, adjoint and normal of complex64 arrays."""
    traj, s, w = problem
    op = EncodingOperator(traj, MATRIX, coils=COILS, device="cpu", method=method)
    normal = op.normal(w, s, 0.3)
    return (lambda x: op(s * x)), (lambda y: (np.conj(s) * op.H(y)).sum(axis=0)), normal


@pytest.mark.parametrize("method", ["exact", "nufft"])
def test_single_precision_values_are_the_numpy_operators(problem, rng, method):
    forward, adjoint, normal = _numpy_sense(problem, method)
    op = _op(problem, method=method, lam=0.3)
    x, y = _complex(rng, MATRIX, np.complex64), _complex(rng, (COILS, SAMPLES), np.complex64)
    with torch.no_grad():
        out = op(torch.from_numpy(x)), op.H(torch.from_numpy(y)), op.normal(torch.from_numpy(x))
    assert all(o.dtype == torch.complex64 for o in out)
    assert relative(out[0].numpy(), forward(x)) < 1e-6
    assert relative(out[1].numpy(), adjoint(y)) < 1e-6
    assert relative(out[2].numpy(), normal(x)) < 1e-6


def test_double_precision_values_are_the_float64_sums(problem, rng):
    traj, s, w = problem
    s = s.astype(np.complex128)
    op = _op(problem, lam=0.3)
    x, y = _complex(rng, MATRIX), _complex(rng, (COILS, SAMPLES))
    with torch.no_grad():
        fx, fhy, nx = op(torch.from_numpy(x)), op.H(torch.from_numpy(y)), op.normal(torch.from_numpy(x))
    assert relative(fx.numpy(), nudft_forward(s * x, traj)) < 1e-13
    assert relative(fhy.numpy(), (np.conj(s) * nudft_adjoint(y, traj, MATRIX)).sum(axis=0)) < 1e-13
    ref = (np.conj(s) * nudft_adjoint(w * nudft_forward(s * x, traj), traj, MATRIX)).sum(axis=0) + 0.3 * x
    assert relative(nx.numpy(), ref) < 1e-13


def test_the_tikhonov_weight_is_fixed_with_the_operator(problem):
    op = _op(problem, lam=0.3)
    assert op.lam == 0.3
    with pytest.raises(AttributeError):
        op.lam = 5.0  # the Toeplitz normal is planned with it: a new weight is a new operator


def test_double_precision_on_finufft_is_rounded_and_widened(problem, rng):
    op = _op(problem, method="nufft")
    x = torch.from_numpy(_complex(rng, MATRIX))
    with torch.no_grad():
        wide, single = op(x), op(x.to(torch.complex64))
    assert wide.dtype == torch.complex128 and torch.equal(wide, single.to(torch.complex128))


@pytest.mark.parametrize("maps", [True, False], ids=["maps", "coils"])
def test_a_batch_is_its_items_in_turn(problem, rng, maps):
    op = _op(problem, maps=maps)
    x = torch.from_numpy(_complex(rng, (2, 3, *op.image_shape), np.complex64))
    y = torch.from_numpy(_complex(rng, (4, *op.kspace_shape), np.complex64))
    with torch.no_grad():
        fx, fhy, nx = op(x), op.H(y), op.normal(x)
        assert fx.shape == (2, 3, *op.kspace_shape) and fhy.shape == (4, *op.image_shape) and nx.shape == x.shape
        assert torch.equal(fx[1, 2], op(x[1, 2])) and torch.equal(fhy[3], op.H(y[3]))
        assert torch.equal(nx[0, 1], op.normal(x[0, 1]))


def test_arrays_and_tensors_share_memory(rng):
    t = torch.from_numpy(_complex(rng, (4, 5), np.complex64))
    assert as_array(t).ctypes.data == t.data_ptr()
    a = _complex(rng, (4, 5), np.complex64)
    assert as_tensor(a).data_ptr() == a.ctypes.data
    strided = t[:, ::2]  # not contiguous: a copy, the same values
    assert as_array(strided).ctypes.data != strided.data_ptr() and np.array_equal(as_array(strided), strided.numpy())
    lazy = t.conj()  # a lazy conjugate: resolved, the values conjugated
    assert np.array_equal(as_array(lazy), np.conj(t.numpy()))


class _Spy:
    """An operator standing in for the encoding: records the pointers of what it is given and gives back."""

    def __init__(self, op):
        self.op, self.seen = op, []

    def __call__(self, x):
        out = self.op(x)
        self.seen.append((x.ctypes.data, out.ctypes.data))
        return out


def test_the_operator_reads_and_returns_the_tensors_memory(problem, rng):
    op = _op(problem, maps=False, method="nufft")
    spy = op.operator = _Spy(op.operator)
    x = torch.from_numpy(_complex(rng, op.image_shape, np.complex64))
    with torch.no_grad():
        out = op(x)
    assert spy.seen == [(x.data_ptr(), out.data_ptr())]


def test_the_unrolled_example_learns_in_ten_steps():
    spec = importlib.util.spec_from_file_location("unrolled", EXAMPLES / "unrolled.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.train(steps=10)
    train, (before, after) = result["train"], result["held_out"]
    assert len(train) == 10 and all(b < a for a, b in zip(train, train[1:])), train
    assert train[-1] < 0.8 * train[0] and after < 0.8 * before, result


def test_importing_the_package_does_not_import_torch():
    code = (
        "import sys, mri_recon; mri_recon.EncodingOperator; import mri_recon.operators; print('torch' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "False", run.stderr


def test_without_torch_the_import_says_what_to_install():
    code = "import sys; sys.modules['torch'] = None; import mri_recon.torch"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (
        run.returncode != 0
        and "ImportError: mri_recon.torch needs PyTorch: pip install 'mri-recon[torch]'" in run.stderr
    )


def test_bad_inputs_are_refused_by_name(problem, rng):
    op = _op(problem)
    with pytest.raises(SchemaError, match=r"image must have shape \(\.\.\., 6, 5\), found \(5, 6\)"):
        op(torch.zeros(5, 6, dtype=torch.complex64))
    with pytest.raises(SchemaError, match=r"kspace must have shape \(\.\.\., 3, 24\), found \(24,\)"):
        op.H(torch.zeros(24, dtype=torch.complex64))
    with pytest.raises(SchemaError, match="image must be complex64 or complex128 .* found torch.int64"):
        op(torch.zeros(MATRIX, dtype=torch.int64))
    with pytest.raises(SchemaError, match="image must be a torch.Tensor, found ndarray"):
        op(np.zeros(MATRIX, dtype=np.complex64))
    with pytest.raises(DeviceError, match="image is on meta but the operator is on cpu; move it with .to"):
        op(torch.zeros(MATRIX, dtype=torch.complex64, device="meta"))


def test_bad_settings_are_refused_by_name(problem):
    traj, s, w = problem
    with pytest.raises(SchemaError, match=r"maps must have shape \(C, 6, 5\), found \(3, 5, 6\)"):
        TorchEncoding(traj, MATRIX, maps=s.reshape(COILS, 5, 6))
    with pytest.raises(SchemaError, match="coils = 2 but the maps have 3 coils"):
        TorchEncoding(traj, MATRIX, maps=s, coils=2)
    with pytest.raises(SchemaError, match="maps and weights must be non-empty float or complex, found torch.int64"):
        TorchEncoding(traj, MATRIX, weights=torch.ones(SAMPLES, dtype=torch.int64))
    with pytest.raises(DeviceError, match="the operators run on the CPU or a CUDA GPU, found torch device meta"):
        TorchEncoding(traj, MATRIX, device=torch.device("meta"))


def test_a_cuda_tensor_without_cupy_says_what_to_install(monkeypatch):
    monkeypatch.setattr(tensors, "cupy_module", lambda: None)
    with pytest.raises(DeviceError, match=r"needs CuPy .* pip install 'mri-recon\[gpu\]'"):
        with tensors.on_stream(torch.device("cuda", 0)):
            pass


def test_the_device_follows_the_tensors():
    assert tensors.device_of(None, None, torch.zeros(1)) == ("cpu", torch.device("cpu"))
    assert tensors.device_of("cuda:1", torch.zeros(1)) == ("gpu:1", torch.device("cuda", 1))
    assert tensors.device_of(torch.device("cuda", 2)) == ("gpu:2", torch.device("cuda", 2))
    assert tensors.device_of("cpu") == ("cpu", torch.device("cpu"))


# --------------------------------------------------------------------------------------------------------
# CUDA tensors (a CUDA build of torch, CuPy and a GPU)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA build of torch")


@pytest.mark.gpu
@cuda
@pytest.mark.filterwarnings("ignore:Input #0 requires gradient and is not a double")
@pytest.mark.parametrize("which", ["forward", "adjoint", "normal"])
@pytest.mark.parametrize("method", ["exact", "nufft"])
def test_gradcheck_in_single_precision_on_the_gpu(problem, rng, which, method):
    traj, s, w = problem
    op = TorchEncoding(traj, MATRIX, maps=torch.from_numpy(s).cuda(), weights=w, lam=0.3, method=method)
    assert op.device == torch.device("cuda", 0) and op.operator.device.is_gpu
    x = _input(rng, op, which, torch.complex64).detach().cuda().requires_grad_()
    assert torch.autograd.gradcheck(_map(op, which), (x,), **LOOSE)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("method", ["exact", "nufft"])
def test_the_gpu_gives_the_cpus_values_on_its_own_stream(problem, rng, method):
    cpu, gpu = _op(problem, method=method, lam=0.3), _op(problem, method=method, lam=0.3, device="cuda:0")
    x, y = _complex(rng, (2, *MATRIX), np.complex64), _complex(rng, (COILS, SAMPLES), np.complex64)
    stream = torch.cuda.Stream()
    with torch.no_grad(), torch.cuda.stream(stream):
        xg, yg = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
        out = gpu(xg), gpu.H(yg), gpu.normal(xg)
    stream.synchronize()
    with torch.no_grad():
        ref = cpu(torch.from_numpy(x)), cpu.H(torch.from_numpy(y)), cpu.normal(torch.from_numpy(x))
    for o, r in zip(out, ref):
        assert o.device == torch.device("cuda", 0) and relative(o.cpu().numpy(), r.numpy()) < 1e-4


@pytest.mark.gpu
@cuda
def test_cuda_tensors_and_cupy_arrays_share_memory(rng):
    t = torch.from_numpy(_complex(rng, (4, 5), np.complex64)).cuda()
    with tensors.on_stream(t.device):
        a = as_array(t)
        assert a.data.ptr == t.data_ptr()
        back = as_tensor(a * 2)
    assert back.device == t.device and torch.allclose(back, 2 * t)
