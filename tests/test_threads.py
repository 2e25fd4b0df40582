"""The CPU path's images do not depend on its thread count, and batch workers share the cores."""

from __future__ import annotations

import os

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mri_recon
from mri_recon.arrays.backend import THREADS_ENV, cpu_threads
from mri_recon.errors import DeviceError
from mri_recon.solvers.cg import inner

pytest.importorskip("finufft")


def test_cpu_threads_reads_the_environment_or_the_affinity(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "3")
    assert cpu_threads() == 3
    monkeypatch.setenv(THREADS_ENV, "0")
    assert cpu_threads() == 1
    monkeypatch.delenv(THREADS_ENV)
    assert cpu_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(THREADS_ENV, "many")
    with pytest.raises(DeviceError, match="MRI_RECON_THREADS must be a whole number"):
        cpu_threads()


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.complex128])
def test_inner_matches_float64_and_does_not_overflow(rng, monkeypatch, dtype):
    n = 70001
    a = rng.standard_normal(n) + (1j * rng.standard_normal(n) if np.dtype(dtype).kind == "c" else 0)
    b = rng.standard_normal(n) + (1j * rng.standard_normal(n) if np.dtype(dtype).kind == "c" else 0)
    a, b = a.astype(dtype), b.astype(dtype)
    exact = np.vdot(a.astype(np.complex128), b.astype(np.complex128))
    value = inner(a, b)
    assert abs(value - exact) <= 1e-12 * np.linalg.norm(a) * np.linalg.norm(b)
    big_a, big_b = a * np.float32(1e20), b * np.float32(1e20)  # products beyond float32's range
    big = np.vdot(big_a.astype(np.complex128), big_b.astype(np.complex128))  # of the inputs as rounded
    assert np.isfinite(inner(big_a, big_b))
    scale = np.linalg.norm(big_a.astype(np.complex128)) * np.linalg.norm(big_b.astype(np.complex128))
    assert abs(inner(big_a, big_b) - big) <= 1e-12 * scale


@pytest.mark.slow
@pytest.mark.parametrize("case", ["file maps", "walsh, pipe", "espirit", "field map"])
def test_a_cpu_reconstruction_has_the_same_bits_on_one_thread_and_on_three(monkeypatch, case):
    # prewhitening (the scan has noise), 16 coils' maps estimated and normalized, the field map's segment fit:
    # OpenBLAS's threaded products would change their last bits
    if case == "field map":
        scan = mri_recon.simulate_scan((40, 36), "spiral", coils=4, snr=30, seed=7, field_map_peak=120,
                                       readout_ms=12)
        options = {"field_map_correction": "segmented"}
    else:
        scan = mri_recon.simulate_scan((48, 40), "golden", coils=16 if case != "file maps" else 4, snr=30,
                                       seed=7)
        options = {"file maps": {}, "walsh, pipe": {"coil_maps": "walsh", "dcf": "pipe"},
                   "espirit": {"coil_maps": "espirit"}}[case]
    images = []
    for threads in (1, 3):
        monkeypatch.setenv(THREADS_ENV, str(threads))
        with threadpool_limits(limits=threads):  # BLAS and OpenMP too
            images.append(mri_recon.reconstruct(scan, device="cpu", tol=0.0, iterations=12, **options).image)
    np.testing.assert_array_equal(images[0], images[1])


def test_batch_workers_get_their_share_of_the_cores(monkeypatch):
    pytest.importorskip("distributed")
    from mri_recon.batch.cluster import local_config, worker_threads

    monkeypatch.setenv(THREADS_ENV, "8")
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", THREADS_ENV)
    assert worker_threads(1, gpu=False) == dict.fromkeys(names, "8")
    assert worker_threads(3, gpu=False) == dict.fromkeys(names, "2")
    assert worker_threads(16, gpu=False) == dict.fromkeys(names, "1")
    gpu = worker_threads(2, gpu=True)
    assert gpu == dict.fromkeys(names, "1")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    import dask

    with local_config(gpu):
        assert dask.config.get("distributed.nanny.pre-spawn-environ")["OMP_NUM_THREADS"] == "1"
        os.environ["OMP_NUM_THREADS"] = "1"  # as a nanny does in this process before it spawns its worker
    assert "OMP_NUM_THREADS" not in os.environ and os.environ[THREADS_ENV] == "8"  # the caller's are back
