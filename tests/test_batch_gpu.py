"""Batch reconstruction on GPU workers (one per GPU): each worker sees its own GPU as device 0, the images
match a single process's, and a shared trajectory's PSF is computed once for the whole batch."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from test_batch import arrays, make_scans

from mri_recon.batch import reconstruct_many
from mri_recon.batch.cluster import _pinned_cluster, shared_local, start_local, visible_gpus
from mri_recon.batch.security import local_security

distributed = pytest.importorskip("distributed")
pytestmark = [pytest.mark.gpu, pytest.mark.slow]
pytest.importorskip("cloudpickle").register_pickle_by_value(sys.modules[__name__])  # _worker_gpu, by value


def _worker_gpu():
    """In a worker: its CUDA_VISIBLE_DEVICES, how many GPUs it sees, and device 0's PCI bus id."""
    from mri_recon.arrays.backend import cupy_module

    cp = cupy_module()
    return (os.environ.get("CUDA_VISIBLE_DEVICES"), int(cp.cuda.runtime.getDeviceCount()),
            cp.cuda.Device(0).pci_bus_id)


def _worker_cpus():
    """In a worker: device 0's PCI bus id and the CPUs this process runs on."""
    from mri_recon.batch.affinity import gpu_bus_id

    return gpu_bus_id(0), os.sched_getaffinity(0)


@pytest.mark.parametrize("method", ["exact", "auto"])
def test_gpu_workers_match_one_process_and_share_one_psf(tmp_path, rng, method):
    scans = make_scans(tmp_path / "in", 6, rng, matrix=(64, 64), coils=4)
    options = {"iterations": 12, "device": "gpu", "method": method}
    here = reconstruct_many(scans, tmp_path / "here", cache_dir=str(tmp_path / "c1"), **options)
    shared_local(len(visible_gpus()), "gpu")  # kept, so that these small scans run on it whatever they cost
    batch = reconstruct_many(scans, tmp_path / "dask", workers=len(visible_gpus()), cache_dir=str(tmp_path / "c2"),
                             **options)
    assert here.ok and batch.ok, batch.table()
    assert "one worker per GPU" in batch.where and {o.device for o in batch.outcomes} == {"gpu:0"}
    # at most one PSF computation in all: the others read the disk cache (exact engines) or the GPU's memo of
    # the last trajectory's spectrum (every engine; in this process it may still hold an earlier test's)
    for report in (here, batch):
        assert len([o for o in report.outcomes if o.psf not in ("hit", "memory")]) <= 1, report.table()
    for a, b in zip(here.outcomes, batch.outcomes):
        (x, rx), (y, ry) = arrays(a.output), arrays(b.output)
        error = np.linalg.norm(x.astype(np.complex128) - y) / np.linalg.norm(x.astype(np.complex128))
        assert error <= 1e-6, (a.input, error)
        np.testing.assert_allclose(rx, ry, rtol=1e-4, atol=1e-7)


def test_each_worker_sees_its_own_gpu():
    gpus = visible_gpus()
    cluster = start_local(None, "gpu")
    try:
        seen = list(cluster.client.run(_worker_gpu).values())
    finally:
        cluster.close()
    assert cluster.gpus == gpus and len(seen) == len(gpus)
    assert sorted(v.split(",")[0] for v, _, _ in seen) == sorted(gpus)  # device 0 of each is its own GPU
    assert len({bus for _, _, bus in seen}) == len(gpus)


def test_pinned_cluster_without_dask_cuda_gives_each_worker_one_gpu():
    from mri_recon.batch.cluster import local_config

    gpus = visible_gpus()
    with local_config():
        cluster = _pinned_cluster(distributed, gpus, local_security())
    try:
        with distributed.Client(cluster) as client:
            seen = list(client.run(_worker_gpu).values())
    finally:
        cluster.close()
    assert sorted(v for v, _, _ in seen) == sorted(gpus)
    assert all(count == 1 for _, count, _ in seen) and len({bus for _, _, bus in seen}) == len(gpus)


def test_pinned_workers_run_on_the_cpus_next_to_their_gpu():
    from mri_recon.batch.affinity import local_cpus
    from mri_recon.batch.cluster import local_config

    allowed = os.sched_getaffinity(0)
    with local_config():
        cluster = _pinned_cluster(distributed, visible_gpus(), local_security())
    try:
        with distributed.Client(cluster) as client:
            seen = list(client.run(_worker_cpus).values())
    finally:
        cluster.close()
    assert os.sched_getaffinity(0) == allowed  # this process is not moved
    for bus, cpus in seen:
        local = local_cpus(bus) or set()
        assert cpus == ((local & allowed) or allowed), (bus, sorted(local), sorted(cpus))


def test_gpu_workers_listen_on_loopback_and_refuse_clients_without_the_certificate():
    """LocalCUDACluster when dask-cuda is installed, else the pinned nannies: the same TLS and loopback."""
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("cryptography")
    cluster = start_local(None, "gpu")
    try:
        address = cluster.client.scheduler.address
        workers = list(cluster.client.scheduler_info()["workers"])
        me = psutil.Process()
        listening = {c.laddr.ip for p in [me, *me.children(recursive=True)]
                     for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        assert cluster.client.submit(sum, [1, 2], pure=False).result() == 3
        with pytest.raises(OSError):
            distributed.Client(address, timeout="3s", security=distributed.security.Security.temporary())
    finally:
        cluster.close()
    assert address.startswith("tls://127.0.0.1:") and all(w.startswith("tls://127.0.0.1:") for w in workers)
    assert listening == {"127.0.0.1"} and cluster.dashboard is None, (cluster.kind, listening)
