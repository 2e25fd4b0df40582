"""Batch reconstruction on a local Dask cluster: the same bits as single-scan runs, one PSF computation for a
shared trajectory, and a worker killed (SIGKILL) mid-run losing nothing."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import h5py
import pytest
from click.testing import CliRunner
from test_batch import FAST, arrays, make_scans, single

from mri_recon.batch import reconstruct_many
from mri_recon.batch.record import complete, record_path
from mri_recon.batch.runner import _lost
from mri_recon.cli import main

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client():
    """The client of this process's local cluster of two CPU workers, the one ``reconstruct_many(workers=2)``
    starts and keeps (closed at exit; shared with the other modules that ask for it)."""
    pytest.importorskip("cryptography")  # a local cluster's TLS certificate
    from mri_recon.batch.cluster import shared_local

    return shared_local(2, "cpu").client


@pytest.fixture
def cluster_pays(monkeypatch):
    """Small scans on a cluster: its start-up counted as free, so that ``--workers`` starts one."""
    pytest.importorskip("cryptography")  # a local cluster's TLS certificate
    from mri_recon.batch import predict

    monkeypatch.setattr(predict, "CLUSTER_START_S", 0.0)


def test_two_workers_give_the_bits_of_single_scan_runs_and_one_psf(tmp_path, rng, client):
    # 64^2 x 4 coils: large enough for BLAS to use threads in CG's inner products, which Dask's default worker
    # environment (OMP_NUM_THREADS=1 ...) would change
    scans = make_scans(tmp_path / "in", 4, rng, matrix=(64, 64), coils=4)
    report = reconstruct_many(scans, tmp_path / "out", client, cache_dir=str(tmp_path / "cache"), **FAST)
    assert report.ok and [o.status for o in report.outcomes] == ["done"] * 4
    assert sorted(o.psf for o in report.outcomes) == ["hit", "hit", "hit", "miss"]  # computed once, shared
    for scan, outcome in zip(scans, report.outcomes):
        image, residuals = arrays(Path(outcome.output))
        ref_image, ref_residuals = arrays(single(scan, tmp_path / f"{scan.stem}.single.h5", "--no-cache"))
        assert image.tobytes() == ref_image.tobytes() and residuals.tobytes() == ref_residuals.tobytes()


def _settings(report, outcome):
    return json.loads(record_path(outcome.output).read_text())["settings"]


def test_a_task_whose_workers_keep_dying_is_reported_as_lost():
    from distributed.scheduler import KilledWorker

    message = _lost(KilledWorker("mri-recon-scan-0-a.h5", "tcp://127.0.0.1:1", 3))
    assert message.startswith("its worker died each time it ran it") and "\n" not in message
    assert _lost(RuntimeError("scheduler lost\nmore")) == "RuntimeError: scheduler lost"


def test_cli_workers_prints_the_cluster_and_the_summary(tmp_path, rng, cluster_pays):
    scans = make_scans(tmp_path / "in", 2, rng)
    result = CliRunner().invoke(main, ["reconstruct", str(tmp_path / "in" / "*.h5"), "-o", str(tmp_path / "out"),
                                       "--workers", "2", "--iterations", "4", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "LocalCluster, 2 worker process(es) on the CPU" in result.output
    assert "dashboard" not in result.output  # none served without --dashboard (and bokeh)
    assert "2 scan(s): 2 done, 0 skipped (complete), 0 failed" in result.output
    assert all((tmp_path / "out" / f"{s.stem}.recon.h5").is_file() for s in scans)


def test_an_mrd_file_is_split_over_the_workers_with_the_bits_of_one_run(tmp_path, rng, client):
    from mri_recon.io import load_scan
    from mri_recon.io.ismrmrd_write import write_ismrmrd

    base = load_scan(make_scans(tmp_path / "base", 1, rng)[0])
    mrd = tmp_path / "in" / "study.mrd.h5"
    mrd.parent.mkdir()
    write_ismrmrd(mrd, [({"slice": s, "contrast": c}, base.replace(kspace=base.kspace * (1 + s + 10 * c)))
                        for s in range(3) for c in range(2)])
    report = reconstruct_many([mrd], tmp_path / "out", client, cache_dir=str(tmp_path / "cache"), **FAST)
    (outcome,) = report.outcomes
    assert outcome.status == "done" and outcome.parts == 2 and outcome.images == 6, report.table()
    assert "6 images in 2 parts" in report.table()
    image, residuals = arrays(Path(outcome.output))
    ref_image, ref_residuals = arrays(single(mrd, tmp_path / "single.h5", "--no-cache"))
    assert image.shape == (3, 2, 32, 32)
    assert image.tobytes() == ref_image.tobytes() and residuals.tobytes() == ref_residuals.tobytes()
    assert complete(outcome.output, mrd, _settings(report, outcome)) is None
    rerun = reconstruct_many([mrd], tmp_path / "out", client, **FAST)
    assert [o.status for o in rerun.outcomes] == ["skipped"]


def test_cli_run_with_a_worker_killed_mid_scan_exits_0_and_says_so(tmp_path, rng, client, cluster_pays):
    psutil = pytest.importorskip("psutil")
    scans = make_scans(tmp_path / "in", 5, rng, matrix=(40, 40), coils=2)
    killed = []
    ours = set(client.run(os.getpid).values())  # the workers of the cluster --workers 2 reuses

    def kill_the_busiest_worker():
        deadline = time.time() + 60
        while time.time() < deadline and not killed:
            workers = [psutil.Process(pid) for pid in ours]
            if len(workers) == 2 and list((tmp_path / "out").glob("*.done.json")):  # scans are under way
                before = {p.pid: sum(p.cpu_times()[:2]) for p in workers}
                time.sleep(0.2)
                busiest = max(workers, key=lambda p: sum(p.cpu_times()[:2]) - before[p.pid])
                busiest.send_signal(signal.SIGKILL)
                killed.append(busiest.pid)
            time.sleep(0.02)

    killer = threading.Thread(target=kill_the_busiest_worker)
    killer.start()
    result = CliRunner().invoke(main, ["reconstruct", *map(str, scans), "-o", str(tmp_path / "out"), "--workers",
                                       "2", "--iterations", "30", "--tol", "0", "--method", "exact", "--device",
                                       "cpu", "--no-cache"])
    killer.join()
    assert killed, "no worker was killed"
    assert result.exit_code == 0, result.output
    assert "5 scan(s): 5 done, 0 skipped (complete), 0 failed" in result.output
    assert "rescheduled: a worker holding it died (1x)" in result.output
    for scan in scans:
        output = tmp_path / "out" / f"{scan.stem}.recon.h5"
        with h5py.File(output) as f:
            assert f["image"].shape == (40, 40)
        settings = json.loads(record_path(output).read_text())["settings"]
        assert complete(output, scan, settings) is None  # recorded, and the checksum matches
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]
    rerun = CliRunner().invoke(main, ["reconstruct", str(tmp_path / "in"), "-o", str(tmp_path / "out"),
                                      "--iterations", "30", "--tol", "0", "--method", "exact", "--device", "cpu"])
    assert rerun.exit_code == 0 and "5 skipped (complete)" in rerun.output, rerun.output


def test_local_workers_get_their_thread_share_over_the_callers_settings(monkeypatch):
    from mri_recon.arrays.backend import THREADS_ENV
    from mri_recon.batch.cluster import start_local

    pytest.importorskip("cryptography")
    monkeypatch.setenv(THREADS_ENV, "2")  # the caller's own: a nanny would take these over its configuration
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    cluster = start_local(2, "cpu")
    try:
        seen = list(cluster.client.run(lambda: (os.environ.get(THREADS_ENV), os.environ.get("OMP_NUM_THREADS"),
                                                os.environ.get("OPENBLAS_NUM_THREADS"))).values())
    finally:
        cluster.close()
    assert seen == [("1", "1", "1")] * 2  # 2 threads shared by 2 workers
    assert os.environ[THREADS_ENV] == "2" and os.environ["OMP_NUM_THREADS"] == "7"  # the caller's are back
