"""The MRD streaming server on loopback: images equal to ``mri-recon reconstruct`` of the same file, config
messages, several clients at once, a client that leaves mid-scan, idle and busy limits, and shutdown."""

from __future__ import annotations

import io
import logging
import socket
import threading
import time

import ismrmrd
import numpy as np
import pytest
from click.testing import CliRunner
from server_helpers import assert_same_images, image_of, make_scan, read_images, reference, running_server

from mri_recon.cli import main
from mri_recon.server.client import Reply, config_messages, read_scan, receive, send_scan, stream_scan
from mri_recon.server.config import ALLOWED, configured
from mri_recon.server.protocol import MessageID, MessageWriter
from mri_recon.server.service import is_loopback
from mri_recon.settings import ReconSettings
from mri_recon.solvers.regularizers import names


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("server")
    seed = int(np.random.SeedSequence().entropy % 2 ** 20)
    return tmp, [make_scan(tmp / f"scan{i}.mrd.h5", seed + 7 * i, slices=2 if i == 0 else 1) for i in range(3)]


@pytest.fixture(scope="module")
def server():
    with running_server() as srv:
        yield srv


def test_images_equal_reconstruct_of_the_file(server, files):
    tmp, scans = files
    xml, reply = send_scan(scans[0], *server.address)
    assert reply.closed and not reply.texts
    assert [im.slice for im in reply.images] == [0, 1]
    assert_same_images(reply.images, reference(scans[0], tmp))
    assert xml == read_scan(scans[0])[0]
    assert len(reply.latencies_ms) == 2 and min(reply.latencies_ms) > 0


def test_send_command_writes_the_file_reconstruct_writes(server, files):
    tmp, scans = files
    host, port = server.address
    out = tmp / "sent.mrd.h5"
    result = CliRunner().invoke(main, ["send", str(scans[1]), "--host", host, "--port", str(port), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 image(s)" in result.output
    assert_same_images(read_images(out), reference(scans[1], tmp))


def test_config_preset_and_json_settings(server, files):
    tmp, scans = files
    _, fast = send_scan(scans[1], *server.address, config="fast")
    assert_same_images(fast.images, reference(scans[1], tmp, "--iterations", "10"))
    _, named = send_scan(scans[1], *server.address, config="fast.xml")  # a Gadgetron client's file name
    assert_same_images(named.images, reference(scans[1], tmp, "--iterations", "10"))
    _, tv = send_scan(scans[1], *server.address, settings='{"regularizer": "tv", "iterations": 3, "lambda": 0.01}')
    assert_same_images(tv.images, reference(scans[1], tmp, "--regularizer", "tv", "--iterations", "3",
                                            "--lambda", "0.01"))
    _, both = send_scan(scans[1], *server.address, settings='{"preset": "magnitude", "coil-maps": "rss"}')
    assert both.images[0].data.dtype == np.float32
    assert_same_images(both.images, reference(scans[1], tmp, "--magnitude", "--coil-maps", "rss"))


def test_text_and_waveforms_from_the_client_are_ignored(server, files):
    tmp, scans = files
    xml, acquisitions = read_scan(scans[1])
    wave = ismrmrd.Waveform.from_array(np.arange(12, dtype=np.uint32).reshape(2, 6))
    stream = io.BytesIO()
    writer = MessageWriter(stream)
    for message in (ismrmrd.serialization.ConfigFile("default"), ismrmrd.xsd.CreateFromDocument(xml),
                    '{"parameters": {"config": "invertcontrast"}}', wave, *acquisitions):
        writer.send(message)  # the header re-serialized by ismrmrd, as its ProtocolSerializer sends one
    writer.close()
    with _connect(server) as conn:
        conn.sendall(stream.getvalue())
        reply = _reply_of(conn)
    assert reply.closed and not reply.texts
    assert_same_images(reply.images, reference(scans[1], tmp))


def test_send_says_when_no_server_listens(files):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = CliRunner().invoke(main, ["send", str(files[1][1]), "--port", str(port), "-o",
                                       str(files[0] / "none.mrd.h5")])
    assert result.exit_code == 1 and f"cannot connect to 127.0.0.1:{port}" in result.output
    assert not (files[0] / "none.mrd.h5").exists()


@pytest.mark.parametrize(("config", "settings", "expected"), [
    ("invertcontrast", None, "unknown config 'invertcontrast'"),
    (None, '{"cache_dir": "/etc"}', "unexpected keyword argument 'cache_dir'; valid: iterations, lambda, regularizer"),
    (None, '{"device": "gpu"}', "unexpected keyword argument 'device'; valid: iterations, lambda, regularizer"),
    (None, '{"iters": 5}', "unexpected keyword argument 'iters' (did you mean 'iterations'?)"),
    (None, '{"iterations": 0}', "iterations must be a whole number >= 1 and <= 10000, found 0"),
    (None, '{"regularizer": "l7"}', f"regularizer must be one of {', '.join(names())}, found 'l7'"),
    (None, '{"iterations": [1, 2]}', "expected a number, text or true/false"),
    (None, "<gadgetron/>", "CONFIG_TEXT is not JSON"),
    (None, "[" * 100_000, "CONFIG_TEXT nests its JSON too deeply"),
    (None, '{"gradient_delay": "1e300,1e300"}', "out of range: a delay is at most 16 samples"),
], ids=["preset", "path", "device", "misspelled", "range", "choice", "type", "xml", "nested", "delay"])
def test_config_refused_with_its_reason(server, files, config, settings, expected):
    _, reply = send_scan(files[1][1], *server.address, config=config, settings=settings)
    assert not reply.images and reply.closed
    assert len(reply.errors) == 1 and expected in reply.errors[0], reply.errors


def test_gradient_delay_given_or_estimated_per_image_group(server, files):
    tmp, scans = files
    _, given = send_scan(scans[0], *server.address, settings='{"gradient_delay": "0.5,-0.3"}')
    assert_same_images(given.images, reference(scans[0], tmp, "--gradient-delay", "0.5,-0.3"))
    _, estimated = send_scan(scans[0], *server.address, settings='{"gradient-delay": "ring"}')
    assert len(estimated.images) == 2 and not estimated.errors
    for s, image in enumerate(estimated.images):  # each group's own estimate: the file's image s alone
        (want,) = reference(scans[0], tmp, "--gradient-delay", "ring", "--slice", str(s))
        assert image.slice == want.slice == s and image.data.tobytes() == want.data.tobytes()


def test_client_settings_change_the_servers_own_in_order():
    base = ReconSettings(prewhiten=False, iterations=12, device="cpu", cache_dir="/srv/cache")
    got = configured(base, [("file", "tv"), ("text", '{"no_prewhiten": false, "no-field-map": true, "lambda": 0.02}'),
                            ("text", '{"regularizer": "wavelet", "preset": "fast"}')])
    assert got == base.replace(prewhiten=True, field_map="ignore", lam=0.02, regularizer="wavelet", iterations=10)
    assert configured(base, []) == base


def test_client_names_are_the_options_of_reconstruct_and_serve():
    for command in ("reconstruct", "serve"):
        options = {o for p in main.get_command(None, command).params for o in p.opts}
        assert {"--" + name.replace("_", "-") for name in ALLOWED} <= options
    assert not {"device", "cache_dir", "format", "complex", "allow_external_data", "slice"} & set(ALLOWED)


def test_concurrent_clients_get_their_own_images(server, files):
    _, scans = files
    alone = [send_scan(path, *server.address)[1].images for path in scans]
    replies: dict[int, Reply] = {}

    def client(i: int) -> None:
        replies[i] = send_scan(scans[i % 3], *server.address)[1]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(replies) == list(range(6))
    for i, reply in replies.items():
        assert_same_images(reply.images, alone[i % 3])
    assert not np.array_equal(image_of(alone[1][0]), image_of(alone[2][0]))  # the scans tell apart


def _connect(server) -> socket.socket:
    return socket.create_connection(server.address, timeout=30)


def test_client_leaving_mid_scan_frees_it_and_the_server_serves_on(server, files):
    _, scans = files
    xml, acquisitions = read_scan(scans[0])
    before = server.endings.get("disconnected", 0)
    for cut in (len(acquisitions) // 2, len(acquisitions) // 2 + 1):  # between groups and inside one
        buffer = io.BytesIO()
        stream_scan(buffer, xml, acquisitions)
        raw = buffer.getvalue()
        whole = raw[: raw.index(bytes(acquisitions[cut].getHead())) - 2]
        with _connect(server) as conn:
            conn.sendall(whole)
            threading.Event().wait(0.3)  # served (its user known) before it leaves: a socket already closed
        for _ in range(100):  # is refused, its owner no longer known
            if server.endings.get("disconnected", 0) > before:
                break
            threading.Event().wait(0.05)
        before = server.endings.get("disconnected", 0)
    assert server.endings.get("disconnected", 0) >= 2
    _, reply = send_scan(scans[1], *server.address)
    assert reply.closed and len(reply.images) == 1


def _reply_of(conn: socket.socket) -> Reply:
    reply = Reply()
    with conn.makefile("rb") as reader:
        receive(reader, reply, {})
    return reply


def test_idle_sockets_make_way_and_a_scan_in_progress_makes_others_busy(files):
    with running_server(idle_timeout=0.5, max_clients=1) as srv:
        with _connect(srv) as idle:  # config sent, no header: it gives its place to a real client
            MessageWriter(idle.makefile("wb")).send(config_messages("default")[0])
            threading.Event().wait(0.1)
            _, reply = send_scan(files[1][1], *srv.address)
            assert len(reply.images) == 1
            assert _reply_of(idle).closed
        srv.wait(10)  # the two connections' threads end (a loaded machine may still be draining them)
        with _connect(srv) as silent:  # nothing at all: closed after the header timeout
            quiet = _reply_of(silent)
        assert quiet.closed and "idle timeout" in quiet.errors[0]
        srv.wait(10)
        xml, _ = read_scan(files[1][1])
        with _connect(srv) as started:  # a header sent: a scan in progress keeps its place
            started.sendall(MessageID.HEADER.to_bytes(2, "little") + len(xml).to_bytes(4, "little") + xml)
            threading.Event().wait(0.1)
            with _connect(srv) as extra:
                busy = _reply_of(extra)
        assert busy.closed and "server busy" in busy.errors[0]


def test_sixteen_idle_sockets_do_not_starve_a_real_client(files):
    with running_server(max_clients=16, idle_timeout=30.0) as srv:
        idle = [_connect(srv) for _ in range(16)]
        try:
            threading.Event().wait(0.2)
            started = time.perf_counter()
            _, reply = send_scan(files[1][1], *srv.address)
            assert len(reply.images) == 1 and time.perf_counter() - started < 10
        finally:
            for conn in idle:
                conn.close()


def test_listening_beyond_loopback_is_warned_about(caplog):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("scanner.example")
    with running_server() as srv:
        assert srv.address[0] == "127.0.0.1"
    assert "reachable beyond this machine" not in caplog.text
    with caplog.at_level(logging.WARNING, "mri_recon.server"), running_server(host="0.0.0.0"):
        pass
    assert "listening on 0.0.0.0: reachable beyond this machine" in caplog.text


def test_stop_finishes_the_running_scan(files):
    tmp, scans = files
    xml, acquisitions = read_scan(scans[1])
    with running_server() as srv:
        conn = _connect(srv)
        out = conn.makefile("wb")
        buffer = io.BytesIO()
        stream_scan(buffer, xml, acquisitions)
        raw = buffer.getvalue()
        out.write(raw[:-2])  # everything but CLOSE
        out.flush()
        srv.stop()
        threading.Event().wait(0.3)
        with pytest.raises(ConnectionRefusedError):  # no longer accepting
            socket.create_connection(srv.address, timeout=2)
        out.write(MessageID.CLOSE.to_bytes(2, "little"))
        out.flush()
        reply = _reply_of(conn)
        conn.close()
    assert reply.closed
    assert_same_images(reply.images, reference(scans[1], tmp))
