"""A GPU worker's CPUs (mri_recon.batch.affinity): the kernel's CPU lists, the PCI device's local CPUs, and
moving every thread of a process."""

from __future__ import annotations

import os
import threading

import pytest

from mri_recon.batch import affinity


@pytest.mark.parametrize(("text", "cpus"), [("0-3", {0, 1, 2, 3}), ("0-1,8-9\n", {0, 1, 8, 9}), ("5", {5}),
                                            ("", set()), ("2,4-4,7", {2, 4, 7})])
def test_cpu_lists_parse_as_the_kernel_writes_them(text, cpus):
    assert affinity.parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a-b", "3-1", "-1", "1-2-3"])
def test_malformed_cpu_lists_are_refused(text):
    with pytest.raises(ValueError):
        affinity.parse_cpulist(text)


def test_local_cpus_come_from_the_devices_sysfs_entry(tmp_path):
    entry = tmp_path / "0000:1b:00.0"
    entry.mkdir()
    (entry / "local_cpulist").write_text("0-15,32-47\n")
    assert affinity.local_cpus("0000:1B:00.0", tmp_path) == set(range(16)) | set(range(32, 48))
    assert affinity.local_cpus("0000:99:00.0", tmp_path) is None  # no such device
    (entry / "local_cpulist").write_text("garbage")
    assert affinity.local_cpus("0000:1b:00.0", tmp_path) is None


def test_pinning_moves_every_thread_within_the_allowed_cpus():
    allowed = os.sched_getaffinity(0)
    started, stop = threading.Event(), threading.Event()
    seen = {}

    def idle():
        started.set()
        stop.wait()
        seen["after"] = os.sched_getaffinity(0)  # this thread's own set

    thread = threading.Thread(target=idle)
    thread.start()
    started.wait()
    try:
        one = {min(allowed)}
        assert affinity.pin_process(one | {10_000}) == one  # a CPU outside the allowed ones is dropped
        assert os.sched_getaffinity(0) == one
    finally:
        stop.set()
        thread.join()
        _restore(allowed)
    assert seen["after"] == one
    assert os.sched_getaffinity(0) == allowed


def _restore(cpus: set[int]) -> None:
    """Every thread of this process back on ``cpus`` (pin_process only narrows)."""
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except OSError:
            continue


def test_no_shared_cpu_changes_nothing():
    allowed = os.sched_getaffinity(0)
    assert affinity.pin_process({max(allowed) + 1000}) is None
    assert os.sched_getaffinity(0) == allowed


def test_without_a_gpu_the_worker_stays_where_it_is(monkeypatch):
    monkeypatch.setattr(affinity, "gpu_bus_id", lambda index=0: None)
    allowed = os.sched_getaffinity(0)
    assert affinity.pin_to_gpu(0) is None
    affinity.dask_setup(object())
    assert os.sched_getaffinity(0) == allowed


def test_a_gpu_worker_is_pinned_to_its_devices_cpus(monkeypatch, tmp_path):
    allowed = os.sched_getaffinity(0)
    entry = tmp_path / "0000:1b:00.0"
    entry.mkdir()
    (entry / "local_cpulist").write_text(f"{min(allowed)}\n")
    monkeypatch.setattr(affinity, "gpu_bus_id", lambda index=0: "0000:1B:00.0")
    monkeypatch.setattr(affinity, "SYSFS_PCI", tmp_path)
    try:
        assert affinity.pin_to_gpu(0) == {min(allowed)}
        assert os.sched_getaffinity(0) == {min(allowed)}
    finally:
        _restore(allowed)


@pytest.mark.parametrize(("given", "name"), [("0000:1B:00.0", "0000:1b:00.0"), ("00000000:1B:00.0", "0000:1b:00.0"),
                                             ("0001:c3:1f.7", "0001:c3:1f.7"), ("not a bus", None), ("0:1:2", None)])
def test_bus_ids_of_cupy_and_nvml_name_the_sysfs_entry(given, name):
    assert affinity.sysfs_bus_id(given) == name


def test_an_nvml_bus_id_finds_the_sysfs_entry(tmp_path):
    entry = tmp_path / "0000:1b:00.0"
    entry.mkdir()
    (entry / "local_cpulist").write_text("2-3\n")
    assert affinity.local_cpus("00000000:1B:00.0", tmp_path) == {2, 3}


def test_a_refused_pinning_changes_nothing_and_says_so(monkeypatch):
    allowed = os.sched_getaffinity(0)

    def refuse(pid, cpus):
        raise PermissionError("not permitted")

    monkeypatch.setattr(affinity.os, "sched_setaffinity", refuse)
    assert affinity.pin_process(allowed) is None


def test_the_preload_hook_never_stops_a_worker(monkeypatch, caplog):
    def broken(index=0):
        raise RuntimeError("no /proc here")

    monkeypatch.setattr(affinity, "pin_to_gpu", broken)
    affinity.dask_setup(object())
    assert "worker left on its CPUs: RuntimeError: no /proc here" in caplog.text


def test_pinned_nannies_add_the_affinity_preload_to_the_configured_ones(monkeypatch):
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    from types import SimpleNamespace

    from mri_recon.batch import cluster

    fake = SimpleNamespace(Scheduler=object, Nanny=object, SpecCluster=lambda **spec: spec)
    security = object()
    with dask.config.set({"distributed.worker.preload": ["site_setup"]}):
        spec = cluster._pinned_cluster(fake, ["0", "1"], security)
        assert [w["options"]["preload"] for w in spec["workers"].values()] == \
            [["site_setup", "mri_recon.batch.affinity"]] * 2
        # every part on loopback with the cluster's TLS credentials
        for part in [spec["scheduler"], *spec["workers"].values()]:
            assert part["options"]["security"] is security and part["options"]["host"] == "127.0.0.1"
            assert part["options"]["protocol"] == "tls://"
        assert spec["security"] is security and spec["scheduler"]["options"]["dashboard"] is False
        monkeypatch.setattr(cluster, "GPU_AFFINITY", False)
        spec = cluster._pinned_cluster(fake, ["0"], security)
        assert spec["workers"]["gpu-0"]["options"]["preload"] is None  # Nanny then reads the configuration
    assert spec["workers"]["gpu-0"]["options"]["env"] == {"CUDA_VISIBLE_DEVICES": "0"}
