"""A local cluster of a batch admits only holders of its certificate, listens on loopback only, serves no
dashboard unless asked, is reused by later batches of this process, and a tls:// scheduler is reached with the
user's certificate files."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request

import pytest
from test_batch import FAST, make_scans

from mri_recon.batch import predict, reconstruct_many
from mri_recon.batch.cluster import kept_local, shared_local

distributed = pytest.importorskip("distributed")
pytest.importorskip("cryptography")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    """This process's local cluster of two CPU workers (as ``reconstruct_many(workers=2)`` starts it); closed
    at exit, shared with the other test modules that ask for the same (one of which kills a worker: its nanny
    starts another, waited for here)."""
    kept = shared_local(2, "cpu")
    kept.client.wait_for_workers(2, timeout=120)
    return kept


def _host_port(address: str) -> tuple[str, int]:
    host, port = address.split("://")[1].rsplit(":", 1)
    return host, int(port)


def _plain_tcp_reply(host: str, port: int) -> bytes:
    """The first byte the scheduler sends back to a client that speaks plain TCP (as ``tcp://`` would): a
    scheduler that took plain connections would answer with a Dask frame instead."""
    with socket.create_connection((host, port), timeout=5) as raw:
        raw.sendall(b"\x00" * 64)  # a plain Dask frame header, no TLS handshake
        try:
            return raw.recv(1)
        except ConnectionResetError:
            return b""


def test_a_local_cluster_refuses_connections_without_its_certificate(cluster):
    address = cluster.client.scheduler.address
    assert address.startswith("tls://127.0.0.1:")
    assert cluster.client.submit(sum, [1, 2], pure=False).result() == 3  # its own certificate is admitted
    with pytest.raises(Exception):  # noqa: B017 - no credentials: no TLS context at all
        distributed.Client(address, timeout="3s")
    with pytest.raises(OSError):  # another certificate: the handshake fails
        distributed.Client(address, timeout="3s", security=distributed.security.Security.temporary())
    host, port = _host_port(address)
    assert _plain_tcp_reply(host, port) in (b"", b"\x15")  # plain TCP: closed, or a TLS alert record
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # a client that trusts anything
    with socket.create_connection((host, port), timeout=5) as raw, pytest.raises((ssl.SSLError, OSError)):
        with context.wrap_socket(raw) as tls:  # without a client certificate the server ends the handshake
            tls.sendall(b"x" * 64)
            assert tls.recv(1) == b""  # (TLS 1.3 reports the refusal on the first read)
            raise ConnectionResetError("closed without a word")


def test_nothing_listens_beyond_loopback_and_no_dashboard_is_served(cluster):
    psutil = pytest.importorskip("psutil")
    info = cluster.client.scheduler_info()
    workers = list(info["workers"])
    assert len(workers) == 2 and all(w.startswith("tls://127.0.0.1:") for w in workers)
    me = psutil.Process()
    pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
    listening = [c.laddr for pid in pids for c in psutil.Process(pid).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert len(listening) >= 3 + 2 * 2  # scheduler, its HTTP server and more; per worker: nanny, worker, HTTP
    assert {a.ip for a in listening} == {"127.0.0.1"}, listening
    assert cluster.dashboard is None
    http = info["services"]["dashboard"]
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"http://127.0.0.1:{http}/info/main/workers.html", timeout=5)


def test_two_batches_reuse_one_local_cluster(cluster, tmp_path, rng, monkeypatch):
    monkeypatch.setattr(predict, "CLUSTER_START_S", 0.0)  # small scans: the cluster pays for itself
    pids = set(cluster.client.run(lambda: __import__("os").getpid()).values())
    scans = make_scans(tmp_path / "in", 2, rng)
    first = reconstruct_many(scans, tmp_path / "a", workers=2, **FAST)
    second = reconstruct_many(scans, tmp_path / "b", workers=2, **FAST)
    assert first.ok and second.ok and first.where == second.where == cluster.kind
    assert kept_local(2, "cpu") is cluster and cluster.client.status == "running"
    ran = {int(o.worker.rsplit(":", 1)[1]) for r in (first, second) for o in r.outcomes}
    assert ran <= pids  # the same worker processes, not a new cluster's


def test_a_tls_scheduler_is_reached_with_the_users_certificate_files(cluster, tmp_path, rng):
    from click.testing import CliRunner

    from mri_recon.cli import main

    security = cluster.client.security  # the cluster's certificate: what its user would hold as files
    files = {}
    for name, pem in (("ca", security.tls_ca_file), ("cert", security.tls_client_cert),
                      ("key", security.tls_client_key)):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text(pem)
    scans = make_scans(tmp_path / "in", 2, rng)
    address = cluster.client.scheduler.address
    result = CliRunner().invoke(main, ["reconstruct", *map(str, scans), "-o", str(tmp_path / "out"),
                                       "--scheduler", address, "--tls-ca-file", str(files["ca"]), "--tls-cert",
                                       str(files["cert"]), "--tls-key", str(files["key"]), "--iterations", "4",
                                       "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert f"scheduler {address}, 2 worker(s)" in result.output and "dashboard" not in result.output
    assert "2 scan(s): 2 done" in result.output
    files["cert"].write_text(distributed.security.Security.temporary().tls_client_cert)  # not the cluster's
    refused = CliRunner().invoke(main, ["reconstruct", *map(str, scans), "-o", str(tmp_path / "out2"),
                                        "--scheduler", address, "--tls-ca-file", str(files["ca"]), "--tls-cert",
                                        str(files["cert"]), "--tls-key", str(files["key"]), "--device", "cpu"])
    assert refused.exit_code == 1 and "cannot reach the Dask scheduler" in refused.output, refused.output


def test_pinned_gpu_nannies_get_the_same_tls_and_loopback(monkeypatch):
    """The SpecCluster of pinned nannies (GPU workers without dask-cuda), started here on the CPU with one
    'GPU' (its worker only sees CUDA_VISIBLE_DEVICES=0)."""
    psutil = pytest.importorskip("psutil")
    from mri_recon.batch import cluster as cluster_module
    from mri_recon.batch.cluster import _pinned_cluster, local_config
    from mri_recon.batch.security import local_security

    monkeypatch.setattr(cluster_module, "GPU_AFFINITY", False)  # no GPU here to move next to
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with local_config(dashboard=False):
        spec = _pinned_cluster(distributed, ["0"], local_security())
    try:
        with distributed.Client(spec) as client:
            address = client.scheduler.address
            workers = list(client.scheduler_info()["workers"])
            seen = list(client.run(lambda: __import__("os").environ.get("CUDA_VISIBLE_DEVICES")).values())
            with pytest.raises(OSError):
                distributed.Client(address, timeout="3s", security=distributed.security.Security.temporary())
            me = psutil.Process()
            pids = {me.pid} | ({p.pid for p in me.children(recursive=True)} - before)
            listening = {c.laddr.ip for pid in pids for c in psutil.Process(pid).net_connections(kind="inet")
                         if c.status == psutil.CONN_LISTEN}
    finally:
        spec.close()
    assert address.startswith("tls://127.0.0.1:") and workers[0].startswith("tls://127.0.0.1:")
    assert seen == ["0"] and listening == {"127.0.0.1"}
