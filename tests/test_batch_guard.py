"""A batch's guards that need no running cluster: scheduler addresses and credentials checked before any
connection, no unauthenticated local cluster, the dashboard only where it is served, a file name for -o only
with one scan, and a local cluster started only where the predicted work pays for it."""

from __future__ import annotations

import importlib.util

import h5py
import pytest
from click.testing import CliRunner
from test_batch import FAST, make_scans

from mri_recon.batch import predict as predict_module
from mri_recon.batch import reconstruct_many
from mri_recon.batch.predict import decide, scan_seconds
from mri_recon.batch.runner import plan_tasks
from mri_recon.cli import main
from mri_recon.errors import DeviceError, InvalidDataError, OutputError
from mri_recon.settings import ReconSettings

distributed = pytest.importorskip("distributed")


def _cli(*args):
    return CliRunner().invoke(main, ["reconstruct", *map(str, args)])


@pytest.mark.parametrize(("address", "why"), [
    ("foo", "expected tcp://HOST:PORT or tls://HOST:PORT"),
    ("tcp://127.0.0.1", "missing port"),
    ("http://127.0.0.1:8786", "the scheme is 'http'"),
    ("tcp://:::", "expected tcp://HOST:PORT"),
    ("tls://127.0.0.1:1", "a tls:// scheduler needs your certificate"),
], ids=["no-scheme", "no-port", "http", "malformed-host", "tls-without-credentials"])
def test_a_bad_scheduler_is_one_line_and_exit_1(tmp_path, rng, address, why):
    scans = make_scans(tmp_path / "in", 1, rng)
    result = _cli(scans[0], "-o", tmp_path / "out", "--scheduler", address, "--iterations", "2")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert why in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_an_unreachable_scheduler_is_one_line(monkeypatch):
    from mri_recon.batch import cluster
    from mri_recon.batch.cluster import connect

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", "2s")
    free = distributed.utils.open_port()  # nothing listens there
    with pytest.raises(DeviceError, match=f"cannot reach the Dask scheduler at tcp://127.0.0.1:{free}: "):
        connect(f"tcp://127.0.0.1:{free}")


def test_tls_credentials_are_complete_existing_files_for_a_tls_scheduler(tmp_path, rng):
    from mri_recon.batch.security import scheduler_security

    pem = tmp_path / "c.pem"
    pem.write_text("x")
    with pytest.raises(InvalidDataError, match="apply to a tls:// scheduler; this one is tcp://"):
        scheduler_security("tcp", ca_file=str(pem), cert=str(pem), key=str(pem))
    with pytest.raises(InvalidDataError, match="together; missing --tls-key"):
        scheduler_security("tls", ca_file=str(pem), cert=str(pem))
    with pytest.raises(InvalidDataError, match="--tls-key .*missing.pem: no such file"):
        scheduler_security("tls", ca_file=str(pem), cert=str(pem), key=str(tmp_path / "missing.pem"))
    scans = make_scans(tmp_path / "in", 1, rng)
    result = _cli(scans[0], "--tls-cert", pem)
    assert result.exit_code == 2 and "--tls-cert apply to a tls:// --scheduler" in result.output, result.output
    result = _cli(scans[0], "--dashboard")
    assert result.exit_code == 2 and "--dashboard serves a local cluster's dashboard" in result.output


def test_no_local_cluster_starts_without_a_certificate(monkeypatch):
    from mri_recon.batch import security
    from mri_recon.batch.cluster import start_local

    real = importlib.util.find_spec
    monkeypatch.setattr(security.importlib.util, "find_spec",
                        lambda name, *a: None if name == "cryptography" else real(name, *a))
    with pytest.raises(DeviceError, match="needs the 'cryptography' package, which is not installed"):
        start_local(2, "cpu")


@pytest.mark.skipif(importlib.util.find_spec("bokeh") is not None, reason="bokeh is installed")
def test_a_dashboard_without_bokeh_is_refused_not_announced(tmp_path, rng):
    scans = make_scans(tmp_path / "in", 2, rng)
    result = _cli(*scans, "-o", tmp_path / "out", "--workers", "2", "--dashboard", "--device", "cpu")
    assert result.exit_code == 1 and "need the 'bokeh' package, which is not installed: pip install bokeh" \
        in result.output, result.output
    assert "http" not in result.output


def test_a_file_name_for_several_outputs_is_refused_and_one_scan_writes_it(tmp_path, rng):
    scans = make_scans(tmp_path / "in", 2, rng)
    for name in ("one.h5", "one.nii.gz"):
        result = _cli(*scans, "-o", tmp_path / name, "--workers", "2", "--iterations", "2", "--device", "cpu")
        assert result.exit_code == 1 and f"{name} names one output file, and the batch has 2 scans" \
            in result.output, result.output
        assert not (tmp_path / name).exists()
    with pytest.raises(OutputError, match="names one output file"):
        plan_tasks(scans, tmp_path / "x.H5", ReconSettings())
    result = _cli(scans[0], "-o", tmp_path / "one.h5", "--workers", "2", "--iterations", "2", "--device", "cpu")
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "one.h5") as f:
        assert f["image"].shape == (32, 32)
    (tmp_path / "dir.h5").mkdir()  # an existing folder stays a folder of outputs
    assert [t.output.parent for t in plan_tasks(scans, tmp_path / "dir.h5", ReconSettings())[0]] == \
        [tmp_path / "dir.h5"] * 2


def test_the_predicted_work_of_a_scan_grows_with_its_size_and_iterations(tmp_path, rng):
    small, large = make_scans(tmp_path / "s", 1, rng) + make_scans(tmp_path / "l", 1, rng, matrix=(64, 64),
                                                                   coils=4)
    (s_task,), (l_task,) = (plan_tasks([p], None, ReconSettings(iterations=10))[0] for p in (small, large))
    assert 0 < scan_seconds(s_task, gpu=False) < scan_seconds(l_task, gpu=False)
    (more,) = plan_tasks([small], None, ReconSettings(iterations=40))[0]
    assert scan_seconds(more, gpu=False) > scan_seconds(s_task, gpu=False)
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not hdf5")
    (b_task,) = plan_tasks([bad], None, ReconSettings())[0]
    assert scan_seconds(b_task, gpu=False) == 0.0  # no reader takes it: it fails at once, it has no work


def test_a_cluster_starts_only_where_the_predicted_work_pays_for_it(tmp_path, rng, monkeypatch, caplog):
    scans = make_scans(tmp_path / "in", 4, rng)
    tasks = plan_tasks(scans, tmp_path / "o", ReconSettings(**FAST))[0]
    work = sum(scan_seconds(t, gpu=False) for t in tasks)
    assert not decide(tasks, 2, False, start_s=work / 2 * 1.01).start
    assert decide(tasks, 2, False, start_s=work / 2 * 0.99).start
    assert not decide(tasks, 1, False, start_s=0).start  # one worker runs them one at a time, as here
    assert not decide(tasks[:1], 4, False, start_s=0).start
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"x")
    unreadable = decide(plan_tasks([bad], None, ReconSettings())[0] + tasks, 2, False, start_s=work)
    assert not unreadable.start and "predicted work" in unreadable.reason  # an unreadable file has no work
    from mri_recon.io.ismrmrd_write import write_ismrmrd
    from mri_recon.sim.simulate import simulate_scan

    mrd = tmp_path / "m.mrd.h5"
    write_ismrmrd(mrd, simulate_scan((16, 16), "golden", coils=1, spokes=10))
    unknown = decide(plan_tasks([mrd], None, ReconSettings())[0] + tasks, 2, False)
    assert unknown.start and "m.mrd.h5 cannot be predicted" in unknown.reason
    # through the library and the CLI: small scans run here, and the log and the summary say why
    monkeypatch.setattr(predict_module, "CLUSTER_START_S", work)
    with caplog.at_level("INFO", logger="mri_recon.batch.runner"):
        report = reconstruct_many(scans, tmp_path / "out", workers=2, **FAST)
    assert report.ok and report.where.startswith("this process (predicted work") and report.dashboard is None
    assert "local cluster of 2 worker(s) not started: predicted work" in caplog.text
    assert {o.worker for o in report.outcomes} == {report.outcomes[0].worker}  # one process: this one
    result = _cli(*scans, "-o", tmp_path / "cli", "--workers", "2", "--device", "cpu", "--iterations", "6")
    assert result.exit_code == 0, result.output
    assert "less than a cluster's start-up" in result.output and "dashboard" not in result.output
