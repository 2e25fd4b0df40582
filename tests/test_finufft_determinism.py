"""The CPU F^H d and PSF are bit-reproducible: same inputs, same bits, whatever the load and the threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

finufft = pytest.importorskip("finufft")

from mri_recon.operators import FinufftEncoding  # noqa: E402
from mri_recon.operators.engines import finufft as wrapper  # noqa: E402
from mri_recon.sim import trajectories  # noqa: E402


def _data(rng, coils, m):
    return (rng.standard_normal((coils, m)) + 1j * rng.standard_normal((coils, m))).astype(np.complex64)


def _spy_threads(monkeypatch, names):
    """The ``nthreads`` of every call of FINUFFT's functions ``names``, as they are made."""
    calls = []
    for name in names:
        real = getattr(finufft, name)

        def spy(*args, _real=real, **kwargs):
            calls.append(kwargs.get("nthreads"))
            return _real(*args, **kwargs)

        monkeypatch.setattr(finufft, name, spy)
    return calls


def test_every_type_1_transform_runs_on_one_thread(rng, monkeypatch):
    calls = _spy_threads(monkeypatch, ("nufft2d1", "nufft3d1"))
    traj = trajectories.radial((16, 16), 12)
    wrapper.adjoint(_data(rng, 3, len(traj)), traj, (16, 16))
    wrapper.adjoint(_data(rng, 1, 300), (rng.random((300, 3)) - 0.5) * 8, (8, 8, 8))
    assert calls == [1, 1, 1, 1]


@pytest.mark.parametrize("matrix, coils", [((48, 40), 5), ((20, 24, 16), 3)], ids=["2d", "3d"])
def test_repeated_runs_under_load_are_bit_identical(rng, monkeypatch, matrix, coils):
    traj = ((rng.random((30000, len(matrix))) - 0.5) * np.asarray(matrix)).astype(np.float32)
    kspace = _data(rng, coils, len(traj))
    weights = rng.random(len(traj)).astype(np.float32)
    stop = threading.Event()

    def load():  # competes for the cores, as another job would
        a = rng.standard_normal((300, 300))
        while not stop.is_set():
            a = np.tanh(a @ a)

    busy = threading.Thread(target=load)
    busy.start()
    try:
        images = [wrapper.adjoint(kspace, traj, matrix, eps=1e-7) for _ in range(3)]
        psfs = [FinufftEncoding(traj, matrix).psf(weights) for _ in range(3)]
    finally:
        stop.set()
        busy.join()
    for image in images[1:]:
        np.testing.assert_array_equal(image, images[0])
    for psf in psfs[1:]:
        np.testing.assert_array_equal(psf, psfs[0])
    monkeypatch.setenv("MRI_RECON_THREADS", "1")  # coils one after another: the same bits
    np.testing.assert_array_equal(wrapper.adjoint(kspace, traj, matrix, eps=1e-7), images[0])


def test_every_type_2_transform_runs_on_one_thread(rng, monkeypatch):
    calls = _spy_threads(monkeypatch, ("nufft2d2", "nufft3d2"))
    traj = trajectories.radial((16, 16), 12)
    image = (rng.standard_normal((3, 16, 16)) + 1j * rng.standard_normal((3, 16, 16))).astype(np.complex64)
    wrapper.forward(image, traj)
    wrapper.forward(image[:1, :8, :8, None].repeat(8, axis=3), (rng.random((300, 3)) - 0.5) * 8)
    assert calls == [1, 1, 1, 1]


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_forward_and_adjoint_bits_do_not_depend_on_the_thread_count(rng, monkeypatch, threads):
    traj = ((rng.random((20000, 2)) - 0.5) * 40).astype(np.float32)
    kspace = _data(rng, 4, len(traj))
    image = (rng.standard_normal((4, 40, 36)) + 1j * rng.standard_normal((4, 40, 36))).astype(np.complex64)
    monkeypatch.setenv("MRI_RECON_THREADS", "1")
    reference = wrapper.adjoint(kspace, traj, (40, 36)), wrapper.forward(image, traj)
    monkeypatch.setenv("MRI_RECON_THREADS", threads)
    np.testing.assert_array_equal(wrapper.adjoint(kspace, traj, (40, 36)), reference[0])
    np.testing.assert_array_equal(wrapper.forward(image, traj), reference[1])
    exact = np.exp(-2j * np.pi * (traj.astype(np.float64) @ (
        (np.stack(np.meshgrid(np.arange(40) - 20, np.arange(36) - 18, indexing="ij"), -1).reshape(-1, 2)
         / np.array([40, 36])).T))) @ image[0].reshape(-1).astype(np.complex128)
    assert np.linalg.norm(reference[1][0] - exact) / np.linalg.norm(exact) < 1e-6
