"""Per-frame latency of ``mri-recon serve --spokes-per-frame S`` for a streamed time series.

One continuous golden-angle acquisition of F x S spokes (matrix N x N, C coils, one MRD image) is streamed
to a server started as its own process with ``--spokes-per-frame S``, the spokes paced at ``--tr-ms`` (0: as
fast as the socket takes them). The server cuts the stream into frames of S consecutive spokes and
reconstructs each as soon as its S-th spoke arrives; the latency is measured by the client (a frame's last
spoke sent to its image received) and read from the server's log (last spoke received to image sent; of that,
the wait for the device and the reconstruction, each reported apart). The first frame is reported apart.
``--warmup N`` (default 1) streams the scan N times first, untimed and unpaced,
so that the timed stream finds the server's kernels compiled and its plans made. JSON on stdout (or ``--json``).

    python scripts/server_frames.py --matrix 128 --coils 8 --spokes 21 --frames 20 --device gpu
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchtools import start_server, write_report  # noqa: E402

from mri_recon.io.ismrmrd_write import write_ismrmrd  # noqa: E402
from mri_recon.server.client import Reply, read_scan, receive  # noqa: E402
from mri_recon.server.protocol import MessageWriter  # noqa: E402
from mri_recon.sim.simulate import simulate_scan  # noqa: E402


def stream_paced(port: int, xml: bytes, acquisitions: list, tr_s: float, spokes_per_frame: int) -> Reply:
    """Send the scan, ``tr_s`` between imaging spokes; the client's clock starts at each frame's last spoke
    (keyed as the server's image: repetition = frame number)."""
    import socket
    import threading

    reply, sent = Reply(), {}
    conn = socket.create_connection(("127.0.0.1", port), timeout=600)
    receiver = threading.Thread(target=lambda: receive(conn.makefile("rb"), reply, sent))
    receiver.start()
    out = conn.makefile("wb")
    writer = MessageWriter(out)
    out.write((3).to_bytes(2, "little") + len(xml).to_bytes(4, "little") + xml)
    import ismrmrd

    spokes = 0
    for acq in acquisitions:
        noise = acq.is_flag_set(ismrmrd.ACQ_IS_NOISE_MEASUREMENT)
        key = (acq.idx.slice, acq.idx.contrast, acq.idx.phase, acq.idx.set, spokes // spokes_per_frame)
        writer.send(acq)
        if not noise:
            spokes += 1
            if spokes % spokes_per_frame == 0:
                sent[key] = time.perf_counter()
            if tr_s:
                time.sleep(tr_s)
    writer.close()
    receiver.join()
    conn.close()
    return reply


def summary(values: list[float]) -> dict:
    a = np.asarray(values, float)
    return {"first_ms": float(a[0]), "p50_ms": float(np.percentile(a[1:], 50)),
            "p99_ms": float(np.percentile(a[1:], 99)), "max_ms": float(a[1:].max())} if a.size > 1 else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", type=int, default=128)
    parser.add_argument("--coils", type=int, default=8)
    parser.add_argument("--spokes", type=int, default=21)
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--tr-ms", type=float, default=0.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed streams of the same scan first, unpaced (the server's first builds its plans "
                             "and compiles its kernels)")
    parser.add_argument("serve_options", nargs="*", help="Options for serve after --, e.g. -- --iterations 10")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        scan = simulate_scan((args.matrix, args.matrix), "golden", coils=args.coils, snr=30.0,
                             spokes=args.spokes * args.frames, samples=2 * args.matrix, seed=0)
        write_ismrmrd(tmp / "series.mrd.h5", [({"repetition": 0}, scan)])
        xml, acquisitions = read_scan(tmp / "series.mrd.h5")
        server, port = start_server(tmp / "server.log", args.device, "--spokes-per-frame", str(args.spokes),
                                    *args.serve_options)
        try:
            for _ in range(args.warmup):
                stream_paced(port, xml, acquisitions, 0.0, args.spokes)
            reply = stream_paced(port, xml, acquisitions, args.tr_ms / 1e3, args.spokes)
        finally:
            server.terminate()
            server.wait(60)
        log_text = (tmp / "server.log").read_text()
        logged = [float(m) for m in re.findall(r"sent ([\d.]+) ms after its last acquisition", log_text)]
        parts = [(float(w), float(r)) for w, r in
                 re.findall(r"device wait ([\d.]+) ms, reconstruction ([\d.]+) ms", log_text)]
        timed = len(reply.images)  # the timed stream's frames are the log's last
        logged = logged[len(logged) - timed:] if timed else []
        parts = parts[len(parts) - timed:] if timed else []
    report = {"matrix": args.matrix, "coils": args.coils, "spokes_per_frame": args.spokes, "frames": args.frames,
              "tr_ms": args.tr_ms, "warmup_streams": args.warmup, "device": args.device,
              "serve_options": args.serve_options,
              "images": len(reply.images), "repetitions": [int(im.repetition) for im in reply.images],
              "errors": reply.errors,
              "client_latency": summary(reply.latencies_ms), "server_latency": summary(logged),
              "server_device_wait": summary([w for w, _ in parts]),
              "server_reconstruction": summary([r for _, r in parts])}
    write_report(report, args.json)


if __name__ == "__main__":
    main()
